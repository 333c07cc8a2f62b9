"""The jobs' bounds (incastlab/jobs/*_bound.py) on cases worked out by hand from their
docstrings' formulas, written to kill the mutants the bound tests let live
(benchmarks/mutation_score.py): every term (host link, fabric, latency) and the
bottleneck's name, the defaults (no fabric, no latency, MTU 1500, one collective or
pass), the formula a report prints with its numbers, and the bad-input errors naming
the argument.

Rates are Mbit/s: 20 Mbit/s moves 2,500,000 B/s, 10 Mbit/s 1,250,000, 8 Mbit/s 1,000,000.
"""
import pytest

from incastlab.jobs.incast_bound import incast_bound
from incastlab.jobs.moe_bound import alltoall_bound
from incastlab.jobs.pipeline_bound import bubble_fraction, pipeline_bound
from incastlab.jobs.ps_bound import ps_bound
from incastlab.jobs.ring_bound import (allreduce_bound, halving_doubling_bound, hierarchical_bound,
                                      ring_bound, tree_bound)
from incastlab.jobs.tensor_bound import tensor_bound

F = 1514 / 1448                    # a bulk flow
FA = (2 * 1514 + 66) / (2 * 1448)  # data plus the ACKs of an equal reverse flow
FA9000 = (2 * 9014 + 66) / (2 * 8948)
MB = 1_000_000


def g(x: float) -> str:
    """A number as a bound's formula prints it below 1000 (4 significant digits)."""
    return f"{x:.4g}"


# --- incast: max(receiver port N·S·f/B_r, sender link S·f/B_s, fabric) + 2α -------------

def _incast(**kw):
    # 4 senders x 250,000 B into a 20 Mbit/s port: 1 MB·f / 2.5 MB/s = 0.4·f s
    args = {"sender_mbps": [100, 10, 100, 100], "sender_leaves": ["A", "A", "B", "B"],
            "receiver_leaf": "B", "spines": 1, "fabric_mbps": 5.0, "alpha_s": 0.001}
    return incast_bound(4, 250_000, 20.0, **{**args, **kw})


def test_incast_every_term_and_the_formula():
    b = _incast()
    # the slowest sender (10 Mbit/s) sends its 250,000 B in 0.2·f s; the two senders on
    # leaf A put 500,000 B on A's one 5 Mbit/s spine link: 0.8·f s, the bottleneck
    assert b.terms == {"receiver_port": pytest.approx(0.4 * F),
                       "sender_link": pytest.approx(0.2 * F),
                       "fabric": pytest.approx(0.8 * F), "latency": 0.002}
    assert b.seconds == pytest.approx(0.8 * F + 0.002)
    assert b.bottleneck == "fabric (uplinks of A)"
    assert b.formula == (
        f"incast round, N=4 senders × S=250,000 B, f=1.0456: max(receiver port "
        f"N·S·f/B_r = 1,000,000 B·f/20 Mbit/s = {g(0.4 * F)} s, sender link "
        f"S·f/B_s = {g(0.2 * F)} s, fabric uplinks of A 500,000 B·f/(1×5 Mbit/s) = "
        f"{g(0.8 * F)} s) + 2α = 0.002 s = {g(0.8 * F + 0.002)} s")


def test_incast_port_alone():
    b = incast_bound(4, 250_000, 20.0)
    assert b.terms == {"receiver_port": pytest.approx(0.4 * F), "sender_link": 0.0,
                       "fabric": 0.0, "latency": 0.0}
    assert (b.seconds, b.bottleneck) == (pytest.approx(0.4 * F), "receiver port")
    assert b.formula == (f"incast round, N=4 senders × S=250,000 B, f=1.0456: max(receiver "
                         f"port N·S·f/B_r = 1,000,000 B·f/20 Mbit/s = {g(0.4 * F)} s) = "
                         f"{g(0.4 * F)} s")


