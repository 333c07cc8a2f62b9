"""``manifest.json``: what ran, on what, how it ended. Written through on every change,
so a run that is killed keeps a manifest saying how far it got."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from incastlab.topologies.runformat import FORMAT_VERSION, MANIFEST

REPO = Path(__file__).resolve().parents[1]


def _out(argv: list[str], cwd: Path | None = None) -> str | None:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False,
                             cwd=cwd)
    except OSError:
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def versions() -> dict:
    """Versions of everything a run depends on."""
    ovs = _out(["ovs-vsctl", "--version"])
    return {
        "incastlab": _dist_version("incastlab"),
        "git": _out(["git", "describe", "--always", "--dirty", "--tags"], cwd=REPO),
        "kernel": platform.release(), "python": platform.python_version(),
        "openvswitch": ovs.splitlines()[0].split()[-1] if ovs else None,
        "os-ken": _dist_version("os-ken"), "torch": _dist_version("torch"),
        "pandas": _dist_version("pandas"),
        "mininet": _out(["dpkg-query", "-W", "-f=${Version}", "mininet"]),
    }


class Manifest:
    def __init__(self, run_dir: Path, spec_dict: dict):
        self.path = Path(run_dir) / MANIFEST
        self.data = {"format_version": FORMAT_VERSION, "status": "running", "reason": None,
                     "start": time.time(), "end": None, "host": platform.node(),
                     "pid": os.getpid(), "spec": spec_dict, "versions": versions()}
        self.save()

    def update(self, **fields) -> None:
        self.data.update(fields)
        self.save()

    def finish(self, status: str, reason: str | None = None) -> None:
        self.update(status=status, reason=reason, end=time.time())

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)
