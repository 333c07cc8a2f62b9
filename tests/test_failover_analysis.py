"""Failover measured on hand-built packet tables (issue 15 item 2): the fabric is
2 spines x 2 leaves x 2 hosts (h1, h2 on lf1; h3, h4 on lf2; lf1-eth3 faces sp1,
lf1-eth4 sp2), the link lf2-sp1 fails at T = 100 s. Every number expected below
follows from where the packets were placed."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis import failover as fo
from analysis.pcap import ip_to_int
from tests.test_controller_units import fmap

T = 100.0
FAB = fmap(2, 2, 2)
H1, H2, H3, H4 = (ip_to_int(f"10.0.{leaf}.{k}") for leaf, k in ((1, 1), (1, 2), (2, 1), (2, 2)))


def packets(rows):
    cols = ["t", "iface", "src", "dst", "sport", "dport", "seq", "payload_len", "ip_id"]
    df = pd.DataFrame(rows, columns=cols)
    df["iface"] = df["iface"].astype("category")
    return df


def flow_rows(src, dst, sport, dport, iface, times, seq0=1000, ip0=1):
    return [(t, iface, src, dst, sport, dport, seq0 + 1000 * i, 1000, ip0 + i)
            for i, t in enumerate(times)]


def scenario():
    """A (h1 -> h3) on sp2 long before (T - 3 s: an earlier path, not the new one), on
    sp1 every 10 ms until T + 20 ms, then on sp2 from T + 50 ms;
    B (h2 -> h4) on sp2 throughout (never on the failed spine);
    C (h1 -> h4) on sp1, last sent T - 1.5 s (idle at the failure: not counted)."""
    old = np.round(np.arange(T - 0.5, T + 0.021, 0.01), 6)
    new = np.round(np.arange(T + 0.05, T + 0.3, 0.01), 6)
    rows = flow_rows(H1, H3, 40000, 5000, "lf1-eth3", old)
    rows += flow_rows(H1, H3, 40000, 5000, "lf1-eth4", new, seq0=1000 + 1000 * len(old),
                      ip0=1 + len(old))
    rows += flow_rows(H1, H3, 40000, 5000, "lf1-eth4", [T - 3.0], seq0=10, ip0=900)
    # the sender's own capture sees every transmission (originals and retransmissions)
    rows += flow_rows(H1, H3, 40000, 5000, "h1-eth0", np.concatenate([old, new]))
    rows += flow_rows(H2, H4, 40001, 5001, "lf1-eth4", np.arange(T - 0.5, T + 0.3, 0.01))
    rows += flow_rows(H1, H4, 40002, 5002, "lf1-eth3", [T - 2.0, T - 1.5])
    return packets(rows), old, new


def retrans_of(tcp_df, sent_at, at, ip_id):
    """A retransmission at time ``at`` of the segment A first sent at ``sent_at`` (its
    capture at h1-eth0 with a new IP id, as Linux sends it)."""
    orig = tcp_df[(tcp_df["iface"] == "h1-eth0") & (np.isclose(tcp_df["t"], sent_at))].iloc[0]
    row = orig.copy()
    row["t"], row["ip_id"] = at, ip_id
    return row


def test_failover_time_flows_and_losses_from_the_captures():
    tcp_df, old, new = scenario()
    drain = fo._drain_s(FAB, FAB.egress_iface("sp1", "lf2"))
    assert drain == pytest.approx(FAB.queue_packets * 1514 * 8 / (FAB.fabric_bw_mbps * 1e6))
    # retransmissions of segments first sent: inside the drain before T (counted), at
    # T + 10 ms (counted), long before (not counted: it was lost to something else)
    re = [retrans_of(tcp_df, T - drain / 2, T + 0.4, 9001),
          retrans_of(tcp_df, T + 0.01, T + 0.41, 9002),
          retrans_of(tcp_df, T - 0.4, T + 0.42, 9003)]
    tcp_all = pd.concat([tcp_df, pd.DataFrame(re)], ignore_index=True)
    tcp_all["iface"] = tcp_all["iface"].astype("category")
    retrans = pd.DataFrame(re)[["src", "dst", "sport", "dport", "iface", "t", "ip_id"]]
    event = {"index": 0, "action": "link_down", "params": {"link": ["lf2", "sp1"]}, "t": T}
    flows = fo.flow_failover(tcp_all, FAB, event, retrans)
    assert list(flows["flow"]) == ["10.0.1.1:40000->10.0.2.1:5000"]
    f = flows.iloc[0]
    assert (f["src_host"], f["dst_host"], f["new_spine"]) == ("h1", "h3", "sp2")
    assert f["last_old_s"] == pytest.approx(old[-1] - T)          # 0.02
    assert f["first_new_s"] == pytest.approx(new[0] - T)          # 0.05
    assert f["failover_s"] == pytest.approx(new[0] - old[-1])     # 0.03
    assert f["lost"] == 2
    # without the TCP analysis the losses are unknown, not zero
    assert np.isnan(fo.flow_failover(tcp_df, FAB, event, None).iloc[0]["lost"])


def test_a_link_of_the_other_leaf_or_a_host_link_moves_nothing_here():
    tcp_df, _old, _new = scenario()
    # lf1-sp2 fails: B (lf1 -> sp2) is the flow on it
    ev = {"index": 3, "action": "link_down", "params": {"link": "lf1-eth4"}, "t": T}
    assert list(fo.flow_failover(tcp_df, FAB, ev)["flow"]) == ["10.0.1.2:40001->10.0.2.2:5001"]
    # a host link takes no spine out of a path: no failover rows
    ev = {"index": 4, "action": "link_down", "params": {"link": "h1-eth0"}, "t": T}
    assert fo.flow_failover(tcp_df, FAB, ev).empty
    # a spine dying takes every flow on it, from any leaf
    ev = {"index": 5, "action": "switch_down", "params": {"switch": "sp1"}, "t": T}
    assert list(fo.flow_failover(tcp_df, FAB, ev)["flow"]) == ["10.0.1.1:40000->10.0.2.1:5000"]


def test_a_flow_back_on_the_old_spine_after_restore_is_not_a_new_path():
    """After the link is back, packets on sp1 are not the old path's last packets."""
    tcp_df, old, _new = scenario()
    later = packets(flow_rows(H1, H3, 40000, 5000, "lf1-eth3", [T + 5.0], seq0=10**6))
    both = pd.concat([tcp_df, later], ignore_index=True)
    ev = {"index": 0, "action": "link_down", "params": {"link": ["lf2", "sp1"]}, "t": T}
    f = fo.flow_failover(both, FAB, ev, t_restore=T + 4.0).iloc[0]
    assert f["last_old_s"] == pytest.approx(old[-1] - T)


