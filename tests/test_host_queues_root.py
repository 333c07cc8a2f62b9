"""Root tier for the hosts' flow-fair egress (topologies/links.py): per-connection FIFOs
picked by the flow hash, checked on real fabrics the way a user would check them.

- The kernel's classifier puts each connection where `flow_slot` says, a connection's
  data leaves in order, and the classes are what keeps a host's ACKs out of the queue of
  its own bulk: with the two connections in different slots the ACK turnaround is short,
  with the same two connections forced into one slot it is the old single FIFO's.
- Wireshark's TCP analysis (tshark) of a real ring run's host captures counts the
  retransmissions the kernel counted (issue 13: with a pure-ACK class served first it
  flagged ~2,650 against the kernel's 50).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import numpy as np
import pytest

from incastlab.analysis.pcap import ip_to_int, read_pcap
from incastlab.capture.cpu import CpuMonitor
from incastlab.fabric import Fabric
from incastlab.iperf import result as iperf3_result
from incastlab.iperf import start_client, start_server
from incastlab.topologies.fabricmap import FabricMap
from incastlab.topologies.leafspine import LeafSpineTopo
from incastlab.topologies.links import flow_classid, flow_slot
from tests.rootnet import free_port, overtaken_segments, relative_seq, run_complete

pytestmark = pytest.mark.root
RATE_MBPS = 20


def _ports(h1: str, h3: str, same: bool, base: int) -> tuple[int, int]:
    """Client ports for h1 -> h3:5201 (h1's data) and h3 -> h1:5202 (h1 sends only its
    ACKs) whose two connections land in different slots of h1's egress, or in one.
    (A new ``base`` per measurement: a port of the last one may still be in TIME_WAIT.)"""
    p1 = base
    s1 = flow_slot(h1, h3, p1, 5201)
    p2 = next(p for p in range(base + 1, base + 5000)
              if (flow_slot(h3, h1, p, 5202) == s1) == same)
    return p1, p2


def _ack_turnaround(tcp, me: int, peer: int) -> np.ndarray:
    """Seconds from each full data segment ``peer`` sent to ``me`` arriving at ``me``'s
    interface to the first pure ACK leaving it that covers the segment."""
    data_in = tcp[(tcp.src == peer) & (tcp.dst == me) & (tcp.payload_len > 1000)]
    # a segment's first arrival only: a second copy (a retransmission of what had arrived)
    # may find the ACK that covers it already sent (a CI run: -25 ms), no turnaround at all
    data_in = data_in.drop_duplicates(["sport", "dport", "seq"], keep="first")
    acks = tcp[(tcp.src == me) & (tcp.payload_len == 0) & ((tcp["flags"] & 0x17) == 0x10)]
    out = []
    for (sport, dport), flow in data_in.groupby(["sport", "dport"]):
        back = acks[(acks.sport == dport) & (acks.dport == sport)]
        if back.empty:
            continue
        base = int(flow.seq.iloc[0])
        covered = np.maximum.accumulate(relative_seq(back.ack.values, base))
        i = np.searchsorted(covered, relative_seq(flow.seq.values, base)
                            + flow.payload_len.values)
        ok = i < len(back)
        out.extend(back.t.values[i[ok]] - flow.t.values[ok])
    return np.asarray(out)


def _bidir(fab, tmp_path, name: str, p1: int, p2: int) -> dict:
    """h1 -> h3 and h3 -> h1 bulk at once (two iperf3 pairs, client ports p1 and p2),
    captured at h1-eth0; returns the capture's TCP rows, tc's class counters and rates."""
    from incastlab.capture.pcap import start_captures

    # a fresh qdisc (zero counters) for this measurement
    fab.net["h1"].cmd("tc qdisc del dev h1-eth0 root")
    fab.net["h1"].intf("h1-eth0").apply_queue()
    (cap,) = start_captures(fab, ["h1-eth0"], tmp_path / name, snaplen=96)
    try:
        srv1 = start_server(fab, "h3", 5201)
        srv2 = start_server(fab, "h1", 5202)
        c1 = start_client(fab, "h1", "h3", 4, 5201, ["--cport", str(p1)])
        c2 = start_client(fab, "h3", "h1", 4, 5202, ["--cport", str(p2)])
        r1, r2 = iperf3_result(c1, timeout=30), iperf3_result(c2, timeout=30)
        for srv in (srv1, srv2):
            srv.wait(timeout=10)
        # iperf3 ends on its timer with data still queued: let the host's queue drain
        # and the connections close before the capture stops, so it and tc see it all
        time.sleep(1.0)
    finally:
        capture = cap.stop()
    classes = fab.net["h1"].cmd("tc -s class show dev h1-eth0")
    sent = {m.group(1): int(m.group(2)) for m in re.finditer(
        r"class htb (1:[0-9a-f]+) .*?\n Sent \d+ bytes (\d+) pkt", classes)}
    df = read_pcap(tmp_path / name / "h1-eth0.pcap", cache=False)
    assert capture["dropped_by_kernel"] == 0, capture  # the counts below need every packet
    rates = [r["end"]["sum_received"]["bits_per_second"] / 1e6 for r in (r1, r2)]
    return {"tcp": df[(df.proto == 6) & df.hdr_ok], "sent": sent, "rates": rates}


def test_flow_classes_keep_connections_in_order_and_acks_apart(tmp_path):
    """h1 sends bulk to h3 while h3 sends bulk to h1: h1's egress carries its data on
    one connection and its ACKs on the other."""
    with Fabric(LeafSpineTopo(2, 2, 2, host_bw=RATE_MBPS), run_dir=tmp_path,
                controller_port=free_port()) as fab:
        h1, h3 = fab.net["h1"].IP(), fab.net["h3"].IP()
        with CpuMonitor() as cpu:  # whether the machine kept up (see the turnaround below)
            apart = _bidir(fab, tmp_path, "apart", *_ports(h1, h3, same=False, base=41000))
            shared = _bidir(fab, tmp_path, "shared", *_ports(h1, h3, same=True, base=46000))
    me, peer = ip_to_int(h1), ip_to_int(h3)
    for run in (apart, shared):
        # both directions near the link rate (each iperf3 counts its own slow start, and
        # h1's link carries the other direction's ACKs too: ~18 Mbit/s of 20 seen)
        assert min(run["rates"]) >= 0.8 * RATE_MBPS, (apart["rates"], shared["rates"])
        out = run["tcp"][run["tcp"].src == me]
        # the kernel's classifier agrees with flow_slot on every connection h1 sent on
        expected = out.groupby(["sport", "dport"]).size()
        by_slot: dict[str, int] = {}
        for (sport, dport), n in expected.items():
            cid = flow_classid(flow_slot(h1, h3, sport, dport))
            by_slot[cid] = by_slot.get(cid, 0) + n
        for cid, n in by_slot.items():
            # tc also counts what left before the capture started and after it stopped
            # (iperf3's control exchange, the FINs): a few packets
            assert n <= run["sent"].get(cid, 0) <= n + 20, (cid, n, run["sent"])
        busy = {c for c, n in run["sent"].items() if n > 100 and c != "1:1"}
        assert busy <= set(by_slot), (busy, by_slot)
        assert overtaken_segments(out) == 0, "a data segment overtook an earlier one"
    assert len([c for c, n in apart["sent"].items() if n > 1000 and c != "1:1"]) == 2
    assert len([c for c, n in shared["sent"].items() if n > 1000 and c != "1:1"]) == 1
    fast = _ack_turnaround(apart["tcp"], me, peer)
    slow = _ack_turnaround(shared["tcp"], me, peer)
    assert len(fast) > 1000 and len(slow) > 1000 and min(fast) >= 0 and min(slow) >= 0
    # apart: an ACK waits for its delayed-ACK partner (at most a frame time, 0.6 ms at
    # 20 Mbit/s) and at most the skb of the other class being sent (gso_segments = 2
    # frames, 1.2 ms) plus scheduling; in one FIFO it waits behind all of h1's queued
    # bulk, which TCP small queues keep at a few skbs (medians seen: 1.47 vs 3.0 ms; 1.7
    # vs 4.5 ms before; 1.15 vs 1.8 ms with one-segment skbs), so at least half a frame
    # time more. "Plus scheduling": the receive processing and HTB's watchdog run in
    # softirqs, which a saturated machine defers to ksoftirqd, a thread that waits for a
    # CPU like any other: both medians then grow by that wait (1.86 vs 3.33 ms seen with
    # other tests running beside). Their difference is the classes' doing and is held
    # always; the 2.5 ms ceiling (the 1.8 ms above and 0.7 ms of scheduling) only where
    # the machine kept up
    frame_s = 1514 * 8 / (RATE_MBPS * 1e6)
    load = cpu.summary()
    if not load["saturated"]:
        assert np.median(fast) < 0.0025, (f"median ACK turnaround {np.median(fast):.4f} s",
                                          load)
    assert np.median(slow) > np.median(fast) + frame_s / 2, (np.median(slow), np.median(fast))
    print(f"machine busy {load['mean_busy'] or 0:.2f}, saturated {load['saturated']};"
          " ACK turnaround percentiles (10/50/90, ms): apart",
          np.percentile(fast, [10, 50, 90]).round(4) * 1e3, "shared",
          np.percentile(slow, [10, 50, 90]).round(4) * 1e3)


def _tshark_count(pcap, display_filter: str) -> int:
    """Packets of one capture that match a Wireshark display filter."""
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", display_filter,
                          "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, timeout=300, check=True)
    return len(out.stdout.split())


def test_wireshark_counts_the_retransmissions_the_kernel_counts(tmp_path):
    """A 4-rank ring (every rank sends and receives at once, gloo's small messages go
    both ways): per host, what Wireshark's TCP analysis finds resent among the segments
    the host sent equals the host kernel's TcpRetransSegs within a few percent, and no
    host's capture shows a data segment that overtook an earlier one.

    "Resent" is tcp.analysis.retransmission (fast and spurious ones included) plus
    tcp.analysis.out_of_order: Wireshark calls a segment below the highest sequence
    number out-of-order instead of retransmitted when it left within the handshake's RTT
    of new data — how a sender's own capture shows a fast retransmit sent amid new data.
    At the sender's own interface nothing else can be out of order (overtaken == 0 is
    checked), so both are the sender's retransmissions."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (scripts/install.sh installs it)")
    run_complete(tmp_path, [
        "topology.spines=2", "topology.leaves=2", "topology.hosts_per_leaf=2",
        "topology.host_bw_mbps=50", "topology.fabric_bw_mbps=150",
        "topology.queue_packets=20", "workload.kind=ring", "workload.workers=4",
        "workload.model_size=1000000", "workload.iterations=5", "routing.policy=ecmp"])
    fabric = FabricMap.load(tmp_path / "fabric.json")
    rows = []
    for host in fabric.hosts:
        pcap = tmp_path / "pcap" / f"{host.intf}.pcap"
        counters = [json.loads((tmp_path / "counters" / f"{host.name}.{phase}.json")
                               .read_text())["kernel"] for phase in ("before", "after")]
        # less the SYN and SYN-ACK retransmissions the kernel counts too (no payload:
        # not in tshark's count below)
        data_retrans = [c["TcpRetransSegs"] - c.get("TcpExtTCPSynRetrans", 0) for c in counters]
        kernel = data_retrans[1] - data_retrans[0]
        mine = f"ip.src == {host.ip} && tcp.len > 0"
        retrans = _tshark_count(pcap, f"{mine} && tcp.analysis.retransmission")
        ooo = _tshark_count(pcap, f"{mine} && tcp.analysis.out_of_order"
                                  " && !tcp.analysis.retransmission")
        df = read_pcap(pcap, cache=False)
        sent = df[(df.proto == 6) & df.hdr_ok & (df.src == ip_to_int(host.ip))]
        rows.append((host.name, kernel, retrans, ooo, overtaken_segments(sent), len(sent)))
    print("host, kernel TcpRetransSegs, tshark retransmission, tshark out_of_order, "
          "overtaken, segments sent:", rows)
    assert sum(r[5] for r in rows) > 4 * 5000, rows  # every rank moved its share
    for name, kernel, retrans, ooo, overtaken, _n in rows:
        assert overtaken == 0, (name, rows)
        # a few percent, plus a couple of segments for what the capture window cuts off
        assert abs(retrans + ooo - kernel) <= 0.05 * kernel + 3, (name, rows)
    total_k, total_w = sum(r[1] for r in rows), sum(r[2] + r[3] for r in rows)
    assert abs(total_w - total_k) <= 0.05 * total_k + 5, rows
