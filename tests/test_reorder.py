"""analysis/reorder.py on hand-built captures whose reordering was placed by hand
(analysis/synthetic.py's TcpScript: the sender's IP IDs count up packet by packet, as
Linux numbers a connected socket's packets)."""
from __future__ import annotations

import pandas as pd
import pytest

from incastlab.analysis import reorder
from incastlab.analysis.pcap import read_pcap
from incastlab.analysis.synthetic import MSS, TcpScript
from incastlab.analysis.tcp import combine

SEND_GAP = 0.001


def scripted(tmp_path):
    """Segments 0..11 (MSS 1000) sent 1 ms apart, 0.5 ms one way, except:
    - segment 3 arrives after segment 6 (overtaken by 4, 5, 6: displacement 3);
    - segments 7 and 8 arrive after 9, in the order 9, 7, 8 (7 displaced by 1: 9; 8 by
      2: 9 first, then 7);
    - segment 10 is lost and retransmitted after 11 (below the highest sequence, but
      sent last: not reordered);
    - segment 1 is retransmitted although it had arrived (a spurious retransmission)."""
    s = TcpScript()
    s.handshake(0.0)
    d = s.delay
    sent = {k: 0.010 + k * SEND_GAP for k in range(12)}
    arrive = {k: t + d for k, t in sent.items()}
    arrive[3] = arrive[6] + 0.0002
    arrive[7] = arrive[9] + 0.0001
    arrive[8] = arrive[9] + 0.0003
    for k in range(12):
        s.data(sent[k], k * MSS, lost=(k == 10), arrive=arrive[k])
    s.ack(0.030, 10 * MSS, sack=[(11 * MSS, 12 * MSS)])
    s.data(0.031, 10 * MSS)   # the retransmission of the lost segment
    s.data(0.032, 1 * MSS)    # spurious: segment 1 had arrived
    s.ack(0.0335, 12 * MSS, sack=[(1 * MSS, 2 * MSS)])  # the D-SACK
    s.write(tmp_path / "h1-eth0.pcap", tmp_path / "h2-eth0.pcap")
    return s, arrive


def test_displacement_and_lateness_of_each_reordered_packet(tmp_path):
    _, arrive = scripted(tmp_path)
    rx = read_pcap(tmp_path / "h2-eth0.pcap", iface="h2-eth0", cache=False)
    p = reorder.packet_reordering(rx)
    p["segment"] = p["seq"] // MSS
    late = p[p["reordered"]].set_index("segment")
    # arrival order: 0 1 2 4 5 6 3 9 7 8 11 10' 1'
    assert list(p["segment"]) == [0, 1, 2, 4, 5, 6, 3, 9, 7, 8, 11, 10, 1]
    assert sorted(late.index) == [3, 7, 8]
    assert late.at[3, "displacement"] == 3   # 4, 5, 6 arrived before it
    assert late.at[7, "displacement"] == 1   # 9
    assert late.at[8, "displacement"] == 2   # 9 (the first to overtake it), then 7
    assert late.at[3, "late_s"] == pytest.approx(arrive[3] - arrive[4], abs=2e-6)
    assert late.at[8, "late_s"] == pytest.approx(arrive[8] - arrive[9], abs=2e-6)
    # below the highest sequence seen: the three late originals and both retransmissions
    assert sorted(p[p["below_highest"]]["segment"]) == [1, 3, 7, 8, 10]
    assert list(p[p["duplicate"]]["segment"]) == [1]  # only the spurious one


def test_in_order_flow_has_nothing(tmp_path):
    s = TcpScript()
    s.handshake(0.0)
    for k in range(20):
        s.data(0.01 + k * SEND_GAP, k * MSS)
    s.ack(0.04, 20 * MSS)
    s.write(tmp_path / "a.pcap", tmp_path / "b.pcap")
    p = reorder.packet_reordering(read_pcap(tmp_path / "b.pcap", iface="b", cache=False))
    assert len(p) == 20 and not p[["reordered", "below_highest", "duplicate"]].any().any()
    assert (p["displacement"] == 0).all()


