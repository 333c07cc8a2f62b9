"""Did the emulation keep up? The run's fidelity verdict, from the datapath's own evidence.

A run is trusted as an emulation of its fabric when the datapath did what the fabric
says: every packet it lost was lost at a queue tc counts, and every shaped port sent at
its rate whenever it had packets to send. The verdict (`kept_up`) is false when any of
these shows otherwise:

- ``uncounted_losses``: packets the captures saw lost at a port beyond what tc counted
  there (reconcile.port_table: the same per-port reconciliation the report shows).
  Losses while a link or switch is down by an event are the event's, not counted here.
- ``datapath_drops``: the datapath's own drop counters over the workload (the runner's
  ``manifest.fidelity.counters``, incastlab/capture/datapath.py): ovs-vswitchd's packet
  sockets' drops, the ports' RX/TX drops and errors, upcalls lost, OVS's drop reasons.
- ``below_rate``: a shaped switch port that sent less than its rate while it had a
  backlog (Mininet-HiFi's invariant), from queues.csv (`below_rate`).
- ``capture_drops``: tcpdump lost packets, so the captures themselves did not keep up.

The CPU samples (manifest ``cpu``) are supporting evidence only: they are shown beside
the verdict and never decide it (a busy machine may keep up; an idle one may not).

Where each part is computed: the run-time counters and capture drops are judged by the
runner when the run ends (`runtime_verdict`, written to ``manifest.json`` ``fidelity``);
the captures' and queues' evidence by the analysis (`verdict`, ``metrics.json``
``fidelity``), which re-judges the manifest's counters with the same function and adds
its own. metrics.json's verdict is authoritative: a manifest's ``kept_up: false`` is
always false there too; a manifest's ``true`` says only that the run-time counters saw
nothing.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from incastlab.topologies.fabricmap import DEFAULT_MTU, frame_bytes

from .failover import read_event_rows
from .reconcile import capture_drop_total, port_table

__all__ = ["AUTHORITY", "CHECKS", "below_rate", "datapath_drop_total", "failure_windows",
           "per_second", "runtime_verdict", "uncounted_losses", "verdict"]

AUTHORITY = ("metrics.json's fidelity is authoritative: it adds the captures' and queues' "
             "evidence to the run-time counters judged here (a false here is false there)")
CHECKS = {
    "uncounted_losses": "packets the captures saw lost at a port beyond tc's count there",
    "datapath_drops": "the datapath's own drop counters (sockets, ports, upcalls, OVS)",
    "below_rate": "shaped ports that sent below their rate while backlogged",
    "capture_drops": "packets tcpdump itself lost",
}
RUNTIME_CHECKS = ("datapath_drops", "capture_drops")
NETWORK_FAILURES = ("link_down", "switch_down", "link_up", "switch_up")
FAILURE_GRACE_S = 1.0  # after a link or switch is back, its flows' losses still its own


def _item(check: str, amount: float, unit: str, where: dict, text: str) -> dict:
    return {"check": check, "amount": amount, "unit": unit, "where": where, "text": text}


def _plural(n: float, word: str) -> str:
    return f"{n:,.0f} {word}{'' if n == 1 else 's'}"


# --- run-time evidence (the runner judges it at the run's end) -------------------------

def datapath_drop_total(counters: dict) -> tuple[int, dict]:
    """(packets, {source: packets}) the datapath's counters say it dropped: socket drops
    per port and of the send socket, ports' RX/TX drops and errors, upcalls lost and
    OVS's drop reasons (counters as incastlab/capture/datapath.delta returns them)."""
    where: dict = {}
    for port, n in (counters.get("socket_drops") or {}).items():
        where[f"receive socket {port}"] = n
    if counters.get("send_socket_drops"):
        where["send socket"] = counters["send_socket_drops"]
    for port, grown in (counters.get("port_drops") or {}).items():
        for name, n in grown.items():
            where[f"{port} {name}"] = n
    if counters.get("lookups_lost"):
        where["upcalls lost"] = counters["lookups_lost"]
    for name, n in (counters.get("coverage_drops") or {}).items():
        where[name] = n
    where = {k: int(v) for k, v in where.items() if v}
    return sum(where.values()), where


