"""TCP flows, retransmissions and capture-to-capture losses from parsed pcaps.

Inputs are DataFrames from `analysis.pcap` (one per capture point). A *flow* is one
direction of a TCP connection that carries payload, keyed by (src, dst, sport, dport).

Retransmissions are found at the capture point nearest the sender (where the flow's
first data packet was seen earliest), so they are what the sender transmitted again:
a data packet whose first byte lies below the highest sequence number sent before it
(`snd_max`). A packet identical to an earlier one in sequence, length *and* IP id is a
duplicate of the capture, not a retransmission (Linux gives every transmission a new
IP id), and is left out.

Each retransmission gets a trigger (`kind`), decided in this order:

    rto    the flow was silent (no packet either way at the sender's capture) for at
           least `rto_threshold_s` before it -- a retransmission timeout. Default
           0.18 s: Linux's 200 ms RTO floor less 10 % for timer granularity; pass a
           lower value if the hosts were configured with a smaller `rto_min`.
    (inherited) a retransmission inside an ongoing recovery episode (before the ACK
           that covers the episode's recovery point) takes the episode's kind.
    fast   at least 3 duplicate ACKs (pure ACKs repeating the retransmitted sequence
           number) reached the sender before it, or its duplicate ACKs SACKed at least
           3 segments above the hole (Linux counts SACKed segments, and one ACK often
           SACKs several) -- fast retransmit / SACK recovery.
    tlp    none of the above and it resends the highest segment sent so far -- a
           tail-loss probe (Linux sends one after ~2 SRTT without ACKs).
    other  none of the above: RACK (time-based) early retransmit with fewer than 3
           segments reported missing, or anything else.

An *episode* starts with a retransmission outside any ongoing episode and ends when an
ACK covers the highest sequence sent when it started. An RTO that fires again inside an
RTO episode (exponential backoff) counts as another RTO in the same episode.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .pcap import ACK, COLUMNS, FIN, RST, SYN, ip_to_str

FLOW_KEY = ["src", "dst", "sport", "dport"]
DEFAULT_RTO_THRESHOLD_S = 0.18
_TWO32 = 1 << 32
_TWO31 = 1 << 31


def flow_name(src, dst, sport, dport) -> str:
    """Human-readable flow id, e.g. '10.0.0.1:40000>10.0.0.2:5001'."""
    return f"{ip_to_str(src)}:{int(sport)}>{ip_to_str(dst)}:{int(dport)}"


def tcp_only(df: pd.DataFrame) -> pd.DataFrame:
    """TCP rows whose headers were fully captured."""
    return df[(df["proto"] == 6) & df["hdr_ok"]]


def combine(pcaps: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """All TCP rows of several captures in one frame (iface tells them apart)."""
    frames = []
    for iface, df in pcaps.items():
        d = tcp_only(df).copy()
        d["iface"] = iface
        frames.append(d)
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in COLUMNS})
    out = pd.concat(frames, ignore_index=True)
    out["iface"] = out["iface"].astype("category")
    return out


def _unwrap(values: np.ndarray, base: int) -> np.ndarray:
    """uint32 sequence numbers -> int64 offsets from `base`, following wrap-around."""
    s = values.astype(np.int64)
    if len(s) == 0:
        return s
    first = ((s[0] - base + _TWO31) % _TWO32) - _TWO31
    d = ((np.diff(s) + _TWO31) % _TWO32) - _TWO31
    return np.concatenate([[first], first + np.cumsum(d)])


def data_flows(tcp: pd.DataFrame) -> pd.DataFrame:
    """Flows (directional) that carry payload, with the capture that sees each first.

    Columns: src, dst, sport, dport, flow, sender_iface (earliest first data packet),
    receiver_iface (another capture of the flow's data: the one that saw the reverse
    direction first, i.e. nearest the receiver; without reverse packets elsewhere, the
    latest first data packet), via (comma-separated captures in between, e.g. a spine
    port, in order of their first data packet).

    Why the reverse direction: a flow whose packets take several paths (policies spray
    and flowlet) reaches a second spine's capture with a later packet, possibly after
    the receiver's first data packet; the receiver's own interface still sees every
    ACK first.
    """
    data = tcp[tcp["payload_len"] > 0]
    if data.empty:
        return pd.DataFrame(columns=[*FLOW_KEY, "flow", "sender_iface", "receiver_iface",
                                     "via"])
    first = (data.groupby([*FLOW_KEY, "iface"], observed=True)["t"].min()
             .reset_index().sort_values("t", kind="stable"))
    any_first = tcp.groupby([*FLOW_KEY, "iface"], observed=True)["t"].min()
    any_first = {(*(int(x) for x in k[:-1]), str(k[-1])): t for k, t in any_first.items()}
    rows = []
    for key, g in first.groupby(FLOW_KEY, observed=True, sort=True):
        ifaces = list(g["iface"].astype(str))
        receiver = None
        if len(ifaces) > 1:
            src, dst, sport, dport = (int(x) for x in key)
            back = {i: any_first.get((dst, src, dport, sport, i)) for i in ifaces[1:]}
            back = {i: t for i, t in back.items() if t is not None}
            receiver = min(back, key=back.get) if back else ifaces[-1]
        rows.append({**dict(zip(FLOW_KEY, key, strict=True)), "flow": flow_name(*key),
                     "sender_iface": ifaces[0], "receiver_iface": receiver,
                     "via": ",".join(i for i in ifaces[1:] if i != receiver)})
    return pd.DataFrame(rows)


def reused_tuples(tcp: pd.DataFrame, keys: bool = False) -> pd.DataFrame:
    """Flows whose 4-tuple carried more than one connection (distinct SYN sequence
    numbers at one capture point); their sequence analysis mixes connections.

    Columns: flow, iface, connections (and src, dst, sport, dport first with `keys`),
    ordered by flow key, then capture."""
    cols = [*(FLOW_KEY if keys else []), "flow", "iface", "connections"]
    syn = tcp[((tcp["flags"] & SYN) > 0) & ((tcp["flags"] & ACK) == 0)]
    if syn.empty:
        return pd.DataFrame(columns=cols)
    n = syn.groupby([*FLOW_KEY, "iface"], observed=True)["seq"].nunique()
    n = n[n > 1].reset_index()
    out = {k: n[k] for k in (FLOW_KEY if keys else [])}
    out.update({"flow": [flow_name(*k) for k in n[FLOW_KEY].itertuples(index=False)],
                "iface": n["iface"].astype(str), "connections": n["seq"]})
    return pd.DataFrame(out)


def _index(tcp: pd.DataFrame) -> dict:
    """{(iface, src, dst, sport, dport): row positions}, built once per frame."""
    cached = getattr(tcp, "_incastlab_flow_index", None)
    if cached is not None and cached[0] == len(tcp):
        return cached[1]
    if len(tcp):
        idx = tcp.groupby(["iface", *FLOW_KEY], observed=True, sort=False).indices
        idx = {(str(k[0]), *(int(x) for x in k[1:])): v for k, v in idx.items()}
    else:
        idx = {}
    object.__setattr__(tcp, "_incastlab_flow_index", (len(tcp), idx))
    return idx


def flow_packets(tcp, key, iface):
    """(forward, reverse) packets of a flow at one capture point, each sorted by time.

    key: (src, dst, sport, dport) of the flow's data direction; iface: the capture."""
    src, dst, sport, dport = (int(x) for x in key)
    idx = _index(tcp)
    empty = np.empty(0, np.int64)
    f = idx.get((str(iface), src, dst, sport, dport), empty)
    r = idx.get((str(iface), dst, src, dport, sport), empty)
    fwd = tcp.iloc[f].sort_values("t", kind="stable")
    rev = tcp.iloc[r].sort_values("t", kind="stable")
    return fwd, rev