def test_ip_ids_wrapping_at_2_16_are_not_reordering():
    rows = pd.DataFrame({"t": [0.0, 0.1, 0.2, 0.3], "seq": [0, 1000, 2000, 3000],
                         "payload_len": [1000] * 4, "ip_id": [65534, 65535, 0, 1]})
    p = reorder.packet_reordering(rows)
    assert not p["reordered"].any() and list(p["ip_id"]) == [65534, 65535, 65536, 65537]


def test_per_flow_at_the_receiver_and_the_kernels_dsacks(tmp_path):
    scripted(tmp_path)
    tcp = combine({i: read_pcap(tmp_path / f"{i}.pcap", iface=i, cache=False)
                   for i in ("h1-eth0", "h2-eth0")})
    per_flow = reorder.flow_reordering(tcp, names={"10.0.0.1": "h1", "10.0.0.2": "h2"})
    assert len(per_flow) == 1
    f = per_flow.iloc[0]
    assert (f.sender, f.receiver, f.receiver_iface) == ("h1", "h2", "h2-eth0")
    assert (f.data_packets, f.reordered, f.max_displacement, f.below_highest,
            f.duplicates) == (13, 3, 3, 5, 1)
    assert f.mean_displacement == pytest.approx(2.0)
    counters = pd.DataFrame([
        {"host": "h2", "counter": "TcpExtTCPDSACKOldSent", "delta": 1.0},
        {"host": "h2", "counter": "TcpExtTCPDSACKOfoSent", "delta": 0.0},
        {"host": "h1", "counter": "TcpExtTCPDSACKRecv", "delta": 1.0},
        {"host": "h1", "counter": "TcpExtTCPSACKReorder", "delta": 2.0}])
    table = reorder.reorder_table(per_flow, counters).set_index("host")
    assert table.at["h2", "received_reordered"] == 3
    assert table.at["h2", "dsack_sent"] == 1 and table.at["h2", "dsack_agrees"]
    assert table.at["h1", "sent_reordered"] == 3 and table.at["h1", "sent_duplicates"] == 1
    assert table.at["h1", "TcpExtTCPDSACKRecv"] == 1
    assert table.at["h1", "TcpExtTCPSACKReorder"] == 2
    assert table.at["h1", "dsack_agrees"] is None  # h1 received no data: no counters
    counters.loc[0, "delta"] = 2.0
    assert not reorder.reorder_table(per_flow, counters).set_index("host").at[
        "h2", "dsack_agrees"]


def test_the_report_has_the_reordering_of_a_saved_run(tmp_path):
    """The report stage (analysis/reorderreport.py) through the one pass over the
    captures, from the run directory alone: metrics.json reorder, the two tables, the
    section."""
    import json

    from incastlab.analysis import build_report
    from incastlab.analysis.synthetic import make_run_dir

    s, _ = scripted(tmp_path)
    run = make_run_dir(tmp_path / "run", pcaps={"h1-eth0": s.sender, "h2-eth0": s.receiver},
                       counters={"h2": ({"TcpExtTCPDSACKOldSent": 4},
                                        {"TcpExtTCPDSACKOldSent": 5})},
                       t0=s.t0)
    out = build_report(run, plots=False)
    m = json.loads(out["metrics"].read_text())["reorder"]
    assert (m["data_packets"], m["reordered"], m["max_displacement"], m["below_highest"],
            m["duplicates"]) == (13, 3, 3, 5, 1)
    hosts = {h["host"]: h for h in m["hosts"]}
    assert hosts["10.0.0.2"]["dsack_sent"] is None  # no OfoSent counter: not a sum
    assert (run / "tables" / "reorder_flows.csv").exists()
    assert "## Reordering" in out["summary"].read_text()