def test_incast_slow_sender_link():
    # 2 x 250,000 B into 100 Mbit/s (0.04·f s), but a sender's 10 Mbit/s takes 0.2·f s
    b = incast_bound(2, 250_000, 100.0, sender_mbps=10.0)
    assert (b.seconds, b.bottleneck) == (pytest.approx(0.2 * F), "sender link")


@pytest.mark.parametrize("kw, message", [
    ({"senders": 2.0}, "senders must be a positive integer"),
    ({"block_bytes": 0}, "block_bytes must be a positive number"),
    ({"receiver_mbps": -1}, "receiver_mbps: rates must be positive"),
    ({"sender_mbps": [10, 10]}, "sender_mbps: expected one rate or 4, got 2"),
    ({"sender_leaves": ["A", "B"]}, "sender_leaves: expected 4 leaves, got 2"),
    ({"receiver_leaf": None}, "give both sender_leaves and receiver_leaf, or neither"),
    ({"spines": 0}, "`spines` and `fabric_mbps` are needed"),
])
def test_incast_bad_inputs_name_the_argument(kw, message):
    args = {"senders": 4, "block_bytes": 250_000, "receiver_mbps": 20.0,
            "sender_mbps": 10.0, "sender_leaves": ["A", "A", "B", "B"],
            "receiver_leaf": "B", "spines": 1, "fabric_mbps": 5.0}
    with pytest.raises(ValueError, match=message):
        incast_bound(**{**args, **kw})
    if "spines" in kw:  # the default is no spines, too
        del args["spines"]
        with pytest.raises(ValueError, match=message):
            incast_bound(**args)


# --- tensor: collectives × ring_bound(T, n) -------------------------------------------

def test_tensor_collectives_over_the_fabric():
    # T = 4, n = 1 MB: each rank sends 2·3/4·n = 1.5 MB. Ring 0→1→2→3→0 on leaves
    # A A B B: edges 1→2 and 3→0 cross, 1.5 MB·f' each way over one 10 Mbit/s spine
    # link = 1.2·f' s (the host links: 0.6·f' s); 2(T−1)α = 0.006 s per all-reduce
    leaves = ["A", "A", "B", "B"]
    b = tensor_bound(4, MB, 20.0, collectives=3, leaves=leaves, spines=1,
                     fabric_mbps=10.0, alpha_s=0.001)
    assert b.terms == {"per_collective": pytest.approx(1.2 * FA + 0.006),
                       "latency": pytest.approx(0.018), "bandwidth": pytest.approx(3.6 * FA),
                       "collectives": 3}
    assert (b.seconds, b.bottleneck) == (pytest.approx(3.6 * FA + 0.018),
                                         "fabric (uplinks of A)")
    one = ring_bound(4, MB, 20.0, leaves=leaves, spines=1, fabric_mbps=10.0, alpha_s=0.001)
    assert b.formula == (
        f"tensor parallel, T=4, 3 all-reduces of n=1,000,000 B each: 3 × (2(T−1)α = "
        f"0.006 s + {g(1.2 * FA)} s of bytes) = {g(3.6 * FA + 0.018)} s (latency 0.018 s, "
        f"bandwidth {g(3.6 * FA)} s); one all-reduce: {one.formula}")


def test_tensor_defaults_and_mtu():
    # one all-reduce of 2 ranks: each sends 2·1/2·n = n, at 20 Mbit/s, no latency
    b = tensor_bound(2, MB, 20.0)
    assert b.terms == {"per_collective": pytest.approx(0.4 * FA), "latency": 0.0,
                       "bandwidth": pytest.approx(0.4 * FA), "collectives": 1}
    assert tensor_bound(2, MB, 20.0, mtu=9000).seconds == pytest.approx(0.4 * FA9000)


def test_tensor_small_messages_are_latency_bound():
    # 1,000 B over 4 ranks: 1,500 B·f' = 0.64 ms of bytes against 6 ms of latency
    b = tensor_bound(4, 1000, 20.0, alpha_s=0.001)
    assert b.bottleneck == "latency"
    assert b.seconds == pytest.approx(1500 * FA / 2.5e6 + 0.006)


