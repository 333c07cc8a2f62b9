"""The Perfetto trace of hand-made tables: valid JSON, one process per rank, events that
match the logged iterations, queue counters, drops and RTOs where they were placed."""
import json

import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import trace as tr
from incastlab.analysis.pcap import ip_to_int
from incastlab.jobs import JOBS
from tests import tracecheck

PS_EVENTS = JOBS["ps"].trace_spans  # the PS's updates, declared by its job

T0 = 1000.0


def _ps_workers():
    """A sync PS: server rank 0 on h1, workers rank 1 (h3) and 2 (h4), 3 iterations
    each of 1 s: 0.2 s compute, push 0.3 s from t+0.2, then pull 0.5 s (0.1 s of it
    the server's hold). Worker 2 starts 10 ms later."""
    rows = [{"event": "start", "file": "0", "role": "server", "rank": 0, "mode": "sync",
             "iface": "h1-eth0", "t": T0 - 0.5},
            {"event": "start", "file": "1", "role": "worker", "rank": 1, "mode": "sync",
             "iface": "h3-eth0", "t": T0 - 0.5},
            {"event": "start", "file": "2", "role": "worker", "rank": 2, "mode": "sync",
             "iface": "h4-eth0", "t": T0 - 0.5}]
    for rank, off in ((1, 0.0), (2, 0.01)):
        for i in range(3):
            t = T0 + i + off
            rows.append({"event": "iteration", "file": str(rank), "iteration": i,
                         "t_start": t, "t_end": t + 1.0, "compute_s": 0.2, "t_push": t + 0.2,
                         "push_s": 0.3, "pull_s": 0.5, "comm_s": 0.8, "wait_s": 0.1,
                         "bytes_sent": 1000, "bytes_recv": 1000, "loss": float("nan")})
    for v in range(3):
        rows.append({"event": "update", "file": "0", "version": v + 1, "t": T0 + v + 0.6,
                     "from_ranks": [1, 2], "staleness": [0, 0]})
    return pd.DataFrame(rows)


def _queues():
    """lf1-eth1: backlog 0, 5, 5, 0 packets, drop counter 10, 10, 13, 13 (3 drops in the
    third sample); lf1-eth3 idle; sp1-eth1: one sample."""
    t = [T0 + 0.00, T0 + 0.01, T0 + 0.02, T0 + 0.03]
    rows = [{"t": ti, "switch": "lf1", "iface": "lf1-eth1", "backlog_pkts": b, "drops": d,
             "sent_bytes": 0, "sent_pkts": 0} for ti, b, d in zip(t, [0, 5, 5, 0],
                                                                  [10, 10, 13, 13], strict=True)]
    rows += [{"t": ti, "switch": "lf1", "iface": "lf1-eth3", "backlog_pkts": 0, "drops": 0,
              "sent_bytes": 0, "sent_pkts": 0} for ti in t]
    rows += [{"t": T0, "switch": "sp1", "iface": "sp1-eth1", "backlog_pkts": 2, "drops": 0,
              "sent_bytes": 0, "sent_pkts": 0}]
    return pd.DataFrame(rows)


def _retrans():
    """One RTO of h3's flow to the PS at T0 + 1.5 after 0.21 s of silence, and a fast
    retransmission (not an RTO) that must not appear."""
    base = {"flow": "10.0.0.3:40000>10.0.0.1:5001", "src": ip_to_int("10.0.0.3"),
            "dst": ip_to_int("10.0.0.1"), "sport": 40000, "dport": 5001, "seq": 2896,
            "len": 1448}
    return pd.DataFrame([{**base, "t": T0 + 1.5, "gap_s": 0.21, "kind": "rto", "event": True},
                         {**base, "t": T0 + 1.7, "gap_s": 0.001, "kind": "fast",
                          "event": True}])


HOSTS = {"h1": "10.0.0.1", "h3": "10.0.0.3", "h4": "10.0.0.4"}


def _roundtrip(tmp_path, trace):
    p = tr.write_trace(tmp_path / "trace.json", trace)
    return json.loads(p.read_text())


def _procs(events):
    return {e["args"]["name"]: e["pid"] for e in events
            if e["ph"] == "M" and e["name"] == "process_name"}


