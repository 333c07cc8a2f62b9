"""analysis/tcp.py on hand-placed scenarios, written to kill the mutants the first tests
let live (benchmarks/mutation_score.py): every recovery kind the classifier names
(rto, fast by duplicate ACKs, fast by SACKed segments alone, tlp, other), exact gaps,
tails and episode ends, losses seen by captures between the ends, the receiver
capture's window, re-segmented spurious retransmissions, exact flow summaries and the
columns of every empty result.

Captures are parsed once per module (`_frames`) and combined afresh per test: the
parser is not what these tests check, and tcp.py caches its flow index on the frame.
"""
import functools
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import flowstats, tcp
from incastlab.analysis.pcap import COLUMNS, read_pcap
from incastlab.analysis.synthetic import MSS, TcpScript, scenario_tcp, write_pcap

T0 = 1_700_000_000.0
FLOW = "10.0.0.1:40000>10.0.0.2:5001"
D = 0.0005  # TcpScript's one-way delay between its two capture points


def _recovery_script() -> TcpScript:
    """Two holes, neither an RTO nor a tail:

    - segment 1 lost; 2 duplicate ACKs SACK 2 segments; resent while segments 4, 5 are
      outstanding -> 'other' (RACK-like: fewer than 3 dup ACKs or SACKed segments);
    - segment 10 lost; of its duplicate ACKs only the third reaches the sender (one dup
      ACK) but it SACKs 3 segments above the hole -> 'fast' (Linux counts SACKed
      segments, not ACKs).
    """
    s = TcpScript()
    s.handshake(0.0)
    for k in range(6):
        s.data(0.010 + k * 0.001, k * MSS, lost=k == 1)
    s.ack(0.010 + D + 0.0001, 1 * MSS)                                   # at sender .0111
    for k in (2, 3):                                                     # .0131, .0141
        s.ack(0.010 + k * 0.001 + D + 0.0001, 1 * MSS, sack=[(2 * MSS, (k + 1) * MSS)])
    s.data(0.0142, 1 * MSS)                                              # 'other'
    s.ack(0.0142 + D + 0.0001, 1 * MSS, sack=[(2 * MSS, 6 * MSS)])      # 4, 5 arrived: dup
    s.ack(0.0152 + 2 * D, 6 * MSS)                                       # recovery done
    for k in range(10, 15):
        s.data(0.030 + (k - 10) * 0.001, k * MSS, lost=k == 10)
    s.ack(0.0295, 10 * MSS)                                   # (ACK for 9 pieces: none sent)
    for k in (11, 12, 13):
        s.ack(0.030 + (k - 10) * 0.001 + D + 0.0001, 10 * MSS,
              sack=[(11 * MSS, (k + 1) * MSS)], lost=k != 13)            # one arrives: .0341
    s.data(0.0345, 10 * MSS)                                             # 'fast' by SACK
    s.ack(0.0345 + D + 0.0001, 15 * MSS)
    return s


def _three_points_script():
    """Sender h1-eth0, then sp1-eth2 and lf2-eth3 on the way, receiver h2-eth0.
    Segment 1 is lost after both middle captures, segment 3 before the first one."""
    s = TcpScript()
    s.handshake(0.0)
    for k in range(6):
        s.data(0.010 + k * 0.001, k * MSS, lost=k in (1, 3))
    fwd = [(t, p) for t, p in s.sender if p["IP"].src == "10.0.0.1"]
    spine = [(t + D / 4, p) for t, p in fwd if not (p["TCP"].seq == s._s(3 * MSS)
                                                    and len(p["TCP"].payload))]
    leaf = [(t + D / 2, p) for t, p in spine]
    return s, spine, leaf


