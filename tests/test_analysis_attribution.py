"""Attribution of iteration time on hand-made tables whose answer is known, and the
interval builders on a scripted capture."""
import math

import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import attribution as at
from incastlab.analysis import tcp
from incastlab.analysis.pcap import read_pcap
from incastlab.analysis.synthetic import scenario_tcp

IPS = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h9": "10.0.0.9"}


def _iters(rows):
    return pd.DataFrame(rows, columns=["rank", "iteration", "host", "t_start", "t_end",
                                       "compute_s", "wait_s"])


def _intervals(rows):
    return pd.DataFrame(rows, columns=at.INTERVAL_COLUMNS)


def _parts_sum(attr):
    return attr[at.PARTS].sum(axis=1).to_numpy()


def test_rto_silence_inside_the_communication_window():
    """1.8 s iteration: 0.5 s compute, bound 1.0 s -> 0.3 s excess. A 0.2 s RTO silence of
    h1's flow to the PS at [101.0, 101.2] explains 0.2 s; 0.1 s stays unexplained."""
    it = _iters([(1, 0, "h1", 100.0, 101.8, 0.5, 0.0)])
    rto = _intervals([("f", "10.0.0.1", "10.0.0.9", 101.0, 101.2, "rto")])
    a = at.attribute(it, 1.0, rto, None, host_ips=IPS)
    r = a.iloc[0]
    assert r["duration_s"] == pytest.approx(1.8)
    assert r["rto_stall_s"] == pytest.approx(0.2)
    assert r["loss_recovery_s"] == 0.0 and r["straggler_wait_s"] == 0.0
    assert r["unexplained_s"] == pytest.approx(0.1)
    assert not r["below_bound"]
    assert abs(_parts_sum(a)[0] - 1.8) < 1e-9


def test_recovery_counted_once_and_other_hosts_ignored():
    """1.9 s iteration, 0.5 s compute, bound 1.0 s, 0.1 s logged wait -> 0.4 s excess.
    h1's recovery episodes [103.0, 103.1] and [103.05, 103.2] overlap: 0.2 s, not 0.25.
    An RTO of h2's flow [103.0, 103.3] is not h1's: RTO 0, recovery 0.2, wait 0.1,
    unexplained 0.1."""
    it = _iters([(1, 1, "h1", 102.0, 103.9, 0.5, 0.1)])
    rec = _intervals([("a", "10.0.0.9", "10.0.0.1", 103.0, 103.1, "fast"),
                      ("b", "10.0.0.1", "10.0.0.9", 103.05, 103.2, "tlp")])
    rto = _intervals([("c", "10.0.0.2", "10.0.0.9", 103.0, 103.3, "rto")])
    r = at.attribute(it, 1.0, rto, rec, host_ips=IPS).iloc[0]
    assert r["rto_stall_s"] == 0.0
    assert r["recovery_overlap_s"] == pytest.approx(0.2)
    assert r["loss_recovery_s"] == pytest.approx(0.2)
    assert r["straggler_wait_s"] == pytest.approx(0.1)
    assert r["unexplained_s"] == pytest.approx(0.1)
    # a sync PS's barrier waits on every flow into the PS (h9): h2's RTO now counts,
    # and the recovery under it is not counted again (0.3 s of RTO covers it)
    r = at.attribute(it, 1.0, rto, rec, host_ips=IPS, depends_on=["h9"]).iloc[0]
    assert r["rto_stall_s"] == pytest.approx(0.3)
    assert r["recovery_overlap_s"] == pytest.approx(0.0)
    assert r["straggler_wait_s"] == pytest.approx(0.1)
    assert r["unexplained_s"] == pytest.approx(0.0, abs=1e-12)


