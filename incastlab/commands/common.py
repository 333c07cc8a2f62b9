"""What the run, sweep and demo commands share: spec options, validation, execution,
reporting.

The analysis never imports the orchestrator: the commands hand it this installation's
job registry (`analyse`, `build_report`, `compare_runs` below: the analysis's own, with
``jobs=incastlab.jobs.JOBS``)."""
from __future__ import annotations

import sys
import json
from pathlib import Path

from incastlab.fabric import DEFAULT_CONTROLLER_PORT


def add_spec_options(p) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="TABLE.FIELD=VALUE",
                   help="override a spec field, e.g. --set routing.policy=ecmp "
                        "(value in TOML syntax; repeatable)")
    p.add_argument("--controller-port", type=int, default=DEFAULT_CONTROLLER_PORT,
                   help="TCP port of the controller on 127.0.0.1")


def load(args, allow_sweep: bool):
    from incastlab.spec import SpecError, load_spec

    try:
        return load_spec(args.spec, args.overrides, allow_sweep=allow_sweep)
    except SpecError as exc:
        print(f"incastlab {args.command}: invalid spec\n{exc}", file=sys.stderr)
        return None


def ready(spec, args):
    """Preflight and machine-dependent checks; None (after saying why) if not ready."""
    from incastlab.preflight import PreflightError
    from incastlab.runner import check_ready
    from incastlab.spec import SpecError

    try:
        return check_ready(spec, args.controller_port)
    except PreflightError as exc:
        print(f"incastlab {args.command}: preflight failed\n{exc}", file=sys.stderr)
    except SpecError as exc:
        print(f"incastlab {args.command}: invalid spec on this machine\n{exc}",
              file=sys.stderr)
    return None


def execute(spec, run_dir: Path, args, caps) -> str:
    from incastlab.progress import Progress
    from incastlab.runner import run_experiment

    progress = Progress(enabled=None if not args.quiet else False)
    progress.phase(f"run directory {run_dir}")
    return run_experiment(spec, run_dir, controller_port=args.controller_port,
                          progress=progress, caps=caps)


def analyse(run_dir, **kw):
    """`incastlab.analysis.report.analyse` of a run with the job registry handed in."""
    from incastlab.analysis.report import analyse as analyse_run
    from incastlab.jobs import JOBS

    return analyse_run(run_dir, jobs=JOBS, **kw)


def build_report(run_dir, out_dir=None, **kw) -> dict[str, Path]:
    """`incastlab.analysis.report.build_report` with the job registry handed in."""
    from incastlab.analysis.report import build_report as build
    from incastlab.jobs import JOBS

    return build(run_dir, out_dir, jobs=JOBS, **kw)


def compare_runs(run_dirs, out_dir, **kw) -> dict:
    """`incastlab.analysis.compare.compare_runs` with the job registry handed in."""
    from incastlab.analysis.compare import compare_runs as compare
    from incastlab.jobs import JOBS

    return compare(run_dirs, out_dir, jobs=JOBS, **kw)


def report_and_summarise(run_dir: Path, args) -> None:
    """Build the run's report (also for runs that did not complete: the report says so)
    and print where it is, with the summary."""
    if getattr(args, "no_report", False):
        print(f"run directory: {run_dir}")
        return
    try:
        paths = build_report(run_dir)
    except Exception as exc:  # noqa: BLE001 - the raw data stays; say how to retry
        print(f"incastlab: the report could not be built ({type(exc).__name__}: {exc}); the "
              f"raw data is in {run_dir}; retry with `incastlab report {run_dir}`",
              file=sys.stderr)
        return
    if not args.quiet:
        print(short_summary(Path(run_dir)))
    print(f"report: {paths.get('report.html', Path(run_dir) / 'report.html')}")


