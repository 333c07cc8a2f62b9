"""Incast episodes: intervals in which a switch queue filled up, who filled it, and what
it cost (drops, RTOs).

A queue sample is *hot* when its backlog reached `full_frac` of the queue limit (the
link's `queue_packets` from fabric.json, else the largest backlog the port ever showed)
or its drop counter rose since the previous sample. Hot samples less than two sample
intervals apart form one episode. An episode runs from its first to its last hot sample
(so durations are quantised to the sampling interval, which is added once). Senders are
the distinct source hosts of flows whose path crosses the port and that sent data in the
episode *with a material share of its bytes*: a host counts as a sender when its flows
through the port carried at least half of an equal share of the distinct data bytes the
captures saw crossing it from one sampling interval before the episode to its end
(bytes_i >= total / (2 n), n = hosts that sent any; MATERIAL_SHARE). Incast senders bring
comparable shares and all count (16 senders of 1/16 each are above 1/32); a control
flow does not (the ~15 kB of a rendezvous store next to a ring's megabytes is under 1 %
of the port's bytes, so a ring's queue that overflowed is not incast because of it).
RTOs are RTO firings of any flow through the port whose silence began inside the episode.
`fan_in` is the largest number of senders whose flows went to one and the same receiver.
An episode is flagged `incast` when fan_in >= 2: many-to-one traffic of real volume
filled the queue. Two senders to two different receivers sharing an uplink (a ring's
cross-leaf flows, an ECMP collision) make a congested queue, not incast. `n_flows`
counts every flow through the port that sent data in the episode.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .pcap import ip_to_str
from incastlab.topologies.fabricmap import FabricMap

from .queues import path_ports, queue_deltas
from .rundir import host_by_ip, spine_lookup

MATERIAL_SHARE = 0.5  # of an equal share of the port's bytes: who counts as a sender
FLOW_KEY = ["src", "dst", "sport", "dport"]
COLUMNS = ["iface", "start", "end", "duration_s", "max_backlog_pkts", "limit_pkts", "drops",
           "n_senders", "senders", "fan_in", "n_flows", "rtos", "incast"]


def episode_windows(queues: pd.DataFrame, fabric: FabricMap | None = None,
                    full_frac: float = 0.9) -> list[dict]:
    """The episodes of full queues before the captures are consulted, in report order
    (by port, then time): one dict each with iface, start, end (s), step (the sampling
    interval, s), limit_pkts, max_backlog_pkts and drops. `window_flow_bytes` and
    `incast_episodes` read the captures over [start - step, end] of each."""
    if queues.empty:
        return []
    dq = queue_deltas(queues)
    out = []
    for iface, g in dq.groupby("iface", sort=True):
        g = g.sort_values("t")
        egress = fabric.link_of_iface(iface) if fabric else None
        limit = (egress.queue_packets if egress else None) or float(g["backlog_pkts"].max())
        if not limit or limit <= 0:
            continue
        hot = (g["backlog_pkts"] >= full_frac * limit) | (g["d_drops"] > 0)
        if not hot.any():
            continue
        step = float(np.median(np.diff(g["t"]))) if len(g) > 1 else 0.0
        ht = g.loc[hot, "t"].to_numpy()
        breaks = np.flatnonzero(np.diff(ht) > 2 * step + 1e-9)
        starts = np.concatenate([[0], breaks + 1])
        ends = np.concatenate([breaks, [len(ht) - 1]])
        for s, e in zip(starts, ends, strict=True):
            t0, t1 = float(ht[s]), float(ht[e])
            win = g[(g["t"] >= t0) & (g["t"] <= t1)]
            out.append({"iface": iface, "start": t0, "end": t1, "step": step,
                        "limit_pkts": limit, "max_backlog_pkts": float(win["backlog_pkts"].max()),
                        "drops": float(win["d_drops"].sum())})
    return out


def window_flow_bytes(tcp: pd.DataFrame, windows: list[dict]) -> list[pd.Series]:
    """Per episode window: distinct payload bytes (a segment captured at several ports,
    or resent, once) each flow carried from one sampling interval before the episode to
    its end, indexed by (src, dst, sport, dport). Each flow's bytes depend on its own
    packets only, so frames holding disjoint sets of connections can be reduced one at a
    time and their Series concatenated (chunked.py)."""
    data = tcp[tcp["payload_len"] > 0].sort_values("t", kind="stable")
    t = data["t"].to_numpy()
    out = []
    for w in windows:
        lo, hi = np.searchsorted(t, [w["start"] - w["step"], w["end"]])
        win = data.iloc[lo:hi]
        distinct = win.drop_duplicates(FLOW_KEY + ["seq"]) if "seq" in win else win
        out.append(distinct.groupby(FLOW_KEY)["payload_len"].sum())
    return out


def incast_episodes(queues: pd.DataFrame, fabric: FabricMap | None = None,
                    tcp: pd.DataFrame | None = None, retrans: pd.DataFrame | None = None,
                    flow_paths: pd.DataFrame | None = None, full_frac: float = 0.9,
                    flow_bytes: list[pd.Series] | None = None) -> pd.DataFrame:
    """Episodes of full queues, one row each (see module docstring). Times in seconds,
    sizes in packets. n_senders/fan_in/n_flows/rtos are NaN when no captures can tell.

    `flow_bytes`: `window_flow_bytes` of the captures for `episode_windows(queues,
    fabric, full_frac)`, when the captures are not passed whole as `tcp` (bounded-memory
    analysis, chunked.py)."""
    if queues.empty:
        return pd.DataFrame(columns=COLUMNS)
    windows = episode_windows(queues, fabric, full_frac)
    ip_host = host_by_ip(fabric)
    if flow_bytes is None and tcp is not None and len(tcp):
        flow_bytes = window_flow_bytes(tcp, windows)
    spine_of = spine_lookup(flow_paths)
    rows = []
    for i, w in enumerate(windows):
        iface, t0, t1, step = w["iface"], w["start"], w["end"], w["step"]
        row = {"iface": iface, "start": t0, "end": t1, "duration_s": t1 - t0 + step,
               "max_backlog_pkts": w["max_backlog_pkts"], "limit_pkts": w["limit_pkts"],
               "drops": w["drops"], "n_senders": np.nan, "senders": "",
               "fan_in": np.nan, "n_flows": np.nan, "rtos": np.nan}
        if flow_bytes is not None and ip_host:
            flows, sent, pair = [], {}, {}
            for f, nbytes in flow_bytes[i].items():
                src, dst = ip_to_str(f[0]), ip_to_str(f[1])
                sh, dh = ip_host.get(src), ip_host.get(dst)
                spine = spine_of(src, dst, f[2], f[3])
                if sh and dh and iface in path_ports(fabric, sh, dh, spine):
                    flows.append(tuple(f))
                    sent[sh] = sent.get(sh, 0) + float(nbytes)
                    pair[sh, dh] = pair.get((sh, dh), 0) + float(nbytes)
            floor = MATERIAL_SHARE * sum(sent.values()) / len(sent) if sent else 0.0
            senders = {h for h, b in sent.items() if b > 0 and b >= floor}
            # fan-in: material senders *to one receiver* (a sender's side flows to
            # another host do not make it one of that host's senders)
            senders_to = {}
            for (sh, dh), b in pair.items():
                if b > 0 and b >= floor:
                    senders_to.setdefault(dh, set()).add(sh)
            row["n_senders"] = len(senders)
            row["senders"] = ",".join(sorted(senders))
            row["fan_in"] = max((len(v) for v in senders_to.values()), default=0)
            row["n_flows"] = len(flows)
            if retrans is not None:
                rto = retrans[retrans["event"] & (retrans["kind"] == "rto")]
                keys = set(flows)
                stall = rto["t"] - rto["gap_s"]
                mine = [(r.src, r.dst, r.sport, r.dport) in keys for r in rto.itertuples()]
                row["rtos"] = int(((stall >= t0 - step) & (stall <= t1 + step)
                                   & np.array(mine, bool)).sum()) if len(rto) else 0
        rows.append(row)
    out = pd.DataFrame(rows, columns=COLUMNS)
    out["incast"] = out["fan_in"] >= 2
    return out.sort_values("start", kind="stable").reset_index(drop=True)
