"""A strict reader of trace-event JSON (the Trace Event Format's rules that Perfetto and
chrome://tracing rely on), for tests on the traces our reports write.

Checked: the top level (``traceEvents`` a list, ``displayTimeUnit`` "ms" or "ns"); every
event's phase is one we write (M, X, i, C) with its required fields; ``ts`` and ``dur``
are integers >= 0; a process or thread named once; and on every thread the complete
("X") events nest: each one starts and ends within the one it starts inside, or starts
at or after that one's end (no partial overlap, even by one microsecond)."""
from __future__ import annotations

from collections import defaultdict

__all__ = ["problems"]

PHASES = {"M", "X", "i", "C"}


def problems(trace: dict) -> list[str]:
    """Everything wrong with ``trace`` (empty: it follows the rules)."""
    out = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["traceEvents is not a list"]
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        out.append(f"displayTimeUnit {trace.get('displayTimeUnit')!r} is not ms or ns")
    named = defaultdict(int)
    threads = defaultdict(list)
    for i, e in enumerate(events):
        out += [f"event {i}: {p}" for p in _event_problems(e)]
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            named[(e["name"], e.get("pid"), e.get("tid") if e["name"] == "thread_name"
                   else None)] += 1
        if e.get("ph") == "X" and not _event_problems(e):
            threads[(e["pid"], e["tid"])].append(e)
    out += [f"{what} of pid {pid} tid {tid} given {n} times"
            for (what, pid, tid), n in named.items() if n > 1]
    for (pid, tid), spans in threads.items():
        out += [f"pid {pid} tid {tid}: {p}" for p in _nesting_problems(spans)]
    return out


def _event_problems(e) -> list[str]:
    if not isinstance(e, dict):
        return ["not an object"]
    ph = e.get("ph")
    if ph not in PHASES:
        return [f"phase {ph!r} is not one of {sorted(PHASES)}"]
    out = [f"{k} missing" for k in ("name", "pid", "ts") if k not in e]
    if ph == "X" and "dur" not in e:
        out.append("complete event without dur")
    for k in ("ts", "dur"):
        v = e.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            out.append(f"{k} {v!r} is not an integer >= 0")
    if ph == "i" and e.get("s", "t") not in ("g", "p", "t"):
        out.append(f"instant scope {e.get('s')!r} is not g, p or t")
    if ph == "C" and not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                             for v in (e.get("args") or {None: None}).values()):
        out.append("counter args are not all numbers")
    return out


def _nesting_problems(spans: list[dict]) -> list[str]:
    out, stack = [], []
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
        start, end = e["ts"], e["ts"] + e["dur"]
        while stack and start >= stack[-1][1]:
            stack.pop()
        if stack and end > stack[-1][1]:
            parent = stack[-1][2]
            out.append(f"{e['name']!r} [{start}, {end}] overlaps {parent['name']!r} "
                       f"[{stack[-1][0]}, {stack[-1][1]}] by {end - stack[-1][1]} µs")
            continue
        stack.append((start, end, e))
    return out