def test_tensor_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="collectives must be a positive integer"):
        tensor_bound(4, MB, 20.0, collectives=1.5)
    with pytest.raises(ValueError, match="`spines` and `fabric_mbps` are needed"):
        tensor_bound(4, MB, 20.0, leaves=["A", "A", "B", "B"], fabric_mbps=10.0)


# --- MoE: passes × (exchange(M) + exchange(Mᵀ)) + 2α·passes ----------------------------

# the docstring's example: 3 hosts at 8 Mbit/s, host 0 the hot expert receiving 1 MB
# from each of the others and sending 0.25 MB to each
HOT = [[0, 250_000, 250_000], [MB, 0, 0], [MB, 0, 0]]


def test_moe_hot_expert_by_hand():
    # dispatch: 2 MB into host 0, whose egress carries data too: 2 MB·f'/1 MB/s = 2·f' s;
    # combine: the same 2 MB out of host 0; two passes and 2α = 2 ms per pass
    b = alltoall_bound(HOT, 8.0, passes=2, alpha_s=0.001)
    assert b.terms == {"dispatch": pytest.approx(4 * FA), "combine": pytest.approx(4 * FA),
                       "latency": pytest.approx(0.004)}
    assert b.seconds == pytest.approx(8 * FA + 0.004)
    assert b.bottleneck == "dispatch: host link into rank 0"
    assert b.formula == (
        f"all-to-all of 3 hosts, 2,500,000 B across: 2 × (dispatch at its busiest link "
        f"(host link into rank 0) {g(2 * FA)} s + combine (host link out of rank 0) "
        f"{g(2 * FA)} s) + 0.004 s latency = {g(8 * FA + 0.004)} s")
    assert alltoall_bound(HOT, 8.0).formula.endswith(f"{g(2 * FA)} s) = {g(4 * FA)} s")


def test_moe_diagonal_stays_home_and_one_host_moves_nothing():
    with_diagonal = [[5 * MB, 250_000, 250_000], [MB, 0, 0], [MB, 0, 0]]
    assert alltoall_bound(with_diagonal, 8.0).seconds == pytest.approx(4 * FA)
    assert alltoall_bound([[7]], 8.0).seconds == 0.0


def test_moe_one_flow_over_the_fabric_both_ways():
    # 2 hosts on 2 leaves with 4 spines: the flow takes one 8 Mbit/s spine link, 1 s·f;
    # a 1-byte answer is data the other way, so its ACKs share the link (f'); a zero
    # entry is no flow at all
    two = {"leaves": ["A", "B"], "spines": 4, "fabric_mbps": 8.0}
    b = alltoall_bound([[0, MB], [0, 0]], 1000.0, **two)
    assert b.terms["dispatch"] == pytest.approx(F)
    assert b.terms["combine"] == pytest.approx(F)  # the combine crosses the fabric too
    assert b.bottleneck == "dispatch: one flow's spine link"
    b = alltoall_bound([[0, MB], [1, 0]], 1000.0, **two)
    assert b.terms["dispatch"] == pytest.approx(FA)


def test_moe_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="host_mbps: expected one rate or 3, got 2"):
        alltoall_bound(HOT, [8.0, 8.0])
    with pytest.raises(ValueError, match="leaves: expected 3 leaves, got 2"):
        alltoall_bound(HOT, 8.0, leaves=["A", "B"])
    with pytest.raises(ValueError, match="passes must be a positive integer"):
        alltoall_bound(HOT, 8.0, passes=1.5)
    with pytest.raises(ValueError, match="`spines` and `fabric_mbps` are needed"):
        alltoall_bound(HOT, 8.0, leaves=["A", "B", "B"], fabric_mbps=8.0)
    with pytest.raises(ValueError, match="matrix: expected a square list of lists"):
        alltoall_bound([[0, 1]], 8.0)


# --- pipeline: idle ≥ (S−1)(t_f+t_b) + Σ_k 2(α + A·f/B_k) -------------------------------

