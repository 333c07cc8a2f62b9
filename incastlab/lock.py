"""One run at a time: an flock on a file under /run, holding who holds it."""
from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

LOCK_PATH = Path(os.environ.get("INCASTLAB_LOCK", "/run/incastlab/run.lock"))


class LockHeld(RuntimeError):
    """Another run holds the lock; the message names it."""


class RunLock:
    def __init__(self, path: Path = LOCK_PATH):
        self.path = path
        self._fd: int | None = None

    def holder(self) -> str | None:
        """A description of the live holder, or None if the lock is free (or ours)."""
        if self._fd is not None:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _describe(os.pread(fd, 4096, 0))
        finally:
            os.close(fd)  # closing drops a lock we may just have taken
        return None

    def acquire(self, run_dir: str | None = None) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _describe(os.pread(fd, 4096, 0))
            os.close(fd)
            raise LockHeld(f"another incastlab run is in progress ({who}); "
                           "wait for it to finish, or run `incastlab clean` if it died") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "run_dir": run_dir,
                                  "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None


def _describe(raw: bytes) -> str:
    try:
        info = json.loads(raw.decode() or "{}")
    except ValueError:
        info = {}
    parts = [f"pid {info.get('pid', '?')}"]
    if info.get("run_dir"):
        parts.append(f"run directory {info['run_dir']}")
    if info.get("since"):
        parts.append(f"since {info['since']}")
    return ", ".join(parts)
