"""What the network did to training: workers/*.jsonl joined with network events.

Iteration times are t_end - t_start of each worker's `iteration` event, split into the
logged compute_s, comm_s and wait_s (seconds). A synchronous *step* is the same
iteration number across workers: from the earliest start to the latest end, so a
straggler's delay shows in everybody's step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

ITER_COLUMNS = ["file", "rank", "iteration", "t_start", "t_end", "duration_s", "compute_s",
                "slowdown_s", "t_push",
                "comm_s", "wait_s", "push_s", "pull_s", "allreduce_s", "bytes_sent",
                "bytes_recv", "model_version", "staleness", "loss", "host"]


def starts(workers: pd.DataFrame) -> pd.DataFrame:
    """One row per `start` event (role, rank, world_size, mode, gradient_bytes, host...)."""
    if workers.empty:
        return pd.DataFrame(columns=["file", "role", "rank", "mode", "world_size"])
    return workers[workers["event"] == "start"].dropna(axis=1, how="all").reset_index(drop=True)


def run_mode(workers: pd.DataFrame) -> str | None:
    """The workload's mode (sync/async/ssp/backup/ring/gloo/incast) from start events."""
    s = starts(workers)
    if "mode" in s and s["mode"].notna().any():
        return str(s["mode"].dropna().mode().iloc[0])
    return None


def iterations(workers: pd.DataFrame) -> pd.DataFrame:
    """`iteration` events as a table (columns ITER_COLUMNS; absent fields are NaN)."""
    if workers.empty or not (workers["event"] == "iteration").any():
        return pd.DataFrame(columns=ITER_COLUMNS)
    it = workers[workers["event"] == "iteration"].copy()
    for c in ITER_COLUMNS:
        if c not in it:
            it[c] = np.nan
    s = starts(workers)
    # iteration events carry no rank: take it from the file's start event, else the
    # file name (`workers/<rank>.jsonl`)
    start_rank = {r["file"]: r["rank"] for _, r in s.iterrows()} if "rank" in s else {}
    it["rank"] = [as_rank(start_rank.get(f, f)) if pd.isna(r) else as_rank(r)
                  for f, r in zip(it["file"], it["rank"], strict=True)]
    it["host"] = [_host(r) for r in (s.set_index("file").reindex(it["file"]).to_dict("records")
                                     if len(s) else [{}] * len(it))]
    it["duration_s"] = it["t_end"] - it["t_start"]
    return it[ITER_COLUMNS].sort_values(["t_start", "rank"], kind="stable").reset_index(drop=True)


def as_rank(x):
    """A logged rank as an int, or as text when it is not a number."""
    try:
        return int(x)
    except (TypeError, ValueError):
        return str(x)


def _host(start: dict) -> str | None:
    """Emulated host of a worker: from its interface name (h3-eth0 -> h3); the logged
    `host` is the machine's hostname inside Mininet, so it is only a fallback."""
    iface = start.get("iface")
    if isinstance(iface, str) and "-" in iface:
        return iface.split("-")[0]
    host = start.get("host")
    return host if isinstance(host, str) else None


def steps(iters: pd.DataFrame) -> pd.DataFrame:
    """Synchronous steps: per iteration number, start, end, step_s, straggler rank,
    spread_s (latest minus earliest worker end).

    The straggler is the worker whose gradient was ready last — its push completed last
    (t_push + push_s) where the PS logs that, else its compute (plus any injected
    slowdown) ended last — not the one whose iteration ended last: a synchronous PS
    answers its workers in rank order, so the last to finish is always the same rank."""
    if iters.empty:
        return pd.DataFrame(columns=["iteration", "start", "end", "step_s", "straggler",
                                     "spread_s", "workers"])
    ready = _gradient_ready(iters)
    rows = []
    for it, g in iters.groupby("iteration", sort=True):
        rows.append({"iteration": it, "start": g["t_start"].min(), "end": g["t_end"].max(),
                     "step_s": g["t_end"].max() - g["t_start"].min(),
                     "straggler": g.loc[ready.loc[g.index].idxmax(), "rank"],
                     "spread_s": g["t_end"].max() - g["t_end"].min(), "workers": len(g)})
    return pd.DataFrame(rows)


def _gradient_ready(iters: pd.DataFrame) -> pd.Series:
    """When each iteration's gradient was ready to leave (s, epoch), see steps()."""
    compute = iters["t_start"] + iters.get("compute_s", 0).fillna(0) \
        + (iters["slowdown_s"].fillna(0) if "slowdown_s" in iters else 0)
    if "t_push" in iters and "push_s" in iters:
        pushed = iters["t_push"] + iters["push_s"]
        return pushed.where(pushed.notna(), compute)
    return compute


