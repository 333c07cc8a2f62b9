"""Latency under load (analysis/latency.py) on hand-built captures and queue tables whose
answers are known: RTT samples (Karn's rule, delayed ACKs, SACK, the 2^32 wrap),
queueing delay from backlog / rate, the sojourn matcher, and the report's section and
metrics."""
import json

import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import latency, metrics, queues, tcp

from incastlab.commands.common import build_report
from incastlab.analysis.pcap import read_pcap
from incastlab.analysis.synthetic import (MSS, TcpScript, demo_fabric, make_demo_run,
                                          make_run_dir, scenario_tcp, write_pcap)
from incastlab.jobs import JOBS

D = 0.0005      # TcpScript's default one-way delay between its two capture points
TOL = 3e-6      # pcap timestamps are whole microseconds: two of them per difference


def _tcp(tmp_path, script, ifaces=("h1-eth0", "h3-eth0"), extra=None):
    """The script's two captures (plus `extra` {iface: [(t, pkt)]}) as one TCP table."""
    paths = {}
    sides = [*zip(ifaces, (script.sender, script.receiver), strict=True),
             *(extra or {}).items()]
    for iface, side in sides:
        paths[iface] = tmp_path / f"{iface}.pcap"
        write_pcap(paths[iface], side, script.t0)
    return tcp.combine({k: read_pcap(p, cache=False) for k, p in paths.items()})


def _by_seq(samples):
    return dict(zip(samples["seq"].astype(int), samples["rtt_s"], strict=True))


def test_each_acked_segment_gives_its_own_rtt(tmp_path):
    # the receiver holds each ACK a different time: RTT = 2 x one-way + hold
    s = TcpScript()
    s.handshake(0.0)
    holds = [0.0001, 0.002, 0.0005, 0.007]
    for k, h in enumerate(holds):
        t = 0.010 + k * 0.020
        s.data(t, k * MSS)
        s.ack(t + D + h, (k + 1) * MSS)
    got = _by_seq(latency.rtt_samples(_tcp(tmp_path, s)))
    assert sorted(got) == [0, 1000, 2000, 3000]
    for k, h in enumerate(holds):
        assert got[k * MSS] == pytest.approx(2 * D + h, abs=TOL)


def test_delayed_ack_covering_two_segments_gives_one_sample_from_the_newer(tmp_path):
    s = TcpScript()
    s.handshake(0.0)
    s.data(0.010, 0)
    s.data(0.011, MSS)
    s.ack(0.011 + D + 0.004, 2 * MSS)     # one ACK for both, 4 ms after the second
    s.data(0.030, 2 * MSS)
    s.ack(0.030 + D + 0.0001, 3 * MSS)
    got = _by_seq(latency.rtt_samples(_tcp(tmp_path, s)))
    # the first segment's wait for its partner is the receiver's ACK policy, not the path
    assert sorted(got) == [MSS, 2 * MSS]
    assert got[MSS] == pytest.approx(2 * D + 0.004, abs=TOL)
    assert got[2 * MSS] == pytest.approx(2 * D + 0.0001, abs=TOL)


def test_karn_sack_and_capture_duplicates_on_the_scripted_connection(tmp_path):
    # scenario_tcp (synthetic.py): every ACK comes 2 x 0.5 ms + 0.1 ms after its segment.
    # Samples: segments 0-2 (cumulative ACKs); 4-6 (each duplicate ACK's SACK edge moves
    # up to the segment's end); 8000 (SACKed while 7000 was reordered); 9000; 13000 (its
    # capture duplicate with the same IP id is one transmission). None from: 3000 and
    # the ACK that covers its fast retransmission; 7000 (its ACK covers nothing new after
    # the SACK); 10000 (RTO), 11000 (TLP), 12000 (a spurious retransmission: without
    # Karn's rule it would give 251 ms); the FIN.
    s, _ = scenario_tcp()
    r = latency.rtt_samples(_tcp(tmp_path, s))
    got = _by_seq(r)
    assert sorted(got) == [0, 1000, 2000, 4000, 5000, 6000, 8000, 9000, 13000]
    assert np.allclose(list(got.values()), 2 * D + 0.0001, atol=TOL)
    sack = dict(zip(r["seq"].astype(int), r["sack"], strict=True))
    assert [k for k, v in sorted(sack.items()) if v] == [4000, 5000, 6000, 8000]
    assert set(r["iface"]) == {"h1-eth0"} and (r["len"] == MSS).all()