def test_pipeline_step_by_hand():
    # S = 3 on links 20, 10, 20 Mbit/s, stages 1 and 2 on leaf B behind 5 Mbit/s spines:
    # boundary 0 crosses at 5 Mbit/s: 250,000 B·f/0.625 MB/s = 0.4·f s; boundary 1 stays
    # on B at 10: 0.2·f s
    b = pipeline_bound(3, 4, 250_000, [20.0, 10.0, 20.0], fwd_s=0.125, bwd_s=0.25,
                       leaves=["A", "B", "B"], fabric_mbps=5.0, alpha_s=0.001)
    transfer = 2 * (0.4 * F + 0.001 + 0.2 * F + 0.001)
    assert b.terms == {"transfer": pytest.approx(transfer), "schedule": 0.75,
                       "compute": 1.5, "step": pytest.approx(6 * 0.375 + transfer),
                       "per_message": pytest.approx(0.4 * F + 0.001)}
    assert (b.seconds, b.bottleneck) == (pytest.approx(transfer), "critical-path transfers")
    assert b.formula == (
        f"pipeline step, S=3 stages, M=4 micro-batches, A=250,000 B per message, "
        f"f=1.0456: idle ≥ bubble (S−1)(t_f+t_b) = 2×0.375 s = 0.75 s + transfers on the "
        f"critical path Σ 2(α + A·f/B_k) over 2 boundaries = {g(transfer)} s; step ≥ "
        f"(M+S−1)(t_f+t_b) + transfers = {g(2.25 + transfer)} s, bubble fraction "
        f"(S−1)/(M+S−1) = 0.3333")


def test_pipeline_boundary_takes_the_slower_of_its_two_links():
    # no fabric: both boundaries touch the 10 Mbit/s stage, 0.2·f s each way each
    b = pipeline_bound(3, 4, 250_000, [20.0, 10.0, 20.0])
    assert b.seconds == pytest.approx(2 * (0.2 * F + 0.2 * F))


def test_pipeline_of_one_stage_moves_nothing():
    b = pipeline_bound(1, 4, 1000, 20.0, fwd_s=0.5)
    assert b.seconds == 0.0 and b.terms["per_message"] == 0.0 and b.terms["schedule"] == 0.0


@pytest.mark.parametrize("kw, message", [
    ({"stages": 2.0}, "stages must be a positive integer"),
    ({"micro_batches": 1.5}, "micro_batches must be a positive integer"),
    ({"activation_bytes": 0}, "activation_bytes must be a positive number"),
    ({"host_mbps": [20.0]}, "host_mbps: expected one rate or 2, got 1"),
    ({"leaves": ["A"]}, "leaves: expected 2 leaves, got 1"),
    ({"leaves": ["A", "B"]}, "stages on different leaves: `fabric_mbps` is needed"),
    ({"fwd_s": -1.0}, "fwd_s, bwd_s and alpha_s must be >= 0"),
    ({"bwd_s": -1.0}, "fwd_s, bwd_s and alpha_s must be >= 0"),
    ({"alpha_s": -1.0}, "fwd_s, bwd_s and alpha_s must be >= 0"),
])
def test_pipeline_bad_inputs_name_the_argument(kw, message):
    args = {"stages": 2, "micro_batches": 4, "activation_bytes": 1000, "host_mbps": 20.0}
    with pytest.raises(ValueError, match=message):
        pipeline_bound(**{**args, **kw})


def test_bubble_fraction_takes_whole_counts():
    assert bubble_fraction(4, 5) == 3 / 8
    for s, m, message in ((2.0, 4, "stages"), (4, 1.5, "micro_batches")):
        with pytest.raises(ValueError, match=f"{message} must be a positive integer"):
            bubble_fraction(s, m)


# --- parameter server (jobs/ps_bound.py's module docstring derives both branches) -----