def test_stall_during_compute_does_not_count_and_caps_hold():
    """[104.1, 104.3] lies inside the compute (104.0-104.5): not counted. A 0.2 s silence
    in an iteration with only 0.1 s of excess explains 0.1 s (capped by the excess)."""
    it = _iters([(1, 2, "h1", 104.0, 105.7, 0.5, 0.0),
                 (1, 3, "h1", 106.0, 107.6, 0.5, 0.0)])
    rto = _intervals([("f", "10.0.0.1", "10.0.0.9", 104.1, 104.3, "rto"),
                      ("f", "10.0.0.1", "10.0.0.9", 107.0, 107.2, "rto")])
    a = at.attribute(it, 1.0, rto, None, host_ips=IPS)
    assert a["rto_stall_s"].tolist() == pytest.approx([0.0, 0.1])
    assert a["rto_overlap_s"].tolist() == pytest.approx([0.0, 0.2])
    assert a["unexplained_s"].tolist() == pytest.approx([0.2, 0.0], abs=1e-9)
    assert np.abs(_parts_sum(a) - a["duration_s"]).max() < 1e-9


def test_faster_than_the_bound_is_negative_unexplained():
    """1.2 s measured, 0.5 s compute, 1.0 s bound: 0.3 s faster than the bound. The
    causes are 0, unexplained -0.3 s, flagged; the parts still add up to 1.2 s."""
    it = _iters([(2, 0, "h2", 10.0, 11.2, 0.5, 0.4)])
    rto = _intervals([("f", "10.0.0.2", "10.0.0.9", 10.6, 10.9, "rto")])
    r = at.attribute(it, 1.0, rto, None, host_ips=IPS).iloc[0]
    assert r["below_bound"]
    assert r["unexplained_s"] == pytest.approx(-0.3)
    assert (r["rto_stall_s"], r["loss_recovery_s"], r["straggler_wait_s"]) == (0, 0, 0)
    assert abs(r[at.PARTS].sum() - 1.2) < 1e-9


def test_unknown_host_and_ring_wait_null():
    """A ring rank logs wait_s null (0 here); a host without an IP gets no network cause."""
    it = _iters([(0, 0, "h7", 0.0, 2.0, 0.5, np.nan), (1, 0, "h1", 0.0, 2.0, 0.5, np.nan)])
    rec = _intervals([("x", "10.0.0.7", "10.0.0.1", 1.0, 1.5, "fast")])
    a = at.attribute(it, [1.0, 1.2], None, rec, host_ips=IPS)
    assert a["host_ip_known"].tolist() == [False, True]
    assert a["loss_recovery_s"].tolist() == pytest.approx([0.0, 0.3])
    assert a["straggler_wait_s"].tolist() == [0.0, 0.0]
    assert a["bound_s"].tolist() == [1.0, 1.2]
    assert np.abs(_parts_sum(a) - 2.0).max() < 1e-9
    with pytest.raises(ValueError, match="bound_s"):
        at.attribute(it, [1.0], None, None)


def test_random_tables_always_sum_to_the_duration():
    """Whatever the intervals, the parts add up to each duration within 1e-9 s and only
    below-bound rows have a negative part."""
    rng = np.random.default_rng(7)
    n = 200
    t0 = np.sort(rng.uniform(0, 100, n))
    dur = rng.uniform(0.5, 3.0, n)
    it = pd.DataFrame({"rank": rng.integers(0, 3, n), "iteration": np.arange(n),
                       "host": rng.choice(["h1", "h2"], n), "t_start": t0, "t_end": t0 + dur,
                       "compute_s": rng.uniform(0, 0.6, n),
                       "wait_s": rng.uniform(0, 0.5, n)})
    s = rng.uniform(0, 100, 80)
    iv = _intervals([(f"f{i}", rng.choice(["10.0.0.1", "10.0.0.2"]), "10.0.0.9", a,
                      a + rng.uniform(0, 0.5), "rto" if i % 3 == 0 else "fast")
                     for i, a in enumerate(s)])
    a = at.attribute(it, 1.0, iv[iv["kind"] == "rto"], iv[iv["kind"] != "rto"],
                     host_ips=IPS)
    assert np.abs(_parts_sum(a) - a["duration_s"]).max() < 1e-9
    neg = (a[at.PARTS] < -1e-12).any(axis=1)
    assert (neg <= a["below_bound"]).all()
    assert (a.loc[~a["below_bound"], at.PARTS] >= -1e-12).all().all()


