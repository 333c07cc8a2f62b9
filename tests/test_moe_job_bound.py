"""MoeJob.bound on synthetic runs (rootless): the logged token counts, the hosts' links,
their leaves, the spines the routing lets a flow use and the MTU give a step's
all-to-alls (dispatch, then combine, forward and backward) worked out by hand from
alltoall_bound's formula; no bound where the run lacks what it needs.

Rates are Mbit/s: 10 Mbit/s moves 1,250,000 B/s, a 2 Mbit/s spine link 250,000.
"""
import pytest

from incastlab.jobs.moe import MoeJob
from incastlab.jobs.moe_bound import alltoall_bound
from tests.job_bound_runs import T0, fabric, run

F = 1514 / 1448    # a bulk flow's wire bytes per payload byte (ACKs only the other way)
F9000 = 9014 / 8948
X = 100_000        # bytes a step from each lf1 expert to each lf2 expert (100 tokens)
HOSTS = ["h1", "h2", "h3", "h4"]  # 2 leaves x 2 hosts: h1, h2 on lf1; h3, h4 on lf2
# ranks 0 and 1 (lf1) send 100 tokens of 1000 B to each of ranks 2 and 3 (lf2)
SENT = {0: [0, 0, 100, 100], 1: [0, 0, 100, 100], 2: [0, 0, 0, 0], 3: [0, 0, 0, 0]}


def _logs(ranks=4, steps=2):
    logs = {}
    for r in range(ranks):
        logs[r] = [{"event": "start", "role": "expert", "rank": r, "world_size": ranks,
                    "mode": "moe", "token_bytes": 1000, "iface": f"{HOSTS[r]}-eth0",
                    "t": T0}]
        logs[r] += [{"event": "iteration", "iteration": i, "t_start": T0 + 10 * i,
                     "t_end": T0 + 10 * i + 8.0, "compute_s": 0.01, "comm_s": 7.9,
                     "wait_s": None, "alltoall_s": [2.0, 2.0, 2.0, 1.9],
                     "tokens_routed": 200, "tokens_sent": sum(SENT[r]), "tokens_dropped": 0,
                     "tokens_received": 0, "sent_counts": SENT[r][:ranks],
                     "recv_counts": [0] * ranks, "mismatched": 0} for i in range(steps)]
    return logs


def _run(tmp_path, policy="ecmp", fab=None, workers=HOSTS, logs=None, **kw):
    spec = f'[workload]\nkind = "moe"\nexperts = 4\n[routing]\npolicy = "{policy}"\n'
    return run(tmp_path / "run", spec, fab or fabric(hosts_per_leaf=2, fabric_mbps=2.0),
               (), workers, _logs() if logs is None else logs, **kw)


def test_the_spine_links_bind_both_all_to_alls(tmp_path):
    b = _run(tmp_path).tables["bound"]
    # dispatch: lf1 sends 4X = 400,000 B to lf2 over 2 spine links of 250,000 B/s: 0.8 s·f
    # (each host link carries 2X at 1,250,000 B/s, 0.16 s·f; one flow on one spine link
    # 0.4 s·f); the combine answers over the same links the other way: 0.8 s·f; twice
    assert b.terms == {"dispatch": pytest.approx(1.6 * F), "combine": pytest.approx(1.6 * F),
                       "latency": 0.0}
    assert b.seconds == pytest.approx(3.2 * F)
    by_hand = alltoall_bound([[0, 0, X, X], [0, 0, X, X], [0] * 4, [0] * 4], 10.0,
                             leaves=["lf1", "lf1", "lf2", "lf2"], spines=2, fabric_mbps=2.0,
                             passes=2)
    assert (b.formula, b.bottleneck) == (by_hand.formula, by_hand.bottleneck)


def test_single_routing_halves_the_spine_capacity(tmp_path):
    b = _run(tmp_path, "single").tables["bound"]
    # 400,000 B over one spine link of 250,000 B/s: 1.6 s·f a phase, four phases
    assert b.seconds == pytest.approx(6.4 * F)


def test_the_runs_mtu_sets_the_framing(tmp_path):
    b = _run(tmp_path, fab=fabric(hosts_per_leaf=2, fabric_mbps=2.0, mtu=9000)).tables["bound"]
    assert b.seconds == pytest.approx(3.2 * F9000)


def test_a_one_leaf_run_is_held_to_its_host_links(tmp_path):
    # one leaf, no spines: the busiest host link, 2X out of h1 (and of h2) at 1,250,000 B/s
    b = _run(tmp_path, fab=fabric(spines=0, leaves=1, hosts_per_leaf=4)).tables["bound"]
    assert b.seconds == pytest.approx(4 * 2 * X * F / 1.25e6)


@pytest.mark.parametrize("case", ["no placement", "no steps", "fewer ranks logged",
                                  "a host not in the map", "no map"])
def test_no_bound_without_what_it_needs(tmp_path, case):
    kw = {"no placement": {"placement": False}, "no steps": {"logs": {}},
          "fewer ranks logged": {"logs": _logs(ranks=3)},
          "a host not in the map": {"workers": ["h1", "h2", "h3", "h9"]},
          "no map": {}}[case]
    if case == "no map":
        spec = '[workload]\nkind = "moe"\nexperts = 4\n'
        a = run(tmp_path / "run", spec, None, (), HOSTS, _logs())
    else:
        a = _run(tmp_path, **kw)
    assert MoeJob().bound(a) is None
