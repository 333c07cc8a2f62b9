"""Root tier: the controller on a real fabric (Mininet, OVS userspace datapath).

Each test brings up 2 spines x 2 leaves x 4 hosts (host links 20 Mbit/s) with
incastlab.fabric.Fabric — the runner's own bring-up: queues, offloads off, the
controller as its own process group on 127.0.0.1, readiness, teardown in every case —
and checks: the readiness file, all-pairs ping with 0% loss, where the iperf3 bytes
went (from the switches' own port counters), the controller's CSVs, and no traceback
or OpenFlow error in controller.log.

Run as root under the shared dev lock:
    flock /tmp/incastlab-dev.lock .venv/bin/pytest -m root tests/test_controller_fabric.py
(without it, the module takes the lock itself).
"""
from __future__ import annotations

import csv
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from incastlab.topologies.fabricmap import FabricMap

pytestmark = pytest.mark.root

LOCK_PATH = "/tmp/incastlab-dev.lock"
SPINES, LEAVES, HOSTS_PER_LEAF = 2, 2, 4
HOST_BW = 20.0  # Mbit/s
IPERF_SECONDS = 4


def _ancestor_holds_lock() -> bool:
    """True when an ancestor is ``flock LOCK_PATH ...`` (the documented way to run)."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/status") as f:
                ppid = int(re.search(r"^PPid:\s+(\d+)", f.read(), re.M).group(1))
        except OSError:
            return False
        if argv and os.path.basename(argv[0]) == b"flock" and LOCK_PATH.encode() in argv:
            return True
        pid = ppid
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def dev_lock():
    """The shared machine's rule: bridges, veths and hosts only under the dev lock."""
    if os.geteuid() != 0 or _ancestor_holds_lock():
        yield
        return
    with open(LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class Up:
    """A running fabric for one policy: ``net``, ``out`` (run directory), ``fmap``."""

    def __init__(self, fab):
        self.fab, self.net, self.out = fab, fab.net, str(fab.run_dir)
        self.fmap = FabricMap.load(os.path.join(self.out, "fabric.json"))

    def log(self) -> str:
        with open(os.path.join(self.out, "controller.log")) as f:
            return f.read()


@pytest.fixture
def fabric(tmp_path):
    """``fabric(policy, *controller_args)`` brings a fabric up; all are torn down
    at the end of the test, whatever happened."""
    from incastlab.fabric import Fabric
    from incastlab.topologies.leafspine import LeafSpineTopo

    fabrics = []

    def up(policy: str, *args: str) -> Up:
        fab = Fabric(LeafSpineTopo(spines=SPINES, leaves=LEAVES, hosts_per_leaf=HOSTS_PER_LEAF,
                                   host_bw=HOST_BW),
                     policy=policy, run_dir=tmp_path / f"run-{len(fabrics)}",
                     controller_port=_free_port(), policy_args=list(args),
                     # our own ping below must see every first packet of a flow
                     check_reachability=False)
        fabrics.append(fab)
        fab.__enter__()
        u = Up(fab)
        with open(os.path.join(u.out, "controller_ready.json")) as f:
            ready = json.load(f)
        assert sorted(ready["switches"]) == u.fmap.dpids
        return u

    try:
        yield up
    finally:
        for fab in fabrics:
            fab.stop()  # idempotent


def assert_clean_log(u: Up) -> None:
    text = u.log()
    assert "Traceback" not in text, text
    assert "OpenFlow error" not in text, text


def assert_all_pairs_ping(net) -> None:
    """One echo per ordered pair, no retry: with a reactive policy each echo is the
    first packet of a new flow, so this also proves packet-in packets are sent on."""
    loss = net.ping(timeout=2)
    assert loss == 0, f"ping loss {loss}%"


def spine_tx_bytes(net) -> dict[str, int]:
    """Total tx bytes of each spine's ports, from OVS itself (not the controller)."""
    totals = {}
    for sw in net.switches:
        if not sw.name.startswith("sp"):
            continue
        out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "--no-names", "dump-ports",
                              sw.name], capture_output=True, text=True, check=True).stdout
        total = 0
        for m in re.finditer(r"port\s+(\S+): rx pkts=\S+, bytes=\S+.*?\n\s+tx pkts=\S+,"
                             r" bytes=(\d+)", out):
            if m.group(1) != "LOCAL":
                total += int(m.group(2))
        totals[sw.name] = total
    return totals


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


def listening(pid: int, port: int) -> bool:
    """A TCP socket listening on ``port`` in the network namespace of process ``pid``
    (/proc/PID/net/tcp and tcp6 list that namespace's sockets; state 0A = LISTEN)."""
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def wait_listening(servers, ports, timeout=20.0) -> None:
    """Until every iperf3 server listens: a client started before that is refused, and
    how long a server takes to start is the machine's (a fixed 0.5 s was the wait)."""
    deadline = time.monotonic() + timeout
    for proc, port in zip(servers, ports, strict=True):
        while not listening(proc.pid, port):
            assert proc.poll() is None, f"iperf3 -s -p {port} exited with {proc.returncode}"
            assert time.monotonic() < deadline, f"iperf3 -s -p {port} not listening"
            time.sleep(0.02)


