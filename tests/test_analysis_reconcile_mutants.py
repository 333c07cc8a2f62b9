"""analysis/reconcile.py on hand-built tables whose answer is known, written to kill the
mutants the report tests let live (benchmarks/mutation_score.py): where each lost packet
is put (queue drops in the window, captures on the way, the last hop, no fabric) with
the window's edges exact, the per-port and per-host tables, and the reconciliation's
totals, numbers and notes on both sides of every threshold (tc/captures 1.3 and 0.77).

Fabric: analysis.synthetic.demo_fabric (2 spines x 2 leaves x 2 hosts); h1 = 10.0.1.1,
h2 = 10.0.1.2, h3 = 10.0.2.1. From h1 to h3 a packet crosses
lf1-eth3 (to sp1) or lf1-eth4 (to sp2), then sp1-eth2 or sp2-eth2, then lf2-eth1.
"""
import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import reconcile as rec
from incastlab.analysis.pcap import ip_to_int
from incastlab.analysis.synthetic import demo_fabric

H1, H2, H3 = ip_to_int("10.0.1.1"), ip_to_int("10.0.1.2"), ip_to_int("10.0.2.1")
FAB = demo_fabric()
STEP = 0.25  # queue sample interval: binary-exact, so window edges compare exactly


def _queues(rises: dict[str, dict[int, int]], n: int = 11) -> pd.DataFrame:
    """queues.csv rows every STEP s for each port; `rises` = {iface: {sample: drops}}."""
    rows = []
    for iface, at in rises.items():
        total = 0
        for k in range(n):
            total += at.get(k, 0)
            rows.append({"t": k * STEP, "iface": iface, "drops": total})
    return pd.DataFrame(rows)


def _lost(*rows) -> pd.DataFrame:
    """Lost packets: (src, dst, t[, via, seen_at[, sport]])."""
    out = []
    for r in rows:
        src, dst, t = r[:3]
        via, seen = (r[3], r[4]) if len(r) > 3 else ("", "")
        out.append({"src": src, "dst": dst, "sport": r[5] if len(r) > 5 else 40000,
                    "dport": 5001, "t": t, "via": via, "seen_at": seen})
    return pd.DataFrame(out)


# sp1-eth2 counts 2 drops in the sample at 1.0 s, lf2-eth1 one at 0.5 s
QUEUES = _queues({"sp1-eth2": {4: 2}, "lf2-eth1": {2: 1}})


def _placed(lost, queues=QUEUES, flow_paths=None, window_s=0.5, fabric=FAB):
    a = rec.attribute_losses(lost, fabric, queues, flow_paths, window_s=window_s)
    return list(zip(a["port"], a["attributed_by"], strict=True))


def test_window_starts_at_the_loss_inclusive():
    # a loss at exactly 1.0 s shows in the sample taken at 1.0 s
    assert _placed(_lost((H1, H3, 1.0))) == [("sp1-eth2", "queue-drops")]
    # just after it, that sample is too early; nothing later on the path: the last hop
    assert _placed(_lost((H1, H3, 1.0 + 1e-9))) == [("lf2-eth1", "last-hop")]


def test_window_ends_at_window_plus_one_sample_interval_inclusive():
    # from 0.25 s: samples up to 0.25 + 0.5 + 0.25 = 1.0 s count, so both rises do;
    # the larger (sp1-eth2, 2 drops) wins over lf2-eth1 (1 drop)
    assert _placed(_lost((H1, H3, 0.25))) == [("sp1-eth2", "queue-drops")]
    # a narrower window stops before 1.0 s: only lf2-eth1's drop at 0.5 s is in it
    assert _placed(_lost((H1, H3, 0.25)), window_s=0.5 - 1e-9) == [("lf2-eth1", "queue-drops")]
    assert _placed(_lost((H1, H3, 0.25)), window_s=0.25) == [("lf2-eth1", "queue-drops")]