def with_network_events(iters: pd.DataFrame, lost: pd.DataFrame | None = None,
                        retrans: pd.DataFrame | None = None,
                        queue_drops: pd.DataFrame | None = None,
                        host_ips: dict | None = None) -> pd.DataFrame:
    """Add per-iteration network events: losses, rtos (RTO firings), tc_drops.

    Capture losses and RTOs count when they fall inside [t_start, t_end] and, when the
    worker's host IP is known (`host_ips` {host: ip}), involve that host. tc_drops are
    queue drops of any port in the window (queue_drops: queue_deltas rows).
    """
    out = iters.copy()
    host_ips = host_ips or {}
    for col in ("losses", "rtos", "tc_drops"):
        out[col] = 0.0

    def count(times, ips_src, ips_dst, t0, t1, ip):
        m = (times >= t0) & (times <= t1)
        if ip is not None and ips_src is not None:
            m &= (ips_src == ip) | (ips_dst == ip)
        return float(m.sum())

    from .pcap import ip_to_int
    l_t = lost["t"].to_numpy() if lost is not None and len(lost) else np.empty(0)
    l_s = lost["src"].to_numpy() if lost is not None and len(lost) else None
    l_d = lost["dst"].to_numpy() if lost is not None and len(lost) else None
    rto = retrans[retrans["event"] & (retrans["kind"] == "rto")] \
        if retrans is not None and len(retrans) else None
    r_t = rto["t"].to_numpy() if rto is not None else np.empty(0)
    r_s = rto["src"].to_numpy() if rto is not None else None
    r_d = rto["dst"].to_numpy() if rto is not None else None
    q = queue_drops[queue_drops["d_drops"] > 0] if queue_drops is not None and len(queue_drops) \
        else None
    for idx, r in out.iterrows():
        ip = host_ips.get(r["host"]) if isinstance(r["host"], str) else None
        ipn = ip_to_int(ip) if ip else None
        out.at[idx, "losses"] = count(l_t, l_s, l_d, r["t_start"], r["t_end"], ipn)
        out.at[idx, "rtos"] = count(r_t, r_s, r_d, r["t_start"], r["t_end"], ipn)
        if q is not None:
            m = (q["t"] >= r["t_start"]) & (q["t"] <= r["t_end"])
            out.at[idx, "tc_drops"] = float(q.loc[m, "d_drops"].sum())
    return out


def impact_summary(iters_ev: pd.DataFrame) -> dict:
    """How much longer iterations with losses/RTOs took (seconds): with an RTO vs without
    one, and with a loss (no RTO) vs clean (neither)."""
    if iters_ev.empty:
        return {}
    d = iters_ev["duration_s"]
    hit_rto = iters_ev["rtos"] > 0
    hit_loss = (iters_ev["losses"] > 0) | (iters_ev["tc_drops"] > 0)
    clean = ~hit_rto & ~hit_loss

    def stats(mask):
        v = d[mask].dropna()
        return {"n": int(len(v)), "mean_s": float(v.mean()) if len(v) else None,
                "median_s": float(v.median()) if len(v) else None}

    out = {"iterations": int(len(iters_ev)), "clean": stats(clean),
           "with_loss": stats(hit_loss & ~hit_rto), "with_rto": stats(hit_rto),
           "without_rto": stats(~hit_rto),
           "mean_s": float(d.mean()), "median_s": float(d.median()),
           "p95_s": float(d.quantile(0.95)),
           "compute_s_mean": _mean(iters_ev["compute_s"]),
           "comm_s_mean": _mean(iters_ev["comm_s"]), "wait_s_mean": _mean(iters_ev["wait_s"])}
    c = out["clean"]["mean_s"]
    for k in ("with_loss", "with_rto"):
        m = out[k]["mean_s"]
        out[k]["extra_s_vs_clean"] = (m - c) if m is not None and c is not None else None
    m, n = out["with_rto"]["mean_s"], out["without_rto"]["mean_s"]
    out["with_rto"]["extra_s_vs_no_rto"] = (m - n) if m is not None and n is not None else None
    return out


def _mean(s):
    s = pd.to_numeric(s, errors="coerce").dropna()
    return float(s.mean()) if len(s) else None


def loss_curve(workers: pd.DataFrame) -> pd.DataFrame:
    """Training loss over time: columns t (s), rank, iteration, loss."""
    it = iterations(workers)
    it = it[pd.to_numeric(it["loss"], errors="coerce").notna()]
    return pd.DataFrame({"t": it["t_end"], "rank": it["rank"], "iteration": it["iteration"],
                         "loss": it["loss"].astype(float)})


def finals(workers: pd.DataFrame) -> pd.DataFrame:
    """`final` events (accuracy, loss, iterations, applied/discarded gradients)."""
    if workers.empty:
        return pd.DataFrame()
    return workers[workers["event"] == "final"].dropna(axis=1, how="all").reset_index(drop=True)


def errors(workers: pd.DataFrame) -> pd.DataFrame:
    """`error` events written by apps before a non-zero exit."""
    if workers.empty:
        return pd.DataFrame()
    return workers[workers["event"] == "error"].dropna(axis=1, how="all").reset_index(drop=True)


def per_worker(iters: pd.DataFrame, steps_df: pd.DataFrame) -> pd.DataFrame:
    """Per worker rank: iterations, mean iteration/compute/communication/wait time (s),
    and how often it was the straggler (the last to finish a synchronous step)."""
    if iters.empty:
        return pd.DataFrame(columns=["rank", "iterations", "mean_iteration_s",
                                     "mean_compute_s", "mean_comm_s", "mean_wait_s",
                                     "straggler_steps"])
    it = iters.copy()
    for c in ("compute_s", "comm_s", "wait_s", "duration_s"):
        it[c] = pd.to_numeric(it[c], errors="coerce")
    g = it.groupby("rank")
    out = pd.DataFrame({"iterations": g.size(), "mean_iteration_s": g["duration_s"].mean(),
                        "mean_compute_s": g["compute_s"].mean(),
                        "mean_comm_s": g["comm_s"].mean(), "mean_wait_s": g["wait_s"].mean()})
    strag = steps_df["straggler"].value_counts() if len(steps_df) else pd.Series(dtype=int)
    out["straggler_steps"] = [int(strag.get(r, 0)) for r in out.index]
    return out.reset_index()
