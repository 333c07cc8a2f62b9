"""Run an app's ranks as local processes on loopback (tests, benchmarks, trying things out).

Inside Mininet the runner starts one process per emulated host; this module does the
same on 127.0.0.1 with `subprocess`, each rank in its own process group so that it, and
only it, can be killed. `LocalJob` is a context manager: leaving it kills whatever of its
own is still running.

    with LocalJob(out_dir) as job:
        for rank, argv in enumerate(loopback_argv(build, 3, out_dir, free_port())):
            job.start(rank, argv)
        codes = job.wait(timeout=120)

`build` is a job's argv builder (e.g. incastlab.jobs.ps.ps_commands, or
`functools.partial(one_rank_per_host, "incastlab.apps.tensor")`).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from .commands import Endpoint

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def loopback_argv(build: Callable[..., list[list[str]]], ranks: int, out: str | Path,
                  port: int, options: dict[str, Any] | None = None,
                  extra: list[str] | None = None) -> list[list[str]]:
    """The command lines `build(hosts, out, port, options)` gives for `ranks` processes on
    loopback (127.0.0.1, interface lo), each with `extra` arguments appended."""
    hosts = [Endpoint(LOOPBACK, "lo")] * ranks
    return [argv + list(extra or []) for argv in build(hosts, str(out), port, options or {})]


class LocalJob:
    """Processes of one job; stdout/stderr of rank R go to OUT/R.stdout, OUT/R.stderr."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.procs: dict[Any, subprocess.Popen] = {}

    def start(self, name: Any, argv: list[str]) -> subprocess.Popen:
        with open(self.out / f"{name}.stdout", "wb") as so, \
                open(self.out / f"{name}.stderr", "wb") as se:
            proc = subprocess.Popen(argv, stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.procs[name] = proc
        return proc

    def wait(self, timeout: float) -> dict[Any, int | None]:
        """Wait up to `timeout` s for all; return exit codes (None: still running, killed)."""
        deadline = time.monotonic() + timeout
        codes: dict[Any, int | None] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[name] = None
        self.kill()
        return codes

    def kill(self, name: Any = None) -> None:
        """SIGKILL the process group of `name` (default: every rank still running)."""
        targets = [self.procs[name]] if name is not None else list(self.procs.values())
        for proc in targets:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()

    def stderr(self, name: Any) -> str:
        return (self.out / f"{name}.stderr").read_text(errors="replace")

    def __enter__(self) -> LocalJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of one `<rank>.jsonl` log (a torn last line is ignored)."""
    records = []
    for line in Path(path).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def events(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("event") == kind]