def _runtime_evidence(manifest: dict) -> tuple[list[dict], dict]:
    """(evidence, {check: why not checked}) from the manifest's counters and tcpdump's."""
    evidence, unchecked = [], {}
    counters = (manifest.get("fidelity") or {}).get("counters") \
        if isinstance(manifest.get("fidelity"), dict) else None
    if not isinstance(counters, dict):
        unchecked["datapath_drops"] = "the run recorded no datapath counters (manifest fidelity)"
    else:
        total, where = datapath_drop_total(counters)
        if total:
            evidence.append(_item("datapath_drops", total, "packets", where,
                                  f"the datapath's own counters show {_plural(total, 'drop')} "
                                  "no queue counted (" + ", ".join(
                                      f"{k}: {v:,}" for k, v in list(where.items())[:4]) + ")"))
        if counters.get("not_read"):
            unchecked["datapath_drops"] = "partly: " + "; ".join(counters["not_read"])[:300]
    drops = capture_drop_total(manifest)
    if drops is None:
        unchecked["capture_drops"] = ("the manifest has no tcpdump statistics (no captures, "
                                      "or not recorded)")
    elif drops:
        lossy = {i: int((s or {}).get("dropped_by_kernel") or 0)
                 + int((s or {}).get("dropped_by_interface") or 0)
                 for i, s in (manifest.get("capture_drops") or {}).items() if isinstance(s, dict)}
        evidence.append(_item("capture_drops", drops, "packets",
                              {i: n for i, n in lossy.items() if n},
                              f"tcpdump lost {_plural(drops, 'packet')}, so the captures "
                              "did not keep up"))
    return evidence, unchecked


def _supporting(manifest: dict) -> dict:
    """The CPU samples, beside the verdict (never deciding it)."""
    cpu = manifest.get("cpu") if isinstance(manifest.get("cpu"), dict) else {}
    if not cpu:
        return {"cpu": None, "text": "CPU use was not recorded"}
    busy, sat = cpu.get("mean_busy"), cpu.get("saturated")
    text = (f"the machine was {busy:.0%} busy on average" if isinstance(busy, (int, float))
            else "CPU use was sampled")
    text += ", saturated by the CPU rule" if sat else ", not saturated by the CPU rule"
    return {"cpu": {k: cpu.get(k) for k in ("mean_busy", "max_busy", "saturated",
                                             "vswitchd_max_core_share", "rule", "samples")},
            "text": text + " (supporting evidence only)"}


def _judged(evidence: list[dict], unchecked: dict, manifest: dict, checked: list) -> dict:
    kept = not evidence
    text = ("The datapath kept up: " + ", ".join(CHECKS[c] for c in checked) + ": none"
            if kept else "The emulation did not keep up: " + "; ".join(e["text"]
                                                                       for e in evidence))
    return {"kept_up": kept, "evidence": evidence, "checked": checked,
            "not_checked": unchecked, "supporting": _supporting(manifest), "text": text + "."}


def runtime_verdict(manifest: dict) -> dict:
    """The manifest's verdict at the run's end: the datapath counters (already in
    ``manifest['fidelity']['counters']``) and tcpdump's drops; the CPU as support."""
    evidence, unchecked = _runtime_evidence(manifest)
    checked = [c for c in RUNTIME_CHECKS if c not in unchecked
               or unchecked[c].startswith("partly")]
    out = _judged(evidence, unchecked, manifest, checked)
    out["counters"] = (manifest.get("fidelity") or {}).get("counters")
    out["authority"] = AUTHORITY
    return out


# --- the analysis' evidence -------------------------------------------------------------

def failure_windows(run_dir) -> list[tuple[float, float]]:
    """[(start, end)] wall times while an event had a link or switch down
    (events.jsonl, read as failover.read_event_rows does: from the first such event to
    the last one or its undo, plus FAILURE_GRACE_S; an event never undone lasts to the
    end of time)."""
    rows = [r for r in read_event_rows(run_dir) if r.get("action") in NETWORK_FAILURES
            and isinstance(r.get("t"), (int, float))]
    if not rows:
        return []
    times = [r["t"] for r in rows] + [r["t_undo"] for r in rows
                                      if isinstance(r["t_undo"], (int, float))]
    never = any(r["action"].endswith("_down") and r["t_undo"] is None for r in rows) \
        and not any(r["action"].endswith("_up") for r in rows)
    end = math.inf if never else max(times) + FAILURE_GRACE_S
    return [(float(min(times)), end)]


def uncounted_losses(queue_summary: pd.DataFrame, attributed: pd.DataFrame,
                     windows=()) -> pd.DataFrame:
    """Per port: the captures' losses attributed there (outside the failure `windows`)
    beyond tc's drops there: iface, tc_drops, capture_losses, uncounted (> 0 only)."""
    lost = attributed
    if len(lost) and windows:
        t = lost["t"].astype(float)
        inside = np.zeros(len(lost), dtype=bool)
        for a, b in windows:
            inside |= ((t >= a) & (t <= b)).to_numpy()
        lost = lost[~inside]
    ports = port_table(queue_summary, lost)
    tc = ports["tc_drops"].fillna(0.0)
    ports = ports.assign(uncounted=(ports["capture_losses"] - tc).clip(lower=0))
    return ports[ports["uncounted"] > 0][["iface", "tc_drops", "capture_losses",
                                          "uncounted"]].reset_index(drop=True)


BELOW_COLUMNS = ["iface", "second", "rate_mbps", "owed_bytes", "sent_bytes",
                 "tolerance_bytes", "shortfall_bytes", "pieces", "below"]


def below_rate(queues_d: pd.DataFrame, fabric, t0: float,
               read_s: float | None = None) -> pd.DataFrame:
    """Per shaped switch port and second of the run: what it owed and sent while
    backlogged, and whether it fell short.

    In a sample interval that starts with B bytes queued, a shaper of rate R keeping its
    rate sends at least min(R·dt, B): the queue cannot run dry sooner. Consecutive such
    intervals within a second form a piece (an interval that starts with less than
    R·dt queued ends one); over a piece the owed bytes and the sent bytes (the queue's
    tc counter, exact) are summed, so the sampler's timing errors cancel inside it and
    count only at its two ends. A piece falls short when it sent less than owed by more
    than its tolerance: one full frame (HTB sends whole packets: a backlogged class is
    at most one frame behind its rate) plus R times the time a counter read can lag its
    sample's time (the tc call's duration, ``read_s``, the sampler's max_read_ms; never
    more than the interval to the next sample, which is all there is without it).
    `below`: a piece of that second fell short (shortfall_bytes: those pieces')."""
    rows = []
    if fabric is None or queues_d is None or queues_d.empty:
        return pd.DataFrame(columns=BELOW_COLUMNS)
    frame = frame_bytes(getattr(fabric, "mtu", DEFAULT_MTU) or DEFAULT_MTU)
    for iface, g in queues_d.groupby("iface", sort=True):
        egress = fabric.link_of_iface(iface)
        if egress is None or not egress.bw_mbps or "backlog_bytes" not in g:
            continue
        rows += _port_seconds(iface, g.sort_values("t", kind="stable"),
                              egress.bw_mbps, frame, t0, read_s)
    return pd.DataFrame(rows, columns=BELOW_COLUMNS)


