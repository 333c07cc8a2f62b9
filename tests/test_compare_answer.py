"""compare.html opens with its answer (issue 27 item 2): the cost sentences the terminal
prints, each group's headline ratios against the fastest group, and no section that does
not apply (time to accuracy without a target)."""
import json
import shutil

import pandas as pd
import pytest

from incastlab.analysis import compare_answer as ca
from incastlab.analysis.metrics import by_name, compared
from incastlab.analysis.synthetic import make_demo_run
from incastlab.commands.common import compare_runs, compare_summary
from incastlab.jobs import JOBS

T0 = 1_700_000_000.0


def _table(rows):
    return pd.DataFrame([{"group": g, "metric": m, "mean": v} for g, m, v in rows])


def test_ratio_words_follow_what_the_metric_is():
    it, rtx = by_name("iteration_time_mean_s"), by_name("retransmissions")
    rtt = by_name("rtt_p99_ms")
    assert ca.ratio_text(it, 2.45, 0.568) == "4.31× slower"
    assert ca.ratio_text(it, 0.568, 2.45) == "4.31× faster"
    assert ca.ratio_text(rtx, 120, 10) == "12× as many"
    assert ca.ratio_text(rtx, 10, 120) == "12× fewer"
    assert ca.ratio_text(rtt, 30.0, 10.0) == "3× longer"
    assert ca.ratio_text(by_name("throughput_mbps"), 5.0, 10.0) == "2× lower"
    # no ratio of a zero or of a missing value; equal within 3 digits is the same
    assert ca.ratio_text(rtx, 5, 0) is None and ca.ratio_text(rtx, None, 3) is None
    assert ca.ratio_text(rtx, 0, 0) == "the same (0)"
    assert ca.ratio_text(it, 1.0004, 1.0) == "the same"


def test_every_group_is_compared_to_the_fastest_baseline_metric_first():
    declared = compared(JOBS)
    it = "iteration_time_mean_s"
    t = _table([("kind=ps", it, 2.45), ("kind=ring", it, 0.568),
                ("kind=ps", "retransmissions", 120), ("kind=ring", "retransmissions", 10),
                ("kind=ps", "tc_drops", 327), ("kind=ring", "tc_drops", 0)])
    rows = ca.ratio_rows(t, declared)
    assert ca.baseline_group(t) == "kind=ring"
    assert [(r["group"], r["metric"].name, r["ratio"]) for r in rows] == [
        ("kind=ps", "iteration_time_mean_s", "4.31× slower"),
        ("kind=ps", "retransmissions", "12× as many")]  # tc_drops: against 0, no ratio
    page = ca.answer_html(["a sentence."], rows)
    assert page.index("kind=ps: mean iteration time 4.31× slower than kind=ring "
                      "(2.45 s against 0.568 s).") < page.index("a sentence.")
    # without iteration times, the first group is the baseline
    rtx = "retransmissions"
    assert ca.baseline_group(_table([("b", rtx, 1), ("a", rtx, 2)])) == "b"


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory):
    """The synthetic PS demo run twice, the second one 'slower' in its spec only (mode),
    so the groups' numbers are equal and their cost parts known."""
    root = tmp_path_factory.mktemp("answer")
    a = root / "sync"
    make_demo_run(a, t0=T0)
    m = json.loads((a / "manifest.json").read_text())  # placed as the runner records it
    m["processes"] = [{"rank": r, "host": h, "role": role}
                      for r, h, role in ((0, "h3", "server"), (1, "h1", "worker"),
                                         (2, "h2", "worker"))]
    m["placement"] = {"servers": ["h3"], "workers": ["h1", "h2"]}  # for the job's bound
    (a / "manifest.json").write_text(json.dumps(m))
    b = root / "other"
    shutil.copytree(a, b)
    (b / "spec.toml").write_text((b / "spec.toml").read_text().replace(
        'mode = "sync"', 'mode = "sync"\ncompute_ms = 10.0'))
    return a, b


def test_compare_html_opens_with_the_terminals_sentences(two_groups, tmp_path):
    out = compare_runs(list(two_groups), tmp_path / "cmp")
    page = out["report"].read_text()
    data = json.loads(out["metrics"].read_text())
    answer = data["answer"]
    assert len(answer) == 3 and answer[0].startswith("compute_ms=")
    assert answer[2] == "compute_ms=(absent) and compute_ms=10.0 took as long per iteration."
    assert "mean iteration time the same as compute_ms=(absent)" in page
    box = page.index("id='answer'")
    head = page.index("<h2>Headline metrics</h2>")
    assert box < head and box < page.index("Can these be compared")
    inside = page[box:head]
    for s in answer:  # each sentence on the page, in the box, as the terminal prints it
        assert s.replace("'", "&#x27;") in inside
    printed = compare_summary(out["table"])
    for s in answer:
        assert s.split(":")[0] in printed
    assert "Time to accuracy" not in page and ">None<" not in page


def test_the_terminal_reads_the_pages_answer(two_groups, tmp_path):
    out = compare_runs(list(two_groups), tmp_path / "cmp")
    path = out["metrics"]
    data = json.loads(path.read_text())
    data["answer"] = ["the page's own sentence."]
    path.write_text(json.dumps(data))
    assert "the page's own sentence." in compare_summary(out["table"])


def test_time_to_accuracy_is_left_out_without_a_target_and_says_n_a(tmp_path):
    """Runs that logged evaluations but set no target: no section, and the reason; with
    a target, a group that never reached it reads n/a, not None."""
    from incastlab.analysis import accuracy
    from tests.test_jobs_ps_modes import EVALS, workers_log

    def runs(spec):
        return [{"group": g, "spec": spec, "accuracy": accuracy.curve(workers_log(e)),
                 "staleness": pd.Series([0.0]), "iteration_s": 1.0}
                for g, e in (("kind=ps", EVALS), ("mode=async", EVALS[:2]))]

    body, figs, summary = accuracy.compare_section(runs({"workload": {}}), tmp_path)
    assert (body, figs, summary) == ("", [], {"left_out": accuracy.NO_TARGET})
    spec = {"workload": {"target_accuracy": 0.8, "target_source": "a measurement"}}
    body, _, summary = accuracy.compare_section(runs(spec), tmp_path)
    assert "Time to accuracy" in body and "None" not in body and "n/a" in body
