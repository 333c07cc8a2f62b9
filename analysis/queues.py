"""Switch egress queues (queues.csv) and fabric balance (port_stats.csv / queues.csv).

Counters in both files are cumulative as `tc -s qdisc` / OpenFlow report them. An
increase is the sum of positive steps; a step down means the counter was reset (qdisc
replaced, switch restarted) and the new value counts as the increase for that step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from incastlab.topologies.fabricmap import SPINE_DOWNLINK, UPLINK, FabricMap


def counter_increase(values) -> float:
    """Total increase of a cumulative counter sampled over time, allowing resets."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if len(v) < 2:
        return 0.0
    d = np.diff(v)
    return float(np.where(d >= 0, d, v[1:]).sum())


def _steps(v: np.ndarray) -> np.ndarray:
    d = np.diff(v, prepend=v[:1])
    return np.where(d >= 0, d, v)


def queue_deltas(queues: pd.DataFrame) -> pd.DataFrame:
    """queues.csv with per-sample increases: d_drops, d_sent_bytes, d_sent_pkts, dt (s)."""
    if queues.empty:
        return queues.assign(d_drops=[], d_sent_bytes=[], d_sent_pkts=[], dt=[])
    parts = []
    for _, g in queues.groupby("iface", sort=True):
        g = g.sort_values("t", kind="stable").copy()
        for col in ("drops", "sent_bytes", "sent_pkts"):
            g["d_" + col] = _steps(g[col].to_numpy(dtype=float)) if col in g else 0.0
        g["dt"] = g["t"].diff().fillna(0.0)
        parts.append(g)
    return pd.concat(parts, ignore_index=True)


def queue_summary(queues: pd.DataFrame, fabric: FabricMap | None = None) -> pd.DataFrame:
    """Per egress port: drops, sent bytes/packets (increase over the run), backlog.

    Columns: iface, switch, port, peer, kind, drops (packets), sent_bytes, sent_pkts,
    max_backlog_pkts, mean_backlog_pkts, limit_pkts (queue limit if known), samples,
    t_first, t_last. peer, kind (fabricmap's Egress.kind: 'host-downlink' leaf -> host,
    'uplink' leaf -> spine, 'spine-downlink' spine -> leaf) and limit_pkts come from the
    fabric map, None without one. Sorted by drops, then max backlog, descending.
    The backlog in bytes too (tc reports both): max_backlog_bytes, mean_backlog_bytes;
    limit_bytes is the queue's byte limit (``topology.queue_bytes``) and limit_unit the
    unit its limit was configured in ('packets' or 'bytes'; None without a map). With a
    byte limit, limit_pkts is None.
    """
    cols = ["iface", "switch", "port", "peer", "kind", "drops", "sent_bytes", "sent_pkts",
            "max_backlog_pkts", "mean_backlog_pkts", "limit_pkts", "samples", "t_first",
            "t_last", "max_backlog_bytes", "mean_backlog_bytes", "limit_bytes", "limit_unit"]
    if queues.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for iface, g in queues.groupby("iface", sort=True):
        e = fabric.link_of_iface(iface) if fabric else None
        rows.append({"iface": iface, "switch": g["switch"].iloc[0] if "switch" in g else "",
                     "port": g["port"].iloc[0] if "port" in g else None,
                     "peer": e.peer if e else None, "kind": e.kind if e else None,
                     "drops": counter_increase(g["drops"]),
                     "sent_bytes": counter_increase(g["sent_bytes"]),
                     "sent_pkts": counter_increase(g["sent_pkts"]) if "sent_pkts" in g else np.nan,
                     "max_backlog_pkts": float(g["backlog_pkts"].max()),
                     "mean_backlog_pkts": float(g["backlog_pkts"].mean()),
                     "limit_pkts": e.queue_packets if e else None, "samples": len(g),
                     "t_first": float(g["t"].min()), "t_last": float(g["t"].max()),
                     "max_backlog_bytes": float(g["backlog_bytes"].max())
                     if "backlog_bytes" in g else np.nan,
                     "mean_backlog_bytes": float(g["backlog_bytes"].mean())
                     if "backlog_bytes" in g else np.nan,
                     "limit_bytes": e.queue_bytes if e else None,
                     "limit_unit": e.queue_unit if e else None})
    return (pd.DataFrame(rows, columns=cols)
            .sort_values(["drops", "max_backlog_pkts"], ascending=False, kind="stable")
            .reset_index(drop=True))


def spine_links(fabric: FabricMap | None) -> pd.DataFrame:
    """Leaf<->spine link directions: iface (egress), switch, peer, spine, leaf, direction
    ('up' leaf->spine or 'down' spine->leaf), rate_mbps."""
    rows = []
    for e in fabric.egresses() if fabric else []:
        if e.kind == UPLINK:
            rows.append({"iface": e.iface, "switch": e.node, "peer": e.peer,
                         "spine": e.peer, "leaf": e.node, "direction": "up",
                         "rate_mbps": e.bw_mbps})
        elif e.kind == SPINE_DOWNLINK:
            rows.append({"iface": e.iface, "switch": e.node, "peer": e.peer,
                         "spine": e.node, "leaf": e.peer, "direction": "down",
                         "rate_mbps": e.bw_mbps})
    return pd.DataFrame(rows, columns=["iface", "switch", "peer", "spine", "leaf", "direction",
                                       "rate_mbps"])