def _window_script():
    """The receiver-side capture runs only from 0.0103 to 0.0500 (its first packet
    0.0106, its last 0.0466): a packet lost before 0.0096 (first - 1 ms for the
    crossing) or after 0.0466 is not a capture-to-capture loss."""
    s = TcpScript()
    s.handshake(0.0)
    s.data(0.0090, 0, lost=True)          # sent before the window: not counted
    s.data(0.0100, 1 * MSS, lost=True)    # inside the 1 ms slack: counted
    s.data(0.0101, 2 * MSS)               # arrives 0.0106: receiver's first packet
    s.data(0.0461, 3 * MSS)               # arrives 0.0466: receiver's last packet
    s.data(0.0470, 4 * MSS, lost=True)    # after the receiver's last packet
    s.receiver = [(t, p) for t, p in s.receiver if 0.0103 <= t <= 0.0500]
    return s


def _resegmented_script():
    """2000 bytes delivered in one packet, then 1000 bytes from its middle resent
    (re-segmented: no delivered packet starts at 500) -> spurious; then 1000 bytes lost
    and resent -> not spurious."""
    s = TcpScript()
    s.handshake(0.0)
    s.data(0.010, 0, length=2 * MSS)
    s.ack(0.010 + D + 0.0001, 2 * MSS)
    s.data(0.300, 500, length=MSS)
    s.data(0.310, 2 * MSS, lost=True)
    s.data(0.600, 2 * MSS)
    s.ack(0.600 + D + 0.0001, 3 * MSS)
    return s


def _two_flows_scripts():
    """Flow A (port 40000): clean, no retransmission. Flow B (port 40001): a 1-byte
    segment lost and resent by a probe, then a 1000-byte one lost and resent. Both are
    captured at both ends; A comes first in every table."""
    a, b = TcpScript(sport=40000), TcpScript(sport=40001, isn=70_000)
    for s in (a, b):
        s.handshake(0.0)
    a.data(0.010, 0)
    a.ack(0.010 + D + 0.0001, MSS)
    b.data(0.020, 0, length=1, lost=True)
    b.data(0.060, 0, length=1)                         # the probe: 40 ms later
    b.ack(0.060 + D + 0.0001, 1)
    b.data(0.070, 1, lost=True)
    b.data(0.300, 1)                                   # RTO
    b.ack(0.300 + D + 0.0001, 1 + MSS)
    return a, b


def _dupack_kinds_script():
    """Two holes without SACK. Hole 1: 3 plain duplicate ACKs -> fast. Hole 2: 2 pure
    duplicate ACKs, then the receiver's FIN and a data segment of its own, both acking
    the hole (not pure ACKs, so not duplicate ACKs) -> other."""
    from scapy.layers.inet import IP, TCP
    s = TcpScript()
    s.handshake(0.0)
    for k in range(5):
        s.data(0.010 + k * 0.001, k * MSS, lost=k == 1)
    s.ack(0.010 + D + 0.0001, MSS)
    for k in (2, 3, 4):
        s.ack(0.010 + k * 0.001 + D + 0.0001, MSS)      # no SACK option
    s.data(0.0155, MSS)                                  # after the 3rd dup ACK (.0151)
    s.ack(0.0155 + D + 0.0001, 5 * MSS)
    for k in range(5, 9):
        s.data(0.030 + (k - 5) * 0.001, k * MSS, lost=k == 5)
    for k in (6, 7):
        s.ack(0.030 + (k - 5) * 0.001 + D + 0.0001, 5 * MSS)
    for when, flags, payload in ((0.0336, "FA", b""), (0.0337, "PA", b"y" * 10)):
        pkt = IP(src=s.dst, dst=s.src, id=9999) / TCP(
            sport=s.dport, dport=s.sport, flags=flags, seq=s.risn + 1, ack=s._s(5 * MSS)
        ) / payload
        s.receiver.append((when, pkt))
        s.sender.append((when + D, pkt))
    s.data(0.0345, 5 * MSS)
    s.ack(0.0345 + D + 0.0001, 9 * MSS)
    return s


@functools.lru_cache(maxsize=None)
def _frames(name: str) -> dict:
    """Parsed captures of one scenario: {iface: frame} (parsed once; never modified)."""
    with tempfile.TemporaryDirectory(prefix="tcp-mutants-") as d:
        return _parsed(name, Path(d))


