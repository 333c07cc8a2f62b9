"""Live progress of a run: its phases, and each worker's iterations with elapsed and
remaining time.

On a terminal, rich draws it (a line per phase, then one bar per worker host that
redraws in place); anywhere else (a log file, CI, a pipe) it writes plain lines: each
phase, and the iterations at most every PLAIN_EVERY_S seconds and when they finish.
`enabled=False` (the CLI's --quiet) writes nothing. The runner calls only `phase()`
and `iterations()`; `close()` ends a live display (the next phase also does).
"""
from __future__ import annotations

import sys
import time

PLAIN_EVERY_S = 10.0  # plain-line mode: iterations at most this often


class Progress:
    def __init__(self, enabled: bool | None = None, stream=None, live: bool | None = None):
        """`enabled`: None = on (plain lines unless `stream` is a terminal), False = off.
        `live`: force (True) or forbid (False) the redrawing display; default: when
        `stream` is a terminal and rich is importable."""
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = True if enabled is None else enabled
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.live = (tty if live is None else live) and _has_rich()
        self.t0 = time.monotonic()
        self._bars = None    # rich.progress.Progress while iterations are shown
        self._tasks: dict[str, int] = {}
        self._last_plain = -1e9
        self._last_done: dict[str, int] = {}
        if self.enabled and self.live:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False)

    def _stamp(self, now: float | None = None) -> str:
        return f"[{(time.monotonic() if now is None else now) - self.t0:6.1f}s]"

    def phase(self, text: str) -> None:
        """A new phase of the run ('fabric ready: ...', 'tearing down')."""
        if not self.enabled:
            return
        self.close()
        if self.live:
            self._console.print(f"[dim]{self._stamp()}[/dim] {_escape(text)}")
        else:
            self._plain(f"{self._stamp()} {text}")

    def iterations(self, done: dict[str, int], want: int) -> None:
        """Iterations (or rounds) each host's process has logged, of `want`."""
        if not self.enabled or not done:
            return
        if self.live:
            self._live_iterations(done, want)
            return
        now = time.monotonic()
        finished = all(n >= want for n in done.values()) and want > 0
        changed = done != self._last_done
        if changed and (finished or now - self._last_plain >= PLAIN_EVERY_S):
            parts = " ".join(f"{host} {n}/{want}" for host, n in done.items())
            eta = _remaining(done, want, now - self.t0)
            self._plain(f"{self._stamp(now)} iterations: {parts}"
                        + (f" (about {eta:.0f} s left)" if eta is not None else ""))
            self._last_plain = now
            self._last_done = dict(done)

    def close(self) -> None:
        """End the live bars (they stay on screen as they were)."""
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
            self._tasks = {}

    def _live_iterations(self, done, want):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bars,
                                   TextColumn, TimeElapsedColumn, TimeRemainingColumn)

        if self._bars is None:
            self._bars = Bars(TextColumn("  {task.description:<8}"), BarColumn(),
                              MofNCompleteColumn(), TimeElapsedColumn(),
                              TextColumn("left"), TimeRemainingColumn(),
                              console=self._console, transient=False)
            self._bars.start()
        for host, n in done.items():
            if host not in self._tasks:
                self._tasks[host] = self._bars.add_task(host, total=max(want, 1))
            self._bars.update(self._tasks[host], completed=min(n, max(want, 1)))

    def _plain(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


def _remaining(done: dict[str, int], want: int, elapsed: float) -> float | None:
    """Seconds left at the slowest host's pace so far (None before any progress)."""
    slowest = min(done.values()) if done else 0
    if slowest <= 0 or want <= 0 or slowest >= want:
        return None
    return elapsed / slowest * (want - slowest)


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
