"""Root tier: real Mininet, real Open vSwitch, the real os-ken controller.

Covers the lab foundation: reachability through the controller, the shaped rate, a
queue that overflows where and as much as configured, teardown on every kind of exit,
and preflight's view of this machine."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from incastlab.capture import queues
from incastlab.fabric import Fabric
from incastlab.preflight import run_preflight
from incastlab.state import STATE_DIR
from incastlab.topologies.leafspine import LeafSpineTopo
from tests.rootnet import (free_port, iperf3_pair, iperf3_result, ovs_bridges)

pytestmark = pytest.mark.root
OUR_SWITCHES = {"sp1", "sp2", "lf1", "lf2"}


def _alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie waits only for its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # comm may hold spaces


def _assert_nothing_left(pids=(), deadline_s: float = 10.0):
    assert not (ovs_bridges() & OUR_SWITCHES)
    assert not [n for n in os.listdir("/sys/class/net") if n.startswith(("sp", "lf", "h"))
                and "-eth" in n]
    assert not list(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else True
    # Teardown signals what it started (Mininet SIGHUPs each node's shell and does not
    # wait for it); a signalled process still has its exit to run, and on a busy machine
    # that waits for a CPU: wait for it with a deadline instead of a fixed sleep. A
    # process teardown never signalled stays alive however long we wait.
    deadline = time.monotonic() + deadline_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in pids if _alive(p)]
    assert not left, f"pids {left} still alive {deadline_s:g} s after teardown"


@pytest.fixture(scope="class")
def fab(tmp_path_factory):
    """The default fabric (2 x 2 x 2 at 20 Mbit/s, policy single, cubic, slow start after
    idle on), brought up once for the class of tests that only use it: torn down before
    the next test of the module builds its own fabric (one at a time)."""
    run_dir = tmp_path_factory.mktemp("default-fabric")
    with Fabric(LeafSpineTopo(2, 2, 2, host_bw=20), policy="single", run_dir=run_dir,
                controller_port=free_port()) as fabric:
        yield fabric
    # after its teardown (a failure here is an error of the class's last test)
    assert "Traceback" not in (run_dir / "controller.log").read_text()
    _assert_nothing_left()


class TestTheDefaultFabric:
    """The tests that only use the default fabric (fixture ``fab``)."""

    def test_all_pairs_ping_through_controller(self, fab):
        result = fab.net.pingAll(timeout=1)
        assert result == 0.0
        cc = fab.net["h3"].cmd("sysctl -n net.ipv4.tcp_congestion_control").strip()
        assert cc == "cubic"
        idle = fab.net["h3"].cmd("sysctl -n net.ipv4.tcp_slow_start_after_idle").strip()
        assert idle == "1"  # the kernel's default, unless the spec says otherwise

    def test_single_flow_reaches_configured_rate(self, fab):
        _srv, cli = iperf3_pair(fab, "h1", "h3", seconds=6)
        result = iperf3_result(cli, timeout=30)
        rate = result["end"]["sum_received"]["bits_per_second"] / 1e6
        # HTB shapes whole frames: goodput is at most 20 * 1448/1514 = 19.1 Mbit/s.
        assert 0.90 * 20 <= rate <= 1.05 * 20, f"achieved {rate:.2f} Mbit/s of 20"


def test_hosts_keep_their_window_across_idle_when_told(tmp_path):
    with Fabric(LeafSpineTopo(2, 2, 2), run_dir=tmp_path, controller_port=free_port(),
                congestion_control="reno", slow_start_after_idle=False) as fab:
        for host in fab.net.hosts:
            got = host.cmd("sysctl -n net.ipv4.tcp_slow_start_after_idle "
                           "net.ipv4.tcp_congestion_control").split()
            assert got == ["0", "reno"], host.name
    _assert_nothing_left()




def test_incast_overflows_the_receivers_leaf_queue(tmp_path):
    # fabric links faster than host links: the receiver's leaf port is the bottleneck
    topo = LeafSpineTopo(2, 2, 2, host_bw=20, fabric_bw=50, queue_packets=20)
    with Fabric(topo, run_dir=tmp_path, controller_port=free_port()) as fab:
        out_csv = tmp_path / "queues.csv"
        ifaces = fab.topo.fabric_map().switch_egress_ifaces()
        # switch ports live in the root namespace: so does the sampler
        sampler = subprocess.Popen(
            [sys.executable, "-m", "incastlab.capture.queues", "--ifaces",
             ",".join(ifaces), "--interval-ms", "10", "--out", str(out_csv)],
            start_new_session=True)
        fab.state.add_process(sampler.pid, "queue sampler")
        try:
            flows = [iperf3_pair(fab, src, "h3", seconds=5, port=5201 + n)
                     for n, src in enumerate(("h1", "h4"))]
            for _srv, cli in flows:
                iperf3_result(cli, timeout=30)
        finally:
            sampler.send_signal(signal.SIGTERM)
            sampler.wait(timeout=10)
        tc = fab.net["lf2"].cmd("tc -s qdisc show dev lf2-eth1")
    rows = list(csv.DictReader(open(out_csv)))
    port_rows = [r for r in rows if r["iface"] == "lf2-eth1"]
    assert len(port_rows) > 200, "the sampler should have taken ~500 samples"
    assert int(port_rows[-1]["drops"]) > 0, tc
    assert max(int(r["backlog_pkts"]) for r in port_rows) <= 20
    assert max(int(r["backlog_pkts"]) for r in port_rows) >= 15, "queue never filled"
    assert "dropped 0," not in tc.split("qdisc pfifo")[1]


def test_queue_sampler_parses_tc_json():
    text = ('[{"kind":"htb","handle":"1:","dev":"lf1-eth3","bytes":9,"packets":1},'
            '{"kind":"pfifo","handle":"10:","parent":"1:1","dev":"lf1-eth3","bytes":1500,'
            '"packets":1,"drops":7,"overlimits":0,"requeues":0,"backlog":3000,"qlen":2},'
            '{"kind":"pfifo","handle":"10:","dev":"h1-eth0","drops":1}]')
    rows = queues.parse_tc_json(text, {"lf1-eth3"}, 12.5)
    assert rows == [["12.500000", "lf1", 3, "lf1-eth3", 3000, 2, 7, 0, 1500, 1, 0]]


def test_teardown_after_exception(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with Fabric(LeafSpineTopo(2, 2, 1), run_dir=tmp_path, controller_port=free_port()):
            raise RuntimeError("boom")
    _assert_nothing_left()


SCRIPT = textwrap.dedent("""
    import signal, sys, time
    # a shell without job control starts background jobs with SIGINT ignored: undo that
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from incastlab.fabric import Fabric
    from incastlab.topologies.leafspine import LeafSpineTopo
    with Fabric(LeafSpineTopo(2, 2, 1), run_dir=sys.argv[1], controller_port=int(sys.argv[2])) as f:
        pids = [f.controller.pid] + [n.pid for n in f.net.hosts + f.net.switches]
        print("READY", *pids, flush=True)
        time.sleep(120)
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_teardown_on_signal(tmp_path, sig):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), str(free_port())],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        pids = [int(p) for p in line.split()[1:]]
        assert ovs_bridges() >= {"sp1", "lf1"}
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:  # the test failed: leave nothing for the next test
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            subprocess.run([sys.executable, "-m", "incastlab.cli", "clean"], timeout=120)
    _assert_nothing_left(pids)


