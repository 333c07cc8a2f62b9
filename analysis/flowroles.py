"""Flows named by the hosts and roles at their ends, and the way from a finding to its
packets: which capture file holds it and a Wireshark display filter that shows it.

A run's manifest lists its processes (`processes`: rank, host, role, as the job's
launch plan gave them); fabric.json maps addresses to hosts. A flow
`10.0.1.1:37759>10.0.2.1:41764` becomes `h1 ring 0 → h3 ring 1 (37759→41764)`. Roles are
shown as the job named them (no table of job kinds here: a new job's roles show as
they are).

Display filters use `frame.time_epoch` (absolute seconds), which every capture of the
run shares, so the same filter works in any of its pcap files.
"""
from __future__ import annotations

import pandas as pd

from .tcp import ip_to_str


def host_roles(manifest: dict | None) -> dict[str, str]:
    """{host: 'server 0'} from the manifest's processes (several: 'server 0, worker 3');
    {} for a run without them."""
    out: dict[str, list[str]] = {}
    for p in (manifest or {}).get("processes") or []:
        if isinstance(p, dict) and p.get("host"):
            out.setdefault(str(p["host"]), []).append(
                f"{p.get('role', '?')} {p.get('rank', '?')}")
    return {h: ", ".join(v) for h, v in out.items()}


def host_label(ip, fabric=None, roles: dict | None = None) -> str:
    """'h1 server 0' for an address (int or dotted), 'h1' without a role, the address
    itself when no host has it."""
    text = ip_to_str(ip) if not isinstance(ip, str) else ip
    host = fabric.host_by_ip(text) if fabric is not None else None
    if host is None:
        return text
    role = (roles or {}).get(host.name)
    return f"{host.name} {role}" if role else host.name


def flow_labels(flows: pd.DataFrame, fabric=None, manifest: dict | None = None
                ) -> dict[str, str]:
    """{flow name (tcp.flow_name): 'h1 ring 0 → h3 ring 1 (37759→41764)'} for every flow
    of a flows table (columns flow, src, dst, sport, dport); the ports keep two
    connections between the same processes apart."""
    if flows is None or flows.empty:
        return {}
    roles = host_roles(manifest)
    return {f.flow: f"{host_label(f.src, fabric, roles)} → {host_label(f.dst, fabric, roles)}"
                    f" ({int(f.sport)}→{int(f.dport)})"
            for f in flows.itertuples(index=False)}


def relabel(df: pd.DataFrame, labels: dict[str, str], column: str = "flow") -> pd.DataFrame:
    """A copy of `df` with its flow names replaced by their labels (unknown ones kept)."""
    if df is None or df.empty or column not in df or not labels:
        return df
    return df.assign(**{column: df[column].map(lambda f: labels.get(f, f))})


def _window(t_from: float | None, t_to: float | None) -> list[str]:
    out = []
    if t_from is not None:
        out.append(f"frame.time_epoch >= {t_from:.6f}")
    if t_to is not None:
        out.append(f"frame.time_epoch <= {t_to:.6f}")
    return out


def flow_filter(src, dst, sport, dport, t_from: float | None = None,
                t_to: float | None = None, both_directions: bool = True) -> str:
    """A Wireshark display filter for one TCP connection (its data and, with
    `both_directions`, its ACKs), optionally within [t_from, t_to] (epoch seconds)."""
    s, d = ip_to_str(src) if not isinstance(src, str) else src, \
        ip_to_str(dst) if not isinstance(dst, str) else dst
    fwd = f"ip.src == {s} && tcp.srcport == {int(sport)} && ip.dst == {d} && " \
        f"tcp.dstport == {int(dport)}"
    if both_directions:
        rev = f"ip.src == {d} && tcp.srcport == {int(dport)} && ip.dst == {s} && " \
            f"tcp.dstport == {int(sport)}"
        fwd = f"(({fwd}) || ({rev}))"
    return " && ".join([fwd, *_window(t_from, t_to)])


