"""Host and worker events without root (incastlab/hostevents.py, analysis/eventeffects.py):
every refusal of their fields, the cgroup paths and writes a throttle makes, the
runner's verdict when an event killed a process (per PS mode), and the iteration
times around an event on hand-built tables whose answer is known."""
from __future__ import annotations

import types
from pathlib import Path

import pandas as pd
import pytest

from incastlab import events as ev
from incastlab import hostevents as he
from incastlab.analysis import eventeffects
from incastlab.jobs.base import Launch
from incastlab.jobs.ps import PsJob
from incastlab.spec import SpecError, loads_spec

# 2 spines x 2 leaves x 2 hosts: PS on h1, workers h2, h3, h4 (rank 0, 1, 2)
SCENE = ev.Scene.of_shape(2, 2, 2, servers=("h1",), workers=("h2", "h3", "h4"), kind="ps",
                          iterations=10, workload=types.SimpleNamespace(timeout_s=30.0))
RING = ev.Scene.of_shape(2, 2, 2, servers=(), workers=("h1", "h2", "h3", "h4"),
                         kind="ring", iterations=10)


def problems(*tables, scene=SCENE) -> list[str]:
    raw = list(tables)
    return ev.event_problems(raw) or ev.scene_problems(raw, scene)


@pytest.mark.parametrize("table, message", [
    ({"action": "cpu_throttle", "host": "h3"},
     "events[0].share: missing; the fraction of one core, from 0.01 to 1 (e.g. 0.25)"),
    ({"action": "cpu_throttle", "host": "h3", "share": 0},
     "events[0].share: 0 is not in (0, 1] (a fraction of one core)"),
    ({"action": "cpu_throttle", "host": "h3", "share": 1.5},
     "events[0].share: 1.5 is not in (0, 1] (a fraction of one core)"),
    ({"action": "cpu_throttle", "host": "h3", "share": "half"},
     "events[0].share: 'half' is not a number"),
    ({"action": "cpu_throttle", "host": "h3", "share": 0.005},
     "events[0].share: 0.005 is below 0.01: the kernel grants at least 1 ms of CPU per "
     "period, and periods are at most 100 ms"),
    ({"action": "cpu_throttle", "host": "h9", "share": 0.5},
     "events[0].host: 'h9' is not a host of this fabric"),
    ({"action": "cpu_throttle", "host": 3, "share": 0.5},
     "events[0].host: 3 is not a host name like 'h3'"),
    ({"action": "worker_kill"},
     "events[0].host: missing; name the worker by host (e.g. 'h3') or by rank (as "
     "`incastlab check` lists it, servers first)"),
    ({"action": "worker_kill", "host": "h1"},
     "events[0].host: 'h1' runs no worker of the job (worker hosts: h2, h3, h4)"),
    ({"action": "worker_kill", "host": "h2", "rank": 1},
     "events[0].rank: given together with host; name the worker by one of them"),
    ({"action": "worker_pause", "rank": 4},
     "events[0].rank: 4 is not a worker rank from 1 to 3 (rank 0 is a server)"),
    ({"action": "worker_pause", "rank": 0},  # the PS: ranks are servers first
     "events[0].rank: 0 is not a worker rank from 1 to 3 (rank 0 is a server)"),
    ({"action": "worker_pause", "rank": -1},
     "events[0].rank: -1 is not an integer >= 0 (a worker's rank, as `incastlab check` "
     "lists it)"),
    ({"action": "worker_pause", "rank": 1, "duration_s": 30},
     "events[0].duration_s: 30 s is not below workload.timeout_s (30 s): the job would "
     "give the paused worker up as lost; pause it for less, or raise workload.timeout_s"),
    ({"action": "ps_kill", "host": "h2"},
     "events[0].host: 'h2' runs no PS of the job (PS hosts: h1)"),
    ({"action": "worker_kill", "host": "h2", "duration_s": 3},
     "events[0].duration_s: worker_kill cannot be undone, so it takes no duration_s"),
    ({"action": "cpu_throttle", "host": "h2", "share": 0.5, "cores": 1},
     "events[0].cores: unknown field; cpu_throttle has at_s, at_iteration, action, "
     "duration_s, host, share"),
])
def test_each_refusal_names_the_field(table, message):
    assert problems({"at_s": 1.0, **table}) == [message]


def test_ps_kill_needs_a_ps():
    assert problems({"at_s": 1.0, "action": "ps_kill"}, scene=RING) == \
        ["events[0].action: ps_kill needs a parameter server; workload kind ring has none"]