def test_run_summary_and_headline():
    """Two iterations: 1.8 s (0.2 s RTO, 0.1 s unexplained) and 1.9 s (0.2 s recovery,
    0.1 s wait, 0.1 s unexplained). Per iteration: measured 1.85 s, cost over the bound
    = 1.85 - 0.5 - 1.0 - 0.05 = 0.3 s (16 %)."""
    it = _iters([(1, 0, "h1", 100.0, 101.8, 0.5, 0.0), (1, 1, "h1", 102.0, 103.9, 0.5, 0.1)])
    rto = _intervals([("f", "10.0.0.1", "10.0.0.9", 101.0, 101.2, "rto")])
    rec = _intervals([("f", "10.0.0.1", "10.0.0.9", 103.0, 103.2, "fast")])
    s = at.run_summary(at.attribute(it, 1.0, rto, rec, host_ips=IPS))
    assert s["iterations"] == 2
    assert s["measured_s"] == pytest.approx(1.85)
    assert s["network_cost_s"] == pytest.approx(0.3)
    assert s["network_cost_pct"] == pytest.approx(100 * 0.3 / 1.85)
    assert s["rto_stall_s"] == pytest.approx(0.1) and s["loss_recovery_s"] == pytest.approx(0.1)
    assert s["comm_over_bound"] == pytest.approx(1.35 / 1.0)
    assert s["totals"]["rto_stall_s"] == pytest.approx(0.2)
    assert s["totals"]["network_cost_s"] == pytest.approx(0.6)
    text = at.headline_sentence(s)
    assert text == ("per iteration the network cost 0.3 s (16 %) over the bound; RTO stalls "
                    "0.1 s, loss recovery 0.1 s, unexplained 0.1 s (and 0.05 s waiting for "
                    "stragglers)")
    assert at.headline_sentence(at.run_summary(at.attribute(it.iloc[0:0], 1.0))) == \
        "no iterations to attribute"
    # a torn last line (no t_end) is left out of the summary and counted
    torn = pd.concat([it, _iters([(1, 2, "h1", 104.0, np.nan, 0.5, 0.0)])],
                     ignore_index=True)
    s2 = at.run_summary(at.attribute(torn, 1.0, rto, rec, host_ips=IPS))
    assert (s2["iterations"], s2["skipped_iterations"]) == (2, 1)
    assert s2["network_cost_s"] == pytest.approx(0.3)
    # the faster-than-the-bound case says so, per round for the incast benchmark
    fast = at.run_summary(at.attribute(_iters([(0, 0, "h1", 0.0, 0.8, 0.0, 0.0)]), 1.0))
    assert at.headline_sentence(fast, per="round") == (
        "per round the run was 0.2 s (25 %) faster than the bound allows: its assumptions "
        "did not hold; RTO stalls 0 s, loss recovery 0 s, unexplained -0.2 s; 1 of 1 "
        "rounds ran faster than the bound")


def test_parts_that_add_up_leave_no_cost_not_float_residue():
    """0.3 - 0.1 - 0.2 is -2.8e-17 in floats: an iteration whose parts add up to its
    duration has cost 0 (the demo printed "-9.99e-16 s" and "-7.22e-13 ms" before)."""
    row = {"duration_s": 0.3, "bound_s": 0.2, "compute_s": 0.1, "transfer_at_bound_s": 0.2,
           "schedule_s": 0.0, "rto_stall_s": 0.0, "loss_recovery_s": 0.0,
           "straggler_wait_s": 0.0, "unexplained_s": 0.0, "below_bound": False,
           "host_ip_known": True}
    assert 0.3 - 0.1 - 0.2 != 0  # the residue this guards against
    s = at.run_summary(pd.DataFrame([row, row]))
    assert s["network_cost_s"] == 0.0 and math.copysign(1, s["network_cost_s"]) == 1
    assert s["totals"]["network_cost_s"] == 0.0
    assert s["network_cost_pct"] == 0.0
    # a real cost of a microsecond survives the rounding
    s = at.run_summary(pd.DataFrame([{**row, "duration_s": 0.300001}]))
    assert s["network_cost_s"] == pytest.approx(1e-6, abs=1e-9)


