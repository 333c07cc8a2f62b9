"""Root tier for the training apps: real gloo traffic inside a real 2×2 fabric.

A PS and 4 workers (sync), then a 4-rank ring: each completes 5 iterations and writes a
complete log, and the bytes the logs claim match the bounds of each pattern."""
from __future__ import annotations

import json

import pytest

from tests.rootnet import run_complete

pytestmark = pytest.mark.root
BASE = ["topology.spines=2", "topology.leaves=2", "topology.hosts_per_leaf=3",
        "workload.iterations=5", "workload.model_size=100000", "capture.enabled=false",
        "run.phase_timeout_s=30", "workload.timeout_s=60"]


def _run(tmp_path, *overrides):
    manifest = run_complete(tmp_path, BASE + list(overrides))
    logs = {}
    for proc in manifest["processes"]:
        path = tmp_path / "workers" / f"{proc['rank']}.jsonl"
        logs[proc["rank"]] = [json.loads(line) for line in path.open()]
    return manifest, logs


def test_sync_ps_with_four_workers_in_the_fabric(tmp_path):
    manifest, logs = _run(tmp_path, "workload.kind=ps", "workload.mode=sync",
                          "workload.workers=4")
    assert [p["role"] for p in manifest["processes"]] == ["server"] + ["worker"] * 4
    grad_bytes = logs[1][0]["gradient_bytes"]
    for rank in range(1, 5):
        events = [e["event"] for e in logs[rank]]
        assert events[0] == "start" and events[-1] == "final"
        iters = [e for e in logs[rank] if e["event"] == "iteration"]
        assert [e["iteration"] for e in iters] == list(range(5))
        # every push carries the whole gradient (plus a few header floats)
        assert all(grad_bytes <= e["bytes_sent"] <= grad_bytes + 64 for e in iters)
    hosts = {p["host"] for p in manifest["processes"]}
    assert len(hosts) == 5, "one process per emulated host"


def test_ring_allreduce_with_four_ranks_in_the_fabric(tmp_path):
    manifest, logs = _run(tmp_path, "workload.kind=ring", "workload.workers=4")
    n = 4
    finals = []
    for rank in range(n):
        iters = [e for e in logs[rank] if e["event"] == "iteration"]
        assert len(iters) == 5
        grad_bytes = logs[rank][0]["gradient_bytes"]
        # bandwidth-optimal ring: 2(N-1)/N of the gradient per step, to within one element
        for e in iters:
            assert abs(e["bytes_sent"] - 2 * (n - 1) / n * grad_bytes) <= 2 * (n - 1) * 4
        finals.append(logs[rank][-1])
    assert len({f["params_sha256"] for f in finals}) == 1, "ranks diverged"
