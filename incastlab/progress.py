"""Live progress on a terminal (phases, iterations per worker); silent otherwise."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, enabled: bool | None = None, stream=sys.stderr):
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.t0 = time.monotonic()
        self._inline = False

    def _write(self, text: str, inline: bool = False) -> None:
        if not self.enabled:
            return
        if self._inline:
            self.stream.write("\r\033[K")
        self.stream.write(f"[{time.monotonic() - self.t0:6.1f}s] {text}")
        self.stream.write("" if inline else "\n")
        self._inline = inline
        self.stream.flush()

    def phase(self, text: str) -> None:
        self._write(text)

    def iterations(self, done: dict[str, int], want: int) -> None:
        parts = " ".join(f"{host} {n}/{want}" for host, n in done.items())
        self._write(f"iterations: {parts}", inline=True)
