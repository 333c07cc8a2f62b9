"""What the run, sweep and demo commands share: spec options, validation, execution,
reporting."""
from __future__ import annotations

import sys
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


def report_and_summarise(run_dir: Path, args) -> None:
    """Build the run's report (also for runs that did not complete: the report says so)
    and print where it is, with the summary."""
    if getattr(args, "no_report", False):
        print(f"run directory: {run_dir}")
        return
    from incastlab.analysis.report import build_report

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


HEADLINE = [("iteration_time_mean_s", "mean iteration time", "s"),
            ("tc_drops", "queue drops (tc)", "packets"),
            ("capture_losses", "losses seen in captures", "packets"),
            ("retransmissions", "TCP retransmissions", "segments"),
            ("rtos", "retransmission timeouts", ""),
            ("goodput_mbps", "incast goodput", "Mbit/s"),
            ("final_accuracy", "final held-out accuracy", "")]


def short_summary(run_dir: Path) -> str:
    """A few headline numbers from metrics.json, for the terminal (summary.md and
    report.html hold the rest)."""
    import json

    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return f"{run_dir}: no metrics.json"
    run = metrics.get("run", {})
    lines = [f"{run_dir.name}: {run.get('status', '?')}"
             + (f" ({run['reason']})" if run.get("reason") else "")]
    head = metrics.get("headline", {})
    for key, label, unit in HEADLINE:
        value = head.get(key)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer() and unit != "s":
            value = int(value)  # counts are stored as floats in metrics.json
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
        lines.append(f"  {label}: {text} {unit}".rstrip())
    for problem in metrics.get("problems", [])[:3]:
        lines.append(f"  warning: {problem}")
    return "\n".join(lines)
