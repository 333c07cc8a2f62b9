"""Root tier: the controller on a real fabric (Mininet, OVS userspace datapath).

2 spines x 2 leaves x 4 hosts, host links 20 Mbit/s, one fabric for the module and one
controller process per policy. Each test checks: readiness file, all-pairs ping with
0% loss, where the iperf3 bytes went (from the switches' own port counters), the
controller's CSVs, and no traceback or OpenFlow error in controller.log.

Run as root under the shared dev lock:
    flock /tmp/incastlab-dev.lock .venv/bin/pytest -m root tests/test_controller_fabric.py

Until incastlab/fabric.py lands, the fabric is built here with stock Mininet and
always torn down in ``finally``.
"""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (Mininet, OVS)")]

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


@pytest.fixture(scope="module")
def fabric():
    """Mininet leaf-spine net with OVS userspace switches and a remote controller
    slot on 127.0.0.1; yields (net, fabric_map dict, controller port)."""
    import fcntl

    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch, RemoteController

    from incastlab.topologies.leafspine import LeafSpineTopo

    lock = None
    if not _ancestor_holds_lock():
        lock = open(LOCK_PATH, "a")
        fcntl.flock(lock, fcntl.LOCK_EX)
    setLogLevel("warning")
    topo = LeafSpineTopo(spines=SPINES, leaves=LEAVES, hosts_per_leaf=HOSTS_PER_LEAF,
                         host_bw=HOST_BW)
    port = _free_port()
    net = None
    try:
        net = Mininet(topo=topo, link=TCLink, autoSetMacs=False, build=False,
                      controller=None,
                      switch=lambda name, **kw: OVSSwitch(
                          name, datapath="user", protocols="OpenFlow13",
                          failMode="secure", **kw))
        net.addController("c0", controller=RemoteController, ip="127.0.0.1", port=port)
        net.build()
        net.start()
        for node in [*net.hosts, *net.switches]:
            for intf in node.intfList():
                if intf.name != "lo":
                    node.cmd(f"ethtool -K {intf.name} tx off tso off gso off")
        for host in net.hosts:
            host.cmd("sysctl -qw net.ipv4.tcp_congestion_control=cubic")
        yield net, topo.fabric_map(), port
    finally:
        try:
            if net is not None:
                net.stop()
        finally:
            if lock is not None:
                lock.close()


