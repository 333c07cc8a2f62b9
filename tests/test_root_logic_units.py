"""Pure logic that only the root tier used to reach, tested without root: the queue
sampler's tc JSON parser, run-state ownership (a live owner, a dead one, a reused pid),
clean-up's choice of what is ours, the controller's policy arguments, the storm limit,
run-directory naming, the progress count of the run's wait, and the refusal paths of
`incastlab run` (nothing is created when it refuses).

Processes here are our own short `sleep` children, ended by pid; nothing touches OVS or
the network (clean-up's `ovs-vsctl`/`ip` calls are replaced by a recorder).
"""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from incastlab import clean, state
from incastlab.capture import queues
from incastlab.preflight import PROBE_NETNS_PREFIX, probe_netns_name

# ------------------------------------------------------------------ tc JSON

TC = json.dumps([
    {"kind": "htb", "handle": "1:", "dev": "lf1-eth3", "bytes": 9, "packets": 1},
    {"kind": "pfifo", "handle": "10:", "parent": "1:1", "dev": "lf1-eth3", "bytes": 1500,
     "packets": 1, "drops": 7, "overlimits": 2, "requeues": 1, "backlog": 3000, "qlen": 2},
    {"kind": "pfifo", "handle": "10:", "dev": "sp12-eth10", "drops": 4},
    {"kind": "pfifo", "handle": "10:", "dev": "h1-eth0", "drops": 1},
    {"kind": "pfifo", "handle": "10:", "dev": "lo"},
    {"kind": "noqueue", "handle": "0:", "dev": "sp12-eth10"},
])


def test_tc_json_rows_are_the_queue_child_of_the_asked_interfaces():
    rows = queues.parse_tc_json(TC, {"lf1-eth3", "sp12-eth10", "lo"}, 12.5)
    assert rows == [
        # t, switch, port, iface, backlog_bytes, backlog_pkts, drops, overlimits,
        # sent_bytes, sent_pkts, requeues
        ["12.500000", "lf1", 3, "lf1-eth3", 3000, 2, 7, 2, 1500, 1, 1],
        ["12.500000", "sp12", 10, "sp12-eth10", 0, 0, 4, 0, 0, 0, 0],  # absent counters: 0
        ["12.500000", "lo", -1, "lo", 0, 0, 0, 0, 0, 0, 0],             # no -ethN: port -1
    ]
    assert len(rows[0]) == len(queues.COLUMNS)
    assert queues.parse_tc_json(TC, set(), 1.0) == []
    assert queues.parse_tc_json("", {"lf1-eth3"}, 1.0) == []
    assert queues.parse_tc_json(TC, {"lf1-eth3"}, 1700000000.1234567)[0][0] == \
        "1700000000.123457"  # microseconds, rounded
    with pytest.raises(ValueError):  # the sampler skips and counts such a sample
        queues.parse_tc_json(TC[:-5], {"lf1-eth3"}, 1.0)


# ------------------------------------------------------------------ run state

@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setattr(state, "STATE_DIR", d)
    return d


@pytest.fixture
def sleeper():
    """A short-lived child process of ours; ended (by pid) after the test."""
    procs = []

    def start(argv0=None):
        p = subprocess.Popen(["sleep", "30"], executable=argv0, start_new_session=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@pytest.fixture
def orphan():
    """A `sleep` whose parent has exited, as a crashed run's workers are: whoever
    reaps orphans here reaps it when it ends (our own child would stay a zombie).
    Ended by pid after the test if still the same process."""
    made = []

    def start():
        sh = subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"],
                            capture_output=True, text=True, check=True)
        pid = int(sh.stdout)
        made.append((pid, state.process_start_time(pid)))
        return pid

    yield start
    for pid, start in made:
        if state.is_same_process(pid, start):
            os.kill(pid, signal.SIGKILL)


