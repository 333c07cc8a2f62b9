"""Synthetic captures and run directories whose true answer is known.

Used by the tests (and handy for trying the report without Mininet): `TcpScript`
writes a sender-side and a receiver-side pcap of one TCP connection in which the
caller places each loss, retransmission, duplicate ACK and reordering by hand;
`make_run_dir` writes a complete small run directory around such captures.
`write_tcp_pcap` writes packets given as columns, vectorised, and `make_bulk_run` a run
of any number of packets with it (the memory tests and benchmarks/analysis_memory.py).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from incastlab.topologies import naming, runformat as rf
from incastlab.topologies.fabricmap import FabricMap, Host, Link, Switch

MSS = 1000


class TcpScript:
    """A scripted TCP connection seen at two capture points (sender, receiver).

    Times are seconds relative to `t0`; `delay` is the one-way time between the two
    capture points. Sequence numbers passed to `data` are relative (0 = first byte).
    """

    def __init__(self, src="10.0.0.1", dst="10.0.0.2", sport=40000, dport=5001,
                 isn=1000, risn=5000, t0=1_700_000_000.0, delay=0.0005):
        self.src, self.dst, self.sport, self.dport = src, dst, sport, dport
        self.isn, self.risn, self.t0, self.delay = isn, risn, t0, delay
        self.sender: list = []    # (t, packet)
        self.receiver: list = []
        self._ipid = 100
        self._ripid = 9000

    def _s(self, rel):
        """Absolute 32-bit sequence number of relative byte `rel`."""
        return (self.isn + 1 + rel) & 0xFFFFFFFF

    def _fwd(self, t, flags, seq, ack, payload=b"", options=()):
        self._ipid += 1
        return IP(src=self.src, dst=self.dst, id=self._ipid, flags="DF") / TCP(
            sport=self.sport, dport=self.dport, flags=flags, seq=seq, ack=ack,
            options=list(options) or [("NOP", None), ("NOP", None),
                                      ("Timestamp", (int(t * 1000) & 0xFFFFFFFF, 0))]
        ) / payload

    def _rev(self, t, flags, seq, ack, options=()):
        self._ripid += 1
        return IP(src=self.dst, dst=self.src, id=self._ripid, flags="DF") / TCP(
            sport=self.dport, dport=self.sport, flags=flags, seq=seq, ack=ack,
            options=list(options) or [("NOP", None), ("NOP", None),
                                      ("Timestamp", (int(t * 1000) & 0xFFFFFFFF, 0))])

    def handshake(self, t):
        """SYN, SYN/ACK, ACK starting at t."""
        d = self.delay
        syn = IP(src=self.src, dst=self.dst, id=1) / TCP(
            sport=self.sport, dport=self.dport, flags="S", seq=self.isn,
            options=[("MSS", 1460), ("SAckOK", b""), ("Timestamp", (1, 0)),
                     ("NOP", None), ("WScale", 7)])
        self.sender.append((t, syn))
        self.receiver.append((t + d, syn))
        sa = IP(src=self.dst, dst=self.src, id=2) / TCP(
            sport=self.dport, dport=self.sport, flags="SA", seq=self.risn,
            ack=self._s(0), options=[("MSS", 1460), ("SAckOK", b"")])
        self.receiver.append((t + d + 0.0001, sa))
        self.sender.append((t + 2 * d + 0.0001, sa))
        ack = self._fwd(t, "A", self._s(0), self.risn + 1)
        self.sender.append((t + 2 * d + 0.0002, ack))
        self.receiver.append((t + 3 * d + 0.0002, ack))

    def data(self, t, seq, length=MSS, lost=False, arrive=None):
        """Send bytes [seq, seq+length) at t; `lost` drops it between the captures;
        `arrive` overrides the arrival time at the receiver side (reordering)."""
        pkt = self._fwd(t, "PA", self._s(seq), self.risn + 1, b"x" * length)
        self.sender.append((t, pkt))
        if not lost:
            self.receiver.append((t + self.delay if arrive is None else arrive, pkt))

    def ack(self, t, acked, sack=None, lost=False):
        """Receiver ACKs up to relative byte `acked` at t (receiver side time);
        `sack` = list of (left, right) relative blocks."""
        opts = [("NOP", None), ("NOP", None), ("Timestamp", (int(t * 1000), 0))]
        if sack:
            opts += [("NOP", None), ("NOP", None),
                     ("SAck", tuple(self._s(x) for blk in sack for x in blk))]
        pkt = self._rev(t, "A", self.risn + 1, self._s(acked), options=opts)
        self.receiver.append((t, pkt))
        if not lost:
            self.sender.append((t + self.delay, pkt))

    def fin(self, t, seq):
        pkt = self._fwd(t, "FA", self._s(seq), self.risn + 1)
        self.sender.append((t, pkt))
        self.receiver.append((t + self.delay, pkt))

    def write(self, sender_path, receiver_path, **kw):
        """Write both captures (time-ordered), Ethernet-framed."""
        write_pcap(sender_path, self.sender, self.t0, **kw)
        write_pcap(receiver_path, self.receiver, self.t0, **kw)


def write_pcap(path, timed_packets, t0=0.0, nano=False, endianness="<", snaplen=65535,
               vlan=None, ethernet=True):
    """Write (t, scapy IP packet) pairs, sorted by t, to a classic pcap at `path`.

    Written by hand (not by Scapy) so that byte order, nanosecond magic, snap-length
    truncation and VLAN tags are exactly what the caller asked for. `ethernet=False`
    writes link type 101 (raw IP).
    """
    from scapy.layers.l2 import Dot1Q
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(endianness + "IHHiIII", magic, 2, 4, 0, 0, snaplen,
                       1 if ethernet else 101)]
    for t, pkt in sorted(timed_packets, key=lambda x: x[0]):
        if ethernet:
            eth = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02")
            frame = eth / Dot1Q(vlan=vlan) / pkt if vlan is not None else eth / pkt
        else:
            frame = pkt
        raw = bytes(frame)
        ts = t0 + t
        sec = int(ts // 1)
        frac = int(round((ts - sec) * (1e9 if nano else 1e6)))
        if frac >= (10**9 if nano else 10**6):
            sec, frac = sec + 1, 0
        cap = raw[:snaplen]
        out.append(struct.pack(endianness + "IIII", sec, frac, len(cap), len(raw)) + cap)
    Path(path).write_bytes(b"".join(out))


def make_run_dir(run_dir, *, status="complete", reason="", pcaps=None, queues=None,
                 counters=None, workers=None, fabric=None, spec_text=None,
                 port_stats=None, flow_paths=None, t0=0.0) -> Path:
    """Write a run directory from plain Python data (all parts optional).

    pcaps: {iface: TcpScript side list [(t, pkt)]} written with times t0 + t; queues: list of
    dict rows for queues.csv; counters: {host: (before_dict, after_dict)} written as
    nstat JSON; workers: {rank: [event dicts]}; fabric: a FabricMap (written with its
    own save(), as a run writes it); spec_text: TOML text.
    """
    import pandas as pd
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"format_version": rf.FORMAT_VERSION, "status": status, "reason": reason,
                "start": t0 or 1_700_000_000.0, "end": (t0 or 1_700_000_000.0) + 1.0,
                "kernel": "6.1.0-test", "datapath": "user", "netem": False,
                "congestion_control": "cubic", "capture_drops": {}, "cpu": {}}
    (run_dir / rf.MANIFEST).write_text(json.dumps(manifest, indent=2))
    (run_dir / rf.SPEC).write_text(spec_text or 'name = "synthetic"\n[workload]\n'
                                       'kind = "ps"\nmode = "sync"\nworkers = 2\n')
    if pcaps:
        (run_dir / rf.PCAP_DIR).mkdir(exist_ok=True)
        for iface, side in pcaps.items():
            write_pcap(run_dir / rf.PCAP_DIR / f"{iface}.pcap", side, t0)
    if queues is not None:
        pd.DataFrame(queues).to_csv(run_dir / rf.QUEUES.name, index=False)
    if port_stats is not None:
        pd.DataFrame(port_stats).to_csv(run_dir / rf.PORT_STATS.name, index=False)
    if flow_paths is not None:
        pd.DataFrame(flow_paths).to_csv(run_dir / rf.FLOW_PATHS.name, index=False)
    if counters:
        (run_dir / rf.COUNTERS_DIR).mkdir(exist_ok=True)
        for host, snapshots in counters.items():
            for phase, values in zip(rf.COUNTER_PHASES, snapshots, strict=True):
                (run_dir / rf.COUNTERS_DIR / rf.counters_file(host, phase)).write_text(
                    json.dumps({"kernel": values}))
    if workers:
        (run_dir / rf.WORKERS_DIR).mkdir(exist_ok=True)
        for rank, events in workers.items():
            (run_dir / rf.WORKERS_DIR / rf.worker_log(rank)).write_text(
                "".join(json.dumps(e) + "\n" for e in events))
    if fabric is not None:
        fabric.save(run_dir / rf.FABRIC)
    return run_dir


def scenario_tcp(t0=1_700_000_000.0, **kw) -> tuple[TcpScript, dict]:
    """One connection with every event kind placed by hand; returns (script, truth).

    Placed (MSS 1000, times relative to t0):
      - segment 3000 lost; 3 duplicate ACKs (with SACK) -> 1 fast retransmit
      - segments 7000/8000 reordered on the way (1 duplicate ACK, no retransmission)
      - tail segment 10000 lost, flow silent -> 1 RTO retransmission after 210 ms
      - tail segment 11000 lost -> 1 tail-loss probe after 20 ms
      - segment 12000 delivered but its ACK lost -> 1 spurious RTO retransmission
      - segment 13000 captured twice at the sender (same IP id): not a retransmission
    """
    s = TcpScript(t0=t0, **kw)
    d = s.delay
    s.handshake(0.0)
    for k in range(7):  # segments 0..6, seg 3 lost
        s.data(0.010 + k * 0.001, k * MSS, lost=(k == 3))
    for k in range(7):
        if k == 3:
            continue
        t = 0.010 + k * 0.001 + d + 0.0001
        if k < 3:
            s.ack(t, (k + 1) * MSS)
        else:
            s.ack(t, 3 * MSS, sack=[(4 * MSS, (k + 1) * MSS)])
    s.data(0.0175, 3 * MSS)                     # fast retransmit after the 3rd dup ACK
    s.ack(0.0175 + d + 0.0001, 7 * MSS)
    s.data(0.030, 7 * MSS, arrive=0.0322)       # reordered: arrives after seg 8
    s.data(0.031, 8 * MSS, arrive=0.0315)
    s.ack(0.0316, 7 * MSS, sack=[(8 * MSS, 9 * MSS)])
    s.ack(0.0323, 9 * MSS)
    s.data(0.050, 9 * MSS)
    s.data(0.051, 10 * MSS, lost=True)          # tail loss
    s.ack(0.050 + d + 0.0001, 10 * MSS)
    last = 0.050 + 2 * d + 0.0001
    s.data(last + 0.210, 10 * MSS)              # RTO
    s.ack(last + 0.210 + d + 0.0001, 11 * MSS)
    s.data(0.300, 11 * MSS, lost=True)
    s.data(0.320, 11 * MSS)                     # tail-loss probe
    s.ack(0.320 + d + 0.0001, 12 * MSS)
    s.data(0.400, 12 * MSS)
    s.ack(0.400 + d + 0.0001, 13 * MSS, lost=True)  # ACK lost: the next RTO is spurious
    s.data(0.650, 12 * MSS)
    s.ack(0.650 + d + 0.0001, 13 * MSS, sack=[(12 * MSS, 13 * MSS)])  # D-SACK
    s.data(0.700, 13 * MSS)
    s.sender.append((0.70001, s.sender[-1][1]))  # capture duplicate (same IP id)
    s.ack(0.700 + d + 0.0001, 14 * MSS)
    s.fin(0.800, 14 * MSS)
    s.ack(0.800 + d + 0.0001, 14 * MSS + 1)
    truth = {"retrans": 4, "fast": 1, "rto": 2, "tlp": 1, "other": 0, "rto_events": 2,
             "losses": 3, "lost_seqs": [3 * MSS, 10 * MSS, 11 * MSS], "spurious": 1,
             "bytes": 14 * MSS, "sender_data_packets": 19}
    return s, truth


def demo_fabric(spines=2, leaves=2, hosts_per_leaf=2, rate_mbps=10.0,
                queue_packets=20) -> FabricMap:
    """The fabric map `topologies.leafspine.fabric_map` writes for
    LeafSpineTopo(spines, leaves, hosts_per_leaf, host_bw=rate_mbps, fabric_bw=rate_mbps,
    queue_packets=queue_packets), built without Mininet (the analysis never imports it);
    a unit test checks the two are equal."""
    sw = [Switch(naming.leaf_name(i), "leaf", i, naming.leaf_dpid(i))
          for i in range(1, leaves + 1)]
    sw += [Switch(naming.spine_name(j), "spine", j, naming.spine_dpid(j))
           for j in range(1, spines + 1)]
    hosts, links, uplinks = [], [], []  # Mininet lists host links first
    for i in range(1, leaves + 1):
        leaf = naming.leaf_name(i)
        for k in range(1, hosts_per_leaf + 1):
            h = naming.host_name(i, k, hosts_per_leaf)
            port = naming.leaf_host_port(k)
            hosts.append(Host(h, i, k, naming.host_ip(i, k), naming.host_mac(i, k), port,
                              naming.intf_name(h, 0)))
            links.append(Link(h, 0, leaf, port, naming.intf_name(h, 0),
                              naming.intf_name(leaf, port), rate_mbps, queue_packets))
        for j in range(1, spines + 1):
            spine = naming.spine_name(j)
            up, down = naming.leaf_uplink_port(j, hosts_per_leaf), naming.spine_downlink_port(i)
            uplinks.append(Link(leaf, up, spine, down, naming.intf_name(leaf, up),
                                naming.intf_name(spine, down), rate_mbps, queue_packets))
    return FabricMap(kind="LeafSpineTopo", spines=spines, leaves=leaves,
                     hosts_per_leaf=hosts_per_leaf, host_bw_mbps=float(rate_mbps),
                     fabric_bw_mbps=float(rate_mbps), queue_packets=queue_packets, delay=None,
                     subnet=naming.SUBNET, switches=tuple(sw), hosts=tuple(hosts),
                     links=tuple(links + uplinks))


def make_demo_run(run_dir, status="complete", reason="", t0=1_700_000_000.0) -> dict:
    """A small parameter-server run (h1, h2 -> h3 across a 2x2 leaf-spine) with known
    truth; returns the truth dict (see the tests)."""
    a, truth = scenario_tcp(t0=t0, src="10.0.1.1", dst="10.0.2.1", sport=40000, dport=29500)
    b = TcpScript(src="10.0.1.2", dst="10.0.2.1", sport=40001, dport=29500, t0=t0)
    b.handshake(0.001)
    for k in range(20):
        b.data(0.010 + k * 0.0015, k * MSS)
        b.ack(0.010 + k * 0.0015 + b.delay + 0.0001, (k + 1) * MSS)
    b.fin(0.045, 20 * MSS)
    fabric = demo_fabric()
    ifaces = [f"lf{i}-eth{p}" for i in (1, 2) for p in (1, 2, 3, 4)] + \
        [f"sp{j}-eth{i}" for j in (1, 2) for i in (1, 2)]
    loss_times = [0.013, 0.051, 0.300]
    full = {1, 2, 5, 6, 30, 31}      # samples (10 ms apart) where lf2-eth1 is full
    rows, drops, sent = [], dict.fromkeys(ifaces, 0), dict.fromkeys(ifaces, 0)
    for k in range(91):
        t = k * 0.01
        for iface in ifaces:
            backlog = 0
            if iface == "lf2-eth1":
                backlog = 20 if k in full else 2
                drops[iface] += 2 * sum(1 for lt in loss_times if t - 0.01 < lt <= t)
                sent[iface] += 12_000
            elif iface in ("lf1-eth3", "sp1-eth2"):
                sent[iface] += 9_000
            elif iface in ("lf1-eth4", "sp2-eth2"):
                sent[iface] += 3_000
            rows.append({"t": t0 + t, "switch": iface.split("-")[0],
                         "port": int(iface.split("eth")[1]), "iface": iface,
                         "backlog_bytes": backlog * 1500, "backlog_pkts": backlog,
                         "drops": drops[iface], "overlimits": 0, "sent_bytes": sent[iface],
                         "sent_pkts": sent[iface] // 1000, "requeues": 0})
    flow_paths = [{"t": t0, "src_ip": "10.0.1.1", "dst_ip": "10.0.2.1", "proto": 6,
                   "src_port": 40000, "dst_port": 29500, "spine": "sp1", "policy": "ecmp"},
                  {"t": t0, "src_ip": "10.0.1.2", "dst_ip": "10.0.2.1", "proto": 6,
                   "src_port": 40001, "dst_port": 29500, "spine": "sp2", "policy": "ecmp"}]
    zero = {"TcpRetransSegs": 0, "TcpExtTCPTimeouts": 0, "TcpExtTCPLossProbes": 0}
    counters = {"h1": ({"TcpRetransSegs": 10, "TcpExtTCPTimeouts": 1, "TcpExtTCPLossProbes": 0},
                       {"TcpRetransSegs": 15, "TcpExtTCPTimeouts": 3, "TcpExtTCPLossProbes": 1}),
                "h2": (zero, zero), "h3": (zero, zero)}
    bounds = [0.0, 0.03, 0.27, 0.33, 0.66, 0.75, 0.85]
    workers = {0: [{"event": "start", "role": "server", "rank": 0, "world_size": 3,
                    "mode": "sync", "gradient_bytes": 40_000, "iface": "h3-eth0",
                    "host": "box", "t": t0}]}
    for rank, host in ((1, "h1"), (2, "h2")):
        ev = [{"event": "start", "role": "worker", "rank": rank, "world_size": 3,
               "mode": "sync", "param_count": 10_000, "gradient_bytes": 40_000,
               "host": "box", "iface": f"{host}-eth0", "t": t0}]
        for i in range(len(bounds) - 1):
            s, e = bounds[i], bounds[i + 1] - (0.0 if rank == 1 else 0.005)
            ev.append({"event": "iteration", "iteration": i, "t_start": t0 + s,
                       "t_end": t0 + e, "compute_s": 0.01, "comm_s": e - s - 0.01,
                       "wait_s": 0.0, "push_s": (e - s) / 2, "pull_s": (e - s) / 2 - 0.01,
                       "bytes_sent": 40_000, "bytes_recv": 40_000, "model_version": i,
                       "staleness": 0, "loss": 2.0 / (i + 1)})
        ev.append({"event": "final", "t": t0 + 0.9, "accuracy": 0.8, "loss": 0.3,
                   "iterations": len(bounds) - 1})
        workers[rank] = ev
    for i in range(len(bounds) - 1):
        workers[0].append({"event": "update", "version": i + 1, "t": t0 + bounds[i + 1],
                           "from_ranks": [1, 2], "staleness": [0, 0], "discarded": []})
    sender_h3 = a.receiver + b.receiver
    make_run_dir(run_dir, status=status, reason=reason,
                 pcaps={"h1-eth0": a.sender, "h2-eth0": b.sender, "h3-eth0": sender_h3},
                 queues=rows, counters=counters, workers=workers, fabric=fabric,
                 flow_paths=flow_paths, t0=t0)
    truth.update({"tc_drops": 6, "kernel_retrans": 5, "kernel_timeouts": 2, "flows": 2,
                  "episodes": 3, "incast_episodes": 1, "iterations_with_rto": 2,
                  "lost_port": "lf2-eth1"})
    return truth


# ---------------------------------------------------------------- many packets, fast

_RECORD = [("sec", "<u4"), ("frac", "<u4"), ("caplen", "<u4"), ("origlen", "<u4"),
           ("eth", "V12"), ("eth_type", ">u2"), ("vihl", "u1"), ("tos", "u1"),
           ("ip_len", ">u2"), ("ip_id", ">u2"), ("frag", ">u2"), ("ttl", "u1"),
           ("proto", "u1"), ("ip_sum", ">u2"), ("src", ">u4"), ("dst", ">u4"),
           ("sport", ">u2"), ("dport", ">u2"), ("seq", ">u4"), ("ack", ">u4"),
           ("doff", "u1"), ("flags", "u1"), ("win", ">u2"), ("tcp_sum", ">u2"),
           ("urg", ">u2")]
HEADERS = 54  # bytes of each record written by write_tcp_pcap: Ethernet, IPv4, TCP


def write_tcp_pcap(path, packets, t0=0.0, mode="wb") -> int:
    """Write TCP packets given as columns (a DataFrame or a dict of arrays: t seconds
    after `t0`, src and dst as uint32 addresses, sport, dport, seq, ack, flags,
    payload_len, ip_id) to a classic pcap at `path`, as `tcpdump -s 54` would capture
    them: headers only (no options), each record's original length counting its
    payload. Vectorised (millions of packets a second, where write_pcap's Scapy frames
    take a millisecond each); the rows are written in the order given. `mode="ab"`
    appends records to a file this function began. Returns the packets written."""
    n = len(packets["t"])
    rec = np.zeros(n, np.dtype(_RECORD))
    ts = np.round((t0 + np.asarray(packets["t"], float)) * 1e6).astype(np.int64)
    rec["sec"], rec["frac"] = ts // 1_000_000, ts % 1_000_000
    payload = np.asarray(packets["payload_len"], np.int64)
    rec["caplen"], rec["origlen"] = HEADERS, HEADERS + payload
    rec["eth"] = b"\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x01"
    rec["eth_type"], rec["vihl"], rec["frag"], rec["ttl"], rec["proto"] = \
        0x0800, 0x45, 0x4000, 64, 6
    rec["ip_len"] = 40 + payload
    rec["doff"], rec["win"] = 5 << 4, 65535
    for name in ("ip_id", "src", "dst", "sport", "dport", "seq", "ack", "flags"):
        rec[name] = np.asarray(packets[name]).astype(rec.dtype[name].newbyteorder("="))
    with open(path, mode) as fh:
        if mode == "wb":
            fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, HEADERS, 1))
        fh.write(rec.tobytes())
    return n


def bulk_flows(fabric, connections_per_pair=4, base_port=40000):
    """Flows for make_bulk_run: every host sends to the host `hosts_per_leaf` places
    on (a host on the next leaf), over `connections_per_pair` connections; rows (src
    host, dst host, sport, dport)."""
    hosts = list(fabric.hosts)
    out = []
    for i, h in enumerate(hosts):
        peer = hosts[(i + fabric.hosts_per_leaf) % len(hosts)]
        for c in range(connections_per_pair):
            out.append((h, peer, base_port + i * connections_per_pair + c, 29500 + c))
    return out


def make_bulk_run(run_dir, packets: int, *, leaves=4, hosts_per_leaf=4, spines=2,
                  connections_per_pair=4, gap_s=50e-6, seed=1, t0=1_700_000_000.0) -> dict:
    """A run directory of about `packets` captured TCP packets (a multiple of 4 x the
    flows): a leaf-spine fabric map and one capture per host interface. Each flow sends
    MSS-byte segments every `gap_s`, each captured at its sender's and its receiver's
    interface and ACKed once, the ACK captured at both; one-way delays vary (each way a FIFO queue
    with exponential service times, seeded: packets stay in order). No losses. Written one capture
    and one time window at a time, so memory stays small at any size. Returns {packets,
    flows, segments_per_flow, captures}."""
    from .pcap import ip_to_int
    run_dir = Path(run_dir)
    fabric = demo_fabric(spines, leaves, hosts_per_leaf, rate_mbps=1000.0)
    make_run_dir(run_dir, fabric=fabric, t0=t0)
    (run_dir / rf.PCAP_DIR).mkdir(exist_ok=True)
    flows = bulk_flows(fabric, connections_per_pair)
    segs = max(packets // (4 * len(flows)), 1)
    window = 200_000  # segments of each flow generated at once
    for h in fabric.hosts:
        path = run_dir / rf.PCAP_DIR / f"{h.intf}.pcap"
        mode = "wb"
        for k0 in range(0, segs, window):
            cols = [_bulk_side(f, j, h, k0, min(k0 + window, segs), gap_s, seed, ip_to_int)
                    for j, f in enumerate(flows) if h in (f[0], f[1])]
            merged = {c: np.concatenate([x[c] for x in cols]) for c in cols[0]}
            order = np.argsort(merged["t"], kind="stable")
            write_tcp_pcap(path, {c: v[order] for c, v in merged.items()}, t0, mode)
            mode = "ab"
    return {"packets": 4 * segs * len(flows), "flows": len(flows),
            "segments_per_flow": segs, "captures": len(fabric.hosts)}


def _fifo(rng, arrivals, mean_service_s):
    """When packets arriving at `arrivals` (ascending) leave a FIFO queue whose service
    times are exponential (mean `mean_service_s`): d_k = max(a_k, d_k-1) + s_k, in closed
    form (d_k = S_k + max_j<=k (a_j - S_j-1), S the running sum of service times), so
    they leave in the order they came, as a real queue keeps them."""
    service = rng.exponential(mean_service_s, len(arrivals))
    done = np.cumsum(service)
    return done + np.maximum.accumulate(arrivals - (done - service))


def _bulk_side(flow, j, host, k0, k1, gap_s, seed, ip_to_int) -> dict:
    """Flow `flow` (number j) seen at `host`'s interface, segments k0..k1-1: its data
    and ACKs (the sender's view or the receiver's)."""
    src, dst, sport, dport = flow
    k = np.arange(k0, k1, dtype=np.int64)
    rng = np.random.default_rng([seed, j, k0])
    base = 0.001 + (j % 97) * 1e-5 + k * gap_s
    arrive = 50e-6 + _fifo(rng, base, 0.9 * gap_s)           # at the receiver's capture
    acked = arrive + 20e-6                                   # the receiver's ACK
    back = 50e-6 + _fifo(rng, acked, 0.5 * gap_s)            # at the sender's capture
    at_sender = host == src
    t_data = base if at_sender else arrive
    t_ack = back if at_sender else acked
    isn, risn = 1000 + 7919 * j, 5000
    n = len(k)
    cat = np.concatenate
    return {"t": cat([t_data, t_ack]),
            "src": cat([np.full(n, ip_to_int(src.ip)), np.full(n, ip_to_int(dst.ip))]),
            "dst": cat([np.full(n, ip_to_int(dst.ip)), np.full(n, ip_to_int(src.ip))]),
            "sport": cat([np.full(n, sport), np.full(n, dport)]),
            "dport": cat([np.full(n, dport), np.full(n, sport)]),
            "seq": cat([(isn + 1 + k * MSS) % (1 << 32), np.full(n, risn + 1)]),
            "ack": cat([np.full(n, risn + 1), (isn + 1 + (k + 1) * MSS) % (1 << 32)]),
            "flags": cat([np.full(n, 0x18), np.full(n, 0x10)]),
            "payload_len": cat([np.full(n, MSS), np.zeros(n, np.int64)]),
            "ip_id": cat([(k + 1) % 65535 + 1, (k + 7) % 65535 + 1])}
