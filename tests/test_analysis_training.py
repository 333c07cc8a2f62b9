"""analysis/training.py on hand-built worker logs whose tables are worked out by hand:
the iteration table (rank and host from the start events), synchronous steps (step time,
straggler, spread), per-worker means, the network events counted per iteration (window
edges inclusive, only the worker's own host when its address is known) and the impact
summary (clean / with loss / with RTO, medians and p95).

Times are binary-exact (multiples of 1/8 s) so sums and differences compare exactly.
A sync PS: rank 0 serves on h3, ranks 1 and 2 work on h1 and h2.
"""
import math

import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import training as tr
from incastlab.analysis.pcap import ip_to_int

H1, H2, H3 = "10.0.1.1", "10.0.1.2", "10.0.2.1"


def _it(file, i, t0, t1, compute, comm, wait, **kw):
    return {"file": file, "event": "iteration", "iteration": i, "t_start": t0, "t_end": t1,
            "compute_s": compute, "comm_s": comm, "wait_s": wait, **kw}


def _workers() -> pd.DataFrame:
    rows = [
        {"file": "0", "event": "start", "role": "server", "rank": 0, "mode": "sync",
         "world_size": 3, "iface": "h3-eth0"},
        # the logged host is Mininet's machine name: the interface names the host
        {"file": "1", "event": "start", "role": "worker", "rank": 1, "mode": "sync",
         "world_size": 3, "iface": "h1-eth0", "host": "mininet-vm"},
        # no interface logged: the host field is the fallback
        {"file": "2", "event": "start", "role": "worker", "rank": 2, "mode": "sync",
         "world_size": 3, "host": "h2"},
        # iteration 0: rank 2's compute (0.25 s + 0.25 s injected) is ready last
        _it("1", 0, 10.0, 10.5, 0.125, 0.25, 0.125, loss=2.0),
        _it("2", 0, 10.0, 10.75, 0.25, 0.5, 0.25, slowdown_s=0.25, loss=1.5),
        # iteration 1: rank 1's push completes last (10.625 + 0.375 = 11.0) although
        # rank 2's iteration ends last (11.5)
        _it("1", 1, 10.5, 11.0, 0.125, 0.25, 0.125, t_push=10.625, push_s=0.375, loss=1.0),
        _it("2", 1, 10.75, 11.5, 0.125, 0.25, 0.125, t_push=10.875, push_s=0.0),
        {"file": "1", "event": "final", "accuracy": 0.9},
        {"file": "2", "event": "error", "error": "boom"},
    ]
    return pd.DataFrame(rows)


def test_iterations_take_rank_and_host_from_the_start_events():
    it = tr.iterations(_workers())
    assert list(it.columns) == tr.ITER_COLUMNS
    assert list(zip(it["rank"], it["iteration"], it["host"], strict=True)) == [
        (1, 0, "h1"), (2, 0, "h2"), (1, 1, "h1"), (2, 1, "h2")]
    assert list(it["duration_s"]) == [0.5, 0.75, 0.5, 0.75]
    assert list(it["t_start"]) == [10.0, 10.0, 10.5, 10.75]  # sorted by start, then rank


def test_rank_from_the_file_name_or_from_the_event():
    w = pd.DataFrame([_it("7", 0, 1.0, 2.0, 0.5, 0.5, 0.0),
                      {**_it("x", 0, 1.5, 2.0, 0.5, 0.5, 0.0), "rank": 4.0},
                      _it("w3", 0, 0.5, 2.0, 0.5, 0.5, 0.0)])
    it = tr.iterations(w)  # no start events at all
    assert list(it["rank"]) == ["w3", 7, 4]
    assert list(it["host"]) == [None, None, None]
    assert tr.as_rank("3") == 3 and tr.as_rank(2.0) == 2 and tr.as_rank(None) == "None"


def test_host_of_a_start_event():
    assert tr._host({"iface": "h3-eth0", "host": "h9"}) == "h3"
    assert tr._host({"iface": "eth0", "host": "h9"}) == "h9"
    assert tr._host({"iface": "eth0", "host": float("nan")}) is None
    assert tr._host({}) is None