def _parsed(name: str, d: Path) -> dict:
    extra = {}
    if name == "scenario":
        s, _ = scenario_tcp()
    elif name == "recovery":
        s = _recovery_script()
    elif name == "three":
        s, spine, leaf = _three_points_script()
        extra = {"sp1-eth2": spine, "lf2-eth3": leaf}
    elif name == "window":
        s = _window_script()
    elif name == "resegmented":
        s = _resegmented_script()
    elif name == "two-flows":
        a, b = _two_flows_scripts()
        s = TcpScript()
        s.sender, s.receiver = a.sender + b.sender, a.receiver + b.receiver
    elif name == "dupack-kinds":
        s = _dupack_kinds_script()
    elif name == "two-packets":
        s = TcpScript()
        s.data(0.010, 0, lost=True)
        s.data(0.060, 0)
        s.receiver = []
    elif name == "sender-only":
        s, _ = scenario_tcp()
        s.receiver = []
    else:
        raise KeyError(name)
    caps = {"h1-eth0": s.sender, "h2-eth0": s.receiver, **extra}
    out = {}
    for iface, pkts in caps.items():
        if pkts:
            write_pcap(d / f"{iface}.pcap", pkts, s.t0)
            out[iface] = read_pcap(d / f"{iface}.pcap", cache=False)
    return out


def _tcp(name: str) -> pd.DataFrame:
    return tcp.combine({k: v.copy() for k, v in _frames(name).items()})


# ------------------------------------------------------------------ rows and flows

def test_tcp_only_keeps_fully_captured_tcp_rows():
    df = pd.DataFrame({"proto": [6, 6, 17, 0, 6], "hdr_ok": [True, False, True, True, True]})
    assert list(tcp.tcp_only(df).index) == [0, 4]


def test_combine_labels_rows_and_keeps_only_tcp():
    frames = _frames("scenario")
    t = _tcp("scenario")
    assert len(t) == sum(len(f) for f in frames.values())  # every row here is TCP
    assert isinstance(t["iface"].dtype, pd.CategoricalDtype)
    assert t["iface"].value_counts().to_dict() == {k: len(v) for k, v in frames.items()}
    udp = frames["h1-eth0"].copy()
    udp["proto"] = 17
    assert tcp.combine({"u": udp}).empty
    empty = tcp.combine({})
    assert list(empty.columns) == COLUMNS and empty.empty


def test_unwrap_follows_the_wrap_in_both_directions():
    two32 = 1 << 32
    v = np.array([two32 - 10, two32 - 5, 3, two32 - 2], np.uint32)
    assert list(tcp._unwrap(v, two32 - 10)) == [0, 5, 13, 8]
    assert list(tcp._unwrap(np.array([90, 100], np.uint32), 100)) == [-10, 0]
    assert list(tcp._unwrap(np.array([two32 - 5], np.uint32), 5)) == [-10]
    # half the sequence space is the turning point: +2^31-1 ahead, 2^31 behind
    assert list(tcp._unwrap(np.array([0, (1 << 31) - 1], np.uint32), 0)) == [0, (1 << 31) - 1]
    assert list(tcp._unwrap(np.array([0, 1 << 31], np.uint32), 0)) == [0, -(1 << 31)]
    assert len(tcp._unwrap(np.array([], np.uint32), 7)) == 0


def test_data_flows_order_the_captures_along_the_path():
    flows = tcp.data_flows(_tcp("three"))
    assert len(flows) == 1
    f = flows.iloc[0]
    assert (f["flow"], f["src"], f["dst"], f["sport"], f["dport"]) == (
        FLOW, 0x0A000001, 0x0A000002, 40000, 5001)
    assert (f["sender_iface"], f["via"], f["receiver_iface"]) == (
        "h1-eth0", "sp1-eth2,lf2-eth3", "h2-eth0")
    one = tcp.data_flows(_tcp("sender-only")).iloc[0]
    assert one["receiver_iface"] is None and one["via"] == ""
    empty = tcp.data_flows(tcp.combine({}))
    assert list(empty.columns) == ["src", "dst", "sport", "dport", "flow", "sender_iface",
                                   "receiver_iface", "via"]