def test_sack_edge_inside_a_segment_gives_no_sample(tmp_path):
    # a SACK block ending inside segment 2000 (half of it reported): that segment has
    # not fully arrived, and the one before the edge (1000) is in the hole: no sample
    s = TcpScript()
    s.handshake(0.0)
    s.data(0.010, 0)
    s.ack(0.010 + D + 0.0001, MSS)
    s.data(0.011, MSS, lost=True)
    s.data(0.012, 2 * MSS)
    s.ack(0.012 + D + 0.0001, MSS, sack=[(2 * MSS, 2 * MSS + 500)])
    s.ack(0.012 + D + 0.0002, MSS, sack=[(2 * MSS, 3 * MSS)])
    got = _by_seq(latency.rtt_samples(_tcp(tmp_path, s)))
    assert sorted(got) == [0, 2 * MSS]
    assert got[2 * MSS] == pytest.approx(2 * D + 0.0002, abs=TOL)


def test_ack_after_a_retransmission_gives_no_sample_even_for_new_data(tmp_path):
    # segment 1000 lost, retransmitted by RTO together with nothing else; segment 2000
    # was sent after the original. The ACK covering 3000 could be for the retransmission
    # (it arrived just before it): Linux takes no sample from it, nor do we.
    s = TcpScript()
    s.handshake(0.0)
    s.data(0.010, 0)
    s.ack(0.010 + D + 0.0001, MSS)
    s.data(0.011, MSS, lost=True)
    s.data(0.012, 2 * MSS)
    s.ack(0.012 + D + 0.0001, MSS)                # duplicate ACK, no SACK: nothing new
    s.data(0.250, MSS)                           # RTO retransmission
    s.ack(0.250 + D + 0.0001, 3 * MSS)
    s.data(0.300, 3 * MSS)
    s.ack(0.300 + D + 0.003, 4 * MSS)
    got = _by_seq(latency.rtt_samples(_tcp(tmp_path, s)))
    assert sorted(got) == [0, 3 * MSS]
    assert got[3 * MSS] == pytest.approx(2 * D + 0.003, abs=TOL)


def test_sequence_numbers_wrapping_past_2_32(tmp_path):
    # the ISN 2.5 segments below 2^32: the third segment's sequence numbers wrap
    s = TcpScript(isn=(1 << 32) - 2500)
    s.handshake(0.0)
    holds = [0.001, 0.002, 0.003, 0.004, 0.005]
    for k, h in enumerate(holds):
        t = 0.010 + k * 0.010
        s.data(t, k * MSS)
        s.ack(t + D + h, (k + 1) * MSS)
    tcp_df = _tcp(tmp_path, s)
    assert (tcp_df["seq"].astype(np.int64) < 3000).any()  # the wrap is in the capture
    got = _by_seq(latency.rtt_samples(tcp_df))
    assert sorted(got) == [k * MSS for k in range(5)]
    for k, h in enumerate(holds):
        assert got[k * MSS] == pytest.approx(2 * D + h, abs=TOL)


def test_rtt_only_from_the_sending_hosts_own_capture(tmp_path):
    # with a fabric, a flow first seen at a spine port (its host not captured) gives no
    # samples: that capture would time only the rest of the path
    s = TcpScript(src="10.0.1.1", dst="10.0.2.1")
    s.handshake(0.0)
    s.data(0.010, 0)
    s.ack(0.010 + D + 0.0001, MSS)
    fabric = demo_fabric()
    at_host = _tcp(tmp_path, s, ifaces=("h1-eth0", "h3-eth0"))
    assert len(latency.rtt_samples(at_host, fabric=fabric)) == 1
    at_spine = _tcp(tmp_path, s, ifaces=("sp1-eth1", "h3-eth0"))
    assert len(latency.rtt_samples(at_spine)) == 1          # no fabric: earliest capture
    assert len(latency.rtt_samples(at_spine, fabric=fabric)) == 0


def test_flow_role_from_the_manifest_processes():
    fabric = demo_fabric()
    manifest = {"processes": [{"host": "h3", "role": "server", "rank": 0},
                              {"host": "h1", "role": "worker", "rank": 1}]}
    roles = latency.host_roles(manifest)
    ip = {h.name: h.ip for h in fabric.hosts}
    from incastlab.analysis.pcap import ip_to_int
    assert latency.flow_role(ip_to_int(ip["h1"]), ip_to_int(ip["h3"]), fabric, roles) == \
        "worker → server"
    assert latency.flow_role(ip_to_int(ip["h2"]), ip_to_int(ip["h3"]), fabric, roles) == \
        "h2 → server"