def test_controller_reaction_and_restore_time():
    ctrl = pd.DataFrame({"t_seen": [T + 0.012, T + 9.0, T + 30.0],
                         "state": ["down", "up", "down"],
                         "t_installed": [T + 0.020, T + 9.004, T + 30.001],
                         "reaction_s": [0.008, 0.004, 0.001]})
    down = {"index": 0, "action": "link_down", "params": {"link": ["lf2", "sp1"]}, "t": T}
    up = {"index": 1, "action": "link_up", "params": {"link": ["sp1", "lf2"]}, "t": T + 8.99}
    got = fo.controller_reaction(ctrl, down)
    assert got == pytest.approx({"detect_s": 0.012, "reaction_s": 0.008, "repaired_s": 0.020})
    assert fo.controller_reaction(ctrl, up)["detect_s"] == pytest.approx(0.01)
    # teardown's port-status (30 s later) belongs to no event
    late = dict(down, t=T + 20)
    assert np.isnan(fo.controller_reaction(ctrl, late)["detect_s"])
    assert fo.restore_time(down, [up]) == T + 8.99
    by_iface = dict(up, params={"link": "lf2-eth3"})  # the same link by an interface
    assert fo.restore_time(down, [by_iface], FAB) == T + 8.99
    other = dict(up, params={"link": "lf2-eth4"})
    assert fo.restore_time(down, [other], FAB) is None
    assert fo.restore_time(down, []) is None
    timed = dict(down, duration_s=3.0, t_undo=T + 3.01)
    assert fo.restore_time(timed, []) == T + 3.01