def test_reused_tuples_count_only_syns_of_the_flow_direction(tmp_path):
    a, b = TcpScript(isn=1000, risn=5000), TcpScript(isn=1000, risn=777_000)
    a.handshake(0.0)
    a.data(0.01, 0)
    b.handshake(1.0)
    b.data(1.01, 0)
    # a bare RST (no ACK flag) with another sequence number is no new connection
    from scapy.layers.inet import IP, TCP
    rst = IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=40000, dport=5001, flags="R",
                                                   seq=123_456)
    write_pcap(tmp_path / "x.pcap", a.sender + b.sender + [(2.0, rst)])
    t = tcp.combine({"x": read_pcap(tmp_path / "x.pcap", cache=False)})
    # same SYN sequence twice (a retried SYN), and SYN/ACKs with two ISNs: not reused
    assert tcp.reused_tuples(t).empty
    empty = tcp.reused_tuples(tcp.combine({}))
    assert list(empty.columns) == ["flow", "iface", "connections"]
    c = TcpScript(isn=2000)
    c.handshake(3.0)
    write_pcap(tmp_path / "y.pcap", a.sender + c.sender)
    r = tcp.reused_tuples(tcp.combine({"y": read_pcap(tmp_path / "y.pcap", cache=False)}))
    assert r.to_dict("list") == {"flow": [FLOW], "iface": ["y"], "connections": [2]}


# ------------------------------------------------------------------ retransmissions

RETRANS_COLUMNS = ["flow", "src", "dst", "sport", "dport", "iface", "t", "seq", "len",
                   "ip_id", "kind", "gap_s", "dupacks", "sacked", "event", "episode", "tail"]
EPISODE_COLUMNS = ["episode", "flow", "kind", "n_rto", "n_retrans", "stall_start", "start",
                   "end", "duration_s"]


def test_every_field_of_the_scenario_retransmissions():
    r, e = tcp.retransmissions(_tcp("scenario"))
    assert list(r.columns) == RETRANS_COLUMNS and list(e.columns) == EPISODE_COLUMNS
    assert list(r["kind"]) == ["fast", "rto", "tlp", "rto"]
    assert list(r["seq"]) == [3 * MSS, 10 * MSS, 11 * MSS, 12 * MSS]
    assert list(r["len"]) == [MSS] * 4
    assert list(r["dupacks"]) == [3, 0, 0, 0]
    # the 3rd dup ACK SACKs 4000-7000: 3 segments above the 1000-byte hole
    assert list(r["sacked"]) == [3, 0, 0, 0]
    assert list(r["tail"]) == [False, True, True, True]
    assert list(r["event"]) == [True] * 4 and list(r["episode"]) == [0, 1, 2, 3]
    # silence before each: since the last dup ACK (.0171), the ACK of 9 (.0511), the
    # ACK of 10 (.2617), the data packet at .400
    assert np.allclose(r["gap_s"], [0.0004, 0.2100, 0.0200, 0.2500], atol=2e-6)
    assert np.allclose(r["t"] - T0, [0.0175, 0.2611, 0.320, 0.650], atol=2e-6)
    assert list(r["iface"]) == ["h1-eth0"] * 4 and set(r["flow"]) == {FLOW}
    assert set(r["src"]) == {0x0A000001} and set(r["dst"]) == {0x0A000002}
    assert set(r["sport"]) == {40000} and set(r["dport"]) == {5001}
    assert list(r["ip_id"]) == [109, 114, 116, 118]
    assert list(e["kind"]) == ["fast", "rto", "tlp", "rto"]
    assert list(e["n_rto"]) == [0, 1, 0, 1] and list(e["n_retrans"]) == [1, 1, 1, 1]
    assert np.allclose(e["stall_start"] - T0, [0.0171, 0.0511, 0.300, 0.400], atol=2e-6)
    assert np.allclose(e["start"] - T0, [0.0175, 0.2611, 0.320, 0.650], atol=2e-6)
    # ended by the first ACK covering what was outstanding when each started
    assert np.allclose(e["end"] - T0, [0.0186, 0.2622, 0.3211, 0.6511], atol=2e-6)
    assert np.allclose(e["duration_s"], [0.0015, 0.2111, 0.0211, 0.2511], atol=2e-6)