def _port_seconds(iface, g, rate_mbps, frame, t0, read_s) -> list[dict]:
    """`below_rate`'s rows of one port (`g`: its queue_deltas rows in time order)."""
    rate = rate_mbps * 1e6 / 8  # bytes/s
    t = g["t"].to_numpy(dtype=float)
    start_backlog = g["backlog_bytes"].to_numpy(dtype=float)[:-1]
    dt = np.diff(t)
    sent = g["d_sent_bytes"].to_numpy(dtype=float)[1:]
    lag = dt if read_s is None else np.minimum(dt, read_s)
    backlogged = (start_backlog > 0) & (dt > 0)
    owed = np.minimum(rate * dt, start_backlog)
    second = np.floor(t[:-1] - t0).astype(int)
    idx = np.flatnonzero(backlogged)
    if not len(idx):
        return []
    # a new piece: not the next interval of the one before, another second, or the one
    # before could have run dry (started with less than an interval's worth queued)
    prev = idx - 1
    new = np.ones(len(idx), dtype=bool)
    new[1:] = (idx[1:] != idx[:-1] + 1) | (second[idx[1:]] != second[idx[:-1]]) \
        | (start_backlog[prev[1:]] < rate * dt[prev[1:]])
    pieces = pd.DataFrame({"piece": np.cumsum(new), "second": second[idx], "owed": owed[idx],
                           "sent": sent[idx], "lag": lag[idx]}).groupby("piece").agg(
        second=("second", "first"), owed=("owed", "sum"), sent=("sent", "sum"),
        lag=("lag", "max"))
    pieces["tol"] = frame + rate * pieces["lag"]
    pieces["short"] = pieces["owed"] - pieces["sent"]
    pieces["below"] = pieces["short"] > pieces["tol"]
    out = []
    for sec, p in pieces.groupby("second"):
        out.append({"iface": iface, "second": int(sec), "rate_mbps": float(rate_mbps),
                    "owed_bytes": float(p["owed"].sum()), "sent_bytes": float(p["sent"].sum()),
                    "tolerance_bytes": float(p["tol"].sum()),
                    "shortfall_bytes": float(p.loc[p["below"], "short"].sum()),
                    "pieces": int(len(p)), "below": bool(p["below"].any())})
    return out


def per_second(losses: pd.DataFrame, queues_d: pd.DataFrame, below: pd.DataFrame,
               t0: float, windows=()) -> pd.DataFrame:
    """Per second of the run with anything to say: captured losses, tc drops, the
    losses beyond tc's count per port within that second (a loss near a second's end
    may meet its tc drop in the next, so these need not add up to the run's), the ports
    below their rate and their shortfall (bytes)."""
    cols = ["second", "captured_losses", "tc_drops", "uncounted", "below_rate_ports",
            "shortfall_bytes"]
    lost = pd.DataFrame({"second": [], "port": []})
    if losses is not None and len(losses):
        t = losses["t"].astype(float)
        keep = np.ones(len(losses), dtype=bool)
        for a, b in windows:
            keep &= ~((t >= a) & (t <= b)).to_numpy()
        lost = pd.DataFrame({"second": np.floor(t[keep] - t0).astype(int),
                             "port": losses["port"][keep]})
    tc = pd.DataFrame({"second": [], "port": [], "d_drops": []})
    if queues_d is not None and len(queues_d):
        q = queues_d[queues_d["d_drops"] > 0]
        tc = pd.DataFrame({"second": np.floor(q["t"].astype(float) - t0).astype(int),
                           "port": q["iface"], "d_drops": q["d_drops"]})
    n_lost = lost.groupby(["second", "port"]).size()
    n_tc = tc.groupby(["second", "port"])["d_drops"].sum()
    both = pd.concat([n_lost.rename("lost"), n_tc.rename("tc")], axis=1).fillna(0.0)
    both["uncounted"] = (both["lost"] - both["tc"]).clip(lower=0)
    per = both.groupby(level=0).sum()
    rows = []
    slow = below[below["below"]] if below is not None and len(below) else below
    seconds = set(per.index) | (set(slow["second"]) if slow is not None and len(slow) else set())
    for s in sorted(seconds):
        here = slow[slow["second"] == s] if slow is not None and len(slow) else slow
        rows.append({"second": int(s),
                     "captured_losses": int(per["lost"].get(s, 0)),
                     "tc_drops": int(per["tc"].get(s, 0)),
                     "uncounted": int(per["uncounted"].get(s, 0)),
                     "below_rate_ports": ",".join(here["iface"]) if here is not None else "",
                     "shortfall_bytes": float(here["shortfall_bytes"].sum())
                     if here is not None else 0.0})
    return pd.DataFrame(rows, columns=cols)


