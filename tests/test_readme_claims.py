"""The documented facts that follow from the code, held against the code and the
benchmarks' JSON (benchmarks/results/), never against prose.

A fact the docs state (a default, a constant, a bound of the demo) is pinned here to the
precision the docs print, and recomputed from the code; a measured figure is read from
the JSON file its benchmark or run wrote, so that what the JSON records and what the
code computes cannot drift apart. tests/README.md lists every claim and its test.
A figure "agrees" when the computed value rounds to it at the precision it is written
(one unit of its last digit).
"""
import json
import tomllib
from pathlib import Path

import pytest

from incastlab.analysis import alphabeta as cm
from incastlab.jobs import ps_bound as ps_bounds
from incastlab.jobs import ring_bound as ring_bounds
from incastlab.fabric import storm_limit_pps
from incastlab.spec import loads_spec

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def results(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _agrees(computed: float, stated: str) -> bool:
    """`stated` (e.g. '0.569') is `computed` written to its digits (truncated or rounded)."""
    digits = len(stated.split(".")[1]) if "." in stated else 0
    return abs(computed - float(stated)) < 10 ** -digits


def _demo_row(name: str) -> list[str]:
    """A row of the demo's table (runs.demo.json), without its label."""
    rows = [r for r in results("runs.demo")["tables"][0]["rows"] if r[0] == name]
    assert rows, f"runs.demo.json has no demo row {name!r}"
    return rows[0][1:]


def _demo():
    spec = tomllib.loads((ROOT / "specs" / "demo.toml").read_text())
    return spec["workload"]["workers"], spec["workload"]["model_size"] * 4, \
        spec["topology"]["host_bw_mbps"]


def test_demo_figures_state_the_demos_configuration():
    workers, model_bytes, rate = _demo()
    cfg = results("runs.demo")["config"]
    assert (cfg["workers"], cfg["model_mb"] * 1_000_000, cfg["host_bw_mbps"]) == (
        workers, model_bytes, rate)


def test_demo_bounds_are_the_cost_models():
    workers, model_bytes, rate = _demo()
    ps, ring = _demo_row("sync PS"), _demo_row("ring")
    ps_bound = ps_bounds.ps_bound(workers, 1, model_bytes, rate)
    ring_bound = ring_bounds.ring_bound(workers, model_bytes, rate)
    assert _agrees(ps_bound.seconds, ps[1].removesuffix(" s")), (ps_bound.seconds, ps[1])
    assert _agrees(ring_bound.seconds, ring[1].removesuffix(" s")), (ring_bound.seconds, ring)


def _range(cell: str) -> tuple[str, str]:
    """'2.34–2.47 s' -> ('2.34', '2.47'); '1.67 s' -> ('1.67', '1.67')."""
    text = cell.split()[0]
    low, _, high = text.partition("–")
    return low, high or low


def test_demo_ps_row_adds_up():
    """iteration = bound + the job's schedule, and comm / bound = iteration / bound, at
    each end of the measured ranges (the sync PS computes 3 ms: nothing at this
    precision); the note below the table repeats the bound and the schedule."""
    it, bound, ratio, schedule = (_range(c) for c in _demo_row("sync PS")[:4])
    b = float(bound[0])
    for end in (0, 1):
        assert float(it[end]) == pytest.approx(b + float(schedule[end]), abs=0.011), end
        assert _agrees(float(it[end]) / b, ratio[end]), (it[end], ratio[end])
    notes = " ".join(results("runs.demo")["notes"])
    assert f"through the PS port ({bound[0]} s) plus its push-then-pull schedule " \
           f"({schedule[0] if schedule[0] == schedule[1] else '–'.join(schedule)} s)" in notes


def test_framing_factors_are_the_models():
    """docs/emulation.md and the all-reduce benchmark: 1.046 for a bulk flow (the PS
    push), 1.068 for a ring host's link (f′), 1.0074 and 1.0111 at MTU 9000."""
    assert _agrees(cm.framing_factor(), "1.046")
    assert _agrees(cm.ack_framing(), "1.068")
    assert _agrees(cm.framing_factor(9000), "1.0074")
    assert _agrees(cm.ack_framing(9000), "1.0111")


def _bench_module(name: str):
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location(f"bench_{name}",
                                                  ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_ring_benchmark_summary_matches_its_results():
    """The ring at 91–93 % of its bound (the benchmark's target: 90 %, ratio ≤ 1.11),
    within 0.5 % (N = 4) and 3 % (N = 8) of what its framing allows, against the
    recorded ratios of that benchmark's runs."""
    data = results("allreduce_efficiency.ring")
    bench = _bench_module("allreduce_efficiency")
    assert data["target_efficiency"] == bench.TARGET_EFFICIENCY == 0.9
    ratio_max = 1.11
    assert 1 / ratio_max >= bench.TARGET_EFFICIENCY > 1 / (ratio_max + 0.01)  # 1.11 is 90 %
    ring = {r["n"]: r["ratio"] for r in data["results"] if r["algo"] == "ring"}
    (n4_lo, n4_hi), (n8_lo, n8_hi) = ring[4], ring[8]
    low, high = data["summary"]["efficiency_percent"]
    efficiencies = [100 / r for r in (n4_lo, n4_hi, n8_lo, n8_hi)]
    assert round(min(efficiencies)) >= low and round(max(efficiencies)) <= high
    assert max(n4_hi, n8_hi) <= ratio_max
    within = data["summary"]["within_framing_percent"]
    f = cm.ack_framing()
    assert (n4_hi / f - 1) * 100 <= within["4"]
    assert (n8_hi / f - 1) * 100 <= within["8"]


def test_defaults_the_docs_state():
    """`queues.csv` every 10 ms; CUBIC by default; hosts' 64 flow FIFOs."""
    spec = loads_spec("")
    assert spec.capture.queue_sample_ms == 10
    assert spec.topology.congestion_control == "cubic"
    from incastlab.topologies.links import FLOW_CLASSES
    assert FLOW_CLASSES == 64


def test_controller_listens_on_loopback_only():
    import incastlab.controller.__main__ as launcher
    assert launcher.LISTEN_HOST == "127.0.0.1"


def test_storm_limit_sits_between_pings_and_a_storm():
    """A learning switch's storm (2,500–7,000 packets/s measured, runs.own-controller.json)
    against at most about 100 for the readiness pings on 2 spines x 2 leaves x 2 hosts:
    the limit must part the two."""
    data = results("runs.own-controller")
    storm_low, pings = data["storm_pps"][0], data["readiness_pings_pps"]
    assert pings < storm_limit_pps(4) < storm_low
