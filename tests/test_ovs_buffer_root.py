"""Root tier for Open vSwitch's send buffer (incastlab.ovs_buffer): with the userspace
datapath every switch queue is charged to one socket of ovs-vswitchd, and with the
kernel's default buffer (212,992 bytes, about 92 full-size frames for the whole fabric)
no queue ever held more than that while sends past it were dropped uncounted. With the
buffer scripts/install.sh sets, a queue fills to its own limit."""
from __future__ import annotations

import pandas as pd
import pytest

from incastlab import ovs_buffer
from incastlab.topologies.fabricmap import FabricMap
from tests.rootnet import run_complete

pytestmark = pytest.mark.root
QUEUE_PACKETS = 300
SENDERS = 8
# what the kernel's default buffer held, for all queues together
DEFAULT_BUFFER_FRAMES = 212_992 // ovs_buffer.packet_charge(1514)  # 92


def test_a_deep_queue_fills_past_the_default_send_buffer(tmp_path):
    manifest = run_complete(tmp_path, [
        "topology.kind=star", "topology.host_bw_mbps=100",
        f"topology.queue_packets={QUEUE_PACKETS}", "routing.policy=single",
        "workload.kind=incast", f"workload.senders={SENDERS}", "workload.block_bytes=262144",
        "workload.rounds=6", "workload.rto_min_ms=1"])
    if manifest["datapath"] != "user":
        pytest.skip("kernel datapath: no ovs-vswitchd packet socket in the path")
    fabric = FabricMap.load(tmp_path / "fabric.json")
    receiver = fabric.egress_iface("lf1", f"h{SENDERS + 1}")
    q = pd.read_csv(tmp_path / "queues.csv")
    port = q[q.iface == receiver]
    assert len(port) > 10, "the sampler did not read the receiver's queue"
    # 8 x 256 KiB (about 1,450 frames) arrive at once at a 300-packet queue each round: it
    # fills to its limit and drops. The sampler reads every 10 ms while the queue drains
    # 8 frames a millisecond, so a sample sees the peak only approximately; twice the
    # default buffer's whole-fabric budget is far below the limit and impossible with it
    assert port["backlog_pkts"].max() > 2 * DEFAULT_BUFFER_FRAMES, \
        port["backlog_pkts"].max()
    assert port["backlog_pkts"].max() <= QUEUE_PACKETS
    assert port["drops"].max() > 0, "the queue never overflowed"
    buffer = manifest["ovs_send_buffer"]  # and the run recorded what made that possible
    assert buffer["source"] == "ovs-vswitchd's packet socket", buffer
    assert buffer["bytes"] >= buffer["needed"] > 0, buffer
    # the ports' receive sockets: the buffer scripts/install.sh sets
    assert manifest["ovs_receive_buffer"] >= ovs_buffer.INSTALL_RECEIVE_BYTES
