"""Run one experiment: preflight, fabric, controller, captures, workload, teardown,
analysis. Prints the path of report.html and a short summary. The spec is validated
(with the machine's capabilities) before anything on the system is touched. Instead of
a spec file, a job kind's shortcut (below) runs its common case on the default fabric,
e.g. `incastlab run --script train.py --workers 4 -- --epochs 2`."""
from __future__ import annotations

import sys
from pathlib import Path

from incastlab.commands import common, shortcut

HELP = "run one experiment from a spec and build its report"


def add_arguments(p):
    p.add_argument("spec", nargs="?", default=None,
                   help="spec file (TOML); default: all defaults (see specs/)")
    common.add_spec_options(p)
    p.add_argument("--out", default=None,
                   help="run directory to create (default: <run.out_dir>/<name>-<time>)")
    p.add_argument("--no-report", action="store_true", help="skip the analysis step")
    shortcut.add_flags(p)
    p.set_defaults(takes_rest=True)  # the words after `--` (cli.main) go to a shortcut


def run(args) -> int:
    spec = shortcut.load(args) if shortcut.asked(args) else \
        common.load(args, allow_sweep=False)
    if spec is None:
        return 2
    caps = common.ready(spec, args)
    if caps is None:
        return 1
    from incastlab.runner import new_run_dir

    if args.out:
        run_dir = Path(args.out)
        if run_dir.exists() and any(run_dir.iterdir()):
            print(f"incastlab run: --out {run_dir} exists and is not empty; choose a new "
                  "directory (nothing recorded is ever overwritten)", file=sys.stderr)
            return 2
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        run_dir = new_run_dir(spec.run.out_dir, spec.run.name)
    status = common.execute(spec, run_dir, args, caps)
    common.report_and_summarise(run_dir, args)
    return 0 if status == "complete" else 1
