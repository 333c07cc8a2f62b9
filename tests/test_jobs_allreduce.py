"""The ring job's `workload.algorithm` without root: the spec field and its rule, the
launch plan (each rank's leaf for the hierarchical algorithm, from placement and the
fabric's naming), the apps' parser accepting it, and the bound the analysis gets for a
synthetic run (hand-computed)."""
import importlib
import json

import pytest

from incastlab import jobs
from incastlab.analysis import alphabeta
from incastlab.commands.common import analyse
from incastlab.analysis.synthetic import demo_fabric, make_run_dir
from incastlab.apps import ring as ring_app
from incastlab.jobs import ring as ring_job
from incastlab.jobs import ring_bound as ring_bounds
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
    assert ring_job.ALGORITHMS == ring_app.ALGORITHMS == ring_bounds.ALGORITHMS


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


def test_bucket_options_reach_the_app_only_when_asked():
    spec = load_spec(None, BASE + ["workload.bucket_cap_mb=0.25", "workload.layer_compute_ms=30",
                                   "workload.backward_layers=6"])
    plan = jobs.job_for("ring").launches(spec, IPS, "/tmp/w")
    parsed = ring_app.parse_args(plan[0].argv[3:])
    assert (parsed.bucket_cap_mb, parsed.layer_compute_ms, parsed.layers) == (0.25, 30.0, 6)
    plain = jobs.job_for("ring").launches(load_spec(None, BASE), IPS, "/tmp/w")
    assert not any(a.startswith(("--bucket", "--layer")) for a in plain[0].argv)


def test_exposed_bound_by_hand():
    # M = 1 MB in 4 buckets of 0.25 MB over 8 layers (2 each), 0.1 s a layer, and a toy
    # all-reduce bound of 1 s per MB. The first bucket is ready after 2 layers, 0.6 s
    # before the backward ends: exposed >= max(0.25, 1.0 - 0.6) = 0.4 s
    def of(nbytes):
        return alphabeta.Bound(nbytes / 1e6, f"{nbytes} B")

    plan = {"bucket_bytes": [250_000] * 4, "bucket_layers": [[7, 6], [5, 4], [3, 2], [1, 0]],
            "layers": 8, "layer_compute_s": 0.1}
    b = ring_job.exposed_bound(of, 1e6, plan)
    assert b.seconds == pytest.approx(0.4) and b.terms["overlap_window"] == pytest.approx(0.6)
    # a longer backward hides all but the last bucket
    assert ring_job.exposed_bound(of, 1e6, {**plan, "layer_compute_s": 1.0}).seconds == \
        pytest.approx(0.25)
    # one bucket (no buckets): the whole all-reduce is exposed
    one = {**plan, "bucket_bytes": [1e6], "bucket_layers": [list(range(7, -1, -1))]}
    assert ring_job.exposed_bound(of, 1e6, one).seconds == pytest.approx(1.0)


def test_bucket_table_and_metrics_of_a_synthetic_run(tmp_path):
    hosts = ["h1", "h2", "h3", "h4"]
    logs = {}
    for rank, h in enumerate(hosts):
        logs[rank] = [
            {"event": "start", "role": "ring", "rank": rank, "world_size": 4, "mode": "ring",
             "algorithm": "ring", "gradient_bytes": 1_000_000, "iface": f"{h}-eth0", "t": T0},
            {"event": "buckets", "t": T0, "layers": 8, "gradient_bytes": 1_000_000,
             "layer_compute_s": 0.1, "cap_bytes": 250_000,
             "bucket_layers": [[7, 6], [5, 4], [3, 2], [1, 0]], "bucket_bytes": [250_000] * 4}]
        logs[rank] += [{"event": "iteration", "iteration": i, "t_start": T0 + 4 * i,
                        "t_end": T0 + 4 * i + 1.3, "compute_s": 0.8, "wait_s": None,
                        "allreduce_s": 0.5, "backward_s": 0.8, "comm_total_s": 2.0,
                        "exposed_comm_s": 0.5, "buckets": 4, "loss": 1.0} for i in range(3)]
    run = make_run_dir(tmp_path / "b", workers=logs, fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "ring"\nworkers = 4\n'
                                 'bucket_cap_mb = 0.25\nlayer_compute_ms = 100\n')
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["placement"] = {"servers": [], "workers": hosts}
    path.write_text(json.dumps(manifest))
    a = analyse(run)
    b = a.tables["buckets"]
    assert len(b) == 12 and set(b["rank"]) == {0, 1, 2, 3}
    assert a.metrics["headline"]["exposed_comm_s"] == pytest.approx(0.5)
    assert a.metrics["headline"]["comm_hidden_fraction"] == pytest.approx(0.75)
    # the exposed bound: ring over 10 Mbit/s, whole 1.5 MB·f'/B = 1.282 s, less the 0.6 s
    # of backward after the first bucket; the last bucket alone 0.25 of that
    whole = 1.5 * 1_000_000 * F_ACK / B
    assert a.metrics["cost"]["bound_s"] == pytest.approx(max(whole - 0.6, whole / 4))