# ---------------------------------------------------------------- queues

def _queue_rows(iface, backlogs, sent_pkts_per_sample, t0=1000.0):
    rows, sent = [], 0
    for k, b in enumerate(backlogs):
        sent += sent_pkts_per_sample[k]
        rows.append({"t": t0 + 0.01 * k, "switch": iface.split("-")[0],
                     "port": int(iface.split("eth")[1]), "iface": iface, "backlog_bytes": b,
                     "backlog_pkts": b // 1514, "drops": 0, "overlimits": 0,
                     "sent_bytes": sent * 1514, "sent_pkts": sent, "requeues": 0})
    return rows


def test_queue_delay_is_backlog_over_rate_weighted_by_packets_sent():
    fabric = demo_fabric(rate_mbps=10.0, queue_packets=20)
    # lf2-eth1 (leaf 2 -> h3) at 10 Mbit/s: 1514 B = 1.2112 ms; 10 frames = 12.112 ms;
    # 20 frames (full) = 24.224 ms. Packets sent per interval: 10, 80, 10 (the first
    # sample opens the counter: weight 0); a port the fabric does not know is left out.
    q = pd.DataFrame(_queue_rows("lf2-eth1", [0, 1514, 15140, 30280], [0, 10, 80, 10])
                     + _queue_rows("xx-eth9", [99999] * 4, [0, 5, 5, 5]))
    qd = latency.queue_delay(queues.queue_deltas(q), fabric)
    assert set(qd["iface"]) == {"lf2-eth1"}
    assert qd["delay_s"].tolist() == pytest.approx([0, 1.2112e-3, 12.112e-3, 24.224e-3])
    assert qd["weight"].tolist() == [0, 10, 80, 10]
    st = latency.stats_ms(qd["delay_s"], qd["weight"])
    assert st["samples"] == 3
    assert (st["p50_ms"], st["p90_ms"], st["p99_ms"], st["max_ms"]) == pytest.approx(
        (12.112, 12.112, 24.224, 24.224))
    bound = latency.queue_delay_bound_s(20, 10.0) * 1e3
    assert bound == pytest.approx(24.224) and st["max_ms"] <= bound + 1e-9
    assert latency.port_bound_s(fabric, "lf2-eth1") * 1e3 == pytest.approx(bound)
    assert latency.port_bound_s(fabric, "h3-eth0") is None  # a host's own queue
    tab = latency.summary_table(None, qd, None, fabric)
    row = tab[tab["group"] == "lf2-eth1"].iloc[0]
    assert "24.2 ms when full" in row["note"] and "h3" in row["note"]


def test_queue_delay_needs_the_fabric_for_rates():
    q = pd.DataFrame(_queue_rows("lf2-eth1", [0, 1514], [0, 1]))
    assert latency.queue_delay(queues.queue_deltas(q), None).empty


def test_weighted_quantiles_pick_the_smallest_value_reaching_q():
    assert latency.weighted_quantiles([3, 1, 2], None, (0.5, 1.0)) == [2, 3]
    # q of the weight exactly reached by the first value: that value
    assert latency.weighted_quantiles([1, 2], [1, 1], (0.5,)) == [1]
    assert latency.weighted_quantiles([1, 2, 5], [0, 0, 4], (0.01,)) == [5]
    assert np.isnan(latency.weighted_quantiles([], None, (0.5,))[0])


def test_unweighted_quantiles_are_the_weighted_ones_with_equal_weights():
    # 1..100 shuffled, a NaN and an infinity left out: q of 100 samples is the
    # ceil(100 q)-th smallest (0.99 -> 99, not 100; 0.001 -> the smallest)
    rng = np.random.default_rng(7)
    v = np.concatenate([rng.permutation(np.arange(1.0, 101.0)), [np.nan, np.inf]])
    qs = (0.001, 0.5, 0.9, 0.99, 1.0)
    assert latency.weighted_quantiles(v, None, qs) == [1, 50, 90, 99, 100]
    # with ties and an odd count, the partition path equals the sort-and-cumsum one
    w = rng.integers(0, 5, 1001).astype(float) / 4
    assert latency.weighted_quantiles(w, None, qs) == latency.weighted_quantiles(
        w, np.ones(len(w)), qs)


