"""The iteration boundary of an observed script: what one optimizer step's JSONL
`iteration` event says, from the collectives the step ran (pure functions, no torch).

One iteration of a script is the time from the end of the previous step of its primary
optimizer (the first one that stepped; the first DDP forward, or the end of
``init_process_group``, for the first iteration) to the end of this one. Its parts:

    comm_s          the union of its collectives' intervals [t_start, t_end] (a time
                    covered by several at once counts once), clipped to the iteration;
    exposed_comm_s  the part of that the script's own thread spent blocked on the
                    network: synchronous calls, ``Work.wait()`` on asynchronous ones, and
                    DDP's tail — from the moment the last gradient bucket was ready (the
                    backward's last compute) to the moment the last bucket's all-reduce
                    completed (DDP's backward returns only then);
    compute_s       duration − exposed_comm_s: what the step did besides waiting on the
                    network (forward, backward, optimizer, data), communication hidden
                    behind it included;
    comm_total_s    the DDP buckets' all-reduce times added up (as the ring job logs it);
    wait_s          None: a script has no barrier wait of its own (as the ring).

The attribution (analysis/attribution.py) reads compute_s as "the iteration computed
first, then communicated": for a script the exposed communication is spread over the
step, so its communication window [t_start + compute_s, t_end] is an approximation of
where the step waited, exact for a DDP step whose only exposed part is the tail.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

Interval = tuple[float, float]


def union_s(intervals: Iterable[Interval], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by at least one of `intervals` (each clipped)."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals
                     if b is not None and a is not None and min(b, hi) > max(a, lo))
    total, end = 0.0, lo
    for a, b in clipped:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def ddp_tail(buckets: Sequence[Interval]) -> Interval | None:
    """DDP's exposed tail of one backward: (last bucket ready, last bucket done)."""
    done = [b for _, b in buckets if b is not None]
    if not buckets or not done:
        return None
    ready = max(a for a, _ in buckets)
    end = max(done)
    return (ready, end) if end > ready else None


def iteration_event(iteration: int, t_start: float, t_end: float,
                    comm: Sequence[Interval], blocking: Sequence[Interval],
                    buckets: Sequence[Interval], nbytes: int, count: int) -> dict:
    """The fields of one `iteration` event (see the module docstring). `comm`: every
    collective of the step (DDP buckets included), `blocking`: the intervals the
    script's thread was blocked in a call or a wait, `buckets`: DDP's bucket
    all-reduces (ready, done); `nbytes`/`count`: the step's collectives' bytes and count.
    """
    duration = max(0.0, t_end - t_start)
    tail = ddp_tail(buckets)
    exposed = union_s([*blocking, *([tail] if tail else [])], t_start, t_end)
    return {"iteration": iteration, "t_start": t_start, "t_end": t_end,
            "compute_s": max(0.0, duration - exposed), "comm_s": union_s(comm, t_start, t_end),
            "exposed_comm_s": exposed, "wait_s": None,
            "comm_total_s": sum(b - a for a, b in buckets if b is not None) if buckets
            else None,
            "buckets": len(buckets) or None, "collectives": count, "bytes": nbytes}
