"""ECN per flow, from the receivers' own captures (docs/ecn.md): for every connection
direction that arrives at a captured host, the CE-marked packets it brought, the CWR its
sender set, and the ECE the host echoed back on that connection.

A host's capture (``pcap/<host intf>.pcap``) sees both directions of its connections:
the packets arriving (their IPv4 ECN field as the last switch port left it, and the
sender's CWR) and the ACKs it sends (ECE: the receiver echoing the marks). SYNs are left
out of ECE/CWR: a SYN carries ECE + CWR and a SYN-ACK ECE to negotiate ECN (RFC 3168
section 6.1.1), not to echo a mark.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import pcap

__all__ = ["COLUMNS", "ce_arrivals", "flow_ecn", "run_flows"]

COLUMNS = ["sender", "receiver", "src", "sport", "dst", "dport", "capture", "packets",
           "data_packets", "ect", "ce", "cwr", "ece", "acks_back", "ece_delivered",
           "mixed_acks"]
_KEY = ["src", "sport", "dst", "dport"]


def ece_delivered(seq, length, ce, ack, ece) -> tuple[int, int]:
    """What a sender's TCPDeliveredCE counts, from one connection direction as its
    receiver captured it: the data segments and the FIN (``seq``, ``length`` in sequence
    numbers, ``ce`` per packet, in capture order) newly acknowledged by each ACK
    (``ack``, ``ece`` per ACK back, in capture order) that carries ECE, and the ACKs
    whose ECE does not match what they delivered (an ECE ACK that also delivered a
    packet not CE, or one without ECE that delivered a CE one). Cumulative ACKs only: a
    segment a SACK delivered first is counted here at the cumulative ACK that covers
    it. Pure."""
    seq, length = np.asarray(seq, dtype=np.int64), np.asarray(length, dtype=np.int64)
    ack, ece = np.asarray(ack, dtype=np.int64), np.asarray(ece, dtype=bool)
    if not len(seq) or not len(ack):
        return 0, 0
    base = int(seq[0])
    rel = (seq + length - base) & 0xFFFFFFFF
    ends, first = np.unique(rel, return_index=True)
    ce_cum = np.concatenate([[0], np.cumsum(np.asarray(ce, dtype=bool)[first])])
    a = (ack - base) & 0xFFFFFFFF
    a = np.where(a >= 1 << 31, 0, a)  # before the first data byte
    idx = np.searchsorted(ends, np.maximum.accumulate(a), side="right")
    prev = np.concatenate([[0], idx[:-1]])
    new, new_ce = idx - prev, ce_cum[idx] - ce_cum[prev]
    mixed = (new > 0) & ((ece & (new_ce < new)) | (~ece & (new_ce > 0)))
    return int(new[ece].sum()), int(mixed.sum())


def _delivered(ip: pd.DataFrame, inbound, outbound, not_syn) -> pd.DataFrame:
    """ece_delivered per connection direction arriving at the host (keyed as flow_ecn)."""
    cols = ["src", "sport", "dst", "dport", "seq", "payload_len", "ecn", "ack", "flags"]
    fin = (ip["flags"].to_numpy().astype(np.int64) & pcap.FIN) != 0
    # a FIN takes a sequence number and is delivered like data (measured: a classic-ECN
    # run's last ACK, still with ECE, delivered the sender's FIN: DeliveredCE + 1)
    data = ip.loc[inbound & ((ip["payload_len"].to_numpy() > 0) | fin), cols]
    back = ip.loc[outbound & not_syn, cols]
    acks = {k: g for k, g in back.groupby(["dst", "dport", "src", "sport"], sort=False)}
    rows = []
    for k, g in data.groupby(_KEY, sort=False):
        b = acks.get(k)
        seg_len = g["payload_len"].to_numpy() + (
            (g["flags"].to_numpy().astype(np.int64) & pcap.FIN) != 0)
        got = (0, 0) if b is None else ece_delivered(
            g["seq"], seg_len, g["ecn"].to_numpy() == pcap.ECN_CE, b["ack"],
            (b["flags"].to_numpy().astype(np.int64) & pcap.ECE) != 0)
        rows.append((*k, *got))
    return pd.DataFrame(rows, columns=[*_KEY, "ece_delivered", "mixed_acks"]).set_index(_KEY)


def flow_ecn(packets: pd.DataFrame, host_ip: int) -> pd.DataFrame:
    """One row per TCP connection direction arriving at ``host_ip`` (src, sport, dst,
    dport as captured): packets and data packets in, ECT and CE among them, CWR on the
    sender's non-SYN segments, and ECE on the non-SYN segments the host sent back on the
    same connection (``acks_back`` of them in all), and what those ACKs delivered
    (`ece_delivered`). Pure; columns COLUMNS[2:] less capture."""
    cols = ["src", "sport", "dst", "dport", "packets", "data_packets", "ect", "ce", "cwr",
            "ece", "acks_back", "ece_delivered", "mixed_acks"]
    ip = packets[(packets["ethertype"] == 0x0800) & packets["hdr_ok"] & (packets["proto"] == 6)]
    if ip.empty:
        return pd.DataFrame(columns=cols)
    flags = ip["flags"].to_numpy().astype(np.int64)
    not_syn = (flags & pcap.SYN) == 0
    ecn = ip["ecn"].to_numpy()
    inbound = ip["dst"].to_numpy() == host_ip
    outbound = ip["src"].to_numpy() == host_ip
    key = _KEY
    fwd = pd.DataFrame({"src": ip["src"].to_numpy(), "sport": ip["sport"].to_numpy(),
                        "dst": ip["dst"].to_numpy(), "dport": ip["dport"].to_numpy(),
                        "packets": 1, "data_packets": (ip["payload_len"].to_numpy() > 0),
                        "ect": (ecn == 1) | (ecn == 2), "ce": ecn == pcap.ECN_CE,
                        "cwr": not_syn & ((flags & pcap.CWR) != 0)})[inbound]
    back = pd.DataFrame({"src": ip["dst"].to_numpy(), "sport": ip["dport"].to_numpy(),
                         "dst": ip["src"].to_numpy(), "dport": ip["sport"].to_numpy(),
                         "ece": not_syn & ((flags & pcap.ECE) != 0),
                         "acks_back": not_syn})[outbound]
    f = fwd.groupby(key, sort=True).sum(numeric_only=False)
    b = back.groupby(key, sort=True).sum(numeric_only=False)
    d = _delivered(ip, inbound, outbound, not_syn)
    out = f.join(b, how="left").join(d, how="left").fillna(0).reset_index()
    counted = ["packets", "data_packets", "ect", "ce", "cwr", "ece", "acks_back",
               "ece_delivered", "mixed_acks"]
    return out.astype({c: np.int64 for c in counted})[cols]


def ce_arrivals(packets: pd.DataFrame, host_ip: int) -> np.ndarray:
    """Capture times (epoch s) of the CE-marked IPv4 packets arriving at ``host_ip``,
    sorted (pure)."""
    ip = packets[(packets["ethertype"] == 0x0800) & packets["hdr_ok"]]
    ce = (ip["ecn"].to_numpy() == pcap.ECN_CE) & (ip["dst"].to_numpy() == host_ip)
    return np.sort(ip["t"].to_numpy(float)[ce])


def _facing_port(fabric, host: str) -> str | None:
    """The switch egress port whose peer is ``host`` (the last queue before it)."""
    return next((e.iface for e in fabric.egresses() if e.peer == host), None)


def run_flows(run_dir, fabric) -> tuple[pd.DataFrame, pd.DataFrame]:
    """COLUMNS for every host whose own capture is in the run directory (src/dst as
    dotted quads, sender/receiver by the fabric's hosts, the address when unknown), and
    the CE packets' arrival times there: columns t, port (the switch port in front of
    the host), receiver. Each capture is read once."""
    frames, times = [], []
    pcap_dir = Path(run_dir) / "pcap"
    by_ip = {pcap.ip_to_int(h.ip): h.name for h in fabric.hosts} if fabric else {}
    for host in fabric.hosts if fabric else ():
        path = pcap_dir / f"{host.intf}.pcap"
        if not path.exists():
            continue
        packets = pcap.read_pcap(path)
        ts = ce_arrivals(packets, pcap.ip_to_int(host.ip))
        times.append(pd.DataFrame({"t": ts, "port": _facing_port(fabric, host.name),
                                   "receiver": host.name}))
        df = flow_ecn(packets, pcap.ip_to_int(host.ip))
        del packets
        if df.empty:
            continue
        df.insert(0, "capture", host.intf)
        df.insert(0, "receiver", host.name)
        df.insert(0, "sender", [by_ip.get(int(s), pcap.ip_to_str(int(s))) for s in df["src"]])
        df["src"] = [pcap.ip_to_str(int(s)) for s in df["src"]]
        df["dst"] = [pcap.ip_to_str(int(s)) for s in df["dst"]]
        frames.append(df)
    ce = pd.concat(times, ignore_index=True) if times else \
        pd.DataFrame(columns=["t", "port", "receiver"])
    if not frames:
        return pd.DataFrame(columns=COLUMNS), ce
    return pd.concat(frames, ignore_index=True)[COLUMNS], ce
