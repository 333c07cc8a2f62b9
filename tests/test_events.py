"""[[events]] without root (issue 15 item 1): validation (every refusal message), time
order, the spec's round trip and sweeps, and the scheduler with actions registered
here (fake ones that record their calls, so the timing and teardown rules are tested
without a fabric)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from incastlab import events
from incastlab.spec import SpecError, expand_sweep, loads_spec

ALL = ", ".join(events.actions())  # ours and the host actions (incastlab.hostevents)
SCENE = events.Scene.of_shape(2, 2, 2, workers=("h1", "h3", "h2", "h4"), kind="ring",
                              iterations=20)


def problems(*raw):
    """Table problems, then (when there are none) the scene's."""
    found = events.event_problems(list(raw))
    return found or events.scene_problems(list(raw), SCENE)


# --- every refusal, by field -------------------------------------------------------------

@pytest.mark.parametrize("raw,message", [
    ({"action": "link_down", "link": "lf1-eth3"},
     "events[0]: missing at_s (seconds since the workload started) or at_iteration (the "
     "job's progress count); give one"),
    ({"at_s": 1, "at_iteration": 2, "action": "link_down", "link": "lf1-eth3"},
     "events[0].at_s: given together with events[0].at_iteration = 2; give one, not both"),
    ({"at_s": -1, "action": "link_down", "link": "lf1-eth3"},
     "events[0].at_s: -1 is not a number from 0 to 86400.0 (s)"),
    ({"at_s": "soon", "action": "link_down", "link": "lf1-eth3"},
     "events[0].at_s: 'soon' is not a number from 0 to 86400.0 (s)"),
    ({"at_iteration": 0, "action": "link_down", "link": "lf1-eth3"},
     "events[0].at_iteration: 0 is not an integer from 1 to 1000000000"),
    ({"at_iteration": 2.5, "action": "link_down", "link": "lf1-eth3"},
     "events[0].at_iteration: 2.5 is not an integer from 1 to 1000000000"),
    ({"at_s": 1, "action": "link_down", "link": "lf1-eth3", "duration_s": 0},
     "events[0].duration_s: 0 is not a number > 0 and <= 86400.0 (s)"),
    ({"at_s": 1, "link": "lf1-eth3"},
     f"events[0].action: missing; allowed: {ALL}"),
    ({"at_s": 1, "action": "lnk_down", "link": "lf1-eth3"},
     f"events[0].action: 'lnk_down' is not one of {ALL} (did you mean 'link_down'?)"),
    ({"at_s": 1, "action": "link_down", "lnk": "lf1-eth3"},
     "events[0].lnk: unknown field (did you mean 'link'?); link_down has at_s, "
     "at_iteration, action, duration_s, link"),
    ({"at_s": 1, "action": "link_up", "link": "lf1-eth3", "duration_s": 2},
     "events[0].duration_s: link_up cannot be undone, so it takes no duration_s"),
    ({"at_s": 1, "action": "link_down"},
     "events[0].link: missing; give an interface like lf1-eth3 or two linked nodes like "
     "[\"lf1\", \"sp2\"]"),
    ({"at_s": 1, "action": "link_down", "link": "lf1-eth9"},
     "events[0].link: 'lf1-eth9' is not an interface of this fabric (did you mean "
     "'lf1-eth4'?); give an interface like lf1-eth3 or h1-eth0, or two linked nodes like "
     "[\"lf1\", \"sp2\"]"),
    ({"at_s": 1, "action": "link_down", "link": ["lf1", "sp7"]},
     "events[0].link: 'sp7' is not a node of this fabric (did you mean 'sp2'?)"),
    ({"at_s": 1, "action": "link_down", "link": ["lf1", "lf2"]},
     "events[0].link: ['lf1', 'lf2']: lf1 and lf2 are not linked"),
    ({"at_s": 1, "action": "link_down", "link": 3},
     "events[0].link: 3 is not an interface like lf1-eth3 or h1-eth0, or two linked nodes "
     "like [\"lf1\", \"sp2\"]"),
    ({"at_s": 1, "action": "switch_down"},
     "events[0].switch: missing; give a switch name like sp1 or lf2"),
    ({"at_s": 1, "action": "switch_down", "switch": "sp3"},
     "events[0].switch: 'sp3' is not a switch of this fabric (sp1, sp2, lf1, lf2)"),
    ({"at_iteration": 21, "action": "switch_down", "switch": "sp1"},
     "events[0].at_iteration: 21 is beyond the job's 20 steps; the event would never happen"),
])
def test_each_refusal_names_field_value_and_what_is_allowed(raw, message):
    assert problems(raw) == [message]


