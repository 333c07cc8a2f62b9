"""analysis/alphabeta.py's primitives on phases whose busiest link is worked out by hand,
written to kill the mutants its bound tests let live (benchmarks/mutation_score.py):
which link of a phase sets its time (host link, a leaf's uplinks, its downlinks, one
flow's spine link) and with which framing (f for a link that carries only data, f' when
the other direction carries data of the phase, whose ACKs share the link), and the
validators' edges.

Rates are Mbit/s: 20 Mbit/s moves 2,500,000 B/s, so 1,000,000 B take 0.4 s before framing.
Host links of 1000 Mbit/s (8 ms for 1 MB) keep the host terms out of the way where the
fabric is the subject.
"""
import math

import pytest

from incastlab.analysis import alphabeta as cm

F = 1514 / 1448                   # a bulk flow's wire bytes per payload byte
FA = (2 * 1514 + 66) / (2 * 1448)  # the same with the ACKs of an equal reverse flow
MB = 1_000_000
FAST = [1000.0] * 4               # host links that are never the bottleneck


def _phase(flows, leaves, spines=1, fabric_mbps=20.0, rates=FAST):
    return cm.phase_seconds(flows, rates, leaves, spines, fabric_mbps, 1500)


def test_host_link_names_its_direction():
    # rank 0 sends 1 MB to rank 1 over 20 Mbit/s (0.4 s); rank 1 takes it at 40 (0.2 s)
    s, name = cm.phase_seconds([(0, 1, MB)], [20.0, 40.0], None, 0, None, 1500)
    assert (s, name) == (pytest.approx(0.4 * F), "host link out of rank 0")
    s, name = cm.phase_seconds([(0, 1, MB)], [40.0, 20.0], None, 0, None, 1500)
    assert (s, name) == (pytest.approx(0.4 * F), "host link into rank 1")


def test_no_flows_no_time():
    assert cm.phase_seconds([], FAST, None, 0, None, 1500) == (0.0, "")


def test_uplinks_of_a_leaf_that_only_sends_carry_f():
    # ranks 0, 1 on leaf A send 1 MB each to B and C: A's uplinks carry 2 MB over one
    # 20 Mbit/s spine (0.8 s); B's and C's downlinks 1 MB each (0.4 s)
    s, name = _phase([(0, 2, MB), (1, 3, MB)], ["A", "A", "B", "C"])
    assert (s, name) == (pytest.approx(0.8 * F), "uplinks of A")


def test_uplinks_of_a_leaf_that_also_receives_carry_f_prime():
    # as above, and rank 2 answers rank 0 with 0.5 MB: A's uplinks carry the ACKs of it
    s, name = _phase([(0, 2, MB), (1, 3, MB), (2, 0, MB / 2)], ["A", "A", "B", "C"])
    assert (s, name) == (pytest.approx(0.8 * FA), "uplinks of A")


def test_downlinks_into_a_leaf_that_only_receives_carry_f():
    s, name = _phase([(2, 0, MB), (3, 1, MB)], ["A", "A", "B", "C"])
    assert (s, name) == (pytest.approx(0.8 * F), "downlinks into A")


def test_downlinks_into_a_leaf_that_also_sends_carry_f_prime():
    s, name = _phase([(2, 0, MB), (3, 1, MB), (0, 2, MB / 2)], ["A", "A", "B", "C"])
    assert (s, name) == (pytest.approx(0.8 * FA), "downlinks into A")


def test_one_flow_cannot_spread_over_the_spines():
    # 4 spines give leaf A 80 Mbit/s up (0.1 s for 1 MB), but the flow takes one of them
    s, name = _phase([(0, 1, MB)], ["A", "B"], spines=4)
    assert (s, name) == (pytest.approx(0.4 * F), "one flow's spine link")
    # with its reverse flow in the phase, its spine link also carries those ACKs
    s, name = _phase([(0, 1, MB), (1, 0, MB)], ["A", "B"], spines=4)
    assert (s, name) == (pytest.approx(0.4 * FA), "one flow's spine link")


def test_the_largest_flow_sets_the_spine_link_term():
    # the larger flow comes first: the term is its 0.8 s, not the last flow's 0.4 s
    s, name = _phase([(0, 1, 2 * MB), (2, 3, MB)], ["A", "B", "C", "D"], spines=4)
    assert (s, name) == (pytest.approx(0.8 * F), "one flow's spine link")


def test_crossing_leaves_needs_spines_and_their_rate():
    for spines, fabric in ((0, 20.0), (2, None)):
        with pytest.raises(ValueError, match="traffic crosses leaves: `spines` and "
                                             "`fabric_mbps` are needed"):
            _phase([(0, 1, MB)], ["A", "B"], spines=spines, fabric_mbps=fabric)
        with pytest.raises(ValueError, match="traffic crosses leaves: `spines` and "
                                             "`fabric_mbps` are needed"):
            cm.fabric_term({"A": MB}, {"B": MB}, spines, fabric, F)


def test_fabric_term_is_the_busiest_direction_by_bytes():
    # A sends 1 MB, B receives 3 MB, over 2 spines x 20 Mbit/s (5,000,000 B/s)
    secs, name, text = cm.fabric_term({"A": MB}, {"B": 3 * MB}, 2, 20.0, F)
    assert (secs, name) == (pytest.approx(0.6 * F), "downlinks into B")
    assert text == f"downlinks into B 3,000,000 B·f/(2×20 Mbit/s) = {0.6 * F:.4g} s"
    # one direction alone is still traffic over the spines
    secs, name, _ = cm.fabric_term({"A": MB}, {}, 1, 20.0, F)
    assert (secs, name) == (pytest.approx(0.4 * F), "uplinks of A")
    assert cm.fabric_term({}, {}, 0, None, F) == (0.0, "", "")


def test_leaf_traffic_counts_both_ends_of_a_crossing_flow():
    up, down = cm.leaf_traffic([("A", "B", 3.0), ("A", "B", 2.0), ("B", "A", 1.0),
                                ("A", "A", 9.0)])
    assert up == {"A": 5.0, "B": 1.0}
    assert down == {"B": 5.0, "A": 1.0}


def test_link_rates_take_any_positive_rate_and_name_the_bad_one():
    assert cm.link_rates(0.5, 2, "host_mbps") == [0.5, 0.5]
    assert cm.link_rates([10, 2.5], 2, "host_mbps") == [10.0, 2.5]
    for bad in (0, -5, "20"):
        with pytest.raises(ValueError, match=f"host_mbps: rates must be positive Mbit/s, "
                                             f"got {bad!r}"):
            cm.link_rates([20.0, bad], 2, "host_mbps")


def test_positive_integer_and_number():
    assert cm.positive(3, "ranks", integer=True) == 3
    assert cm.positive(1.5, "alpha_s") == 1.5
    for bad in (1.5, True, 0):
        with pytest.raises(ValueError, match="ranks must be a positive integer, got"):
            cm.positive(bad, "ranks", integer=True)
    with pytest.raises(ValueError, match="size must be a positive number, got -1"):
        cm.positive(-1, "size")


def test_segment_payload_edges():
    assert cm.segment_payload() == 1448
    assert cm.segment_payload(53) == 1  # 53 - 20 IP - 20 TCP - 12 timestamps
    for mtu in (52, 50):
        with pytest.raises(ValueError, match=f"mtu must exceed 52 bytes, got {mtu}"):
            cm.segment_payload(mtu)


def test_fmt_separates_thousands():
    assert cm.fmt(1234.5) == "1,234"
    assert cm.fmt(0.62734) == "0.6273"
    assert cm.fmt(3_000_000.0) == "3,000,000"


def test_top_term_and_ratio():
    assert cm.top_term({"a": 1.0, "b": 3.0, "c": 2.0}) == "b"
    assert cm.top_term({}) == ""
    assert cm.Bound(0.5, "").ratio(1.0) == 2.0
    assert math.isnan(cm.Bound(0.0, "").ratio(1.0))
