"""What a run created, recorded before it is created, so that clean-up touches only ours.

One JSON file per live fabric under ``STATE_DIR``: the bridges and interfaces it
will create (names come from the topology, so they are known before bring-up),
every process it starts (pid plus the kernel's start time, so a reused pid is never
mistaken for ours), the cgroups its CPU-throttle events make (incastlab.hostevents) and
the BPF struct_ops it registers (incastlab.congestion), each before it is registered.
``incastlab clean`` reads these files, like ``mn -c`` but narrower.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

STATE_DIR = Path(os.environ.get("INCASTLAB_STATE_DIR", "/run/incastlab/state"))


def proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (so index 0 is field 3, the state), or None if the
    process is gone. comm (field 2) may hold spaces and parentheses: split after the
    last ')'."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields else None  # field 22 overall


def is_same_process(pid: int, start: int | None) -> bool:
    """True while the process that started at `start` runs. A zombie (Z, X) has ended:
    it waits only for its parent to reap it, which for an orphan is whatever reaps
    orphans on this machine, as slowly as that goes (or never, for an init that
    does not reap); it holds nothing clean-up could release."""
    fields = proc_stat(pid)
    return (start is not None and fields is not None and fields[0] not in ("Z", "X")
            and int(fields[19]) == start)


class RunState:
    """The record of one fabric's creations; every change is written through to disk."""

    def __init__(self, path: Path, data: dict):
        self.path = path
        self.data = data

    @classmethod
    def create(cls, run_dir: str | None) -> RunState:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        path = STATE_DIR / f"{pid}-{int(time.time() * 1000)}.json"
        data = {"owner": {"pid": pid, "start": process_start_time(pid)},
                "run_dir": str(run_dir) if run_dir else None, "created": time.time(),
                "bridges": [], "interfaces": [], "netns": [], "processes": [],
                "cgroups": [], "struct_ops": []}
        state = cls(path, data)
        state.save()
        return state

    @classmethod
    def load(cls, path: Path) -> RunState:
        return cls(path, json.loads(path.read_text()))

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)

    @property
    def id(self) -> str:
        """This record's id (its file name), also written into our bridges' external_ids."""
        return self.path.stem

    def add(self, kind: str, names) -> None:
        # setdefault: a state file written before a kind existed (e.g. "cgroups") loads too
        recorded = self.data.setdefault(kind, [])
        for name in names:
            if name not in recorded:
                recorded.append(name)
        self.save()

    def add_process(self, pid: int, what: str) -> None:
        self.data["processes"].append({"pid": pid, "start": process_start_time(pid),
                                       "what": what})
        self.save()

    def owner_alive(self) -> bool:
        owner = self.data["owner"]
        return is_same_process(owner["pid"], owner["start"])

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def all_states() -> list[RunState]:
    if not STATE_DIR.is_dir():
        return []
    states = []
    for path in sorted(STATE_DIR.glob("*.json")):
        try:
            states.append(RunState.load(path))
        except (OSError, ValueError):
            continue
    return states
