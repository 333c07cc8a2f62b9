"""Bring a fabric to life and always take it down again.

    with Fabric(LeafSpineTopo(2, 2, 2), policy="single", run_dir=path) as fab:
        fab.net["h1"].cmd("ping -c1 10.0.2.1")

``__enter__`` runs preflight, takes the one-run lock, records every name it is about
to create (incastlab.state), starts the controller (its own process group, 127.0.0.1
only), builds and starts Mininet, sets each host's TCP congestion control, and then
waits — polling with a deadline — until every switch is connected, the controller says
its rules are installed, and every host pair answers a ping. ``__exit__`` tears it all
down on normal exit, exceptions, SIGINT and SIGTERM; teardown is safe to call twice.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import RemoteController, Switch

from incastlab import congestion
from incastlab.clean import clean, clean_state
from incastlab.controller.registry import (DEFAULT_EXTERNAL, POLICIES, OptionError,
                                           parse_controller)
from incastlab.fabric_watch import (STORM_PPS_FLOOR, FabricError, StormWatch, ovsdb_rows,
                                    storm_limit_pps, uuids)
from incastlab.ecn import EcnMarker, EcnMarking
from incastlab.pathlabel import PathLabeller, PathLabelling, for_policy
from incastlab.lock import RunLock
from incastlab.preflight import Capabilities, PreflightError, run_preflight
from incastlab.state import RunState
from incastlab import ovs_buffer, subnet_guard
from incastlab.topologies.fabricmap import FabricMap
from incastlab.topologies.leafspine import fabric_map
from incastlab.topologies.links import QueuedLink, QueuedOVSSwitch
from incastlab.topologies.runformat import CONTROLLER_READY

DEFAULT_CONTROLLER_PORT = 6653
LOCALHOST = "127.0.0.1"  # our controller listens here only
EXTERNAL_CHECK_S = 2.0   # policy external: seconds between checks that switches stay connected
ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")

__all__ = ["ALLOWED_CC", "DEFAULT_CONTROLLER_PORT", "EXTERNAL_CHECK_S", "LOCALHOST",
           "STORM_PPS_FLOOR", "Fabric", "FabricError", "QuietRemoteController", "StormWatch",
           "Terminated", "external_controller", "storm_limit_pps"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception so that every ``finally`` runs."""


class QuietRemoteController(RemoteController):
    """Mininet's RemoteController probes the port with telnet; we wait for readiness
    ourselves (controller_ready.json), so skip that probe."""

    def checkListening(self):
        return True


def _raise_terminated(signum, _frame):
    raise Terminated(f"signal {signum}")


