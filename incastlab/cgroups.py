"""CPU cgroups for the ``cpu_throttle`` host event: where the cpu controller is mounted,
what throttling a host writes (:func:`throttle_plan`, pure), doing it and undoing it
(:func:`throttle`, :func:`release`), and removing one of our host cgroups after a crash
(:func:`remove_cgroup`, which ``incastlab clean`` calls).

One cgroup per host under ``<cpu hierarchy>/incastlab/<run state id>/<host>``, its limit
``share`` x a short period (:func:`period_for`; cgroup v2 ``cpu.max``, or v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CGROUP_PARENT", "MAX_PERIOD_US", "MIN_PERIOD_US", "MIN_QUOTA_US", "MIN_SHARE",
           "PROC", "CpuHierarchy", "ThrottlePlan", "cgroup_dir", "cgroup_of",
           "find_cpu_hierarchy", "group_pids", "mount_of", "period_for", "release",
           "remove_cgroup", "throttle", "throttle_plan"]

MIN_QUOTA_US = 1_000    # the kernel refuses a CFS quota below 1 ms
MAX_PERIOD_US = 100_000  # Mininet's CPULimitedHost period; the longest we use
MIN_PERIOD_US = 10_000   # the shortest (see period_for)
MIN_SHARE = MIN_QUOTA_US / MAX_PERIOD_US
CGROUP_PARENT = "incastlab"
PROC = Path("/proc")


# --- cgroups: where, and what to write (pure) -----------------------------------------

@dataclass(frozen=True)
class CpuHierarchy:
    """The cgroup hierarchy that holds the cpu controller: ``version`` 2 (unified) or 1,
    mounted at ``mount``."""

    version: int
    mount: Path


def find_cpu_hierarchy(mounts: str, read: Callable[[Path], str] | None = None
                       ) -> CpuHierarchy | None:
    """The hierarchy to throttle in, from the text of /proc/self/mounts: a cgroup2 mount
    whose ``cgroup.controllers`` lists cpu (``read`` reads that file), else a v1 mount
    with the cpu controller among its options (a hybrid system binds cpu to v1 and
    leaves cgroup2 without it); None when neither exists."""
    read = read or (lambda p: p.read_text())
    v1 = None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        fstype, where, options = parts[2], Path(parts[1]), parts[3].split(",")
        if fstype == "cgroup2":
            try:
                if "cpu" in read(where / "cgroup.controllers").split():
                    return CpuHierarchy(2, where)
            except OSError:
                continue
        elif fstype == "cgroup" and "cpu" in options and v1 is None:
            v1 = CpuHierarchy(1, where)
    return v1


def cgroup_dir(h: CpuHierarchy, state_id: str, host: str) -> Path:
    """The host's cgroup: ``<mount>/incastlab/<state id>/<host>`` (the state id names the
    run that made it, so clean-up knows whose it is)."""
    return h.mount / CGROUP_PARENT / state_id / host


@dataclass(frozen=True)
class ThrottlePlan:
    """What throttling one host writes: ``enable`` (v2 only: the parents'
    ``cgroup.subtree_control`` files that must get ``+cpu``, top first), then the
    directory ``path`` is made and ``limits`` (file name, value) written into it, then
    the processes' pids go to ``path / "cgroup.procs"``."""

    path: Path
    enable: tuple[Path, ...]
    limits: tuple[tuple[str, str], ...]
    quota_us: int
    period_us: int


def period_for(share: float) -> int:
    """The CFS period (us) for ``share``: the shortest from 10 ms up whose quota (share x
    period) is at least the kernel's 1 ms, i.e. 10 ms down to share 0.1, longer below
    (100 ms at 0.01).

    Short because a worker computes in bursts: with Mininet's 100 ms period, a 15 ms
    gradient fits in the 20 ms quota of share 0.2 and is not slowed at all (seen: a
    throttled worker's compute time did not change), while with 10 ms (a 2 ms quota) it
    takes about 15 / 0.2 = 75 ms, as on a core five times slower."""
    if not MIN_SHARE <= share <= 1:
        raise ValueError(f"share {share!r} is not from {MIN_SHARE:g} to 1")
    return min(MAX_PERIOD_US, max(MIN_PERIOD_US, math.ceil(MIN_QUOTA_US / share)))