def test_a_tie_goes_to_the_first_port_on_the_path():
    q = _queues({"lf1-eth3": {4: 2}, "sp1-eth2": {4: 2}})
    assert _placed(_lost((H1, H3, 1.0)), q) == [("lf1-eth3", "queue-drops")]
    # ports off the path are never chosen, however many drops they count
    q = _queues({"lf1-eth2": {4: 50}, "lf2-eth1": {4: 1}})
    assert _placed(_lost((H1, H3, 1.0)), q) == [("lf2-eth1", "queue-drops")]


def test_recorded_spine_narrows_the_candidates():
    fp = pd.DataFrame([{"src_ip": "10.0.1.1", "dst_ip": "10.0.2.1", "src_port": 40000,
                        "dst_port": 5001, "spine": "sp2"}])
    # on sp2 the path has no sp1-eth2: lf2-eth1's single drop is the one
    assert _placed(_lost((H1, H3, 1.0)), _queues({"sp1-eth2": {4: 2}, "lf2-eth1": {4: 1}}),
                   flow_paths=fp) == [("lf2-eth1", "queue-drops")]
    # another flow of the same hosts (other ports) is not narrowed
    assert _placed(_lost((H1, H3, 1.0, "", "", 40001)),
                   _queues({"sp1-eth2": {4: 2}, "lf2-eth1": {4: 1}}),
                   flow_paths=fp) == [("sp1-eth2", "queue-drops")]


def test_captures_on_the_way_narrow_where_a_loss_was():
    late = 9.0  # after every sample: no queue evidence
    assert _placed(_lost(
        (H1, H3, late, "sp1-eth2", "sp1-eth2"),   # seen at sp1-eth2: dropped after it
        (H1, H3, late, "sp1-eth2", ""),           # not seen there: at or before it
        (H1, H3, late),                           # no capture on the way
        (H1, H3, late, "sp2-eth9", ""),           # a capture not on the path is ignored
    )) == [("lf2-eth1", "captures"), ("sp1-eth2", "captures"), ("lf2-eth1", "last-hop"),
           ("lf2-eth1", "last-hop")]
    # queue drops decide among the ports the captures leave
    q = _queues({"lf1-eth3": {4: 5}, "lf2-eth1": {4: 1}})
    assert _placed(_lost((H1, H3, 1.0, "sp1-eth2", "sp1-eth2")), q) == [
        ("lf2-eth1", "queue-drops")]
    assert _placed(_lost((H1, H3, 1.0, "sp1-eth2", "")), q) == [("lf1-eth3", "queue-drops")]


def test_same_leaf_unknown_hosts_and_no_fabric():
    assert _placed(_lost((H1, H2, 9.0))) == [("lf1-eth2", "last-hop")]
    stranger = ip_to_int("10.9.9.9")
    assert _placed(_lost((stranger, H3, 1.0), (H1, stranger, 1.0))) == [
        ("?->10.0.2.1", "no-fabric"), ("?->10.9.9.9", "no-fabric")]
    assert _placed(_lost((H1, H3, 1.0)), fabric=None) == [("?->10.0.2.1", "no-fabric")]
    # no queue samples at all: captures and the last hop still place losses
    assert _placed(_lost((H1, H3, 1.0)), pd.DataFrame()) == [("lf2-eth1", "last-hop")]


def test_no_losses_keep_the_columns():
    a = rec.attribute_losses(_lost((H1, H3, 1.0)).iloc[:0], FAB, QUEUES)
    assert a.empty and {"port", "attributed_by"} <= set(a.columns)


# ------------------------------------------------------------------ tables

PORT_COLUMNS = ["iface", "kind", "tc_drops", "capture_losses", "difference", "ratio",
                "at_tc_drop", "by_captures", "unmatched"]