class Fabric:
    """A running leaf–spine (or star) fabric with its controller.

    topo: a LeafSpineTopo/StarTopo. policy: routing policy name (controller registry).
    run_dir: where fabric.json, controller.log and the controller's CSVs go (a
    temporary directory is made if None). congestion_control: every host's TCP CC;
    slow_start_after_idle: every host's net.ipv4.tcp_slow_start_after_idle (True: the
    kernel's default: a connection idle for longer than its RTO has its window halved per
    RTO of the pause, down to the initial window).
    ready_timeout: seconds allowed for switches, routes and reachability.
    capabilities: the result of a preflight the caller has just run (the runner's
    check_ready); without it the fabric runs its own. ecn_marking: mark CE at every
    switch egress queue above a threshold (incastlab.ecn), None for no marking.
    flowlet_gap_us: policy flowlet's gap (default: the fabric's base RTT); the policies
    spray and flowlet get their hosts' path labeller (incastlab.pathlabel).
    """

    def __init__(self, topo, policy: str = "single", run_dir: str | os.PathLike | None = None,
                 controller_port: int = DEFAULT_CONTROLLER_PORT,
                 congestion_control: str = "cubic", policy_args: list[str] | None = None,
                 ready_timeout: float = 60.0, check_reachability: bool = True,
                 capabilities: Capabilities | None = None,
                 slow_start_after_idle: bool = True,
                 ecn_marking: EcnMarking | None = None,
                 flowlet_gap_us: int | None = None):
        self.topo = topo
        self.policy = policy
        self.run_dir = Path(run_dir) if run_dir else None
        self.controller_port = controller_port
        self.congestion_control = congestion_control
        self.slow_start_after_idle = slow_start_after_idle
        self.policy_args = list(policy_args or [])
        # policy external: the switches connect to the user's controller as well as to
        # ours, which then only observes (slave role; see controller/observer.py)
        self.external: tuple[str, int] | None = external_controller(policy, self.policy_args)
        self.ready_timeout = ready_timeout
        self.check_reachability = check_reachability
        self.capabilities: Capabilities | None = capabilities
        self.net: Mininet | None = None
        self.controller: subprocess.Popen | None = None
        self.state: RunState | None = None
        self.lock = RunLock()
        self._old_handlers: dict = {}
        self._stopped = False
        self._saved_allowed_cc: str | None = None
        # ECN marks at the switch queues (incastlab.ecn); its bpffs goes in clean_state
        self.ecn_marking = ecn_marking
        self.ecn: EcnMarker | None = None
        # the hosts' path labels of spray/flowlet; its bpffs goes in clean_state too
        self.flowlet_gap_us = flowlet_gap_us
        self.labelling: PathLabelling | None = None
        self.labeller: PathLabeller | None = None
        # what the hosts run for congestion_control (incastlab.congestion), set by start()
        self.congestion: congestion.Choice | None = None
        self._external_ready = False     # policy external: every switch was connected
        self._next_external_check = 0.0  # time.monotonic() of the next OVSDB check

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> Fabric:
        self._old_handlers = {s: signal.signal(s, _raise_terminated)
                              for s in (signal.SIGTERM,)}
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _check_send_buffer(self) -> None:
        """Userspace datapath: refuse, before touching anything, a fabric whose queues
        Open vSwitch's send buffer cannot hold (they would drop packets tc never counts;
        incastlab.ovs_buffer). The runner's spec validation says so first, by field."""
        caps = self.capabilities
        if caps is None or caps.ovs_send_buffer is None:
            return
        problem = ovs_buffer.shortfall(caps.ovs_send_buffer,
                                       caps.ovs_send_buffer_source or "net.core.wmem_default",
                                       ovs_buffer.topology_required_bytes(self.topo),
                                       "This fabric's switch queues")
        if problem:
            raise PreflightError(problem)

    def start(self) -> None:
        if self.capabilities is None:
            self.capabilities = run_preflight(
                controller_port=self.controller_port, need_netem=bool(self.topo.delay),
                congestion_control=self.congestion_control, lock=self.lock)
        self._check_send_buffer()
        try:
            self.congestion = congestion.resolve(self.congestion_control,
                                                 self.capabilities.congestion_controls,
                                                 congestion.bpf_dctcp_problem())
        except congestion.CongestionUnavailable as exc:
            raise PreflightError(str(exc)) from None
        self.lock.acquire(str(self.run_dir) if self.run_dir else None)
        # Holding the lock, any other recorded fabric belongs to a run that died without
        # tearing down (SIGKILL, power loss): remove its leftovers before they collide.
        removed, _live = clean()
        if removed:
            self.capabilities.notices.append(
                "removed leftovers of a crashed run: " + ", ".join(removed))
        if self.run_dir is None:
            import tempfile
            self.run_dir = Path(tempfile.mkdtemp(prefix="incastlab-fabric-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.state = RunState.create(str(self.run_dir))
        # no emulated address may leave the machine from the root namespace while we run
        guard = subnet_guard.install()
        self._guarded = guard is None  # ours to remove (never another run's)
        if guard:
            self.capabilities.notices.append(guard)
        fmap = fabric_map(self.topo)
        # Record names before creating them: a crash in between still gets cleaned.
        self.state.add("bridges", self.topo.switches())
        self.state.add("interfaces", [e.iface for e in fmap.egresses()])
        fmap.save(self.run_dir / "fabric.json")
        self._start_controller()
        setLogLevel(os.environ.get("INCASTLAB_MININET_LOG", "warning"))
        # OpenFlow 1.5 beside 1.3: only 1.5 can set a select group's selection_method,
        # so the ecmp policy can make the hash explicit (see controller/ecmp.py).
        switch = partial(QueuedOVSSwitch, owner=self.state.id,
                         datapath=self.capabilities.datapath,
                         protocols="OpenFlow13,OpenFlow15", failMode="secure")
        controller = [partial(QuietRemoteController, ip=LOCALHOST, port=self.controller_port)]
        if self.external:
            ip, port = self.external
            controller.append(partial(QuietRemoteController, ip=ip, port=port))
        self.net = Mininet(topo=self.topo, switch=switch, link=QueuedLink,
                           controller=controller, autoSetMacs=False, build=False)
        try:
            self.net.build()
        finally:
            # node shells exist once build() created them, even if it failed halfway
            for node in self.net.hosts + self.net.switches:
                if getattr(node, "shell", None) is not None and node.pid:
                    self.state.add_process(node.pid, f"mininet shell {node.name}")
        self.net.start()
        self._configure_hosts()
        if self.ecn_marking is not None:
            self.ecn = EcnMarker(self.ecn_marking, self.state)
            self.ecn.attach(self.net, fmap)
        self.labelling = for_policy(self.policy, fmap, self.flowlet_gap_us)
        if self.labelling is not None:
            self.labeller = PathLabeller(self.labelling, self.state)
            self.labeller.attach(self.net, fmap)
        self._wait_ready(fmap)

    def stop(self) -> None:
        """Tear everything down; safe to call twice and from any state."""
        if self._stopped:
            return
        self._stopped = True
        # A second Ctrl-C or SIGTERM must not interrupt the teardown of the first.
        previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if self.net is not None:
                self._drop_congestion_references()
                try:
                    self.net.stop()
                except Exception as exc:  # keep going: the state clean-up below finishes
                    print(f"incastlab: Mininet stop failed ({exc!r}); cleaning up by record",
                          file=sys.stderr)
            if self.controller is not None and self.controller.poll() is None:
                _end_group(self.controller)
            if self.state is not None:
                clean_state(self.state)
                self.state.remove()
        finally:
            if self._saved_allowed_cc is not None:
                ALLOWED_CC.write_text(self._saved_allowed_cc)
            if getattr(self, "_guarded", False):
                subnet_guard.remove()
            self.lock.release()
            signal.signal(signal.SIGINT, previous_int)
            for sig, handler in self._old_handlers.items():
                signal.signal(sig, handler)

    def _drop_congestion_references(self) -> None:
        """Our BPF DCTCP: destroy every TCP socket left in the hosts (ss -K) while their
        namespaces can still be entered. An orphaned socket (FIN_WAIT after its process
        was killed) keeps its namespace alive, and with it the struct_ops, for the ~100 s
        of its FIN retransmissions; measured: unregistered but still loaded afterwards."""
        if self.congestion is None or self.congestion.implementation != "bpf":
            return
        for host in self.net.hosts:
            if getattr(host, "shell", None) is not None:
                try:
                    host.cmd("ss -aKt >/dev/null 2>&1")
                except Exception:  # noqa: BLE001 - a dead shell: clean_state follows
                    continue

    # ----------------------------------------------------------------- helpers
    def _start_controller(self) -> None:
        if self.external:
            host, port = self.external
            try:
                socket.create_connection((host, port), timeout=2).close()
            except OSError as exc:
                raise FabricError(f"policy external: no controller answers on {host}:{port} "
                                  f"(routing.controller): {exc.strerror or exc}; start "
                                  "yours first") from None
        argv = [sys.executable, "-m", "incastlab.controller", "--policy", self.policy,
                "--port", str(self.controller_port), "--fabric",
                str(self.run_dir / "fabric.json"), "--out", str(self.run_dir),
                *self.policy_args]
        (self.run_dir / CONTROLLER_READY).unlink(missing_ok=True)
        out = open(self.run_dir / "controller.out", "ab")
        self.controller = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        self.state.add_process(self.controller.pid, "controller")

    def _allow_congestion_control(self, name: str) -> None:
        """A namespace other than the root one may only pick an algorithm listed in
        the root's tcp_allowed_congestion_control (else EPERM). Add ours for the run;
        stop() puts the list back. (Our BPF DCTCP is listed from its registration on:
        its flags carry TCP_CONG_NON_RESTRICTED.)"""
        allowed = ALLOWED_CC.read_text().split()
        if name not in allowed:
            self._saved_allowed_cc = " ".join(allowed)
            ALLOWED_CC.write_text(" ".join(allowed + [name]))

    def _configure_hosts(self) -> None:
        choice = self.congestion
        if choice.implementation == "bpf":  # machine-wide: clean_state unregisters it
            congestion.register(self.state)
        self._allow_congestion_control(choice.kernel_name)
        # the namespace default decides ECN negotiation: iperf3 -C and the like set the
        # algorithm only after connect(), when the SYN has gone
        ecn = " net.ipv4.tcp_ecn=1" if choice.needs_ecn else ""
        for host in self.net.hosts:
            out = host.cmd(f"sysctl -qw net.ipv4.tcp_congestion_control={choice.kernel_name}"
                           f"{ecn} net.ipv4.tcp_slow_start_after_idle="
                           f"{int(self.slow_start_after_idle)}"
                           " net.ipv6.conf.all.disable_ipv6=1"
                           " net.ipv6.conf.default.disable_ipv6=1; echo rc=$?")
            if "rc=0" not in out:
                raise FabricError(f"could not configure TCP on {host.name}: {out.strip()}")

    def controller_failed(self) -> str | None:
        """Why the controller is gone, or None while it works. Ours: its process exited.
        Policy external, once ready, also: a switch lost its connection to the user's
        controller (OVSDB, checked at most every EXTERNAL_CHECK_S: ovs-vsctl twice)."""
        if self.controller is None or self.controller.poll() is None:
            return self._external_lost() if self.external else None
        tail = ""
        for name in ("controller.out", "controller.log"):
            path = self.run_dir / name
            if path.exists():
                tail += path.read_text(errors="replace")[-1500:]
        return f"the controller exited with status {self.controller.returncode}:\n{tail}"

    def _external_lost(self) -> str | None:
        now = time.monotonic()
        if not self._external_ready or now < self._next_external_check:
            return None  # before readiness, _wait_ready names what did not connect
        self._next_external_check = now + EXTERNAL_CHECK_S
        try:
            missing = self.unconnected_switches(self._external_target())
        except (OSError, subprocess.SubprocessError, ValueError):
            return None  # OVSDB busy: ask again next time
        if not missing:
            return None
        host, port = self.external
        return (f"the controller at {host}:{port} (policy external) lost the switches "
                f"{', '.join(missing)}")

    def _wait_ready(self, fmap: FabricMap) -> None:
        """Poll until every switch is connected (the controller's ready file; for policy
        external, OVSDB's is_connected) and every host pair pings, or raise FabricError
        at the deadline. Routes of the user's own app or controller are not known in
        advance, so on a fabric with loops a broadcast storm is watched for as well."""
        deadline = time.monotonic() + self.ready_timeout
        want = set(fmap.dpids)
        ready_file = self.run_dir / CONTROLLER_READY
        step = "switches connecting to the controller"
        storm = self._storm_watch()
        while True:
            failed = self.controller_failed()
            if failed:
                raise FabricError(failed)
            if storm is not None:
                storm.check()
            if step.startswith("switches") and self._switches_connected(want, ready_file):
                step = "hosts reaching each other"
            if step.startswith("hosts"):
                missing = self.unreachable_pairs() if self.check_reachability else []
                if not missing:
                    if storm is not None:
                        storm.check_quiet()
                    self._external_ready = self.external is not None
                    return
                step = f"hosts reaching each other ({len(missing)} pairs fail, e.g. {missing[0]})"
            if time.monotonic() > deadline:
                raise FabricError(self._not_ready_message(step, storm))
            time.sleep(0.2)

    def _switches_connected(self, want: set[int], ready_file: Path) -> bool:
        if self.external and self.unconnected_switches(self._external_target()):
            return False
        if not ready_file.exists():
            return False
        try:
            have = set(json.loads(ready_file.read_text())["switches"])
        except (ValueError, KeyError):
            return False
        return want <= have

    def _external_target(self) -> str:
        host, port = self.external
        return f"tcp:{host}:{port}"  # as Mininet's RemoteController writes it into OVSDB

    def unconnected_switches(self, target: str | None = None) -> list[str]:
        """Our switches whose OpenFlow connection to a controller (to ``target``, e.g.
        'tcp:127.0.0.1:6653', when given) is not up, from OVSDB (Controller.is_connected,
        which ovs-vswitchd refreshes every few seconds), sorted by name."""
        names = set(self.topo.switches())
        bridges = ovsdb_rows("Bridge", "name,controller")
        controllers = {row["_uuid"]: row.get("is_connected") is True
                       for row in ovsdb_rows("Controller", "_uuid,is_connected,target")
                       if target is None or row.get("target") == target}
        up = {row["name"] for row in bridges
              if any(controllers.get(uuid) for uuid in uuids(row.get("controller")))}
        return sorted(names - up)

    def _storm_watch(self) -> StormWatch | None:
        """A storm watch when a controller we do not know routes a fabric with loops
        (leaf–spine with two or more spines) — policy app or external; else None."""
        spec = POLICIES.get(self.policy)
        if spec is None or not (spec.user_apps or spec.external) \
                or getattr(self.topo, "spines", 0) < 2:
            return None
        ifaces = sorted(intf.name for link in self.net.links
                        for intf in (link.intf1, link.intf2)
                        if isinstance(link.intf1.node, Switch)
                        and isinstance(link.intf2.node, Switch))
        return StormWatch(ifaces, self.topo.spines, storm_limit_pps(len(self.net.hosts)))

    def _not_ready_message(self, step: str, storm: StormWatch | None) -> str:
        where = (f"the controller you run and {self.run_dir / 'controller.log'}"
                 if self.external else f"{self.run_dir / 'controller.log'}")
        text = f"fabric not ready after {self.ready_timeout:g} s: waiting for {step}"
        if step.startswith("switches"):
            target = self._external_target() if self.external else None
            try:
                missing = self.unconnected_switches(target)
            except (OSError, subprocess.SubprocessError, ValueError):
                missing = []
            if missing:
                text += f"; not connected to {target or 'the controller'}: {', '.join(missing)}"
        elif storm is not None:
            text += ("; " + storm.advice("routes were not installed within the deadline"))
        return f"{text}; see {where}"

    def unreachable_pairs(self) -> list[tuple[str, str]]:
        """Pairs (src, dst) for which one ping with a 1 s deadline fails."""
        failed = []
        for src in self.net.hosts:
            targets = " ".join(h.IP() for h in self.net.hosts if h is not src)
            out = src.cmd(f"for ip in {targets}; do ping -c1 -W1 -q $ip >/dev/null 2>&1 "
                          "|| echo FAIL $ip; done")
            for line in out.splitlines():
                if line.startswith("FAIL "):
                    failed.append((src.name, line.split()[1]))
        return failed

    def host(self, name: str):
        return self.net[name]

    def popen(self, host: str, argv: list[str], what: str, **kwargs) -> subprocess.Popen:
        """Start argv inside ``host``'s namespace in its own process group, recorded for
        clean-up. kwargs go to subprocess (stdout, stderr, env, cwd).

        Mininet starts it through ``mnexec -da PID``; ``-d`` already calls setsid(), so
        the child leads its own session and process group. (Asking subprocess for a new
        session as well makes mnexec fork and exit, and the Popen would track a corpse.)
        """
        proc = self.net[host].popen(argv, **kwargs)
        self.state.add_process(proc.pid, what)
        return proc


def external_controller(policy: str, policy_args: list[str]) -> tuple[str, int] | None:
    """(host, port) of the user's controller for policy external (``--controller`` in
    ``policy_args``, default registry.DEFAULT_EXTERNAL); None for every other policy."""
    spec = POLICIES.get(policy)
    if spec is None or not spec.external:
        return None
    text = DEFAULT_EXTERNAL
    if "--controller" in policy_args:
        i = policy_args.index("--controller")
        text = policy_args[i + 1] if i + 1 < len(policy_args) else ""
    try:
        return parse_controller(text)
    except OptionError as exc:
        raise FabricError(str(exc)) from None


def _end_group(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue
