"""The incast collapse condition the incast job's report section states (rootless):
hand-computed rounds, timeouts and bounds."""
import pytest

from incastlab.jobs.incast import collapse_condition


def test_rto_min_far_above_a_round_means_collapse():
    # 16 x 64 KiB = 8,388,608 bits at 200 Mbit/s: 41.94 ms a round; 200 ms = 4.77 rounds;
    # one timeout per round: 8,388,608 bits / 0.24194 s = 34.67 Mbit/s
    c = collapse_condition(16, 65536, 200.0, 200, [40.0, 50.0], rto_rounds=2)
    assert c["round_ms"] == pytest.approx(41.943, abs=1e-3)
    assert c["ratio"] == pytest.approx(4.768, abs=1e-3)
    assert c["worst_mbps"] == pytest.approx(34.67, abs=0.01)
    assert c["expected"] == "collapse" and c["mean_goodput_mbps"] == 45.0
    assert "N·block/B = 41.9 ms" in c["text"] and "RTO_min = 200 ms, 4.8× a round" in c["text"]
    assert "= 34.7 Mbit/s" in c["text"] and "2 of them with an RTO" in c["text"]
    assert "mean goodput 45.0 Mbit/s over 2 rounds (22% of the link)" in c["text"]


def test_a_short_timeout_or_a_long_round_means_no_collapse():
    fix = collapse_condition(16, 65536, 200.0, 1)
    assert fix["expected"] == "no collapse" and fix["ratio"] == pytest.approx(1 / 41.943)
    assert "Vasudevan" in fix["text"] and "Measured" not in fix["text"]  # no rounds given
    # the shipped spec's old settings: 12 x 64 KiB at 20 Mbit/s = 314.6 ms > 200 ms
    slow_link = collapse_condition(12, 65536, 20.0, None)
    assert slow_link["rto_min_ms"] == 200.0 and "(the kernel default)" in slow_link["text"]
    assert slow_link["round_ms"] == pytest.approx(314.57, abs=0.01)
    assert slow_link["expected"] == "no collapse" and "Vasudevan" not in slow_link["text"]
    # the boundary: RTO_min exactly COLLAPSE_RATIO rounds
    edge = collapse_condition(1, 25_000, 1.0, 400)  # 200,000 bits at 1 Mbit/s = 200 ms
    assert edge["ratio"] == pytest.approx(2.0) and edge["expected"] == "collapse"


def test_nan_goodputs_are_left_out():
    c = collapse_condition(4, 1000, 10.0, 200, [float("nan"), 8.0])
    assert c["mean_goodput_mbps"] == 8.0 and "over 1 rounds" in c["text"]