def test_port_table_exact():
    qsum = pd.DataFrame({"iface": ["sp1-eth2", "lf2-eth1", "lf1-eth3"],
                         "kind": ["spine-downlink", "host-downlink", "uplink"],
                         "drops": [4.0, 0.0, 0.0]})
    att = pd.DataFrame({"port": ["sp1-eth2", "sp1-eth2", "sp1-eth2", "lf2-eth1", "?->x"],
                        "attributed_by": ["queue-drops", "queue-drops", "captures",
                                          "last-hop", "no-fabric"]})
    p = rec.port_table(qsum, att)
    assert list(p.columns) == PORT_COLUMNS
    assert list(p["iface"]) == ["sp1-eth2", "lf2-eth1", "?->x"]  # lf1-eth3: nothing
    sp, lf, unknown = (p.iloc[i] for i in range(3))
    assert (sp["kind"], sp["tc_drops"], sp["capture_losses"], sp["difference"]) == (
        "spine-downlink", 4.0, 3.0, 1.0)
    assert sp["ratio"] == pytest.approx(4 / 3)
    assert (sp["at_tc_drop"], sp["by_captures"], sp["unmatched"]) == (2, 1, 0)
    assert (lf["tc_drops"], lf["capture_losses"], lf["difference"], lf["ratio"]) == (
        0.0, 1.0, -1.0, 0.0)
    assert (lf["at_tc_drop"], lf["by_captures"], lf["unmatched"]) == (0, 0, 1)
    assert pd.isna(unknown["kind"]) and np.isnan(unknown["tc_drops"])
    assert np.isnan(unknown["difference"]) and np.isnan(unknown["ratio"])
    assert unknown["capture_losses"] == 1.0
    # tc drops without captured losses: a row, ratio undefined
    only_tc = rec.port_table(qsum, att.iloc[:0])
    assert list(only_tc["iface"]) == ["sp1-eth2"] and np.isnan(only_tc["ratio"].iloc[0])
    assert only_tc["difference"].iloc[0] == 4.0
    empty = rec.port_table(pd.DataFrame(), pd.DataFrame())
    assert empty.empty and list(empty.columns) == PORT_COLUMNS


HOST_COLUMNS = ["host", "kernel_retrans_segs", "capture_retrans", "capture_rto", "capture_tlp",
                "kernel_timeouts", "kernel_loss_probes"]


def _retrans(rows):
    return pd.DataFrame([{"src": s, "kind": k, "event": e} for s, k, e in rows])


def test_host_table_exact():
    r = _retrans([(H1, "rto", True), (H1, "rto", False), (H1, "tlp", True),
                  (H1, "tlp", False), (H3, "fast", True), (ip_to_int("10.9.9.9"), "rto", True)])
    counters = pd.DataFrame([
        {"host": "h1", "counter": "TcpRetransSegs", "delta": 5.0},
        {"host": "h1", "counter": "TcpExtTCPTimeouts", "delta": 1.0},
        {"host": "h1", "counter": "TcpExtTCPLossProbes", "delta": 2.0},
        {"host": "h2", "counter": "TcpRetransSegs", "delta": 2.0},
        {"host": "h10", "counter": "TcpRetransSegs", "delta": np.nan},
    ])
    h = rec.host_table(r, counters, FAB)
    assert list(h.columns) == HOST_COLUMNS
    # natural order: h2 before h10; an address outside the fabric keeps its IP
    assert list(h["host"]) == ["10.9.9.9", "h1", "h2", "h3", "h10"]
    h = h.set_index("host")
    assert h.loc["h1"].to_dict() == {"kernel_retrans_segs": 5.0, "capture_retrans": 4,
                                     "capture_rto": 1, "capture_tlp": 1,
                                     "kernel_timeouts": 1.0, "kernel_loss_probes": 2.0}
    assert h.loc["h2", "capture_retrans"] == 0 and h.loc["h2", "kernel_retrans_segs"] == 2.0
    assert np.isnan(h.loc["h2", "kernel_timeouts"])
    assert (h.loc["h3", "capture_retrans"], h.loc["h3", "capture_rto"]) == (1, 0)
    assert np.isnan(h.loc["h3", "kernel_retrans_segs"])
    assert np.isnan(h.loc["h10", "kernel_retrans_segs"])  # only a NaN delta
    assert h.loc["10.9.9.9", "capture_rto"] == 1
    # without counters, the captures alone; without either, nothing
    alone = rec.host_table(r.iloc[:1], pd.DataFrame(), FAB)
    assert list(alone["host"]) == ["h1"] and np.isnan(alone["kernel_retrans_segs"].iloc[0])
    assert rec.host_table(r.iloc[:0], pd.DataFrame(), None).empty