def run_iperf(u: Up, flows, seconds=IPERF_SECONDS, start_gap=0.0, parallel=1):
    """Run iperf3 flows (client host, server host, server port, client port or None),
    servers in the server hosts. Client i starts i*start_gap seconds after the
    first and runs so that all end together. Returns the clients' JSON reports."""
    servers, clients, reports = [], [], []
    try:
        for _, srv, sport, _ in flows:
            servers.append(u.fab.popen(
                srv, ["iperf3", "-s", "-1", "-p", str(sport)], f"iperf3 -s {srv}",
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_listening(servers, [sport for _, _, sport, _ in flows])
        total = seconds + start_gap * (len(flows) - 1)
        for i, (cli, srv, sport, cport) in enumerate(flows):
            if i and start_gap:
                time.sleep(start_gap)
            cmd = ["iperf3", "-c", u.net.get(srv).IP(), "-p", str(sport), "-J",
                   "-t", f"{total - i * start_gap:.1f}", "-P", str(parallel)]
            if cport:
                cmd += ["--cport", str(cport)]
            clients.append(u.fab.popen(cli, cmd, f"iperf3 -c {cli}", stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT))
        for proc in clients:
            out, _ = proc.communicate(timeout=total + 20)
            report = json.loads(out)
            assert "error" not in report, report["error"]
            reports.append(report)
    finally:
        for proc in [*clients, *servers]:
            if proc.poll() is None:  # Fabric.popen: each leads its own process group
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return reports


def eight_flows(cport_base=None):
    """8 flows from the 4 leaf-1 hosts to the 4 leaf-2 hosts, distinct server ports."""
    flows = []
    for i in range(8):
        k = i % HOSTS_PER_LEAF
        flows.append((f"h{1 + k}", f"h{1 + HOSTS_PER_LEAF + k}", 5201 + i // HOSTS_PER_LEAF,
                      cport_base + i if cport_base else None))
    return flows


def received_mbits(reports) -> float:
    return sum(r["end"]["sum_received"]["bytes"] for r in reports) * 8 / 1e6


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_stats(out, fmap) -> None:
    rows = read_csv(os.path.join(out, "port_stats.csv"))
    switches = {r["switch"] for r in rows}
    assert switches == {s.name for s in fmap.switches}
    assert {"h1", "sp1", "sp2", "lf1", "lf2"} <= {r["peer"] for r in rows}


def test_single_concentrates_on_one_spine(fabric):
    u = fabric("single")
    assert_all_pairs_ping(u.net)
    before = spine_tx_bytes(u.net)
    reports = run_iperf(u, eight_flows())
    moved = delta(spine_tx_bytes(u.net), before)
    total = sum(moved.values())
    assert received_mbits(reports) > 20  # the flows really ran
    assert moved["sp2"] < 0.01 * total, moved
    check_stats(u.out, u.fmap)
    paths = read_csv(os.path.join(u.out, "flow_paths.csv"))
    assert {r["spine"] for r in paths} == {"1"}
    assert len(paths) == 2 * HOSTS_PER_LEAF * HOSTS_PER_LEAF  # every inter-leaf pair
    assert_clean_log(u)


def spine_shares(moved: dict) -> dict:
    total = sum(moved.values()) or 1
    return {k: v / total for k, v in moved.items()}


def assert_each_flow_on_one_spine(u: Up, src: str, dst: str, cports) -> set[str]:
    """Run flows one at a time; each must put all its bytes on one spine."""
    used = set()
    for cport in cports:
        before = spine_tx_bytes(u.net)
        run_iperf(u, [(src, dst, 5201, cport)], seconds=1.5)
        shares = spine_shares(delta(spine_tx_bytes(u.net), before))
        print(f"flow from port {cport}: spine shares {shares}")
        assert max(shares.values()) > 0.97, shares
        used.add(max(shares, key=shares.get))
    return used


def test_ecmp_select_group_keeps_each_flow_on_one_spine(fabric):
    u = fabric("ecmp")
    assert_all_pairs_ping(u.net)
    groups = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-groups", "lf1"],
                            capture_output=True, text=True, check=True).stdout
    assert "type=select" in groups and groups.count("bucket=") == SPINES, groups
    # one flow at a time: all its bytes cross one spine, for its whole life
    assert_each_flow_on_one_spine(u, "h1", "h5", range(42000, 42004))
    # eight at once (fixed client ports, so the hash outcome is reproducible)
    before = spine_tx_bytes(u.net)
    reports = run_iperf(u, eight_flows(cport_base=43000))
    shares = spine_shares(delta(spine_tx_bytes(u.net), before))
    print(f"8 concurrent flows: spine shares {shares}, "
          f"{received_mbits(reports) / IPERF_SECONDS:.1f} Mbit/s")
    assert min(shares.values()) > 0.1, shares
    # Which hash OVS applied: the fabric's bridges speak OpenFlow 1.5 too, so the group
    # carries an explicit selection method, a hash over the 5-tuple (with 1.3 alone
    # OVS 3.1 would pick dp_hash, see the next test's history in controller/ecmp.py).
    groups15 = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", "lf1"],
                              capture_output=True, text=True, check=True).stdout
    assert "selection_method=hash,fields(ip_src,ip_dst,nw_proto,tcp_src,tcp_dst)" in \
        groups15, groups15
    check_stats(u.out, u.fmap)
    assert_clean_log(u)