class Controller:
    """One controller process in its own process group; stop() is idempotent."""

    def __init__(self, policy: str, fabric_json: str, out: str, port: int, *extra: str):
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "incastlab.controller", "--policy", policy,
             "--port", str(port), "--fabric", fabric_json, "--out", out, *extra],
            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 30.0) -> dict:
        path = os.path.join(self.out, "controller_ready.json")
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(path):
                with open(path) as f:
                    return json.load(f)
            assert self.proc.poll() is None, self.proc.stdout.read().decode()
            time.sleep(0.1)
        raise AssertionError(f"controller not ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            with open(os.path.join(self.out, "controller.log")) as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass


@pytest.fixture
def controller(fabric, tmp_path):
    """Start a controller for the test's policy; reconnect the switches to it."""
    net, fmap, port = fabric
    fabric_json = tmp_path / "fabric.json"
    fabric_json.write_text(json.dumps(fmap))
    started = []

    def start(policy: str, *extra: str) -> Controller:
        ctl = Controller(policy, str(fabric_json), str(tmp_path), port, *extra)
        started.append(ctl)
        # Point every switch at the controller again so none waits out its
        # reconnection back-off from the previous test's controller.
        for sw in net.switches:
            sw.cmd(f"ovs-vsctl set-controller {sw.name} tcp:127.0.0.1:{port}")
        ready = ctl.wait_ready()
        assert sorted(ready["switches"]) == sorted(s["dpid"] for s in fmap["switches"])
        return ctl

    try:
        yield start
    finally:
        for ctl in started:
            ctl.stop()


def assert_clean_log(ctl: Controller) -> None:
    text = ctl.log()
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


def run_iperf(net, flows, seconds=IPERF_SECONDS, start_gap=0.0, parallel=1):
    """Run iperf3 flows (client host, server host, server port, client port or None),
    servers in the server hosts. Client i starts i*start_gap seconds after the
    first and runs so that all end together. Returns the clients' JSON reports."""
    servers, clients, reports = [], [], []
    try:
        for _, srv, sport, _ in flows:
            servers.append(net.get(srv).popen(
                ["iperf3", "-s", "-1", "-p", str(sport)], start_new_session=True,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)
        total = seconds + start_gap * (len(flows) - 1)
        for i, (cli, srv, sport, cport) in enumerate(flows):
            if i and start_gap:
                time.sleep(start_gap)
            cmd = ["iperf3", "-c", net.get(srv).IP(), "-p", str(sport), "-J",
                   "-t", f"{total - i * start_gap:.1f}", "-P", str(parallel)]
            if cport:
                cmd += ["--cport", str(cport)]
            clients.append(net.get(cli).popen(cmd, start_new_session=True,
                                              stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT))
        for proc in clients:
            out, _ = proc.communicate(timeout=total + 20)
            report = json.loads(out)
            assert "error" not in report, report["error"]
            reports.append(report)
    finally:
        for proc in [*clients, *servers]:
            if proc.poll() is None:
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
    assert switches == {s["name"] for s in fmap["switches"]}
    assert {"h1", "sp1", "sp2", "lf1", "lf2"} <= {r["peer"] for r in rows}


def test_single_concentrates_on_one_spine(fabric, controller):
    net, fmap, _ = fabric
    ctl = controller("single")
    assert_all_pairs_ping(net)
    before = spine_tx_bytes(net)
    reports = run_iperf(net, eight_flows())
    moved = delta(spine_tx_bytes(net), before)
    total = sum(moved.values())
    assert received_mbits(reports) > 20  # the flows really ran
    assert moved["sp2"] < 0.01 * total, moved
    check_stats(ctl.out, fmap)
    paths = read_csv(os.path.join(ctl.out, "flow_paths.csv"))
    assert {r["spine"] for r in paths} == {"1"}
    assert len(paths) == 2 * HOSTS_PER_LEAF * HOSTS_PER_LEAF  # every inter-leaf pair
    assert_clean_log(ctl)


def spine_shares(moved: dict) -> dict:
    total = sum(moved.values()) or 1
    return {k: v / total for k, v in moved.items()}


def test_ecmp_select_group_keeps_each_flow_on_one_spine(fabric, controller):
    net, fmap, _ = fabric
    ctl = controller("ecmp")
    assert_all_pairs_ping(net)
    groups = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-groups", "lf1"],
                            capture_output=True, text=True, check=True).stdout
    assert "type=select" in groups and groups.count("bucket=") == SPINES, groups
    # one flow at a time: all its bytes cross one spine, for its whole life
    used = set()
    for i in range(4):
        before = spine_tx_bytes(net)
        run_iperf(net, [("h1", "h5", 5201, 42000 + i)], seconds=1.5)
        shares = spine_shares(delta(spine_tx_bytes(net), before))
        print(f"flow {i}: spine shares {shares}")
        assert max(shares.values()) > 0.97, shares
        used.add(max(shares, key=shares.get))
    # eight at once (fixed client ports, so the hash outcome is reproducible)
    before = spine_tx_bytes(net)
    reports = run_iperf(net, eight_flows(cport_base=43000))
    shares = spine_shares(delta(spine_tx_bytes(net), before))
    print(f"8 concurrent flows: spine shares {shares}, "
          f"{received_mbits(reports) / IPERF_SECONDS:.1f} Mbit/s")
    assert min(shares.values()) > 0.1, shares
    # Which hash OVS applied: with no selection method (OpenFlow 1.3 cannot send
    # one) OVS 3.1 uses dp_hash, visible as a hash() action in the datapath flows.
    dpflows = subprocess.run(["ovs-appctl", "dpif/dump-flows", "lf1"],
                             capture_output=True, text=True, check=True).stdout
    print("lf1 datapath hash actions:",
          sorted(set(re.findall(r"hash\([^)]*\)\)?", dpflows))))
    check_stats(ctl.out, fmap)
    assert_clean_log(ctl)


def test_ecmp_explicit_hash_when_switches_speak_openflow15(fabric, controller):
    """With OpenFlow 1.5 allowed on the bridges, the group carries OVS's selection
    method property: hash over the 5-tuple, readable with an OpenFlow 1.5 dump."""
    net, fmap, _ = fabric
    bridges = [sw.name for sw in net.switches]
    try:
        for br in bridges:
            subprocess.run(["ovs-vsctl", "set", "bridge", br,
                            "protocols=OpenFlow13,OpenFlow15"], check=True)
        ctl = controller("ecmp")
        groups = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", "lf1"],
                                capture_output=True, text=True, check=True).stdout
        print("\nlf1 groups (OpenFlow 1.5):", groups.strip())
        assert "selection_method=hash,fields(ip_src,ip_dst,nw_proto,tcp_src,tcp_dst)" \
            in groups, groups + ctl.log()
        assert_all_pairs_ping(net)
        for i in range(2):
            before = spine_tx_bytes(net)
            run_iperf(net, [("h2", "h6", 5201, 44000 + i)], seconds=1.5)
            shares = spine_shares(delta(spine_tx_bytes(net), before))
            assert max(shares.values()) > 0.97, shares
        before = spine_tx_bytes(net)
        run_iperf(net, eight_flows(cport_base=45000))
        shares = spine_shares(delta(spine_tx_bytes(net), before))
        print(f"8 concurrent flows, explicit hash: spine shares {shares}")
        assert min(shares.values()) > 0.1, shares
        check_stats(ctl.out, fmap)  # port statistics over OpenFlow 1.5 too
        assert_clean_log(ctl)
    finally:
        for br in bridges:
            subprocess.run(["ovs-vsctl", "set", "bridge", br, "protocols=OpenFlow13"])


