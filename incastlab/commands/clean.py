"""Remove what a crashed incastlab run left behind (bridges, veths, namespaces,
controller, tcpdump, workers), like `mn -c` but touching only what our runs recorded
as theirs. Safe to run twice; a no-op on a clean machine."""
from __future__ import annotations

import os
import sys

from incastlab.clean import clean

HELP = "remove leftovers of crashed runs (ours only); safe to repeat"


def add_arguments(p):
    p.add_argument("--force", action="store_true",
                   help="also tear down runs whose owning process is still alive")


def run(args) -> int:
    if os.geteuid() != 0:
        print("incastlab clean needs root: run it with sudo.", file=sys.stderr)
        return 1
    removed, skipped = clean(include_live=args.force)
    for item in removed:
        print(f"removed {item}")
    for item in skipped:
        print(f"left alone: {item} (use --force to tear it down)")
    if not removed and not skipped:
        print("nothing of ours to clean")
    return 0
