"""The script observer's JSON-lines log: the same ``DIR/<rank>.jsonl`` lines as
apps/common.py's JsonLog, written at a fraction of its cost per record.

The observer writes a record for every collective a script calls, on the script's own
step, so what a record costs is what the observer costs (benchmarks/observer_overhead.py).
JsonLog builds a JSON encoder, walks the record for non-finite floats and flushes a text
file for every line; here one encoder is built once, the walk runs only when the encoder
refuses a NaN, and each line is one ``os.write`` to an ``O_APPEND`` descriptor: no
user-space buffer, so a line is in the kernel's page cache the moment its call returns,
and a rank that crashes, calls ``os._exit`` or is SIGKILLed by the run's teardown (its
torchrun gone: apps/script_boot) loses nothing it logged — with no signal handler of ours
in the script's process. ``O_APPEND`` keeps the lines of several threads whole.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

from incastlab.apps import common  # its JSON helpers, so lines are JsonLog's to the byte
from incastlab.topologies import runformat


class RecordLog:
    """``DIR/<rank>.jsonl``, one JSON object a line, each line in the kernel at once."""

    def __init__(self, out_dir: str, rank: int) -> None:
        os.makedirs(out_dir, exist_ok=True)
        self.path = os.path.join(out_dir, runformat.worker_log(rank))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
                           | os.O_CLOEXEC, 0o644)
        self._encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False,
                                        default=common._jsonable).encode

    def write(self, event: str, **fields: Any) -> None:
        """Append one event. Non-finite floats (a diverged loss) are written as null."""
        record = {"event": event, **fields}
        try:
            line = self._encode(record)
        except ValueError:  # NaN or infinity somewhere: null, as JsonLog writes them
            line = self._encode(common._finite(record))
        self._append((line + "\n").encode())

    def collective(self, rec: dict) -> None:
        """Append one ``collective`` event of the observer's fields (Observer.begin), the
        line formatted from a template when every field is of its usual type (a fifth of
        the encoder's cost), else as write() makes it; the same bytes either way."""
        line = _collective_line(rec)
        if line is None:
            self.write("collective", **rec)
            return
        self._append(line.encode())

    def _append(self, data: bytes) -> None:
        while data:  # a regular file takes it whole unless the disk is full
            written = os.write(self._fd, data)
            if not written:
                raise OSError(f"{self.path}: nothing written")
            data = data[written:]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# Observer.begin's fields in its order (a DDP bucket's index last), the JSON encoder's
# line of them: "%r" of a float and "%d" of an int are what the encoder writes
COLLECTIVE_FIELDS = ("seq", "op", "call", "bytes", "group_size", "peer", "async_op", "step",
                     "t_start", "t_end")
_TEMPLATE = ('{"event":"collective","seq":%d,"op":"%s","call":"%s","bytes":%d,'
             '"group_size":%s,"peer":%s,"async_op":%s,"step":%d,"t_start":%r,"t_end":%r%s}\n')


def _int_or_null(v) -> str | None:
    return "null" if v is None else str(v) if type(v) is int else None


def _collective_line(r: dict) -> str | None:
    """The JSON line of a collective record; None for anything but the usual fields and
    types (names of identifier characters only: nothing to escape; finite floats)."""
    keys = tuple(r)
    if keys[:10] != COLLECTIVE_FIELDS or len(keys) > 11 \
            or (len(keys) == 11 and (keys[10] != "bucket" or type(r["bucket"]) is not int)):
        return None
    op, call, t0, t1 = r["op"], r["call"], r["t_start"], r["t_end"]
    size, peer = _int_or_null(r["group_size"]), _int_or_null(r["peer"])
    if not (type(r["seq"]) is int and type(r["bytes"]) is int and type(r["step"]) is int
            and type(op) is str and op.isidentifier() and op.isascii()
            and type(call) is str and call.isidentifier() and call.isascii()
            and type(r["async_op"]) is bool and size is not None and peer is not None
            and type(t0) is float and type(t1) is float
            and math.isfinite(t0) and math.isfinite(t1)):
        return None
    bucket = f',"bucket":{r["bucket"]}' if len(keys) == 11 else ""
    return _TEMPLATE % (r["seq"], op, call, r["bytes"], size, peer,
                        "true" if r["async_op"] else "false", r["step"], t0, t1, bucket)
