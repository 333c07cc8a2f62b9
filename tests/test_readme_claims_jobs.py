"""The job pages' facts that follow from the code (parameter-server modes, model
parallelism, all-reduce algorithms, mixture of experts), held against the code and the
benchmarks' JSON (benchmarks/results/), never against prose: the shipped spec's bounds,
the pipeline schedules' simulation, the GShard capacity, the learning-rate rules.

What a run measured on a fabric (iteration and all-reduce times, bubbles, queue depths)
is held by the root tests and benchmarks that tests/README.md names; these tests hold
only what no measurement may change. A figure agrees when the computed value rounds to
it at the precision it is written.
"""
import json
from pathlib import Path

import pytest

from incastlab.jobs.ring_bound import allreduce_bound
from incastlab.apps import moe as moe_app
from incastlab.apps import pipeline as pp
from incastlab.apps import ps as ps_app
from incastlab.apps import ring as ring_app
from incastlab.jobs import ring as ring_job
from incastlab.spec import expand_sweep, load_spec

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")
# docs/jobs-allreduce.md: the shipped spec's bounds per all-reduce of 1 MB, and the
# hierarchical algorithm's predicted speed-up over the ring
STATED_BOUNDS = {"ring": 1.42, "halving-doubling": 1.71, "tree": 1.28, "hierarchical": 0.90}
STATED_SPEEDUP = 1.58