def _port_stats_as_queues(port_stats: pd.DataFrame) -> pd.DataFrame:
    """port_stats.csv rows mapped to the queues.csv shape (iface, t, sent_bytes)."""
    ps = port_stats.copy()
    ps["iface"] = ps["switch"].astype(str) + "-eth" + ps["port"].astype(str)
    ps["sent_bytes"] = ps["tx_bytes"]
    return ps[["t", "iface", "sent_bytes"]]


def fabric_balance(fabric: FabricMap | None, queues: pd.DataFrame,
                   port_stats: pd.DataFrame | None = None) -> tuple[pd.DataFrame, dict]:
    """Bytes carried per spine link direction and how evenly (max/mean) they are spread.

    Uses queues.csv sent_bytes; where a link is missing there, port_stats.csv tx_bytes.
    Returns (per_link, summary) with per_link columns iface, spine, leaf, direction,
    bytes, mean_mbps, rate_mbps, utilisation (mean_mbps / rate) and summary {'max_mean_up',
    'max_mean_down', 'max_mean_all', 'per_spine_bytes', 'source'}.
    """
    links = spine_links(fabric)
    if links.empty:
        return links.assign(bytes=[], mean_mbps=[], utilisation=[]), {
            "note": "no leaf-spine links in fabric.json (single switch or no fabric.json)"}
    src = queues[["t", "iface", "sent_bytes"]] if not queues.empty else pd.DataFrame(
        columns=["t", "iface", "sent_bytes"])
    if port_stats is not None and not port_stats.empty:
        extra = _port_stats_as_queues(port_stats)
        extra = extra[~extra["iface"].isin(set(src["iface"]))]
        src = pd.concat([src, extra], ignore_index=True)
    rows = []
    for link in links.itertuples(index=False):
        g = src[src["iface"] == link.iface].sort_values("t")
        b = counter_increase(g["sent_bytes"]) if len(g) else np.nan
        span = float(g["t"].max() - g["t"].min()) if len(g) > 1 else np.nan
        mbps = b * 8 / span / 1e6 if span and span > 0 else np.nan
        rows.append({**link._asdict(), "bytes": b, "mean_mbps": mbps,
                     "utilisation": mbps / link.rate_mbps if link.rate_mbps else np.nan})
    per = pd.DataFrame(rows)

    def ratio(sel):
        v = per.loc[sel, "bytes"].dropna()
        return float(v.max() / v.mean()) if len(v) and v.mean() > 0 else None

    summary = {"max_mean_up": ratio(per["direction"] == "up"),
               "max_mean_down": ratio(per["direction"] == "down"),
               "max_mean_all": ratio(per["bytes"].notna()),
               "per_spine_bytes": {k: float(v) for k, v in
                                   per.groupby("spine")["bytes"].sum().items()},
               "source": "queues.csv sent_bytes, port_stats.csv tx_bytes where missing"}
    return per, summary


def link_utilisation(queues: pd.DataFrame, ifaces, rates: dict | None = None,
                     bin_s: float | None = None) -> pd.DataFrame:
    """Mean Mbit/s (and fraction of capacity when `rates` gives Mbit/s) per iface per
    time bin, from queues.csv sent_bytes.

    Bins (default: span/150, at least 0.1 s) smooth out the burstiness with which tc's
    byte counters advance between 10 ms samples. Columns: t (bin start), iface, mbps,
    utilisation.
    """
    cols = ["t", "iface", "mbps", "utilisation"]
    sel = queues[queues["iface"].isin(list(ifaces))] if not queues.empty else queues
    if sel is None or sel.empty:
        return pd.DataFrame(columns=cols)
    d = queue_deltas(sel)
    t0, t1 = float(d["t"].min()), float(d["t"].max())
    if bin_s is None:
        bin_s = max((t1 - t0) / 150, 0.1)
    edges = np.arange(t0, t1 + bin_s, bin_s)
    if len(edges) < 2:
        return pd.DataFrame(columns=cols)
    rates = rates or {}
    frames = []
    for iface, g in d.groupby("iface"):
        # a sample's increase happened during the interval that ends at its time
        b, _ = np.histogram(g["t"], bins=edges, weights=g["d_sent_bytes"])
        mbps = b * 8 / bin_s / 1e6
        rate = rates.get(iface)
        frames.append(pd.DataFrame({"t": edges[:-1], "iface": iface, "mbps": mbps,
                                    "utilisation": mbps / rate if rate else np.nan}))
    out = pd.concat(frames, ignore_index=True)
    out.attrs["bin_s"] = bin_s
    return out


def path_ports(fabric: FabricMap | None, src_host: str, dst_host: str,
               spine: str | None = None) -> list[str]:
    """Egress ports a packet from src_host to dst_host can cross, in order.

    Same leaf: [leaf->dst]. Otherwise [src leaf->spine, spine->dst leaf, dst leaf->dst]
    for the given spine (a name), or for every spine in index order when it is not known.
    """
    if fabric is None or fabric.host(src_host) is None or fabric.host(dst_host) is None:
        return []
    sl, dl = fabric.leaf_of(src_host), fabric.leaf_of(dst_host)
    last = fabric.egress_iface(dl, dst_host)
    if sl == dl:
        return [p for p in [last] if p]
    out = []
    for sp in ([spine] if spine else fabric.spine_names):
        out += [fabric.egress_iface(sl, sp), fabric.egress_iface(sp, dl)]
    return [p for p in out + [last] if p]
