"""Loading a spec: TOML text or a file, CLI overrides ``table.field=value`` (values
parsed as TOML values, falling back to a bare string), unknown names refused with a
suggestion, then the whole spec validated (:mod:`incastlab.spec.validation`) and its
numbers normalised. A sweep is refused unless ``allow_sweep=True`` (``incastlab sweep``).
"""
from __future__ import annotations

import copy
import dataclasses
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from incastlab import events as _events
from incastlab.fields import did_you_mean as _did_you_mean
from incastlab.fields import is_num as _is_num
from incastlab.jobs.base import Straggler
from incastlab.spec.document import Spec
from incastlab.spec.errors import SpecError
from incastlab.spec.schema import TABLES, iter_fields, set_field
from incastlab.spec.validation import problems

__all__ = ["load_spec", "loads_spec", "normalized", "parse_value"]


def parse_value(text: str):
    """A CLI value as a TOML value (``8``, ``true``, ``["a","b"]``, ``{rank=0}``), or, when
    that fails, the bare string (``ecmp``, ``2ms``)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _apply_overrides(raw: dict, overrides: Iterable[str], errors: list[str]) -> None:
    every_field = [f"{t}.{f.name}" for t, cls in TABLES.items() for f in dataclasses.fields(cls)]
    text_fields = {f"{t}.{f.name}" for t, cls in TABLES.items() for f in dataclasses.fields(cls)
                   if f.type == "str"}
    for item in overrides:
        key, eq, value = item.partition("=")
        key = key.strip()
        parts = key.split(".")
        if not eq or len(parts) != 2 or not all(parts):
            hint = _did_you_mean(key, every_field) if "." not in key else ""
            if not hint:
                hint = next((f" (did you mean '{k}'?)" for k in every_field
                             if k.endswith("." + key)), "")
            errors.append(f"override {item!r}: expected table.field=value{hint}")
            continue
        table, name = parts
        target = raw.setdefault(table, {})
        if isinstance(target, dict):  # a non-table here is reported by _split_tables
            parsed = parse_value(value.strip())
            if key in text_fields and not isinstance(parsed, (str, list, dict)):
                parsed = value.strip()  # --set run.name=2024 means the text "2024"
            target[name] = parsed


def _split_tables(raw: dict, errors: list[str]) -> dict[str, dict]:
    """Known tables' known fields; every unknown name is an error with a suggestion."""
    tables: dict[str, dict] = {t: {} for t in TABLES}
    owner = {f.name: t for t, cls in TABLES.items() for f in dataclasses.fields(cls)}
    for table, content in raw.items():
        if table not in TABLES:
            if not isinstance(content, dict) and table in owner:
                errors.append(f"{table}: a field outside its table; write it under "
                              f"[{owner[table]}]")
            else:
                errors.append(f"{table}: unknown table{_did_you_mean(table, TABLES)}; "
                              f"tables are {', '.join(TABLES)}")
            continue
        if not isinstance(content, dict):
            errors.append(f"{table}: {content!r} is not a table")
            continue
        names = [f.name for f in dataclasses.fields(TABLES[table])]
        for name, value in content.items():
            if name in names:
                tables[table][name] = value
                continue
            if owner.get(name):
                hint = f" (it belongs in [{owner[name]}]: {owner[name]}.{name})"
            else:
                hint = _did_you_mean(name, names, f"{table}.{{}}")
            errors.append(f"{table}.{name}: unknown field{hint}; [{table}] has "
                          f"{', '.join(names)}")
    return tables


def loads_spec(text: str, overrides: Iterable[str] = (), *,
               capabilities: Mapping[str, Any] | Any | None = None,
               allow_sweep: bool = False, source: str | None = None,
               name: str = "default") -> Spec:
    """Parse, override and validate a spec given as TOML text. See :func:`load_spec`."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError([f"not valid TOML: {exc}"], source) from None
    errors: list[str] = []
    _apply_overrides(raw, overrides, errors)
    raw_events = raw.pop("events", [])
    raw_jobs = raw.pop("jobs", None)
    if raw_jobs is not None and "workload" in raw:
        errors.append("workload, jobs: both [workload] and [[jobs]] given; with [[jobs]] "
                      "each job is its own table: leave [workload] out")
        raw.pop("workload")
    tables = _split_tables(raw, errors)
    tables["run"].setdefault("name", name)
    # a byte limit replaces the packet limit's default; both given is refused (below)
    if tables["topology"].get("queue_bytes") is not None:
        tables["topology"].setdefault("queue_packets", None)
    spec = Spec(**{t: cls(**tables[t]) for t, cls in TABLES.items()}, events=raw_events,
                source=source)
    if raw_jobs is not None:  # each job's table validated as [workload] is (multijob.py)
        from incastlab import multijob

        spec.jobs, found = multijob.parse(raw_jobs, spec, capabilities)
        errors += found
    errors += problems(spec, capabilities)
    if errors:
        raise SpecError(errors, source)
    spec = normalized(spec)
    if not allow_sweep:
        spec.require_single()
    return spec


def load_spec(path: str | Path | None = None, overrides: Iterable[str] = (), *,
              capabilities: Mapping[str, Any] | Any | None = None,
              allow_sweep: bool = False) -> Spec:
    """Load a spec file (``None``: all defaults), apply CLI overrides and validate it.

    overrides: strings ``table.field=value`` (``--set routing.policy=ecmp``); the value is
        parsed as a TOML value, else taken as a bare string.
    capabilities: what the runner's preflight found (``{"netem": bool}`` or its
        Capabilities object); ``None`` skips machine-dependent checks.
    allow_sweep: accept list values and repetitions (``incastlab sweep``); otherwise a
        sweep spec is refused with a pointer to ``incastlab sweep``.
    run.name defaults to the file's name without ``.toml``.
    Raises SpecError listing every problem.
    """
    if path is None:
        return loads_spec("", overrides, capabilities=capabilities, allow_sweep=allow_sweep)
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([f"cannot read the spec: {exc}"], str(path)) from None
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem).lstrip("._-") or "default"
    return loads_spec(text, overrides, capabilities=capabilities, allow_sweep=allow_sweep,
                      source=str(path), name=stem[:64])


def normalized(spec: Spec) -> Spec:
    """A copy with numbers of float fields as floats and stragglers as Straggler."""
    spec = copy.deepcopy(spec)
    hints = {t: cls.__annotations__ for t, cls in TABLES.items()}
    for key, value, _meta in iter_fields(spec):
        table, name = key.split(".")
        if "float" in hints[table][name]:
            if isinstance(value, list):
                set_field(spec, key, [float(v) if _is_num(v) else v for v in value])
            elif _is_num(value):
                set_field(spec, key, float(value))
    spec.workload.stragglers = [
        s if isinstance(s, Straggler) else Straggler(int(s["rank"]), float(s["factor"]))
        for s in spec.workload.stragglers]
    spec.events = _events.normalized(spec.events)
    return spec
