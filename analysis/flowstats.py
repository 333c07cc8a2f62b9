"""Per-flow summaries and throughput over time at each flow's sender-side capture.

Built on `analysis.tcp`'s flows (its `data_flows`, `sender_flows`, `flow_packets`):
bytes, completion time and goodput per flow; payload Mbit/s per flow in time bins.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .tcp import data_flows, flow_packets, sender_flows


def flow_summary(tcp: pd.DataFrame, flows: pd.DataFrame | None = None,
                 retrans: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per flow at its sender-side capture: bytes, duration, goodput, completion time.

    Columns: flow, src, dst, sport, dport, sender_iface, receiver_iface, packets,
    bytes (unique payload bytes = highest sequence sent - first), wire_bytes (payload
    incl. retransmissions), retrans_packets, start (first SYN or data, s), last_data
    (s), fct_s (start -> ACK covering the last byte; NaN if not seen), duration_s
    (first to last data packet), goodput_mbps (bytes*8/duration, Mbit/s).
    """
    rows = []
    for f, fwd, _rev, (_base, data, rel, ln, acks, ack_rel) in sender_flows(tcp, flows):
        end = rel + ln
        top = int(end.max())
        t = data["t"].to_numpy()
        start = float(fwd["t"].iloc[0])
        at = acks["t"].to_numpy()
        covered = np.flatnonzero(ack_rel >= top)
        fct = float(at[covered[0]] - start) if len(covered) else np.nan
        dur = float(t[-1] - t[0])
        nre = int((retrans["flow"] == f.flow).sum()) if retrans is not None and len(retrans) else 0
        uniq = int(top - rel.min())
        rows.append({"flow": f.flow, "src": f.src, "dst": f.dst, "sport": f.sport,
                     "dport": f.dport, "sender_iface": f.sender_iface,
                     "receiver_iface": f.receiver_iface, "packets": int(len(data)),
                     "bytes": uniq, "wire_bytes": int(ln.sum()), "retrans_packets": nre,
                     "start": start, "last_data": float(t[-1]), "fct_s": fct,
                     "duration_s": dur,
                     "goodput_mbps": uniq * 8 / dur / 1e6 if dur > 0 else np.nan})
    return pd.DataFrame(rows)


def throughput_series(tcp: pd.DataFrame, flows: pd.DataFrame | None = None,
                      bin_s: float | None = None,
                      t_range: tuple[float, float] | None = None) -> pd.DataFrame:
    """Payload throughput per flow over time at the sender side, long format.

    Columns: t (bin start, s), flow, mbps (payload Mbit/s incl. retransmissions).
    `bin_s` defaults to span/200 rounded to 10 ms (at least 10 ms). The span is that of
    the data packets in `tcp`, or `t_range` (first, last data packet, s) when `tcp` holds
    only some of the run's connections (chunked.py), so that every part uses the same bins.
    """
    flows = data_flows(tcp) if flows is None else flows
    if flows.empty:
        return pd.DataFrame(columns=["t", "flow", "mbps"])
    if t_range is None:
        data = tcp[tcp["payload_len"] > 0]
        t0, t1 = float(data["t"].min()), float(data["t"].max())
    else:
        t0, t1 = (float(x) for x in t_range)
    if bin_s is None:
        bin_s = max(round((t1 - t0) / 200, 2), 0.01)
    edges = np.arange(t0, t1 + bin_s, bin_s)
    if len(edges) < 2:
        edges = np.array([t0, t0 + bin_s])
    if edges[-1] < t1:  # arange's float steps can stop just short of the last packet
        edges = np.append(edges, edges[-1] + bin_s)
    frames = []
    for f in flows.itertuples(index=False):
        fwd, _ = flow_packets(tcp, (f.src, f.dst, f.sport, f.dport), f.sender_iface)
        d = fwd[fwd["payload_len"] > 0]
        hist, _ = np.histogram(d["t"], bins=edges, weights=d["payload_len"])
        frames.append(pd.DataFrame({"t": edges[:-1], "flow": f.flow,
                                    "mbps": hist * 8 / bin_s / 1e6}))
    out = pd.concat(frames, ignore_index=True)
    out.attrs["bin_s"] = bin_s
    return out
