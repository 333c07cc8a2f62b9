"""Checks that run before anything touches the system (``incastlab preflight``).

Each failure is one sentence saying what is wrong and how to fix it. Capabilities
(datapath, netem, congestion controls) are detected, never assumed, and recorded in
the run's manifest.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import socket
import subprocess

from incastlab import congestion, ovs_buffer
from incastlab.state import process_start_time

REQUIRED_TOOLS = {
    "ovs-vsctl": "openvswitch-switch", "ovs-ofctl": "openvswitch-switch",
    "mnexec": "mininet", "tcpdump": "tcpdump", "iperf3": "iperf3",
    "ethtool": "ethtool", "tc": "iproute2", "ip": "iproute2", "nstat": "iproute2",
    "ping": "iputils-ping",
}
OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"


class PreflightError(RuntimeError):
    """One or more checks failed; the message has one sentence per failure."""


@dataclasses.dataclass
class Capabilities:
    datapath: str                 # "kernel" or "user"
    netem: bool
    congestion_controls: list[str]
    ovs_version: str
    notices: list[str]
    # userspace datapath: bytes of ovs-vswitchd's packet send buffer, the limit of all
    # switch queues together (incastlab.ovs_buffer), and where that figure came from
    ovs_send_buffer: int | None = None
    ovs_send_buffer_source: str | None = None
    # which DCTCP topology.congestion_control = "dctcp" would run (incastlab.congestion)
    dctcp: str | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _quiet(argv: list[str], timeout: float = 10) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def ovs_answering() -> bool:
    try:
        return _quiet(["ovs-vsctl", "--timeout=3", "show"]).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_ovs() -> str:
    """Start Open vSwitch: systemd where it runs, ovs-ctl where there is no init system."""
    if os.path.isdir("/run/systemd/system") and shutil.which("systemctl"):
        _quiet(["systemctl", "start", "openvswitch-switch"], timeout=60)
        how = "systemctl start openvswitch-switch"
    else:
        _quiet([OVS_CTL, "start", "--system-id=random", "--no-monitor"], timeout=60)
        how = f"{OVS_CTL} start"
    return how


def kernel_datapath_usable() -> bool:
    """True when the openvswitch kernel module is loaded (or loads)."""
    if os.path.isdir("/sys/module/openvswitch"):
        return True
    if shutil.which("modprobe"):
        try:
            _quiet(["modprobe", "-q", "openvswitch"])
        except (OSError, subprocess.TimeoutExpired):
            pass
    return os.path.isdir("/sys/module/openvswitch")


PROBE_NETNS_PREFIX = "incastlab-probe-"
_probe_counter = itertools.count()


def probe_netns_name(pid: int, start: int | None, n: int) -> str:
    """The n-th probe namespace of process ``pid`` (started at ``start`` clock ticks):
    the name says whose it is, so clean-up can remove one whose creator died mid-probe,
    and n keeps one that failed to go away from blocking the same process's next probe."""
    return f"{PROBE_NETNS_PREFIX}{pid}-{start}-{n}"


def netem_available() -> bool:
    """Probe netem on a veth inside a throwaway namespace of our own (veth, because
    Mininet needs it anyway; some kernels here lack the dummy driver)."""
    ns = probe_netns_name(os.getpid(), process_start_time(os.getpid()), next(_probe_counter))
    if _quiet(["ip", "netns", "add", ns]).returncode != 0:
        return False
    try:
        ok = _quiet(["ip", "netns", "exec", ns, "ip", "link", "add", "probe0", "type",
                     "veth", "peer", "name", "probe1"]).returncode == 0
        return ok and _quiet(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "probe0",
                              "root", "netem", "delay", "1ms"]).returncode == 0
    finally:
        _quiet(["ip", "netns", "delete", ns])


def congestion_controls() -> list[str]:
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return f.read().split()
    except OSError:
        return []


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def run_preflight(controller_port: int | None = 6653, need_netem: bool = False,
                  congestion_control: str | list[str] | None = None,
                  start_ovs_if_down: bool = True, lock=None) -> Capabilities:
    """Check everything a fabric needs; raise PreflightError listing every failure.

    controller_port: TCP port the controller will listen on (127.0.0.1), or None.
    need_netem: a delay was asked for. lock: a RunLock to test (see incastlab.lock).
    """
    problems: list[str] = []
    notices: list[str] = []
    if os.geteuid() != 0:
        raise PreflightError("incastlab needs root to build networks: run it with sudo.")
    for tool, package in REQUIRED_TOOLS.items():
        if shutil.which(tool) is None:
            problems.append(f"{tool} is not installed: run scripts/install.sh "
                            f"(or apt-get install {package}).")
    if shutil.which("ovs-vsctl") and not ovs_answering():
        if start_ovs_if_down:
            how = start_ovs()
            if ovs_answering():
                notices.append(f"Open vSwitch was not running; started it ({how}).")
        if not ovs_answering():
            problems.append(f"Open vSwitch does not answer: start it with `{OVS_CTL} start "
                            "--system-id=random` (or `systemctl start openvswitch-switch`).")
    datapath = "kernel" if kernel_datapath_usable() else "user"
    if datapath == "user":
        notices.append("No openvswitch kernel module: using the userspace datapath "
                       "(datapath_type=netdev); keep link rates in tens of Mbit/s.")
    netem = netem_available() if shutil.which("ip") else False
    if need_netem and not netem:
        problems.append("A link delay was asked for but this kernel has no netem "
                        "(sch_netem): remove topology.delay or use a kernel with netem.")
    ccs = congestion_controls()
    bpf_problem = congestion.bpf_dctcp_problem()
    # a sweep lists several values: each must be runnable here
    for name in ([congestion_control] if isinstance(congestion_control, str)
                 else congestion_control or []):
        try:
            congestion.resolve(name, ccs, bpf_problem)
        except congestion.CongestionUnavailable as exc:
            problems.append(str(exc))
    if controller_port is not None and not port_free(controller_port):
        problems.append(f"Controller port 127.0.0.1:{controller_port} is in use: stop what "
                        "listens there or choose another port.")
    if lock is not None:
        holder = lock.holder()
        if holder:
            problems.append(f"Another incastlab run holds the lock ({holder}); wait for it "
                            "or, if it died, run `incastlab clean`.")
    if problems:
        raise PreflightError("\n".join(problems))
    version = _quiet(["ovs-vsctl", "--version"]).stdout.splitlines()
    buffer, source = ovs_buffer.send_buffer() if datapath == "user" else (None, None)
    if datapath == "user" and buffer is None:
        notices.append(f"Open vSwitch's send buffer is unknown ({source}): switch queues "
                       "may hold fewer packets than configured, dropping where tc does "
                       "not count (see incastlab/ovs_buffer.py).")
    receive = ovs_buffer.receive_buffer() if datapath == "user" else None
    if receive is not None and receive < ovs_buffer.INSTALL_RECEIVE_BYTES:
        notices.append(f"net.core.rmem_default is {receive:,} bytes: while ovs-vswitchd "
                       "catches up, a switch port's receive socket may drop packets no "
                       "counter sees (scripts/install.sh sets "
                       f"{ovs_buffer.INSTALL_RECEIVE_BYTES:,}).")
    return Capabilities(datapath=datapath, netem=netem, congestion_controls=ccs,
                        ovs_version=version[0].split()[-1] if version else "unknown",
                        notices=notices, ovs_send_buffer=buffer,
                        ovs_send_buffer_source=source if buffer is not None else None,
                        dctcp=congestion.describe_dctcp(ccs, bpf_problem))
