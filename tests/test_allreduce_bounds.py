"""Bounds of the all-reduce algorithms (incastlab/jobs/ring_bound.py) against hand-computed values.

M = 1 MB at 8 Mbit/s = 1 MB/s, so a byte count in MB reads as seconds before framing:
f = 1514/1448 = 1.045580 (a link whose other direction carries no data of the phase),
f' = (2·1514 + 66)/(2·1448) = 1.068370 (it does: the ACKs of that data share it).
"""
from __future__ import annotations

import pytest

from incastlab.analysis import alphabeta as cm
from incastlab.jobs.moe_bound import alltoall_bound
from incastlab.jobs.ring_bound import (
    allreduce_bound,
    halving_doubling_bound,
    hierarchical_bound,
    ring_bound,
    tree_bound,
)

M = 1_000_000
F = 1514 / 1448
FA = (2 * 1514 + 66) / (2 * 1448)


def test_framing_constants_are_the_ones_used():
    assert cm.framing_factor() == pytest.approx(F)
    assert cm.ack_framing() == pytest.approx(FA)


def test_halving_doubling_power_of_two_moves_what_a_ring_moves():
    # N = 4: halving 0.5 + 0.25 MB, doubling 0.25 + 0.5 MB, each both ways at once (f')
    b = halving_doubling_bound(4, M, 8)
    assert b.seconds == pytest.approx(1.5 * FA)
    assert b.terms["fold"] == 0 and b.terms["unfold"] == 0
    assert b.seconds == pytest.approx(ring_bound(4, M, 8).seconds)
    # N = 8: 2·7/8 MB
    assert halving_doubling_bound(8, M, 8).seconds == pytest.approx(1.75 * FA)


def test_halving_doubling_folds_the_ranks_beyond_a_power_of_two():
    # N = 3: p = 2; rank 0 folds into rank 1 (1 MB, one way: f), ranks 1 and 2 exchange
    # 0.5 MB then 0.5 MB (f'), rank 1 sends 1 MB back (f)
    b = halving_doubling_bound(3, M, 8)
    assert b.terms["fold"] == pytest.approx(F) and b.terms["unfold"] == pytest.approx(F)
    assert b.terms["butterfly"] == pytest.approx(FA)
    assert b.seconds == pytest.approx(2 * F + FA)  # 3.160 s
    # N = 6: p = 4, two pairs fold (1 MB each, in parallel), butterfly of 4: 1.5 MB
    assert halving_doubling_bound(6, M, 8).seconds == pytest.approx(2 * F + 1.5 * FA)


def test_halving_doubling_fabric_step():
    # N = 4 on leaves a, a, b, b: step 1 pairs 0-2 and 1-3 cross the spines, 2 × 0.5 MB
    # up and down each leaf over 2 spines × 2 Mbit/s = 0.5 MB/s: 2·f' s; step 2 stays in
    # the leaf, 0.25 MB at 1 MB/s. Doubling mirrors it.
    b = halving_doubling_bound(4, M, 8, leaves=["a", "a", "b", "b"], spines=2,
                                  fabric_mbps=2)
    assert b.seconds == pytest.approx(2 * (2 * FA + 0.25 * FA))
    assert "uplinks" in b.bottleneck or "downlinks" in b.bottleneck


def test_tree_busiest_link_or_root_chain():
    # N = 4: root 0 has children 1, 2; rank 1 has child 3. Root and rank 1 move 2 MB each
    # way (f'); the root chain: 2 MB in (f) + the last slice 2 hops down (height 2).
    four = tree_bound(4, M, 8, slices=4)
    assert four.terms["busiest_link"] == pytest.approx(2 * FA)
    assert four.terms["root_chain"] == pytest.approx((2 + 2 / 4) * F)
    assert four.seconds == pytest.approx(2.5 * F) and four.bottleneck == "root chain"
    assert tree_bound(4, M, 8, slices=32).seconds == pytest.approx((2 + 2 / 32) * F)
    # N = 8: rank 1 has parent 0 and children 3, 4: 3 MB each way, the busiest link
    eight = tree_bound(8, M, 8, slices=32)
    assert eight.terms["busiest_link"] == pytest.approx(3 * FA)
    assert eight.seconds == pytest.approx(3 * FA)
    # N = 2: one edge, M each way; the chain with one slice: M in + M down
    assert tree_bound(2, M, 8).seconds == pytest.approx(2 * F)