def sender_flows(tcp: pd.DataFrame, flows: pd.DataFrame | None):
    """(flow row, forward packets, reverse packets, flow_state(...)) for every flow
    that carried data at its sender's capture."""
    flows = data_flows(tcp) if flows is None else flows
    for f in flows.itertuples(index=False):
        key = (f.src, f.dst, f.sport, f.dport)
        fwd, rev = flow_packets(tcp, key, f.sender_iface)
        if (fwd["payload_len"] > 0).sum() == 0:
            continue
        yield f, fwd, rev, flow_state(fwd, rev)


def flow_state(fwd: pd.DataFrame, rev: pd.DataFrame):
    """Relative sequence/ack numbers of one flow as seen at one capture point (`fwd`,
    `rev` from `flow_packets`): (base, data packets, their relative seq, their payload
    bytes, the ACKs, their relative ack numbers)."""
    syn = fwd[(fwd["flags"] & SYN) > 0]
    data = fwd[fwd["payload_len"] > 0]
    base = int(syn["seq"].iloc[0]) + 1 if len(syn) else int(data["seq"].iloc[0])
    rel = _unwrap(data["seq"].to_numpy(), base)
    ln = data["payload_len"].to_numpy().astype(np.int64)
    acks = rev[(rev["flags"] & ACK) > 0]
    ack_rel = _unwrap(acks["ack"].to_numpy(), base)
    return base, data, rel, ln, acks, ack_rel