def test_async_ps_over_the_fabric_by_hand():
    # 2 workers on leaf A, one shard on B, 20 Mbit/s hosts, one 10 Mbit/s spine link:
    # own link 2·1 MB·f/2.5 MB/s + 2α; the port N·M/k·f' = 2 MB·f'/2.5 MB/s = 0.8·f' s;
    # the fabric carries both workers' pushes up A (and their pulls up B): 2 MB·f'
    # /1.25 MB/s = 1.6·f' s; compute 0.125 s hides in the port's and the fabric's period
    b = ps_bound(2, 1, MB, 20.0, worker_leaves=["A", "A"], shard_leaves=["B"], spines=1,
                 fabric_mbps=10.0, mode="ssp", compute_s=0.125, alpha_s=0.001)
    assert b.terms == {"worker_link": pytest.approx(0.8 * F + 0.002),
                       "shard_port_period": pytest.approx(0.8 * FA),
                       "fabric_period": 2e6 * FA / 1.25e6, "compute": 0.125}
    assert b.seconds == pytest.approx(1.6 * FA - 0.125)
    # up A and up B carry the same bytes: either may be named
    assert b.bottleneck.startswith("fabric (uplinks of ")
    assert b.formula.startswith(
        f"ssp PS, N=2 workers, k=1 shard(s), M=1,000,000 B: per worker iteration max(own "
        f"link 2·M·f/B_w + 2α = {g(0.8 * F + 0.002)} s, shared shard port N·M/k·f'/B_ps − "
        f"compute = 2,000,000 B·1.0684/20 Mbit/s − 0.125 s = {g(0.8 * FA - 0.125)} s, "
        f"fabric uplinks of ")
    assert b.formula.endswith(
        f" 2,000,000 B·f'/(1×10 Mbit/s) = {g(1.6 * FA)} s − compute) = "
        f"{g(1.6 * FA - 0.125)} s (f=1.0456; f'=1.0684: push and pull share the port in "
        f"full duplex)")


def test_async_ps_shards_split_the_port_bytes():
    # 2 workers, 2 shards: each port carries N·M/k = 1 MB per direction
    b = ps_bound(2, 2, MB, 20.0, mode="async")
    assert b.terms["shard_port_period"] == pytest.approx(0.4 * FA)
    assert b.formula.startswith("async PS, N=2 workers, k=2 shard(s), M=1,000,000 B: per "
                                f"worker iteration max(own link 2·M·f/B_w = {g(0.8 * F)} s,")
    # no fabric modelled: no fabric term in the formula
    assert f"− 0 s = {g(0.4 * FA)} s) = {g(0.8 * F)} s (f=1.0456;" in b.formula


def test_sync_ps_over_the_fabric_by_hand():
    # the shard's 2 pulls leave B over its 10 Mbit/s spine link (2 MB·f/1.25 MB/s), then
    # the last-answered worker's slice comes back through the spine at 10 Mbit/s
    b = ps_bound(2, 1, MB, 20.0, worker_leaves=["A", "A"], shard_leaves=["B"], spines=1,
                 fabric_mbps=10.0, alpha_s=0.001)
    assert b.terms == {"shard_port": pytest.approx(1.2 * F),
                       "worker_link": pytest.approx(0.8 * F),
                       "fabric": pytest.approx(2.4 * F), "latency": 0.002,
                       "push_then_pull": pytest.approx(3.2 * F + 0.002)}
    assert (b.seconds, b.bottleneck) == (pytest.approx(2.4 * F + 0.002),
                                         "fabric (uplinks of B)")
    assert b.formula == (
        f"sync PS, N=2 workers, k=1 shard(s), M=1,000,000 B, f=1.0456: max(shard port: N "
        f"pulls out then one slice back (N·M/k)·f/B_ps + (M/k)·f/min(B_w,B_ps) = "
        f"{g(0.8 * F)} + {g(0.4 * F)} = {g(1.2 * F)} s, worker link 2·M·f/B_w = "
        f"{g(0.8 * F)} s, fabric uplinks of B 2,000,000 B·f/(1×10 Mbit/s) = {g(1.6 * F)} s "
        f"+ one slice back {g(0.8 * F)} s = {g(2.4 * F)} s) + 2α = 0.002 s = "
        f"{g(2.4 * F + 0.002)} s; a push phase then a pull phase with no overlap (all "
        f"replies ending together): {g(3.2 * F + 0.002)} s")


