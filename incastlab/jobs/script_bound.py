"""The script job's bound: each step's collectives at their α–β least on the fabric the
run had (α = 0, as every bound here), written with the cost model's primitives
(:mod:`incastlab.analysis.alphabeta`) and the all-reduce job's ring bound.

One collective of M bytes (the observer's NCCL-tests convention) over a group of N, B the
rate of the slowest host link (of the whole job for a full group; the fastest for a
subgroup, whose hosts the log does not name, so the bound stays a lower bound):

    all_reduce       the ring bound (jobs/ring_bound.ring_bound: 2(N−1)/N·M·f'/B, and the
                     fabric's spine links for a full group): the least any algorithm moves,
                     gloo's included (as the ring job holds gloo's all_reduce to it)
    all_gather,      every rank receives (all-gather) or sends (reduce-scatter) the
    reduce_scatter   (N−1)/N·M it lacks: (N−1)/N·M·f/B
    all_to_all       every rank sends (N−1)/N of its M and receives as much: ·f'/B
    broadcast,       the root sends (broadcast) or takes in (reduce) M at least once, each
    reduce           other rank receives (sends) M: M·f/B
    gather, scatter  the root takes in (sends) the (N−1)/N·M of the others: ·f/B
    send, recv       M·f/B
    barrier          0

f = framing_factor, f' = ack_framing (the link carries data both ways) of the run's MTU.

A step (one rank's iteration) is bounded twice: ``bound_total_s``, its collectives one
after another (the sum; exact as a lower bound for collectives that run one at a time,
as a script's blocking calls and one process group's queue do); and ``bound_exposed_s``,
the least of it the step must have waited on: its blocking calls' bounds, plus for DDP
buckets max(the last bucket's bound, all buckets' bound − the time from the first bucket
ready to the last, 0) — the buckets need at least all of their bound from the first
one's readiness and the last one's bound after the backward's end (the ring job's
exposed bound with the measured readiness in place of the emulated layers). An
asynchronous call that is not DDP's counts in the total only (compute may hide it).
"""
from __future__ import annotations

from collections.abc import Sequence

from incastlab.analysis.alphabeta import Bound, ack_framing, bytes_per_s, fmt, framing_factor
from incastlab.jobs.ring_bound import ring_bound


def collective_bound(op: str, nbytes: float, n: int, mbps: float, *, mtu: int = 1500,
                     ring_fabric: dict | None = None, rates: Sequence[float] | None = None
                     ) -> Bound:
    """The least time of one collective (see the module docstring). ``ring_fabric``:
    leaves, spines and fabric_mbps of a full group's all-reduce; ``rates``: each rank's
    host rate for it (default: ``mbps`` for every rank)."""
    m, n = float(nbytes or 0), int(n or 1)
    f, fa = framing_factor(mtu), ack_framing(mtu)
    rate = bytes_per_s(mbps)
    if m <= 0 or n < 2 and op not in ("send", "recv"):
        return Bound(0.0, f"{op}: nothing to move (M={fmt(m)} B, N={n})", {}, "")
    if op == "all_reduce":
        return ring_bound(n, m, list(rates) if rates else mbps, mtu=mtu, **(ring_fabric or {}))
    share = (n - 1) / n * m
    cases = {
        "all_gather": (share, f, "(N−1)/N·M·f/B"),
        "reduce_scatter": (share, f, "(N−1)/N·M·f/B"),
        "all_to_all": (share, fa, "(N−1)/N·M·f'/B"),
        "gather": (share, f, "(N−1)/N·M·f/B"),
        "scatter": (share, f, "(N−1)/N·M·f/B"),
        "broadcast": (m, f, "M·f/B"),
        "reduce": (m, f, "M·f/B"),
        "send": (m, f, "M·f/B"),
        "recv": (m, f, "M·f/B"),
    }
    if op not in cases:
        return Bound(0.0, f"{op}: no bytes of its own (0 s)", {}, "")
    moved, frame, text = cases[op]
    secs = moved * frame / rate
    return Bound(secs, f"{op}, N={n}, M={fmt(m)} B: {text} = {fmt(moved)} B·{frame:.4f}/"
                 f"{fmt(mbps)} Mbit/s = {fmt(secs)} s", {"host_link": secs}, "host link")


def exposed_buckets_s(bucket_bounds: Sequence[float], ready: Sequence[float]) -> float:
    """The least exposed time of a step's DDP buckets: max(last bucket's bound, all
    buckets' bound − (last ready − first ready), 0); buckets in the order they became
    ready, ``ready`` their readiness times (s)."""
    if not bucket_bounds:
        return 0.0
    window = max(ready) - min(ready)
    return max(bucket_bounds[-1], sum(bucket_bounds) - window, 0.0)


def step_bounds(rows, context: dict) -> tuple[float, float]:
    """(bound_total_s, bound_exposed_s) of one rank's step: ``rows`` its collectives
    (dicts with op, bytes, group_size, call, async_op, t_start), ``context`` the
    fabric's numbers (``rates_of(n)``, mtu, ring_fabric for a full group)."""
    total, blocking, buckets = 0.0, 0.0, []
    for r in sorted(rows, key=lambda r: r["t_start"]):
        b = one_bound(r, context)
        total += b
        if r.get("call") == "ddp_bucket":
            buckets.append((b, r["t_start"]))
        elif not r.get("async_op"):
            blocking += b
    exposed = blocking + exposed_buckets_s([b for b, _ in buckets], [t for _, t in buckets])
    return total, exposed


def one_bound(r, context: dict) -> float:
    n = int(r.get("group_size") or 1)
    full = n == context["world"]
    rates = context["rates"]
    mbps = min(rates) if full else max(rates)
    kw = {"mtu": context["mtu"]}
    if r["op"] == "all_reduce" and full:
        kw.update(ring_fabric=context.get("ring_fabric"), rates=rates)
    return collective_bound(r["op"], r.get("bytes") or 0, n, mbps, **kw).seconds


def run_bound(a) -> Bound | None:
    """The run's bound for the attribution: the least ``bound_exposed_s`` over its steps
    (a lower bound of every step's waiting on the network), or None without the table or
    the fabric."""
    steps = a.tables.get("script_steps")
    if steps is None or steps.empty or steps["bound_exposed_s"].isna().all():
        return None
    i = steps["bound_exposed_s"].idxmin()
    row = steps.loc[i]
    secs = float(row["bound_exposed_s"])
    return Bound(secs, f"the least exposed communication over the steps: rank "
                 f"{int(row['rank'])} step {int(row['step'])}, {int(row['collectives'])} "
                 f"collective(s) of {fmt(float(row['bytes']))} B at their α–β least = "
                 f"{fmt(secs)} s (all of that step's collectives one after another: "
                 f"{fmt(float(row['bound_total_s']))} s)",
                 {"exposed": secs, "total": float(row["bound_total_s"])}, "host link")
