"""Put queue counters, capture-inferred losses and kernel TCP counters side by side.

No single source is trusted alone. On an OVS-userspace egress port `tc -s qdisc`
counts failed enqueue attempts, not lost packets (measured: about twice what TCP
lost). Why, from OVS's lib/netdev-linux.c (netdev_linux_sock_batch_send): the datapath
hands a port a batch of packets with sendmmsg() on an AF_PACKET socket; when the queue
is full, the packet that fails is counted as a drop, sendmmsg returns the number sent
before it, and OVS calls it again from that packet: if the queue is still full it is
counted a second time and the rest of the batch is discarded uncounted; if a slot freed
meanwhile it is delivered after having been counted. (A packet refused as the first of a
call makes sendmmsg fail outright: counted once, the rest discarded uncounted.) So one
lost packet may count 0, 1 or 2 tc drops and a delivered one 0 or 1: tc runs high when
most losses are the first packet of a retry, low when whole batch tails are discarded
(this project saw 0.44-1.52 x the captures' losses). Captures miss what
tcpdump itself dropped, and kernel counters include retransmissions the captures
explain differently (tail-loss probes resend data that was not lost; spurious
retransmissions resend data that arrived). The tables here show every source and the
notes say which known effect explains each difference.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from incastlab.topologies.fabricmap import FabricMap

from .pcap import ip_to_str
from .queues import path_ports, queue_deltas
from .rundir import counter_delta, host_by_ip, spine_lookup

# nstat counters worth showing next to the captures (name -> meaning)
KERNEL_COUNTERS = {
    "TcpRetransSegs": "segments retransmitted",
    "TcpExtTCPTimeouts": "RTO firings",
    "TcpExtTCPSlowStartRetrans": "segments retransmitted in loss state after an RTO "
                                 "(the first one, sent by the timer, is not counted)",
    "TcpExtTCPFastRetrans": "segments retransmitted in fast/SACK recovery",
    "TcpExtTCPSackRecovery": "SACK recoveries entered",
    "TcpExtTCPRenoRecovery": "Reno (no SACK) recoveries entered",
    "TcpExtTCPLossProbes": "tail-loss probes sent (also those carrying new data)",
    "TcpExtTCPSpuriousRTOs": "RTOs later found spurious (F-RTO)",
    "TcpExtTCPDSACKRecv": "D-SACKs received (a retransmission was not needed)",
    "TcpExtTCPLostRetransmit": "retransmissions lost again",
    "TcpExtTCPSynRetrans": "SYN retransmissions (not in the data-packet count)",
}


def _add(*values):
    vals = [v for v in values if v is not None]
    return float(sum(vals)) if vals else None


def capture_drop_total(manifest: dict) -> int | None:
    """Packets tcpdump reported dropped (kernel + interface), summed over captures.

    manifest['capture_drops'] is {iface: {captured, received, dropped_by_kernel,
    dropped_by_interface, ...}} (plain numbers are accepted too); None if absent."""
    drops = manifest.get("capture_drops")
    if not isinstance(drops, dict) or not drops:
        return None
    total = 0
    for v in drops.values():
        if isinstance(v, dict):
            total += sum(int(v.get(k) or 0) for k in ("dropped_by_kernel",
                                                       "dropped_by_interface"))
        elif isinstance(v, (int, float)):
            total += int(v)
    return total


def attribute_losses(lost: pd.DataFrame, fabric: FabricMap | None, queues: pd.DataFrame,
                     flow_paths: pd.DataFrame | None = None,
                     window_s: float = 0.05) -> pd.DataFrame:
    """Add `port` and `attributed_by` to capture-inferred losses.

    For each lost packet the candidate ports are the egress ports of its path
    (`queues.path_ports`; the spine from flow_paths.csv when the controller recorded
    one, else every spine). Captures on switch ports along the path narrow them: a
    capture on egress port X that saw the lost packet puts the drop after X, one that
    saw the flow but not this packet puts it at or before X. The port chosen is the
    candidate whose tc drop counter rose most in the queue samples covering
    [t, t + window_s] ('queue-drops'); else the last candidate the captures leave (the
    captured port itself when it did not see the packet) ('captures'); else the last
    candidate, the receiver's leaf port ('last-hop'); without fabric.json, '?->dst'
    ('no-fabric').
    """
    out = lost.copy()
    if out.empty:
        return out.assign(port=pd.Series(dtype=object), attributed_by=pd.Series(dtype=object))
    ip_host = host_by_ip(fabric)
    # per port: sample times and cumulative drop increases, for O(log n) window sums
    drops_at = {}
    max_dt = 0.0
    if not queues.empty:
        dq = queue_deltas(queues)
        max_dt = float(dq["dt"].max())
        for iface, g in dq.groupby("iface"):
            g = g.sort_values("t")
            drops_at[iface] = (g["t"].to_numpy(), np.concatenate([[0.0],
                                                                  np.cumsum(g["d_drops"])]))
    spine_of = spine_lookup(flow_paths)
    paths = {}
    ports, how = [], []
    for r in out.itertuples(index=False):
        src, dst = ip_to_str(r.src), ip_to_str(r.dst)
        sh, dh = ip_host.get(src), ip_host.get(dst)
        if not sh or not dh:
            ports.append(f"?->{dst}")
            how.append("no-fabric")
            continue
        spine = spine_of(src, dst, r.sport, r.dport)
        if (sh, dh, spine) not in paths:
            paths[(sh, dh, spine)] = path_ports(fabric, sh, dh, spine)
        cands = paths[(sh, dh, spine)]
        narrowed = False
        via = [v for v in (getattr(r, "via", "") or "").split(",") if v in cands]
        seen = set((getattr(r, "seen_at", "") or "").split(","))
        for v in via:  # a capture on egress port v sees what left v's queue
            if v not in cands:
                continue  # narrowed away: the flow crossed v on another path (failover)
            k = cands.index(v)
            cands = cands[k + 1:] if v in seen else cands[:k + 1]
            narrowed = True
        best, best_drops = None, 0.0
        for c in cands:  # a drop at time t shows in the first sample taken after t
            if c not in drops_at:
                continue
            ts, cum = drops_at[c]
            lo = np.searchsorted(ts, r.t, "left")
            hi = np.searchsorted(ts, r.t + window_s + max_dt, "right")
            d = cum[hi] - cum[lo]
            if d > best_drops:
                best, best_drops = c, d
        if best is not None:
            ports.append(best)
            how.append("queue-drops")
        elif narrowed and cands:
            ports.append(cands[-1])
            how.append("captures")
        else:
            ports.append(cands[-1] if cands else f"?->{dst}")
            how.append("last-hop")
    out["port"] = ports
    out["attributed_by"] = how
    return out


def port_table(queue_summary: pd.DataFrame, attributed: pd.DataFrame) -> pd.DataFrame:
    """Per egress port: tc drops vs capture-inferred losses attributed to it.

    Columns: iface, kind, tc_drops, capture_losses, difference (tc - capture),
    ratio (tc / capture), and how the losses were placed there: at_tc_drop (a tc drop
    on this port at that time), by_captures (switch-port captures), unmatched (no
    drop counted anywhere on the path then: put on the last hop by default).
    """
    losses = (attributed.groupby("port").size() if len(attributed)
              else pd.Series(dtype=float))
    how = (attributed.groupby(["port", "attributed_by"]).size() if len(attributed)
           else pd.Series(dtype=float))
    ports = list(queue_summary["iface"]) if len(queue_summary) else []
    ports += [p for p in losses.index if p not in ports]
    rows = []
    qs = queue_summary.set_index("iface") if len(queue_summary) else None
    for p in ports:
        tc = float(qs.loc[p, "drops"]) if qs is not None and p in qs.index else np.nan
        cl = float(losses.get(p, 0))
        if (tc == 0 or np.isnan(tc)) and cl == 0:
            continue
        rows.append({"iface": p, "kind": qs.loc[p, "kind"] if qs is not None and p in qs.index
                     else None, "tc_drops": tc, "capture_losses": cl,
                     "difference": tc - cl if not np.isnan(tc) else np.nan,
                     "ratio": tc / cl if cl > 0 and not np.isnan(tc) else np.nan,
                     "at_tc_drop": int(how.get((p, "queue-drops"), 0)),
                     "by_captures": int(how.get((p, "captures"), 0)),
                     "unmatched": int(how.get((p, "last-hop"), 0))})
    return pd.DataFrame(rows, columns=["iface", "kind", "tc_drops", "capture_losses",
                                       "difference", "ratio", "at_tc_drop", "by_captures",
                                       "unmatched"])


def host_table(retrans: pd.DataFrame, counters: pd.DataFrame,
               fabric: FabricMap | None) -> pd.DataFrame:
    """Per host: kernel TcpRetransSegs / timeouts / loss probes vs the captures' counts of
    retransmissions, RTO firings and TLPs of flows that host sent."""
    ip_host = host_by_ip(fabric)
    cap = {}
    if len(retrans):
        r = retrans.assign(host=[ip_host.get(ip_to_str(s), ip_to_str(s)) for s in retrans["src"]])
        for host, g in r.groupby("host"):
            cap[host] = {"capture_retrans": len(g),
                         "capture_rto": int((g["event"] & (g["kind"] == "rto")).sum()),
                         "capture_tlp": int((g["event"] & (g["kind"] == "tlp")).sum())}
    hosts = sorted(set(cap) | (set(counters["host"]) if len(counters) else set()),
                   key=_natural)
    rows = []
    for h in hosts:
        k = counters[counters["host"] == h] if len(counters) else counters

        def kv(name, k=k):
            s = k[k["counter"] == name]["delta"].dropna() if len(k) else []
            return float(s.sum()) if len(s) else np.nan

        rows.append({"host": h, "kernel_retrans_segs": kv("TcpRetransSegs"),
                     **cap.get(h, {"capture_retrans": 0, "capture_rto": 0, "capture_tlp": 0}),
                     "kernel_timeouts": kv("TcpExtTCPTimeouts"),
                     "kernel_loss_probes": kv("TcpExtTCPLossProbes")})
    return pd.DataFrame(rows, columns=["host", "kernel_retrans_segs", "capture_retrans",
                                       "capture_rto", "capture_tlp", "kernel_timeouts",
                                       "kernel_loss_probes"])


def _natural(name: str):
    digits = "".join(c for c in name if c.isdigit())
    return (name.rstrip("0123456789"), int(digits) if digits else 0, name)


def reconcile(*, queue_summary: pd.DataFrame, attributed: pd.DataFrame,
              retrans: pd.DataFrame, spurious: pd.Series | None, counters: pd.DataFrame,
              manifest: dict, captured_flows: int = 0, fabric: FabricMap | None = None,
              both_ends_flows: int | None = None) -> dict:
    """The run's reconciliation: totals from every source, per-port and per-host tables,
    and notes explaining the differences.

    Returns {'totals': DataFrame(measure, source, value, meaning), 'ports': DataFrame,
    'hosts': DataFrame, 'notes': [str], 'numbers': {flat dict for metrics.json}}.
    """
    tc_drops = float(queue_summary["drops"].sum()) if len(queue_summary) else None
    # losses (and spurious retransmissions) need flows captured at both ends
    both = captured_flows if both_ends_flows is None else both_ends_flows
    cap_losses = int(len(attributed)) if both else None
    cap_retrans = int(len(retrans)) if captured_flows else None
    n = _capture_counts(retrans, spurious, captured_flows, both)
    k = {name: counter_delta(counters, name) for name in KERNEL_COUNTERS}
    cap_drop_total = capture_drop_total(manifest)
    totals = pd.DataFrame(_total_rows(tc_drops, cap_losses, cap_retrans, n, k, cap_drop_total),
                          columns=["measure", "source", "value", "meaning"])
    notes = _notes(tc_drops, cap_losses, cap_retrans, n, k, cap_drop_total, manifest,
                   captured_flows, both)
    numbers = {"tc_drops": tc_drops, "capture_losses": cap_losses,
               "capture_retrans": cap_retrans, "capture_rto": n["rto"],
               "capture_fast": n["fast"], "capture_recoveries": n["recov"],
               "capture_recovery_retrans": n["rec_pkts"], "capture_rto_retrans": n["rto_pkts"],
               "capture_tlp": n["tlp"],
               "capture_spurious": n["spur"],
               "kernel": {name: v for name, v in k.items()}, "capture_drops": cap_drop_total}
    return {"totals": totals,
            "ports": port_table(queue_summary, attributed),
            "hosts": host_table(retrans, counters, fabric),
            "notes": notes, "numbers": numbers}


def _capture_counts(retrans: pd.DataFrame, spurious: pd.Series | None, captured_flows: int,
                    both) -> dict:
    """The captures' counts of recovery events and retransmitted packets by kind, and of
    spurious retransmissions (None: not measurable from these captures)."""
    def count(mask):
        return int(mask.sum()) if len(retrans) and captured_flows else None

    ev = retrans["event"].astype(bool) if len(retrans) else pd.Series(dtype=bool)
    kind = retrans["kind"] if len(retrans) else pd.Series(dtype=object)
    n_rto = count(ev & (kind == "rto"))
    n_tlp = count(ev & (kind == "tlp"))
    n_fast = count(ev & (kind == "fast"))
    n_recov = count(ev & kind.isin(["fast", "other"]))
    n_rec_pkts = count(kind.isin(["fast", "other"]))
    n_rto_pkts = count(kind == "rto")
    if captured_flows and not len(retrans):
        n_rto = n_tlp = n_fast = n_recov = n_rec_pkts = n_rto_pkts = 0
    n_spur = int(pd.Series(spurious).fillna(False).astype(bool).sum()) \
        if spurious is not None and len(spurious) else 0
    n_spur = n_spur if both else None
    return {"rto": n_rto, "tlp": n_tlp, "fast": n_fast, "recov": n_recov,
            "rec_pkts": n_rec_pkts, "rto_pkts": n_rto_pkts, "spur": n_spur}


def _total_rows(tc_drops, cap_losses, cap_retrans, n: dict, k: dict,
                cap_drop_total) -> list[tuple]:
    """(measure, source, value, meaning) of every source, measure by measure."""
    n_rto, n_tlp, n_fast, n_recov = n["rto"], n["tlp"], n["fast"], n["recov"]
    n_rec_pkts, n_rto_pkts, n_spur = n["rec_pkts"], n["rto_pkts"], n["spur"]
    return [
        ("packets dropped", "tc queue counters (sum of ports)", tc_drops,
         "qdisc drop counters, last minus first sample"),
        ("packets dropped", "captures (sender side, never at receiver)", cap_losses,
         "matched by flow, sequence and IP id between capture points"),
        ("retransmitted segments", "kernel TcpRetransSegs (sum of hosts)", k["TcpRetransSegs"],
         KERNEL_COUNTERS["TcpRetransSegs"]),
        ("retransmitted segments", "captures", cap_retrans, "data packets sent again"),
        ("segments resent in fast/SACK recovery", "kernel TcpExtTCPFastRetrans",
         k["TcpExtTCPFastRetrans"], KERNEL_COUNTERS["TcpExtTCPFastRetrans"]),
        ("segments resent in fast/SACK recovery", "captures (kinds fast + other)", n_rec_pkts,
         "retransmissions not caused by an RTO or a tail-loss probe"),
        ("segments resent after an RTO", "kernel TCPTimeouts + TCPSlowStartRetrans",
         _add(k["TcpExtTCPTimeouts"], k["TcpExtTCPSlowStartRetrans"]),
         "the timer's own retransmission plus those in loss state"),
        ("segments resent after an RTO", "captures (kind rto)", n_rto_pkts,
         "retransmissions after >= the RTO threshold of silence, and the rest of that "
         "recovery"),
        ("RTO firings", "kernel TcpExtTCPTimeouts", k["TcpExtTCPTimeouts"], "RTO timer fired"),
        ("RTO firings", "captures", n_rto, "retransmission after >= the RTO threshold of "
         "silence (also a backed-off repeat)"),
        ("loss recoveries entered", "kernel TCPSackRecovery + TCPRenoRecovery",
         _add(k["TcpExtTCPSackRecovery"], k["TcpExtTCPRenoRecovery"]),
         "fast/SACK recovery episodes"),
        ("loss recoveries entered", "captures (fast + other episodes)", n_recov,
         f"of which {n_fast} after >= 3 duplicate ACKs or 3 SACKed segments; the rest "
         "RACK-timed" if n_fast is not None else ""),
        ("tail-loss probes", "kernel TcpExtTCPLossProbes", k["TcpExtTCPLossProbes"],
         KERNEL_COUNTERS["TcpExtTCPLossProbes"]),
        ("tail-loss probes", "captures", n_tlp,
         "the highest segment resent before the RTO threshold; probes with new data are "
         "not retransmissions and not seen here"),
        ("spurious retransmissions", "captures (data had already arrived)",
         n_spur, "needs a receiver-side capture"),
        ("spurious retransmissions", "kernel TcpExtTCPDSACKRecv", k["TcpExtTCPDSACKRecv"],
         KERNEL_COUNTERS["TcpExtTCPDSACKRecv"]),
        ("capture drops", "tcpdump (manifest)", cap_drop_total,
         "packets tcpdump itself did not record"),
    ]


def _notes(tc_drops, cap_losses, cap_retrans, n: dict, k: dict, cap_drop_total,
           manifest: dict, captured_flows: int, both) -> list[str]:
    """The notes that say which known effect explains each difference between sources."""
    n_tlp, n_spur = n["tlp"], n["spur"]
    notes = []
    if captured_flows == 0:
        notes.append("No TCP payload in any capture: capture-based columns are empty; the "
                     "queue and kernel counters are shown unreconciled.")
    if tc_drops is not None and cap_losses:
        ratio = tc_drops / cap_losses
        msg = (f"tc counted {tc_drops:.0f} drops, the captures show {cap_losses} packets "
               f"lost (ratio {ratio:.2f}).")
        if ratio > 1.3 and manifest.get("datapath") == "user":
            msg += (" On the OVS userspace datapath tc counts failed enqueue attempts, and "
                    "OVS retries a refused packet once unless it was the first of its send "
                    "call (counted twice if refused again); "
                    "trust the captures for packets lost.")
        elif ratio > 1.3:
            msg += (" More tc drops than captured losses: flows through these ports may not "
                    "have been captured at both ends.")
        elif ratio < 0.77:
            msg += (" Fewer tc drops than captured losses: packets were lost where no queue "
                    "counts them (the OVS userspace datapath discards the rest of a batch, "
                    "uncounted, when a send to a full queue fails twice; an overloaded "
                    "datapath; or tcpdump drops at the receiver-side capture).")
            msg += (" The fidelity verdict counts the difference at each port as losses the "
                    "datapath did not account for.")
        notes.append(msg)
    elif tc_drops and not cap_losses:
        notes.append(f"tc counted {tc_drops:.0f} drops; the captures show none (flows not "
                     "captured at both ends, or no pcaps). Never report a queue counter alone.")
    if cap_retrans is not None and k["TcpRetransSegs"] is not None:
        d = k["TcpRetransSegs"] - cap_retrans
        msg = (f"Kernel TcpRetransSegs {k['TcpRetransSegs']:.0f} vs {cap_retrans} "
               f"retransmissions in the captures (difference {d:+.0f}).")
        if d > 0:
            msg += (" The kernel also counts SYN/FIN retransmissions and retransmissions of "
                    "flows not captured at the sender")
            if cap_drop_total:
                msg += f", and tcpdump dropped {cap_drop_total} packets"
            msg += "."
        notes.append(msg)
    if captured_flows and not both:
        notes.append("No flow was captured at both ends, so losses and spurious "
                     "retransmissions cannot be inferred from the captures.")
    if cap_retrans is not None and cap_losses is not None:
        notes.append(
            f"Retransmissions ({cap_retrans}) minus losses ({cap_losses}) = "
            f"{cap_retrans - cap_losses}: {n_tlp} tail-loss probe(s) and {n_spur} spurious "
            "retransmission(s) resend data that was not lost; a retransmission that is lost "
            "again counts in both.")
    return notes