def test_clean_on_clean_machine_is_a_noop():
    for _ in range(2):
        out = subprocess.run([sys.executable, "-m", "incastlab.cli", "clean"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "nothing of ours to clean" in out.stdout


def test_clean_removes_a_crashed_runs_leftovers(tmp_path):
    """SIGKILL leaves no chance to tear down: `incastlab clean` must then do it."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), str(free_port())],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline()
    assert line.startswith("READY"), line
    pids = [int(p) for p in line.split()[1:]]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert ovs_bridges() >= {"sp1", "lf1"}
    out = subprocess.run([sys.executable, "-m", "incastlab.cli", "clean"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "removed bridge sp1" in out.stdout
    _assert_nothing_left(pids)


def test_clean_removes_a_probe_namespace_whose_creator_died():
    """Preflight's netem probe makes a namespace named after its process; one left by a
    process killed mid-probe is removed, one whose creator still lives is not."""
    from incastlab.clean import clean
    from incastlab.preflight import probe_netns_name
    from incastlab.state import process_start_time

    dead = subprocess.Popen(["sleep", "30"])
    dead_name = probe_netns_name(dead.pid, process_start_time(dead.pid), 0)
    dead.kill()
    dead.wait()
    live_name = probe_netns_name(os.getpid(), process_start_time(os.getpid()), 10**6)
    for name in (dead_name, live_name):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        removed, _ = clean()
        assert f"namespace {dead_name}" in removed
        assert not Path(f"/run/netns/{dead_name}").exists()
        assert Path(f"/run/netns/{live_name}").exists()
    finally:
        for name in (dead_name, live_name):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    run_preflight(controller_port=None)  # its own probe leaves nothing behind
    mine = probe_netns_name(os.getpid(), process_start_time(os.getpid()), 0).rsplit("-", 1)[0]
    assert not [n for n in os.listdir("/run/netns") if n.startswith(mine + "-")]


def _kernel_config() -> dict[str, str]:
    """The running kernel's build options, where /proc/config.gz exposes them."""
    import gzip

    path = Path("/proc/config.gz")
    if not path.exists():
        pytest.skip("no /proc/config.gz to check preflight against")
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and line[0] != "#")


def test_preflight_matches_independent_probes():
    caps = run_preflight(controller_port=None)
    config = _kernel_config()
    # built in (=y) or loaded: the kernel datapath is usable
    kernel_dp = config.get("CONFIG_OPENVSWITCH") == "y" or Path("/sys/module/openvswitch").is_dir()
    assert caps.datapath == ("kernel" if kernel_dp else "user")
    netem = config.get("CONFIG_NET_SCH_NETEM") == "y" or Path("/sys/module/sch_netem").is_dir()
    assert caps.netem == netem
    assert "cubic" in caps.congestion_controls


def test_clean_leaves_a_same_named_bridge_it_did_not_create(tmp_path, monkeypatch):
    """A stale record naming sp1 must not delete an sp1 that someone else (say, a stock
    `mn --custom topologies/leafspine.py`) created: only bridges tagged with the
    record's id are ours."""
    from incastlab.clean import clean
    from incastlab.state import RunState

    monkeypatch.setattr("incastlab.state.STATE_DIR", tmp_path)
    subprocess.run(["ovs-vsctl", "add-br", "sp1", "--", "set", "bridge", "sp1",
                    "datapath_type=netdev"], check=True)
    try:
        stale = RunState.create(str(tmp_path))
        stale.add("bridges", ["sp1"])
        stale.data["owner"] = {"pid": 1, "start": -1}  # a dead owner
        stale.save()
        removed, _ = clean()
        assert "bridge sp1" not in removed
        assert "sp1" in ovs_bridges()
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", "sp1"], check=True)
