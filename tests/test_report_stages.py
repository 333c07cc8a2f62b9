"""The report as declared stages (analysis/stages.py), and the analysis without the
orchestrator: the job registry is handed in, never imported."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from incastlab.analysis import stages
from incastlab.analysis.report import build_report
from incastlab.analysis.stages import Section, Stage
from incastlab.analysis.synthetic import make_demo_run

ROOT = Path(__file__).resolve().parent.parent


def test_page_order_places_each_stage_after_its_anchor():
    def st(name, after=None):
        return Stage(name, (), after=after)
    order = stages.page_order([st("a"), st("b"), st("c"), st("x", "a"), st("y", "b"),
                               st("z", "a"), st("w")])
    assert order == ["a", "x", "z", "b", "y", "c", "w"]


def test_the_declared_report_in_list_and_page_order():
    declared = stages.declared()
    names = [s.name for s in declared]
    assert names[:2] == ["plots", "headline"] and names[-6:] == ["events", "latency", "jobs",
                                                                  "queue_cdf", "ecn", "reorder"]
    order = stages.page_order(declared)
    assert order.index("events") == order.index("headline") + 1
    assert order.index("latency") == order.index("retransmissions") + 1
    assert order.index("queue_cdf") == order.index("queues") + 1
    assert order.index("ecn") == order.index("queue_cdf") + 1
    assert order.index("reorder") == order.index("latency") + 1
    assert order[-2:] == ["configuration", "jobs"]
    assert len(set(names)) == len(names)


def test_a_registered_stage_reaches_the_tables_metrics_and_both_pages(tmp_path):
    run = tmp_path / "demo"
    make_demo_run(run)
    toy = Stage("toy", ("flows",),
                compute=lambda a: {"n": pd.DataFrame({"flows": [len(a.tables["flows"])]})},
                metrics=lambda t: {"flows": int(t["n"]["flows"].iloc[0])},
                render=lambda a, figs: [Section("Toy stage", "<p>toy html</p>", "toy md\n")],
                after="headline")
    stages.register(toy)
    try:
        with pytest.raises(ValueError, match="declared twice"):
            stages.register(toy)
        with pytest.raises(ValueError, match="no stage 'nowhere' before it"):
            stages.register(Stage("other", (), after="nowhere"))
        paths = build_report(run, plots=False)
    finally:
        stages.unregister("toy")
    m = json.loads(paths["metrics"].read_text())
    assert m["toy"] == {"flows": m["flows"]}
    md = paths["summary"].read_text()
    assert md.index("## Headline numbers") < md.index("## Toy stage") < md.index("## The fabric")
    assert "<p>toy html</p>" in paths["report"].read_text()
    assert "toy" not in {s.name for s in stages.declared()}


def test_a_failing_stage_compute_is_a_problem_not_a_lost_report(tmp_path):
    run = tmp_path / "demo"
    make_demo_run(run)

    def boom(a):
        raise RuntimeError("injected")
    stages.register(Stage("boom", (), compute=boom, metrics=lambda t: t or None,
                          what="the toy"))
    try:
        m = json.loads(build_report(run, plots=False)["metrics"].read_text())
    finally:
        stages.unregister("boom")
    assert "the toy could not be computed (RuntimeError: injected); shown as empty" in \
        m["problems"]
    assert "boom" not in m and m["headline"]["retransmissions"] == 4


def test_the_analysis_alone_never_imports_the_orchestrator(tmp_path):
    """Without a job registry handed in: the generic sections, the reason the cost is
    unknown, and not one module of the orchestrator loaded."""
    run = tmp_path / "demo"
    make_demo_run(run)
    code = ("import sys, json\n"
            "from incastlab.analysis.report import build_report\n"
            f"p = build_report({str(run)!r}, plots=False)\n"
            "bad = sorted(m for m in sys.modules if m.startswith('incastlab.') and "
            "m.split('.')[1] not in ('analysis', 'topologies', 'apps', 'controller'))\n"
            "print(json.dumps(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == []
    m = json.loads((run / "metrics.json").read_text())
    assert m["cost"] == {"available": False, "reason": "no job kinds were handed to the "
                         "analysis (analyse(run_dir, jobs=...)): generic sections only"}
    md = (run / "summary.md").read_text()
    assert "## Parameter server" not in md and "## Retransmissions and RTOs" in md
