"""Parameter-server modes compared fairly, without root or gloo: each learning-rate rule
applies exactly its formula (the server's update, driven by hand-made gradients), the
spec fields reach the app's command line, and time to accuracy is computed correctly on
hand-made logs whose answer is known."""
from __future__ import annotations

import argparse
import json

import pandas as pd
import pytest
import torch

from incastlab import jobs
from incastlab.analysis import accuracy
from incastlab.apps import ps as app
from incastlab.apps.model import Digits, Trainer, build_model
from incastlab.jobs import ps as job_ps
from incastlab.spec import SpecError, load_spec

# ----------------------------------------------------------------------------- the rules


class Log:
    def __init__(self):
        self.records = []

    def write(self, event, **fields):
        self.records.append({"event": event, **fields})


def make_server(mode: str, rule: str, workers: int = 3, lr: float = 0.3,
                backup: int | None = None, eval_every: int = 1000):
    args = argparse.Namespace(mode=mode, lr=lr, lr_rule=rule, shards=1,
                              world_size=1 + workers, backup_workers=backup,
                              staleness=None, iterations=100, eval_every=eval_every,
                              timeout=5.0)
    trainer = Trainer(build_model(0.005, 0), Digits(0, workers, 8, 0))
    server = app.Server(args, Log(), trainer, 0, trainer.n_params)
    server.replies = []
    server.reply = lambda w, t, stale, ok: server.replies.append((w, stale, ok))
    return server