def test_natural_order_and_sums_of_absent_values():
    assert sorted(["h10", "h2", "h1", "sp1", "lf2", "h"], key=rec._natural) == [
        "h", "h1", "h2", "h10", "lf2", "sp1"]
    assert rec._natural("h12") == ("h", 12, "h12") and rec._natural("x") == ("x", 0, "x")
    assert rec._add(None, None) is None
    assert rec._add(2, None, 3) == 5.0 and isinstance(rec._add(2), float)
    assert rec._add(0, None) == 0.0


def test_capture_drop_total_edges():
    assert rec.capture_drop_total({"capture_drops": {}}) is None
    assert rec.capture_drop_total({"capture_drops": [1, 2]}) is None
    assert rec.capture_drop_total({"capture_drops": {"a": 2.7, "b": "x"}}) == 2
    assert rec.capture_drop_total({"capture_drops": {"a": {"captured": 5}}}) == 0


# ------------------------------------------------------------------ the reconciliation

def _counters(**deltas):
    return pd.DataFrame([{"host": "h1", "counter": k, "delta": float(v)}
                         for k, v in deltas.items()])


def _reconcile(tc=6, losses=3, retrans=None, spurious=None, counters=None, manifest=None,
               captured=1, both=None):
    qsum = pd.DataFrame({"iface": ["sp1-eth2"], "kind": ["spine-downlink"],
                         "drops": [float(tc)]}) if tc is not None else pd.DataFrame()
    att = pd.DataFrame({"port": ["sp1-eth2"] * losses,
                        "attributed_by": ["queue-drops"] * losses})
    retrans = _retrans([]) if retrans is None else retrans
    return rec.reconcile(queue_summary=qsum, attributed=att, retrans=retrans,
                         spurious=spurious, counters=_counters() if counters is None
                         else counters, manifest=manifest or {}, captured_flows=captured,
                         fabric=FAB, both_ends_flows=both)


# 5 retransmissions: an RTO (and one inherited by its episode), a fast retransmit and
# one inherited, a tail-loss probe; and 'other' (RACK) recovery
RETRANS = _retrans([(H1, "rto", True), (H1, "rto", False), (H1, "fast", True),
                    (H1, "fast", False), (H1, "tlp", True), (H1, "other", True)])


