"""Kernel TCP counters of every host, raw from ``nstat`` inside its namespace."""
from __future__ import annotations

import json
from pathlib import Path

from incastlab.topologies.runformat import counters_file

# -a: absolute values; -z: zeros too; -s: never touch nstat's history file (shared by
# all namespaces, so it would mix hosts); --json: machine-readable.
NSTAT = "nstat -a -z -s --json"


def snapshot(fabric, out_dir: Path, phase: str) -> None:
    """Write counters/<host>.<phase>.json for every host (phase: before/after)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for host in fabric.net.hosts:
        text = host.cmd(NSTAT)
        json.loads(text)  # refuse to record something that is not nstat's JSON
        (out_dir / counters_file(host.name, phase)).write_text(text)
