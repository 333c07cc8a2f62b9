"""One run at a time: an open-file-description lock on a file under /run, holding who
holds it.

The lock is an OFD lock (fcntl F_OFD_SETLK, Linux 3.15+) on the whole file: like flock it
belongs to the open file description, so it is dropped when the holder's descriptor
closes (or the holder dies), and two descriptors conflict even within one process. Unlike
flock it can be *tested* without being taken (F_OFD_GETLK): `holder()` (asked by
`incastlab clean` and preflight) never holds the lock, so it cannot make a run starting at
that instant refuse (with flock the test had to take the lock for an instant). OFD locks
and flock locks are different families on Linux and do not see each other.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import struct
import time
from pathlib import Path

LOCK_PATH = Path(os.environ.get("INCASTLAB_LOCK", "/run/incastlab/run.lock"))

# struct flock on 64-bit Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid
# (pid_t, which must be 0 for the OFD commands), padded to 32 bytes
_FLOCK = struct.Struct("hhqqi4x")


class LockHeld(RuntimeError):
    """Another run holds the lock; the message names it."""


def _whole_file(kind: int) -> bytes:
    return _FLOCK.pack(kind, os.SEEK_SET, 0, 0, 0)


class RunLock:
    def __init__(self, path: Path = LOCK_PATH):
        self.path = path
        self._fd: int | None = None

    def holder(self) -> str | None:
        """A description of the live holder, or None if the lock is free (or ours).
        Only asks the kernel (F_OFD_GETLK): the lock is never taken here."""
        if self._fd is not None:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # never taken on this machine since boot (/run is a tmpfs)
        try:
            got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _whole_file(fcntl.F_WRLCK))
            if _FLOCK.unpack(got)[0] == fcntl.F_UNLCK:
                return None
            return _describe(os.pread(fd, 4096, 0))
        finally:
            os.close(fd)

    def acquire(self, run_dir: str | None = None) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _whole_file(fcntl.F_WRLCK))
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
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
            os.close(self._fd)  # closing the descriptor drops its OFD lock
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