def test_reconcile_numbers_and_totals_exact():
    k = _counters(TcpRetransSegs=8, TcpExtTCPTimeouts=1, TcpExtTCPSlowStartRetrans=1,
                  TcpExtTCPFastRetrans=3, TcpExtTCPSackRecovery=2, TcpExtTCPLossProbes=1,
                  TcpExtTCPDSACKRecv=1)
    out = _reconcile(tc=6, losses=3, retrans=RETRANS, spurious=pd.Series(
        [False, True, np.nan, False, False, False]), counters=k,
        manifest={"capture_drops": {"h1-eth0": {"dropped_by_kernel": 2}}})
    n = out["numbers"]
    assert {key: n[key] for key in n if key != "kernel"} == {
        "tc_drops": 6.0, "capture_losses": 3, "capture_retrans": 6, "capture_rto": 1,
        "capture_fast": 1, "capture_recoveries": 2, "capture_recovery_retrans": 3,
        "capture_rto_retrans": 2, "capture_tlp": 1, "capture_spurious": 1,
        "capture_drops": 2}
    assert n["kernel"]["TcpRetransSegs"] == 8.0 and n["kernel"]["TcpExtTCPRenoRecovery"] is None
    assert set(n["kernel"]) == set(rec.KERNEL_COUNTERS)
    tot = out["totals"]
    assert list(tot.columns) == ["measure", "source", "value", "meaning"]
    v = {(m, s.split(" ")[0]): val for m, s, val in zip(tot["measure"], tot["source"],
                                                         tot["value"], strict=True)}
    assert v[("packets dropped", "tc")] == 6.0 and v[("packets dropped", "captures")] == 3
    assert v[("segments resent after an RTO", "kernel")] == 2.0   # timeouts + slow start
    assert v[("loss recoveries entered", "kernel")] == 2.0        # SACK + (absent) Reno
    assert v[("segments resent in fast/SACK recovery", "captures")] == 3
    assert v[("capture drops", "tcpdump")] == 2
    assert len(tot) == 17
    recov = tot[(tot["measure"] == "loss recoveries entered") & tot["source"].str.startswith(
        "captures")]["meaning"].iloc[0]
    assert recov.startswith("of which 1 after >= 3 duplicate ACKs")
    assert list(out["ports"]["iface"]) == ["sp1-eth2"] and list(out["hosts"]["host"]) == ["h1"]
    notes = out["notes"]
    assert "tc counted 6 drops, the captures show 3 packets lost (ratio 2.00)." in notes[0]
    assert "More tc drops than captured losses" in notes[0]  # not the userspace datapath
    assert notes[1] == ("Kernel TcpRetransSegs 8 vs 6 retransmissions in the captures "
                        "(difference +2). The kernel also counts SYN/FIN retransmissions and "
                        "retransmissions of flows not captured at the sender, and tcpdump "
                        "dropped 2 packets.")
    assert notes[2] == ("Retransmissions (6) minus losses (3) = 3: 1 tail-loss probe(s) and "
                        "1 spurious retransmission(s) resend data that was not lost; a "
                        "retransmission that is lost again counts in both.")
    assert len(notes) == 3


@pytest.mark.parametrize("tc, losses, datapath, saturated, extra", [
    (13, 10, "user", False, None),            # 1.3 exactly: no explanation needed
    (14, 10, "user", False, "OVS retries a refused packet once"),
    (14, 10, "kernel", False, "More tc drops than captured losses"),
    (77, 100, "user", False, None),           # 0.77 exactly
    (76, 100, "user", False, "Fewer tc drops than captured losses"),
    # the CPU no longer explains the note: the fidelity verdict judges the difference
    (76, 100, "user", True, "The fidelity verdict counts the difference"),
])
def test_tc_versus_captures_note_thresholds(tc, losses, datapath, saturated, extra):
    m = {"datapath": datapath, "cpu": {"saturated": saturated}}
    note = _reconcile(tc=tc, losses=losses, manifest=m)["notes"][0]
    assert note.startswith(f"tc counted {tc} drops, the captures show {losses} packets lost")
    if extra is None:
        assert note.endswith(f"(ratio {tc / losses:.2f}).")
    else:
        assert extra in note
    assert "CPU" not in note
    assert ("The fidelity verdict" in note) == (tc / losses < 0.77)
    assert ("OVS retries" in note) == (extra == "OVS retries a refused packet once")