def test_rto_threshold_is_inclusive():
    t = _tcp("scenario")
    r, _ = tcp.retransmissions(t)
    gap = float(r["gap_s"].iloc[1])  # the 210 ms RTO, exactly as measured
    r2, _ = tcp.retransmissions(t, rto_threshold_s=gap)
    assert list(r2["kind"]) == ["fast", "rto", "tlp", "rto"]
    r3, _ = tcp.retransmissions(t, rto_threshold_s=np.nextafter(gap, 1.0))
    # just below the threshold the 210 ms resend of the tail segment is a probe
    assert list(r3["kind"]) == ["fast", "tlp", "tlp", "rto"]
    assert tcp.DEFAULT_RTO_THRESHOLD_S == 0.18


def test_recovery_by_two_dupacks_is_other_and_by_three_sacked_segments_fast():
    r, e = tcp.retransmissions(_tcp("recovery"))
    assert list(r["kind"]) == ["other", "fast"]
    assert list(r["seq"]) == [1 * MSS, 10 * MSS]
    assert list(r["dupacks"]) == [2, 1]
    assert list(r["sacked"]) == [2, 3]
    assert list(r["tail"]) == [False, False]
    assert list(r["event"]) == [True, True] and list(r["episode"]) == [0, 1]
    # since the 2nd dup ACK (.0141) and since segment 14 left (.034; the SACK at .0341)
    assert np.allclose(r["gap_s"], [0.0001, 0.0004], atol=2e-6)
    assert list(e["kind"]) == ["other", "fast"] and list(e["n_retrans"]) == [1, 1]
    # 'other' ends when the ACK of 6000 reaches the sender (.0162 + D), not at the dup
    # ACK right after the resend; stalls start at the last packet before each resend
    assert np.allclose(e["end"] - T0, [0.0167, 0.0356], atol=2e-6)
    assert np.allclose(e["stall_start"] - T0, [0.0141, 0.0341], atol=2e-6)
    s = tcp.retrans_summary(r)
    assert s == {"retrans_packets": 2, "retrans_bytes": 2 * MSS,
                 "by_kind": {"other": 1, "fast": 1}, "rto_events": 0, "fast_events": 1,
                 "tlp": 0}


def test_retrans_summary_counts_exactly():
    r, _ = tcp.retransmissions(_tcp("scenario"))
    assert tcp.retrans_summary(r) == {"retrans_packets": 4, "retrans_bytes": 4 * MSS,
                                      "by_kind": {"rto": 2, "fast": 1, "tlp": 1},
                                      "rto_events": 2, "fast_events": 1, "tlp": 1}
    # inherited kinds count as packets of that kind, not as events
    inherited = r.assign(event=[True, False, True, False])
    s = tcp.retrans_summary(inherited)
    assert (s["rto_events"], s["fast_events"], s["tlp"]) == (0, 1, 1)
    assert tcp.retrans_summary(r.iloc[:0]) == {"retrans_packets": 0, "retrans_bytes": 0,
                                               "by_kind": {}, "rto_events": 0,
                                               "fast_events": 0, "tlp": 0}


def test_empty_retransmission_tables_have_their_columns():
    r, e = tcp.retransmissions(tcp.combine({}))
    assert list(r.columns) == RETRANS_COLUMNS and list(e.columns) == EPISODE_COLUMNS
    # a flow without any retransmission gives the same empty tables
    r, e = tcp.retransmissions(_tcp("three").query("iface == 'sp1-eth2'"))
    assert r.empty and list(r.columns) == RETRANS_COLUMNS and e.empty


