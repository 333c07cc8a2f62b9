"""Where each iteration's time went: compute, transfer at the bound, and the causes of
the rest.

One row per rank × iteration (the `training.iterations` table, or incast rounds) is split
into seven parts that add up to its measured duration D = t_end − t_start (s):

    compute_s            the logged compute_s (with any injected straggler sleep),
                         clipped to [0, D]
    transfer_at_bound_s  the cost model's lower bound on the communication
                         (`analysis.alphabeta`), as given
    schedule_s           what the job's own order of sends adds above that bound on any
                         network (a sync PS pushes, then pulls; a pipelined PS could
                         overlap them), as given by the job, capped by the excess left
                         after the network causes
    rto_stall_s          excess time during which a flow this iteration depends on sat
                         silent waiting for its retransmission timer
    loss_recovery_s      excess time during a fast/SACK, tail-loss-probe or other
                         recovery episode (or the slow climb back after an RTO) of such
                         a flow, not already counted as an RTO stall
    straggler_wait_s     the logged wait_s (the PS held the gradient for the barrier;
                         NaN, as the ring logs it, counts 0), not already explained
    unexplained_s        the rest

The rule. Let E = D − compute − bound, the excess over the least the iteration could
take. If E < 0 the iteration was faster than the bound (the bound's assumptions did not
hold for it, e.g. a steady-state bound beaten by one early-answered worker): the three
causes are 0, unexplained_s = E < 0 and `below_bound` is True — the one case in which a
part is negative. Otherwise E is handed out in this order, each part capped by what is
left: RTO stalls (the overlap of RTO silences with the iteration's communication
window), then the job's schedule, then loss recovery (the overlap of recovery episodes
with that window, minus the time already under an RTO silence), then the logged wait,
and unexplained_s gets the remainder (>= 0). An RTO silence stops a flow the iteration
waits on, so it comes first; the schedule's share is known before the run; a flow in
fast/SACK recovery keeps sending (and a shared port keeps serving the other flows), so
an overlap with recovery is an upper limit of its cost and comes after both.
Network causes come before the wait because a worker that waits at the
barrier while the flow it depends on is stalled waits *because of* that stall; a wait
with no network event under it stays a straggler wait. Unexplained time is what the
model does not capture: scheduling (e.g. a PS answering everyone at once so nobody
starts early), queueing without loss, CPU, ECMP collisions above an even-spread bound.

The communication window is [t_start + compute_s, t_end]: both apps compute first, so
a stall during compute does not delay the iteration. Time covered by several intervals
is counted once (intervals are merged before they are measured). A flow counts for an
iteration when one of its two hosts is the iteration's host or one of `depends_on`
(e.g. the PS hosts for a sync PS: every worker's barrier waits on every flow into the
PS; every ring host for a ring: a stall anywhere holds the whole ring).

The network's cost over the bound (`run_summary`) = measured − compute − transfer at
the bound − schedule − straggler wait = rto_stall + loss_recovery + unexplained.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from .pcap import ip_to_str

PARTS = ["compute_s", "transfer_at_bound_s", "schedule_s", "rto_stall_s", "loss_recovery_s",
         "straggler_wait_s", "unexplained_s"]
INTERVAL_COLUMNS = ["flow", "src_ip", "dst_ip", "start", "end", "kind"]
ID_COLUMNS = ["rank", "iteration", "round", "host", "t_start", "t_end"]
OUT_COLUMNS = [*ID_COLUMNS, "duration_s", "bound_s", *PARTS, "rto_overlap_s",
               "recovery_overlap_s", "wait_logged_s", "below_bound", "host_ip_known"]


def _ip(x) -> str:
    """Dotted quad from a uint32 (pcap tables) or a string (already dotted)."""
    return x if isinstance(x, str) else ip_to_str(int(x))


def rto_intervals(retrans: pd.DataFrame) -> pd.DataFrame:
    """RTO silences from `tcp.retransmissions`' retrans table: one row per RTO firing
    (rows with `event` true and `kind` 'rto'), from the flow's last packet before it (in
    either direction, at the sender's capture: t − gap_s) to the RTO retransmission (t).
    A backed-off second firing gets its own interval (its silence since the first).

    Needs columns flow, src, dst (uint32 or dotted), t, gap_s, kind, event.
    Returns INTERVAL_COLUMNS: flow, src_ip, dst_ip (dotted), start, end (s), kind 'rto'.
    """
    if retrans is None or retrans.empty:
        return pd.DataFrame(columns=INTERVAL_COLUMNS)
    r = retrans[retrans["event"].astype(bool) & (retrans["kind"] == "rto")]
    r = r[np.isfinite(pd.to_numeric(r["gap_s"], errors="coerce"))]
    out = pd.DataFrame({"flow": r["flow"].to_numpy(),
                        "src_ip": [_ip(x) for x in r["src"]],
                        "dst_ip": [_ip(x) for x in r["dst"]],
                        "start": (r["t"] - r["gap_s"]).to_numpy(dtype=float),
                        "end": r["t"].to_numpy(dtype=float), "kind": "rto"},
                       columns=INTERVAL_COLUMNS)
    return out.sort_values("start", kind="stable").reset_index(drop=True)


def recovery_intervals(episodes: pd.DataFrame, retrans: pd.DataFrame) -> pd.DataFrame:
    """Recovery episodes of `tcp.retransmissions` as intervals: from the episode's first
    retransmission (`start`) to the ACK that ended it (`end`); an episode the capture
    never saw end runs to its last retransmission. Every kind is kept (fast, tlp, other
    and rto: after an RTO the flow climbs back from one segment, which is recovery too);
    `attribute` counts RTO silences first, so no time is counted twice.

    Needs episodes: episode, flow, kind, start, end; retrans: episode, src, dst, t (the
    hosts' addresses come from the episode's retransmissions).
    Returns INTERVAL_COLUMNS: flow, src_ip, dst_ip, start, end (s), kind.
    """
    if episodes is None or episodes.empty or retrans is None or retrans.empty:
        return pd.DataFrame(columns=INTERVAL_COLUMNS)
    by_ep = retrans.groupby("episode").agg(src=("src", "first"), dst=("dst", "first"),
                                           last=("t", "max"))
    ep = episodes.join(by_ep, on="episode", how="inner")
    end = pd.to_numeric(ep["end"], errors="coerce")
    end = end.where(end.notna(), ep["last"])
    out = pd.DataFrame({"flow": ep["flow"].to_numpy(),
                        "src_ip": [_ip(x) for x in ep["src"]],
                        "dst_ip": [_ip(x) for x in ep["dst"]],
                        "start": ep["start"].to_numpy(dtype=float),
                        "end": end.to_numpy(dtype=float), "kind": ep["kind"].to_numpy()},
                       columns=INTERVAL_COLUMNS)
    return out.sort_values("start", kind="stable").reset_index(drop=True)


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (starts, ends)."""
    keep = np.isfinite(starts) & np.isfinite(ends) & (ends > starts)
    s, e = starts[keep], ends[keep]
    if len(s) == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # a new run starts where an interval begins after everything before it has ended
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    idx = np.flatnonzero(new)
    run_end = np.maximum.reduceat(e, idx)
    return s[idx], run_end


