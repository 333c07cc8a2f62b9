"""analysis/attribution.py on tables whose answer follows from the module's rule by
hand, written to kill the mutants tests/test_analysis_attribution.py lets live
(benchmarks/mutation_score.py): the clipping of compute and wait, the exact edge of
"below the bound", rows without a host or an IP, the interval builders' tables, the run
summary's every key (also with no rows, a zero duration or bound) and the headline
sentence's thresholds (5e-4 s).

Times are binary-exact (multiples of 1/8 s) so parts compare exactly.
"""
import math

import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import attribution as at
from incastlab.analysis.pcap import ip_to_int

IPS = {"h1": "10.0.0.1", "h3": "10.0.0.3"}


def _iters(rows, columns=("rank", "iteration", "host", "t_start", "t_end", "compute_s",
                          "wait_s")):
    return pd.DataFrame(rows, columns=list(columns))


def _intervals(rows):
    return pd.DataFrame(rows, columns=at.INTERVAL_COLUMNS)


def test_compute_and_wait_are_clipped_to_the_iteration():
    # 0.5 s iterations: compute 0.75 s is clipped to 0.5 (not to 1 s), compute -0.25 to 0;
    # a negative logged wait counts 0
    it = _iters([(1, 0, "h1", 10.0, 10.5, 0.75, 0.0), (1, 1, "h1", 10.5, 11.0, -0.25, -0.125)],)
    a = at.attribute(it, 0.25, host_ips=IPS)
    assert list(a["compute_s"]) == [0.5, 0.0]
    assert list(a["wait_logged_s"]) == [0.0, 0.0]
    assert list(a["unexplained_s"]) == [-0.25, 0.25]
    assert list(a["below_bound"]) == [True, False]


def test_at_the_bound_exactly_is_not_below_it():
    it = _iters([(1, 0, "h1", 10.0, 10.5, 0.25, 0.0)])
    a = at.attribute(it, 0.25, host_ips=IPS)
    assert not a["below_bound"].iloc[0] and a["unexplained_s"].iloc[0] == 0.0


def test_output_keeps_the_ids_in_the_input_order():
    it = _iters([(2, 5, "h1", 20.0, 21.0, 0.25, 0.125), (1, 4, "h3", 10.0, 11.0, 0.25, 0.25)])
    it.index = [7, 3]
    a = at.attribute(it, 0.5, host_ips=IPS)
    assert list(a.index) == [0, 1] and "index" not in a
    assert list(a["rank"]) == [2, 1] and list(a["iteration"]) == [5, 4]
    assert list(a["host"]) == ["h1", "h3"] and list(a["t_start"]) == [20.0, 10.0]
    assert list(a["wait_logged_s"]) == [0.125, 0.25]
    assert list(a["straggler_wait_s"]) == [0.125, 0.25]


def test_unparsable_times_give_nan_parts_not_an_error():
    it = _iters([(1, 0, "h1", "late", 11.0, 0.25, 0.0), (1, 1, "h1", 11.0, "?", 0.25, 0.0)])
    a = at.attribute(it, 0.5, host_ips=IPS)
    assert a[at.PARTS[2:]].isna().all().all()
    assert at.run_summary(a)["skipped_iterations"] == 2