def test_reconcile_without_captures_or_both_ends():
    none = _reconcile(tc=4, losses=0, captured=0)
    n = none["numbers"]
    assert n["capture_losses"] is None and n["capture_retrans"] is None
    assert n["capture_rto"] is None and n["capture_spurious"] is None
    assert none["notes"][0].startswith("No TCP payload in any capture")
    assert none["notes"][1].startswith("tc counted 4 drops; the captures show none")
    assert len(none["notes"]) == 2
    one_end = _reconcile(tc=4, losses=0, captured=2, both=0)
    n = one_end["numbers"]
    assert n["capture_losses"] is None and n["capture_spurious"] is None
    assert (n["capture_retrans"], n["capture_rto"], n["capture_tlp"], n["capture_fast"],
            n["capture_recoveries"], n["capture_recovery_retrans"],
            n["capture_rto_retrans"]) == (0, 0, 0, 0, 0, 0, 0)
    assert any(x.startswith("No flow was captured at both ends") for x in one_end["notes"])
    assert not any(x.startswith("Retransmissions (") for x in one_end["notes"])
    # no queue samples: tc is None, and no tc note is made
    no_tc = _reconcile(tc=None, losses=2)
    assert no_tc["numbers"]["tc_drops"] is None
    assert not any(x.startswith("tc counted") for x in no_tc["notes"])
    # kernel counted fewer retransmissions than captured: the difference, no excuse
    fewer = _reconcile(retrans=RETRANS, counters=_counters(TcpRetransSegs=5))
    kn = [x for x in fewer["notes"] if x.startswith("Kernel")][0]
    assert kn == ("Kernel TcpRetransSegs 5 vs 6 retransmissions in the captures "
                  "(difference -1).")
    equal = _reconcile(retrans=RETRANS, counters=_counters(TcpRetransSegs=6))
    assert [x for x in equal["notes"] if x.startswith("Kernel")][0].endswith("(difference +0).")


# ------------------------------------------------------------------ more edges

def test_default_window_and_a_loss_before_the_first_sample():
    # default window 0.05 s + one sample interval (0.25 s): from 0.5 s up to 0.8 s, so
    # sp1-eth2's rise at 1.0 s is not this loss's
    a = rec.attribute_losses(_lost((H1, H3, 0.5)), FAB, _queues({"sp1-eth2": {4: 2}}))
    assert list(zip(a["port"], a["attributed_by"], strict=True)) == [("lf2-eth1", "last-hop")]
    # a loss at the very first sample: that sample's rise counts
    a = rec.attribute_losses(_lost((H1, H3, 0.0)), FAB, _queues({"lf2-eth1": {0: 0, 1: 1}}))
    assert list(zip(a["port"], a["attributed_by"], strict=True)) == [
        ("lf2-eth1", "queue-drops")]


def test_several_captures_on_the_way_and_one_after_the_last_hop():
    late = 9.0
    # seen at lf1-eth3, not at sp1-eth2: lost in between, at sp1-eth2's queue
    assert _placed(_lost((H1, H3, late, "lf1-eth3,sp1-eth2", "lf1-eth3"))) == [
        ("sp1-eth2", "captures")]
    # seen at lf1-eth3: the queue drops right after it (sp1-eth2) are the candidates'
    assert _placed(_lost((H1, H3, 1.0, "lf1-eth3", "lf1-eth3")),
                   _queues({"sp1-eth2": {4: 1}})) == [("sp1-eth2", "queue-drops")]
    # seen by the last hop's own capture: no switch queue of the path is left
    assert _placed(_lost((H1, H3, late, "lf2-eth1", "lf2-eth1"))) == [
        ("?->10.0.2.1", "last-hop")]


def test_totals_pair_each_measure_by_its_sources():
    out = _reconcile(retrans=RETRANS)
    tot = out["totals"]
    by = tot.groupby("measure", sort=False)["source"].apply(list).to_dict()
    kernel = {m: s for m, s in by.items() if len(s) == 2}
    assert list(by) == ["packets dropped", "retransmitted segments",
                        "segments resent in fast/SACK recovery", "segments resent after an RTO",
                        "RTO firings", "loss recoveries entered", "tail-loss probes",
                        "spurious retransmissions", "capture drops"]
    assert len(kernel) == 8 and by["capture drops"] == ["tcpdump (manifest)"]
    # a kernel row names the nstat counters it sums, as nstat spells them
    names = {"retransmitted segments": ["TcpRetransSegs"],
             "segments resent in fast/SACK recovery": ["TcpExtTCPFastRetrans"],
             "segments resent after an RTO": ["TCPTimeouts", "TCPSlowStartRetrans"],
             "RTO firings": ["TcpExtTCPTimeouts"],
             "loss recoveries entered": ["TCPSackRecovery", "TCPRenoRecovery"],
             "tail-loss probes": ["TcpExtTCPLossProbes"],
             "spurious retransmissions": ["TcpExtTCPDSACKRecv"]}
    for measure, counters in names.items():
        source = next(s for s in by[measure] if s.startswith("kernel"))
        assert all(c in source for c in counters), (measure, source)
    # kernel rows that show one counter explain it with the counter's own meaning
    for r in tot.itertuples(index=False):
        for name, meaning in rec.KERNEL_COUNTERS.items():
            if r.source == f"kernel {name}" and r.measure != "RTO firings":
                assert r.meaning == meaning, r