def _overlap(merged: tuple[np.ndarray, np.ndarray], a: float, b: float) -> float:
    """Seconds of [a, b] covered by the merged intervals."""
    s, e = merged
    if len(s) == 0 or b <= a:
        return 0.0
    lo = np.searchsorted(e, a, "right")
    hi = np.searchsorted(s, b, "left")
    if hi <= lo:
        return 0.0
    cov = np.minimum(e[lo:hi], b) - np.maximum(s[lo:hi], a)
    return float(np.clip(cov, 0.0, None).sum())


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric column; absent or NaN values are 0."""
    if name not in df:
        return np.zeros(len(df))
    return pd.to_numeric(df[name], errors="coerce").fillna(0.0).to_numpy(dtype=float)


def attribute(iterations: pd.DataFrame, bound_s, rto_intervals: pd.DataFrame | None = None,
              recovery_intervals: pd.DataFrame | None = None, *,
              schedule_s=0.0, host_ips: dict[str, str] | None = None,
              depends_on: Iterable[str] = ()) -> pd.DataFrame:
    """Split every iteration into the six PARTS (module docstring for the rule).

    iterations: one row per rank × iteration with t_start, t_end (epoch s), host (the
      emulated host name, e.g. 'h3'), and optionally compute_s and wait_s (absent or NaN
      = 0; incast rounds have neither), rank, iteration, round (kept as given).
    bound_s: the lower bound of the communication of one iteration (s): one number, or
      one per row (array or Series aligned with `iterations`).
    rto_intervals, recovery_intervals: tables of INTERVAL_COLUMNS (`rto_intervals()`,
      `recovery_intervals()`); None = no captures (those parts are 0, and the excess is
      unexplained).
    schedule_s: what the job's schedule adds per iteration above the bound (s; one
      number or one per row; `Job.schedule_s`), 0 by default.
    host_ips: {host name: dotted IP} (fabric.json); a row whose host has no IP here gets
      no network cause (`host_ip_known` False).
    depends_on: host names whose flows every iteration waits on besides its own host's.

    Returns one row per input row (same order) with OUT_COLUMNS: the id columns present
    in the input, duration_s, bound_s, the PARTS (summing to duration_s), the raw
    overlaps rto_overlap_s and recovery_overlap_s (before capping by the excess),
    wait_logged_s, below_bound, host_ip_known. A row without t_start, t_end or a bound
    (NaN) gets NaN parts; `run_summary` leaves it out and counts it.
    """
    it = iterations.reset_index(drop=True)
    n = len(it)
    bound = _per_row(bound_s, n, "bound_s")
    t0 = pd.to_numeric(it["t_start"], errors="coerce").to_numpy(dtype=float)
    t1 = pd.to_numeric(it["t_end"], errors="coerce").to_numpy(dtype=float)
    dur = t1 - t0
    compute = np.clip(_col(it, "compute_s"), 0.0, np.maximum(dur, 0.0))
    sched = _per_row(schedule_s, n, "schedule_s")
    wait_logged = np.clip(_col(it, "wait_s"), 0.0, None)
    host_ips = host_ips or {}
    extra = {host_ips[h] for h in depends_on if h in host_ips}
    rto = rto_intervals if rto_intervals is not None else pd.DataFrame(
        columns=INTERVAL_COLUMNS)
    rec = recovery_intervals if recovery_intervals is not None else pd.DataFrame(
        columns=INTERVAL_COLUMNS)
    r_ov, q_ov, known = _network_overlaps(it, t0 + compute, t1, dur, rto, rec, host_ips,
                                          extra)
    excess = dur - compute - bound
    below = excess < 0
    left = np.maximum(excess, 0.0)
    rto_s = np.minimum(r_ov, left)
    left = left - rto_s
    sched_s = np.minimum(np.maximum(sched, 0.0), left)
    left = left - sched_s
    rec_s = np.minimum(q_ov, left)
    left = left - rec_s
    wait_s = np.minimum(wait_logged, left)
    # the remainder, computed from the duration so the parts add up to it exactly
    unexplained = dur - compute - bound - sched_s - rto_s - rec_s - wait_s
    out = pd.DataFrame({c: it[c].to_numpy() for c in ID_COLUMNS if c in it})
    out["duration_s"] = dur
    out["bound_s"] = bound
    out["compute_s"] = compute
    out["transfer_at_bound_s"] = bound
    out["schedule_s"] = sched_s
    out["rto_stall_s"] = rto_s
    out["loss_recovery_s"] = rec_s
    out["straggler_wait_s"] = wait_s
    out["unexplained_s"] = unexplained
    out["rto_overlap_s"] = r_ov
    out["recovery_overlap_s"] = q_ov
    out["wait_logged_s"] = wait_logged
    out["below_bound"] = below
    out["host_ip_known"] = known
    return out


def _per_row(values, n: int, name: str) -> np.ndarray:
    """One float per row from one number or one per row (array or Series); a ValueError
    naming `name` for any other length."""
    arr = np.asarray(values, dtype=float)
    arr = np.full(n, float(arr)) if arr.ndim == 0 else arr.reshape(-1)
    if len(arr) != n:
        raise ValueError(f"{name}: expected one value or {n}, got {len(arr)}")
    return arr


def _network_overlaps(it: pd.DataFrame, a: np.ndarray, b: np.ndarray, dur: np.ndarray,
                      rto: pd.DataFrame, rec: pd.DataFrame, host_ips: dict,
                      extra: set) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: seconds of its communication window [a, b] under an RTO silence, under
    a recovery episode and no RTO silence, of the flows touching its host's IP or
    `extra`; and whether its host has an IP (no IP or no finite duration: 0 s)."""
    n = len(it)
    both = pd.concat([rto, rec], ignore_index=True) if len(rec) else rto
    cache: dict = {}

    def merged(ips: frozenset):
        """(RTO union, RTO ∪ recovery union) of the flows touching `ips`, built once."""
        if ips not in cache:
            def union(df):
                if df.empty:
                    return np.empty(0), np.empty(0)
                m = df["src_ip"].isin(ips) | df["dst_ip"].isin(ips)
                return _merge(df.loc[m, "start"].to_numpy(dtype=float),
                              df.loc[m, "end"].to_numpy(dtype=float))
            cache[ips] = (union(rto), union(both))
        return cache[ips]

    hosts = it["host"] if "host" in it else pd.Series([None] * n)
    r_ov = np.zeros(n)
    q_ov = np.zeros(n)
    known = np.zeros(n, dtype=bool)
    for i, h in enumerate(hosts):
        ip = host_ips.get(h) if isinstance(h, str) else None
        known[i] = ip is not None
        if ip is None or not np.isfinite(dur[i]):
            continue
        m_rto, m_all = merged(frozenset({ip} | extra))
        r_ov[i] = _overlap(m_rto, a[i], b[i])
        q_ov[i] = max(_overlap(m_all, a[i], b[i]) - r_ov[i], 0.0)
    return r_ov, q_ov, known