def short_summary(run_dir: Path) -> str:
    """The run's status, the headline numbers the metric declarations mark for the CLI
    (analysis/metrics.py; the ones this run measured), and its findings, from
    metrics.json (summary.md and report.html hold the rest)."""
    import json
    import textwrap

    from incastlab.analysis.metrics import for_cli, from_json
    from incastlab.jobs import JOBS

    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return f"{run_dir}: no metrics.json"
    run = metrics.get("run", {})
    lines = [f"{run_dir.name}: {run.get('status', '?')}"
             + (f" ({run['reason']})" if run.get("reason") else "")]
    cli = {m.name for m in for_cli(JOBS)}
    for r in from_json(metrics, JOBS):
        if r.metric.name in cli and r.value is not None:
            lines.append(f"  {r.metric.label}: {r.metric.text_with_unit(r.value)}")
    findings = metrics.get("findings") or []
    for text in findings:
        lines.append(textwrap.fill(text, width=100, initial_indent="  - ",
                                   subsequent_indent="    "))
    if not findings:  # an older metrics.json: its warnings, as the findings would say
        for problem in metrics.get("problems", [])[:3]:
            lines.append(f"  warning: {problem}")
    return "\n".join(lines)


def compare_summary(table_path: Path, per_block: int = 5) -> str:
    """The CLI metrics of a comparison (compare.csv) for the terminal: a legend of the
    groups, then a table of each group's mean ± 95 % CI half-width per metric (groups as
    columns, `per_block` at a time)."""

    import pandas as pd

    from incastlab.analysis.metrics import for_cli
    from incastlab.jobs import JOBS

    from incastlab.analysis.compare import cell_text

    try:
        # compare.json keeps each group's run values as a list (the CSV as text)
        table = pd.DataFrame(json.loads(Path(table_path).with_name("compare.json")
                                        .read_text())["table"])
    except (OSError, ValueError, KeyError):
        try:
            table = pd.read_csv(table_path)
        except (OSError, ValueError):
            return ""
    if table.empty:
        return "comparison: no complete runs to compare"
    groups = list(dict.fromkeys(table["group"]))
    n = table.groupby("group")["n"].max()
    lines = ["comparison (mean ± 95 % CI half-width with 3 or more runs, else each run's "
             "value; n = runs):"]
    lines += [f"  [{i}] {g} (n={n[g]})" for i, g in enumerate(groups, start=1)]
    declared = {m.name: m for m in for_cli(JOBS)}
    cell = {}
    for r in table.to_dict("records"):
        m = declared.get(r["metric"])
        if m is None:
            continue
        stats = {k: (float("nan") if v is None else v) for k, v in r.items()}
        cell[(r["metric"], r["group"])] = cell_text(stats, m.text)
    rows = [(m.label + (f" ({m.unit})" if m.unit else ""), m.name) for m in for_cli(JOBS)
            if any((m.name, g) in cell for g in groups)]
    width = max(len(label) for label, _ in rows) if rows else 0
    for start in range(0, len(groups), per_block):
        block = list(enumerate(groups, start=1))[start:start + per_block]
        cols = [max([len(f"[{i}]")] + [len(cell.get((name, g), "n/a")) for _, name in rows])
                for i, g in block]
        lines.append("  " + " " * width + "".join(f"  {f'[{i}]':>{w}}" for (i, _), w
                                                  in zip(block, cols, strict=True)))
        for label, name in rows:
            lines.append(f"  {label:<{width}}" + "".join(
                f"  {cell.get((name, g), 'n/a'):>{w}}" for (_, g), w in zip(block, cols,
                                                                           strict=True)))
    import textwrap

    lines += [textwrap.fill(t, 100, initial_indent="  - ", subsequent_indent="    ")
              for t in _compare_cost(Path(table_path).with_name("compare.json"))]
    return "\n".join(lines)


def _compare_cost(compare_json: Path) -> list[str]:
    """What each group's iteration is made of, and what the difference between two
    groups is made of (analysis.findings.compare_cost): compare.json's answer, or from
    its runs where an older compare.json has none."""
    import json

    from incastlab.analysis.findings import compare_cost

    try:
        data = json.loads(compare_json.read_text())
    except (OSError, ValueError):
        return []
    if "answer" in data:  # the page's own sentences (compare.html opens with them)
        return list(data["answer"] or [])
    return compare_cost(data.get("runs") or [])