def test_sync_ps_every_shard_chain_and_its_slowest_hop():
    # shard 0 shares leaf A with the workers (no fabric chain); shard 1 on B: its pulls,
    # 2 × 0.5 MB, over the 10 Mbit/s spine link (0.8·f s), then one slice back at the
    # slowest of the last worker's link, the shard's link and the spine
    two = {"worker_leaves": ["A", "A"], "shard_leaves": ["A", "B"], "spines": 1,
           "fabric_mbps": 10.0}
    assert ps_bound(2, 2, MB, 20.0, **two).terms["fabric"] == pytest.approx(1.2 * F)
    # the shard's own 5 Mbit/s link is the slowest: 0.5 MB·f/0.625 MB/s
    b = ps_bound(2, 2, MB, 20.0, [20.0, 5.0], **two)
    assert b.terms["fabric"] == pytest.approx(0.8 * F + 0.8 * F)
    # the workers' 4 Mbit/s links are: 0.5 MB·f/0.5 MB/s
    b = ps_bound(2, 2, MB, [4.0, 4.0], [20.0, 20.0], **two)
    assert b.terms["fabric"] == pytest.approx(0.8 * F + F)


def test_sync_ps_worker_link_bottleneck_and_phases():
    # workers at 10 and 20 Mbit/s, the PS at 40, M = 250,000 B: the chain is
    # 2·M·f/5 MB/s + M·f/2.5 MB/s = 0.2·f s; the slower worker's pull then push
    # 2·M·f/1.25 MB/s = 0.4·f s; push then pull: 2·max(0.1·f, 0.2·f)
    b = ps_bound(2, 1, 250_000, [10.0, 20.0], 40.0)
    assert (b.seconds, b.bottleneck) == (pytest.approx(0.4 * F), "worker link")
    assert b.terms["shard_port"] == pytest.approx(0.2 * F)
    assert b.terms["push_then_pull"] == pytest.approx(0.4 * F)
    # no fabric and no latency: neither term in the formula
    assert b.formula.endswith(
        f"worker link 2·M·f/B_w = {g(0.4 * F)} s) = {g(0.4 * F)} s; a push phase then a pull "
        f"phase with no overlap (all replies ending together): {g(0.4 * F)} s")


@pytest.mark.parametrize("kw, message", [
    ({"mode": "bsp"}, "mode must be one of sync, async, ssp, backup, got 'bsp'"),
    ({"workers": 2.0}, "workers must be a positive integer"),
    ({"shards": 1.5}, "shards must be a positive integer"),
    ({"model_bytes": 0}, "model_bytes must be a positive number"),
    ({"host_mbps": [20.0]}, "host_mbps: expected one rate or 2, got 1"),
    ({"host_mbps": [20.0, 20.0]}, "ps_mbps is needed when host_mbps is given per worker"),
    ({"ps_mbps": [20.0, 20.0]}, "ps_mbps: expected one rate or 1, got 2"),
    ({"worker_leaves": ["A"], "shard_leaves": ["B"]}, "worker_leaves: expected 2 leaves"),
    ({"worker_leaves": ["A", "A"], "shard_leaves": []}, "shard_leaves: expected 1 leaves"),
    ({"worker_leaves": ["A", "A"]}, "give both worker_leaves and shard_leaves, or neither"),
    ({"worker_leaves": ["A", "A"], "shard_leaves": ["B"], "fabric_mbps": 10.0,
      "mode": "async"}, "`spines` and `fabric_mbps` are needed"),
])
def test_ps_bad_inputs_name_the_argument(kw, message):
    args = {"workers": 2, "shards": 1, "model_bytes": MB, "host_mbps": 20.0}
    with pytest.raises(ValueError, match=message):
        ps_bound(**{**args, **kw})