def test_hierarchical_wins_where_the_spines_are_oversubscribed():
    # N = 4 on leaves a, b, a, b (the spread placement), 2 spines × 2 Mbit/s per leaf.
    leaves = ["a", "b", "a", "b"]
    hier = hierarchical_bound(4, M, 8, leaves=leaves, spines=2, fabric_mbps=2)
    # leaf reduce: ranks 2 -> 0 and 3 -> 1, 1 MB (f); leaders 0 and 1 ring: 1 MB each way
    # across the spines at 0.5 MB/s (f'); broadcast back 1 MB (f)
    assert hier.terms["leaf_reduce"] == pytest.approx(F)
    assert hier.terms["leaders_ring"] == pytest.approx(2 * FA)
    assert hier.terms["leaf_broadcast"] == pytest.approx(F)
    assert hier.seconds == pytest.approx(2 * F + 2 * FA)  # 4.228 s
    # the flat ring in rank order: all four edges cross, two leave each leaf, 1.5 MB each
    ring = ring_bound(4, M, 8, leaves=leaves, spines=2, fabric_mbps=2)
    assert ring.seconds == pytest.approx(2 * 1.5 * FA / 0.5)  # 6.410 s
    assert hier.seconds < ring.seconds


def test_hierarchical_edge_cases():
    # one rank per leaf: only the leaders' ring, i.e. the ring
    assert hierarchical_bound(3, M, 8, leaves=["a", "b", "c"], spines=2,
                                 fabric_mbps=100).seconds == pytest.approx(
        ring_bound(3, M, 8).seconds)
    # one leaf of three: the leader takes in 2 MB, sends out 2 MB, no ring
    one = hierarchical_bound(3, M, 8, leaves=["a", "a", "a"])
    assert one.terms["leaders_ring"] == 0 and one.seconds == pytest.approx(4 * F)
    with pytest.raises(ValueError, match="leaves"):
        hierarchical_bound(3, M, 8, leaves=None)


def test_allreduce_bound_dispatches_and_refuses_unknown_names():
    assert allreduce_bound("ring", 4, M, 8).seconds == pytest.approx(1.5 * FA)
    assert allreduce_bound("tree", 4, M, 8, slices=4).seconds == pytest.approx(2.5 * F)
    assert allreduce_bound("halving-doubling", 3, M, 8).seconds == \
        pytest.approx(2 * F + FA)
    with pytest.raises(ValueError, match="butterfly"):
        allreduce_bound("butterfly", 4, M, 8)


def test_one_flow_crosses_on_one_spine_link():
    # N = 2 on two leaves with 2 spines of 4 Mbit/s: the leaf's spine links give 1 MB/s
    # together, but each direction's one TCP flow takes one of them (0.5 MB/s): 1 MB
    # each way, f' (the other flow's ACKs share the link)
    b = tree_bound(2, M, 8, slices=1_000_000, leaves=["a", "b"], spines=2, fabric_mbps=4)
    assert b.terms["busiest_link"] == pytest.approx(2 * FA)
    assert "one flow" in b.formula


def test_alltoall_bound_by_hand():
    # host 0 the hot expert: 1 MB in from each of two others, 0.25 MB back to each
    mat = [[0, 250_000, 250_000], [M, 0, 0], [M, 0, 0]]
    b = alltoall_bound(mat, 8)
    # dispatch: host 0 takes in 2 MB while sending 0.5 MB (f'); combine the transpose
    assert b.terms["dispatch"] == pytest.approx(2 * FA)
    assert b.terms["combine"] == pytest.approx(2 * FA)
    assert b.seconds == pytest.approx(4 * FA) and "host link into rank 0" in b.bottleneck
    assert alltoall_bound(mat, 8, passes=2).seconds == pytest.approx(8 * FA)
    # the same on leaves a, b, b with one spine of 4 Mbit/s: 2 MB into leaf a over 0.5 MB/s
    fab = alltoall_bound(mat, 8, leaves=["a", "b", "b"], spines=1, fabric_mbps=4)
    assert fab.terms["dispatch"] == pytest.approx(2 * FA / 0.5)
    with pytest.raises(ValueError, match="square"):
        alltoall_bound([[0, 1]], 8)
