"""How a job's own logged events become trace events (declarations only, stdlib: a job
plugin declares its `trace_spans` with these at import time without loading the trace
builder, analysis/trace.py, which draws them)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["LoggedInstant", "LoggedSpan"]


class LoggedSpan(NamedTuple):
    """How a logged event becomes a complete event on thread 1 of its rank's process:
    named `label(row)`, in category `cat`, from field `start` to field `end` (epoch s),
    with the fields `args` (None where a row lacks one)."""

    event: str
    label: Callable[[Any], str]
    cat: str
    start: str
    end: str
    args: tuple[str, ...]


class LoggedInstant(NamedTuple):
    """How a logged event becomes an instant event at its field `t` on thread 1."""

    event: str
    label: str
    cat: str
    args: tuple[str, ...]
