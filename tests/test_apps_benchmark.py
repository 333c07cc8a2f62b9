"""Smoke test of benchmarks/allreduce_efficiency.py on loopback (measures, asserts no timing)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "allreduce_efficiency.py"


def test_allreduce_efficiency_runs_on_loopback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--loopback", "--size-bytes", "40000",
         "--world-sizes", "2", "--reps", "2", "--bandwidth-mbps", "50", "--timeout", "30",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=180, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["mode"] == "loopback" and report["bandwidth_mbps"] == 50
    assert report["ring_target_met"] is None  # no verdict against a rate loopback lacks
    kinds = [(r["algo"], r["phase"], r["n"]) for r in report["results"]]
    assert kinds == [("ring", "all", 2), ("gloo", "all", 2), ("ps", "push", 2),
                     ("ps", "step", 2)]
    rate = 50e6 / 8
    bounds = {(r["algo"], r["phase"]): r["bound_s"] for r in report["results"]}
    assert bounds[("ring", "all")] == 2 * (2 - 1) / 2 * 40000 / rate
    assert bounds[("ps", "push")] == 2 * 40000 / rate
    assert bounds[("ps", "step")] == 2 * 2 * 40000 / rate
    assert all(r["median_s"] > 0 and r["ratio"] > 0 for r in report["results"])