def test_ps_trace_is_valid_json_and_matches_the_iterations(tmp_path):
    workers = _ps_workers()
    t = _roundtrip(tmp_path, tr.build_trace(workers, _queues(), _retrans(), t0=T0 - 1.0,
                                            host_ips=HOSTS, spans=PS_EVENTS))
    assert t["displayTimeUnit"] == "ms"
    assert t["otherData"]["t0_epoch_s"] == T0 - 1.0
    ev = t["traceEvents"]
    ts = [e["ts"] for e in ev]
    assert ts == sorted(ts)
    xs = [e for e in ev if e["ph"] == "X"]
    assert xs and all(e["ts"] >= 0 and e["dur"] >= 0 for e in xs)
    procs = _procs(ev)
    assert {"h1 server rank 0", "h3 worker rank 1", "h4 worker rank 2"} <= set(procs)
    for rank, name in ((1, "h3 worker rank 1"), (2, "h4 worker rank 2")):
        mine = [e for e in xs if e["pid"] == procs[name]]
        its = [e for e in mine if e["cat"] == "iteration"]
        logged = workers[(workers["event"] == "iteration") & (workers["file"] == str(rank))]
        assert [e["name"] for e in its] == [f"iteration {int(i)}" for i in logged["iteration"]]
        assert [e["ts"] for e in its] == pytest.approx(
            list((logged["t_start"] - (T0 - 1.0)) * 1e6))
        assert [e["dur"] for e in its] == pytest.approx([1e6] * 3)
        # every iteration has its compute, push, pull and wait, inside it
        for it in its:
            kids = [e for e in mine if e["cat"] != "iteration"
                    and it["ts"] <= e["ts"] < it["ts"] + it["dur"]]
            assert sorted(e["name"] for e in kids) == ["compute", "pull", "push",
                                                       "wait (barrier)"]
            for k in kids:
                assert k["ts"] + k["dur"] <= it["ts"] + it["dur"] + 1e-6
            push = next(k for k in kids if k["name"] == "push")
            pull = next(k for k in kids if k["name"] == "pull")
            assert push["ts"] == pytest.approx(it["ts"] + 0.2e6)
            assert (push["dur"], pull["dur"]) == pytest.approx((0.3e6, 0.5e6))
            assert pull["ts"] == pytest.approx(push["ts"] + push["dur"])
    # NaN loss became null; the server's updates are instants on its track
    assert any(e["args"].get("loss", 0) is None for e in xs if e["cat"] == "iteration")
    updates = [e for e in ev if e["ph"] == "i" and e["name"] == "update"]
    assert len(updates) == 3 and {e["pid"] for e in updates} == {procs["h1 server rank 0"]}


def test_queue_counters_drops_and_rtos_where_placed(tmp_path):
    origin = T0 - 1.0  # ts 0; the queue samples start 1 s (1e6 µs) later
    t = _roundtrip(tmp_path, tr.build_trace(_ps_workers(), _queues(), _retrans(), t0=origin,
                                            host_ips=HOSTS))
    ev = t["traceEvents"]
    procs = _procs(ev)
    lf1, sp1 = procs["switch lf1"], procs["switch sp1"]
    c = [e for e in ev if e["ph"] == "C" and e["name"] == "lf1-eth1 queue"]
    # one event per change of the backlog: 0, 5 (at +10 ms), 0 (at +30 ms)
    assert [(e["ts"], e["args"]["packets"]) for e in c] == [(1e6, 0), (1e6 + 1e4, 5),
                                                             (1e6 + 3e4, 0)]
    assert all(e["pid"] == lf1 for e in c)
    idle = [e for e in ev if e["ph"] == "C" and e["name"] == "lf1-eth3 queue"]
    assert len(idle) == 2  # the first and the last sample
    assert [e["args"]["packets"] for e in ev if e["ph"] == "C" and e["pid"] == sp1] == [2]
    drops = [e for e in ev if e["ph"] == "i" and e["name"] == "drop"]
    assert len(drops) == 1
    d = drops[0]
    assert (d["pid"], d["ts"], d["args"]["drops"], d["args"]["iface"]) == \
        (lf1, 1e6 + 2e4, 3, "lf1-eth1")
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev
               if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads[(lf1, d["tid"])] == "lf1-eth1 drops"
    rtos = [e for e in ev if e["ph"] == "i" and e["name"] == "RTO"]
    assert len(rtos) == 1
    r = rtos[0]
    assert (r["pid"], r["tid"], r["ts"]) == (procs["h3 worker rank 1"], tr.TCP_TID, 2.5e6)
    assert r["args"]["gap_s"] == 0.21
    assert threads[(r["pid"], r["tid"])] == "TCP"


def test_rto_of_a_host_without_a_rank_and_default_origin(tmp_path):
    """Without t0 the origin is the earliest input time (the start events at T0 - 0.5);
    an RTO from an address no rank has gets a process of its own."""
    rt = _retrans().assign(src=ip_to_int("10.0.0.9"))
    t = _roundtrip(tmp_path, tr.build_trace(_ps_workers(), None, rt,
                                            host_ips={**HOSTS, "h9": "10.0.0.9"}))
    assert t["otherData"]["t0_epoch_s"] == T0 - 0.5
    procs = _procs(t["traceEvents"])
    rto = next(e for e in t["traceEvents"] if e["name"] == "RTO")
    assert rto["pid"] == procs["h9 (host)"]
    # a t0 later than the data is moved back to it: no negative timestamps
    late = tr.build_trace(_ps_workers(), t0=T0 + 100)
    assert late["otherData"]["t0_epoch_s"] == T0 - 0.5
    assert min(e["ts"] for e in late["traceEvents"]) >= 0