def test_not_tables():
    assert events.event_problems({"at_s": 1}) == [
        "events: {'at_s': 1} is not an array of tables; write each event as [[events]]"]
    assert events.event_problems([3]) == [
        "events[0]: 3 is not a table; write each event as [[events]]"]


@pytest.mark.parametrize("raw,message", [
    ([{"at_s": 1, "action": "link_down", "link": ["lf2", "sp1"]},
      {"at_s": 2, "action": "link_down", "link": "sp1-eth2"}],
     "events[1].action: link_down at 2 s on link lf2-sp1, which events[0] (link_down at "
     "1 s) already holds"),
    ([{"at_s": 1, "action": "link_up", "link": "lf1-eth3"}],
     "events[0].action: link_up at 1 s on link lf1-sp1, which no earlier event changed"),
    ([{"at_s": 1, "action": "link_down", "link": "lf1-eth3", "duration_s": 5},
      {"at_s": 3, "action": "link_up", "link": "lf1-eth3"}],
     "events[1].action: link_up at 3 s on link lf1-sp1 while events[0]'s duration_s still "
     "holds it; give the duration_s or this event, not both"),
    ([{"at_s": 1, "action": "link_down", "link": "lf1-eth3", "duration_s": 5},
      {"at_s": 3, "action": "link_down", "link": "lf1-eth3"}],
     "events[1].action: link_down at 3 s on link lf1-sp1, which events[0] (link_down at "
     "1 s) already holds (its duration_s lasts until 6 s)"),
    ([{"at_s": 1, "action": "switch_down", "switch": "sp1"},
      {"at_iteration": 3, "action": "switch_up", "switch": "sp1"}],
     "events[0]: the events on switch sp1 mix at_s and at_iteration, which cannot be "
     "ordered against each other; use one clock per target"),
])
def test_overlaps_on_one_target_are_refused(raw, message):
    assert problems(*raw) == [message]


def test_valid_sequences_pass_in_any_written_order():
    # written out of order: the check orders by time
    assert problems({"at_s": 9, "action": "link_up", "link": ["sp1", "lf2"]},
                    {"at_s": 4, "action": "link_down", "link": ["lf2", "sp1"]},
                    {"at_s": 1, "action": "link_down", "link": "h1-eth0", "duration_s": 2},
                    {"at_s": 3, "action": "link_down", "link": "lf1-eth1"},
                    {"at_iteration": 2, "action": "switch_down", "switch": "sp2"},
                    {"at_iteration": 9, "action": "switch_up", "switch": "sp2"}) == []


def test_normalized_sorts_seconds_then_iterations_keeping_the_written_index():
    raw = [{"at_iteration": 3, "action": "switch_down", "switch": "sp1"},
           {"at_s": 9.0, "action": "link_up", "link": "lf1-eth3"},
           {"at_s": 2, "action": "link_down", "link": "lf1-eth3"}]
    got = events.normalized(raw)
    assert [(e.index, e.action) for e in got] == [(2, "link_down"), (1, "link_up"),
                                                  (0, "switch_down")]
    assert got[0].at_s == 2.0 and isinstance(got[0].at_s, float)
    assert got[0].to_dict() == {"at_s": 2.0, "action": "link_down", "link": "lf1-eth3"}