def grads(n_params: int, count: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    return [torch.randn(n_params, generator=gen) for _ in range(count)]


def assert_update(before, after, expected_delta):
    """after == before - delta up to float32 rounding of a few additions (|x| ~ 1)."""
    got = (before.double() - after.double())
    assert torch.allclose(got, expected_delta, rtol=1e-5, atol=1e-6), \
        float((got - expected_delta).abs().max())


@pytest.mark.parametrize("rule, scale", [
    ("mean", lambda lr, n, k: lr / k),        # the average of the k gradients
    ("per_worker", lambda lr, n, k: lr / n),  # lr / N each
    ("staleness", lambda lr, n, k: lr / k),   # nothing is stale in a backup step
])
def test_backup_step_applies_the_rule(rule, scale):
    # backup with N = 3, B = 1: an update of k = 2 gradients, where mean and per_worker
    # differ (lr/2 vs lr/3 per gradient)
    s = make_server("backup", rule, workers=3, lr=0.3, backup=1)
    g = grads(s.n, 2)
    before = s.params.clone()
    s.on_arrival_step(2, g[1], 0, 0, 0.0)
    assert torch.equal(s.params, before)  # one of two gradients: no update yet
    s.on_arrival_step(1, g[0], 0, 0, 0.0)
    c = scale(0.3, 3, 2)
    assert_update(before, s.params, c * (g[0].double() + g[1].double()))
    up = [r for r in s.log.records if r["event"] == "update"][0]
    assert up["from_ranks"] == [1, 2] and up["rates"] == pytest.approx([c, c], rel=1e-12)
    assert s.version == 1 and s.applied == 2


@pytest.mark.parametrize("rule, rate", [
    ("mean", lambda lr, n, s: lr),
    ("per_worker", lambda lr, n, s: lr / n),
    ("staleness", lambda lr, n, s: lr / (1 + s)),
])
def test_async_gradient_applies_the_rule_with_its_staleness(rule, rate):
    s = make_server("async", rule, workers=4, lr=0.5)
    g = grads(s.n, 3)
    # two fresh gradients (computed on versions 0 and 1), then one computed on version 0
    # while the server is at version 2: staleness 0, 0, 2
    expected = s.params.double().clone()
    for i, (w, g_version, stale) in enumerate([(1, 0, 0), (2, 1, 0), (3, 0, 2)]):
        s.on_arrival_async(w, g[i], g_version, 0, 0.0)
        expected -= rate(0.5, 4, stale) * g[i].double()
        assert s.replies[-1] == (w, stale, True)
    assert_update(expected, s.params, torch.zeros_like(expected))
    rates = [r["rates"][0] for r in s.log.records if r["event"] == "update"]
    assert rates == pytest.approx([rate(0.5, 4, st) for st in (0, 0, 2)], rel=1e-12)


def test_sync_mean_and_per_worker_are_the_same_step():
    # k = N in sync: lr x the average = lr / N x the sum (the reason per_worker is the
    # async default: N async gradients move the model as far as one sync step)
    out = {}
    for rule in ("mean", "per_worker"):
        s = make_server("sync", rule, workers=3)
        for w, g in zip((1, 2, 3), grads(s.n, 3), strict=True):
            s.on_arrival_step(w, g, 0, 0, 0.0)
        out[rule] = s.params
    assert torch.allclose(out["mean"], out["per_worker"], rtol=1e-6, atol=1e-7)


def test_lr_rates_formula_and_an_unknown_rule():
    assert app.lr_rates("mean", 0.6, 4, [0, 0, 0]) == pytest.approx([0.2] * 3)
    assert app.lr_rates("per_worker", 0.6, 4, [0, 5]) == pytest.approx([0.15, 0.15])
    assert app.lr_rates("staleness", 0.6, 4, [0, 2]) == pytest.approx([0.3, 0.1])
    with pytest.raises(ValueError, match="unknown learning-rate rule"):
        app.lr_rates("adam", 0.6, 4, [0])


def test_evaluations_every_k_gradients_and_at_the_end():
    s = make_server("async", "per_worker", workers=2, eval_every=2)
    initial = s.params.clone()
    s.maybe_evaluate()  # version 0, as run() does first
    for i, g in enumerate(grads(s.n, 5)):
        s.on_arrival_async(1 + i % 2, g, s.version, 0, 0.0)
        s.maybe_evaluate()
    s.maybe_evaluate(final=True)
    s.maybe_evaluate(final=True)  # the end is evaluated once
    evals = [r for r in s.log.records if r["event"] == "eval"]
    assert [e["applied"] for e in evals] == [0, 2, 4, 5]
    assert (evals[0]["accuracy"], evals[0]["loss"]) == s.trainer.evaluate(initial)
    assert (evals[-1]["accuracy"], evals[-1]["loss"]) == s.trainer.evaluate(s.params)
    assert [e["version"] for e in evals] == [0, 2, 4, 5]


def test_app_and_job_agree_on_rules_and_defaults():
    assert job_ps.LR_RULES == app.LR_RULES
    assert job_ps.DEFAULT_LR_RULE == app.DEFAULT_LR_RULE
    assert set(app.DEFAULT_LR_RULE) == set(app.MODES)
    args = app.parse_args(["--role", "server", "--rank", "0", "--world-size", "5",
                           "--master", "127.0.0.1:1", "--out", "/tmp/x", "--mode", "ssp",
                           "--staleness", "1"])
    assert args.lr_rule == "per_worker" and args.lr_rule_default and args.eval_every == 4


# ----------------------------------------------------------------------------- the spec


def _opt(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


IPS = {f"h{n}": f"10.0.{(n - 1) // 3 + 1}.{(n - 1) % 3 + 1}" for n in range(1, 10)}


def test_spec_fields_reach_the_command_line():
    spec = load_spec(None, ["topology.leaves=2", "topology.hosts_per_leaf=3",
                            "workload.workers=4", "workload.mode=async",
                            "workload.lr_rule=staleness", "workload.compute_ms=150",
                            "workload.eval_every=8", "workload.target_accuracy=0.8",
                            "workload.target_source='a measurement'"])
    plan = jobs.job_for("ps").launches(spec, IPS, "/tmp/w")
    for la in plan:
        assert _opt(la.argv, "--lr-rule") == ["staleness"]
        assert _opt(la.argv, "--compute-ms") == ["150"]
        assert _opt(la.argv, "--eval-every") == ["8"]
        app.parse_args(la.argv[3:])  # the app accepts what the job plans
    default = load_spec(None, ["workload.mode=sync"])
    argv = jobs.job_for("ps").launches(default, IPS, "/tmp/w")[0].argv
    assert "--lr-rule" not in argv and "--compute-ms" not in argv  # the app's defaults


@pytest.mark.parametrize("overrides, field", [
    (["workload.target_accuracy=0.8"], "workload.target_source: missing"),
    (["workload.shards=2", "workload.target_accuracy=0.8", "workload.target_source='x'"],
     "workload.target_accuracy: needs shards = 1"),
    (["workload.lr_rule=adam"], "workload.lr_rule: 'adam' is not one of mean"),
    (["workload.compute_ms=2000", "workload.timeout_s=10",
      "workload.stragglers=[{rank=0, factor=8}]"], "workload.compute_ms: 2000 ms x"),
])
def test_spec_refuses(overrides, field):
    with pytest.raises(SpecError) as e:
        load_spec(None, overrides)
    assert field in str(e.value), str(e.value)


# ----------------------------------------------------------------------------- time to accuracy


def workers_log(evals, file="0", start=None, updates=()):
    rows = []
    if start is not None:
        rows.append({"event": "start", "file": file, **start})
    rows += [{"event": "eval", "file": file, **e} for e in evals]
    rows += [{"event": "update", "file": file, **u} for u in updates]
    return pd.DataFrame(rows)


EVALS = [  # t (epoch s), applied, accuracy, loss: crosses 0.8 first at t = 107, applied 12
    {"t": 100.0, "version": 0, "applied": 0, "accuracy": 0.1, "loss": 2.3},
    {"t": 103.0, "version": 4, "applied": 4, "accuracy": 0.55, "loss": 1.9},
    {"t": 105.0, "version": 8, "applied": 8, "accuracy": 0.79, "loss": 1.2},
    {"t": 107.0, "version": 12, "applied": 12, "accuracy": 0.81, "loss": 0.9},
    {"t": 109.0, "version": 16, "applied": 16, "accuracy": 0.77, "loss": 0.95},
    {"t": 112.5, "version": 20, "applied": 20, "accuracy": 0.86, "loss": 0.7},
]


def test_time_to_target_is_the_first_evaluation_at_or_above_it():
    c = accuracy.curve(workers_log(EVALS[::-1]))  # order of lines does not matter
    assert list(c["t_s"]) == [0.0, 3.0, 5.0, 7.0, 9.0, 12.5]
    r = accuracy.reach(c, 0.8)
    assert r["reached"] and r["t_s"] == 7.0 and r["applied"] == 12 and r["version"] == 12
    assert r["best"] == 0.86 and r["best_t_s"] == 12.5
    assert (r["start_loss"], r["end_loss"], r["end_applied"]) == (2.3, 0.7, 20)
    exact = accuracy.reach(c, 0.79)  # "at or above": equal counts
    assert exact["t_s"] == 5.0 and exact["applied"] == 8
    miss = accuracy.reach(c, 0.9)
    assert miss["reached"] is False and miss["t_s"] is None and miss["best"] == 0.86
    none = accuracy.reach(c, None)
    assert none["reached"] is None and none["end_accuracy"] == 0.86


def test_no_evaluations_and_several_evaluating_files():
    assert accuracy.curve(pd.DataFrame({"event": ["start"]})).empty
    assert accuracy.reach(accuracy.curve(pd.DataFrame({"event": []})), 0.8)["reached"] is None
    two = pd.concat([workers_log(EVALS, "0"), workers_log(EVALS[:2], "1")])
    assert len(accuracy.curve(two)) == len(EVALS)  # the file with most evaluations


def test_lr_rule_summary_and_sentence():
    log = workers_log([], start={"lr_rule": "staleness", "lr_rule_default": False,
                                 "lr": 0.4, "workers": 4, "mode": "async"},
                      updates=[{"rates": [0.4]}, {"rates": [0.1]}, {"rates": [0.2]}])
    r = accuracy.lr_rule(log)
    assert (r["rule"], r["default"], r["gradients"]) == ("staleness", False, 3)
    assert r["rate_mean"] == pytest.approx(0.7 / 3) and r["rate_min"] == 0.1
    text = accuracy.rule_sentence(r)
    assert "staleness (set in the spec)" in text and "from 0.1 to 0.4" in text
    pw = accuracy.rule_sentence(accuracy.lr_rule(workers_log(
        [], start={"lr_rule": "per_worker", "lr_rule_default": True, "lr": 0.2,
                   "workers": 4, "mode": "async"}, updates=[{"rates": [0.05]}])))
    assert "the default for async" in pw and "0.2 / 4 = 0.05 per gradient" in pw


def _run(group, evals, stale):
    c = accuracy.curve(workers_log(evals))
    return {"group": group, "reach": accuracy.reach(c, 0.8),
            "staleness": pd.Series(stale, dtype=float), "iteration_s": 1.0}


def test_compare_says_who_reached_first_by_how_much_and_the_staleness():
    slow = [dict(e, t=100 + 3 * (e["t"] - 100)) for e in EVALS]  # 3x as long: 21 s
    never = [dict(e, accuracy=min(e["accuracy"], 0.7)) for e in EVALS]
    runs = [_run("mode=sync", slow, [0, 0, 0]), _run("mode=async", EVALS, [0, 2, 4]),
            _run("mode=backup", never, [0])]
    table = accuracy.compare_table(runs)
    assert list(table["reached"]) == [1, 1, 0]
    assert table.set_index("group").loc["mode=sync", "time_to_target_s"] == 21.0
    text = accuracy.compare_findings(table, 0.8, "a measurement")
    assert text[0].startswith("mode=async reached the target accuracy 0.8 first "
                              "(source: a measurement), 7 s after training started and "
                              "after 12 gradients applied; mode=sync 14 s later (21 s, "
                              "3× as long; 12 gradients)")
    assert text[1].startswith("mode=backup did not reach it in 1 run(s): best 0.700")
    assert text[-1] == ("Staleness paid (model versions a gradient was behind when "
                        "applied): mode=sync mean 0, max 0; mode=async mean 2, max 4; "
                        "mode=backup mean 0, max 0.")  # no rules known: no rule sentence
    assert "not stated" in accuracy.compare_findings(table, 0.8, None)[0]


def test_compare_section_writes_the_figure(tmp_path):
    spec = {"workload": {"target_accuracy": 0.8, "target_source": "a measurement"}}
    runs = [{"group": g, "spec": spec, "accuracy": accuracy.curve(workers_log(e)),
             "staleness": pd.Series([0.0]), "iteration_s": 1.0}
            for g, e in (("mode=sync", EVALS), ("mode=async", EVALS[:4]))]
    body, figs, summary = accuracy.compare_section(runs, tmp_path)
    assert figs and figs[0].exists() and "Time to accuracy" in body
    assert summary["target"] == 0.8 and json.dumps(summary, default=str)
    assert accuracy.compare_section([{"group": "x", "spec": {}, "accuracy": None}],
                                    tmp_path) == ("", [], {})


# ----------------------------------------------------------------------------- reports

T0 = 1_700_000_000.0
SPEC = """[workload]
kind = "ps"
mode = "{mode}"
workers = 4
target_accuracy = 0.8
target_source = "a measurement"
"""


def ps_run(path, mode, evals, stale, rule, rate):
    """A run directory whose PS logged `evals` (times relative to T0) and one update per
    staleness value, under learning-rate rule `rule` with `rate` per gradient."""
    from incastlab.analysis.synthetic import make_run_dir

    server = [{"event": "start", "role": "server", "rank": 0, "mode": mode, "t": T0,
               "lr": 0.2, "lr_rule": rule, "lr_rule_default": True, "workers": 4}]
    server += [{"event": "update", "version": i + 1, "t": T0 + i, "from_ranks": [1],
                "staleness": [s], "rates": [rate]} for i, s in enumerate(stale)]
    server += [dict(e, event="eval", t=T0 + e["t"] - 100.0) for e in evals]
    return make_run_dir(path, workers={0: server}, spec_text=SPEC.format(mode=mode), t0=T0)


def test_report_states_rule_rate_and_time_to_target(tmp_path):
    from incastlab.commands.common import build_report
    run = ps_run(tmp_path / "async", "async", EVALS, [0, 2, 4], "per_worker", 0.05)
    out = build_report(run)
    m = json.loads(out["metrics"].read_text())
    assert m["headline"]["time_to_target_s"] == 7.0
    assert m["headline"]["gradients_to_target"] == 12
    assert m["headline"]["lr_per_gradient"] == pytest.approx(0.05, rel=1e-12)  # a mean
    page = out["report"].read_text()
    assert "Learning-rate rule per_worker (the default for async): lr / N for every " \
           "gradient (N workers) = 0.2 / 4 = 0.05 per gradient" in page
    assert "Target 0.800 (source: a measurement): reached after 7 s and 12 gradients " \
           "applied" in page
    assert (out["report"].parent / "plots" / "accuracy.png").exists()
    # the job's own finding, at the top of the report: the time to the target
    assert any("reached after 7 s and 12 gradients applied" in f for f in m["findings"])
    never = ps_run(tmp_path / "sync", "sync", [dict(e, accuracy=0.5) for e in EVALS],
                   [0], "mean", 0.05)
    m = json.loads(build_report(never, plots=False)["metrics"].read_text())
    assert m["headline"]["time_to_target_s"] is None
    assert m["headline_na"]["time_to_target_s"] == \
        "the target 0.8 was not reached (best 0.500)"


def test_compare_of_modes_says_who_reached_the_target_first(tmp_path):
    from incastlab.commands.common import compare_runs
    slow = [dict(e, t=100 + 3 * (e["t"] - 100)) for e in EVALS]
    runs = [ps_run(tmp_path / "sync", "sync", slow, [0, 0], "mean", 0.05),
            ps_run(tmp_path / "async", "async", EVALS, [1, 5], "per_worker", 0.05)]
    out = compare_runs(runs, tmp_path / "cmp")
    page = out["report"].read_text()
    assert "mode=async reached the target accuracy 0.8 first (source: a measurement), " \
           "7 s after training started and after 12 gradients applied; mode=sync 14 s " \
           "later (21 s, 3× as long; 12 gradients)" in page
    assert "mode=sync mean 0, max 0; mode=async mean 3, max 5" in page
    assert "Learning-rate rules: mode=sync mean (0.05 per gradient); mode=async " \
           "per_worker (0.05 per gradient)." in page
    tta = json.loads(out["metrics"].read_text())["time_to_accuracy"]
    assert tta["target"] == 0.8 and len(tta["table"]) == 2
    assert any(p.name == "compare_accuracy.png" for p in out["plots"])
