"""Compare runs: tables and plots grouped by what differs between their specs, with
means and 95% confidence intervals over repetitions."""
from __future__ import annotations

import sys
from pathlib import Path

HELP = "comparison report across run directories"


def add_arguments(p):
    p.add_argument("run_dirs", nargs="+", help="run directories to compare")
    p.add_argument("--out", default="compare", help="directory for the comparison report")


def run(args) -> int:
    dirs = [Path(d) for d in args.run_dirs]
    missing = [str(d) for d in dirs if not (d / "manifest.json").exists()]
    if missing:
        print(f"incastlab compare: not run directories (no manifest.json): "
              f"{', '.join(missing)}", file=sys.stderr)
        return 2
    from incastlab.analysis.compare import DuplicateRunError
    from incastlab.commands.common import compare_runs

    try:
        out = compare_runs(dirs, Path(args.out))
    except DuplicateRunError as exc:
        print(f"incastlab compare: {exc}", file=sys.stderr)
        return 2
    from incastlab.commands.common import compare_summary

    summary = compare_summary(out["table"]) if not args.quiet else ""
    if summary:
        print(summary)
    for c in out["confounds"]:  # what besides the spec differs between the groups
        if c.differs:
            print(f"  careful ({c.check}): {c.text}")
    print(f"comparison report: {out['report']}")
    return 0