# --- through the spec ----------------------------------------------------------------------

SPEC = """
[workload]
kind = "ring"
workers = 4
iterations = 20
[[events]]
at_s = 9.0
action = "link_up"
link = ["lf2", "sp1"]
[[events]]
at_s = 4
action = "link_down"
link = ["lf2", "sp1"]
"""


def test_spec_round_trip_sorted_and_equal():
    spec = loads_spec(SPEC)
    assert [(e.index, e.action, e.at_s) for e in spec.events] == [
        (1, "link_down", 4.0), (0, "link_up", 9.0)]
    text = spec.to_toml()
    assert "[[events]]" in text
    assert loads_spec(text) == spec


def test_spec_errors_name_the_event_and_every_sweep_point_keeps_the_events():
    with pytest.raises(SpecError) as err:
        loads_spec(SPEC.replace('action = "link_up"', 'action = "link_upp"'))
    assert "events[0].action: 'link_upp' is not one of" in str(err.value)
    # the fabric's names: a one-spine fabric has no sp2
    bad = SPEC.replace('["lf2", "sp1"]', '["lf2", "sp2"]') + '[topology]\nspines = 1\n'
    with pytest.raises(SpecError) as err:
        loads_spec(bad)
    assert "events[0].link: 'sp2' is not a node of this fabric" in str(err.value)
    ok = loads_spec(SPEC + '[routing]\npolicy = ["ecmp", "single"]\n', allow_sweep=True)
    runs = expand_sweep(ok)
    assert len(runs) == 2 and all(point.events == ok.events for _label, point in runs)


def test_check_prints_the_events(tmp_path, capsys):
    from incastlab.commands import check
    path = tmp_path / "s.toml"
    path.write_text(SPEC)
    assert check.run(type("A", (), {"spec": str(path), "overrides": []})()) == 0
    out = capsys.readouterr().out
    assert out.count("[[events]]") == 2
    assert out.index('action = "link_down"') < out.index('action = "link_up"')


# --- the scheduler -------------------------------------------------------------------------

@pytest.fixture
def fake_actions():
    """Two actions that record their calls: 'mark' (undoable; apply fails when the
    event has fail = true) and 'note' (nothing to undo)."""
    calls = []

    def apply(ctx, ev):
        calls.append(("apply", ev.index, time.monotonic()))
        if ev.get("fail"):
            raise RuntimeError("no such thing")
        return {"did": ev.index}

    def undo(ctx, ev):
        calls.append(("undo", ev.index, time.monotonic()))

    fields = {"fail": "fail on purpose"}
    events.actions()
    events.register_action("mark", lambda ev, sc: [], apply, undo, fields=fields)
    events.register_action("note", lambda ev, sc: [], apply, None, fields=fields)
    yield calls
    events.unregister_action("mark")
    events.unregister_action("note")


def run_scheduler(tmp_path, evs, progress=None, wait_s=1.0, stop_when=None):
    ctx = events.EventContext(fabric=None, net=None, fmap=None, run_dir=Path(tmp_path))
    sch = events.Scheduler(evs, ctx, progress)
    sch.start()
    end = time.monotonic() + wait_s
    while time.monotonic() < end and not (stop_when and stop_when()):
        time.sleep(0.01)
    sch.stop()
    sch.restore()
    rows = [json.loads(line) for line in (Path(tmp_path) / "events.jsonl").read_text()
            .splitlines()]
    return sch, rows


def ev(index, action="mark", **kw):
    params = {k: kw.pop(k) for k in list(kw) if k == "fail"}
    return events.Event(action=action, params=params, index=index, **kw)


