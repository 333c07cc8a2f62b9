"""CE, ECE and CWR per flow (analysis/ecnflows.py, tables/ecn_flows.csv), the CE-marked
packets on the queue figure and the marks in trace.json, on the synthetic ECN run of
analysis/synthetic_ecn.py (h1: 10 CE of 20 packets, h2: 4 of 20; each flow's SYN carries
ECE + CWR and its SYN-ACK ECE, which are negotiation, not echoes)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis import interactive, render
from analysis.ecnflows import COLUMNS, ece_delivered
from analysis.synthetic_ecn import make_ecn_run
from incastlab.commands.common import analyse, build_report
from tests.tracecheck import problems


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    run = tmp_path_factory.mktemp("ecn-flows") / "run"
    truth = make_ecn_run(run)
    return run, truth, build_report(run, plots=False)


def test_the_flow_table_counts_ce_ece_cwr_per_flow(built):
    _, truth, paths = built
    df = pd.read_csv(paths["report"].parent / "tables" / "ecn_flows.csv")
    assert list(df.columns) == COLUMNS
    got = {r.sender: (r.receiver, r.data_packets, r.ce, r.ect, r.ece, r.cwr, r.acks_back,
                      r.ece_delivered, r.mixed_acks) for r in df.itertuples()}
    assert got == {"h1": ("h3", 20, 10, 10, 10, 1, 20, 10, 0),
                   "h2": ("h3", 20, 4, 16, 4, 1, 20, 4, 0)}
    assert {r.sender: r.ece for r in df.itertuples()} == truth["ece"]
    assert {r.sender: r.cwr for r in df.itertuples()} == truth["cwr"]


def test_the_port_cross_check_leaves_the_syns_out_too(built):
    run, _, _ = built
    check = analyse(run).tables["ecn"]["check"].set_index("iface")
    assert check.loc["lf2-eth1", "ece_captured"] == 14
    assert check.loc["lf2-eth1", "cwr_captured"] == 2


def test_ce_times_go_to_the_port_in_front_of_the_receiver(built):
    run, truth, _ = built
    a = analyse(run)
    marks = render.ce_marks(a)
    assert set(marks) == {"lf2-eth1"}
    assert np.allclose(marks["lf2-eth1"], truth["ce_times"], atol=1e-6)


def test_the_queue_figure_draws_the_marks(built):
    run, _, _ = built
    a = analyse(run)
    html = interactive.queues(a.tables["queues_d"], ["lf2-eth1", "sp1-eth2"], a.t0,
                              marks=render.ce_marks(a))
    assert "lf2-eth1: CE marked (14 packets)" in html
    assert "sp1-eth2: CE marked" not in html


def test_thinned_marks_keep_their_count(built):
    run, _, _ = built
    a = analyse(run)
    many = {"lf2-eth1": a.t0 + np.linspace(0, 0.05, interactive.MAX_MARKS + 500)}
    html = interactive.queues(a.tables["queues_d"], ["lf2-eth1"], a.t0, marks=many)
    assert f"CE marked ({interactive.MAX_MARKS + 500} packets)" in html


def test_trace_has_a_ce_counter_per_marking_port(built):
    _, _, paths = built
    trace = json.loads((paths["report"].parent / "trace.json").read_text())
    assert problems(trace) == []
    ce = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"].endswith("CE marks")]
    per_port = {}
    for e in ce:
        per_port[e["name"]] = per_port.get(e["name"], 0) + e["args"]["marks"]
    # ecn.csv: half of each port's marks at 0.2 s, the rest at 0.6 s
    assert per_port == {"lf2-eth1 CE marks": 10, "sp1-eth2 CE marks": 4}
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert {names[e["pid"]] for e in ce} == {"switch lf2", "switch sp1"}


def _orange_pixels(path) -> int:
    import matplotlib.image as mpimg

    r, g, b = np.moveaxis(mpimg.imread(path)[..., :3], -1, 0)
    # tab:orange (1.0, 0.50, 0.05), also blended with the white behind it
    return int(((r > 0.9) & (g > 0.45) & (g < 0.8) & (b < 0.6) & (r - b > 0.4)).sum())


def test_the_png_queue_figure_draws_the_marks(built, tmp_path):
    from analysis import plots

    run, _, _ = built
    a = analyse(run)
    plain = plots.queue_occupancy(a.tables["queues_d"], ["lf2-eth1"], a.t0,
                                  tmp_path / "plain.png")
    marked = plots.queue_occupancy(a.tables["queues_d"], ["lf2-eth1"], a.t0,
                                   tmp_path / "marked.png", marks=render.ce_marks(a))
    assert _orange_pixels(plain) == 0 and _orange_pixels(marked) > 50


def test_ece_delivered_counts_segments_by_the_ack_that_first_covers_them():
    # 4 segments of 100 bytes from seq 1000; CE on the 2nd and 3rd
    seq, length, ce = [1000, 1100, 1200, 1300], [100] * 4, [False, True, True, False]
    # ACK 1100 (no ECE), ACK 1300 with ECE (2 CE), a duplicate ACK 1300, ACK 1400 no ECE
    assert ece_delivered(seq, length, ce, [1000, 1100, 1300, 1300, 1400],
                         [False, False, True, True, False]) == (2, 0)
    # ACK 1200 skipped: ACK 1300 with ECE delivers the 2nd and 3rd; 1400 with ECE: mixed
    assert ece_delivered(seq, length, ce, [1100, 1300, 1400], [False, True, True]) == (3, 1)
    # a retransmission of the 2nd (not CE this time) changes nothing: first arrival counts
    assert ece_delivered(seq + [1100], length + [100], ce + [False], [1100, 1300, 1400],
                         [False, True, False]) == (2, 0)
    # an old ACK captured late (reordered) delivers nothing and takes nothing back
    assert ece_delivered(seq, length, ce, [1100, 1300, 1200, 1400],
                         [False, True, False, False]) == (2, 0)
    # sequence numbers that wrap past 2^32
    base = (1 << 32) - 150
    assert ece_delivered([base, (base + 100) & 0xFFFFFFFF], [100, 100], [True, True],
                         [(base + 100) & 0xFFFFFFFF, (base + 200) & 0xFFFFFFFF],
                         [True, True]) == (2, 0)


def test_a_fin_acked_with_ece_is_delivered_ce(tmp_path):
    """Classic ECN keeps ECE on until CWR, so the ACK of the sender's FIN may carry it:
    the kernel counts the FIN delivered CE (measured: h2's 1,389 = 1,388 data + its FIN)."""
    from scapy.layers.inet import IP, TCP

    from analysis.ecnflows import flow_ecn
    from analysis.pcap import ip_to_int, parse_pcap_bytes
    from incastlab.analysis.synthetic import write_pcap

    s, r = "10.0.0.1", "10.0.0.2"

    def seg(t, src, dst, flags, seq, ack, tos=2, data=b""):
        sp, dp = (5001, 40000) if src == s else (40000, 5001)
        return (t, IP(src=src, dst=dst, tos=tos) / TCP(sport=sp, dport=dp, flags=flags,
                                                       seq=seq, ack=ack) / data)

    pkts = [seg(0.001, s, r, "PA", 100, 1, data=b"x" * 100),
            seg(0.002, r, s, "A", 1, 200),
            seg(0.003, s, r, "PA", 200, 1, tos=3, data=b"x" * 100),
            seg(0.004, r, s, "AE", 1, 300),
            seg(0.005, s, r, "FA", 300, 1),
            seg(0.006, r, s, "AE", 1, 301)]
    path = tmp_path / "h2-eth0.pcap"
    write_pcap(path, pkts, 1e9)
    df = flow_ecn(parse_pcap_bytes(path.read_bytes(), iface="h2-eth0"), ip_to_int(r))
    row = df[df["sport"] == 5001].iloc[0]
    assert (row["ce"], row["ece_delivered"], row["mixed_acks"]) == (1, 2, 1)
