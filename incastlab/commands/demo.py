"""`make demo`: a small leaf–spine fabric, the same training job once with a
synchronous parameter server and once with ring all-reduce, then the comparison report
(specs/demo.toml; about three minutes on 2 cores). Routing is held fixed (policy
single) so that both jobs see the same spine balance: the comparison is PS vs ring."""
from __future__ import annotations

import sys
from pathlib import Path

from incastlab.commands import common, sweep

HELP = "the default experiment: sync PS vs ring all-reduce on one routing, with a report"
DEMO_SPEC = Path(__file__).resolve().parents[2] / "specs" / "demo.toml"


def add_arguments(p):
    common.add_spec_options(p)
    p.add_argument("--out", default=None, help="sweep directory (default: runs/demo-sweep-*)")
    p.add_argument("--no-report", action="store_true", help="skip the per-run reports")


def run(args) -> int:
    if not DEMO_SPEC.exists():
        print(f"incastlab demo: {DEMO_SPEC} is missing (run from a source checkout)",
              file=sys.stderr)
        return 2
    args.spec = str(DEMO_SPEC)
    args.resume = False
    return sweep.sweep(args)