def test_no_iterations():
    assert list(tr.iterations(pd.DataFrame({"event": []})).columns) == tr.ITER_COLUMNS
    only_starts = _workers().iloc[:3]
    assert tr.iterations(only_starts).empty
    assert list(tr.starts(pd.DataFrame()).columns) == ["file", "role", "rank", "mode",
                                                       "world_size"]
    assert tr.finals(pd.DataFrame()).empty and tr.errors(pd.DataFrame()).empty
    s = tr.steps(tr.iterations(only_starts))
    assert s.empty and "straggler" in s and "spread_s" in s
    pw = tr.per_worker(tr.iterations(only_starts), s)
    assert pw.empty and list(pw.columns) == ["rank", "iterations", "mean_iteration_s",
                                             "mean_compute_s", "mean_comm_s",
                                             "mean_wait_s", "straggler_steps"]


def test_steps_span_every_worker_and_name_the_last_ready_gradient():
    s = tr.steps(tr.iterations(_workers()))
    assert s.to_dict("records") == [
        {"iteration": 0, "start": 10.0, "end": 10.75, "step_s": 0.75, "straggler": 2,
         "spread_s": 0.25, "workers": 2},
        {"iteration": 1, "start": 10.5, "end": 11.5, "step_s": 1.0, "straggler": 1,
         "spread_s": 0.5, "workers": 2}]


def test_gradient_ready_without_push_times():
    it = tr.iterations(_workers()).drop(columns=["t_push", "push_s"])
    # compute end (with the injected slowdown): 10.125, 10.5, 10.625, 10.875
    assert list(tr._gradient_ready(it)) == [10.125, 10.5, 10.625, 10.875]
    assert list(tr.steps(it)["straggler"]) == [2, 2]
    no_slowdown = it.drop(columns=["slowdown_s"])
    assert list(tr._gradient_ready(no_slowdown)) == [10.125, 10.25, 10.625, 10.875]


def test_per_worker_means_and_straggler_counts():
    it = tr.iterations(_workers())
    pw = tr.per_worker(it, tr.steps(it))
    assert pw.to_dict("records") == [
        {"rank": 1, "iterations": 2, "mean_iteration_s": 0.5, "mean_compute_s": 0.125,
         "mean_comm_s": 0.25, "mean_wait_s": 0.125, "straggler_steps": 1},
        {"rank": 2, "iterations": 2, "mean_iteration_s": 0.75, "mean_compute_s": 0.1875,
         "mean_comm_s": 0.375, "mean_wait_s": 0.1875, "straggler_steps": 1}]
    # no steps: nobody straggled
    assert list(tr.per_worker(it, pd.DataFrame())["straggler_steps"]) == [0, 0]


def _network():
    lost = pd.DataFrame({"t": [10.25, 10.75, 12.0],
                         "src": [ip_to_int(H1), ip_to_int(H3), ip_to_int(H2)],
                         "dst": [ip_to_int(H3), ip_to_int(H2), ip_to_int(H3)]})
    retrans = pd.DataFrame({"t": [11.0, 10.625, 10.75],
                            "src": [ip_to_int(H1), ip_to_int(H1), ip_to_int(H2)],
                            "dst": [ip_to_int(H3)] * 3,
                            "event": [True, True, False], "kind": ["rto", "fast", "rto"]})
    drops = pd.DataFrame({"t": [10.25, 10.625, 11.25], "iface": ["sp1-eth2"] * 3,
                          "d_drops": [3, 0, 2]})
    return lost, retrans, drops


def test_network_events_per_iteration_of_the_workers_own_host():
    lost, retrans, drops = _network()
    ev = tr.with_network_events(tr.iterations(_workers()), lost, retrans, drops,
                                {"h1": H1, "h2": H2})
    # h1 [10, 10.5]: the loss at 10.25; h2 [10, 10.75] and [10.75, 11.5]: the one into
    # h2 at 10.75, on both edges; h1 [10.5, 11]: the RTO at its end (the fast retransmit
    # and the non-event do not count); tc drops of any port in the window, zero-drop
    # samples ignored
    assert list(ev["losses"]) == [1.0, 1.0, 0.0, 1.0]
    assert list(ev["rtos"]) == [0.0, 0.0, 1.0, 0.0]
    assert list(ev["tc_drops"]) == [3.0, 3.0, 0.0, 2.0]