# ---------------------------------------------------------------- sojourn

def test_sojourn_matches_each_transmission_to_its_own_arrival(tmp_path):
    # scenario_tcp: 18 distinct data transmissions at the sender (plus one capture
    # duplicate), 3 lost on the way; all arrive 0.5 ms later except segment 7000,
    # held back to 2.2 ms (reordered). The spurious retransmission of 12000 and the
    # fast retransmission of 3000 (new IP ids) are matched to their own arrivals.
    s, _ = scenario_tcp()
    soj = latency.sojourns(_tcp(tmp_path, s))
    assert len(soj) == 15
    assert set(soj["from_iface"]) == {"h1-eth0"} and set(soj["to_iface"]) == {"h3-eth0"}
    rel = ((soj["seq"].astype(np.int64) - (s.isn + 1)) % (1 << 32)).to_numpy()
    slow = soj[rel == 7000]["sojourn_s"]
    assert slow.tolist() == pytest.approx([0.0022], abs=TOL)
    others = soj[rel != 7000]["sojourn_s"]
    assert np.allclose(others, D, atol=TOL)
    # lost originals have no row: 3000 once (its retransmission), 10000 and 11000 once
    counts = pd.Series(rel).value_counts()
    assert counts[3000] == 1 and counts[10000] == 1 and counts[11000] == 1
    assert counts[12000] == 2  # the original and its spurious retransmission both arrived


def test_sojourn_ignores_flooded_copies_at_other_hosts(tmp_path):
    # h1 -> h3 (demo fabric addresses); the first data packet was flooded to h2 as well,
    # and a spine port on the path saw every packet 0.2 ms after h1
    s = TcpScript(src="10.0.1.1", dst="10.0.2.1")
    s.handshake(0.0)
    for k in range(3):
        s.data(0.010 + k * 0.001, k * MSS)
        s.ack(0.010 + k * 0.001 + D + 0.0001, (k + 1) * MSS)
    data = [(t, p) for t, p in s.sender if len(p["TCP"].payload)]
    extra = {"h2-eth0": [(data[0][0] + 0.0003, data[0][1])],
             "sp1-eth1": [(t + 0.0002, p) for t, p in data]}
    tcp_df = _tcp(tmp_path, s, extra=extra)
    fabric = demo_fabric()
    with_map = latency.sojourns(tcp_df, fabric=fabric)
    assert with_map["to_iface"].value_counts().sort_index().to_dict() == {
        "h3-eth0": 3, "sp1-eth1": 3}
    assert np.allclose(with_map[with_map["to_iface"] == "sp1-eth1"]["sojourn_s"], 0.0002,
                       atol=TOL)
    without = latency.sojourns(tcp_df)
    assert "h2-eth0" in set(without["to_iface"])


# ---------------------------------------------------------------- the report

@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "demo"
    make_demo_run(run)
    return run, build_report(run)


def test_report_has_latency_numbers_section_and_figure(demo):
    run, out = demo
    m = json.loads((run / "metrics.json").read_text())
    head = m["headline"]
    # every RTT sample of the demo is 2 x 0.5 ms + 0.1 ms (flow a: 9 samples, b: 20)
    assert m["latency"]["rtt_samples"] == 29
    assert head["rtt_p50_ms"] == pytest.approx(1.1, abs=0.003)
    assert head["rtt_p99_ms"] == pytest.approx(1.1, abs=0.003)
    # lf2-eth1 at 10 Mbit/s: 20 x 1500 B = 24 ms at the 6 full samples, 2.4 ms at the 84
    # others, 12 packets each; 24 packets per sample through idle ports (0 ms): 72 of
    # 3240 packets met 24 ms, so the pooled p99 is 24 ms and the p50 0
    assert head["queue_delay_p99_ms"] == pytest.approx(24.0)
    assert m["latency"]["queue_delay_p50_ms"] == 0
    groups = {(g["measure"], g["group"]): g for g in m["latency"]["groups"]}
    assert groups[("queue delay", "lf2-eth1")]["p50_ms"] == pytest.approx(2.4)
    # the demo's manifest lists no processes: flows are named by their hosts
    assert groups[("RTT", "h1 → h3")]["samples"] == 9
    assert groups[("RTT", "h2 → h3")]["samples"] == 20
    page = (run / "report.html").read_text()
    assert "Latency under load" in page and "latency CDFs" in page
    titles = [line for line in (run / "summary.md").read_text().splitlines()
              if line.startswith("## ")]
    assert titles.index("## Latency under load") == \
        titles.index("## Retransmissions and RTOs") + 1
    assert (run / "plots" / "latency.png").exists()
    assert (run / "tables" / "latency_rtt_samples.csv").exists()
    assert {"rtt_p50_ms", "rtt_p99_ms", "queue_delay_p99_ms"} <= \
        {x.name for x in metrics.compared(JOBS)}