def test_bad_lengths_name_the_argument():
    it = _iters([(1, 0, "h1", 10.0, 11.0, 0.25, 0.0), (1, 1, "h1", 11.0, 12.0, 0.25, 0.0)])
    with pytest.raises(ValueError, match=r"bound_s: expected one value or 2, got 3"):
        at.attribute(it, [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match=r"schedule_s: expected one value or 2, got 1"):
        at.attribute(it, 0.5, schedule_s=[0.1])


def test_no_host_column_or_no_ip_gets_no_network_cause():
    rto = _intervals([("f", "10.0.0.1", "10.0.0.3", 10.5, 10.75, "rto")])
    no_host = _iters([(1, 0, 10.0, 11.0, 0.25)],
                     ("rank", "iteration", "t_start", "t_end", "compute_s"))
    a = at.attribute(no_host, 0.5, rto, None, host_ips=IPS)
    assert list(a["host_ip_known"]) == [False] and a["rto_stall_s"].iloc[0] == 0.0
    # a host without an IP gets nothing, even from the hosts every iteration depends on
    unknown = _iters([(1, 0, "h7", 10.0, 11.0, 0.25, 0.0)])
    a = at.attribute(unknown, 0.5, rto, None, host_ips=IPS, depends_on=["h3"])
    assert (a["host_ip_known"].iloc[0], a["rto_overlap_s"].iloc[0]) == (False, 0.0)
    assert a["unexplained_s"].iloc[0] == 0.25


def test_rto_intervals_table():
    retrans = pd.DataFrame({"flow": ["b", "a", "c", "d"],
                            "src": [ip_to_int("10.0.0.1"), "10.0.0.3", "10.0.0.1",
                                    "10.0.0.1"],
                            "dst": ["10.0.0.3", ip_to_int("10.0.0.1"), "10.0.0.3",
                                    "10.0.0.3"],
                            "t": [12.0, 11.0, 13.0, 14.0], "gap_s": [0.5, 0.25, 0.5, "x"],
                            "kind": ["rto", "rto", "fast", "rto"],
                            "event": [True, 1, True, True]})
    r = at.rto_intervals(retrans)
    # sorted by start; the fast retransmit and the unknown gap are left out
    assert r.to_dict("records") == [
        {"flow": "a", "src_ip": "10.0.0.3", "dst_ip": "10.0.0.1", "start": 10.75,
         "end": 11.0, "kind": "rto"},
        {"flow": "b", "src_ip": "10.0.0.1", "dst_ip": "10.0.0.3", "start": 11.5,
         "end": 12.0, "kind": "rto"}]
    for empty in (None, retrans.iloc[:0]):
        assert list(at.rto_intervals(empty).columns) == at.INTERVAL_COLUMNS


def test_recovery_intervals_table():
    episodes = pd.DataFrame({"episode": [2, 1, 3, 9], "flow": ["b", "a", "c", "z"],
                             "kind": ["tlp", "fast", "other", "fast"],
                             "start": [12.0, 11.0, 12.0, 1.0], "end": [12.5, None, "?", 2.0]})
    retrans = pd.DataFrame({"episode": [1, 1, 2, 3, 3],
                            "src": ["10.0.0.1", "10.0.0.1", "10.0.0.3", "10.0.0.1",
                                    "10.0.0.1"],
                            "dst": [ip_to_int("10.0.0.3"), ip_to_int("10.0.0.3"),
                                    ip_to_int("10.0.0.1"), ip_to_int("10.0.0.3"),
                                    ip_to_int("10.0.0.3")],
                            "t": [11.0, 11.25, 12.0, 12.0, 12.125]})
    r = at.recovery_intervals(episodes, retrans)
    # episode 1 never seen ending: to its last retransmission; 9 has none: left out;
    # b and c start together and keep their order
    assert r.to_dict("records") == [
        {"flow": "a", "src_ip": "10.0.0.1", "dst_ip": "10.0.0.3", "start": 11.0,
         "end": 11.25, "kind": "fast"},
        {"flow": "b", "src_ip": "10.0.0.3", "dst_ip": "10.0.0.1", "start": 12.0,
         "end": 12.5, "kind": "tlp"},
        {"flow": "c", "src_ip": "10.0.0.1", "dst_ip": "10.0.0.3", "start": 12.0,
         "end": 12.125, "kind": "other"}]
    for e, t in ((None, retrans), (episodes.iloc[:0], retrans), (episodes, None),
                 (episodes, retrans.iloc[:0])):
        assert list(at.recovery_intervals(e, t).columns) == at.INTERVAL_COLUMNS


def test_run_summary_of_no_rows():
    assert at.run_summary(at.attribute(_iters([]), 0.5)) == {
        "iterations": 0, "measured_s": None, "bound_s": None,
        **{p: None for p in at.PARTS}, "network_cost_s": None, "network_cost_pct": None,
        "comm_over_bound": None, "below_bound_iterations": 0, "no_host_ip_iterations": 0,
        "skipped_iterations": 0, "totals": {}}


def test_run_summary_every_key():
    # two 1 s iterations, compute 0.25, bound 0.5, schedule 0.125; h7 has no IP
    it = _iters([(1, 0, "h1", 10.0, 11.0, 0.25, 0.0), (2, 0, "h7", 10.0, 11.0, 0.25, 0.0)])
    s = at.run_summary(at.attribute(it, 0.5, schedule_s=0.125, host_ips=IPS))
    assert s["bound_s"] == 0.5 and s["measured_s"] == 1.0
    assert s["network_cost_s"] == 0.125  # 1 - 0.25 - 0.5 - 0.125
    assert s["network_cost_pct"] == 12.5
    assert s["comm_over_bound"] == 1.5  # (1 - 0.25) / 0.5
    assert s["no_host_ip_iterations"] == 1
    assert s["totals"]["network_cost_s"] == 0.25 and s["totals"]["schedule_s"] == 0.25


def test_run_summary_zero_duration_or_bound():
    it = _iters([(1, 0, "h1", 10.0, 10.0, 0.0, 0.0)])
    s = at.run_summary(at.attribute(it, 0.0, host_ips=IPS))
    assert s["network_cost_pct"] is None and s["comm_over_bound"] is None


SUMMARY = {"iterations": 4, "network_cost_s": 0.1, "network_cost_pct": 4.0,
           "rto_stall_s": 0.0, "loss_recovery_s": 0.02, "unexplained_s": 0.08,
           "schedule_s": 0.0, "straggler_wait_s": 0.0, "below_bound_iterations": 0}


def test_headline_sentence_by_hand():
    h = at.headline_sentence
    assert h(SUMMARY) == ("per iteration the network cost 0.1 s (4 %) over the bound; "
                          "RTO stalls 0 s, loss recovery 0.02 s, unexplained 0.08 s")
    # no whole captures: the causes are not told apart; no percentage without a duration
    assert h({**SUMMARY, "rto_stall_s": None, "network_cost_pct": None}) == (
        "per iteration the network cost 0.1 s over the bound; unexplained 0.08 s")
    assert h({**SUMMARY, "schedule_s": 0.25, "straggler_wait_s": 0.5,
              "below_bound_iterations": 1}, per="round") == (
        "per round the network cost 0.1 s (4 %) over the bound; RTO stalls 0 s, loss "
        "recovery 0.02 s, unexplained 0.08 s (the job's own schedule adds 0.25 s on any "
        "network) (and 0.5 s waiting for stragglers); 1 of 4 rounds ran faster than the "
        "bound")
    assert h({"iterations": 0}, per="round") == "no rounds to attribute"


def test_headline_thresholds_at_half_a_millisecond():
    h = at.headline_sentence
    # a cost of exactly -0.5 ms is not "faster"; +0.3 ms is a cost that reads 0
    assert h({**SUMMARY, "network_cost_s": -5e-4}).startswith(
        "per iteration the network cost -0.0005 s (4 %) over")
    assert h({**SUMMARY, "network_cost_s": 3e-4}).startswith(
        "per iteration the network cost 0 s (4 %) over the bound")
    assert h({**SUMMARY, "network_cost_s": -0.25}).startswith(
        "per iteration the run was 0.25 s (4 %) faster than the bound allows")
    # 0.5 ms of schedule or of waiting is said; the keys may be absent
    assert h({**SUMMARY, "schedule_s": 5e-4}).endswith(
        "(the job's own schedule adds 0.0005 s on any network)")
    assert h({**SUMMARY, "straggler_wait_s": 5e-4}).endswith(
        "(and 0.0005 s waiting for stragglers)")
    short = {k: v for k, v in SUMMARY.items()
             if k not in ("schedule_s", "straggler_wait_s", "below_bound_iterations")}
    assert h(short) == h(SUMMARY)


def test_merge_and_overlap():
    s, e = at._merge(np.array([3.0, 1.0, 2.0, 5.0, np.nan, 6.0]),
                     np.array([4.0, 2.5, 3.0, 5.0, 7.0, 6.5]))
    # [1, 2.5] and [2, 3] and [3, 4] touch or overlap: one run; [5, 5] is empty
    assert list(s) == [1.0, 6.0] and list(e) == [4.0, 6.5]
    assert at._overlap((s, e), 0.0, 10.0) == 3.5
    assert at._overlap((s, e), 3.5, 6.25) == 0.75
    assert at._overlap((s, e), 4.0, 6.0) == 0.0
    assert at._overlap((s, e), 5.0, 5.0) == 0.0
    assert at._s(4.9e-4) == "0" and at._s(5e-4) == "0.0005" and at._s(-1.234) == "-1.23"
    assert math.isnan(float("nan"))
