"""``incastlab run``'s shortcuts: a job kind's common case on the default fabric from a
few flags the kind declares (``Job.run_flags``), e.g.

    incastlab run --script train.py --workers 4 -- --epochs 2

The flags become the ``[workload]`` table a user would write (``kind``, ``script``,
``workers``; the words after ``--`` fill ``Job.rest_field``, here ``args``), loaded as
any spec is: the same validation as ``incastlab check`` (``--set`` still applies to
everything else), and the run directory's spec.toml records the resolved spec. Every
problem names the flag it came from.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

DEST = "shortcut__{kind}__{field}"
REST = "arguments after --"


def _jobs():
    from incastlab.jobs import JOBS

    return {kind: job for kind, job in JOBS.items() if job.run_flags}


def add_flags(p: argparse.ArgumentParser) -> None:
    """One argument group per kind that declares a shortcut."""
    for kind, job in _jobs().items():
        defaults = {f.name: f.default for f in dataclasses.fields(job.Fields)}
        selectors = " | ".join(f"{f.flag} {f.metavar}" for f in job.run_flags if f.selects)
        others = " ".join(f"[{f.flag} {f.metavar}]" for f in job.run_flags if not f.selects)
        rest = " [-- ARGS ...]" if job.rest_field else ""
        g = p.add_argument_group(
            f"shortcut: {job.summary}",
            f"incastlab run {selectors} {others}{rest}: workload.kind = {kind!r} on the "
            f"default fabric, the flags as its [workload] fields"
            + (f", the words after -- as workload.{job.rest_field}" if rest else "")
            + "; validated as `incastlab check` validates a spec, recorded as spec.toml; "
            "--set sets any other field. Not with a spec file.")
        for f in job.run_flags:
            default = defaults.get(f.field)
            shown = "" if f.selects or default in ("", None, dataclasses.MISSING) else \
                f" (default: {default})"
            g.add_argument(f.flag, dest=DEST.format(kind=kind, field=f.field), type=f.type,
                           default=None, metavar=f.metavar, help=f.help + shown)


def _given(args) -> dict[str, dict[str, object]]:
    """kind -> {field: value} of the shortcut flags given."""
    given: dict[str, dict[str, object]] = {}
    for kind, job in _jobs().items():
        for f in job.run_flags:
            value = getattr(args, DEST.format(kind=kind, field=f.field), None)
            if value is not None:
                given.setdefault(kind, {})[f.field] = value
    return given


def asked(args) -> bool:
    """Whether any shortcut flag, or words after ``--``, were given."""
    return bool(_given(args)) or getattr(args, "rest", None) is not None


class ShortcutError(ValueError):
    """The flags cannot make a spec; ``errors`` name the flags."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("\n".join(errors))


def _flag_names(job) -> dict[str, str]:
    names = {f.field: f.flag for f in job.run_flags}
    if job.rest_field:
        names[job.rest_field] = REST
    return names


def _selectors(jobs, kinds) -> list[str]:
    return [f.flag for k in kinds for f in jobs[k].run_flags if f.selects]


def workload_table(args) -> tuple[str, dict]:
    """(kind, the [workload] table) the flags ask for; ShortcutError if they do not."""
    jobs, given = _jobs(), _given(args)
    rest = getattr(args, "rest", None)
    selecting = [k for k, fields in given.items()
                 if any(f.selects and f.field in fields for f in jobs[k].run_flags)]
    if len(selecting) > 1:
        raise ShortcutError([f"{', '.join(_selectors(jobs, selecting))}: one kind's "
                             "shortcut at a time"])
    if not selecting:
        stray = [f.flag for k, fields in given.items() for f in jobs[k].run_flags
                 if f.field in fields] + ([REST] if rest is not None else [])
        with_ = " or ".join(_selectors(jobs, jobs))
        raise ShortcutError([f"{s}: only with {with_}" for s in stray])
    kind = selecting[0]
    job = jobs[kind]
    chosen = [f.flag for f in job.run_flags if f.selects and f.field in given[kind]]
    errors = []
    if args.spec is not None:
        errors.append(f"{chosen[0]}: a shortcut builds its own spec on the "
                      f"default fabric; with the spec file {args.spec!r}, set "
                      f"workload.kind = {kind!r} and its fields there (or with --set)")
    if rest is not None and job.rest_field is None:
        errors.append(f"{REST}: {chosen[0]} takes none")
    table = {"kind": kind, **given[kind]}
    if rest is not None and job.rest_field:
        table[job.rest_field] = list(rest)
    names = {"kind": chosen[0], **_flag_names(job)}
    for item in args.overrides:
        key = item.partition("=")[0].strip()
        field = key.removeprefix("workload.")
        if key.startswith("workload.") and field in table:
            errors.append(f"--set {item}: {key} is set by {names[field]} already")
    if errors:
        raise ShortcutError(errors)
    return kind, table


def run_name(table: dict, job) -> str:
    """The run's name from the selecting flag's value: train.py -> train, pkg.mod -> mod."""
    value = next(str(table[f.field]) for f in job.run_flags if f.selects and f.field in table)
    stem = re.sub(r"\.py$", "", Path(value).name).rsplit(".", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]", "_", stem).lstrip("._-")[:64] or "default"


def flagged(errors: list[str], job) -> list[str]:
    """Spec problems with each field the flags set named by its flag: the problem's own
    field as "--flag (workload.field)", any other mention as the flag."""
    names = _flag_names(job)
    pattern = re.compile(r"workload\.(\w+)")

    def flag(m):
        return names.get(m.group(1), m.group(0))
    out = []
    for e in errors:
        m = pattern.match(e)
        if m and m.group(1) in names:
            e = f"{names[m.group(1)]} ({m.group(0)}){pattern.sub(flag, e[m.end():])}"
        out.append(e)
    return out


def load(args):
    """The spec the flags ask for (plus --set), or None after saying why on stderr."""
    import sys

    import tomli_w

    from incastlab.jobs import JOBS
    from incastlab.spec import SpecError, loads_spec

    try:
        kind, table = workload_table(args)
    except ShortcutError as exc:
        errors = exc.errors
    else:
        source = " ".join(f"{f.flag} {table[f.field]}" for f in JOBS[kind].run_flags
                          if f.field in table)
        try:
            return loads_spec(tomli_w.dumps({"workload": table}), args.overrides,
                              source=f"incastlab {args.command} {source}",
                              name=run_name(table, JOBS[kind]))
        except SpecError as exc:
            errors = flagged(exc.errors, JOBS[kind])
    print(f"incastlab {args.command}: invalid shortcut\n" + "\n".join(f"  {e}" for e in errors),
          file=sys.stderr)
    return None