def _residue(seconds: float) -> float:
    """A difference of sums, rounded to the nanosecond: what the parts leave when they add
    up exactly is float residue (-1e-16 s), not a cost, and must read 0, not -1e-16."""
    return round(seconds, 9) + 0.0  # + 0.0: no -0.0


def run_summary(attr: pd.DataFrame) -> dict:
    """Per run: the mean of every part per iteration (s), the totals, and what the
    network cost over the bound.

    Keys: iterations (rows), measured_s, bound_s, and each of PARTS (means per row);
    network_cost_s = measured − compute − transfer_at_bound − schedule − straggler_wait
    (= RTO stalls + loss recovery + unexplained), network_cost_pct (of measured, %);
    comm_over_bound = (measured − compute) / bound (1.0 = communication at its bound);
    below_bound_iterations; no_host_ip_iterations; skipped_iterations (rows with NaN
    parts, left out of everything else); totals: {part: sum over rows (s)}, with
    measured_s and network_cost_s too. Means and percentages are None without rows.
    """
    ok = attr[["duration_s", *PARTS]].notna().all(axis=1) if len(attr) else []
    skipped = int(len(attr) - int(np.sum(ok)))
    attr = attr[ok] if len(attr) else attr
    n = int(len(attr))
    if n == 0:
        return {"iterations": 0, "measured_s": None, "bound_s": None,
                **{p: None for p in PARTS}, "network_cost_s": None,
                "network_cost_pct": None, "comm_over_bound": None,
                "below_bound_iterations": 0, "no_host_ip_iterations": 0,
                "skipped_iterations": skipped, "totals": {}}
    mean = {c: float(attr[c].mean()) for c in ["duration_s", "bound_s", *PARTS]}
    cost = _residue(mean["duration_s"] - mean["compute_s"] - mean["transfer_at_bound_s"]
                    - mean["schedule_s"] - mean["straggler_wait_s"])
    comm = mean["duration_s"] - mean["compute_s"]
    totals = {c: float(attr[c].sum()) for c in PARTS}
    totals["measured_s"] = float(attr["duration_s"].sum())
    totals["network_cost_s"] = _residue(
        totals["measured_s"] - totals["compute_s"] - totals["transfer_at_bound_s"]
        - totals["schedule_s"] - totals["straggler_wait_s"])
    return {"iterations": n, "measured_s": mean["duration_s"], "bound_s": mean["bound_s"],
            **{p: mean[p] for p in PARTS}, "network_cost_s": cost,
            "network_cost_pct": 100 * cost / mean["duration_s"]
            if mean["duration_s"] > 0 else None,
            "comm_over_bound": comm / mean["bound_s"] if mean["bound_s"] > 0 else None,
            "below_bound_iterations": int(attr["below_bound"].sum()),
            "no_host_ip_iterations": int((~attr["host_ip_known"].astype(bool)).sum()),
            "skipped_iterations": skipped, "totals": totals}