# ------------------------------------------------------------------ losses

LOSS_COLUMNS = ["flow", "src", "dst", "sport", "dport", "sender_iface", "receiver_iface", "t",
                "seq", "len", "ip_id", "retransmission", "via", "seen_at"]


def test_losses_say_which_middle_captures_saw_the_lost_copy():
    lost = tcp.losses(_tcp("three"))
    assert list(lost.columns) == LOSS_COLUMNS
    assert list(lost["seq"]) == [1 * MSS, 3 * MSS]
    assert list(lost["seen_at"]) == ["sp1-eth2,lf2-eth3", ""]
    assert set(lost["via"]) == {"sp1-eth2,lf2-eth3"}
    assert set(lost["sender_iface"]) == {"h1-eth0"} and set(lost["receiver_iface"]) == {"h2-eth0"}
    assert list(lost["len"]) == [MSS, MSS] and list(lost["ip_id"]) == [103, 105]
    assert np.allclose(lost["t"] - T0, [0.011, 0.013], atol=2e-6)
    assert set(lost["flow"]) == {FLOW} and set(lost["src"]) == {0x0A000001}
    assert set(lost["dst"]) == {0x0A000002} and set(lost["sport"]) == {40000}
    assert set(lost["dport"]) == {5001}


def test_losses_only_while_the_receiver_side_captured():
    lost = tcp.losses(_tcp("window"))
    assert list(lost["seq"]) == [1 * MSS]


def test_losses_need_a_second_capture():
    assert tcp.losses(_tcp("sender-only")).empty
    empty = tcp.losses(tcp.combine({}))
    assert list(empty.columns) == LOSS_COLUMNS


def test_loss_of_a_retransmission_is_flagged():
    lost = tcp.losses(_tcp("scenario"))
    assert list(lost["retransmission"]) == [False, False, False]
    assert list(lost["seq"]) == [3 * MSS, 10 * MSS, 11 * MSS]
    # IP ids count up from 101 (the handshake's ACK) per sender packet
    assert list(lost["ip_id"]) == [105, 113, 115]


# ------------------------------------------------------------------ spurious

def test_spurious_retransmission_of_resegmented_data():
    t = _tcp("resegmented")
    r, _ = tcp.retransmissions(t)
    assert list(r["seq"]) == [500, 2 * MSS]
    sp = tcp.spurious_retransmissions(t, r)
    assert list(sp) == [True, False]
    r2, _ = tcp.retransmissions(_tcp("scenario"))
    assert list(tcp.spurious_retransmissions(_tcp("scenario"), r2)) == [False, False, False,
                                                                          True]


def test_spurious_is_unknown_without_a_receiver_capture():
    t = _tcp("sender-only")
    r, _ = tcp.retransmissions(t)
    sp = tcp.spurious_retransmissions(t, r)
    assert len(sp) == 4 and sp.isna().all()


# ------------------------------------------------------------------ summaries

def test_flow_summary_exact():
    t = _tcp("scenario")
    r, _ = tcp.retransmissions(t)
    s = flowstats.flow_summary(t, retrans=r).iloc[0]
    assert (s["flow"], s["sender_iface"], s["receiver_iface"]) == (FLOW, "h1-eth0", "h2-eth0")
    assert (s["src"], s["dst"], s["sport"], s["dport"]) == (0x0A000001, 0x0A000002, 40000, 5001)
    assert (s["packets"], s["bytes"], s["wire_bytes"], s["retrans_packets"]) == (
        19, 14 * MSS, 19 * MSS, 4)
    assert s["start"] == pytest.approx(T0, abs=2e-6)            # the SYN
    assert s["last_data"] - T0 == pytest.approx(0.70001, abs=2e-6)
    assert s["duration_s"] == pytest.approx(0.69001, abs=2e-6)  # first to last data
    assert s["fct_s"] == pytest.approx(0.7011, abs=2e-6)         # SYN -> ACK of 14000
    assert s["goodput_mbps"] == pytest.approx(14 * MSS * 8 / 0.69001 / 1e6, rel=1e-5)
    assert flowstats.flow_summary(t).iloc[0]["retrans_packets"] == 0  # no retrans table given