def test_fires_in_time_order_and_undoes_after_duration_and_at_teardown(tmp_path,
                                                                         fake_actions):
    t0 = time.monotonic()
    # stopped once the four calls happened (a deadline instead would race a slow thread);
    # wait_s only ends a scheduler that never gets there
    sch, rows = run_scheduler(tmp_path, [ev(0, at_s=0.3), ev(1, at_s=0.1, duration_s=0.1),
                                         ev(2, "note", at_s=0.2)], wait_s=10,
                              stop_when=lambda: len(fake_actions) >= 4)
    order = [(kind, i) for kind, i, _t in fake_actions]
    # 1 applied at 0.1 and undone 0.1 s later (at ~0.2, with 2); 0 at 0.3; teardown
    # undoes 0 (started, not undone); 2 has no undo
    assert order[0] == ("apply", 1) and order[-1] == ("undo", 0)
    assert sorted(order[1:3]) == [("apply", 2), ("undo", 1)] and order[3] == ("apply", 0)
    times = {(k, i): t - t0 for k, i, t in fake_actions}
    assert times[("apply", 1)] == pytest.approx(0.1, abs=0.1)
    assert times[("undo", 1)] - times[("apply", 1)] == pytest.approx(0.1, abs=0.1)
    assert times[("apply", 0)] == pytest.approx(0.3, abs=0.1)
    applied = [r for r in rows if r["kind"] == "apply"]
    assert [r["index"] for r in applied] == [1, 2, 0]
    for r in applied:  # the actual time since start is within the poll of the plan
        assert r["t_rel_s"] - r["planned"]["at_s"] == pytest.approx(0.0, abs=0.1)
        assert r["ok"] and r["result"] == {"did": r["index"]}
    assert [(r["index"], r["why"]) for r in rows if r["kind"] == "undo"] == [
        (1, "duration"), (0, "teardown")]
    assert sch.error is None


def test_at_iteration_waits_for_the_progress_count(tmp_path, fake_actions):
    count = {"n": 0}

    def progress():
        count["n"] += 1  # one more step every poll
        return count["n"] // 5

    _sch, rows = run_scheduler(tmp_path, [ev(0, at_iteration=3)], progress, wait_s=10,
                               stop_when=lambda: fake_actions)
    assert [k for k, _i, _t in fake_actions] == ["apply", "undo"]
    assert count["n"] >= 15  # not before progress() said 3


def test_a_failed_apply_is_recorded_fails_the_run_and_is_still_undone(tmp_path,
                                                                      fake_actions):
    sch, rows = run_scheduler(tmp_path, [ev(0, at_s=0.0, fail=True), ev(1, at_s=0.05)],
                              wait_s=10, stop_when=lambda: len(fake_actions) >= 2)
    assert sch.error == "events[0] (mark at 0 s) failed: RuntimeError: no such thing"
    bad = [r for r in rows if r["kind"] == "apply" and r["index"] == 0][0]
    assert bad["ok"] is False and bad["error"] == "RuntimeError: no such thing"
    # teardown restores even what failed halfway, last first
    assert [(r["index"], r["why"]) for r in rows if r["kind"] == "undo"] == [
        (1, "teardown"), (0, "teardown")]


def test_interrupted_mid_action_is_restored_and_the_rest_never_fire(tmp_path, fake_actions):
    """stop() while an apply runs: it finishes, teardown undoes it; later events are
    recorded as never fired."""
    inside, release = threading.Event(), threading.Event()

    def slow_apply(ctx, e):
        inside.set()
        release.wait(2)
        fake_actions.append(("apply", e.index, time.monotonic()))

    events.register_action("slow", lambda e, s: [], slow_apply,
                           lambda c, e: fake_actions.append(("undo", e.index, 0)))
    try:
        ctx = events.EventContext(fabric=None, net=None, fmap=None, run_dir=Path(tmp_path))
        sch = events.Scheduler([ev(0, "slow", at_s=0.0), ev(1, at_s=5.0)], ctx)
        sch.start()
        assert inside.wait(2)
        threading.Timer(0.1, release.set).start()
        sch.stop()       # joins the thread: the apply in progress completes first
        sch.restore()
        sch.restore()    # twice is harmless
    finally:
        events.unregister_action("slow")
    assert [(k, i) for k, i, _t in fake_actions] == [("apply", 0), ("undo", 0)]
    rows = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(r["kind"], r.get("index")) for r in rows] == [
        ("start", None), ("apply", 0), ("undo", 0), ("not_fired", 1)]