def test_reconcile_edges_exact():
    k = _counters(TcpRetransSegs=7, TcpExtTCPSackRecovery=2, TcpExtTCPRenoRecovery=1)
    out = _reconcile(tc=0, losses=0, retrans=RETRANS, counters=k, spurious=None,
                     manifest={"cpu": None})
    v = {(m, s.split(" ")[0]): val for m, s, val in zip(
        out["totals"]["measure"], out["totals"]["source"], out["totals"]["value"], strict=True)}
    assert v[("loss recoveries entered", "kernel")] == 3.0     # SACK + Reno
    assert out["numbers"]["capture_spurious"] == 0             # none known: none counted
    assert not any(x.startswith("tc counted") for x in out["notes"])  # 0 and 0: nothing to say
    assert ("Kernel TcpRetransSegs 7 vs 6 retransmissions in the captures (difference +1). "
            "The kernel also counts SYN/FIN retransmissions and retransmissions of flows not "
            "captured at the sender.") in out["notes"]
    only_tc = _reconcile(tc=4, losses=0)
    assert only_tc["notes"][0] == (
        "tc counted 4 drops; the captures show none (flows not captured at both ends, or no "
        "pcaps). Never report a queue counter alone.")
    # a manifest whose cpu entry is not a table, with fewer tc drops than losses
    low = _reconcile(tc=1, losses=10, manifest={"datapath": "user", "cpu": "?"})
    assert "Fewer tc drops than captured losses" in low["notes"][0]
    # without captured flows the recoveries' note names no count
    none = _reconcile(tc=None, losses=0, captured=0)
    recov = none["totals"][(none["totals"]["measure"] == "loss recoveries entered")
                           & none["totals"]["source"].str.startswith("captures")]
    assert recov["meaning"].iloc[0] == ""
    # captured_flows defaults to none
    qsum = pd.DataFrame({"iface": ["sp1-eth2"], "kind": ["uplink"], "drops": [1.0]})
    bare = rec.reconcile(queue_summary=qsum, attributed=pd.DataFrame(columns=["port"]),
                         retrans=_retrans([]), spurious=None, counters=_counters(),
                         manifest={})
    assert bare["numbers"]["capture_retrans"] is None
    assert bare["notes"][0].startswith("No TCP payload in any capture")


def test_host_table_counts_probes_and_defaults():
    r = _retrans([(H3, "tlp", True), (H3, "tlp", True), (H3, "fast", True),
                  (H3, "tlp", False)])
    counters = pd.DataFrame([{"host": "h2", "counter": "TcpRetransSegs", "delta": 1.0}])
    h = rec.host_table(r, counters, FAB).set_index("host")
    assert (h.loc["h3", "capture_retrans"], h.loc["h3", "capture_tlp"],
            h.loc["h3", "capture_rto"]) == (4, 2, 0)
    assert (h.loc["h2", "capture_retrans"], h.loc["h2", "capture_rto"],
            h.loc["h2", "capture_tlp"]) == (0, 0, 0)
    empty = rec.host_table(r.iloc[:0], pd.DataFrame(), None)
    assert empty.empty and list(empty.columns) == HOST_COLUMNS
