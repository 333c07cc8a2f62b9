"""Root tier for model parallelism (issue 11): real Mininet, OVS, controller and gloo.

- A 4-stage pipeline, one stage per leaf (every message crosses a spine), under GPipe
  and under 1F1B: it trains (loss down), every stage logged its forwards and backwards
  in the schedule's order, the report has the pipeline section, the timeline figure and
  a cost with the bubble as the schedule's share, trace.json has the stages' spans.
- 2-way tensor parallelism across two leaves: it trains, every rank logged its
  per-block all-reduces, rank 0 measured α, the report compares them with the bound.
- Nothing of a run is left behind: no bridge, no host interface, no process naming
  the run directory.

Small on purpose (2 cores): a few steps of a tiny model, each run well under a minute.
Run as root under the shared lock:
    flock /tmp/incastlab-root.lock .venv/bin/python -m pytest -q -m root \\
        tests/test_model_parallel_root.py
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from incastlab.commands.common import build_report
from incastlab.apps.local import events, read_jsonl
from incastlab.apps.pipeline import schedule
from tests.rootnet import ovs_bridges, run_complete

pytestmark = pytest.mark.root
# Timeouts for a failure to end in minutes, with room for a slow machine: with one core
# held half busy the fabric, the processes and torch took 10.7-13.5 s to the first
# worker's log line and a run 13-18 s (a message's wait, timeout_s, is a few ms once
# running, longest for the first ranks' rendezvous with the last one started).
FABRIC = ["topology.spines=2", "topology.leaves=4", "topology.hosts_per_leaf=1",
          "topology.host_bw_mbps=20", "routing.policy=ecmp", "workload.timeout_s=60",
          "run.phase_timeout_s=60", "run.duration_limit_s=120"]


def _processes_naming(text: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _nothing_left(run_dir: Path) -> None:
    assert not (ovs_bridges() & {"sp1", "sp2", "lf1", "lf2", "lf3", "lf4"})
    assert not [n for n in os.listdir("/sys/class/net") if "-eth" in n]
    assert _processes_naming(str(run_dir)) == []


def _logs(run_dir: Path, ranks: int) -> dict[int, list[dict]]:
    return {r: read_jsonl(run_dir / "workers" / f"{r}.jsonl") for r in range(ranks)}


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_four_stage_pipeline_across_leaves(tmp_path, kind):
    run_dir = tmp_path / kind
    run_dir.mkdir()
    m, iters = 4, 8
    run_complete(run_dir, FABRIC + [
        "workload.kind=pipeline", "workload.stages=4", "workload.layers=4",
        f"workload.schedule={kind!r}".replace("'", '"'), f"workload.micro_batches={m}",
        "workload.batch_size=64", "workload.model_size=50_000", "workload.lr=0.1",
        "workload.fwd_ms=10", "workload.bwd_ms=20", f"workload.iterations={iters}"])
    _nothing_left(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["placement"]["workers"] == ["h1", "h2", "h3", "h4"]
    logs = _logs(run_dir, 4)
    losses = [e["loss"] for e in events(logs[3], "iteration")]
    assert len(losses) == iters and sum(losses[-3:]) < sum(losses[:3])  # it learns
    for s in range(4):
        expect = [f"{op.kind}{op.mb}" for op in schedule(kind, 4, m, s)]
        spans = events(logs[s], "span")
        assert [e["name"] for e in spans if e["iteration"] == iters - 1] == expect
    paths = build_report(run_dir)
    page = paths["report"].read_text()
    assert "Pipeline: per-stage timeline and bubbles" in page
    assert "What the network cost the job" in page
    metrics = json.loads(paths["metrics"].read_text())
    bubble = metrics["headline"]["pipeline_bubble"]
    # (S-1)/(M+S-1) = 3/7 with free messages; messages and 2 busy cores only add idle
    assert metrics["headline"]["pipeline_bubble_model"] == pytest.approx(3 / 7)
    assert 3 / 7 - 0.02 < bubble < 0.75, bubble
    cost = metrics["cost"]
    assert cost["available"] and cost["schedule_s"] > 0, cost
    assert (run_dir / "pipeline_timeline.png").exists() or any(
        p.name.startswith("pipeline_timeline") for p in run_dir.rglob("*.png"))
    trace = json.loads((run_dir / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in
             ("forward", "backward")]
    assert len(spans) == 4 * iters * 2 * m


def test_two_way_tensor_parallel_across_leaves(tmp_path):
    run_dir = tmp_path / "tensor"
    run_dir.mkdir()
    iters, layers = 10, 2
    run_complete(run_dir, FABRIC + [
        "workload.kind=tensor", "workload.tensor_ranks=2", f"workload.layers={layers}",
        "workload.batch_size=64", "workload.model_size=50_000", "workload.lr=0.1",
        f"workload.iterations={iters}"])
    _nothing_left(run_dir)
    logs = _logs(run_dir, 2)
    for r in range(2):
        its = events(logs[r], "iteration")
        losses = [e["loss"] for e in its]
        assert len(losses) == iters and sum(losses[-3:]) < sum(losses[:3])
        assert len(events(logs[r], "span")) == iters * 2 * layers
    alpha = events(logs[0], "latency")[0]["alpha_s"]
    assert 0 < alpha < 0.05  # a message through h1, lf1, a spine, lf2, h2 and back
    paths = build_report(run_dir)
    page = paths["report"].read_text()
    assert "Tensor parallel: per-block collective time vs its α–β bound" in page
    metrics = json.loads(paths["metrics"].read_text())
    assert metrics["headline"]["alpha_ms"] == pytest.approx(alpha * 1e3)
    # the measured all-reduces cannot beat their bound (α is their own latency)
    assert metrics["headline"]["collective_over_bound"] >= 0.9
    assert metrics["cost"]["available"], metrics["cost"]