def test_event_rows_from_events_jsonl(tmp_path):
    rows = [{"kind": "start", "t": 1.0},
            {"kind": "apply", "index": 1, "action": "link_up", "t": 9.0, "t_rel_s": 8.0,
             "params": {"link": ["lf2", "sp1"]}, "ok": True, "result": {}},
            {"kind": "apply", "index": 0, "action": "link_down", "t": 5.0, "t_rel_s": 4.0,
             "params": {"link": ["lf2", "sp1"]}, "ok": True, "result": {"down": ["x"]}},
            {"kind": "undo", "index": 0, "t": 20.0, "why": "teardown"},
            {"kind": "not_fired", "index": 2, "action": "switch_down", "reason": "ended"}]
    (tmp_path / "events.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n{cut")
    got = fo.read_event_rows(tmp_path)
    assert [(r["index"], r["t_undo"]) for r in got] == [(0, 20.0), (1, None)]
    table = fo.events_table(tmp_path)
    assert list(table["target"]) == ["link lf2-sp1", "link lf2-sp1"]
    assert [r["index"] for r in fo.not_fired(tmp_path)] == [2]
    res = fo.analyse_events(tmp_path, None, FAB, None, ctrl=pd.DataFrame(
        columns=["t_seen", "state", "t_installed", "reaction_s"]))
    assert list(res["summary"]["event"]) == [0, 1]
    assert fo.read_event_rows(tmp_path / "nowhere") == []


