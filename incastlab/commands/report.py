"""Rebuild a run's report (metrics.json, summary.md, report.html, plots/) from its run
directory alone; no root, no Mininet: works on any machine with the run's files."""
from __future__ import annotations

import sys
from pathlib import Path

HELP = "rebuild a run's report from its run directory"


def add_arguments(p):
    p.add_argument("run_dir", help="a run directory (holds manifest.json)")


def run(args) -> int:
    run_dir = Path(args.run_dir)
    if not (run_dir / "manifest.json").exists():
        print(f"incastlab report: {not_a_run(run_dir)}", file=sys.stderr)
        return 2
    from incastlab.commands.common import build_report, short_summary

    paths = build_report(run_dir)
    if not args.quiet:
        print(short_summary(run_dir))
    print(f"report: {paths.get('report.html', run_dir / 'report.html')}")
    return 0


def not_a_run(path: Path) -> str:
    """Why ``path`` is not a run directory, and what the user may have meant."""
    if not path.exists():
        return f"{path} does not exist"
    if not path.is_dir():
        return f"{path} is a file, not a run directory"
    runs = sorted(p.parent.name for p in path.glob("*/manifest.json"))
    if runs:
        shown = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
        return (f"{path} holds {len(runs)} run directories ({shown}), not one run: "
                f"`incastlab report {path}/<run>` rebuilds one report, "
                f"`incastlab compare {path}` compares them")
    return f"{path} is not a run directory (no manifest.json)"
