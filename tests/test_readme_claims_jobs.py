"""The numbers of the README's job sections (parameter-server modes, model parallelism,
all-reduce algorithms, mixture of experts) that follow from the code, read out of
README.md as written and recomputed: the shipped spec's bounds, the pipeline schedules'
simulation, the GShard capacity, the learning-rate rules' defaults.

What the README measured on a fabric (iteration and all-reduce times, bubbles, queue
depths) is held by the root tests and benchmarks that tests/README.md names; these tests
hold only what no measurement may change. A figure agrees when the computed value rounds
to it at the precision the README prints.
"""
import re
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
README = (ROOT / "README.md").read_text()
FLAT = " ".join(README.split())
ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")


def _search(pattern):
    m = re.search(pattern, FLAT)
    assert m, f"README no longer says {pattern!r}"
    return m


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


def test_allreduce_algorithms_spec_is_the_fabric_the_readme_describes():
    m = _search(r"runs the four on an oversubscribed fabric: (\d+) ranks on (\d+) leaves, "
                r"(\d+) Mbit/s hosts, one (\d+) Mbit/s uplink per leaf \((\d+):1\), ranks "
                r"dealt round-robin over the leaves")
    ranks, leaves, host, uplink, over = map(int, m.groups())
    spec = load_spec(ROOT / "specs" / "allreduce-algorithms.toml", allow_sweep=True)
    t = spec.topology
    assert (t.leaves, t.spines, t.host_bw_mbps, t.fabric_bw_mbps) == (leaves, 1, host, uplink)
    assert t.hosts_per_leaf * t.host_bw_mbps / t.fabric_bw_mbps == over
    _, point = expand_sweep(spec)[0]
    hosts = list(point.placement().workers)
    assert len(hosts) == ranks == point.workload.workers
    assert ring_job.leaf_names(point, hosts) == [f"lf{i % leaves + 1}" for i in range(ranks)]


def test_allreduce_algorithm_bounds_are_the_cost_models():
    """"Bounds per all-reduce of 1 MB: ring 1.42 s, …" and the table's bound column."""
    m = _search(r"Bounds per all-reduce of 1 MB: ring ([\d.]+) s \([^)]*\), halving-doubling "
                r"([\d.]+) s, tree ([\d.]+) s, hierarchical ([\d.]+) s")
    stated = dict(zip(ALGORITHMS, (float(x) for x in m.groups()), strict=True))
    _, bounds = _shipped_allreduce_bounds()
    assert {a: round(bounds[a], 2) for a in ALGORITHMS} == stated
    section = README[README.index("## All-reduce algorithms"):]
    for algo in ALGORITHMS:  # the measured table repeats each bound
        row = re.search(rf"^\| {re.escape(algo)} \| [\d.]+ s \| ([\d.]+) s \|", section, re.M)
        assert row and float(row[1]) == stated[algo], algo
    ratio = float(_search(r"the bounds predicted ([\d.]+)×")[1])
    assert round(bounds["ring"] / bounds["hierarchical"], 2) == ratio


def test_pipeline_formula_column_is_the_textbook_bubble():
    """The bubble tables' formula column: (S−1)/(M+S−1) for 4 stages."""
    rows = re.findall(r"^\| (\d+) \| ([\d.]+) \| [\d.]+ \(×", README, re.M)
    assert [int(m) for m, _ in rows] == [1, 4, 8]
    for m, stated in rows:
        assert f"{3 / (int(m) + 3):.3f}" == stated
        sim = pp.simulate("gpipe", 4, int(m), 0.05, 0.1)
        assert f"{sim['bubble']:.3f}" == stated


def test_pipeline_schedules_with_message_latency_are_the_simulation():
    m = _search(r"Simulated for S = (\d+), t_f = (\d+) ms, t_b = (\d+) ms, c = (\d+) ms: "
                r"GPipe adds (\d+)c per step, 1F1B (\d+)c, (\d+)c and (\d+)c for M = (\d+), "
                r"(\d+), (\d+) \(bubble ([\d.]+) vs ([\d.]+) at M = (\d+); at c = (\d+) ms "
                r"([\d.]+) vs ([\d.]+)\)")
    g = m.groups()
    s, tf, tb, c = int(g[0]), int(g[1]) / 1e3, int(g[2]) / 1e3, int(g[3]) / 1e3
    gpipe_adds, one_adds, ms = int(g[4]), [int(x) for x in g[5:8]], [int(x) for x in g[8:11]]

    def added(kind, mb):  # the step's growth with latency c, in units of c
        free = pp.simulate(kind, s, mb, tf, tb)["step_s"]
        return (pp.simulate(kind, s, mb, tf, tb, comm_s=c)["step_s"] - free) / c

    for mb, one in zip(ms, one_adds, strict=True):
        assert added("gpipe", mb) == pytest.approx(gpipe_adds)
        assert added("1f1b", mb) == pytest.approx(one)
    at_m, c2 = int(g[13]), int(g[14]) / 1e3
    bubbles = [f"{pp.simulate(k, s, at_m, tf, tb, comm_s=cc)['bubble']:.3f}"
               for cc in (c, c2) for k in ("gpipe", "1f1b")]
    assert bubbles == [g[11], g[12], g[15], g[16]]


def test_one_f_one_b_holds_fewer_micro_batches():
    m = _search(r"logged as `max_in_flight`: (\d+), (\d+), (\d+), (\d+) against (\d+) for "
                r"GPipe at M = (\d+)")
    *one, gpipe, mb = (int(x) for x in m.groups())
    stages = len(one)
    assert [pp.max_in_flight(pp.schedule("1f1b", stages, mb, s)) for s in range(stages)] == one
    assert {pp.max_in_flight(pp.schedule("gpipe", stages, mb, s))
            for s in range(stages)} == {gpipe}


def test_moe_hot_expert_takes_its_capacity_from_every_host():
    """"expert 0 received 768 tokens a step (192 from each host, its capacity)" for the
    stated job: 4 experts, 512 tokens, top-1, capacity factor 1.5."""
    cfg = _search(r"Measured \(`tests/test_moe_root.py`: (\d+) experts on two leaves, \d+ "
                  r"Mbit/s, (\d+) tokens of 1 KiB, top-(\d), alpha = [\d.]+, capacity "
                  r"([\d.]+),")
    experts, tokens, top_k, factor = (int(cfg[1]), int(cfg[2]), int(cfg[3]), float(cfg[4]))
    got = _search(r"expert 0 received (\d+) tokens a step \((\d+) from each host, its "
                  r"capacity\)")
    cap = moe_app.capacity(tokens, experts, top_k, factor)
    assert cap == int(got[2]) and experts * cap == int(got[1])


def test_lr_rules_table_defaults_are_the_codes():
    defaults = {}
    for rule, modes in re.findall(r"^\| `(\w+)` \| [^|]+ \| ([a-z, ]*) \|$", README, re.M):
        for mode in filter(None, (x.strip() for x in modes.split(","))):
            defaults[mode] = rule
    assert defaults == dict(ps_app.DEFAULT_LR_RULE)
    assert {r for r, _ in re.findall(r"^\| `(\w+)` \| ([^|]+) \|", README, re.M)
            if r in ps_app.LR_RULES} == set(ps_app.LR_RULES)