def test_resume_without_a_pause_and_a_second_kill_are_refused():
    assert problems({"at_s": 1.0, "action": "worker_resume", "rank": 2}) == \
        ["events[0].action: worker_resume at 1 s on paused h3, which no earlier event "
         "changed"]
    # the same worker named by host and by rank is one target
    out = problems({"at_s": 1.0, "action": "worker_kill", "host": "h3"},
                   {"at_s": 2.0, "action": "worker_kill", "rank": 2})
    assert out == ["events[1].action: worker_kill at 2 s on killed h3, which events[0] "
                   "(worker_kill at 1 s) already holds"]


def test_valid_host_events_pass():
    assert problems({"at_s": 1.0, "action": "cpu_throttle", "host": "h1", "share": 0.2,
                     "duration_s": 5.0},
                    {"at_s": 1.0, "action": "worker_pause", "rank": 3, "duration_s": 5.0},
                    {"at_iteration": 3, "action": "worker_pause", "host": "h2"},
                    {"at_iteration": 5, "action": "worker_resume", "rank": 1},
                    {"at_s": 9.0, "action": "ps_kill"}) == []


def test_spec_file_validates_host_events_against_its_placement():
    text = """
[topology]
kind = "leafspine"
spines = 2
leaves = 2
hosts_per_leaf = 2
[workload]
kind = "ps"
workers = 3
[[events]]
at_s = 2.0
action = "worker_kill"
host = "h1"
"""
    with pytest.raises(SpecError) as err:
        loads_spec(text)
    assert "events[0].host: 'h1' runs no worker of the job (worker hosts: " in str(err.value)


# --- cgroups ---------------------------------------------------------------------------

HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
UNIFIED = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"


def test_cpu_hierarchy_v1_when_cgroup2_lacks_cpu_and_v2_when_it_has_it():
    files = {Path("/sys/fs/cgroup/unified/cgroup.controllers"): "hugetlb\n",
             Path("/sys/fs/cgroup/cgroup.controllers"): "cpuset cpu io memory pids\n"}
    read = files.__getitem__
    assert he.find_cpu_hierarchy(HYBRID, read) == he.CpuHierarchy(1, Path("/sys/fs/cgroup/cpu"))
    assert he.find_cpu_hierarchy(UNIFIED, read) == he.CpuHierarchy(2, Path("/sys/fs/cgroup"))
    # cpuset and cpuacct alone are not the cpu controller
    only_cpuset = "\n".join(HYBRID.splitlines()[:3])
    assert he.find_cpu_hierarchy(only_cpuset, read) is None
    combined = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"
    assert he.find_cpu_hierarchy(combined, read).mount == Path("/sys/fs/cgroup/cpu,cpuacct")


def test_throttle_plan_v1_and_v2():
    v1 = he.throttle_plan(he.CpuHierarchy(1, Path("/cg/cpu")), "123-456", "h3", 0.25)
    assert v1.path == Path("/cg/cpu/incastlab/123-456/h3")
    assert v1.enable == ()
    assert v1.limits == (("cpu.cfs_period_us", "10000"), ("cpu.cfs_quota_us", "2500"))
    v2 = he.throttle_plan(he.CpuHierarchy(2, Path("/cg")), "123-456", "h3", 0.2)
    assert v2.limits == (("cpu.max", "2000 10000"),)
    assert v2.enable == (Path("/cg/cgroup.subtree_control"),
                         Path("/cg/incastlab/cgroup.subtree_control"),
                         Path("/cg/incastlab/123-456/cgroup.subtree_control"))
    # below 0.1 the period grows so that the quota stays at the kernel's 1 ms minimum
    for share, period in ((1.0, 10_000), (0.1, 10_000), (0.05, 20_000), (0.03, 33_334),
                          (0.01, 100_000)):
        plan = he.throttle_plan(he.CpuHierarchy(1, Path("/c")), "s", "h1", share)
        assert (plan.period_us, plan.quota_us) == (period, max(1000, round(share * period)))
    for bad in (0.0, 0.009, 1.01):
        with pytest.raises(ValueError):
            he.throttle_plan(he.CpuHierarchy(1, Path("/c")), "s", "h1", bad)