def _blocked(a, needs: tuple[str, ...]) -> str | None:
    """Why a check cannot be made: the first of its inputs missing or damaged."""
    damaged = a.inputs.missing() if getattr(a, "inputs", None) is not None else {}
    for key in needs:
        why = a.missing.get(key) or damaged.get(key)
        if why:
            return why
    return None


def _read_bound_s(manifest: dict) -> float | None:
    """How long the queue sampler's slowest counter read took (s), if it said."""
    sampler = manifest.get("queue_sampler") if isinstance(manifest.get("queue_sampler"),
                                                          dict) else {}
    ms = sampler.get("max_read_ms")
    return float(ms) / 1e3 if isinstance(ms, (int, float)) and ms >= 0 else None


def _uncounted_item(unc: pd.DataFrame) -> dict:
    total = float(unc["uncounted"].sum())
    where = {r.iface: int(r.uncounted) for r in unc.itertuples(index=False)}
    ports = ", ".join(f"{p} {n:,}" for p, n in list(where.items())[:4])
    return _item("uncounted_losses", total, "packets", where,
                 f"the captures saw {_plural(total, 'packet')} lost beyond what tc counted "
                 f"at the same ports ({ports})")


def _below_item(below: pd.DataFrame) -> dict:
    slow = below[below["below"]]
    where = {str(p): int(n) for p, n in slow.groupby("iface").size().items()}
    short = float(slow["shortfall_bytes"].sum())
    ports = ", ".join(f"{p} in {_plural(n, 'second')}" for p, n in list(where.items())[:4])
    return _item("below_rate", short, "bytes", where,
                 f"shaped ports sent below their rate while backlogged ({ports}; "
                 f"{short / 1e3:,.1f} kB short beyond the tolerance)")


def verdict(a) -> dict:
    """metrics.json's fidelity (the authoritative verdict) of an Analysis: the run-time
    evidence re-judged from the manifest, the captures' uncounted losses and the shaped
    ports' rates; the tables behind it under 'uncounted', 'below' and 'per_second'."""
    m = a.manifest or {}
    evidence, unchecked = _runtime_evidence(m)
    windows = failure_windows(a.run_dir)
    empty = pd.DataFrame(columns=["iface", "tc_drops", "capture_losses", "uncounted"])
    unc, below = empty, pd.DataFrame(columns=BELOW_COLUMNS)
    why = _blocked(a, ("fabric", "pcap", "flows", "losses", "queues"))
    if why:
        unchecked["uncounted_losses"] = why
    else:
        unc = uncounted_losses(a.tables["queue_summary"], a.tables["losses"], windows)
        if len(unc):
            evidence.append(_uncounted_item(unc))
    why = _blocked(a, ("fabric", "queues"))
    if why:
        unchecked["below_rate"] = why
    else:
        below = below_rate(a.tables["queues_d"], a.fabric, a.t0, _read_bound_s(m))
        if len(below) and below["below"].any():
            evidence.append(_below_item(below))
    evidence.sort(key=lambda e: list(CHECKS).index(e["check"]))
    checked = [c for c in CHECKS if c not in unchecked or unchecked[c].startswith("partly")]
    out = _judged(evidence, unchecked, m, checked)
    seconds = per_second(a.tables.get("losses"), a.tables.get("queues_d"), below, a.t0,
                         windows)
    manifest_side = m.get("fidelity") if isinstance(m.get("fidelity"), dict) else {}
    out.update(per_second=seconds.to_dict(orient="records"),
               manifest_kept_up=manifest_side.get("kept_up"),
               failure_windows=[[a_, None if math.isinf(b) else b] for a_, b in windows],
               authority="this verdict (metrics.json) is authoritative; manifest.json's "
                         "judges only the run-time counters")
    return {"verdict": out, "uncounted": unc, "below": below, "per_second": seconds}