def results(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _shipped_allreduce_bounds():
    """{algorithm: bound of one all-reduce, s} for specs/allreduce-algorithms.toml, as the
    ring job computes it for a run: its placement, its leaves, the tree's slices."""
    spec = load_spec(ROOT / "specs" / "allreduce-algorithms.toml", allow_sweep=True)
    out = {}
    for _, point in expand_sweep(spec):
        t, w = point.topology, point.workload
        hosts = list(point.placement().workers)
        nbytes = 4 * w.model_size
        out[w.algorithm] = allreduce_bound(
            w.algorithm, len(hosts), nbytes, [t.host_bw_mbps] * len(hosts),
            leaves=ring_job.leaf_names(point, hosts), spines=t.spines,
            fabric_mbps=t.fabric_bw_mbps, slices=ring_app.tree_slices(nbytes)).seconds
    return spec, out


def test_allreduce_algorithms_spec_is_the_fabric_the_docs_describe():
    """6 ranks on 3 leaves, 50 Mbit/s hosts, one 20 Mbit/s uplink per leaf (5:1), ranks
    dealt round-robin over the leaves."""
    ranks, leaves, host, uplink, over = 6, 3, 50, 20, 5
    spec = load_spec(ROOT / "specs" / "allreduce-algorithms.toml", allow_sweep=True)
    t = spec.topology
    assert (t.leaves, t.spines, t.host_bw_mbps, t.fabric_bw_mbps) == (leaves, 1, host, uplink)
    assert t.hosts_per_leaf * t.host_bw_mbps / t.fabric_bw_mbps == over
    _, point = expand_sweep(spec)[0]
    hosts = list(point.placement().workers)
    assert len(hosts) == ranks == point.workload.workers
    assert ring_job.leaf_names(point, hosts) == [f"lf{i % leaves + 1}" for i in range(ranks)]


def test_allreduce_algorithm_bounds_are_the_cost_models():
    """The stated bounds, the measured sweep's bound column (runs.allreduce-algorithms.json)
    and the predicted speed-up are the cost model's."""
    _, bounds = _shipped_allreduce_bounds()
    assert {a: round(bounds[a], 2) for a in ALGORITHMS} == STATED_BOUNDS
    rows = {r[0]: r for r in results("runs.allreduce-algorithms")["tables"][0]["rows"]}
    for algo in ALGORITHMS:  # the measured table repeats each bound
        assert float(rows[algo][2].removesuffix(" s")) == STATED_BOUNDS[algo], algo
    assert round(bounds["ring"] / bounds["hierarchical"], 2) == STATED_SPEEDUP


def test_pipeline_formula_column_is_the_textbook_bubble():
    """Every pipeline_bubbles result's formula column: (S−1)/(M+S−1) for 4 stages, and
    the simulation's bubble with free messages."""
    for name in ("pipeline_bubbles", "pipeline_bubbles.earlier"):
        data = results(name)
        assert data["stages"] == 4
        ms = sorted({r["micro_batches"] for r in data["results"]})
        assert ms == [1, 4, 8], name
        for r in data["results"]:
            m = r["micro_batches"]
            assert r["formula"] == pytest.approx(3 / (m + 3), abs=5e-4), (name, m)
            sim = pp.simulate(r["schedule"], 4, m, data["fwd_ms"] / 1e3, data["bwd_ms"] / 1e3)
            assert sim["bubble"] == pytest.approx(3 / (m + 3)), (name, m)
    table = results("runs.pipeline-fabric")["tables"][0]["rows"]
    assert [(int(r[0]), r[1]) for r in table] == [(m, f"{3 / (m + 3):.3f}") for m in (1, 4, 8)]


def test_pipeline_schedules_with_message_latency_are_the_simulation():
    """docs/jobs-model-parallel.md: for S = 4, t_f = 20 ms, t_b = 40 ms, c = 2 ms, GPipe
    adds 6c per step, 1F1B 10c, 16c and 28c for M = 4, 8, 16 (bubble 0.286 vs 0.306 at
    M = 8; at c = 10 ms 0.333 vs 0.415)."""
    s, tf, tb, c = 4, 0.020, 0.040, 0.002
    gpipe_adds, one_adds, ms = 6, [10, 16, 28], [4, 8, 16]

    def added(kind, mb):  # the step's growth with latency c, in units of c
        free = pp.simulate(kind, s, mb, tf, tb)["step_s"]
        return (pp.simulate(kind, s, mb, tf, tb, comm_s=c)["step_s"] - free) / c

    for mb, one in zip(ms, one_adds, strict=True):
        assert added("gpipe", mb) == pytest.approx(gpipe_adds)
        assert added("1f1b", mb) == pytest.approx(one)
    bubbles = [f"{pp.simulate(k, s, 8, tf, tb, comm_s=cc)['bubble']:.3f}"
               for cc in (c, 0.010) for k in ("gpipe", "1f1b")]
    assert bubbles == ["0.286", "0.306", "0.333", "0.415"]


def test_one_f_one_b_holds_fewer_micro_batches():
    """`max_in_flight`: 4, 3, 2, 1 for 1F1B against 8 for GPipe at M = 8."""
    one, gpipe, mb = [4, 3, 2, 1], 8, 8
    stages = len(one)
    assert [pp.max_in_flight(pp.schedule("1f1b", stages, mb, s)) for s in range(stages)] == one
    assert {pp.max_in_flight(pp.schedule("gpipe", stages, mb, s))
            for s in range(stages)} == {gpipe}


def test_moe_hot_expert_takes_its_capacity_from_every_host():
    """runs.moe.json: expert 0 received 768 tokens a step, 192 from each host (its
    capacity), for its job: 4 experts, 512 tokens, top-1, capacity factor 1.5."""
    data = results("runs.moe")
    cfg, hot = data["config"], data["hot_expert"]
    cap = moe_app.capacity(cfg["tokens"], cfg["experts"], cfg["top_k"], cfg["capacity_factor"])
    assert cap == hot["from_each_host"] and cfg["experts"] * cap == hot["tokens_per_step"]


def test_lr_rules_and_their_defaults_are_the_codes():
    """docs/jobs-ps.md's table: `mean` for sync and backup, `per_worker` for async and ssp;
    the rules mean, per_worker, staleness."""
    assert dict(ps_app.DEFAULT_LR_RULE) == {"sync": "mean", "backup": "mean",
                                            "async": "per_worker", "ssp": "per_worker"}
    assert set(ps_app.LR_RULES) == {"mean", "per_worker", "staleness"}