def throttle_plan(h: CpuHierarchy, state_id: str, host: str, share: float) -> ThrottlePlan:
    """The cgroup and limits that hold ``host``'s processes to ``share`` of one core:
    a quota of share x period CPU time per period (CFS bandwidth control, like
    CPULimitedHost's cfsInfo but of one core, not of the whole machine; the period
    from :func:`period_for`)."""
    period_us = period_for(share)
    quota = max(MIN_QUOTA_US, round(share * period_us))
    path = cgroup_dir(h, state_id, host)
    if h.version == 2:
        # v2 hands a controller to children only through each parent's subtree_control
        enable = tuple(d / "cgroup.subtree_control"
                       for d in (h.mount, h.mount / CGROUP_PARENT, path.parent))
        limits: tuple[tuple[str, str], ...] = (("cpu.max", f"{quota} {period_us}"),)
    else:
        enable = ()
        limits = (("cpu.cfs_period_us", str(period_us)), ("cpu.cfs_quota_us", str(quota)))
    return ThrottlePlan(path, enable, limits, quota, period_us)


def cgroup_of(proc_cgroup: str, h: CpuHierarchy) -> str | None:
    """A process's cgroup in hierarchy ``h`` (``/`` = the root), from the text of
    /proc/PID/cgroup: the ``0::`` line on v2, the line listing cpu on v1."""
    for line in proc_cgroup.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if h.version == 2 and hid == "0" and controllers == "":
            return path
        if h.version == 1 and "cpu" in controllers.split(","):
            return path
    return None


def group_pids(pgid: int, proc: Path = PROC) -> list[int]:
    """Pids of the processes in process group ``pgid`` (field 5 of /proc/PID/stat)."""
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2:].split()  # after comm, which may hold spaces
        if len(fields) > 2 and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return sorted(pids)


# --- cgroups: doing it ----------------------------------------------------------------

def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _enable_cpu(control: Path) -> None:
    if "cpu" not in control.read_text().split():
        _write(control, "+cpu")


def throttle(plan: ThrottlePlan, h: CpuHierarchy, pids: Iterable[int]) -> dict[str, Any]:
    """Make the plan's cgroup and move ``pids`` in; returns what undo needs (JSON-able):
    the path, quota, period and each moved pid's cgroup before."""
    for control in plan.enable[:1]:  # the root's: its children then may enable it too
        _enable_cpu(control)
    plan.path.parent.mkdir(parents=True, exist_ok=True)
    for control in plan.enable[1:]:
        _enable_cpu(control)
    plan.path.mkdir(exist_ok=True)
    for name, value in plan.limits:
        _write(plan.path / name, value)
    moved: dict[str, str] = {}
    for pid in pids:
        try:
            before = cgroup_of((PROC / str(pid) / "cgroup").read_text(), h) or "/"
            _write(plan.path / "cgroup.procs", str(pid))
        except (OSError, ProcessLookupError):
            continue  # it ended meanwhile
        moved[str(pid)] = before
    return {"cgroup": str(plan.path), "version": h.version, "quota_us": plan.quota_us,
            "period_us": plan.period_us, "moved": moved}


def release(record: Mapping[str, Any]) -> dict[str, Any]:
    """Undo :func:`throttle`: every moved process still alive back to where it was,
    anything else left inside to the root, the directory (and our empty parents)
    removed. Idempotent."""
    path = Path(record["cgroup"])
    mount = mount_of(path)
    back = 0
    for pid, before in record.get("moved", {}).items():
        try:
            _write(mount / before.lstrip("/") / "cgroup.procs", pid)
            back += 1
        except OSError:
            continue  # gone, or its old cgroup went away: remove_cgroup moves it to root
    remove_cgroup(path)
    return {"cgroup": str(path), "moved_back": back, "removed": not path.exists()}


def mount_of(path: Path) -> Path:
    """The hierarchy's mount of a cgroup made by :func:`cgroup_dir`
    (``<mount>/incastlab/<state id>/<host>``)."""
    return path.parent.parent.parent


def remove_cgroup(path: str | Path) -> bool:
    """Remove one of our host cgroups (``<mount>/incastlab/<state id>/<host>``) and its
    parents when they are empty; a process still inside goes to the root first (a
    cgroup with processes cannot be removed). True when the directory is gone."""
    path = Path(path)
    if path.parent.parent.name != CGROUP_PARENT:
        raise ValueError(f"{path} is not an incastlab host cgroup")
    mount = mount_of(path)
    for _ in range(3):
        if not path.exists():
            break
        try:
            for pid in (path / "cgroup.procs").read_text().split():
                try:
                    _write(mount / "cgroup.procs", pid)
                except OSError:
                    pass  # exited meanwhile
            path.rmdir()
        except OSError:
            time.sleep(0.1)  # a process still leaving (the kernel frees it lazily)
    for parent in (path.parent, path.parent.parent):
        try:
            parent.rmdir()  # only when empty: another run's or host's cgroup stays
        except OSError:
            break
    return not path.exists()