def test_register_twice_is_refused():
    events.actions()
    with pytest.raises(ValueError, match="event action 'link_down' is registered already"):
        events.register_action("link_down", lambda e, s: [], lambda c, e: None, None)


# --- the network actions' commands, without a fabric -----------------------------------

@pytest.fixture
def commands(monkeypatch):
    """Record the commands netevents would run; OVS answers with one controller."""
    from incastlab import netevents
    ran = []
    targets = {"sp1": ["tcp:127.0.0.1:6653"]}

    def get(bridge):
        return list(targets.get(bridge, []))

    def run(argv):
        ran.append(list(argv))
        if argv[:2] == ["ovs-vsctl", "del-controller"]:
            targets[argv[2]] = []
        elif argv[:2] == ["ovs-vsctl", "set-controller"]:
            targets[argv[2]] = argv[3:]
    monkeypatch.setattr(netevents, "_run", run)
    monkeypatch.setattr(netevents, "controller_targets", get)
    return ran, targets


def ctx_on(tmp_path):
    from tests.test_controller_units import fmap
    return events.EventContext(fabric=None, net=None, fmap=fmap(2, 2, 2), run_dir=tmp_path)


def test_link_actions_set_the_switch_ends_only(tmp_path, commands):
    from incastlab import netevents
    ran, _targets = commands
    ctx = ctx_on(tmp_path)
    got = netevents.link_down(ctx, events.Event("link_down", params={"link": ["sp1", "lf2"]}))
    assert got == {"down": ["sp1-eth2", "lf2-eth3"]}
    # a host link: the leaf's port only; the host's own interface keeps its routes
    got = netevents.link_down(ctx, events.Event("link_down", params={"link": "h3-eth0"}))
    assert got == {"down": ["lf2-eth1"]}
    netevents.link_up(ctx, events.Event("link_up", params={"link": "lf2-eth1"}))
    assert ran == [["ip", "link", "set", "dev", "sp1-eth2", "down"],
                   ["ip", "link", "set", "dev", "lf2-eth3", "down"],
                   ["ip", "link", "set", "dev", "lf2-eth1", "down"],
                   ["ip", "link", "set", "dev", "lf2-eth1", "up"]]


def test_switch_down_cuts_control_and_ports_and_up_restores_both(tmp_path, commands):
    from incastlab import netevents
    ran, targets = commands
    ctx = ctx_on(tmp_path)
    down = events.Event("switch_down", params={"switch": "sp1"}, index=0)
    got = netevents.switch_down(ctx, down)
    assert got == {"controllers_removed": ["tcp:127.0.0.1:6653"],
                   "down": ["sp1-eth1", "sp1-eth2"]}
    assert ran == [["ip", "link", "set", "dev", "sp1-eth1", "down"],
                   ["ip", "link", "set", "dev", "sp1-eth2", "down"],
                   ["ovs-vsctl", "del-controller", "sp1"]]  # the data plane first
    assert targets["sp1"] == []
    ran.clear()
    # brought back by a switch_up event of its own: the targets switch_down removed
    netevents.switch_up(ctx, events.Event("switch_up", params={"switch": "sp1"}, index=1))
    assert ran == [["ip", "link", "set", "dev", "sp1-eth1", "up"],
                   ["ip", "link", "set", "dev", "sp1-eth2", "up"],
                   ["ovs-vsctl", "set-controller", "sp1", "tcp:127.0.0.1:6653"]]
    ran.clear()
    netevents.switch_up(ctx, down)  # teardown's undo again: ports up, targets already right
    assert ["ovs-vsctl", "set-controller", "sp1", "tcp:127.0.0.1:6653"] not in ran