def test_ecmp_explicit_hash_when_switches_speak_openflow15(fabric):
    """Bridges that also allow OpenFlow 1.5 reconnect with it, and the group then
    carries OVS's selection method property: hash over the 5-tuple."""
    u = fabric("ecmp")
    for sw in u.net.switches:
        subprocess.run(["ovs-vsctl", "set", "bridge", sw.name,
                        "protocols=OpenFlow13,OpenFlow15"], check=True)
    want = "selection_method=hash,fields(ip_src,ip_dst,nw_proto,tcp_src,tcp_dst)"
    deadline, groups = time.time() + 20, ""
    while time.time() < deadline and want not in groups:
        time.sleep(0.2)
        groups = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", "lf1"],
                                capture_output=True, text=True).stdout
    print("\nlf1 groups (OpenFlow 1.5):", groups.strip().splitlines()[-1:])
    assert want in groups, groups + u.log()
    time.sleep(1)  # let the other switches finish reconnecting too
    assert_all_pairs_ping(u.net)
    assert_each_flow_on_one_spine(u, "h2", "h6", range(44000, 44002))
    before = spine_tx_bytes(u.net)
    run_iperf(u, eight_flows(cport_base=45000))
    shares = spine_shares(delta(spine_tx_bytes(u.net), before))
    print(f"8 concurrent flows, explicit hash: spine shares {shares}")
    assert min(shares.values()) > 0.1, shares
    assert "selection hash over ip_src,ip_dst,ip_proto,tcp_src,tcp_dst" in u.log()
    assert_clean_log(u)


def data_flow_spines(rows) -> list[str]:
    """Spines of iperf3 data connections: per client/server pair the first TCP
    connection placed is iperf3's control connection, the rest carry the data."""
    by_pair = {}
    for r in sorted(rows, key=lambda r: float(r["t"])):
        if r["proto"] == "6":
            by_pair.setdefault((r["src_ip"], r["dst_ip"], r["dst_port"]), []).append(r)
    return [r["spine"] for conns in by_pair.values() for r in conns[1:]]


def test_spread_splits_flows_evenly(fabric):
    u = fabric("spread")
    assert_all_pairs_ping(u.net)
    before = spine_tx_bytes(u.net)
    # 4 clients x 2 streams: each client's two data connections are placed one after
    # the other, so round-robin puts one on each spine whatever the control
    # connections do.
    four = [("h1", "h5", 5201, None), ("h2", "h6", 5201, None),
            ("h3", "h7", 5201, None), ("h4", "h8", 5201, None)]
    reports = run_iperf(u, four, start_gap=0.3, parallel=2)
    shares = spine_shares(delta(spine_tx_bytes(u.net), before))
    spines = data_flow_spines(read_csv(os.path.join(u.out, "flow_paths.csv")))
    print(f"\nspread: data flows per spine {sorted(spines)}, byte shares {shares}, "
          f"{received_mbits(reports) / IPERF_SECONDS:.1f} Mbit/s")
    assert sorted(spines) == ["1"] * 4 + ["2"] * 4
    assert 0.35 < shares["sp1"] < 0.65, shares
    check_stats(u.out, u.fmap)
    assert_clean_log(u)


def test_adaptive_balances_flows_started_one_after_another(fabric):
    u = fabric("adaptive", "--poll-interval", "0.2")
    assert_all_pairs_ping(u.net)
    before = spine_tx_bytes(u.net)
    reports = run_iperf(u, eight_flows(), seconds=3, start_gap=0.6)
    shares = spine_shares(delta(spine_tx_bytes(u.net), before))
    rows = read_csv(os.path.join(u.out, "flow_paths.csv"))
    print(f"\nadaptive: data flows per spine {sorted(data_flow_spines(rows))}, "
          f"byte shares {shares}, {received_mbits(reports):.0f} Mbit received")
    assert max(shares.values()) <= 0.6, shares
    check_stats(u.out, u.fmap)
    assert_clean_log(u)