def _gone(pid, start, within_s=5.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not state.is_same_process(pid, start):
            return True
        time.sleep(0.02)
    return False


def test_proc_stat_parses_after_the_last_parenthesis(tmp_path, sleeper):
    # a command name with spaces and parentheses must not shift the fields
    odd = tmp_path / "a) (b c"
    odd.symlink_to("/bin/sleep")
    p = sleeper(str(odd))
    with open(f"/proc/{p.pid}/stat") as f:
        assert "(a) (b c)" in f.read()
    fields = state.proc_stat(p.pid)
    # field 3: the state, one letter (a freshly exec'd process may be in D while its
    # binary is paged in); a mis-split would leave "(b" or "c)" here
    assert len(fields[0]) == 1 and fields[0] in "RSDTtZXIW"
    assert int(fields[1]) == os.getpid()  # field 4: the parent
    start = state.process_start_time(p.pid)
    # started after this test process, in clock ticks since boot
    assert start >= state.process_start_time(os.getpid())
    assert state.is_same_process(p.pid, start)
    assert not state.is_same_process(p.pid, start + 1)  # the pid, reused by another
    assert not state.is_same_process(p.pid, None)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert state.proc_stat(p.pid) is None and state.process_start_time(p.pid) is None
    assert not state.is_same_process(p.pid, start)


def test_a_zombie_is_not_the_same_process_any_more(sleeper):
    """A process that has ended but is not reaped yet (a zombie) is gone for clean-up: an
    orphan is reaped by whatever reaps orphans on the machine, however slowly (clean's
    SIGTERM then SIGKILL grace would otherwise wait for that reaper, or fail)."""
    p = sleeper()
    start = state.process_start_time(p.pid)
    assert state.is_same_process(p.pid, start)
    os.killpg(p.pid, signal.SIGKILL)  # our child: a zombie until we wait for it
    deadline = time.monotonic() + 10
    while state.proc_stat(p.pid)[0] != "Z":
        assert time.monotonic() < deadline, "SIGKILL did not end the child"
        time.sleep(0.01)
    assert state.process_start_time(p.pid) == start  # still listed, as a zombie
    assert not state.is_same_process(p.pid, start)
    p.wait()
    assert not state.is_same_process(p.pid, start)


def test_run_state_records_and_ownership(state_dir, sleeper):
    s = state.RunState.create("runs/x")
    assert s.path.parent == state_dir and s.path.name.startswith(f"{os.getpid()}-")
    assert s.id == s.path.stem
    s.add("bridges", ["lf1", "sp1"])
    s.add("bridges", ["lf1"])  # recorded once
    p = sleeper()
    s.add_process(p.pid, "queue sampler")
    back = state.RunState.load(s.path)  # every change is on disk already
    assert back.data["bridges"] == ["lf1", "sp1"]
    assert back.data["processes"] == [{"pid": p.pid, "start": state.process_start_time(p.pid),
                                       "what": "queue sampler"}]
    assert back.data["run_dir"] == "runs/x" and back.owner_alive()
    # a dead owner, and a live pid that is not the owner any more (reused)
    back.data["owner"] = {"pid": p.pid, "start": state.process_start_time(p.pid) + 7}
    assert not back.owner_alive()
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    back.data["owner"] = {"pid": p.pid, "start": back.data["processes"][0]["start"]}
    assert not back.owner_alive()
    (state_dir / "broken.json").write_text("{not json")
    assert [x.path for x in state.all_states()] == [s.path]  # damaged files skipped
    s.remove()
    s.remove()  # twice is fine
    assert state.all_states() == []


def test_no_state_dir_means_no_states(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "absent")
    assert state.all_states() == []


# ------------------------------------------------------------------ clean-up

class FakeSystem:
    """Stands in for ovs-vsctl and ip: which bridges/interfaces exist, who owns them;
    records every command clean-up would run."""

    def __init__(self, bridges=None, owners=None, ifaces=()):
        self.bridges = dict.fromkeys(bridges or [])
        self.owners = owners or {}
        self.ifaces = set(ifaces)
        self.calls = []

    def run(self, argv):
        self.calls.append(argv)
        out, rc = "", 0
        if argv[:3] == ["ovs-vsctl", "--timeout=5", "list-br"]:
            out = "\n".join(self.bridges)
        elif "get" in argv and "Bridge" in argv:
            out = f'"{self.owners[argv[-2]]}"' if argv[-2] in self.owners else ""
        elif "port-to-br" in argv:
            rc = 1
        elif "del-br" in argv:
            self.bridges.pop(argv[-1], None)
        elif argv[:3] == ["ip", "link", "delete"]:
            self.ifaces.discard(argv[3])
        elif argv[:3] == ["ip", "netns", "delete"]:
            pass
        return subprocess.CompletedProcess(argv, rc, out, "")


class _NoGuard:
    """Stands in for incastlab.subnet_guard: clean-up must not touch the machine's real
    routes from a unit test (a live fabric of another process may own the guard)."""

    SUBNET = "10.0.0.0/16"
    calls = 0

    @classmethod
    def remove(cls):
        cls.calls += 1
        return False


@pytest.fixture
def fake(monkeypatch, tmp_path):
    sysm = FakeSystem()
    # clean() asks whether a fabric holds the run lock: a lock file of the test's own,
    # so that the machine's (a root run's) never decides what these tests see
    from incastlab import lock
    monkeypatch.setattr(clean, "RunLock", lambda: lock.RunLock(tmp_path / "free.lock"))
    monkeypatch.setattr(clean, "_run", sysm.run)
    monkeypatch.setattr(clean, "interface_exists", lambda n: n in sysm.ifaces)
    monkeypatch.setattr(clean, "orphan_probe_namespaces", lambda: [])
    monkeypatch.setattr(clean, "subnet_guard", _NoGuard, raising=False)
    return sysm


def _state(owner_pid, owner_start, **lists):
    s = state.RunState.create("runs/r")
    s.data["owner"] = {"pid": owner_pid, "start": owner_start}
    for k, v in lists.items():
        s.data[k] = v
    s.save()
    return s


def test_clean_keeps_a_live_runs_state_and_everything_it_lists(state_dir, fake, sleeper):
    p = sleeper()
    fake.bridges = dict.fromkeys(["lf1"])
    s = _state(os.getpid(), state.process_start_time(os.getpid()), bridges=["lf1"],
               processes=[{"pid": p.pid, "start": state.process_start_time(p.pid),
                           "what": "worker"}])
    removed, skipped = clean.clean()
    assert removed == [] and skipped == [
        f"run of pid {os.getpid()} is still active (runs/r)"]
    assert p.poll() is None and s.path.exists() and not any("del-br" in c for c in fake.calls)


def test_clean_removes_a_dead_runs_leftovers_but_not_a_reused_pid(state_dir, fake, orphan):
    ours, reused = orphan(), orphan()
    ours_start, reused_start = state.process_start_time(ours), state.process_start_time(reused)
    fake.bridges = dict.fromkeys(["lf1", "sp1", "s1"])
    s = _state(999_999_999, 1, bridges=["lf1", "sp1", "s1"], interfaces=["lf1-eth1"],
               processes=[{"pid": ours, "start": ours_start, "what": "worker 0"},
                          # this pid's recorded start differs: it is someone else's now
                          {"pid": reused, "start": reused_start - 1, "what": "worker 1"}])
    fake.owners = {"lf1": s.id, "sp1": s.id, "s1": "another-run"}
    fake.ifaces = {"lf1-eth1"}
    removed, skipped = clean.clean()
    assert skipped == []
    assert removed == [f"process {ours} (worker 0)", "bridge lf1", "bridge sp1",
                       "interface lf1-eth1"]
    assert _gone(ours, ours_start)
    assert state.is_same_process(reused, reused_start), \
        "a process whose start time differs is not ours"
    assert "s1" in fake.bridges, "a bridge another run tagged is not ours"
    assert not s.path.exists()  # nothing recorded is left: the record goes too


def test_clean_keeps_the_record_while_something_stays(state_dir, fake, monkeypatch):
    s = _state(999_999_999, 1, interfaces=["stuck0"])
    fake.ifaces = {"stuck0"}
    monkeypatch.setattr(fake, "run", lambda argv: subprocess.CompletedProcess(argv, 1, "", ""))
    monkeypatch.setattr(clean, "_run", fake.run)
    removed, _ = clean.clean(attempts=2)
    assert removed == ["interface stuck0", "interface stuck0"]  # tried twice
    assert s.path.exists()


def test_clean_include_live(state_dir, fake):
    s = _state(os.getpid(), state.process_start_time(os.getpid()))
    removed, skipped = clean.clean(include_live=True)
    assert (removed, skipped) == ([], []) and not s.path.exists()


def test_orphan_probe_namespaces_by_pid_and_start(monkeypatch, sleeper):
    me, start = os.getpid(), state.process_start_time(os.getpid())
    p = sleeper()
    dead_pid, dead_start = p.pid, state.process_start_time(p.pid)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    names = [probe_netns_name(me, start, 0), probe_netns_name(dead_pid, dead_start, 3),
             probe_netns_name(me, start + 1, 1), f"{PROBE_NETNS_PREFIX}abc", "h1",
             f"{PROBE_NETNS_PREFIX}{me}-{start}"]
    real_listdir = os.listdir
    monkeypatch.setattr(clean.os, "listdir",
                        lambda d: names if d == "/run/netns" else real_listdir(d))
    assert clean.orphan_probe_namespaces() == [names[1], names[2]]
    monkeypatch.setattr(clean.os, "listdir", lambda d: (_ for _ in ()).throw(OSError()))
    assert clean.orphan_probe_namespaces() == []


# ------------------------------------------------------------------ runner pieces

def _spec(*overrides):
    from incastlab.spec import load_spec
    return load_spec(None, list(overrides))


def test_policy_args_per_policy():
    from incastlab.runner import policy_args
    assert policy_args(_spec("routing.policy=single", "routing.spine=2")) == [
        "--poll-interval", "0.2", "--spine", "2"]
    assert policy_args(_spec("routing.policy=ecmp", "routing.poll_interval_s=1.0")) == [
        "--poll-interval", "1"]
    assert policy_args(_spec("routing.policy=spread", "routing.idle_timeout_s=30")) == [
        "--poll-interval", "0.2", "--idle-timeout", "30"]
    assert policy_args(_spec("routing.policy=adaptive", "routing.poll_interval_s=0.15")) == [
        "--poll-interval", "0.15", "--idle-timeout", "10"]


def test_storm_limit_scales_with_host_pairs():
    from incastlab.fabric import STORM_PPS_FLOOR, storm_limit_pps
    assert storm_limit_pps(2) == STORM_PPS_FLOOR == 300.0   # 16*2*1 = 32: the floor
    assert storm_limit_pps(5) == 320.0                        # 16*5*4, just above it
    assert storm_limit_pps(8) == 896.0


def test_new_run_dir_names(tmp_path, monkeypatch):
    from incastlab import runner
    monkeypatch.setattr(runner.time, "strftime", lambda fmt: "20261201-120000")
    a = runner.new_run_dir(tmp_path / "runs", "ps-incast")
    assert a == tmp_path / "runs" / "ps-incast-20261201-120000" and a.is_dir()
    b = runner.new_run_dir(tmp_path / "runs", "ps-incast")  # same second: stamped again
    assert b.name == "ps-incast-20261201-120000-20261201-120000" and b.is_dir()
    c = runner.new_run_dir(tmp_path / "runs", "sweep", "policy=ecmp,rep=1")
    assert c.name == "sweep-policy=ecmp,rep=1"
    d = runner.new_run_dir(tmp_path / "runs", "sweep", "policy=ecmp,rep=1")
    assert d.name == "sweep-policy=ecmp,rep=1-20261201-120000"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(
        x.name for x in (a, b, c, d))


def test_the_run_hands_the_hosts_tcp_settings_to_the_fabric(tmp_path, monkeypatch):
    """What `incastlab run` builds its Fabric with (the Fabric's stand-in stops the run
    there, before anything is touched) and records in the manifest."""
    import json

    from incastlab import runner
    from incastlab.spec import load_spec
    made = []

    class Recorder:
        def __init__(self, topo, **kwargs):
            made.append(kwargs)
            raise RuntimeError("stand-in Fabric: stop here")

    monkeypatch.setattr(runner, "Fabric", Recorder)
    spec = load_spec(overrides=["topology.slow_start_after_idle=false",
                                "topology.congestion_control=reno"])
    from incastlab.preflight import Capabilities
    caps = Capabilities(datapath="user", netem=False, congestion_controls=["cubic", "reno"],
                        ovs_version="3.1.0", notices=[])
    status = runner.run_experiment(spec, tmp_path, caps=caps)
    assert status == "failed" and len(made) == 1, (tmp_path / "manifest.json").read_text()
    assert made[0]["slow_start_after_idle"] is False
    assert made[0]["congestion_control"] == "reno"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["slow_start_after_idle"] is False
    assert manifest["congestion_control"] == "reno"


def test_progress_counts_compact_json_events(tmp_path):
    from incastlab.runner import progress_logged
    log = tmp_path / "0.jsonl"
    log.write_text('{"event":"iter","i":0}\n{"event":"iteration","i":1}\n'
                   '{"event": "iter"}\n{"event":"iter","i":2}\n')
    assert progress_logged(log, "iter") == 2  # the apps write compact JSON only
    assert progress_logged(tmp_path / "missing.jsonl", "iter") == 0


# ------------------------------------------------------------------ `incastlab run` refusals

class Caps:
    datapath, netem, notices = "user", False, []


@pytest.fixture
def run_cli(tmp_path, monkeypatch):
    """`incastlab run` in tmp_path with preflight and the run itself replaced: a test
    says what preflight answers; reaching the run is recorded."""
    from incastlab import cli, runner
    from incastlab.commands import common
    monkeypatch.chdir(tmp_path)
    reached = []
    monkeypatch.setattr(common, "execute", lambda *a: reached.append(a) or "complete")
    monkeypatch.setattr(common, "report_and_summarise", lambda *a: None)
    answer = {"caps": Caps()}

    def check_ready(spec, port):
        if isinstance(answer["caps"], Exception):
            raise answer["caps"]
        return answer["caps"]

    monkeypatch.setattr(runner, "check_ready", check_ready)

    def run(*argv):
        return cli.main(["run", *argv])
    run.reached, run.answer = reached, answer
    return run


def _created(tmp_path):
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))