def test_flow_summary_without_final_ack_or_duration(tmp_path):
    t = _tcp("window")
    s = flowstats.flow_summary(t).iloc[0]
    assert np.isnan(s["fct_s"])            # nothing ACKed the last byte
    one = TcpScript()
    one.data(0.01, 0)
    d = tmp_path
    write_pcap(d / "a.pcap", one.sender, one.t0)
    s1 = flowstats.flow_summary(tcp.combine({"a": read_pcap(d / "a.pcap", cache=False)})).iloc[0]
    assert s1["duration_s"] == 0 and np.isnan(s1["goodput_mbps"])
    assert (s1["packets"], s1["bytes"]) == (1, MSS)
    # a single data packet: one bin of the default 10 ms
    ts = flowstats.throughput_series(tcp.combine({"a": read_pcap(d / "a.pcap", cache=False)}))
    assert len(ts) == 1 and ts.attrs["bin_s"] == 0.01
    assert ts["mbps"].iloc[0] == pytest.approx(MSS * 8 / 0.01 / 1e6)


def test_throughput_series_default_bins_exact(tmp_path):
    ts = flowstats.throughput_series(_tcp("scenario"))
    # span 0.69 s / 200 rounds to 0.00 -> the 10 ms floor
    assert ts.attrs["bin_s"] == 0.01
    assert list(ts.columns) == ["t", "flow", "mbps"] and set(ts["flow"]) == {FLOW}
    assert ts["t"].iloc[0] - T0 == pytest.approx(0.010, abs=2e-6)
    assert np.allclose(np.diff(ts["t"]), 0.01)
    # first bin [.010, .020): segments 0-6 and the fast retransmit, 8000 bytes
    assert list(ts["mbps"].iloc[:3]) == pytest.approx([6.4, 0.0, 1.6])
    assert (ts["mbps"] * 0.01 * 1e6 / 8).sum() == pytest.approx(19 * MSS)
    longer = flowstats.throughput_series(_tcp("resegmented"))
    assert longer.attrs["bin_s"] == 0.01  # 0.59 s / 200 = 0.003 -> floor
    # a 4 s span: 4 / 200 = 0.02 s bins
    far = TcpScript()
    far.data(0.01, 0)
    far.data(4.01, MSS)
    d = tmp_path
    write_pcap(d / "f.pcap", far.sender, far.t0)
    wide = flowstats.throughput_series(tcp.combine({"f": read_pcap(d / "f.pcap", cache=False)}))
    # t0 + 4.0 is 1700000004.01; arange's 200th step lands 4 us short of it, and the
    # last packet fell outside every bin until an edge was added (a bug found here)
    assert wide.attrs["bin_s"] == 0.02 and len(wide) == 201
    assert (wide["mbps"] * 0.02 * 1e6 / 8).sum() == pytest.approx(2 * MSS)
    # explicit bins are kept
    assert flowstats.throughput_series(_tcp("scenario"), bin_s=0.05).attrs["bin_s"] == 0.05


# ------------------------------------------------------------------ several flows, edges

FLOW_B = "10.0.0.1:40001>10.0.0.2:5001"