def test_cgroup_of_a_process():
    text = "9:name=systemd:/\n4:memory:/x\n2:cpuacct:/a\n1:cpu:/incastlab/s/h3\n0::/u\n"
    assert he.cgroup_of(text, he.CpuHierarchy(1, Path("/c"))) == "/incastlab/s/h3"
    assert he.cgroup_of(text, he.CpuHierarchy(2, Path("/c"))) == "/u"
    assert he.cgroup_of("1:cpu,cpuacct:/b\n", he.CpuHierarchy(1, Path("/c"))) == "/b"
    assert he.cgroup_of("4:memory:/x\n", he.CpuHierarchy(1, Path("/c"))) is None


def test_group_pids_reads_the_process_group_after_comm(tmp_path):
    def proc(pid, comm, pgrp):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) S 1 {pgrp} {pgrp} 0 -1\n")
    proc(10, "python", 10)
    proc(11, "pt_main thread) 7 7", 10)   # comm with spaces and a parenthesis
    proc(12, "tcpdump", 12)
    (tmp_path / "self").mkdir()
    assert he.group_pids(10, tmp_path) == [10, 11]
    assert he.group_pids(12, tmp_path) == [12]


def test_remove_cgroup_refuses_a_path_that_is_not_ours(tmp_path):
    with pytest.raises(ValueError):
        he.remove_cgroup(tmp_path / "system.slice" / "x" / "h3")


# --- the runner's verdict ----------------------------------------------------------------

LAUNCHES = [Launch("h1", [], 0, "server", False)] + \
    [Launch(h, [], r, "worker", True) for r, h in ((1, "h2"), (2, "h3"), (3, "h4"))]
KILL = "events[0] (worker_kill at 3 s)"


def tolerated(mode: str, backup: int | None = None) -> int:
    w = types.SimpleNamespace(mode=mode, workers=3, backup_workers=backup)
    return PsJob().tolerates_lost_workers(w)


def test_tolerated_losses_per_ps_mode():
    assert [tolerated("sync"), tolerated("backup", 1), tolerated("backup", 2),
            tolerated("async"), tolerated("ssp")] == [0, 1, 2, 2, 2]


def err(la):
    return f"stderr of {la.rank}"


def test_sync_with_a_killed_worker_fails_with_the_servers_reason():
    t = tolerated("sync")
    # the kill alone is no verdict: the others are still running
    assert he.exit_verdict(LAUNCHES, [None, None, -9, None], {2: KILL}, t, err) is None
    assert he.lost_beyond_tolerance(LAUNCHES, {2: KILL}, t) == \
        "1 of its processes killed (worker rank 2 on h3 by events[0] (worker_kill at 3 s)); " \
        "the job tolerates 0 lost"
    assert he.exit_verdict(LAUNCHES, [1, None, -9, None], {2: KILL}, t, err) == (
        "failed", "1 of its processes killed (worker rank 2 on h3 by events[0] (worker_kill "
        "at 3 s)); the job tolerates 0 lost: server rank 0 on h1 exited with status 1: "
        "stderr of 0")


@pytest.mark.parametrize("mode, backup", [("backup", 1), ("async", None), ("ssp", None)])
def test_a_tolerated_kill_lets_the_run_complete(mode, backup):
    t = tolerated(mode, backup)
    assert he.lost_beyond_tolerance(LAUNCHES, {2: KILL}, t) is None
    assert he.exit_verdict(LAUNCHES, [None, 0, -9, None], {2: KILL}, t, err) is None
    assert he.exit_verdict(LAUNCHES, [0, 0, -9, 0], {2: KILL}, t, err) == ("complete", None)


def test_backup_losing_more_than_its_backups_is_doomed():
    killed = {2: KILL, 3: "events[1] (worker_kill at 4 s)"}
    assert he.lost_beyond_tolerance(LAUNCHES, killed, tolerated("backup", 1)).startswith(
        "2 of its processes killed (worker rank 2 on h3 by events[0] (worker_kill at 3 s), "
        "worker rank 3 on h4 by events[1] (worker_kill at 4 s)); the job tolerates 1 lost")


def test_a_killed_ps_is_never_tolerated():
    killed = {0: "events[0] (ps_kill at 2 s)"}
    assert he.exit_verdict(LAUNCHES, [-9, 1, None, None], killed, tolerated("async"), err) == (
        "failed", "server rank 0 on h1 was killed by events[0] (ps_kill at 2 s); the job "
        "cannot go on without it: worker rank 1 on h2 exited with status 1: stderr of 1")


