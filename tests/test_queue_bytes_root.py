"""Root tier for switch buffers in bytes (issue 16 item 2): an incast into a port whose
queue is a bfifo of ``topology.queue_bytes`` drops once its byte limit is reached, tc's
drop counter and the captures' losses agree as they do for a packet limit
(tests/test_analysis_root.py), and the backlog never exceeds the limit."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from incastlab.commands.common import build_report
from incastlab.topologies.fabricmap import FabricMap
from tests.rootnet import kept_up, run_complete

pytestmark = pytest.mark.root
QUEUE_BYTES = 15_140  # ten 1514-byte frames: shallow, as classic-incast's 8 packets
SENDERS = 8
MAX_FRAME = 1514  # Ethernet frame at MTU 1500, as tc's backlog counts it
# tc against the captures: the bounds of tests/test_analysis_root.py (OVS_BATCH_MAX,
# TC_PER_LOSS_MAX, SLACK) and for the same reason: on an OVS-userspace port tc counts
# refused enqueues, a refused packet may be counted twice, and a refusal that ends a send
# batch drops the rest of it (at most 32 packets) uncounted. Here each sender's window
# reaches the full queue as one batch, so tc runs low (0.62 x the captures' losses seen).
TC_PER_LOSS_MAX = 2
OVS_BATCH_MAX = 32
SLACK = 10


def test_a_byte_limited_queue_drops_at_its_limit(tmp_path):
    run_complete(tmp_path, [
        "topology.kind=star", "topology.host_bw_mbps=100", f"topology.queue_bytes={QUEUE_BYTES}",
        "routing.policy=single", "workload.kind=incast", f"workload.senders={SENDERS}",
        "workload.block_bytes=65536", "workload.rounds=6", "workload.rto_min_ms=1"])
    fabric = FabricMap.load(tmp_path / "fabric.json")
    receiver_port = fabric.link_of_iface(fabric.egress_iface("lf1", f"h{SENDERS + 1}"))
    assert (receiver_port.queue_bytes, receiver_port.queue_packets) == (QUEUE_BYTES, None)
    q = pd.read_csv(tmp_path / "queues.csv")
    port = q[q.iface == receiver_port.iface]
    assert len(port) > 10, "the sampler did not read the bfifo"
    drops = port["drops"].iloc[-1] - port["drops"].iloc[0]
    assert drops > 0, "8 x 64 KiB into a 15 kB buffer must overflow it"
    # a bfifo admits a frame only while backlog + frame <= limit; the brief's "+ one
    # frame" would allow a queue that lets one frame past the limit: it never needed to
    assert q["backlog_bytes"].max() <= QUEUE_BYTES, q["backlog_bytes"].max()
    # and the backlog column is this bfifo's bytes: a sample that caught the queue
    # non-empty shows at least one whole frame. How full a 10 ms sample catches a queue
    # that drains a frame every 0.12 ms is chance (runs saw 15,140, 13,626 and 6,056
    # bytes: a half-the-limit floor failed CI once); the drops above already say the limit
    # was reached. Backlog read in packets (at most 10 here) or from another, idle qdisc
    # fails this
    assert port["backlog_bytes"].max() >= MAX_FRAME, port["backlog_bytes"].max()
    build_report(tmp_path, plots=False)  # no figures: no test here reads them
    rec = json.loads((tmp_path / "metrics.json").read_text())["reconciliation"]
    tc, lost = rec["tc_drops"], rec["capture_losses"]
    assert tc >= drops
    assert tc <= TC_PER_LOSS_MAX * lost + SLACK, rec
    # from below only where the datapath kept up (the run's fidelity verdict): a busy
    # ovs-vswitchd also loses packets before any queue, which no tc counter sees
    if kept_up(tmp_path):
        assert tc >= lost / OVS_BATCH_MAX, rec
    assert rec["capture_drops"] == 0, "tcpdump itself lost packets: captures untrustworthy"
