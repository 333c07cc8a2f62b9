"""What a host event did to the training: iteration times before, during and after it.

A host event (``cpu_throttle``, ``worker_pause``, ``worker_kill``, ``ps_kill``; see
incastlab/hostevents.py) has a target host and a window: from its apply to its undo
(a throttle's or pause's ``duration_s``, a ``worker_resume`` of the same host, or the
teardown); a kill's window never closes. For each such event,
:func:`iteration_windows` gives the mean iteration duration (s) and the count of
iterations of the target host and of the other hosts in three phases — before the
window, during it, after it — and, over the synchronous steps during it, how often the
target's gradient was the last one ready (the straggler, as ``training.steps`` defines
it). An iteration belongs to the phase holding its midpoint ((t_start + t_end) / 2), so
each one is counted once.

Pure functions of two tables (no run directory access): ``events``, a DataFrame or a
list of dicts, one per applied event (the events.jsonl rows of kind "apply", as
``analysis.failover`` reads them: index, action, t = the apply's wall time, t_undo =
its undo's wall time or None/NaN, ok, params and result, both dicts), and the
analysis's ``iterations`` table (host, rank, iteration, t_start, t_end, compute_s, ...).
"""
from __future__ import annotations

import math

import pandas as pd

from . import training

HOST_ACTIONS = ("cpu_throttle", "worker_pause", "worker_kill", "ps_kill")
ENDLESS = ("worker_kill", "ps_kill")
PHASES = ("before", "during", "after")
COLUMNS = ["index", "action", "host", "start", "end",
           *[f"{who}_{ph}_{x}" for who in ("target", "others") for ph in PHASES
             for x in ("s", "n")],
           "steps_during", "straggler_steps_during"]


def _dict(x) -> dict:
    return x if isinstance(x, dict) else {}


def _host(row) -> str | None:
    """The target host: what the apply recorded (a worker named by rank resolves
    there), else the event's own ``host`` field."""
    return _dict(row.get("result")).get("host") or _dict(row.get("params")).get("host")


def _num(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def windows(events: pd.DataFrame) -> list[dict]:
    """The host events' windows: index, action, host, start (wall s), end (wall s, or
    None: a kill, or never undone). A ``worker_resume`` ends the latest open pause of
    its host, if earlier than that pause's undo."""
    out: list[dict] = []
    if events is None or not len(events):
        return out
    rows = events.to_dict("records") if isinstance(events, pd.DataFrame) else list(events)
    for row in sorted(rows, key=lambda r: (_num(r.get("t")) or 0.0)):
        if row.get("ok") is False or _num(row.get("t")) is None:
            continue
        action, host = row.get("action"), _host(row)
        if action == "worker_resume":
            for w in reversed(out):
                if w["action"] == "worker_pause" and w["host"] == host \
                        and (w["end"] is None or w["end"] > row["t"]) and w["start"] <= row["t"]:
                    w["end"] = float(row["t"])
                    break
            continue
        if action not in HOST_ACTIONS:
            continue
        end = None if action in ENDLESS else _num(row.get("t_undo"))
        out.append({"index": row.get("index"), "action": action, "host": host,
                    "start": float(row["t"]), "end": end})
    return out


def iteration_windows(events: pd.DataFrame, iterations: pd.DataFrame) -> pd.DataFrame:
    """One row per applied host event (columns COLUMNS): its window, and the mean
    iteration duration (``*_s``, NaN when none) and count (``*_n``) of the target host
    and of the others before, during and after it; ``steps_during``: synchronous steps
    (iteration numbers) whose midpoints fall in the window, and in how many of them the
    target host's gradient was ready last (``straggler_steps_during``)."""
    rows = []
    it = iterations if iterations is not None else pd.DataFrame()
    have = len(it) and {"t_start", "t_end", "host"} <= set(it.columns)
    if have:
        it = it.copy()
        it["duration_s"] = it["t_end"] - it["t_start"]
        mid = (it["t_start"] + it["t_end"]) / 2
        step_table = training.steps(it)
    for w in windows(events):
        row = dict(w)
        if have:
            end = w["end"] if w["end"] is not None else math.inf
            phase = {"before": mid < w["start"], "during": (mid >= w["start"]) & (mid < end),
                     "after": mid >= end}
            target = it["host"] == w["host"]
            for who, sel in (("target", target), ("others", ~target)):
                for name, inside in phase.items():
                    d = it.loc[sel & inside, "duration_s"]
                    row[f"{who}_{name}_n"] = int(len(d))
                    row[f"{who}_{name}_s"] = float(d.mean()) if len(d) else math.nan
            ranks = set(it.loc[target, "rank"])
            smid = (step_table["start"] + step_table["end"]) / 2 if len(step_table) \
                else pd.Series(dtype=float)
            during = step_table[(smid >= w["start"]) & (smid < end)] if len(step_table) \
                else step_table
            row["steps_during"] = int(len(during))
            row["straggler_steps_during"] = int(during["straggler"].isin(ranks).sum()) \
                if len(during) else 0
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _fmt(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def sentence(row: dict, t0: float | None = None) -> str:
    """One line per event for the report: what, when, and the target's and the others'
    iteration times before / during / after; the straggler count where there were steps."""
    rel = (lambda t: t - t0) if t0 is not None else (lambda t: t)
    when = f"at {rel(row['start']):.1f} s" + (
        f" until {rel(row['end']):.1f} s" if _num(row.get("end")) is not None else "")
    text = (f"events[{row['index']}] {row['action']} on {row['host']} {when}: its "
            f"iterations took {_fmt(row.get('target_before_s'))} s before, "
            f"{_fmt(row.get('target_during_s'))} s during, {_fmt(row.get('target_after_s'))} s "
            f"after (the other hosts' {_fmt(row.get('others_before_s'))} / "
            f"{_fmt(row.get('others_during_s'))} / {_fmt(row.get('others_after_s'))} s)")
    steps = row.get("steps_during") or 0
    if steps:
        text += (f"; {row['host']} was the straggler (its gradient ready last) in "
                 f"{row.get('straggler_steps_during', 0)} of the {steps} steps during it")
    return text + "."