def test_without_kills_a_signalled_worker_is_a_failure_as_before():
    assert he.exit_verdict(LAUNCHES, [None, -9, None, None], {}, 2, err) == (
        "failed", "worker rank 1 on h2 exited with status -9: stderr of 1")
    assert he.exit_verdict(LAUNCHES, [0, 0, 0, 0], {}, 0, err) == ("complete", None)
    assert he.exit_verdict(LAUNCHES, [0, 0, None, 0], {}, 0, err) is None


# --- iteration times around an event ------------------------------------------------------

def _iterations(rows):
    it = pd.DataFrame(rows, columns=["host", "rank", "iteration", "t_start", "t_end"])
    it["duration_s"] = it["t_end"] - it["t_start"]
    it["compute_s"] = 0.0
    return it


def test_iteration_windows_on_a_hand_built_throttle():
    """Worker h3 (rank 2) throttled from t = 100 to 110: its iterations take 1 s before
    and after, 4 s during; h2's take 1 s, then wait for h3 (4 s steps) during."""
    rows = []
    t = 90.0
    for i, (d3, d2) in enumerate([(1, 1)] * 10 + [(4, 4)] * 2 + [(1, 1)] * 3):
        rows.append(("h3", 2, i, t, t + d3))
        rows.append(("h2", 1, i, t, t + d2 - 0.5 * (d2 > 1)))  # h2 ready earlier
        t += max(d3, d2)
    it = _iterations(rows)
    # h3's t_push: the gradient ready last during the throttle is h3's
    it["t_push"] = it["t_end"] - 0.1
    it["push_s"] = 0.05
    events = pd.DataFrame([{"index": 0, "action": "cpu_throttle", "t": 100.0, "t_undo": 108.0,
                            "ok": True, "params": {"host": "h3", "share": 0.2},
                            "result": {"host": "h3"}}])
    out = eventeffects.iteration_windows(events, it).iloc[0]
    assert (out["start"], out["end"]) == (100.0, 108.0)
    assert (out["target_before_s"], out["target_before_n"]) == (1.0, 10)
    assert (out["target_during_s"], out["target_during_n"]) == (4.0, 2)
    assert (out["target_after_s"], out["target_after_n"]) == (1.0, 3)
    assert (out["others_during_s"], out["others_before_s"]) == (3.5, 1.0)
    assert (out["steps_during"], out["straggler_steps_during"]) == (2, 2)
    text = eventeffects.sentence(out.to_dict(), t0=90.0)
    assert text == ("events[0] cpu_throttle on h3 at 10.0 s until 18.0 s: its iterations took "
                    "1 s before, 4 s during, 1 s after (the other hosts' 1 / 3.5 / 1 s); h3 "
                    "was the straggler (its gradient ready last) in 2 of the 2 steps during it.")


def test_windows_resume_ends_a_pause_and_a_kill_never_ends():
    events = pd.DataFrame([
        {"index": 0, "action": "worker_pause", "t": 10.0, "t_undo": 50.0, "ok": True,
         "params": {"rank": 1}, "result": {"host": "h3"}},
        {"index": 1, "action": "worker_resume", "t": 14.0, "t_undo": float("nan"), "ok": True,
         "params": {"host": "h3"}, "result": {"host": "h3"}},
        {"index": 2, "action": "worker_kill", "t": 20.0, "t_undo": float("nan"), "ok": True,
         "params": {"host": "h4"}, "result": {"host": "h4"}},
        {"index": 3, "action": "link_down", "t": 21.0, "t_undo": 22.0, "ok": True,
         "params": {"link": "lf1-eth3"}},
        {"index": 4, "action": "cpu_throttle", "t": 23.0, "t_undo": float("nan"), "ok": False,
         "params": {"host": "h2"}},
    ])
    assert eventeffects.windows(events) == [
        {"index": 0, "action": "worker_pause", "host": "h3", "start": 10.0, "end": 14.0},
        {"index": 2, "action": "worker_kill", "host": "h4", "start": 20.0, "end": None}]


def test_the_verdict_quotes_the_apps_error_line_not_gloos_tail():
    from incastlab.hostevents import _error_line
    text = ("incastlab.apps.ps: error: rank 0: worker rank 2 lost; mode sync needs every "
            "worker's gradient each step: receive gradient\n"
            + "[W gloo] Connection reset by peer. " * 20 + "GLHF!\n")
    assert _error_line(text).startswith("incastlab.apps.ps: error: rank 0: worker rank 2 lost")
    assert _error_line("no app line here") == "no app line here"
