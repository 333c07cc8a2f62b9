"""The declared headline metrics (analysis/metrics.py): one list read by metrics.json,
report.html, summary.md, compare and the CLI; n/a with a reason; extensible by a job."""
import html
import json
import re
from types import SimpleNamespace

import pandas as pd
import pytest

from incastlab.analysis import metrics
from incastlab.commands.common import compare_runs
from incastlab.analysis.metrics import Metric
from incastlab.commands.common import build_report
from incastlab.analysis.synthetic import make_demo_run, make_run_dir
from incastlab.commands.common import compare_summary, short_summary
from incastlab.jobs import JOBS

T0 = 1_700_000_000.0
# metrics.json `headline` keys as tests, compare and users' scripts read them: kept stable
STABLE_KEYS = ["iteration_time_mean_s", "iteration_time_median_s", "iteration_time_p95_s",
               "step_time_mean_s", "tc_drops", "capture_losses", "retransmissions",
               "kernel_retrans_segs", "rtos", "kernel_timeouts", "goodput_mbps",
               "rounds_with_rto", "throughput_mbps", "incast_episodes", "spine_max_mean",
               "staleness_mean", "final_accuracy", "final_loss",
               # what the network cost the job (analysis/network_cost.py)
               "bound_s", "comm_over_bound", "network_cost_s", "rto_stall_s",
               "loss_recovery_s"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "demo"
    truth = make_demo_run(run)
    return run, truth, build_report(run)


def test_declarations_are_complete_and_keys_stable():
    # the built-in keys in their order, wherever they are declared (a kind's own, e.g. the
    # incast goodput, in its job module, placed with Metric.after)
    declared = [m for m in metrics.all_metrics(JOBS) if m.name in STABLE_KEYS]
    assert [m.name for m in declared] == STABLE_KEYS
    for m in declared:
        assert m.label and m.unit is not None and m.meaning.endswith(".")
        assert "\n" not in m.meaning and len(m.meaning) <= 240, m.name  # one line
        assert set(m.inputs) <= set(metrics.INPUTS), m.name
        assert m.kinds == () or set(m.kinds) <= {"ps", "ring", "incast", metrics.TRAINING}
    # what compare plots and the CLI prints of the built-in list (job plugins add their
    # own through Job.metrics()); losses are plotted from the captures, not tc's counter
    headline = set(STABLE_KEYS)
    assert {m.name for m in metrics.plotted(JOBS) if m.name in headline} == {
        "iteration_time_mean_s", "goodput_mbps", "throughput_mbps", "retransmissions",
        "rtos", "capture_losses", "comm_over_bound", "network_cost_s"}
    assert [m.name for m in metrics.for_cli(JOBS) if m.name in headline] == [
        "iteration_time_mean_s", "tc_drops", "capture_losses", "retransmissions", "rtos",
        "goodput_mbps", "final_accuracy", "bound_s", "comm_over_bound", "network_cost_s",
        "rto_stall_s"]


def test_formatting():
    drops, it = metrics.by_name("tc_drops", JOBS), metrics.by_name("iteration_time_mean_s", JOBS)
    assert drops.text(12345.0) == "12,345" and drops.text_with_unit(1.0) == "1 packet"
    assert drops.text_with_unit(6.0) == "6 packets" and drops.text(None) == "n/a"
    assert it.text_with_unit(0.13916) == "0.139 s" and it.text(float("nan")) == "n/a"
    assert metrics.by_name("spine_max_mean", JOBS).text_with_unit(3.0) == "3"  # a ratio: no unit


def _fake(missing=None, **metrics_):
    return SimpleNamespace(metrics=metrics_, tables={}, missing=missing or {}, problems=[])


def test_missing_input_makes_a_metric_na_with_the_reason():
    m = Metric("x_s", "x", "s", "An x.", compute=lambda a: 5.0, inputs=("queues",))
    metrics.register(m)
    try:
        got = {r.metric.name: r for r in metrics.evaluate(
            _fake({"queues": "no queues.csv (or it is empty)"}), "ps")}
        assert got["x_s"].value is None
        assert got["x_s"].reason == "no queues.csv (or it is empty)"
        assert got["x_s"].text == "n/a"
        after = {r.metric.name: r for r in metrics.evaluate(_fake(), "ps")}
        assert after["x_s"].value == 5.0  # input there: a value
    finally:
        metrics.unregister("x_s")


def test_a_failing_metric_is_na_and_reported():
    def boom(a):
        raise ZeroDivisionError("division by zero")
    metrics.register(Metric("boom", "boom", "", "Fails.", compute=boom))
    try:
        fake = _fake()
        r = [r for r in metrics.evaluate(fake, None) if r.metric.name == "boom"][0]
        assert r.value is None and r.reason == "could not be computed (ZeroDivisionError)"
        assert fake.problems == ["metric boom could not be computed (ZeroDivisionError: "
                                 "division by zero)"]
    finally:
        metrics.unregister("boom")


def test_reasons_in_metrics_json(demo, tmp_path):
    _, _, paths = demo
    m = json.loads(paths["metrics"].read_text())
    # the built-in keys first, in order; the job plugins' own metrics follow
    assert list(m["headline"])[:len(STABLE_KEYS)] == STABLE_KEYS and m["run"]["kind"] == "ps"
    # a PS run measures everything but the incast benchmark's two numbers
    # (the synthetic run records no placement, so its job has no bound to measure against)
    no_bound = ("no bound: the run lacks its placement or fabric.json (or the job has no "
                "cost model)")
    assert {k: v for k, v in m["headline_na"].items() if k in STABLE_KEYS} == {
                                "goodput_mbps": "not measured in ps runs",
                                "rounds_with_rto": "not measured in ps runs",
                                **{k: no_bound for k in STABLE_KEYS[-5:]}}
    bare = make_run_dir(tmp_path / "bare", status="aborted")
    b = json.loads(build_report(bare, plots=False)["metrics"].read_text())
    assert all(v is None for v in b["headline"].values())
    na = b["headline_na"]
    assert na["tc_drops"] == "no queues.csv (or it is empty)"
    assert na["retransmissions"] == "no readable captures in pcap/"
    assert na["kernel_timeouts"] == "no counters/*.json"
    assert na["final_accuracy"] == "no workers/*.jsonl"
    # incast episodes need queue samples, captures and the fabric map: not 0 without them
    assert na["incast_episodes"].startswith("no queues.csv (or it is empty); no readable "
                                            "captures in pcap/; no fabric.json")


def _headline_rows(page: str) -> dict[str, list[str]]:
    """{metrics.json key: [label, value, unit, meaning]} from report.html's headline table."""
    table = page[page.index("<table class='tbl head'>"):]
    table = table[:table.index("</table>")]
    rows = {}
    for tr in re.findall(r"<tr><th class='l'>(.*?)</tr>", table):
        if "<code" not in tr:
            continue  # the header row
        label, key = re.match(r"(.*?)<br><code[^>]*>(.*?)</code></th>", tr).groups()
        cells = re.findall(r"<td class='[lv]'>(.*?)</td>", tr)
        rows[html.unescape(key)] = [html.unescape(label)] + [html.unescape(c) for c in cells]
    return rows


def test_report_shows_the_meaning_next_to_each_number(demo):
    _, truth, paths = demo
    rows = _headline_rows(paths["report"].read_text())
    # every metric a PS run measures, in declared order; the incast-only ones left out
    assert list(rows) == [m.name for m in metrics.metrics_for("ps", JOBS)]
    assert "goodput_mbps" not in rows
    head = json.loads(paths["metrics"].read_text())["headline"]
    for key, (label, value, unit, meaning) in rows.items():
        m = metrics.by_name(key, JOBS)
        # (an n/a row adds its reason under the meaning: test_na_rows_say_why)
        meaning = re.sub(r"<br><span class='none'>n/a: .*</span>$", "", meaning)
        assert (label, value, unit, meaning) == (m.label, m.text(head[key]), m.unit, m.meaning)
    assert rows["tc_drops"][1] == str(truth["tc_drops"])
    # the inputs, on hovering the key
    assert "<code title='computed from queues.csv'>tc_drops</code>" in paths["report"].read_text()
    assert rows["capture_losses"][1] == str(truth["losses"])
    assert rows["rtos"][1] == str(truth["rto_events"])
    assert rows["spine_max_mean"][1] == "3"
    md = paths["summary"].read_text()
    for m in metrics.metrics_for("ps", JOBS):
        assert f"| {m.label} (`{m.name}`) | " in md
    assert (f"| queue drops (tc) (`tc_drops`) | {truth['tc_drops']} packets | "
            f"{metrics.by_name('tc_drops', JOBS).meaning} |") in md


def test_na_rows_say_why(tmp_path):
    run = make_run_dir(tmp_path / "noqueues", status="complete")
    rows = _headline_rows(build_report(run, plots=False)["report"].read_text())
    assert rows["tc_drops"][1] == "n/a"
    assert rows["tc_drops"][3].endswith(
        "<br><span class='none'>n/a: no queues.csv (or it is empty)</span>")


def test_a_job_metric_reaches_every_output(demo, tmp_path):
    """A job kind's own metric, registered as its `metrics()` would be: metrics.json, the
    report, summary.md, compare and the CLI pick it up without another edit."""
    run, _, _ = demo
    toy = Metric("toy_bytes_per_iter", "toy bytes per iteration", "bytes",
                 "Gradient bytes one worker sent per iteration (a toy job's metric).",
                 compute=lambda a: float(a.tables["iterations"]["bytes_sent"].mean()),
                 inputs=("workers",), cli=True, plot=False)
    metrics.register(toy, kind="ps")
    try:
        assert metrics.by_name(toy.name, JOBS).kinds == ("ps",)
        assert toy.name in {m.name for m in metrics.metrics_for("ps", JOBS)}
        assert toy.name not in {m.name for m in metrics.metrics_for("ring", JOBS)}
        with pytest.raises(ValueError, match="declared twice"):
            metrics.register(toy)
        paths = build_report(run, plots=False)
        m = json.loads(paths["metrics"].read_text())
        assert m["headline"][toy.name] == 40_000.0   # every iteration logs 40,000 bytes
        assert _headline_rows(paths["report"].read_text())[toy.name] == [
            toy.label, "40,000", "bytes", toy.meaning]
        assert "toy bytes per iteration: 40,000 bytes" in short_summary(run)
        table = pd.read_csv(compare_runs([run], tmp_path / "cmp")["table"])
        row = table[table["metric"] == toy.name].iloc[0]
        assert (row["unit"], row["mean"], row["n"]) == ("bytes", 40_000.0, 1)
    finally:
        metrics.unregister(toy.name)
    assert toy.name not in {m.name for m in metrics.all_metrics(JOBS)}


def test_cli_prints_declared_numbers_and_findings(demo):
    run, truth, _ = demo
    text = short_summary(run)
    lines = text.splitlines()
    assert lines[0] == "demo: complete"
    assert lines[1:7] == ["  mean iteration time: 0.139 s",
                          f"  queue drops (tc): {truth['tc_drops']} packets",
                          f"  losses seen in captures: {truth['losses']} packets",
                          f"  TCP retransmissions: {truth['retrans']} packets",
                          f"  retransmission timeouts: {truth['rto_events']} firings",
                          "  final held-out accuracy: 0.8"]
    assert lines[7].startswith("  - The worst queue was lf2-eth1 (lf2 → h3, the parameter")
    assert all(len(line) <= 100 for line in lines[7:])  # findings wrapped for a terminal
    assert "goodput" not in text and "warning:" not in text
    assert sum(line.startswith("  - ") for line in lines) == len(
        json.loads((run / "metrics.json").read_text())["findings"])


def _incast_run(path, policy, seed, goodputs):
    ev = [{"event": "start", "role": "client", "rank": 0, "mode": "incast", "t": T0}]
    ev += [{"event": "round", "round": r, "t_start": T0 + r, "t_end": T0 + r + 0.5,
            "senders": 4, "block_bytes": 1000, "bytes": 4000, "goodput_mbps": g}
           for r, g in enumerate(goodputs)]
    spec = (f'[routing]\npolicy = "{policy}"\n[run]\nseed = {seed}\n'
            '[workload]\nkind = "incast"\n')
    return make_run_dir(path, workers={0: ev}, spec_text=spec, t0=T0)


def test_compare_reads_the_declarations(tmp_path):
    runs = [_incast_run(tmp_path / "e1", "ecmp", 1, [10, 10]),
            _incast_run(tmp_path / "e2", "ecmp", 2, [20, 20]),
            _incast_run(tmp_path / "e3", "ecmp", 3, [30, 30]),
            _incast_run(tmp_path / "s1", "single", 1, [5, 5])]
    out = compare_runs(runs, tmp_path / "cmp")
    table = pd.read_csv(out["table"])
    units = dict(zip(table["metric"], table["unit"], strict=False))
    assert units == {m.name: m.unit for m in metrics.compared(JOBS) if m.name in units}
    assert units["goodput_mbps"] == "Mbit/s"
    page = out["report"].read_text()
    # the meaning beside the numbers (pandas escapes the apostrophe its own way)
    assert "Incast benchmark: bytes the client received per round over the round" in page
    # the terminal's version: mean ± t(0.975, 2) * sd / sqrt(3) = 4.303 * 10 / 1.732 = 24.8;
    # a rate cannot go below 0, so the interval is shown clipped: [0, 20 + 24.8]; a group
    # of one run shows its value
    label = "  incast goodput (Mbit/s)"  # 25 characters; columns right-aligned after it
    assert compare_summary(out["table"]).splitlines() == [
        "comparison (mean ± 95 % CI half-width with 3 or more runs, else each run's value; "
        "n = runs):",
        "  [1] policy=ecmp (n=3)",
        "  [2] policy=single (n=1)",
        " " * 25 + "           [1]  [2]",
        label + "  20 [0, 44.8]    5"]
    # more groups than fit side by side: blocks of `per_block` columns
    assert compare_summary(out["table"], per_block=1).splitlines()[3:] == [
        " " * 25 + "           [1]", label + "  20 [0, 44.8]", " " * 25 + "  [2]",
        label + "    5"]


def _toy_job(kind, declared):
    """A job kind defined here whose only feature is its headline metrics."""
    from dataclasses import make_dataclass

    from incastlab.jobs import Job, Roles

    class ToyJob(Job):
        summary = "toy job for the metrics test"
        Fields = make_dataclass(f"{kind}Fields", [])

        def roles(self, w):
            return Roles(1, 1, "clients")

        def launches(self, spec, ips, out_dir):
            return []

        def metrics(self):
            return declared
    ToyJob.kind = kind
    return ToyJob()


def test_metrics_a_job_declares_are_collected_from_the_job_registry(demo):
    from incastlab import jobs

    run, _, _ = demo
    shared = Metric("toy_shared", "shared", "s", "Declared once, returned by two jobs.",
                    compute=lambda a: 1.5)
    own = Metric("toy_own", "own", "packets", "Only the first toy job has it.",
                 compute=lambda a: None, absent="the toy never measures it")
    jobs.register(_toy_job("toyone", [shared, own]))
    jobs.register(_toy_job("toytwo", [shared]))
    try:
        declared = {m.name: m for m in metrics.all_metrics(JOBS)}
        assert declared["toy_shared"].kinds == ("toyone", "toytwo")
        assert declared["toy_own"].kinds == ("toyone",)
        assert "toy_own" in {m.name for m in metrics.metrics_for("toyone", JOBS)}
        assert "toy_own" not in {m.name for m in metrics.metrics_for("toytwo", JOBS)}
        m = json.loads(build_report(run, plots=False)["metrics"].read_text())
        # a PS run: the shared metric is computed all the same; the other is n/a, and why
        assert m["headline"]["toy_shared"] == 1.5 and m["headline"]["toy_own"] is None
        assert m["headline_na"]["toy_own"] == "not measured in ps runs"
    finally:
        jobs.unregister("toyone")
        jobs.unregister("toytwo")
    assert "toy_own" not in {m.name for m in metrics.all_metrics(JOBS)}


def test_conflicting_job_declarations_are_refused():
    from incastlab import jobs

    one = Metric("toy_x", "x", "s", "One meaning.", compute=lambda a: 1.0)
    other = Metric("toy_x", "x", "s", "Another meaning.", compute=lambda a: 2.0)
    jobs.register(_toy_job("toyone", [one]))
    jobs.register(_toy_job("toytwo", [other]))
    try:
        with pytest.raises(ValueError, match="'toyone' and 'toytwo' declare headline "
                                             "metric 'toy_x' differently"):
            metrics.all_metrics(JOBS)
    finally:
        jobs.unregister("toyone")
        jobs.unregister("toytwo")
    jobs.register(_toy_job("toyone", [Metric("tc_drops", "x", "", "Clash.",
                                             compute=lambda a: 0)]))
    try:
        with pytest.raises(ValueError, match="declares headline metric 'tc_drops'"):
            metrics.all_metrics(JOBS)
    finally:
        jobs.unregister("toyone")


def test_run_kind_is_what_ran_else_what_was_asked():
    # as analysis/network_cost.py picks the run's job: the logged mode's kind first
    assert metrics.run_kind("gloo", {"workload": {"kind": "ps"}}, JOBS) == "ring"
    assert metrics.run_kind("sync", {}, JOBS) == "ps"
    assert metrics.run_kind(None, {"workload": {"kind": "incast"}}, JOBS) == "incast"
    assert metrics.run_kind("no-such-mode", {}, JOBS) is None \
        and metrics.run_kind(None, {}, JOBS) is None


def test_iteration_metrics_apply_to_every_job_that_logs_iterations():
    """The iteration-time metrics name no job kinds: a job registered later that logs
    iteration events gets them, one that counts rounds does not."""
    from incastlab import jobs
    from incastlab.jobs.ring import RingJob

    class Laps(RingJob):
        kind = "laps"
        logged_modes = ()

    jobs.register(Laps())
    try:
        names = {m.name for m in metrics.metrics_for("laps", JOBS)}
        assert "iteration_time_mean_s" in names and "step_time_mean_s" in names
        assert "iteration_time_mean_s" not in {m.name for m in metrics.metrics_for("incast", JOBS)}
    finally:
        jobs.unregister("laps")