def _s(x: float) -> str:
    """Seconds for a sentence: 3 significant digits, 0 for less than half a ms."""
    return "0" if abs(x) < 5e-4 else f"{x:.3g}"


def headline_sentence(summary: dict, per: str = "iteration") -> str:
    """One sentence for the report's headline, from `run_summary`, e.g. "per iteration
    the network cost 0.1 s (4 %) over the bound; RTO stalls 0 s, loss recovery 0.02 s,
    unexplained 0.08 s". `per`: what a row is ("round" for the incast benchmark)."""
    if not summary.get("iterations"):
        return f"no {per}s to attribute"
    cost, pct = summary["network_cost_s"], summary["network_cost_pct"]
    pct_txt = f" ({abs(pct):.0f} %)" if pct is not None else ""
    if cost < -5e-4:
        head = (f"per {per} the run was {_s(-cost)} s{pct_txt} faster than the bound "
                "allows: its assumptions did not hold")
    else:
        head = f"per {per} the network cost {_s(cost)} s{pct_txt} over the bound"
    if summary.get("rto_stall_s") is None:  # no whole captures: not told apart
        text = f"{head}; unexplained {_s(summary['unexplained_s'])} s"
    else:
        text = (f"{head}; RTO stalls {_s(summary['rto_stall_s'])} s, loss recovery "
                f"{_s(summary['loss_recovery_s'])} s, unexplained "
                f"{_s(summary['unexplained_s'])} s")
    if (summary.get("schedule_s") or 0) >= 5e-4:
        text += (f" (the job's own schedule adds {_s(summary['schedule_s'])} s on any "
                 "network)")
    if summary.get("straggler_wait_s", 0) >= 5e-4:
        text += f" (and {_s(summary['straggler_wait_s'])} s waiting for stragglers)"
    nb = summary.get("below_bound_iterations", 0)
    if nb:
        text += f"; {nb} of {summary['iterations']} {per}s ran faster than the bound"
    return text
