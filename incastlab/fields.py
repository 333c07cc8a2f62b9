"""Schema primitives shared by the spec's tables and the job plugins' tables.

A *check* takes a value and returns None when it is allowed, else the text that follows
"table.field: ", naming the value and what is allowed. :func:`spec_field` declares a
field of a spec table: its default, its check, one line of documentation, and whether a
list there is a sweep. The spec (``incastlab.spec``) and every job module
(``incastlab.jobs.*``) declare their fields with these, so a job's table is validated,
documented (``python -m incastlab.spec``) and swept exactly like the built-in tables.
No system calls, no imports beyond the standard library.
"""
from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import Any

Check = Callable[[Any], "str | None"]


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bounds(low, high, low_open=False, unit="") -> str:
    if low is not None and high is not None and not low_open:
        text = f" from {low} to {high}"
    else:
        parts = []
        if low is not None:
            parts.append(f"{'>' if low_open else '>='} {low}")
        if high is not None:
            parts.append(f"<= {high}")
        text = " " + " and ".join(parts) if parts else ""
    return text + (f" ({unit})" if unit else "")


def int_check(low: int | None = None, high: int | None = None, unit: str = "") -> Check:
    def check(v):
        if is_int(v) and (low is None or v >= low) and (high is None or v <= high):
            return None
        return f"{v!r} is not an integer{_bounds(low, high, unit=unit)}"
    return check


def num_check(low: float | None = None, high: float | None = None, *,
              low_open: bool = False, unit: str = "") -> Check:
    def check(v):
        if is_num(v) and (low is None or (v > low if low_open else v >= low)) and (
                high is None or v <= high):
            return None
        return f"{v!r} is not a number{_bounds(low, high, low_open, unit)}"
    return check


def choice(*values: str) -> Check:
    def check(v):
        return None if isinstance(v, str) and v in values else \
            f"{v!r} is not one of {', '.join(values)}"
    return check


def optional(inner: Check) -> Check:
    def check(v):
        return None if v is None else inner(v)
    return check


OFF = "off"  # a setting turned off where a list cannot hold a missing value (sweeps)


def or_off(inner: Check, off: str = OFF) -> Check:
    """``inner``, or the word ``off`` (a setting turned off): a sweep list may then hold
    both, e.g. ``[20, "off"]``, which TOML cannot say with a missing value."""
    def check(v):
        if v == off:
            return None
        problem = inner(v)
        return f"{problem} or {off!r}" if problem else None
    return check


def boolean(v) -> str | None:
    return None if isinstance(v, bool) else f"{v!r} is not true or false"


def pattern(regex: str, what: str) -> Check:
    def check(v):
        return None if isinstance(v, str) and re.fullmatch(regex, v) else f"{v!r} is not {what}"
    return check


def spec_field(default, check: Check, doc: str, *, sweep: bool = False,
               list_valued: bool = False):
    """A schema field: its default, its check, one line of documentation, and whether a
    list there means a sweep (``sweep``) or is the value itself (``list_valued``)."""
    meta = {"check": check, "doc": doc, "sweep": sweep, "list_valued": list_valued}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def did_you_mean(word: str, candidates: Iterable[str], fmt: str = "'{}'") -> str:
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {fmt.format(match[0])}?)" if match else ""