def retransmissions(tcp: pd.DataFrame, flows: pd.DataFrame | None = None,
                    rto_threshold_s: float = DEFAULT_RTO_THRESHOLD_S
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Retransmitted data packets and recovery episodes, at each flow's sender side.

    Returns (retrans, episodes).
    retrans: flow, src, dst, sport, dport, iface, t (s), seq (relative, bytes), len
      (bytes), ip_id, kind, gap_s (silence before it), dupacks, sacked (segments SACKed
      above the hole by those duplicate ACKs, upper bound), event (starts an
      episode or is an RTO firing), episode (id within the frame), tail (bool).
    episodes: episode, flow, kind, n_rto, n_retrans, stall_start, start, end,
      duration_s (end - stall_start; NaN if never recovered in the capture).
    """
    rrows, erows = [], []
    for f, fwd, rev, state in sender_flows(tcp, flows):
        _flow_retransmissions(f, fwd, rev, state, rto_threshold_s, rrows, erows)
    retrans = pd.DataFrame(rrows, columns=["flow", "src", "dst", "sport", "dport", "iface",
                                           "t", "seq", "len", "ip_id", "kind", "gap_s",
                                           "dupacks", "sacked", "event", "episode", "tail"])
    episodes = pd.DataFrame(erows, columns=["episode", "flow", "kind", "n_rto", "n_retrans",
                                            "stall_start", "start", "end"])
    episodes["duration_s"] = episodes["end"] - episodes["stall_start"]
    return retrans, episodes


def _pure_acks(acks: pd.DataFrame, at: np.ndarray, ack_rel: np.ndarray, base: int):
    """The pure ACKs of a flow's reverse direction sorted by (ack number, time), for
    dup-ACK counts by binary search: (ack numbers, times, bytes SACKed above each ACK's
    cumulative point (upper bound: the highest SACK edge)). `at`: the ACKs' times."""
    pure = ((acks["payload_len"].to_numpy() == 0)
            & ((acks["flags"].to_numpy() & (SYN | FIN | RST)) == 0))
    order = np.lexsort((at[pure], ack_rel[pure]))
    pa, pt = ack_rel[pure][order], at[pure][order]
    sack_hi = acks["sack_hi"].to_numpy()[pure][order].astype(np.int64)
    has_sack = acks["sack"].to_numpy()[pure][order]
    beyond = np.where(has_sack, ((sack_hi - (base + pa)) % _TWO32), 0)
    return pa, pt, beyond


def _flow_retransmissions(f, fwd, rev, state, rto_threshold_s, rrows, erows) -> None:
    """One flow's retransmissions and episodes (`retransmissions`), appended to `rrows`
    and `erows` (episode ids count on across flows)."""
    base, data, rel, ln, acks, ack_rel = state
    end = rel + ln
    t = data["t"].to_numpy()
    ipid = data["ip_id"].to_numpy()
    snd_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]])
    cand = np.flatnonzero(rel < snd_max)
    if len(cand) == 0:
        return
    # capture duplicates: same seq, len and IP id as an earlier packet
    dup = pd.DataFrame({"r": rel, "l": ln, "i": ipid}).duplicated(keep="first").to_numpy()
    cand = [i for i in cand if not dup[i] or ipid[i] == 0]
    all_t = np.sort(np.concatenate([fwd["t"].to_numpy(), rev["t"].to_numpy()]))
    at = acks["t"].to_numpy()
    pa, pt, beyond = _pure_acks(acks, at, ack_rel, base)
    mss = int(ln.max()) if len(ln) else 1
    cum_ack = np.maximum.accumulate(ack_rel) if len(ack_rel) else ack_rel
    reach = np.maximum.accumulate(end)  # the highest byte sent so far, per data packet
    ep_end, ep_id, ep_kind = -np.inf, None, None
    for i in cand:
        ti = t[i]
        k = np.searchsorted(all_t, ti, "left")
        gap = float(ti - all_t[k - 1]) if k > 0 else np.inf
        lo, hi = np.searchsorted(pa, rel[i], "left"), np.searchsorted(pa, rel[i], "right")
        n_same = int(np.searchsorted(pt[lo:hi], ti, "left"))
        # dup ACKs: after the first of that number, none before the byte was sent (keepalive)
        sent = t[min(int(np.searchsorted(reach, rel[i], "right")), len(t) - 1)]
        dupacks = int((pt[lo + 1:lo + n_same] >= sent).sum())
        # segments the receiver reported (SACK) above this hole before it was resent
        above = beyond[lo:lo + n_same].max() - ln[i] if n_same else 0
        sacked = max(int(above // mss), 0)
        tail = bool(end[i] >= snd_max[i])
        in_episode = ti < ep_end
        if gap >= rto_threshold_s:
            kind, event = "rto", True
        elif in_episode:
            kind, event = ep_kind, False
        elif dupacks >= 3 or sacked >= 3:
            kind, event = "fast", True
        elif tail:
            kind, event = "tlp", True
        else:
            kind, event = "other", True
        if event and not in_episode:
            ep_id = len(erows)
            recover = snd_max[i]
            # the first ACK covering the recovery point that comes after this packet
            j = max(np.searchsorted(cum_ack, recover, "left"),
                    np.searchsorted(at, ti, "right"))
            ep_end = float(at[j]) if j < len(at) else np.inf
            ep_kind = kind
            erows.append({"episode": ep_id, "flow": f.flow, "kind": kind,
                          "n_rto": 0, "n_retrans": 0, "stall_start": ti - gap
                          if np.isfinite(gap) else ti, "start": ti,
                          "end": ep_end if np.isfinite(ep_end) else np.nan})
        ep = erows[ep_id]
        ep["n_retrans"] += 1
        if kind == "rto" and event:
            ep["n_rto"] += 1
            ep["kind"] = "rto"
            ep_kind = "rto"
        rrows.append({"flow": f.flow, "src": f.src, "dst": f.dst, "sport": f.sport,
                      "dport": f.dport, "iface": f.sender_iface, "t": ti,
                      "seq": int(rel[i]), "len": int(ln[i]), "ip_id": int(ipid[i]),
                      "kind": kind, "gap_s": gap, "dupacks": dupacks, "sacked": sacked,
                      "event": event,
                      "episode": ep_id, "tail": tail})


def retrans_summary(retrans: pd.DataFrame) -> dict:
    """Counts: packets retransmitted, by kind (inherited kinds included), and events:
    RTO firings, fast retransmits and tail-loss probes that started a recovery."""
    kinds = retrans["kind"].value_counts().to_dict() if len(retrans) else {}
    rto_events = int((retrans["event"] & (retrans["kind"] == "rto")).sum()) if len(retrans) else 0
    return {"retrans_packets": int(len(retrans)),
            "retrans_bytes": int(retrans["len"].sum()) if len(retrans) else 0,
            "by_kind": {k: int(v) for k, v in kinds.items()},
            "rto_events": rto_events,
            "fast_events": int((retrans["event"] & (retrans["kind"] == "fast")).sum())
            if len(retrans) else 0,
            "tlp": int((retrans["event"] & (retrans["kind"] == "tlp")).sum())
            if len(retrans) else 0}


def losses(tcp: pd.DataFrame, flows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Data packets seen at the sender-side capture and never at the receiver side.

    Matching is by flow, sequence number, length and IP id (a retransmission carries a
    new IP id, so a lost original and its delivered retransmission are told apart;
    where IP ids are 0 it degrades to counting copies per (seq, len)); a packet the
    sender-side capture holds twice with the same IP id counts once. Only packets
    sent while the receiver-side capture was running (between its first and last
    packet of the flow's connection) are considered, so capture start/stop is not
    counted as loss.

    Columns: flow, src, dst, sport, dport, sender_iface, receiver_iface, t (sent, s),
    seq (relative), len, ip_id, retransmission (the lost copy was itself a
    retransmission), via (captures between sender and receiver side that saw the flow),
    seen_at (those of them that saw this lost copy: it was dropped after them).
    """
    flows = data_flows(tcp) if flows is None else flows
    rows = []
    for f in flows.itertuples(index=False):
        if f.receiver_iface is None or f.receiver_iface == f.sender_iface:
            continue
        lost = _flow_losses(tcp, f)
        if lost is not None:
            rows.append(lost)
    cols = ["flow", "src", "dst", "sport", "dport", "sender_iface", "receiver_iface", "t",
            "seq", "len", "ip_id", "retransmission", "via", "seen_at"]
    rows = [r for r in rows if len(r)]
    out = pd.concat(rows, ignore_index=True)[cols] if rows else pd.DataFrame(columns=cols)
    return out.sort_values("t", kind="stable").reset_index(drop=True)


_LOSS_KEYS = ["rel", "len", "id"]  # how a sent copy is matched to a received one


def _flow_losses(tcp: pd.DataFrame, f) -> pd.DataFrame | None:
    """One flow's lost packets (`losses`); None when a side has nothing to match."""
    key = (f.src, f.dst, f.sport, f.dport)
    sfwd, srev = flow_packets(tcp, key, f.sender_iface)
    rfwd, rrev = flow_packets(tcp, key, f.receiver_iface)
    sdata = sfwd[sfwd["payload_len"] > 0]
    rdata = rfwd[rfwd["payload_len"] > 0]
    if sdata.empty:
        return None
    base, _, srel, sln, _, _ = flow_state(sfwd, srev)
    rrel = _unwrap(rdata["seq"].to_numpy(), base) if len(rdata) else np.empty(0, np.int64)
    r_times = np.concatenate([rfwd["t"].to_numpy(), rrev["t"].to_numpy()])
    if len(r_times) == 0:
        return None
    lo, hi = r_times.min(), r_times.max()
    st = sdata["t"].to_numpy()
    sid = sdata["ip_id"].to_numpy().astype(np.int64)
    use_id = bool((sid != 0).any())
    keys = _LOSS_KEYS
    snd_max = np.concatenate([[np.iinfo(np.int64).min],
                              np.maximum.accumulate(srel + sln)[:-1]])
    sent = pd.DataFrame({"rel": srel, "len": sln, "id": sid if use_id else 0, "t": st,
                         "retransmission": srel < snd_max})
    sent = sent[(st >= lo - 1e-3) & (st <= hi)]
    if use_id:  # the same packet twice in the sender-side capture counts once
        sent = sent.drop_duplicates(keys, keep="first")
    recv = pd.DataFrame({"rel": rrel,
                         "len": rdata["payload_len"].to_numpy().astype(np.int64),
                         "id": rdata["ip_id"].to_numpy().astype(np.int64)
                         if use_id else 0})
    counts = recv.groupby(keys).size().rename("received")
    sent = sent.join(counts, on=keys)
    sent["received"] = sent["received"].fillna(0)
    # copies of one key that arrived are matched to its latest transmissions, so the
    # lost ones are the earliest (the original, not the retransmission that got through)
    from_last = sent.groupby(keys).cumcount(ascending=False)
    lost = sent[from_last >= sent["received"]]
    via = [v for v in (getattr(f, "via", "") or "").split(",") if v]
    seen_at = _seen_at(tcp, key, via, base, lost, use_id)
    return pd.DataFrame({
        "flow": f.flow, "src": f.src, "dst": f.dst, "sport": f.sport, "dport": f.dport,
        "sender_iface": f.sender_iface, "receiver_iface": f.receiver_iface,
        "t": lost["t"].to_numpy(), "seq": lost["rel"].to_numpy(),
        "len": lost["len"].to_numpy(), "ip_id": lost["id"].to_numpy(),
        "retransmission": lost["retransmission"].to_numpy(),
        "via": ",".join(via), "seen_at": seen_at})


def _seen_at(tcp, key, via, base, lost, use_id) -> list[str]:
    """Per lost copy: the `via` captures that saw it, in path order (dropped after them)."""
    keys = _LOSS_KEYS
    seen_at = [""] * len(lost)
    for v in via:
        vfwd, vrev = flow_packets(tcp, key, v)
        vdata = vfwd[vfwd["payload_len"] > 0]
        vk = pd.DataFrame({"rel": _unwrap(vdata["seq"].to_numpy(), base),
                           "len": vdata["payload_len"].to_numpy().astype(np.int64),
                           "id": vdata["ip_id"].to_numpy().astype(np.int64)
                           if use_id else 0})
        hit = pd.MultiIndex.from_frame(lost[keys]).isin(pd.MultiIndex.from_frame(vk))
        seen_at = [(a + "," + v).lstrip(",") if h else a
                   for a, h in zip(seen_at, hit, strict=True)]
    return seen_at


def spurious_retransmissions(tcp: pd.DataFrame, retrans: pd.DataFrame,
                             flows: pd.DataFrame | None = None) -> pd.Series:
    """For each retransmission: was its whole range already delivered to the receiver
    side before the retransmission was sent? (True = spurious; NaN = no receiver-side
    capture for the flow.)"""
    flows = data_flows(tcp) if flows is None else flows
    out = pd.Series(np.nan, index=retrans.index, dtype=object)
    for f in flows.itertuples(index=False):
        sel = retrans.index[retrans["flow"] == f.flow]
        if len(sel) == 0 or f.receiver_iface is None:
            continue
        key = (f.src, f.dst, f.sport, f.dport)
        sfwd, srev = flow_packets(tcp, key, f.sender_iface)
        rfwd, _ = flow_packets(tcp, key, f.receiver_iface)
        base = flow_state(sfwd, srev)[0]
        rdata = rfwd[rfwd["payload_len"] > 0]
        rrel = _unwrap(rdata["seq"].to_numpy(), base)
        rend = rrel + rdata["payload_len"].to_numpy()
        rt = rdata["t"].to_numpy()
        by_start = pd.Series(np.arange(len(rrel))).groupby(rrel).indices if len(rrel) else {}
        for idx in sel:
            seq, ln, t = (retrans.at[idx, c] for c in ("seq", "len", "t"))
            same = by_start.get(seq)
            if same is not None and ((rend[same] >= seq + ln) & (rt[same] < t)).any():
                out[idx] = True
                continue
            # re-segmented data: any earlier delivered packet covering the whole range
            before = rt < t
            out[idx] = bool(((rrel[before] <= seq) & (rend[before] >= seq + ln)).any())
    return out