def test_run_refuses_an_invalid_spec_before_anything(run_cli, tmp_path, capsys):
    assert run_cli("--set", "topology.queue_packets=0") == 2
    err = capsys.readouterr().err
    assert "invalid spec" in err and "topology.queue_packets: 0" in err
    assert run_cli("--set", "workload.workrs=3") == 2
    assert run_cli.reached == [] and _created(tmp_path) == []


def test_run_refuses_a_sweep(run_cli, tmp_path, capsys):
    assert run_cli("--set", 'routing.policy=["ecmp","spread"]') == 2
    assert "use `incastlab sweep` instead" in capsys.readouterr().err
    assert run_cli.reached == [] and _created(tmp_path) == []


def test_run_refuses_when_preflight_fails(run_cli, tmp_path, capsys):
    from incastlab.preflight import PreflightError
    from incastlab.spec import SpecError
    run_cli.answer["caps"] = PreflightError("Open vSwitch is not running.")
    assert run_cli() == 1
    assert "preflight failed\nOpen vSwitch is not running." in capsys.readouterr().err
    run_cli.answer["caps"] = SpecError(["topology.delay: '2ms' needs netem"])
    assert run_cli() == 1
    assert "invalid spec on this machine" in capsys.readouterr().err
    assert run_cli.reached == [] and _created(tmp_path) == []


