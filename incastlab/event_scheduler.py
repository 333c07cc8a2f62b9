"""Firing a run's events: the :class:`Scheduler` thread and the run's ``events.jsonl``.
The public face is :mod:`incastlab.events`.
"""
from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from incastlab.event_spec import Event, EventContext, actions, sort_key
from incastlab.topologies import runformat

__all__ = ["EVENTS_FILE", "FORMAT_VERSION", "Scheduler", "read_events"]

EVENTS_FILE = runformat.EVENTS
FORMAT_VERSION = 1


# --- running -------------------------------------------------------------------------------

class Scheduler:
    """Fires a run's events at their times in its own thread and writes events.jsonl.

    ``progress()`` returns the job's progress count (the runner: the most progress
    events any counting process has logged), polled for ``at_iteration`` events.
    ``start()`` marks the workload's start (t = 0 of ``at_s``). ``stop()`` ends the
    thread; ``restore()`` then undoes every started event, last first (idempotent).
    ``error`` holds the first failure (the run fails with it)."""

    POLL_S = 0.02  # the resolution of at_s and of the progress poll

    def __init__(self, events: list[Event], ctx: EventContext,
                 progress: Callable[[], int] | None = None):
        self.events = sorted(events, key=sort_key)
        self.ctx = ctx
        self.progress = progress or (lambda: 0)
        self.error: str | None = None
        self.t0_wall = self.t0_mono = 0.0
        self._started: list[Event] = []
        self._undone: set[int] = set()
        self._pending_undo: list[tuple[float, Event]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()   # one action at a time; the log's order
        self._log = open(ctx.run_dir / EVENTS_FILE, "a", encoding="utf-8")

    # -- life cycle --
    def start(self) -> None:
        self.t0_wall, self.t0_mono = time.time(), time.monotonic()
        self._write({"kind": "start", "format_version": FORMAT_VERSION,
                     "events": len(self.events)})
        if self.events:
            self._thread = threading.Thread(target=self._loop, name="incastlab-events",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the thread (an action in progress finishes first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def restore(self) -> None:
        """Undo every started event not yet undone, last first; record events that
        never fired. Safe to call twice."""
        with self._lock:
            for ev in reversed(self._started):
                if ev.index not in self._undone:
                    self._undo(ev, "teardown")
            fired = {ev.index for ev in self._started}
            for ev in self.events:
                if ev.index not in fired:
                    fired.add(ev.index)
                    self._not_fired(ev)
            if not self._log.closed:
                self._log.close()

    def _not_fired(self, ev: Event) -> None:
        self._write({"kind": "not_fired", **self._what(ev),
                     "reason": "the workload ended or the run stopped first"})
        self._started.append(ev)
        self._undone.add(ev.index)

    # -- the thread --
    def _loop(self) -> None:
        queue = list(self.events)
        while not self._stop.is_set() and (queue or self._pending_undo):
            now = time.monotonic() - self.t0_mono
            due_undo = [(t, ev) for t, ev in self._pending_undo if t <= now]
            for item in due_undo:
                self._pending_undo.remove(item)
                with self._lock:
                    if not self._stop.is_set():
                        self._undo(item[1], "duration")
            if queue:
                ev = queue[0]
                if ev.at_s is not None:
                    due = now >= ev.at_s
                else:
                    due = self._safe_progress() >= ev.at_iteration
                if due:
                    queue.pop(0)
                    with self._lock:
                        if self._stop.is_set():
                            break
                        self._apply(ev)
                    if ev.duration_s is not None:
                        t_done = time.monotonic() - self.t0_mono
                        self._pending_undo.append((t_done + ev.duration_s, ev))
                    continue  # another event may be due at the same time
            self._stop.wait(self.POLL_S)

    def _safe_progress(self) -> int:
        try:
            return int(self.progress())
        except Exception:  # noqa: BLE001 - a log being written; ask again next poll
            return 0

    # -- actions --
    def _apply(self, ev: Event) -> None:
        action = actions()[ev.action]
        # Started before it runs: teardown undoes even an apply cut short.
        self._started.append(ev)
        t_wall, t_rel = time.time(), time.monotonic() - self.t0_mono
        try:
            result = action.apply(self.ctx, ev) or {}
            error = None
        except Exception as exc:  # noqa: BLE001 - recorded; the run fails with it
            result, error = {}, f"{type(exc).__name__}: {exc}"
            self.ctx.log.debug("event %d failed:\n%s", ev.index, traceback.format_exc())
            if self.error is None:
                self.error = (f"events[{ev.index}] ({ev.action} {ev.when}) failed: "
                              f"{error}")
        self._write({"kind": "apply", **self._what(ev), "t": t_wall, "t_rel_s": t_rel,
                     "t_done_rel_s": time.monotonic() - self.t0_mono, "ok": error is None,
                     "result": result, **({"error": error} if error else {})})
        if action.undo is None:
            self._undone.add(ev.index)

    def _undo(self, ev: Event, why: str) -> None:
        action = actions()[ev.action]
        self._undone.add(ev.index)
        if action.undo is None:
            return
        t_wall, t_rel = time.time(), time.monotonic() - self.t0_mono
        try:
            result = action.undo(self.ctx, ev) or {}
            error = None
        except Exception as exc:  # noqa: BLE001 - recorded; teardown goes on
            result, error = {}, f"{type(exc).__name__}: {exc}"
        self._write({"kind": "undo", "why": why, **self._what(ev), "t": t_wall,
                     "t_rel_s": t_rel, "ok": error is None, "result": result,
                     **({"error": error} if error else {})})

    def _what(self, ev: Event) -> dict:
        planned = {"at_s": ev.at_s} if ev.at_s is not None else \
            {"at_iteration": ev.at_iteration}
        return {"index": ev.index, "action": ev.action, "planned": planned,
                "params": dict(ev.params),
                **({"duration_s": ev.duration_s} if ev.duration_s is not None else {})}

    def _write(self, row: dict) -> None:
        if self._log.closed:
            return
        if "t" not in row:
            row["t"] = time.time()
        row.setdefault("t0", self.t0_wall)
        self._log.write(json.dumps(row, sort_keys=False) + "\n")
        self._log.flush()


def read_events(run_dir: str | Path) -> list[dict]:
    """The rows of a run's events.jsonl ([] when absent); damaged lines skipped."""
    path = Path(run_dir) / EVENTS_FILE
    rows = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