def test_intervals_from_a_scripted_capture(tmp_path):
    """scenario_tcp places two RTOs: the tail segment lost at 0.051 (last packet at the
    sender 0.0511, the ACK of 9000) and retransmitted 210 ms later; and an ACK lost after
    the data at 0.400, retransmitted at 0.650. Their silences are [0.0511, 0.2611] and
    [0.400, 0.650]; four recovery episodes (fast, rto, tlp, rto) in all."""
    script, _ = scenario_tcp()
    script.write(tmp_path / "h1-eth0.pcap", tmp_path / "h2-eth0.pcap")
    t = tcp.combine({n: read_pcap(tmp_path / f"{n}.pcap", cache=False)
                     for n in ("h1-eth0", "h2-eth0")})
    retrans, episodes = tcp.retransmissions(t)
    rto = at.rto_intervals(retrans)
    t0 = script.t0
    assert list(rto.columns) == at.INTERVAL_COLUMNS
    assert (rto["start"] - t0).tolist() == pytest.approx([0.0511, 0.400], abs=2e-4)
    assert (rto["end"] - t0).tolist() == pytest.approx([0.2611, 0.650], abs=2e-4)
    assert set(rto["src_ip"]) == {"10.0.0.1"} and set(rto["dst_ip"]) == {"10.0.0.2"}
    rec = at.recovery_intervals(episodes, retrans)
    assert rec["kind"].tolist() == ["fast", "rto", "tlp", "rto"]
    assert ((rec["end"] > rec["start"]) & (rec["end"] - rec["start"] < 0.01)).all()
    # an iteration of h1 spanning the whole connection: the RTO silences (0.46 s) come
    # first; recovery episodes add their few ms on top
    it = _iters([(1, 0, "h1", t0, t0 + 1.0, 0.0, 0.0)])
    r = at.attribute(it, 0.1, rto, rec, host_ips={"h1": "10.0.0.1"}).iloc[0]
    assert r["rto_stall_s"] == pytest.approx(0.21 + 0.25, abs=1e-3)
    assert 0 < r["loss_recovery_s"] < 0.01


def test_schedule_share_after_the_network_causes():
    """2.0 s iteration, 0.5 s compute, bound 1.0 s -> 0.5 s excess. A 0.2 s RTO silence
    comes first, then the job's schedule (0.25 s), then the logged 0.1 s wait, of which
    only 0.5 - 0.2 - 0.25 = 0.05 s is left; nothing is unexplained. With a 0.4 s
    schedule only 0.3 s is left for it, and nothing for the wait."""
    it = _iters([(1, 0, "h1", 0.0, 2.0, 0.5, 0.1)])
    rto = _intervals([("f", "10.0.0.1", "10.0.0.9", 1.0, 1.2, "rto")])
    r = at.attribute(it, 1.0, rto, None, schedule_s=0.25, host_ips=IPS).iloc[0]
    assert (r["rto_stall_s"], r["schedule_s"]) == pytest.approx((0.2, 0.25))
    assert r["straggler_wait_s"] == pytest.approx(0.05)
    assert r["unexplained_s"] == pytest.approx(0.0, abs=1e-12)
    r = at.attribute(it, 1.0, rto, None, schedule_s=[0.4], host_ips=IPS).iloc[0]
    assert r["schedule_s"] == pytest.approx(0.3) and r["straggler_wait_s"] == 0.0
    assert abs(r[at.PARTS].sum() - 2.0) < 1e-9
    s = at.run_summary(at.attribute(it, 1.0, rto, None, schedule_s=0.25, host_ips=IPS))
    # the network's cost leaves out the schedule and the wait: 2 - 0.5 - 1 - 0.25 - 0.05
    assert s["network_cost_s"] == pytest.approx(0.2)