def rto_packets(retrans: pd.DataFrame, flows: pd.DataFrame, labels: dict,
                margin_s: float = 0.05) -> pd.DataFrame:
    """For each RTO firing: the flow (by role), when (epoch s), the sender-side capture
    that holds it and a display filter showing the silence before it and the
    retransmission itself (from gap_s + margin_s before to margin_s after).

    Columns: flow, t, gap_s, pcap, filter."""
    cols = ["flow", "t", "gap_s", "pcap", "filter"]
    if retrans is None or retrans.empty or "kind" not in retrans:
        return pd.DataFrame(columns=cols)
    r = retrans[(retrans["kind"] == "rto") & retrans["event"].astype(bool)]
    rows = []
    for x in r.itertuples(index=False):
        gap = float(x.gap_s) if pd.notna(x.gap_s) else 0.0
        rows.append({"flow": labels.get(x.flow, x.flow), "t": float(x.t), "gap_s": gap,
                     "pcap": f"pcap/{x.iface}.pcap",
                     "filter": flow_filter(x.src, x.dst, x.sport, x.dport,
                                           float(x.t) - gap - margin_s,
                                           float(x.t) + margin_s)})
    return pd.DataFrame(rows, columns=cols)


def episode_packets(episodes: pd.DataFrame, fabric, pcap_names: list[str]) -> pd.DataFrame:
    """For each incast episode: the capture that holds its packets and a filter for them.

    An episode on a port towards a host (leaf → h2) is in that host's capture: the
    packets that reached it (`ip.dst == h2`) in the episode's window. A port between
    switches has no capture of its own: the filter selects the packets to the hosts
    behind it in the window, in the captures of those hosts that exist.
    Columns: iface, start, end, pcap, filter."""
    cols = ["iface", "start", "end", "pcap", "filter"]
    if episodes is None or episodes.empty:
        return pd.DataFrame(columns=cols)
    have = set(pcap_names)
    rows = []
    for e in episodes.itertuples(index=False):
        eg = fabric.link_of_iface(e.iface) if fabric is not None else None
        hosts = []
        if eg is not None and fabric.host(eg.peer) is not None:
            hosts = [fabric.host(eg.peer)]
        elif eg is not None and fabric.switch_named(eg.peer) is not None:
            sw = fabric.switch_named(eg.peer)
            hosts = fabric.hosts_on(sw.index) if sw.role == "leaf" else []
        files = [f"pcap/{h.intf}.pcap" for h in hosts if h.intf in have]
        dst = " || ".join(f"ip.dst == {h.ip}" for h in hosts)
        parts = ([f"({dst})"] if dst else []) + _window(float(e.start), float(e.end))
        rows.append({"iface": e.iface, "start": float(e.start), "end": float(e.end),
                     "pcap": ", ".join(files) or "(no capture of these hosts)",
                     "filter": "tcp && " + " && ".join(parts)})
    return pd.DataFrame(rows, columns=cols)


def worst_flow(flows_summary: pd.DataFrame, retrans: pd.DataFrame) -> str | None:
    """The flow with the most RTO firings, then the most retransmitted packets, then the
    most bytes (None: no flows)."""
    if flows_summary is None or flows_summary.empty:
        return None
    rto = {}
    if retrans is not None and len(retrans) and "kind" in retrans:
        r = retrans[(retrans["kind"] == "rto") & retrans["event"].astype(bool)]
        rto = r.groupby("flow").size().to_dict()
    f = flows_summary.assign(_rto=flows_summary["flow"].map(lambda x: rto.get(x, 0)))
    f = f.sort_values(["_rto", "retrans_packets", "bytes"], ascending=False, kind="stable")
    return str(f["flow"].iloc[0])


def sequence_data(tcp_df: pd.DataFrame, flows: pd.DataFrame, flow: str) -> dict | None:
    """One flow as its sender's capture saw it, for a tcptrace-style plot: data packets
    (t, relative sequence number, length in bytes, retransmitted?) and the ACKs coming
    back (t, relative ack number). None when the flow carried no data there."""
    from . import tcp  # the flow's packets as tcp.retransmissions reads them

    if tcp_df is None or tcp_df.empty or flows is None or flows.empty:
        return None
    row = flows[flows["flow"] == flow]
    if row.empty:
        return None
    f = row.iloc[0]
    fwd, rev = tcp.flow_packets(tcp_df, (f.src, f.dst, f.sport, f.dport), f.sender_iface)
    if (fwd["payload_len"] > 0).sum() == 0:
        return None
    _base, data, rel, ln, acks, ack_rel = tcp.flow_state(fwd, rev)
    end = rel + ln
    import numpy as np

    snd_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]])
    return {"t": data["t"].to_numpy(), "seq": rel, "len": ln, "retrans": rel < snd_max,
            "ack_t": acks["t"].to_numpy(), "ack": ack_rel, "iface": str(f.sender_iface)}
