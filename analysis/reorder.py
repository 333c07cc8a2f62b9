"""Reordering at the receiver, from the captures, beside the kernel's counters.

A flow sprayed over several spines (policies spray and flowlet,
docs/routing-below-the-flow.md) reaches its receiver out of order. At the receiver's
capture of a flow, data packets in arrival order:

- **reordered**: the packet arrives after one its sender sent later. The send order is
  the IPv4 identification: Linux numbers a connected TCP socket's packets one by one
  (``ip_select_ident_segs``), retransmissions included, so an original that arrives
  below the highest sequence seen has an IP ID below the highest seen, while a
  retransmission that fills a hole does not (it was sent after everything before it).
  RFC 4737's measures, with the IP ID as the source sequence number: the packet's
  **displacement** is how many packets arrived between the first one that overtook
  it and itself, that one included (its reordering extent), and **late_s** how long
  after that one it arrived (seconds).
- **below_highest**: the packet starts below the highest sequence byte already seen:
  what the receiving TCP sees out of order (reordered originals and retransmissions).
- **duplicate**: every byte of it had already arrived (a spurious retransmission);
  the receiver answers each with a D-SACK (RFC 2883), which the receiving host counts
  as ``TcpExtTCPDSACKOldSent`` (below what it had acknowledged) or
  ``TcpExtTCPDSACKOfoSent`` (inside out-of-order data), and the sender as
  ``TcpExtTCPDSACKRecv``.

Pure functions on the capture table (analysis.pcap's columns); ``reorder_table``
lays the kernel's counters beside each host's flows.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .rundir import host_by_ip
from .tcp import _unwrap, data_flows, flow_name, flow_packets

_TWO15, _TWO16 = 1 << 15, 1 << 16
PACKET_COLUMNS = ["t", "seq", "end", "ip_id", "reordered", "displacement", "late_s",
                  "below_highest", "duplicate"]
FLOW_COLUMNS = ["flow", "sender", "receiver", "receiver_iface", "data_packets", "reordered",
                "reordered_fraction", "max_displacement", "mean_displacement",
                "max_late_s", "below_highest", "duplicates"]
# the kernel's reordering and D-SACK counters (name -> which end counts what)
RECEIVER_COUNTERS = ("TcpExtTCPDSACKOldSent", "TcpExtTCPDSACKOfoSent", "TcpExtTCPOFOQueue")
SENDER_COUNTERS = ("TcpExtTCPDSACKRecv", "TcpExtTCPSACKReorder", "TcpExtTCPTSReorder",
                   "TcpExtTCPRenoReorder")


def _unwrap16(ids: np.ndarray) -> np.ndarray:
    """16-bit IP IDs in arrival order made monotonic where the sender's counter wrapped
    (each step taken as the nearest one modulo 2**16)."""
    if len(ids) == 0:
        return ids.astype(np.int64)
    d = ((np.diff(ids.astype(np.int64)) + _TWO15) % _TWO16) - _TWO15
    return np.concatenate([[0], np.cumsum(d)]) + int(ids[0])


def _covered(start: int, end: int, have: list[tuple[int, int]]) -> bool:
    """[start, end) lies inside the union of the sorted disjoint ranges ``have``."""
    for a, b in have:
        if a <= start < b:
            return end <= b
    return False


def _add_range(have: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    out, s, e = [], start, end
    for a, b in have:
        if b < s or a > e:
            out.append((a, b))
        else:
            s, e = min(s, a), max(e, b)
    out.append((s, e))
    return sorted(out)


def packet_reordering(rx: pd.DataFrame, base: int | None = None) -> pd.DataFrame:
    """Per data packet of one flow at one capture (rows of the capture table; any order,
    taken in capture order): PACKET_COLUMNS. ``seq``/``end`` are relative to ``base``
    (default: the first data packet's sequence number); ``displacement`` (packets) and
    ``late_s`` (s) are 0 for a packet not reordered. Capture duplicates (the same IP ID
    twice in a row of this flow) count once."""
    data = rx[rx["payload_len"] > 0].sort_values("t", kind="stable")
    if data.empty:
        return pd.DataFrame(columns=PACKET_COLUMNS)
    ids = _unwrap16(data["ip_id"].to_numpy())
    keep = np.concatenate([[True], ~((np.diff(ids) == 0)
                                     & (np.diff(data["seq"].to_numpy().astype(np.int64)) == 0))])
    data, ids = data[keep], ids[keep]
    seq_base = int(data["seq"].iloc[0]) if base is None else base
    start = _unwrap(data["seq"].to_numpy(), seq_base)
    end = start + data["payload_len"].to_numpy().astype(np.int64)
    t = data["t"].to_numpy()
    n = len(data)
    highest_id = np.maximum.accumulate(ids)
    prior = np.concatenate([[ids[0]], highest_id[:-1]])  # highest ID before each arrival
    reordered = ids < prior
    # the first arrival that overtook it: where the running highest ID first exceeds its
    first = np.searchsorted(highest_id, ids, side="right")
    idx = np.arange(n)
    displacement = np.where(reordered, idx - first, 0)
    late = np.where(reordered, t - t[np.minimum(first, n - 1)], 0.0)
    highest_end = np.maximum.accumulate(end)
    below = np.concatenate([[False], start[1:] < highest_end[:-1]])
    dup = np.zeros(n, bool)
    have: list[tuple[int, int]] = []
    for i in range(n):
        s, e = int(start[i]), int(end[i])
        if not below[i] and have and have[-1][1] >= s:  # in order: extends the last range
            have[-1] = (have[-1][0], max(have[-1][1], e))
            continue
        dup[i] = below[i] and _covered(s, e, have)
        have = _add_range(have, s, e)
    return pd.DataFrame({"t": t, "seq": start, "end": end, "ip_id": ids,
                         "reordered": reordered, "displacement": displacement,
                         "late_s": late, "below_highest": below, "duplicate": dup})


def flow_reordering(tcp: pd.DataFrame, flows: pd.DataFrame | None = None,
                    names: dict[str, str] | None = None) -> pd.DataFrame:
    """FLOW_COLUMNS per directional data flow, at its receiver-side capture
    (tcp.data_flows); ``names``: {ip: host name} for the sender and receiver columns.
    A flow seen at one capture only has no receiver side: left out."""
    from .pcap import ip_to_str

    flows = data_flows(tcp) if flows is None else flows
    names = names or {}
    rows = []
    for f in flows.itertuples(index=False):
        if not isinstance(f.receiver_iface, str) or not f.receiver_iface:
            continue
        rx, _ = flow_packets(tcp, (f.src, f.dst, f.sport, f.dport), f.receiver_iface)
        p = packet_reordering(rx)
        late = p[p["reordered"]]
        src, dst = ip_to_str(f.src), ip_to_str(f.dst)
        rows.append({"flow": flow_name(f.src, f.dst, f.sport, f.dport),
                     "sender": names.get(src, src), "receiver": names.get(dst, dst),
                     "receiver_iface": f.receiver_iface, "data_packets": len(p),
                     "reordered": len(late),
                     "reordered_fraction": len(late) / len(p) if len(p) else np.nan,
                     "max_displacement": int(late["displacement"].max()) if len(late) else 0,
                     "mean_displacement": float(late["displacement"].mean())
                     if len(late) else 0.0,
                     "max_late_s": float(late["late_s"].max()) if len(late) else 0.0,
                     "below_highest": int(p["below_highest"].sum()),
                     "duplicates": int(p["duplicate"].sum())})
    return pd.DataFrame(rows, columns=FLOW_COLUMNS)


def reorder_table(per_flow: pd.DataFrame, counters: pd.DataFrame) -> pd.DataFrame:
    """Per host: the captures' reordered and duplicate packets of the flows it received
    and of those it sent, beside the kernel's counters (load_counters' delta; NaN when
    the host has none). ``dsack_sent`` (the receiver's OldSent + OfoSent) counts one
    D-SACK per duplicate segment it received: ``dsack_agrees`` compares the two on the
    host's captured flows (a host's counters also hold flows not captured)."""
    deltas = counters.pivot_table(index="host", columns="counter", values="delta",
                                  aggfunc="sum") if not counters.empty else pd.DataFrame()
    hosts = sorted(set(per_flow["sender"]) | set(per_flow["receiver"]))
    rows = []
    for h in hosts:
        got, sent = per_flow[per_flow["receiver"] == h], per_flow[per_flow["sender"] == h]

        def k(name, host=h):
            return float(deltas.at[host, name]) if host in deltas.index \
                and name in deltas.columns and pd.notna(deltas.at[host, name]) else np.nan

        dsack = k("TcpExtTCPDSACKOldSent") + k("TcpExtTCPDSACKOfoSent")
        rows.append({"host": h, "received_reordered": int(got["reordered"].sum()),
                     "received_duplicates": int(got["duplicates"].sum()),
                     "dsack_sent": dsack,
                     "dsack_agrees": bool(dsack == got["duplicates"].sum())
                     if pd.notna(dsack) else None,
                     "sent_reordered": int(sent["reordered"].sum()),
                     "sent_duplicates": int(sent["duplicates"].sum()),
                     **{name: k(name) for name in (*RECEIVER_COUNTERS[2:], *SENDER_COUNTERS)}})
    return pd.DataFrame(rows)


def run_reordering(tcp: pd.DataFrame, counters: pd.DataFrame, fabric=None
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(flow_reordering, reorder_table) of a run: its capture table, load_counters, and
    its fabric map for host names."""
    per_flow = flow_reordering(tcp, names=host_by_ip(fabric))
    return per_flow, reorder_table(per_flow, counters)