def data_flow_spines(rows) -> list[str]:
    """Spines of iperf3 data connections: per client/server pair the first TCP
    connection placed is iperf3's control connection, the rest carry the data."""
    by_pair = {}
    for r in sorted(rows, key=lambda r: float(r["t"])):
        if r["proto"] == "6":
            by_pair.setdefault((r["src_ip"], r["dst_ip"], r["dst_port"]), []).append(r)
    return [r["spine"] for conns in by_pair.values() for r in conns[1:]]


def test_spread_splits_flows_evenly(fabric, controller):
    net, fmap, _ = fabric
    ctl = controller("spread")
    assert_all_pairs_ping(net)
    before = spine_tx_bytes(net)
    # 4 clients x 2 streams: each client's two data connections are placed one after
    # the other, so round-robin puts one on each spine whatever the control
    # connections do.
    four = [("h1", "h5", 5201, None), ("h2", "h6", 5201, None),
            ("h3", "h7", 5201, None), ("h4", "h8", 5201, None)]
    reports = run_iperf(net, four, start_gap=0.3, parallel=2)
    shares = spine_shares(delta(spine_tx_bytes(net), before))
    rows = read_csv(os.path.join(ctl.out, "flow_paths.csv"))
    spines = data_flow_spines(rows)
    print(f"\nspread: data flows per spine {sorted(spines)}, byte shares {shares}, "
          f"{received_mbits(reports) / IPERF_SECONDS:.1f} Mbit/s")
    assert sorted(spines) == ["1"] * 4 + ["2"] * 4
    assert 0.35 < shares["sp1"] < 0.65, shares
    check_stats(ctl.out, fmap)
    assert_clean_log(ctl)


def test_adaptive_balances_flows_started_one_after_another(fabric, controller):
    net, fmap, _ = fabric
    ctl = controller("adaptive", "--poll-interval", "0.2")
    assert_all_pairs_ping(net)
    before = spine_tx_bytes(net)
    reports = run_iperf(net, eight_flows(), seconds=3, start_gap=0.6)
    shares = spine_shares(delta(spine_tx_bytes(net), before))
    rows = read_csv(os.path.join(ctl.out, "flow_paths.csv"))
    print(f"\nadaptive: data flows per spine {sorted(data_flow_spines(rows))}, "
          f"byte shares {shares}, {received_mbits(reports):.0f} Mbit received")
    assert max(shares.values()) <= 0.6, shares
    check_stats(ctl.out, fmap)
    assert_clean_log(ctl)
