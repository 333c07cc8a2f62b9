"""Latency under load: RTT samples from the captures, queueing delay at the switch ports
and the measured sojourn between two capture points (Flent's first view: how long a
packet waits while the links are loaded).

RTT samples (`rtt_samples`)
    From each flow's SENDER-side capture (tcp.data_flows: the capture that saw its data
    first, the sending host's own interface when it was captured). One sample per ACK
    that covers bytes no earlier ACK covered, measured from the newest data segment it
    covers (as Wireshark's `tcp.analysis.ack_rtt` and tcptrace measure): so an ACK that
    covers two segments (a delayed ACK) gives one sample, from the second segment, and
    the first segment's wait for its partner at the receiver is not counted as network
    delay. Duplicate ACKs cover nothing new and give none. A SACK block that reaches
    above everything covered before counts as covering the segment that ends at its
    right edge (the receiver has it), as Linux's SACK RTT does.
    Karn's rule, as Linux applies it (tcp_clean_rtx_queue): no sample from an ACK whose
    cumulative ACK newly covers, from the previous one up to its edge, any byte that was
    transmitted twice, nor from a SACK edge whose segment was: neither a retransmitted
    segment nor an ACK that could be for a retransmission gives a sample. A packet the
    capture holds twice with the same IP id is one transmission.
    Sequence numbers are unwrapped (tcp._unwrap), so a flow crossing 2^32 is one flow.
    The capture sees a host's outgoing packets when its qdisc releases them, so a sample
    is what the wire saw: the path's queues and links both ways, the receiver's stack
    and ACK policy; not the time the data waited in the sender's own qdisc.

Queueing delay (`queue_delay`)
    queues.csv samples every switch egress queue every ~10 ms: delay = backlog bytes x 8
    / the port's configured rate (fabric.json), the time the last packet in the queue
    waits for those before it. Percentiles weight each sample by the packets the port
    sent in the interval that ends at it, so they describe what the packets crossing
    the port met; an idle port weighs nothing. The queue's limit bounds it: Q packets x
    1514 bytes (a full frame at MTU 1500) x 8 / rate, or a byte limit x 8 / rate
    (`port_bound_s`).

Sojourn (`sojourns`)
    A data packet captured at its sender's capture and again at a later capture point
    (a spine port, the receiving host) is matched on flow, sequence number, length and
    IP id (every transmission has its own IP id); the time between the two captures is
    its measured sojourn: the queues and links between the points. Packets with IP id 0
    are not matched (they could not be told apart).

Groups: RTT by flow role (the roles at the flow's two ends, as the manifest's processes
name them, e.g. "worker → server"; host names where a run has no roles), queueing delay
by port, sojourn by pair of capture points. All percentiles in ms. The report's latency stage (its
figure and section) is in latencyreport.py.
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from . import tcp
from .pcap import SYN, ip_to_str
from .samples import REL_ERROR, Dist, Samples, compact, groups

__all__ = ["FRAME_MAX_BYTES", "MAX_SOJOURN_S", "QDELAY_COLUMNS", "QUANTILES", "RTT_COLUMNS",
           "RTT_KEYS", "SOJOURN_COLUMNS", "SOJOURN_KEYS", "SOJOURN_ORDER",
           "SUMMARY_COLUMNS", "Samples", "analyse", "dist_quantiles", "flow_role",
           "flow_rtt", "host_roles",
           "port_bound_s", "queue_delay", "queue_delay_bound_s", "rtt_samples", "sojourns",
           "stats_ms", "summary", "summary_table", "weighted_quantiles", "write_full"]

RTT_COLUMNS = ["flow", "role", "src", "dst", "sport", "dport", "iface", "t", "t_ack",
               "rtt_s", "seq", "len", "ip_id", "sack"]
QDELAY_COLUMNS = ["t", "iface", "kind", "rate_mbps", "backlog_bytes", "delay_s", "weight"]
SOJOURN_COLUMNS = ["flow", "from_iface", "to_iface", "t", "sojourn_s", "seq", "len", "ip_id"]
RTT_KEYS = ["role", "flow"]                       # what the summary and figure group by
SOJOURN_KEYS = ["from_iface", "to_iface", "flow"]
SOJOURN_ORDER = ["t", "from_iface", "flow", "seq", "to_iface", "ip_id"]  # a total order
SUMMARY_COLUMNS = ["measure", "group", "samples", "p50_ms", "p90_ms", "p99_ms", "max_ms",
                   "note"]
QUANTILES = (0.5, 0.9, 0.99)
FRAME_MAX_BYTES = 1514   # largest Ethernet frame a switch queue holds (MTU 1500 + 14)
MAX_SOJOURN_S = 10.0     # a longer "sojourn" is a different packet with the same key
_NONE = np.iinfo(np.int64).min
_TWO32, _TWO31 = 1 << 32, 1 << 31


# ---------------------------------------------------------------- percentiles

def weighted_quantiles(values, weights=None, qs=QUANTILES) -> list[float]:
    """Quantiles of `values` where each counts `weights` times (None: once each): the
    smallest value with at least q of the total weight at or below it (NaN: no weight)."""
    v = np.asarray(values, dtype=float)
    if weights is None:
        return _quantiles(v, qs)
    w = np.asarray(weights, dtype=float)
    keep = np.isfinite(v) & (w > 0)
    v, w = v[keep], w[keep]
    if not len(v):
        return [float("nan")] * len(qs)
    order = np.argsort(v, kind="stable")
    v, cw = v[order], np.cumsum(w[order])
    total = cw[-1]
    # a small relative slack so that e.g. q = 0.5 of 2 equal weights picks the first
    idx = np.searchsorted(cw, np.asarray(qs) * total * (1 - 1e-12), "left")
    return [float(v[min(i, len(v) - 1)]) for i in idx]


def _quantiles(v: np.ndarray, qs) -> list[float]:
    """weighted_quantiles with every weight 1, without the sort and the cumulative weights
    (a run's millions of samples): the cumulative weight of the i-th smallest is i + 1, so
    the first index reaching x is ceil(x) - 1; np.partition finds those values exactly."""
    v = v[np.isfinite(v)]
    n = len(v)
    if not n:
        return [float("nan")] * len(qs)
    idx = [min(max(math.ceil(q * n * (1 - 1e-12)) - 1, 0), n - 1) for q in qs]
    part = np.partition(v, sorted(set(idx)))
    return [float(part[i]) for i in idx]


def dist_quantiles(d: Dist, qs=QUANTILES) -> list[float]:
    """Quantiles of a Dist (samples.py): exact ones of its values, or its sketch's,
    clamped to the samples' exact min and max (each within samples.REL_ERROR of the
    exact quantile, or samples.ZERO_S of 0)."""
    if d.exact:
        return _quantiles(np.asarray(d.values, dtype=float), qs)
    return [float(np.clip(x, d.lo, d.hi)) if x == x else x
            for x in weighted_quantiles(d.values, d.counts, qs)]


def stats_ms(values_s, weights=None) -> dict:
    """{samples, p50_ms, p90_ms, p99_ms, max_ms} of delays in seconds (an array with
    `weights`, or a Dist); samples counts those with weight > 0 (a Dist: its samples)."""
    if isinstance(values_s, Dist):
        if values_s.exact:
            values_s = values_s.values
        else:
            p50, p90, p99 = dist_quantiles(values_s)
            return {"samples": values_s.samples, "p50_ms": p50 * 1e3, "p90_ms": p90 * 1e3,
                    "p99_ms": p99 * 1e3, "max_ms": values_s.hi * 1e3}
    v = np.asarray(values_s, dtype=float)
    w = None if weights is None else np.asarray(weights, dtype=float)
    n = int(np.isfinite(v).sum()) if w is None else int((np.isfinite(v) & (w > 0)).sum())
    p50, p90, p99 = weighted_quantiles(v, w)
    live = np.isfinite(v) if w is None else np.isfinite(v) & (w > 0)
    mx = float(v[live].max()) if live.any() else float("nan")
    return {"samples": n, "p50_ms": p50 * 1e3, "p90_ms": p90 * 1e3, "p99_ms": p99 * 1e3,
            "max_ms": mx * 1e3}


# ---------------------------------------------------------------- RTT

def _signed32(x: np.ndarray) -> np.ndarray:
    return ((x.astype(np.int64) + _TWO31) % _TWO32) - _TWO31


def flow_rtt(fwd: pd.DataFrame, rev: pd.DataFrame) -> pd.DataFrame:
    """RTT samples of one flow from its packets at one capture point (`fwd`: the flow's
    own packets, `rev`: the other direction, each sorted by time; tcp.flow_packets).

    Columns: t (the sampled segment's capture time, s), t_ack (the ACK's), rtt_s, seq
    (relative), len, ip_id (the segment's), sack (the sample came from a SACK edge)."""
    cols = ["t", "t_ack", "rtt_s", "seq", "len", "ip_id", "sack"]
    if (fwd["payload_len"] > 0).sum() == 0:
        return pd.DataFrame(columns=cols)
    _base, data, rel, ln, acks, ack_rel = tcp.flow_state(fwd, rev)
    t = data["t"].to_numpy()
    ipid = data["ip_id"].to_numpy().astype(np.int64)
    # one transmission captured twice (same seq, length and IP id) counts once
    dup = pd.DataFrame({"r": rel, "l": ln, "i": ipid}).duplicated().to_numpy() & (ipid != 0)
    rel, ln, t, ipid = rel[~dup], ln[~dup], t[~dup], ipid[~dup]
    end = rel + ln
    snd_max = np.concatenate([[_NONE], np.maximum.accumulate(end)[:-1]])
    again = rel < snd_max  # sent before (in part or whole): a retransmission
    # bytes transmitted more than once: the union of the retransmitted ranges (the
    # originals they repeat lie inside them), as sorted disjoint [lo, hi) intervals
    order = np.argsort(rel[again], kind="stable")
    r_lo, r_hi = rel[again][order], end[again][order]
    if len(r_lo):
        reach = np.maximum.accumulate(r_hi)
        new = np.concatenate([[True], r_lo[1:] > reach[:-1]])
        starts = np.flatnonzero(new)
        t_lo, t_hi = r_lo[starts], np.maximum.reduceat(r_hi, starts)
    else:
        t_lo = t_hi = np.empty(0, np.int64)
    # first transmissions: their ends rise strictly with time
    first = ~again
    o_t, o_rel, o_end, o_id = t[first], rel[first], end[first], ipid[first]
    if not len(acks) or not len(o_end):
        return pd.DataFrame(columns=cols)
    at = acks["t"].to_numpy()
    # SACK: the highest right edge, as an offset above the ACK number (wrap-safe); a
    # D-SACK edge lies below the ACK (negative) and says nothing new was received
    off = _signed32(acks["sack_hi"].to_numpy().astype(np.int64)
                    - acks["ack"].to_numpy().astype(np.int64))
    has_sack = acks["sack"].to_numpy().astype(bool) & (off > 0)
    cover = np.where(has_sack, ack_rel + np.maximum(off, 0), ack_rel)
    prev_cover = np.concatenate([[_NONE], np.maximum.accumulate(cover)[:-1]])
    prev_cum = np.concatenate([[_NONE], np.maximum.accumulate(ack_rel)[:-1]])
    advances = cover > prev_cover
    k = np.searchsorted(o_end, cover, "right") - 1   # newest first transmission covered
    kk = np.clip(k, 0, None)
    ok = advances & (k >= 0)
    ok &= o_end[kk] > prev_cover                     # ... that nothing covered before
    by_sack = has_sack & (cover > ack_rel)
    ok &= ~by_sack | (o_end[kk] == cover)            # a SACK edge is a segment's end
    ok &= o_t[kk] < at                               # sent before the ACK came back
    # Karn: the bytes a moving cumulative ACK newly covers, from the previous one (the
    # repaired holes among them); for a SACK edge alone, the sampled segment itself (the
    # hole below the SACK block is not what this ACK reports)
    lo = np.where(ack_rel > prev_cum, np.minimum(prev_cum, o_rel[kk]), o_rel[kk])
    j = np.searchsorted(t_lo, cover, "left") - 1      # last doubled range starting below
    doubled = (j >= 0) & (t_hi[np.clip(j, 0, None)] > lo) if len(t_lo) else \
        np.zeros(len(cover), bool)
    ok &= ~doubled
    i = np.flatnonzero(ok)
    seg = kk[i]
    return pd.DataFrame({"t": o_t[seg], "t_ack": at[i], "rtt_s": at[i] - o_t[seg],
                         "seq": o_rel[seg], "len": o_end[seg] - o_rel[seg],
                         "ip_id": o_id[seg], "sack": by_sack[i]}, columns=cols)


def host_roles(manifest: dict | None) -> dict[str, str]:
    """{host: its roles without ranks, e.g. 'worker' or 'server, worker'} from the
    manifest's processes (as flowroles.host_roles names them)."""
    roles: dict[str, set] = {}
    for p in (manifest or {}).get("processes") or []:
        if isinstance(p, dict) and p.get("host") and p.get("role"):
            roles.setdefault(str(p["host"]), set()).add(str(p["role"]))
    return {h: ", ".join(sorted(r)) for h, r in roles.items()}


def flow_role(src, dst, fabric=None, roles: dict | None = None) -> str:
    """'worker → server': the roles at the flow's two ends; a host without a role by
    its name, an address outside the fabric as itself."""
    def end(ip):
        text = ip_to_str(ip)
        host = fabric.host_by_ip(text) if fabric is not None else None
        if host is None:
            return text
        return (roles or {}).get(host.name) or host.name
    return f"{end(src)} → {end(dst)}"


def _host_intf(fabric, ip) -> str | None:
    """The interface of the host with address `ip` (int or dotted), None outside."""
    host = fabric.host_by_ip(ip_to_str(ip) if not isinstance(ip, str) else ip)
    return host.intf if host is not None else None


def rtt_samples(tcp_df: pd.DataFrame, flows: pd.DataFrame | None = None, fabric=None,
                manifest: dict | None = None) -> pd.DataFrame:
    """Every flow's RTT samples at its sender-side capture (see the module text).

    `flows`: a table with src, dst, sport, dport, flow, sender_iface (tcp.data_flows or
    flowstats.flow_summary). With a `fabric`, only flows whose sender-side capture is the
    sending host's own interface give samples (a capture further on would time only
    part of the path); without one, the earliest capture is taken as the sender's.
    Columns: RTT_COLUMNS (role: `flow_role`)."""
    if tcp_df is None or tcp_df.empty:
        return pd.DataFrame(columns=RTT_COLUMNS)
    flows = tcp.data_flows(tcp_df) if flows is None else flows
    roles = host_roles(manifest)
    parts = []
    for f in flows.itertuples(index=False):
        if fabric is not None and str(f.sender_iface) != _host_intf(fabric, f.src):
            continue  # not captured at its sending host: a part of the path only
        key = (f.src, f.dst, f.sport, f.dport)
        fwd, rev = tcp.flow_packets(tcp_df, key, f.sender_iface)
        s = flow_rtt(fwd, rev)
        if len(s):
            parts.append(s.assign(flow=f.flow, role=flow_role(f.src, f.dst, fabric, roles),
                                  src=f.src, dst=f.dst, sport=f.sport, dport=f.dport,
                                  iface=str(f.sender_iface)))
    if not parts:
        return pd.DataFrame(columns=RTT_COLUMNS)
    return pd.concat(parts, ignore_index=True)[RTT_COLUMNS]


# ---------------------------------------------------------------- queues

def queue_delay(queues_d: pd.DataFrame, fabric) -> pd.DataFrame:
    """Queueing delay of every sampled switch port at every sample.

    `queues_d`: queues.csv with per-sample increases (queues.queue_deltas). Ports the
    fabric map does not know (no rate) are left out. Columns: QDELAY_COLUMNS: delay_s =
    backlog_bytes x 8 / rate; weight = packets the port sent since the previous sample
    (bytes / 1514 where the file has no packet counter)."""
    if queues_d is None or queues_d.empty or fabric is None:
        return pd.DataFrame(columns=QDELAY_COLUMNS)
    rate, kind = {}, {}
    for iface in queues_d["iface"].astype(str).unique():
        e = fabric.link_of_iface(iface)
        if e is not None and e.bw_mbps and e.bw_mbps > 0:
            rate[iface], kind[iface] = float(e.bw_mbps), e.kind
    q = queues_d[queues_d["iface"].astype(str).isin(rate)]
    ifaces = q["iface"].astype(str)
    r = ifaces.map(rate).to_numpy(dtype=float)
    backlog = pd.to_numeric(q["backlog_bytes"], errors="coerce").to_numpy(dtype=float)
    if "d_sent_pkts" in q and q["d_sent_pkts"].notna().any():
        w = pd.to_numeric(q["d_sent_pkts"], errors="coerce").fillna(0).to_numpy(dtype=float)
    else:
        w = pd.to_numeric(q.get("d_sent_bytes", 0), errors="coerce").fillna(0).to_numpy(
            dtype=float) / FRAME_MAX_BYTES
    return pd.DataFrame({"t": q["t"].to_numpy(dtype=float), "iface": ifaces.to_numpy(),
                         "kind": ifaces.map(kind).to_numpy(), "rate_mbps": r,
                         "backlog_bytes": backlog, "delay_s": backlog * 8 / (r * 1e6),
                         "weight": w}, columns=QDELAY_COLUMNS)


def queue_delay_bound_s(queue_packets: int, rate_mbps: float,
                        frame_bytes: int = FRAME_MAX_BYTES) -> float:
    """The most a full pfifo of `queue_packets` frames of at most `frame_bytes` (1514 at
    MTU 1500) delays a packet at `rate_mbps`: Q x 1514 x 8 / rate (s)."""
    return queue_packets * frame_bytes * 8 / (rate_mbps * 1e6)


def port_bound_s(fabric, iface: str) -> float | None:
    """The most the switch egress queue behind `iface` delays a packet: its limit in
    bytes (fabric.queue_limit_bytes: a bfifo's bytes, or a pfifo's packets x a full
    frame at the fabric's MTU) x 8 / the port's rate (s); None for a host or an unknown
    interface."""
    e = fabric.link_of_iface(iface) if fabric is not None else None
    limit = fabric.queue_limit_bytes(iface) if e is not None else None
    return limit * 8 / (e.bw_mbps * 1e6) if limit and e.bw_mbps else None


# ---------------------------------------------------------------- sojourn

def sojourns(tcp_df: pd.DataFrame, flows: pd.DataFrame | None = None,
             fabric=None) -> pd.DataFrame:
    """Data packets seen at their flow's sender-side capture and at another capture
    point, matched on flow, sequence number, length and IP id; one row per (packet,
    later capture point). With a `fabric`, a copy at a host's interface counts only at
    the flow's destination host (the switches flood a flow's first packets before its
    path is set up: those copies reach other hosts and are no sojourn).
    Columns: SOJOURN_COLUMNS (seq: raw, as captured); rows in SOJOURN_ORDER (time, sender
    capture, flow, seq, later capture point, IP id: whatever order the packets came in)."""
    if tcp_df is None or tcp_df.empty:
        return pd.DataFrame(columns=SOJOURN_COLUMNS)
    flows = tcp.data_flows(tcp_df) if flows is None else flows
    if flows.empty:
        return pd.DataFrame(columns=SOJOURN_COLUMNS)
    key = [*tcp.FLOW_KEY, "seq", "payload_len", "ip_id"]
    d = tcp_df.loc[(tcp_df["payload_len"] > 0) & (tcp_df["ip_id"] != 0)
                   & ((tcp_df["flags"] & SYN) == 0), [*key, "iface", "t"]]
    d = d.assign(iface=d["iface"].astype(str))
    fl = flows[[*tcp.FLOW_KEY, "flow", "sender_iface"]].assign(
        sender_iface=flows["sender_iface"].astype(str))
    d = d.merge(fl, on=tcp.FLOW_KEY, how="inner")
    at_sender = d["iface"] == d["sender_iface"]
    # the first capture of each transmission at each point (a capture duplicate: once)
    s = d[at_sender].sort_values("t", kind="stable").drop_duplicates(key, keep="first")
    o = d[~at_sender].sort_values("t", kind="stable").drop_duplicates([*key, "iface"],
                                                                      keep="first")
    m = s[[*key, "flow", "iface", "t"]].merge(o[[*key, "iface", "t"]], on=key,
                                              suffixes=("_s", "_o"))
    dt = m["t_o"].to_numpy() - m["t_s"].to_numpy()
    keep = (dt >= 0) & (dt < MAX_SOJOURN_S)
    if fabric is not None and len(m):
        hosts = {h.intf for h in fabric.hosts}
        dst_intf = m["dst"].map(lambda ip: _host_intf(fabric, ip)).to_numpy()
        to = m["iface_o"].to_numpy()
        keep &= ~np.isin(to, list(hosts)) | (to == dst_intf)
    m = m[keep]
    return pd.DataFrame({"flow": m["flow"].to_numpy(), "from_iface": m["iface_s"].to_numpy(),
                         "to_iface": m["iface_o"].to_numpy(), "t": m["t_s"].to_numpy(),
                         "sojourn_s": (m["t_o"] - m["t_s"]).to_numpy(),
                         "seq": m["seq"].to_numpy(), "len": m["payload_len"].to_numpy(),
                         "ip_id": m["ip_id"].to_numpy()},
                        columns=SOJOURN_COLUMNS).sort_values(SOJOURN_ORDER, kind="stable",
                                                             ignore_index=True)


def write_full(a, table, name: str) -> str | None:
    """tables/<name>.csv with the whole table (a Samples' file copied as it is); the
    link relative to report.html, None without an output directory or rows."""
    from . import render

    if not isinstance(table, Samples):
        return render.write_table(a, table, name)
    out = getattr(a, "out_dir", None)
    if out is None or not len(table):
        return None
    path = Path(out) / "tables" / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(table.path, path)
    return f"tables/{path.name}"


# ---------------------------------------------------------------- summary

def summary_table(rtt: pd.DataFrame, qdelay: pd.DataFrame, soj: pd.DataFrame,
                  fabric=None) -> pd.DataFrame:
    """Percentiles (ms) per group: 'RTT' by flow role (and 'all flows'), 'queue delay'
    by switch port with any traffic (and 'all ports', packet-weighted), 'sojourn' by
    pair of capture points. `rtt`, `soj`: DataFrames or Samples (the same numbers, or,
    for a Samples past samples.EXACT_SAMPLES rows, percentiles within samples.REL_ERROR
    of them: the note says so). Columns: SUMMARY_COLUMNS."""
    rows = []
    r = compact(rtt, "rtt_s", RTT_KEYS)
    if r is not None:
        est = "" if r.exact else f"; percentiles within {REL_ERROR:.1%} (sketch)"
        rows.append({"measure": "RTT", "group": "all flows", **stats_ms(r.dist()),
                     "note": f"{r.groups['flow'].nunique()} flow(s){est}"})
        for role, vg, g in groups(r, "role"):
            rows.append({"measure": "RTT", "group": role, **stats_ms(vg),
                         "note": f"{g['flow'].nunique()} flow(s){est}"})
    if qdelay is not None and len(qdelay) and qdelay["weight"].sum() > 0:
        rows.append({"measure": "queue delay", "group": "all ports",
                     **stats_ms(qdelay["delay_s"], qdelay["weight"]),
                     "note": "weighted by packets sent"})
        for iface, g in qdelay.groupby("iface", sort=True):
            if g["weight"].sum() <= 0:
                continue
            e = fabric.link_of_iface(iface) if fabric is not None else None
            note = f"{g['rate_mbps'].iloc[0]:g} Mbit/s"
            full = port_bound_s(fabric, iface)
            if full is not None:
                note += (f", {fabric.queue_limit_text(iface)} = {full * 1e3:.3g} ms when "
                         f"full; {e.kind} to {e.peer}")
            rows.append({"measure": "queue delay", "group": iface,
                         **stats_ms(g["delay_s"], g["weight"]), "note": note})
    r = compact(soj, "sojourn_s", SOJOURN_KEYS)
    if r is not None:
        est = "" if r.exact else f"; percentiles within {REL_ERROR:.1%} (sketch)"
        for (a, b), vg, g in groups(r, ["from_iface", "to_iface"]):
            rows.append({"measure": "sojourn", "group": f"{a} → {b}",
                         **stats_ms(vg), "note": f"{g['flow'].nunique()} flow(s){est}"})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def analyse(a) -> dict:
    """The latency tables of an Analysis-like object whose `tables['tcp']` holds every
    packet (with its flows and queues_d tables, fabric and manifest): {'rtt',
    'queue_delay', 'sojourn', 'summary'}. report.analyse does not call this: it reduces
    `rtt_samples` and `sojourns` a group of connections at a time (chunked.py) and
    builds the same dict (from_reduced) with `Samples` for 'rtt' and 'sojourn' (the
    same rows, in files; the same summary)."""
    t = a.tables
    rtt = rtt_samples(t.get("tcp"), t.get("flows"), a.fabric, a.manifest)
    qd = queue_delay(t.get("queues_d"), a.fabric)
    soj = sojourns(t.get("tcp"), t.get("flows"), a.fabric)
    return {"rtt": rtt, "queue_delay": qd, "sojourn": soj,
            "summary": summary_table(rtt, qd, soj, a.fabric)}


def summary(tables: dict | None) -> dict:
    """metrics.json's `latency`: the headline percentiles (None: no samples) and the
    summary table's rows."""
    tables = tables or {}
    tab = tables.get("summary")
    out = {"rtt_p50_ms": None, "rtt_p90_ms": None, "rtt_p99_ms": None, "rtt_samples": 0,
           "queue_delay_p50_ms": None, "queue_delay_p99_ms": None, "sojourn_p99_ms": None,
           "groups": []}
    if tab is None or tab.empty:
        return out
    def row(measure, group):
        r = tab[(tab["measure"] == measure) & (tab["group"] == group)]
        return r.iloc[0] if len(r) else None
    r = row("RTT", "all flows")
    if r is not None:
        out.update(rtt_p50_ms=r["p50_ms"], rtt_p90_ms=r["p90_ms"], rtt_p99_ms=r["p99_ms"],
                   rtt_samples=int(r["samples"]))
    q = row("queue delay", "all ports")
    if q is not None:
        out.update(queue_delay_p50_ms=q["p50_ms"], queue_delay_p99_ms=q["p99_ms"])
    soj = compact(tables.get("sojourn"), "sojourn_s", SOJOURN_KEYS)
    if soj is not None:
        out["sojourn_p99_ms"] = dist_quantiles(soj.dist(), (0.99,))[0] * 1e3
    out["groups"] = tab.to_dict(orient="records")
    return out
