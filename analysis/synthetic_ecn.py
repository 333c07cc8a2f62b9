"""A synthetic run directory with ECN marks whose true counts are known (analysis.synthetic
writes the rest): two senders h1, h2 into h3 across demo_fabric's 2x2 leaf-spine, both
flows marked at h3's port lf2-eth1 and h1's also upstream at sp1-eth2, the receiver's
capture, ecn.csv and the hosts' nstat counters. The defaults agree everywhere; the
keyword arguments make one source disagree.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from scapy.layers.inet import IP, TCP

from incastlab.topologies import runformat as rf

from .synthetic import demo_fabric, make_run_dir

__all__ = ["make_ecn_run"]

SENDERS = {"h1": ("10.0.1.1", 40000), "h2": ("10.0.1.2", 40001)}
RECEIVER, RECEIVER_IP, PORT = "h3", "10.0.2.1", 29500
MSS = 1000


def _flow(t0: float, src: str, sport: int, ce: set[int], n: int, start: float,
          unacked: frozenset = frozenset()) -> list:
    """The receiver's view of one flow: SYN / SYN-ACK (ECN negotiated: ECE + CWR, ECE),
    n data packets ECT(0) (CE where in ``ce``), each ACKed but those in ``unacked`` (the
    next ACK covers them too), ECE on the ACK of a CE one (an exact echo), CWR on the
    data packet after the first CE."""
    out = [(start, IP(src=src, dst=RECEIVER_IP, tos=0, id=1) / TCP(
        sport=sport, dport=PORT, flags="SEC", seq=100)),
        (start + 1e-4, IP(src=RECEIVER_IP, dst=src, id=2) / TCP(
            sport=PORT, dport=sport, flags="SAE", seq=500, ack=101))]
    first_ce = min(ce) if ce else None
    for i in range(n):
        t = start + 0.001 * (i + 1)
        flags = "PAC" if first_ce is not None and i == first_ce + 1 else "PA"
        out.append((t, IP(src=src, dst=RECEIVER_IP, tos=3 if i in ce else 2, id=10 + i)
                    / TCP(sport=sport, dport=PORT, flags=flags, seq=101 + i * MSS, ack=501)
                    / (b"x" * MSS)))
        if i in unacked:
            continue
        out.append((t + 1e-4, IP(src=RECEIVER_IP, dst=src, tos=2, id=100 + i) / TCP(
            sport=PORT, dport=sport, flags="AE" if i in ce else "A", seq=501,
            ack=101 + (i + 1) * MSS)))
    return out


def _ecn_rows(t0: float, totals: dict[str, tuple[int, int]]) -> list[dict]:
    """ecn.csv: every port of the fabric sampled at 0.2 and 0.6 s, half its totals then."""
    rows = []
    for t, part in ((0.2, 0.5), (0.6, 1.0)):
        for iface in totals:
            marks, ce_arrived = totals[iface]
            sw, _, port = iface.partition("-eth")
            rows.append({"t": t0 + t, "switch": sw, "port": int(port), "iface": iface,
                         "in_pkts": 0, "in_bytes": 0, "out_pkts": 0, "out_bytes": 0,
                         "marks": int(marks * part), "ce_arrived": int(ce_arrived * part),
                         "not_ect_over": 0, "full": 0})
    return rows


def _queue_rows(t0: float) -> list[dict]:
    """queues.csv: lf2-eth1 (h3's port) and sp1-eth2 every 5 ms over 0-60 ms, a standing
    queue of 20-25 packets at lf2-eth1 from 10 ms."""
    rows = []
    for k in range(13):
        for iface, backlog in (("lf2-eth1", 20 + k % 6 if k >= 2 else 0), ("sp1-eth2", 2)):
            sw, _, port = iface.partition("-eth")
            rows.append({"t": t0 + 0.005 * k, "switch": sw, "port": int(port), "iface": iface,
                         "backlog_bytes": backlog * 1066, "backlog_pkts": backlog, "drops": 0,
                         "overlimits": 0, "sent_bytes": 3_000 * k, "sent_pkts": 3 * k,
                         "requeues": 0})
    return rows


def make_ecn_run(run_dir, *, t0: float = 1_700_000_000.0, kernel_in_ce: int | None = None,
                 delivered: dict[str, int] | None = None, drop_capture: int = 0,
                 capture_lost: int = 0, congestion: str = "dctcp",
                 mixed_ack: bool = False) -> dict:
    """Write the run; return its truth. h1's flow: 20 packets, 4 marked upstream at
    sp1-eth2, 6 at lf2-eth1; h2's: 20 packets, 4 marked at lf2-eth1. So the ports marked
    14, lf2-eth1 forwarded 14 CE (10 + 4 arrived), h3's kernel took in 14 (or
    ``kernel_in_ce``), the senders' DeliveredCE are 10 and 4 (or ``delivered``). The
    capture leaves out its last ``drop_capture`` CE packets and says it lost
    ``capture_lost``. ``mixed_ack``: h2's packet 4 (not CE) is ACKed only with packet 5
    (CE), by an ACK with ECE, so that ACK delivers 2 packets, 1 of them CE."""
    ce = {"h1": set(range(2, 12)), "h2": {5, 6, 7, 8}}
    pkts = []
    for k, (host, (ip, sport)) in enumerate(SENDERS.items()):
        pkts += _flow(t0, ip, sport, ce[host], 20, 0.01 + k * 0.0005,
                      frozenset({4}) if mixed_ack and host == "h2" else frozenset())
    pkts.sort(key=lambda p: p[0])
    cut = [i for i, (_, p) in enumerate(pkts) if p[IP].dst == RECEIVER_IP and p[IP].tos == 3]
    gone = set(cut[len(cut) - drop_capture:]) if drop_capture else set()
    pkts = [p for i, p in enumerate(pkts) if i not in gone]
    fabric = demo_fabric()
    ports = dict.fromkeys(fabric.switch_egress_ifaces(), (0, 0))
    ports.update({"sp1-eth2": (4, 0), "lf2-eth1": (10, 4)})
    in_ce = 14 if kernel_in_ce is None else kernel_in_ce
    delivered = delivered or {"h1": 10, "h2": 4}
    zero = {"IpExtInCEPkts": 0, "TcpExtTCPDeliveredCE": 0}
    counters = {h: (zero, {"IpExtInCEPkts": in_ce if h == RECEIVER else 0,
                           "TcpExtTCPDeliveredCE": delivered.get(h, 0)})
                for h in ("h1", "h2", "h3", "h4")}
    run_dir = make_run_dir(run_dir, pcaps={"h3-eth0": pkts}, counters=counters,
                           fabric=fabric, queues=_queue_rows(t0), t0=t0)
    pd.DataFrame(_ecn_rows(t0, ports)).to_csv(Path(run_dir) / rf.ECN_COUNTERS.name,
                                              index=False)
    mpath = Path(run_dir) / rf.MANIFEST
    manifest = json.loads(mpath.read_text())
    manifest.update(ecn={"threshold": 20, "unit": "packets", "marker": "bpf (synthetic)",
                         "tcp_ecn": 1, "ports": sorted(ports)},
                    congestion={"spec_name": congestion, "kernel_name": congestion},
                    capture_drops={"h3-eth0": {"dropped_by_kernel": capture_lost,
                                               "dropped_by_interface": 0}})
    mpath.write_text(json.dumps(manifest, indent=2))
    ce_times = sorted(t0 + t for t, p in pkts if p[IP].dst == RECEIVER_IP and p[IP].tos == 3)
    return {"marks": 14, "ce_times": ce_times, "kernel_in_ce": in_ce,
            "captured_ce": 14 - drop_capture, "delivered": delivered,
            "ece": {"h1": 10, "h2": 4}, "cwr": {"h1": 1, "h2": 1}}
