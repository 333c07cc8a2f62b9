"""benchmarks/allreduce_efficiency.py with our other all-reduce algorithms, on loopback:
each runs and is reported against analysis.alphabeta's bound of its own (values
measured, not asserted: loopback is not the rate the bound assumes)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from incastlab.analysis import alphabeta
from incastlab.jobs.ring_bound import allreduce_bound

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "allreduce_efficiency.py"


def test_every_algorithm_against_its_own_bound_on_loopback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--loopback", "--size-bytes", "40000",
         "--world-sizes", "3", "--reps", "1", "--bandwidth-mbps", "50", "--timeout", "30",
         "--algos", "ring,halving-doubling,tree,hierarchical", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240, start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["framed_verdicts"] is None  # no verdict against a rate loopback lacks
    got = {r["algo"]: r for r in report["results"]}
    assert list(got) == ["ring", "halving-doubling", "tree", "hierarchical"]
    # N = 3 on loopback's pretend leaves of three: all on lf1, so no fabric term
    leaves = ["lf1"] * 3
    for algo, r in got.items():
        want = allreduce_bound(algo, 3, 40000, 50, leaves=leaves, spines=2,
                                         fabric_mbps=150, slices=2).seconds
        assert r["framed_bound_s"] == pytest.approx(want), algo
        assert r["framed_ratio"] == pytest.approx(r["median_s"] / want)
    # the ring's plain bound stays 2(N-1)/N·M/B; the others' is their framed one
    assert got["ring"]["bound_s"] == pytest.approx(2 * 2 / 3 * 40000 / (50e6 / 8))
    assert got["tree"]["bound_s"] == got["tree"]["framed_bound_s"]


def test_alltoall_against_its_bound_on_loopback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--loopback", "--size-bytes", "30000",
         "--world-sizes", "3", "--reps", "1", "--bandwidth-mbps", "50", "--timeout", "30",
         "--algos", "alltoall", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240, start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r,) = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    # every rank sends 10,000 B to each of the two others, all on one pretend leaf:
    # dispatch 20,000 B out of (and into) each host, f' (both ways), then the combine
    want = 2 * 20_000 * alphabeta.ack_framing() / (50e6 / 8)
    assert r["algo"] == "alltoall" and r["framed_bound_s"] == pytest.approx(want)


def test_unknown_algorithm_is_refused() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--loopback", "--algos", "ring,fft"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--algos: fft" in proc.stderr


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("allreduce_efficiency", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("allreduce_efficiency", mod)  # dataclasses look it up
    spec.loader.exec_module(mod)
    return mod


def test_verdicts_flag_cpu_bound_jobs() -> None:
    b = _bench_module()
    assert b._idle_share((100.0, 1000.0), (150.0, 1100.0)) == pytest.approx(0.5)
    assert b._idle_share(None, (1.0, 2.0)) is None
    res = [b.Result("tree", 4, 100, 1.05, 1.0, framed_bound_s=1.0, idle_share=0.5),
           b.Result("tree", 8, 100, 1.50, 1.0, framed_bound_s=1.0, idle_share=0.5),
           b.Result("ring", 4, 100, 2.40, 1.0, framed_bound_s=1.0, idle_share=0.02),
           b.Result("ring", 8, 100, 1.2, 1.0, framed_bound_s=1.0,
                    cpu={"datapath_saturated": True}),
           b.Result("gloo", 8, 100, 1.1, 1.0, framed_bound_s=1.0,
                    cpu={"datapath_saturated": True}),  # at the target: met, flagged
           b.Result("ps", 4, 100, 1.2, 1.0)]  # no framed bound: no verdict
    v = b.framed_verdicts(res)
    assert v == {"tree N=4": "met (1.050)", "tree N=8": "NOT met (1.500)",
                 "ring N=4": "NOT met (2.400; machine 2% idle)",
                 "ring N=8": "CPU-bound (1.200)",
                 "gloo N=8": "met, datapath at its CPU ceiling (1.100)"}
