"""Root tier for the MoE job (issue 12) on a real fabric: 4 experts spread over two
leaves, routing skewed with alpha = 2 and top-1, so expert 0 (on the first expert host)
is wanted by 70 % of the tokens (1 / (1 + 1/4 + 1/9 + 1/16)) and, under capacity factor
1.5, takes 192 of each host's 512 a step, against about 90 for expert 1. (With top-2
and capacity 1.25 a first run had experts 0 and 1 both at their capacity, 1280 and 1255
tokens a step, and expert 1's port, fed through the spines, queued more.) Expert 0's
host's port (the leaf's egress to it) queues the most of all the experts' ports; every
token-expert assignment is accounted for; every returned row is its expert's output;
the all-to-all time is at or above its bound."""
from __future__ import annotations

import functools
import json

import pytest

from incastlab.commands.common import analyse, build_report
from tests.rootnet import run_complete

pytestmark = pytest.mark.root


def _run_skewed(tmp_path_factory, alltoall: str):
    run_dir = tmp_path_factory.mktemp(f"moe-skew-{alltoall}")
    manifest = run_complete(run_dir, [
        "topology.spines=2", "topology.leaves=2", "topology.hosts_per_leaf=2",
        "topology.host_bw_mbps=20", "topology.fabric_bw_mbps=20", "routing.policy=ecmp",
        "workload.kind=moe", "workload.experts=4", "workload.tokens=512",
        "workload.hidden=256", "workload.top_k=1", "workload.zipf_alpha=2",
        "workload.capacity_factor=1.5", "workload.iterations=5", "capture.enabled=false",
        f"workload.alltoall={alltoall}"])
    build_report(run_dir, plots=False)  # no figures: no test here reads them
    return run_dir, manifest


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    return _run_skewed(tmp_path_factory, "gloo")


@pytest.fixture(scope="module")
def pairwise(tmp_path_factory):
    return _run_skewed(tmp_path_factory, "pairwise")


@functools.cache
def _analysed(run_dir):
    """A run's analysis, made once: the tests only read it."""
    return analyse(run_dir)


def _expert_ports(run_dir, experts):
    q = _analysed(run_dir).tables["queue_summary"]
    ports = q[(q["kind"] == "host-downlink") & q["peer"].isin(experts)].set_index("peer")
    assert set(ports.index) == set(experts)
    return ports


def test_the_hot_experts_port_queues_most(skewed):
    run_dir, manifest = skewed
    experts = manifest["placement"]["workers"]
    ports = _expert_ports(run_dir, experts)
    hot = experts[0]  # expert 0: P ~ 0.70, against 0.18, 0.08, 0.04 for the others
    others = ports.drop(index=hot)
    assert ports.loc[hot, "mean_backlog_pkts"] > others["mean_backlog_pkts"].max(), ports
    assert ports.loc[hot, "sent_bytes"] > others["sent_bytes"].max(), ports


def test_the_pairwise_exchange_spares_the_hot_experts_queue(skewed, pairwise):
    """Gloo's all_to_all_single sends every block at once: the three other hosts' flows
    meet in the hot expert's port queue (an incast). The pairwise exchange sends one
    block into each host per step, from a host link of the same rate: the port carries
    the same bytes without that queue."""
    (run_gloo, man_gloo), (run_pair, man_pair) = skewed, pairwise
    hot = man_pair["placement"]["workers"][0]
    gloo = _expert_ports(run_gloo, man_gloo["placement"]["workers"]).loc[hot]
    pair = _expert_ports(run_pair, man_pair["placement"]["workers"])
    assert pair.loc[hot, "sent_bytes"] == pair["sent_bytes"].max(), pair
    # measured 2026-12-02: mean 12.7 packets (peak 99 of 100) with gloo, 0.06 (peak 3)
    # pairwise; a stalled datapath's burst can queue a few dozen frames at any port, so
    # the peak is held to half gloo's, the mean only to below it
    assert pair.loc[hot, "mean_backlog_pkts"] < gloo["mean_backlog_pkts"], (gloo, pair)
    assert pair.loc[hot, "max_backlog_pkts"] <= gloo["max_backlog_pkts"] / 2, (gloo, pair)


@pytest.mark.parametrize("which", ["skewed", "pairwise"])
def test_every_token_accounted_and_the_bound_respected(which, request):
    run_dir, _ = request.getfixturevalue(which)
    a = _analysed(run_dir)
    t = a.tables["moe"]
    assert len(t) == 4 * 5 and int(t["mismatched"].sum()) == 0
    assert (t["tokens_routed"] == 512).all()  # top-1
    assert (t["tokens_routed"] == t["tokens_sent"] + t["tokens_dropped"]).all()
    assert t["tokens_sent"].sum() == t["tokens_received"].sum()
    assert t["tokens_dropped"].sum() > 0  # alpha = 2 overfills expert 0's capacity
    cost = json.loads((run_dir / "metrics.json").read_text())["cost"]
    assert cost["available"] and "all-to-all" in cost["formula"], cost
    assert cost["ratio"] >= 0.98, cost  # communication per step / its lower bound