def test_run_never_writes_into_a_used_directory(run_cli, tmp_path, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "spec.toml").write_text("kept")
    assert run_cli("--out", str(used)) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (used / "spec.toml").read_text() == "kept" and run_cli.reached == []
    # an empty or new --out is used as given; without --out: runs/<name>-<time>
    assert run_cli("--out", str(tmp_path / "new")) == 0
    assert run_cli.reached[-1][1] == tmp_path / "new"
    assert run_cli() == 0
    made = run_cli.reached[-1][1]
    assert made.parent == Path("runs") and re.fullmatch(r"default-\d{8}-\d{6}", made.name)
    assert made.is_dir()


def test_run_exit_code_follows_the_status(run_cli, monkeypatch):
    from incastlab.commands import common
    monkeypatch.setattr(common, "execute", lambda *a: "failed")
    assert run_cli() == 1
    monkeypatch.setattr(common, "execute", lambda *a: "aborted")
    assert run_cli() == 1



# ------------------------------------------------------------------ congestion control list

@pytest.mark.parametrize("allowed, cc, during", [
    ("reno bbr", "cubic", "reno bbr cubic"),   # added for the run ...
    ("reno bbr cubic", "cubic", "reno bbr cubic"),  # ... only when missing
])
def test_allowed_congestion_controls_restored_after_the_run(tmp_path, monkeypatch, allowed,
                                                             cc, during):
    """A namespace may only pick an algorithm the root allows: a run adds its own to
    tcp_allowed_congestion_control and puts the list back at teardown (docs/emulation.md)."""
    from incastlab import fabric
    from incastlab.topologies.leafspine import StarTopo
    fake = tmp_path / "tcp_allowed_congestion_control"
    fake.write_text(allowed + "\n")
    monkeypatch.setattr(fabric, "ALLOWED_CC", fake)
    fab = fabric.Fabric(StarTopo(senders=1), congestion_control=cc)
    fab._allow_congestion_control(cc)
    assert fake.read_text().split() == during.split()
    fab.stop()  # nothing else was started: only the list to put back
    assert fake.read_text().split() == allowed.split()
    fab.stop()  # twice is safe
    assert fake.read_text().split() == allowed.split()


def test_clean_leaves_the_guard_route_while_a_fabric_holds_the_run_lock(
        state_dir, fake, tmp_path, monkeypatch):
    """No run recorded in the state directory (pointed elsewhere, as this test does) but a
    fabric holding the run lock: its guard route stays. Free lock: the route goes."""
    from incastlab import lock

    path = tmp_path / "run.lock"
    monkeypatch.setattr(clean, "RunLock", lambda: lock.RunLock(path))
    other = lock.RunLock(path)
    other.acquire("runs/live")          # a live fabric (another fd, as another process)
    _NoGuard.calls = 0
    try:
        clean.clean()
        assert _NoGuard.calls == 0, "clean() removed the guard of a run holding the lock"
    finally:
        other.release()
    clean.clean()
    assert _NoGuard.calls == 1
