"""The wire model of gloo's collectives (tests/gloo_bytes.py) by hand."""
from __future__ import annotations

from tests.gloo_bytes import PREAMBLE, Traffic, barrier, broadcast, expected, ring_segments
from tests.gloo_bytes import ring_all_reduce


def test_ring_segments_by_hand():
    # 4 ranks, 8 segments (2N): 40 B -> 5 elements of 4 B... ceil(40/8)=5 -> 8 B segments
    assert ring_segments(40, 4) == [8, 8, 8, 8, 8, 0, 0, 0]
    assert ring_segments(4, 4) == [4, 0, 0, 0, 0, 0, 0, 0]  # one float: one segment
    assert ring_segments(16384 * 4, 4) == [8192] * 8
    big = ring_segments(9 * 2**20, 4)  # past 2N MiB: ceil(9 MiB / 1 MiB) = 9 -> 12
    assert len(big) == 12 and sum(big) == 9 * 2**20


def test_a_ring_all_reduce_moves_2_n_minus_1_m_in_all():
    for m in (4, 40, 516, 65536, 9 * 2**20 + 4):
        t = [Traffic() for _ in range(4)]
        ring_all_reduce(t, m)
        assert sum(x.data for x in t) == 2 * 3 * m
        assert sum(x.sent for x in t) == sum(x.received for x in t)


def test_one_float_all_reduce_by_hand():
    # segment 0 (chunk 0) only: RS sent by ranks 1, 2, 3 (outside their chunk: r != 0),
    # AG by ranks 0, 2, 3 (chunk r-1 != 0: r != 1)
    t = [Traffic() for _ in range(4)]
    ring_all_reduce(t, 4)
    assert [x.sent for x in t] == [1, 1, 2, 2] and [x.data for x in t] == [4, 4, 8, 8]
    assert [x.received for x in t] == [1, 2, 2, 1]  # what rank r + 1 sends


def test_broadcast_tree_and_barrier_by_hand():
    t = [Traffic() for _ in range(4)]
    broadcast(t, 100, root=1)  # v = r - 1: v0 (r1) -> v1, v2; v1 (r2) -> v3 (r0)
    assert [x.data for x in t] == [0, 200, 100, 0] and [x.received for x in t] == [1, 0, 1, 1]
    barrier(t)
    assert [x.sent for x in t] == [2, 4, 3, 2] and t[0].data == 0


def test_payload_range_and_expected():
    rows = [{"seq": 0, "op": "broadcast", "bytes": 100, "peer": 0, "group_size": 2},
            {"seq": 1, "op": "all_reduce", "bytes": 8, "peer": None, "group_size": 2}]
    t = expected(rows, 2)
    # bcast 100 B 0 -> 1; all-reduce of 8 B on 2 ranks: 4 segments of 4 B [4, 4, 0, 0]:
    # RS rank 0 sends chunk 1 (segments 2, 3: empty), rank 1 chunk 0 (4 + 4); AG rank 0
    # sends chunk 0 (8), rank 1 chunk 1 (empty)
    assert (t[0].data, t[1].data) == (108, 8)
    assert t[0].payload_range() == (108 + PREAMBLE * (3 + 2), 108 + PREAMBLE * 8)
