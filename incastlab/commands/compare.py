"""Compare runs: tables and plots grouped by what differs between their specs, with
means and 95% confidence intervals over repetitions."""
from __future__ import annotations

import sys
from pathlib import Path

HELP = "comparison report across run directories"


def add_arguments(p):
    p.add_argument("run_dirs", nargs="+",
                   help="run directories to compare, or a sweep's directory (its runs)")
    p.add_argument("--out", default="compare", help="directory for the comparison report")
    p.add_argument("--force", action="store_true",
                   help="write into --out even if it holds a report already")


def runs_of(paths: list[Path]) -> list[Path]:
    """The run directories named, a directory of runs (a sweep's) standing for its runs."""
    out = []
    for d in paths:
        inner = sorted(m.parent for m in d.glob("*/manifest.json")) \
            if d.is_dir() and not (d / "manifest.json").exists() else []
        out += inner or [d]
    return out


def run(args) -> int:
    dirs = runs_of([Path(d) for d in args.run_dirs])
    out_dir = Path(args.out)
    if out_dir.exists() and any(out_dir.iterdir()) and not args.force:
        print(f"incastlab compare: {out_dir} exists and is not empty; choose another "
              f"--out, or add --force to write over it", file=sys.stderr)
        return 2
    missing = [str(d) for d in dirs if not (d / "manifest.json").exists()]
    if missing:
        print(f"incastlab compare: not run directories (no manifest.json): "
              f"{', '.join(missing)}", file=sys.stderr)
        return 2
    from incastlab.analysis.compare import DuplicateRunError
    from incastlab.commands.common import compare_runs

    try:
        out = compare_runs(dirs, out_dir)
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
