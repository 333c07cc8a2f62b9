"""The MoE job without root: spec fields and their rule, the launch plan parsed by the
app's own parser, and the analysis of a synthetic run (the all-to-all bound from the
logged counts, by hand; accounting, skew and metrics)."""
import json

import pytest

from incastlab import jobs
from incastlab.commands.common import analyse
from incastlab.analysis.synthetic import demo_fabric, make_run_dir
from incastlab.apps import moe as moe_app
from incastlab.spec import SpecError, load_spec

IPS = {f"h{n}": f"10.0.{(n - 1) // 2 + 1}.{(n - 1) % 2 + 1}" for n in range(1, 5)}
BASE = ["workload.kind=moe", "topology.leaves=2", "topology.hosts_per_leaf=2"]
T0 = 1_700_000_000.0
B = 10e6 / 8  # demo_fabric: 10 Mbit/s links
FA = (2 * 1514 + 66) / (2 * 1448)


def test_plan_reaches_the_app():
    spec = load_spec(None, BASE + ["workload.experts=4", "workload.zipf_alpha=1.5",
                                   "workload.capacity_factor=2", "workload.iterations=3"])
    plan = jobs.job_for("moe").launches(spec, IPS, "/tmp/w")
    assert [la.host for la in plan] == list(spec.placement().workers)
    for rank, launch in enumerate(plan):
        args = moe_app.parse_args(launch.argv[3:])
        assert (args.rank, args.world_size, args.steps) == (rank, 4, 3)
        assert (args.zipf_alpha, args.capacity_factor, args.top_k) == (1.5, 2.0, 2)
    assert jobs.job_for("moe").expected_progress(spec.workload) == 3


def test_top_k_above_the_experts_is_refused_naming_the_field():
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + ["workload.experts=2", "workload.top_k=3"])
    assert any(e.startswith("workload.top_k: 3 experts per token") for e in info.value.errors)


def test_bound_and_accounting_of_a_synthetic_run(tmp_path):
    # 3 experts on h1 (lf1), h3, h4 (lf2); tokens of 1000 bytes; every step ranks 1 and 2
    # send 1000 tokens each to expert 0 and rank 0 sends 250 to each of them
    hosts = ["h1", "h3", "h4"]
    sent = {0: [0, 250, 250], 1: [1000, 0, 0], 2: [1000, 0, 0]}
    recv = {0: [0, 1000, 1000], 1: [250, 0, 0], 2: [250, 0, 0]}
    logs = {}
    for r, h in enumerate(hosts):
        logs[r] = [{"event": "start", "role": "expert", "rank": r, "world_size": 3,
                    "mode": "moe", "token_bytes": 1000, "iface": f"{h}-eth0", "t": T0}]
        logs[r] += [{"event": "iteration", "iteration": i, "t_start": T0 + 10 * i,
                     "t_end": T0 + 10 * i + 8.0, "compute_s": 0.01, "comm_s": 7.9,
                     "wait_s": None, "alltoall_s": [2.0, 2.0, 2.0, 1.9],
                     "tokens_routed": 1200, "tokens_sent": sum(sent[r]),
                     "tokens_dropped": 1200 - sum(sent[r]), "tokens_received": sum(recv[r]),
                     "sent_counts": sent[r], "recv_counts": recv[r], "mismatched": 0}
                    for i in range(2)]
    run = make_run_dir(tmp_path / "moe", workers=logs, fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "moe"\nexperts = 3\n')
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["placement"] = {"servers": [], "workers": hosts}
    path.write_text(json.dumps(manifest))
    a = analyse(run)
    c = a.metrics["cost"]
    # dispatch: 2 MB into h1 over its 10 Mbit/s link, or into leaf lf1 over 2 spines ×
    # 10 Mbit/s (1 MB/s each way: half the host-link time); the same back in the
    # combine; twice (forward, backward): 4 × 2 MB·f'/B
    assert c["available"] and c["bound_s"] == pytest.approx(4 * 2_000_000 * FA / B)
    t = a.tables["moe"]
    assert len(t) == 6 and int(t["tokens_dropped"].sum()) == 2 * (1200 - 500 + 2 * 200)
    head = a.metrics["headline"]
    assert head["tokens_dropped"] == int(t["tokens_dropped"].sum())
    # skew: expert 0 received 2000 tokens a step, the mean expert 2500 / 3
    assert head["expert_skew"] == pytest.approx(2000 / (2500 / 3))


def test_learned_routing_reaches_the_app_and_a_bad_value_is_refused():
    spec = load_spec(None, BASE + ["workload.experts=3", "workload.routing=learned",
                                   "workload.lr=0.5", "workload.balance_coef=0.02"])
    for launch in jobs.job_for("moe").launches(spec, IPS, "/tmp/w"):
        args = moe_app.parse_args(launch.argv[3:])
        assert (args.routing, args.lr, args.balance_coef) == ("learned", 0.5, 0.02)
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + ["workload.routing=trained"])
    assert "workload.routing: 'trained' is not one of zipf, learned" in info.value.errors


def test_the_all_to_all_algorithm_reaches_the_app_and_a_bad_one_is_refused():
    from incastlab.apps.alltoall import ALGORITHMS
    spec = load_spec(None, BASE + ["workload.experts=3"])
    assert spec.workload.alltoall == "gloo"  # the default: gloo's all_to_all_single
    for algorithm in ALGORITHMS:
        spec = load_spec(None, BASE + ["workload.experts=3", f"workload.alltoall={algorithm}"])
        for launch in jobs.job_for("moe").launches(spec, IPS, "/tmp/w"):
            assert moe_app.parse_args(launch.argv[3:]).alltoall == algorithm
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + ["workload.alltoall=ring"])
    assert "workload.alltoall: 'ring' is not one of gloo, pairwise" in info.value.errors


def test_the_section_reports_the_learned_routers_loss(tmp_path):
    hosts = ["h1", "h3"]
    logs = {}
    for r, h in enumerate(hosts):
        logs[r] = [{"event": "start", "role": "expert", "rank": r, "world_size": 2,
                    "mode": "moe", "token_bytes": 1000, "iface": f"{h}-eth0", "t": T0,
                    "routing": "learned"}]
        logs[r] += [{"event": "iteration", "iteration": i, "t_start": T0 + 10 * i,
                     "t_end": T0 + 10 * i + 8.0, "compute_s": 0.01, "comm_s": 7.9,
                     "wait_s": None, "alltoall_s": [2.0, 2.0, 2.0, 1.9],
                     "tokens_routed": 10, "tokens_sent": 10, "tokens_dropped": 0,
                     "tokens_received": 10, "sent_counts": [5, 5], "recv_counts": [5, 5],
                     "mismatched": None, "loss": [1.5, 0.5, 0.25][i] * (r + 1)}
                    for i in range(3)]
    run = make_run_dir(tmp_path / "moe", workers=logs, fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "moe"\nexperts = 2\n')
    a = analyse(run)
    md = "\n".join(s.markdown for s in jobs.job_for("moe").sections(a, {}))
    # mean over the two hosts: (1.5 + 3) / 2 first, (0.25 + 0.5) / 2 last
    assert "loss (mean over hosts) 2.25 in the first step, 0.375 in the last" in md
    assert "returned rows not checked" in md and "differ" not in md