def test_missing_inputs_make_latency_metrics_n_a(tmp_path):
    s, _ = scenario_tcp(t0=1_700_000_000.0)
    run = make_run_dir(tmp_path / "run", pcaps={"h1-eth0": s.sender, "h3-eth0": s.receiver},
                       t0=1_700_000_000.0)
    build_report(run, plots=False)
    m = json.loads((run / "metrics.json").read_text())
    assert m["headline"]["rtt_p50_ms"] == pytest.approx(1.1, abs=0.003)
    assert m["headline"]["queue_delay_p99_ms"] is None
    assert "queues.csv" in m["headline_na"]["queue_delay_p99_ms"]
    bare = make_run_dir(tmp_path / "bare", t0=1_700_000_000.0)
    build_report(bare, plots=False)
    m = json.loads((bare / "metrics.json").read_text())
    assert m["headline"]["rtt_p50_ms"] is None and "pcap" in m["headline_na"]["rtt_p50_ms"]
    assert "Latency under load" in (bare / "summary.md").read_text()


def test_sojourn_rows_do_not_depend_on_the_captures_row_order(tmp_path):
    # two flows from h1 to h3 whose packets are captured in the same microseconds at both
    # points: the rows are in time, sender capture, flow, seq order whatever order the
    # packet table has (the chunked report appends them per group of connections)
    a = TcpScript(src="10.0.1.1", dst="10.0.2.1", sport=40000)
    b = TcpScript(src="10.0.1.1", dst="10.0.2.1", sport=40001)
    for s in (a, b):
        s.handshake(0.0)
        for k in range(3):
            s.data(0.010 + k * 0.001, k * MSS)
            s.ack(0.010 + k * 0.001 + D + 0.0001, (k + 1) * MSS)
    tcp_df = _tcp(tmp_path, a, extra={"h1-eth0": a.sender + b.sender,
                                      "h3-eth0": a.receiver + b.receiver})
    soj = latency.sojourns(tcp_df)
    assert len(soj) == 6 and soj["flow"].nunique() == 2
    assert soj.equals(soj.sort_values(latency.SOJOURN_ORDER, ignore_index=True))
    for order in (tcp_df.index[::-1], np.random.default_rng(3).permutation(tcp_df.index)):
        pd.testing.assert_frame_equal(latency.sojourns(tcp_df.loc[order]), soj)


def test_the_cdf_is_drawn_through_exact_points_of_it():
    # A CDF of n values drawn step by step costs matplotlib ~100 bytes a value; above
    # CDF_POINTS values it is drawn through CDF_POINTS of its exact points instead: the
    # value of rank i (sorted) at height (i + 1) / n, first and last included.
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from incastlab.analysis import latency_plots
    rng = np.random.default_rng(7)
    fig, ax = plt.subplots()
    small = rng.exponential(5.0, 300)
    latency_plots.cdf_line(ax, np.append(small, np.nan))
    x, y = ax.lines[-1].get_xdata(), ax.lines[-1].get_ydata()
    assert list(x) == sorted(small) and list(y) == list(np.arange(1, 301) / 300)
    big = rng.exponential(5.0, 50_001)
    latency_plots.cdf_line(ax, big)
    x, y = ax.lines[-1].get_xdata(), ax.lines[-1].get_ydata()
    assert len(x) <= latency_plots.CDF_POINTS
    ranks = np.round(y * len(big)).astype(int) - 1
    assert ranks[0] == 0 and ranks[-1] == len(big) - 1
    assert np.array_equal(x, np.sort(big)[ranks])      # every drawn point is exact
    assert np.diff(ranks).max() <= len(big) // (latency_plots.CDF_POINTS - 1) + 1  # evenly spread
    plt.close(fig)