def test_a_clean_flow_before_a_lossy_one():
    t = _tcp("two-flows")
    flows = tcp.data_flows(t)
    assert list(flows["flow"]) == [FLOW, FLOW_B]
    r, e = tcp.retransmissions(t)
    assert list(r["flow"]) == [FLOW_B, FLOW_B] and list(r["kind"]) == ["tlp", "rto"]
    assert list(r["seq"]) == [0, 1] and list(r["len"]) == [1, MSS]
    lost = tcp.losses(t)
    # the 1-byte segment counts like any other
    assert list(zip(lost["flow"], lost["seq"], lost["len"], strict=True)) == [
        (FLOW_B, 0, 1), (FLOW_B, 1, MSS)]
    assert list(tcp.spurious_retransmissions(t, r)) == [False, False]
    # a flows table given by the caller is the one used
    only_b = flows[flows["flow"] == FLOW_B]
    assert list(tcp.retransmissions(t, only_b)[0]["flow"]) == [FLOW_B, FLOW_B]
    assert len(tcp.losses(t, flows[flows["flow"] == FLOW])) == 0
    assert list(flowstats.flow_summary(t, only_b)["flow"]) == [FLOW_B]
    assert list(flowstats.throughput_series(t, only_b, bin_s=0.1)["flow"].unique()) == [FLOW_B]
    # a flows table without 'via' (captures between the ends unknown): none are used
    lost_nv = tcp.losses(t, flows.drop(columns="via"))
    assert set(lost_nv["via"]) == {""} and set(lost_nv["seen_at"]) == {""}
    s = flowstats.flow_summary(t, retrans=r).set_index("flow")
    assert (s.loc[FLOW, "retrans_packets"], s.loc[FLOW_B, "retrans_packets"]) == (0, 2)
    assert (s.loc[FLOW_B, "bytes"], s.loc[FLOW_B, "wire_bytes"]) == (1 + MSS, 2 + 2 * MSS)


def test_only_pure_acks_are_duplicate_acks():
    r, _ = tcp.retransmissions(_tcp("dupack-kinds"))
    assert list(r["seq"]) == [MSS, 5 * MSS]
    # 3 plain duplicate ACKs (no SACK at all) are enough for fast retransmit
    assert (r["kind"].iloc[0], r["dupacks"].iloc[0], r["sacked"].iloc[0]) == ("fast", 3, 0)
    # the ACK of 5000 and its 2 duplicates; the FIN and the data segment acking the hole
    # are no duplicate ACKs (counted, they would make 4 and a fast retransmit)
    assert (r["kind"].iloc[1], r["dupacks"].iloc[1]) == ("other", 2)


def test_the_silence_before_a_resend_with_one_packet_before_it():
    r, e = tcp.retransmissions(_tcp("two-packets"))
    assert list(r["kind"]) == ["tlp"] and r["gap_s"].iloc[0] == pytest.approx(0.05, abs=2e-6)
    assert e["stall_start"].iloc[0] - T0 == pytest.approx(0.010, abs=2e-6)
    assert np.isnan(e["end"].iloc[0]) and np.isnan(e["duration_s"].iloc[0])  # never ACKed


def test_losses_at_the_receiver_captures_last_instant_count(tmp_path):
    """The window's end is inclusive: a packet sent at the very time of the receiver
    capture's last packet (0.0466 s, microsecond timestamps) is still compared."""
    s = _window_script()
    s.data(0.0466, 5 * MSS, lost=True)
    d = tmp_path
    s.write(d / "a.pcap", d / "b.pcap")
    t = tcp.combine({n: read_pcap(d / f"{n}.pcap", cache=False) for n in ("a", "b")})
    assert list(tcp.losses(t)["seq"]) == [1 * MSS, 5 * MSS]


def test_one_packet_at_the_receiver_is_a_window(tmp_path):
    s = TcpScript()
    s.data(0.0100, 0, lost=True)
    s.data(0.0101, MSS)                        # the receiver capture's only packet
    d = tmp_path
    s.write(d / "a.pcap", d / "b.pcap")
    t = tcp.combine({n: read_pcap(d / f"{n}.pcap", cache=False) for n in ("a", "b")})
    assert list(tcp.losses(t)["seq"]) == [0]


def test_spurious_unknown_is_nan_and_summary_of_nothing():
    t = _tcp("sender-only")
    r, _ = tcp.retransmissions(t)
    sp = tcp.spurious_retransmissions(t, r)
    assert all(isinstance(x, float) and np.isnan(x) for x in sp)
    assert tcp.retrans_summary(pd.DataFrame()) == {
        "retrans_packets": 0, "retrans_bytes": 0, "by_kind": {}, "rto_events": 0,
        "fast_events": 0, "tlp": 0}
