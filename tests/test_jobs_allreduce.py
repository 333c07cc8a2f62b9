"""The ring job's `workload.algorithm` without root: the spec field and its rule, the
launch plan (each rank's leaf for the hierarchical algorithm, from placement and the
fabric's naming), the apps' parser accepting it, and the bound the analysis gets for a
synthetic run (hand-computed)."""
import importlib
import json

import pytest

from incastlab import jobs
from incastlab.analysis import costmodel
from incastlab.analysis.report import analyse
from incastlab.analysis.synthetic import demo_fabric, make_run_dir
from incastlab.apps import ring as ring_app
from incastlab.jobs import ring as ring_job
from incastlab.spec import SpecError, load_spec

IPS = {f"h{n}": f"10.0.{(n - 1) // 2 + 1}.{(n - 1) % 2 + 1}" for n in range(1, 9)}
BASE = ["workload.kind=ring", "topology.leaves=2", "topology.hosts_per_leaf=2",
        "workload.workers=4"]
T0 = 1_700_000_000.0
B = 10e6 / 8  # demo_fabric: 10 Mbit/s links
F = 1514 / 1448
F_ACK = (2 * 1514 + 66) / (2 * 1448)


def _opt(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_three_lists_of_algorithms_agree():
    assert ring_job.ALGORITHMS == ring_app.ALGORITHMS == costmodel.ALLREDUCE_ALGORITHMS


@pytest.mark.parametrize("algo", ["ring", "halving-doubling", "tree", "hierarchical"])
def test_plan_passes_the_algorithm_and_the_apps_parser_accepts_it(algo):
    spec = load_spec(None, BASE + [f"workload.algorithm={algo}"])
    plan = jobs.job_for("ring").launches(spec, IPS, "/tmp/w")
    hosts = spec.placement().workers
    for launch in plan:
        _python, _m, module, *args = launch.argv
        parsed = importlib.import_module(module).parse_args(args)
        assert parsed.algorithm == algo
        if algo == "hierarchical":
            # spread placement: h1 (lf1), h3 (lf2), h2 (lf1), h4 (lf2), ranks in that order
            assert hosts == ("h1", "h3", "h2", "h4")
            assert parsed.leaves == ["lf1", "lf2", "lf1", "lf2"]
        else:
            assert parsed.leaves is None  # only the hierarchical algorithm needs them


def test_gloo_with_one_of_our_algorithms_is_refused_naming_the_field():
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + ["workload.impl=gloo", "workload.algorithm=tree"])
    assert any(e.startswith("workload.algorithm: 'tree' is ours") for e in info.value.errors)
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + ["workload.algorithm=butterfly"])
    assert info.value.errors[0].startswith("workload.algorithm: 'butterfly' is not one of")
    spec = load_spec(None, BASE + ["workload.impl=gloo"])  # gloo with the default is fine
    plan = jobs.job_for("ring").launches(spec, IPS, "/tmp/w")
    assert _opt(plan[0].argv, "--algorithm") == []


def test_leaf_names_follow_the_fabric_naming():
    spec = load_spec(None, ["topology.leaves=3", "topology.hosts_per_leaf=3"])
    assert ring_job.leaf_names(spec, ["h1", "h3", "h4", "h9"]) == ["lf1", "lf1", "lf2", "lf3"]


def _run(tmp_path, algo, hosts, extra_start=None, duration=3.0, compute=0.1):
    logs = {}
    for rank, h in enumerate(hosts):
        start = {"event": "start", "role": "ring", "rank": rank, "world_size": len(hosts),
                 "mode": "ring", "algorithm": algo, "gradient_bytes": 1_000_000,
                 "iface": f"{h}-eth0", "t": T0, **(extra_start or {})}
        its = [{"event": "iteration", "iteration": i, "t_start": T0 + 4 * i,
                "t_end": T0 + 4 * i + duration, "compute_s": compute, "wait_s": None,
                "allreduce_s": duration - compute, "loss": 1.0} for i in range(3)]
        logs[rank] = [start] + its
    run = make_run_dir(tmp_path / algo, workers=logs, fabric=demo_fabric(), t0=T0,
                       spec_text=f'[workload]\nkind = "ring"\nworkers = {len(hosts)}\n'
                                 f'algorithm = "{algo}"\n')
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["placement"] = {"servers": [], "workers": hosts}
    path.write_text(json.dumps(manifest))
    return analyse(run)


def test_hierarchical_bound_of_a_synthetic_run(tmp_path):
    # demo fabric: 2 leaves × 2 hosts, 2 spines, every link 10 Mbit/s. Ranks h1, h3, h2,
    # h4: leaves lf1, lf2, lf1, lf2; leaders h1 (rank 0) and h3 (rank 1).
    a = _run(tmp_path, "hierarchical", ["h1", "h3", "h2", "h4"])
    c = a.metrics["cost"]
    m = 1_000_000
    # leaf reduce M·f/B + leaders' ring of 2 (M each way, host link f' over 10 Mbit/s;
    # the spines give 2 × 10) + broadcast M·f/B
    bound = m * F / B + m * F_ACK / B + m * F / B
    assert c["available"] and c["bound_s"] == pytest.approx(bound)
    assert "hierarchical all-reduce" in c["formula"]
    ring = a.tables["ring"]
    assert (ring["bound_s"] - bound).abs().max() < 1e-9 and len(ring) == 12
    assert ring["ratio"].iloc[0] == pytest.approx(2.9 / bound)


def test_tree_bound_uses_the_logged_slices(tmp_path):
    a = _run(tmp_path, "tree", ["h1", "h2", "h3", "h4"], {"tree_slices": 4})
    # root chain: 2 MB in at 10 Mbit/s + 2 hops of a 0.25 MB slice
    assert a.metrics["cost"]["bound_s"] == pytest.approx(2.5 * 1_000_000 * F / B)