def test_network_events_of_any_host_when_its_address_is_unknown():
    lost, retrans, drops = _network()
    ev = tr.with_network_events(tr.iterations(_workers()), lost, retrans, None)
    assert list(ev["losses"]) == [1.0, 2.0, 1.0, 1.0]
    assert list(ev["rtos"]) == [0.0, 0.0, 1.0, 1.0]
    assert list(ev["tc_drops"]) == [0.0] * 4
    none = tr.with_network_events(tr.iterations(_workers()))
    assert list(none["losses"]) == list(none["rtos"]) == [0.0] * 4


def test_impact_summary_by_hand():
    ev = pd.DataFrame({"duration_s": [1.0, 2.0, 4.0, 8.0, 3.0],
                       "rtos": [0, 0, 1, 0, 0], "losses": [0, 1, 1, 0, 0],
                       "tc_drops": [0, 0, 0, 2, 0],
                       "compute_s": [0.5, 1.0, None, "bad", 1.5],
                       "comm_s": [np.nan] * 5, "wait_s": [0, 0, 0, 0, 1.0]})
    s = tr.impact_summary(ev)
    assert s["iterations"] == 5
    assert s["clean"] == {"n": 2, "mean_s": 2.0, "median_s": 2.0}  # rows 0 and 4
    # rows 1 (a loss) and 3 (tc drops); row 2's loss is under its RTO
    assert s["with_loss"] == {"n": 2, "mean_s": 5.0, "median_s": 5.0,
                              "extra_s_vs_clean": 3.0}
    assert s["with_rto"] == {"n": 1, "mean_s": 4.0, "median_s": 4.0,
                             "extra_s_vs_clean": 2.0, "extra_s_vs_no_rto": 0.5}
    assert s["without_rto"] == {"n": 4, "mean_s": 3.5, "median_s": 2.5}
    assert (s["mean_s"], s["median_s"]) == (3.6, 3.0)
    assert s["p95_s"] == pytest.approx(4 + 0.8 * (8 - 4))  # linear between 4 and 8
    assert (s["compute_s_mean"], s["comm_s_mean"], s["wait_s_mean"]) == (1.0, None, 0.2)


def test_impact_summary_without_a_clean_or_an_rto_iteration():
    ev = pd.DataFrame({"duration_s": [1.0, 3.0], "rtos": [0, 0], "losses": [1, 1],
                       "tc_drops": [0, 0], "compute_s": [0.5, 0.5], "comm_s": [0.5, 0.5],
                       "wait_s": [0.0, 0.0]})
    s = tr.impact_summary(ev)
    assert s["clean"] == {"n": 0, "mean_s": None, "median_s": None}
    assert s["with_loss"]["extra_s_vs_clean"] is None
    assert s["with_rto"] == {"n": 0, "mean_s": None, "median_s": None,
                             "extra_s_vs_clean": None, "extra_s_vs_no_rto": None}
    assert tr.impact_summary(ev.iloc[:0]) == {}


def test_loss_curve_mode_finals_errors():
    w = _workers()
    lc = tr.loss_curve(w)
    assert lc.to_dict("records") == [
        {"t": 10.5, "rank": 1, "iteration": 0, "loss": 2.0},
        {"t": 10.75, "rank": 2, "iteration": 0, "loss": 1.5},
        {"t": 11.0, "rank": 1, "iteration": 1, "loss": 1.0}]  # rank 2's last logs none
    assert tr.run_mode(w) == "sync"
    modes = pd.DataFrame({"file": ["0", "1", "2"], "event": "start",
                          "mode": ["gloo", "ring", "ring"]})
    assert tr.run_mode(modes) == "ring"
    assert tr.run_mode(modes.drop(columns="mode")) is None
    assert tr.run_mode(modes.assign(mode=None)) is None
    f = tr.finals(w)
    assert list(f["file"]) == ["1"] and f["accuracy"].iloc[0] == 0.9
    assert "t_start" not in f  # the other events' columns are dropped
    e = tr.errors(w)
    assert list(e["error"]) == ["boom"] and "accuracy" not in e
    s = tr.starts(w)
    assert list(s["rank"]) == [0, 1, 2] and list(s.index) == [0, 1, 2]
    assert "t_start" not in s and not math.isnan(s["world_size"].iloc[0])
