"""Root tier for the all-reduce algorithms (issue 12) on a real fabric: the fabric of
specs/allreduce-algorithms.toml (six ranks on three leaves, host links at 50 Mbit/s,
one 20 Mbit/s link from each leaf to the one spine: 5:1 oversubscribed), one run per
algorithm.

- Every algorithm completes and leaves all ranks with bit-identical parameters.
- Each one's all-reduce takes at least its bound and not far above it (the bound is the
  framed lower bound, analysis.costmodel; nothing may beat it by more than the timer
  noise).
- The hierarchical one is faster than the flat ring, as the bounds say (0.90 s vs
  1.42 s per all-reduce of 1 MB): only its leaders' ring crosses the spine.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from incastlab.analysis.report import build_report
from incastlab.apps.local import events, read_jsonl
from tests.rootnet import run_complete

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")
# measured / bound allowed. Measured on this fabric (specs/allreduce-algorithms.toml,
# 2026-12-01, the CPU shared with other jobs): ring 1.53, halving-doubling 1.64 and 1.69,
# tree 1.52, hierarchical 1.29; a quieter run: 1.02, 1.64, 1.40, 1.02. Halving-doubling's
# six phases run one after the other,
# each a new burst from idle connections at 50 Mbit/s into a 20 Mbit/s uplink, which
# overflows and recovers before the next phase may start; the others keep pipelines busy.
LIMIT = {"ring": 1.6, "halving-doubling": 2.0, "tree": 1.6, "hierarchical": 1.6}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for algo in ALGORITHMS:
        run_dir = tmp_path_factory.mktemp(algo)
        run_complete(run_dir, [
            "topology.spines=1", "topology.leaves=3", "topology.hosts_per_leaf=2",
            "topology.host_bw_mbps=50", "topology.fabric_bw_mbps=20", "routing.policy=ecmp",
            "workload.kind=ring", f"workload.algorithm={algo}", "workload.workers=6",
            "workload.model_size=250000", "workload.iterations=4", "capture.enabled=false"])
        build_report(run_dir)
        out[algo] = run_dir
    return out


def _allreduce_s(run_dir: Path) -> list[float]:
    """Every rank's all-reduce times but the first iteration's (connections warm up)."""
    return [i["allreduce_s"] for log in sorted((run_dir / "workers").glob("*.jsonl"))
            for i in events(read_jsonl(log), "iteration")[1:]]


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_each_algorithm_runs_at_or_above_its_bound(runs, algo):
    run_dir = runs[algo]
    logs = [read_jsonl(p) for p in sorted((run_dir / "workers").glob("*.jsonl"))]
    assert len(logs) == 6
    assert {events(log, "start")[0]["algorithm"] for log in logs} == {algo}
    assert len({events(log, "final")[0]["params_sha256"] for log in logs}) == 1
    cost = json.loads((run_dir / "metrics.json").read_text())["cost"]
    assert cost["available"], cost
    assert f"{algo} all-reduce" in cost["formula"] or algo == "ring"
    mean = sum(_allreduce_s(run_dir)) / len(_allreduce_s(run_dir))
    # a lower bound: the mean may not beat it (2 % for timer and rate-shaping slack);
    # and the schedule gets within LIMIT of it on this fabric
    assert 0.98 * cost["bound_s"] <= mean <= LIMIT[algo] * cost["bound_s"], \
        (mean, cost["formula"])


def test_hierarchical_beats_the_flat_ring_on_oversubscribed_spines(runs):
    ring = sorted(_allreduce_s(runs["ring"]))
    hier = sorted(_allreduce_s(runs["hierarchical"]))
    median = lambda v: v[len(v) // 2]  # noqa: E731
    assert median(hier) < 0.85 * median(ring), (median(hier), median(ring))
