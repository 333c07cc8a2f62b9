"""Incast episodes count senders of real volume only (analysis/episodes.py,
MATERIAL_SHARE): a control flow next to bulk never makes an episode incast, comparable
senders to one receiver always do (rootless, hand-made queue samples and segments)."""
import pandas as pd
import pytest

from incastlab.analysis import episodes, rundir
from incastlab.analysis.pcap import ip_to_int
from incastlab.topologies.leafspine import LeafSpineTopo, fabric_map

T0 = 1_700_000_000.0


def _fabric(tmp_path, topo):
    fabric_map(topo).save(tmp_path / "fabric.json")
    return rundir.load_fabric(tmp_path)


def _hot_queue(iface):
    """Samples every 10 ms: the queue (limit 100 by default) full at 20-30 ms, drops."""
    return pd.DataFrame([{"t": T0 + k * 0.01, "switch": iface.split("-")[0], "port": 1,
                          "iface": iface, "backlog_bytes": b * 1500, "backlog_pkts": b,
                          "drops": d, "overlimits": 0, "sent_bytes": 0, "sent_pkts": 0,
                          "requeues": 0}
                         for k, (b, d) in enumerate([(0, 0), (50, 0), (100, 0), (100, 4),
                                                     (10, 4), (0, 4)])])


def _segments(fabric, flows):
    """flows: (src host, dst host, sport, segments, bytes each), sent 11-29 ms."""
    ip = {h: ip_to_int(v) for h, v in fabric.ip_by_host().items()}
    rows = []
    for src, dst, sport, n, size in flows:
        for k in range(n):
            rows.append({"t": T0 + 0.011 + k * 0.018 / max(n, 1), "src": ip[src],
                         "dst": ip[dst], "sport": sport, "dport": 29500, "seq": k * size,
                         "payload_len": size})
    return pd.DataFrame(rows).sort_values("t").reset_index(drop=True)


def test_a_control_flow_beside_bulk_is_not_a_second_sender(tmp_path):
    """A ring's episode at h3's port: h1's ring data (40 full segments, 58 kB) and the
    rendezvous store's few small messages from h2 (300 bytes). Before the share rule
    both counted, fan_in 2, and the ring's report called the episode incast."""
    fabric = _fabric(tmp_path, LeafSpineTopo(2, 2, 2))
    port = fabric.egress_iface("lf2", "h3")
    tcp = _segments(fabric, [("h1", "h3", 40001, 40, 1448), ("h2", "h3", 40002, 3, 100)])
    (e,) = episodes.incast_episodes(_hot_queue(port), fabric, tcp).itertuples()
    assert e.senders == "h1" and e.n_senders == 1 and e.fan_in == 1 and not e.incast
    assert e.n_flows == 2  # the control flow still crossed the port


@pytest.mark.parametrize("n", [2, 16])
def test_comparable_senders_to_one_receiver_are_incast(tmp_path, n):
    """n senders of one block each into the receiver's port, plus a control flow; with
    16 each has 1/16 of the bytes, above half an equal share (1/32 of 16 + 1)."""
    topo = LeafSpineTopo(2, 2, 9)  # 18 hosts: 16 senders, h18 receives, h17 controls
    fabric = _fabric(tmp_path, topo)
    port = fabric.egress_iface("lf2", "h18")
    bulk = [(f"h{i}", "h18", 41000 + i, 20, 1448) for i in range(1, n + 1)]
    tcp = _segments(fabric, bulk + [("h17", "h18", 40999, 2, 120)])
    (e,) = episodes.incast_episodes(_hot_queue(port), fabric, tcp).itertuples()
    assert e.n_senders == n and e.fan_in == n and e.incast
    assert "h17" not in e.senders.split(",")


def test_a_segment_seen_twice_counts_once(tmp_path):
    """Captured at the sender's and the receiver's port, a segment is one set of bytes:
    h2's 10 segments captured twice stay below h1's 30, and both are material (10 of 40
    >= 40 / 4), so two senders to h3: incast."""
    fabric = _fabric(tmp_path, LeafSpineTopo(2, 2, 2))
    port = fabric.egress_iface("lf2", "h3")
    once = _segments(fabric, [("h1", "h3", 40001, 30, 1448), ("h2", "h3", 40002, 10, 1448)])
    twice = pd.concat([once, once[once.sport == 40002]]).sort_values("t")
    for tcp in (once, twice):
        (e,) = episodes.incast_episodes(_hot_queue(port), fabric, tcp).itertuples()
        assert e.senders == "h1,h2" and e.incast
    # 5 segments of h2 against 30 of h1: 5 / 35 < 1/4, not material
    few = _segments(fabric, [("h1", "h3", 40001, 30, 1448), ("h2", "h3", 40002, 5, 1448)])
    (e,) = episodes.incast_episodes(_hot_queue(port), fabric, few).itertuples()
    assert e.senders == "h1" and not e.incast