# --- all-reduce algorithms (jobs/ring_bound.py) ------------------------------------------

def test_halving_doubling_folded_rank_by_hand():
    # N = 3: p = 2, rank 0 folds into 1 (M·f at 8 Mbit/s = 1 MB/s: f s), ranks 1 and 2
    # exchange M/2 both ways (rank 2 at 4 Mbit/s: 0.5 MB·f'/0.5 MB/s = f' s) halving,
    # then doubling, then the unfold (f s); latency (2·1 + 2)·α
    b = halving_doubling_bound(3, MB, [8.0, 8.0, 4.0], alpha_s=0.001)
    assert b.terms == {"fold": pytest.approx(F), "butterfly": pytest.approx(2 * FA),
                       "unfold": pytest.approx(F), "latency": pytest.approx(0.004)}
    assert b.seconds == pytest.approx(2 * F + 2 * FA + 0.004)
    assert b.bottleneck == "host link out of rank 2"
    assert b.formula == (
        f"halving-doubling all-reduce, N=3 (p=2, 1 folded), M=1,000,000 B: fold M·f/B = "
        f"{g(F)} s + butterfly 2(p−1)/p·M·f'/B = {g(2 * FA)} s + unfold {g(F)} s + "
        f"latency 0.004 s = {g(2 * F + 2 * FA + 0.004)} s (each step at its busiest link; "
        f"longest: halving step 1, host link out of rank 2)")


def test_halving_doubling_which_ranks_fold_and_which_exchange():
    # N = 7: p = 4, r = 3; ranks 0, 2, 4 fold into 1, 3, 5, which with 6 exchange.
    # Rank 1 at 4 Mbit/s takes M in (2·f s) and, in the butterfly, M/2 then M/4 each way
    # (f' + f'/2 s halving, the same doubling)
    rates = [8.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0]
    b = halving_doubling_bound(7, MB, rates)
    assert b.terms["fold"] == pytest.approx(2 * F)
    assert b.terms["butterfly"] == pytest.approx(3 * FA)
    assert b.terms["latency"] == 0.0


def test_halving_doubling_power_of_two_and_one_rank():
    # N = 4: no fold; latency 2·log2(4)·α
    b = halving_doubling_bound(4, MB, 8.0, alpha_s=0.001)
    assert b.terms["latency"] == pytest.approx(0.004) and b.terms["fold"] == 0.0
    assert b.seconds == pytest.approx(1.5 * FA + 0.004)
    assert "fold M·f/B" not in b.formula and "unfold" not in b.formula
    one = halving_doubling_bound(1, MB, 8.0)
    assert (one.seconds, one.bottleneck) == (0.0, "")
    assert one.formula == ("halving-doubling all-reduce, N=1 (p=1, 0 folded), M=1,000,000 B: "
                           "butterfly 2(p−1)/p·M·f'/B = 0 s = 0 s (each step at its busiest "
                           "link; longest: , )")


def test_hierarchical_by_hand():
    # the docstring's example with α = 1 ms: leaf reduce f s (rank 2 into its leader 0 at
    # 1 MB/s), the leaders' ring of 2 over 2 spines × 2 Mbit/s (1 MB·f'/0.5 MB/s + 2α),
    # the broadcast f s, and 2α for reduce and broadcast
    leaves = ["a", "b", "a", "b"]
    fab = {"spines": 2, "fabric_mbps": 2.0, "alpha_s": 0.001}
    b = hierarchical_bound(4, MB, 8.0, leaves=leaves, **fab)
    assert b.terms == {"leaf_reduce": pytest.approx(F), "leaders_ring":
                       pytest.approx(2 * FA + 0.002), "leaf_broadcast": pytest.approx(F),
                       "latency": 0.002}
    assert b.seconds == pytest.approx(2 * F + 2 * FA + 0.004)
    assert b.bottleneck == "leaders' ring (fabric (uplinks of a))"
    ring = ring_bound(2, MB, [8.0, 8.0], leaves=["a", "b"], **fab)
    assert b.formula == (
        f"hierarchical all-reduce, N=4 on 2 leaves, M=1,000,000 B: leaf reduce (k−1)·M·f/B "
        f"= {g(F)} s + leaders' ring [{ring.formula}] + leaf broadcast {g(F)} s + 2α = "
        f"0.002 s = {g(2 * F + 2 * FA + 0.004)} s")
    jumbo = hierarchical_bound(4, MB, 8.0, leaves=leaves, spines=2, fabric_mbps=2.0,
                               mtu=9000)
    assert jumbo.terms["leaders_ring"] == pytest.approx(2 * FA9000)