def test_the_summary_counts_only_the_flows_that_reached_a_new_path(tmp_path):
    # two failures of the scenario, each taking one flow: A (on lf2-sp1) moves to sp2;
    # B (on lf1-sp2) is never seen on another spine after it, so it did not move
    rows = [{"kind": "apply", "index": 0, "action": "link_down", "t": T, "t_rel_s": 4.0,
             "params": {"link": ["lf2", "sp1"]}, "ok": True, "result": {}},
            {"kind": "apply", "index": 1, "action": "link_down", "t": T, "t_rel_s": 4.0,
             "params": {"link": "lf1-eth4"}, "ok": True, "result": {}}]
    (tmp_path / "events.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    tcp_df, _old, _new = scenario()
    res = fo.analyse_events(tmp_path, tcp_df, FAB, None, ctrl=pd.DataFrame(
        columns=["t_seen", "state", "t_installed", "reaction_s"]))
    summary = res["summary"].set_index("event")
    assert (summary.loc[0, "flows_on_link"], summary.loc[0, "moved"]) == (1, 1)
    assert (summary.loc[1, "flows_on_link"], summary.loc[1, "moved"]) == (1, 0)


# ---- a run larger than one chunk of the analysis ----------------------------------------

T0 = 1_700_000_000.0


def _chunked_failover_run(run_dir, connections=24, every_s=0.005, until_s=1.5, t_fail=1.0):
    """h1, h2 (lf1) -> h3, h4 (lf2) over `connections` connections, a segment every
    `every_s`, captured at the sending host, at lf1's uplink to its spine and at the
    receiving host, each arrival ACKed cumulatively (captured at both hosts). Even
    connections use sp1; lf2-sp1 goes down at `t_fail`: connection c's segments sent on
    sp1 from 10 ms before it until c/2 ms after it are lost (seen on the uplink, not at
    the receiver), and from (20 + c) ms later it sends on sp2, the lost ones first."""
    from analysis import synthetic

    fabric = synthetic.demo_fabric()
    synthetic.make_run_dir(run_dir, fabric=fabric, t0=T0)
    hosts = {h.name: h for h in fabric.hosts}
    rows = {}

    def put(iface, t, src, dst, sport, dport, seq, ack, payload, ip_id):
        rows.setdefault(iface, []).append((t, src, dst, sport, dport, seq, ack,
                                           0x18 if payload else 0x10, payload, ip_id))

    for c in range(connections):
        s, d = hosts[("h1", "h2")[c % 2]], hosts[("h3", "h4")[(c // 2) % 2]]
        src, dst, sport, dport = ip_to_int(s.ip), ip_to_int(d.ip), 41000 + c, 5000 + c
        sends = []  # (t, segment, uplink, lost)
        old_up = "lf1-eth3" if c % 2 == 0 else "lf1-eth4"
        cut = t_fail + c * 0.0005
        resume = cut + 0.020 + c * 0.001
        lost = []
        for k, t in enumerate(np.arange(0.0, until_s, every_s)):
            if old_up == "lf1-eth3" and cut < t < resume:
                continue  # nothing sent while the flow has no path
            moved = old_up == "lf1-eth3" and t >= resume
            if moved and lost:
                sends += [(resume + i * 1e-4, seg, "lf1-eth4", False)
                          for i, seg in enumerate(lost)]
                lost = []
            gone = old_up == "lf1-eth3" and t_fail - 0.010 < t <= cut
            sends.append((max(t, resume + 0.003) if moved else t, k,
                          "lf1-eth4" if moved else old_up, gone))
            if gone:
                lost.append(k)
        got, expected = set(), 0
        for ip_id, (t, seg, up, gone) in enumerate(sends, start=1):
            seq = (1000 + 1 + seg * 1000) % (1 << 32)
            put(s.intf, t, src, dst, sport, dport, seq, 1, 1000, ip_id)
            put(up, t + 1e-4, src, dst, sport, dport, seq, 1, 1000, ip_id)
            if gone:
                continue
            put(d.intf, t + 3e-4, src, dst, sport, dport, seq, 1, 1000, ip_id)
            got.add(seg)
            while expected in got:
                expected += 1
            ack = (1000 + 1 + expected * 1000) % (1 << 32)
            for iface, dt in ((d.intf, 3.5e-4), (s.intf, 6.5e-4)):
                put(iface, t + dt, dst, src, dport, sport, 1, ack, 0, 30000 + ip_id)
    cols = ["t", "src", "dst", "sport", "dport", "seq", "ack", "flags", "payload_len",
            "ip_id"]
    (run_dir / "pcap").mkdir(exist_ok=True)
    for iface, r in rows.items():
        df = pd.DataFrame(r, columns=cols).sort_values("t", kind="stable")
        synthetic.write_tcp_pcap(run_dir / "pcap" / f"{iface}.pcap", df, T0)
    ev = {"kind": "apply", "index": 0, "action": "link_down", "t": T0 + t_fail,
          "t_rel_s": t_fail, "params": {"link": ["lf2", "sp1"]}, "ok": True, "result": {}}
    (run_dir / "events.jsonl").write_text(json.dumps(ev) + "\n")
    return fabric, sum(len(r) for r in rows.values())


def test_failover_of_a_run_larger_than_one_chunk_is_that_of_all_its_packets(tmp_path):
    """The report analyses the captures a group of connections at a time and keeps only
    one connection's packets beyond one chunk; failover's tables and the events figure's
    packet counts come from every packet all the same: equal to failover.py on the whole
    packet table at once (tcp.combine of every capture)."""
    from analysis import tcp
    from analysis.pcap import read_pcap
    from incastlab.commands.common import analyse

    run = tmp_path / "run"
    fabric, n = _chunked_failover_run(run)
    whole = tcp.combine({p.stem: read_pcap(p, cache=False)
                         for p in sorted((run / "pcap").glob("*.pcap"))})
    retrans, _ = tcp.retransmissions(whole, tcp.data_flows(whole))
    want = fo.analyse_events(run, whole, fabric, retrans)
    chunk = 4000
    a = analyse(run, cache=False, chunk_packets=chunk)
    assert len(whole) == n > 8 * chunk
    assert a.tables["tcp"].attrs.get("only_connection_of")  # beyond one chunk indeed
    got = a.tables["events"]
    # the scenario: the 12 connections on sp1 all moved to sp2, each losing segments
    assert len(want["flows"]) == 12 and want["flows"]["new_spine"].eq("sp2").all()
    assert (want["flows"]["lost"] >= 2).all() and (want["flows"]["failover_s"] > 0.02).all()
    for name in ("flows", "summary", "events"):
        pd.testing.assert_frame_equal(got[name], want[name], obj=name)
    spine = fo.spine_packets(whole, fabric)
    on_uplinks = whole["iface"].isin(["lf1-eth3", "lf1-eth4"]) & (whole["payload_len"] > 0)
    assert set(spine["spine"]) == {"sp1", "sp2"} and spine["packets"].sum() == on_uplinks.sum()
    pd.testing.assert_frame_equal(got["spine_packets"], spine, obj="spine_packets")
    # and the same as the report's in one chunk
    one = analyse(run, cache=False, chunk_packets=10**9).tables["events"]
    for name in ("flows", "summary", "spine_packets"):
        pd.testing.assert_frame_equal(one[name], got[name], obj=name)


def test_an_event_that_moved_nothing_leaves_the_times_float():
    # analyse_events concatenates every event's rows: a host-link event's empty table
    # beside a real failover kept failover_s as object (CI's root failover test:
    # np.isfinite refused the column)
    tcp_df, _old, _new = scenario()
    none = fo.flow_failover(tcp_df, FAB, {"index": 4, "action": "link_down",
                                          "params": {"link": "h1-eth0"}, "t": T})
    moved = fo.flow_failover(tcp_df, FAB, {"index": 3, "action": "link_down",
                                           "params": {"link": "lf1-eth4"}, "t": T})
    both = pd.concat([none, moved], ignore_index=True)
    assert none.empty and len(both) == 1
    for col in ("last_old_s", "first_new_s", "failover_s", "lost"):
        assert both[col].dtype == np.float64, (col, both[col].dtype)
    np.isfinite(both["failover_s"])  # what the root test calls: no TypeError