def test_ring_and_incast_events(tmp_path):
    """Ring ranks: compute then all-reduce. Incast: the client's rounds and the servers'
    serve spans."""
    rows = [{"event": "start", "file": str(r), "role": "ring", "rank": r, "mode": "ring",
             "iface": f"h{r + 1}-eth0", "t": T0} for r in range(2)]
    for r in range(2):
        for i in range(2):
            rows.append({"event": "iteration", "file": str(r), "iteration": i,
                         "t_start": T0 + i, "t_end": T0 + i + 0.9, "compute_s": 0.1,
                         "comm_s": 0.7, "allreduce_s": 0.7, "wait_s": None})
    t = _roundtrip(tmp_path, tr.build_trace(pd.DataFrame(rows), t0=T0))
    xs = [e for e in t["traceEvents"] if e["ph"] == "X"]
    procs = _procs(t["traceEvents"])
    assert set(procs) == {"h1 ring rank 0", "h2 ring rank 1"}
    ar = [e for e in xs if e["name"] == "all-reduce" and e["pid"] == procs["h2 ring rank 1"]]
    assert [x for e in ar for x in (e["ts"], e["dur"])] == pytest.approx(
        [1e5, 7e5, 1.1e6, 7e5])

    rows = [{"event": "start", "file": "0", "role": "client", "rank": 0, "mode": "incast",
             "iface": "h1-eth0", "t": T0},
            {"event": "start", "file": "1", "role": "incast-server", "rank": 1,
             "mode": "incast", "iface": "h2-eth0", "t": T0},
            {"event": "round", "file": "0", "round": 0, "t_start": T0 + 0.1,
             "t_end": T0 + 0.5, "senders": 1, "block_bytes": 1000, "bytes": 1000,
             "goodput_mbps": 0.02},
            {"event": "served", "file": "1", "round": 0, "t_request": T0 + 0.1,
             "t_sent": T0 + 0.2, "bytes": 1000}]
    t = _roundtrip(tmp_path, tr.build_trace(pd.DataFrame(rows), t0=T0,
                                            spans=JOBS["incast"].trace_spans))
    xs = [(e["name"], e["cat"], e["ts"], e["dur"]) for e in t["traceEvents"]
          if e["ph"] == "X"]
    assert xs == [("round 0", "round", pytest.approx(1e5), pytest.approx(4e5)),
                  ("serve round 0", "comm", pytest.approx(1e5), pytest.approx(1e5))]


def test_empty_inputs_give_an_empty_valid_trace(tmp_path):
    t = _roundtrip(tmp_path, tr.build_trace(pd.DataFrame({"event": []})))
    assert t["traceEvents"] == []
    assert np.isfinite(t["otherData"]["t0_epoch_s"])


def test_a_clipped_child_ends_within_its_parent_on_one_integer_clock(tmp_path):
    """Start and end of every slice come from one integer µs clock: a child clipped to
    its parent's end ends exactly there. (Rounding ts and dur apart, to 0.1 µs, put this
    all-reduce 0.1 µs past its iteration: found by search, 76.228… s + 0.104… s.)"""
    t_start, length, compute = 76.2280082457942, 0.10400150136711032, 0.04632094
    rows = [{"event": "start", "file": "0", "role": "ring", "rank": 0, "mode": "ring",
             "iface": "h1-eth0", "t": 0.0},
            {"event": "iteration", "file": "0", "iteration": 0, "t_start": t_start,
             "t_end": t_start + length, "compute_s": compute, "comm_s": 1.0,
             "allreduce_s": 1.0, "wait_s": None}]
    t = _roundtrip(tmp_path, tr.build_trace(pd.DataFrame(rows), t0=0.0))
    assert tracecheck.problems(t) == []
    xs = {e["name"]: e for e in t["traceEvents"] if e["ph"] == "X"}
    parent, child = xs["iteration 0"], xs["all-reduce"]
    assert child["ts"] + child["dur"] == parent["ts"] + parent["dur"]


def test_the_trace_checker_finds_a_partial_overlap():
    x = {"ph": "X", "pid": 1, "tid": 1, "cat": "c"}
    ok = {"traceEvents": [{**x, "name": "p", "ts": 0, "dur": 10},
                          {**x, "name": "c", "ts": 2, "dur": 8},
                          {**x, "name": "next", "ts": 10, "dur": 5}]}
    assert tracecheck.problems(ok) == []
    bad = {"traceEvents": [{**x, "name": "p", "ts": 0, "dur": 10},
                           {**x, "name": "c", "ts": 2, "dur": 9},
                           {**x, "name": "f", "ts": 1.5, "dur": 1}]}
    assert tracecheck.problems(bad) == [
        "event 2: ts 1.5 is not an integer >= 0",
        "pid 1 tid 1: 'c' [2, 11] overlaps 'p' [0, 10] by 1 µs"]