def test_hierarchical_one_leaf_and_one_rank_per_leaf():
    b = hierarchical_bound(2, MB, 8.0, leaves=["a", "a"])
    assert b.formula == (f"hierarchical all-reduce, N=2 on 1 leaves, M=1,000,000 B: leaf "
                         f"reduce (k−1)·M·f/B = {g(F)} s + leaders' ring (one leaf: none) 0 s "
                         f"+ leaf broadcast {g(F)} s = {g(2 * F)} s")
    assert b.bottleneck == "leaf reduce (host link into rank 0)"
    # one rank per leaf: nothing to reduce, so no 2α for it (the ring has its own)
    b = hierarchical_bound(2, MB, 8.0, leaves=["a", "b"], spines=2, fabric_mbps=2.0,
                           alpha_s=0.001)
    assert b.terms["latency"] == 0.0 and b.terms["leaders_ring"] == pytest.approx(
        2 * FA + 0.002)


def test_allreduce_bound_passes_everything_on():
    assert allreduce_bound("ring", 2, MB, 8.0, mtu=9000).seconds == pytest.approx(FA9000)
    assert allreduce_bound("halving-doubling", 2, MB, 8.0, mtu=9000).seconds == \
        pytest.approx(FA9000)
    # the tree of 2: the root takes M in (f), then the one slice goes down one hop (f)
    assert allreduce_bound("tree", 2, MB, 8.0, mtu=9000).seconds == \
        pytest.approx(2 * 9014 / 8948)
    # one slice by default: root chain 2·M·f + 2 hops of M·f at 1 MB/s
    assert allreduce_bound("tree", 4, MB, 8.0).seconds == pytest.approx(4 * F)
    assert allreduce_bound("tree", 4, MB, 8.0).seconds == tree_bound(4, MB, 8.0).seconds
    with pytest.raises(ValueError, match="algorithm must be one of ring, halving-doubling, "
                                         "tree, hierarchical, got 'star'"):
        allreduce_bound("star", 4, MB, 8.0)


@pytest.mark.parametrize("algorithm", ["ring", "halving-doubling", "hierarchical"])
def test_allreduce_bad_inputs_name_the_argument(algorithm):
    leaves = ["a", "a", "b", "b"]
    for kw, message in (({"ranks": 4.0}, "ranks must be a positive integer"),
                        ({"model_bytes": 0}, "model_bytes must be a positive number"),
                        ({"host_mbps": [8.0]}, "host_mbps: expected one rate or 4, got 1"),
                        ({"leaves": ["a"]}, "leaves: expected 4 leaves, got 1"),
                        ({"spines": 0}, "`spines` and `fabric_mbps` are needed")):
        args = {"ranks": 4, "model_bytes": MB, "host_mbps": 8.0, "leaves": leaves,
                "fabric_mbps": 2.0, "spines": 2, **kw}
        with pytest.raises(ValueError, match=message):
            allreduce_bound(algorithm, **args)
        if "spines" in kw:  # no spines by default
            del args["spines"]
            with pytest.raises(ValueError, match=message):
                allreduce_bound(algorithm, **args)
    with pytest.raises(ValueError, match="leaves: the hierarchical all-reduce needs"):
        hierarchical_bound(4, MB, 8.0, leaves=None)
