"""Host and worker events: a real straggler (a host's CPU throttled through cgroups) and
faults of the job's own processes (a worker killed, paused, resumed; the PS killed).

Actions (registered with :func:`incastlab.events.register_action`; fields in
:data:`FIELDS`)::

    [[events]]
    at_s = 5.0
    action = "cpu_throttle"   # host's job processes limited to `share` of one core
    host = "h3"
    share = 0.2               # of one core: 0.01 .. 1 (CFS quota 2 ms per 10 ms)
    duration_s = 10.0         # optional: released after this (else at teardown)

    [[events]]
    at_iteration = 4
    action = "worker_kill"    # SIGKILL; also worker_pause (SIGSTOP), worker_resume
    rank = 1                  # (SIGCONT) and ps_kill (host = a PS host, default the
                              # first); workers by `host` or by `rank` (the rank `incastlab
                              # check` lists, servers first, as in workload.stragglers)

The CPU throttle does what Mininet's CPULimitedHost does (a cgroup per host, its
processes moved in, a CFS quota), but mid-run and for the job's processes only: one
cgroup per host under ``<cpu hierarchy>/incastlab/<run state id>/<host>``, its limit
``share`` x a short period (:func:`period_for`; cgroup v2 ``cpu.max``, or v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``: whichever hierarchy holds the cpu
controller on this machine), and every process of the job on that host moved in
(each launched process's process group: the app and anything it started). Undo moves
each one back to the cgroup it came from and removes the directory. The path is
recorded in the run's state file before it is created, so ``incastlab clean`` removes
it after a crash (:func:`remove_cgroup`).

Signals go only to the job's own processes, by the pid the runner launched them with
(each leads its own process group), and only while the runner has not reaped them, so a
reused pid is never hit. A kill cannot be undone; a pause is undone by SIGCONT. A kill
names its processes in ``ctx.killed`` (launch rank -> which event) before the signal:
for the runner, a process lost that way is not the run's failure by itself; whether the
job can go on without it is the job's call (``Job.tolerates_lost_workers``), see
:func:`exit_verdict`. The report's iteration times around each event are
``analysis.eventeffects``.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from incastlab.cgroups import (CGROUP_PARENT, MAX_PERIOD_US, MIN_PERIOD_US, MIN_QUOTA_US,
                               MIN_SHARE, PROC, CpuHierarchy, ThrottlePlan, cgroup_dir,
                               cgroup_of, find_cpu_hierarchy, group_pids, mount_of,
                               period_for, release, remove_cgroup, throttle, throttle_plan)
from incastlab.fields import did_you_mean, is_int, is_num

# the cgroups' names as well (incastlab.cgroups): this module's public face before the split
__all__ = ["CGROUP_PARENT", "FIELDS", "MAX_PERIOD_US", "MIN_PERIOD_US", "MIN_QUOTA_US",
           "MIN_SHARE", "MOUNTS", "PROC", "CpuHierarchy", "ThrottlePlan", "apply_kill",
           "apply_pause", "apply_resume", "apply_throttle", "cgroup_dir", "cgroup_of",
           "exit_verdict", "find_cpu_hierarchy", "group_pids", "lost_beyond_tolerance",
           "mount_of", "period_for", "register", "release", "remove_cgroup", "throttle",
           "throttle_plan", "undo_pause", "undo_throttle", "validate_pause",
           "validate_ps_kill", "validate_throttle", "validate_worker"]

MOUNTS = Path("/proc/self/mounts")


# --- which processes ---------------------------------------------------------------------

def _alive(popen) -> bool:
    # poll() reaps an exited child: until then its pid cannot be reused by another process
    return popen.poll() is None


def _signal_group(popen, sig: signal.Signals) -> bool:
    if not _alive(popen):
        return False
    try:
        os.killpg(popen.pid, sig)  # mnexec -d made it the leader of its own group
    except ProcessLookupError:
        return False
    return True


def _target_host(ev, scene) -> str | None:
    """The host an event's ``host`` or ``rank`` names (workers by rank; ps_kill's
    default: the first PS host)."""
    if ev.get("host") is not None:
        return ev.get("host")
    rank = ev.get("rank")
    if rank is not None and is_int(rank) and rank in _worker_ranks(scene):
        return _ranks(scene)[rank]
    if ev.action == "ps_kill" and scene.servers:
        return scene.servers[0]
    return None


# --- validation -------------------------------------------------------------------------

def _check_host(ev, scene, allowed: Sequence[str], what: str) -> list[str]:
    host = ev.get("host")
    if not isinstance(host, str):
        return [f"host: {host!r} is not a host name like 'h3'"]
    if host not in scene.hosts:
        return [f"host: {host!r} is not a host of this fabric"
                f"{did_you_mean(host, scene.hosts)}"]
    if scene.workers or scene.servers:  # placement known
        if host not in allowed:
            return [f"host: {host!r} runs no {what} of the job ({what} hosts: "
                    f"{', '.join(allowed) or 'none'})"]
    return []


def _check_worker(ev, scene) -> list[str]:
    has_host, has_rank = ev.get("host") is not None, ev.get("rank") is not None
    if has_host and has_rank:
        return ["rank: given together with host; name the worker by one of them"]
    if not has_host and not has_rank:
        return ["host: missing; name the worker by host (e.g. 'h3') or by rank (as "
                "`incastlab check` lists it, servers first)"]
    if has_host:
        return _check_host(ev, scene, scene.workers, "worker")
    rank = ev.get("rank")
    if not (is_int(rank) and rank >= 0):
        return [f"rank: {rank!r} is not an integer >= 0 (a worker's rank, as `incastlab "
                "check` lists it)"]
    ranks = _worker_ranks(scene)
    if scene.workers and rank not in ranks:
        servers = "" if not ranks.start else " (rank 0 is a server)" if ranks.start == 1 \
            else f" (ranks 0..{ranks.start - 1} are servers)"
        return [f"rank: {rank} is not a worker rank from {ranks.start} to "
                f"{ranks.stop - 1}{servers}"]
    return []


def _ranks(scene) -> tuple[str, ...]:
    """Hosts by rank, servers first (topologies.placement.Placement.ranks)."""
    return tuple(scene.servers) + tuple(scene.workers)


def _worker_ranks(scene) -> range:
    return range(len(scene.servers), len(scene.servers) + len(scene.workers))


def _check_share(ev) -> list[str]:
    share = ev.get("share")
    if share is None:
        return [f"share: missing; the fraction of one core, from {MIN_SHARE:g} to 1 "
                "(e.g. 0.25)"]
    if not is_num(share) or isinstance(share, bool):
        return [f"share: {share!r} is not a number"]
    if not 0 < share <= 1:
        return [f"share: {share!r} is not in (0, 1] (a fraction of one core)"]
    if share < MIN_SHARE:
        return [f"share: {share!r} is below {MIN_SHARE:g}: the kernel grants at least "
                f"{MIN_QUOTA_US // 1000} ms of CPU per period, and periods are at most "
                f"{MAX_PERIOD_US // 1000} ms"]
    return []


def validate_throttle(ev, scene) -> list[str]:
    job_hosts = [*scene.servers, *scene.workers]
    return _check_host(ev, scene, job_hosts, "process") + _check_share(ev)


def validate_worker(ev, scene) -> list[str]:
    return _check_worker(ev, scene)


def validate_pause(ev, scene) -> list[str]:
    """A worker; and a pause with duration_s shorter than the job's timeout (its peers
    would give the paused worker up as lost, and a sync PS fail)."""
    problems = _check_worker(ev, scene)
    timeout = getattr(getattr(scene, "workload", None), "timeout_s", None)
    if not problems and ev.duration_s is not None and is_num(timeout) \
            and ev.duration_s >= timeout:
        problems.append(f"duration_s: {ev.duration_s:g} s is not below workload.timeout_s "
                        f"({timeout:g} s): the job would give the paused worker up as lost; "
                        "pause it for less, or raise workload.timeout_s")
    return problems


def validate_ps_kill(ev, scene) -> list[str]:
    if (scene.workers or scene.servers) and not scene.servers:
        return [f"action: ps_kill needs a parameter server; workload kind "
                f"{scene.kind or '(unknown)'} has none"]
    if ev.get("host") is None:
        return []
    return _check_host(ev, scene, scene.servers, "PS")


def _target(kind: str, role: str):
    def target(ev, scene):
        host = _target_host(ev, scene)
        return ((kind, host), role) if host else None
    return target


# --- apply and undo ----------------------------------------------------------------------

def _host_of(ctx, ev) -> str:
    """The event's host, by name or by rank (the spec's placement, servers first)."""
    if ev.get("host") is not None:
        return ev.get("host")
    placed = ctx.spec.placement()
    if ev.get("rank") is not None:
        return placed.ranks[ev.get("rank")]
    return placed.servers[0]  # ps_kill's default (validated: the job has a PS)


def _processes(ctx, host: str) -> list:
    procs = ctx.on_host(host)
    if not procs:
        raise RuntimeError(f"no process of the job runs on {host}")
    return procs


def apply_throttle(ctx, ev) -> dict:
    host = _host_of(ctx, ev)
    mounts = MOUNTS.read_text()
    h = find_cpu_hierarchy(mounts)
    if h is None:
        raise RuntimeError("no cgroup hierarchy with the cpu controller (neither cgroup2 "
                           "with cpu in cgroup.controllers nor a v1 cpu mount)")
    plan = throttle_plan(h, ctx.fabric.state.id, host, float(ev["share"]))
    # recorded before it exists: a crash from here on leaves it to `incastlab clean`
    ctx.fabric.state.add("cgroups", [str(plan.path)])
    pids = sorted({pid for p in _processes(ctx, host) if _alive(p.popen)
                   for pid in [p.popen.pid, *group_pids(p.popen.pid)]})
    store = ctx.store_for(ev)
    store["cgroup"] = {"cgroup": str(plan.path), "moved": {}}  # undo works if cut short
    store["cgroup"] = throttle(plan, h, pids)
    return {"host": host, "share": float(ev["share"]), **store["cgroup"]}


def undo_throttle(ctx, ev) -> dict | None:
    record = ctx.store_for(ev).pop("cgroup", None)
    if record is None:
        return None
    return release(record)


def _signal_action(sig: signal.Signals, verb: str):
    def apply(ctx, ev) -> dict:
        host = _host_of(ctx, ev)
        done = []
        for p in _processes(ctx, host):
            if sig == signal.SIGKILL and _alive(p.popen):
                # said before it happens: the runner's wait loop must never see the
                # exit without knowing it was ours
                ctx.killed[p.rank] = f"events[{ev.index}] ({ev.action} {ev.when})"
            if _signal_group(p.popen, sig):
                done.append({"rank": p.rank, "role": p.role, "pid": p.popen.pid})
        store = ctx.store_for(ev)
        store[verb] = done
        store["host"] = host
        return {"host": host, verb: done}
    return apply


apply_kill = _signal_action(signal.SIGKILL, "killed")
apply_pause = _signal_action(signal.SIGSTOP, "paused")
apply_resume = _signal_action(signal.SIGCONT, "resumed")


def undo_pause(ctx, ev) -> dict | None:
    """SIGCONT to what the pause stopped (still alive and not reaped)."""
    store = ctx.store_for(ev)
    host = store.get("host")
    if not store.pop("paused", None) or host is None:
        return None
    resumed = [p.rank for p in ctx.on_host(host) if _signal_group(p.popen, signal.SIGCONT)]
    return {"host": host, "resumed": resumed}


# --- the runner's verdict ---------------------------------------------------------------

def lost_beyond_tolerance(launches: Sequence, killed: Mapping[int, str],
                          tolerated: int) -> str | None:
    """Why the job cannot go on after its kills (None when it can): a killed process
    that does not count iterations (a PS, an incast receiver), or more killed workers
    than the job tolerates (``Job.tolerates_lost_workers``)."""
    gone = [la for la in launches if la.rank in killed]
    vital = [la for la in gone if not la.counts_iterations]
    if vital:
        la = vital[0]
        return (f"{la.role} rank {la.rank} on {la.host} was killed by {killed[la.rank]}; "
                f"the job cannot go on without it")
    workers = [la for la in gone if la.counts_iterations]
    if len(workers) > tolerated:
        names = ", ".join(f"{la.role} rank {la.rank} on {la.host} by {killed[la.rank]}"
                          for la in workers)
        return (f"{len(workers)} of its processes killed ({names}); the job tolerates "
                f"{tolerated} lost")
    return None


def _error_line(text: str) -> str:
    """The app's own one-line error (apps/common.run_main: "<prog>: error: ...") out of a
    process's stderr, which gloo and torch may follow with lines of their own (CI saw
    their tail replace the reason); without one, the last 300 characters."""
    mine = [ln for ln in text.splitlines() if ": error: " in ln]
    return mine[-1][:400] if mine else text[-300:]


def exit_verdict(launches: Sequence, codes: Sequence[int | None], killed: Mapping[int, str],
                 tolerated: int, stderr: Callable[[Any], str] = lambda la: ""
                 ) -> tuple[str, str | None] | None:
    """How the workload ended, or None while it goes on.

    A process killed by an event is not a failure by itself. Any other process that
    exits non-zero fails the run (its message, after what the kills did, when the
    job could not tolerate them: a sync PS reports the lost worker, its workers the
    lost PS). When every other process exited 0 the run is complete."""
    bad = [(la, code) for la, code in zip(launches, codes, strict=True)
           if code not in (None, 0) and la.rank not in killed]
    if bad:
        la, code = bad[0]
        reason = (f"{la.role} rank {la.rank} on {la.host} exited with status {code}: "
                  f"{_error_line(stderr(la))}")
        why = lost_beyond_tolerance(launches, killed, tolerated)
        return "failed", f"{why}: {reason}" if why else reason
    if all(code == 0 for la, code in zip(launches, codes, strict=True)
           if la.rank not in killed):
        return "complete", None
    return None


# --- registration -----------------------------------------------------------------------

FIELDS = {
    "cpu_throttle": {"host": "the host whose job processes are throttled, e.g. 'h3'",
                     "share": f"CPU share of one core, from {MIN_SHARE:g} to 1 (cgroup "
                              "CFS quota = share x the period, 10 ms or longer)"},
    "worker_kill": {"host": "the worker's host", "rank": "or the worker's rank (as `incastlab "
                                                         "check` lists it, servers first)"},
    "worker_pause": {"host": "the worker's host", "rank": "or the worker's rank"},
    "worker_resume": {"host": "the worker's host", "rank": "or the worker's rank"},
    "ps_kill": {"host": "the PS host (default: the first)"},
}


def register() -> None:
    from incastlab.events import register_action

    register_action("cpu_throttle", validate_throttle, apply_throttle, undo_throttle,
                    fields=FIELDS["cpu_throttle"], target=_target("cpu", "start"),
                    doc="limit a host's job processes to a share of one core (cgroups)")
    register_action("worker_kill", validate_worker, apply_kill, None,
                    fields=FIELDS["worker_kill"], target=_target("killed", "start"),
                    doc="SIGKILL a worker's processes")
    register_action("worker_pause", validate_pause, apply_pause, undo_pause,
                    fields=FIELDS["worker_pause"], target=_target("paused", "start"),
                    doc="SIGSTOP a worker (undone by SIGCONT)")
    register_action("worker_resume", validate_worker, apply_resume, None,
                    fields=FIELDS["worker_resume"], target=_target("paused", "end"),
                    doc="SIGCONT a paused worker")
    register_action("ps_kill", validate_ps_kill, apply_kill, None,
                    fields=FIELDS["ps_kill"], target=_target("killed", "start"),
                    doc="SIGKILL a parameter server")


register()
