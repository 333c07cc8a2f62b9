"""Several jobs on one fabric: the spec's ``[[jobs]]`` array of tables.

Each ``[[jobs]]`` table is a complete ``[workload]`` table for its ``kind`` (the same
fields, validated by the job registry exactly as ``[workload]`` is; problems name
``jobs[i].field``, 0-based as ``events[i]``) plus two keys of its own:

- ``placement``: ``"packed"`` (each job on its own leaves, in order: job 0 from leaf 1,
  the next job from the next free leaf) or ``"interleaved"`` (hosts dealt round-robin
  across the leaves: leaf 1's first host, leaf 2's first host, ..., leaf 1's second
  host, ...; job 0 takes the first of that order, job 1 the next, so every job spans
  every leaf and the jobs share each leaf's uplinks). Every job gives the same value
  (or none: ``"packed"``).
- ``start_offset_s``: seconds after the first job starts that this job starts (0).
- ``launch``: false keeps the job's hosts but starts nothing on them (true). ``incastlab
  sweep`` of a [[jobs]] spec runs each point together and each job alone on the hosts it
  has together (axis ``jobs=together``, ``jobs=alone-<i>``: :func:`with_alone`), and the
  comparison gives each job's iteration time together over alone (:func:`slowdown`).

With ``[[jobs]]``, ``[workload]`` must be absent. 2 to :data:`MAX_JOBS` jobs. A job's
hosts are its servers then its workers (the order its plugin's ``roles()`` counts),
taken from the placement order; the fabric need not be full, but too few hosts is
refused with the count each job needs.

The runner starts every job's own launch plan (its plugin's ``launches()`` on a
:class:`JobView`: the spec with this job as ``[workload]`` and its hosts as the
placement), logs in ``jobs/job-<i>/workers/``, each job's addresses' ports moved by
``PORT_STEP * i`` (two jobs share no host, but distinct ports keep their connections
apart in the captures too), each started ``start_offset_s`` after the first. The
analysis attributes flows, and each captured port's bytes and losses, to the job
whose hosts are at both ends (:func:`flow_jobs`, :func:`port_bytes_by_job`,
:func:`port_losses_by_job`).

Nothing here imports Mininet: the spec and the analysis use it on any laptop.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from incastlab import jobs
from incastlab.fields import did_you_mean, is_num
from incastlab import spec as specmod
from incastlab.spec import Spec, SpecError
from incastlab.topologies.placement import place_jobs
from incastlab.topologies import naming

MAX_JOBS = 3
PLACEMENTS = ("packed", "interleaved")
PORT_STEP = 100   # job i's ports: the plan's + PORT_STEP * i
OWN_KEYS = ("placement", "start_offset_s", "launch")
# [workload] fields that place one job on the fabric by itself: [[jobs]] places them all
PLACING_KEYS = ("ps_leaf", "worker_leaves")
# fields a [[jobs]] table may not set (not yet per job): the runner sets them per run
UNSUPPORTED_KEYS = ("rto_min_ms",)
MAX_OFFSET_S = 3600.0


@dataclass
class JobEntry:
    """One ``[[jobs]]`` table, validated: its ``[workload]`` table (typed, as the spec's
    ``Workload``), where the jobs go and its start offset."""

    workload: Any
    placement: str = "packed"
    start_offset_s: float = 0.0
    launch: bool = True
    valid: bool = field(default=True, compare=False, repr=False)  # its own table passed
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def kind(self) -> str:
        return self.workload.kind


def as_table(entry: JobEntry) -> dict:
    """The TOML table of ``entry`` (spec.toml): its workload fields, then its own."""
    values = {k: v for k, v in dataclasses.asdict(entry.workload).items()
              if v is not None and k not in PLACING_KEYS}
    return {**values, "placement": entry.placement, "start_offset_s": entry.start_offset_s,
            "launch": entry.launch}


# --- parsing and validation (called by incastlab.spec) ------------------------------------

def parse(raw_jobs, spec, capabilities) -> tuple[list[JobEntry], list[str]]:
    """The ``[[jobs]]`` tables of a raw TOML document as JobEntry objects, and every
    problem, each naming ``jobs[i].field``. ``spec`` is the spec with the other tables
    (its ``workload`` unused); each job's table is checked by building the spec with it
    as ``[workload]`` and running the spec's own validation on it."""
    if not isinstance(raw_jobs, list) or not all(isinstance(t, dict) for t in raw_jobs):
        return [], ["jobs: not an array of tables; write each job as a [[jobs]] table"]
    errors: list[str] = []
    if len(raw_jobs) < 2:
        errors.append(f"jobs: {len(raw_jobs)} job; [[jobs]] needs 2 to {MAX_JOBS} jobs "
                      "(one job: write it as [workload])")
    elif len(raw_jobs) > MAX_JOBS:
        errors.append(f"jobs: {len(raw_jobs)} jobs; at most {MAX_JOBS} jobs share a fabric")
    entries = []
    wl_names = [f.name for f in dataclasses.fields(specmod.TABLES["workload"])]
    for i, table in enumerate(raw_jobs):
        where = f"jobs[{i}]"
        own = {k: table[k] for k in OWN_KEYS if k in table}
        wl = {k: v for k, v in table.items() if k not in OWN_KEYS}
        for key in list(wl):
            if key in PLACING_KEYS:
                errors.append(f"{where}.{key}: [[jobs]] places every job (placement = "
                              f"{' or '.join(map(repr, PLACEMENTS))}); leave {key} out")
                wl.pop(key)
            elif key in UNSUPPORTED_KEYS:
                errors.append(f"{where}.{key}: not supported in [[jobs]] yet; leave it out")
                wl.pop(key)
            elif key not in wl_names:
                hint = did_you_mean(key, [*wl_names, *OWN_KEYS], f"{where}.{{}}")
                errors.append(f"{where}.{key}: unknown field{hint}; a [[jobs]] table has the "
                              f"[workload] fields and {', '.join(OWN_KEYS)}")
                wl.pop(key)
        if "kind" not in wl:
            errors.append(f"{where}.kind: missing; each job names its kind "
                          f"({', '.join(jobs.JOBS)})")
            continue
        placement = own.get("placement", "packed")
        if placement not in PLACEMENTS:
            errors.append(f"{where}.placement: {placement!r} is not one of "
                          f"{', '.join(map(repr, PLACEMENTS))}")
        offset = own.get("start_offset_s", 0.0)
        if not (is_num(offset) and 0 <= offset <= MAX_OFFSET_S):
            errors.append(f"{where}.start_offset_s: {offset!r} is not a number from 0 to "
                          f"{MAX_OFFSET_S:g} (s)")
            offset = 0.0
        launch = own.get("launch", True)
        if not isinstance(launch, bool):
            errors.append(f"{where}.launch: {launch!r} is not true or false")
            launch = True
        # the job's table checked as the [workload] of a copy of the spec, alone
        view = copy.deepcopy(spec)
        view.jobs = []
        view.events = []
        view.workload = specmod.TABLES["workload"](**wl)
        found = specmod.problems(view, capabilities)
        swept = [k for k in view.swept() if k.startswith("workload.")]
        found += [f"{k}: {getattr(view.workload, k.split('.')[1])!r} is a list; [[jobs]] "
                  "fields cannot be swept" for k in swept]
        job_errors = [_rename(e, where) for e in found if e.startswith("workload.")]
        errors += job_errors
        valid = not job_errors and placement in PLACEMENTS
        if valid:
            view = specmod.normalized(view)
        entries.append(JobEntry(view.workload, placement, float(offset), launch,
                                valid=valid, raw=table))
    if entries and not any(e.launch for e in entries):
        errors.append("jobs: every job has launch = false; launch at least one")
    if spec.events:
        errors.append("events, jobs: [[events]] with [[jobs]] is not supported yet; run "
                      "the events on a one-job spec")
    if len({e.placement for e in entries if e.placement in PLACEMENTS}) > 1:
        errors.append("jobs: the jobs give different placements ("
                      + ", ".join(f"jobs[{i}].placement = {e.placement!r}"
                                  for i, e in enumerate(entries)) + "); give one")
    return entries, errors


def _rename(problem: str, where: str) -> str:
    """``workload.workers: ...`` -> ``jobs[1].workers: ...`` (every mention)."""
    return re.sub(r"\bworkload\.", f"{where}.", problem)


def problems(spec, shape: tuple[int, int]) -> list[str]:
    """Problems of the jobs together on a fabric of ``shape`` = (leaves, hosts per
    leaf): the hosts they need against those there are."""
    if not spec.jobs or not all(e.valid for e in spec.jobs):
        return []  # a job's own problems are said already
    _, errors = place(spec.jobs, shape)
    return errors


# --- placement -----------------------------------------------------------------------------

def host_counts(entries) -> list[tuple[int, int]]:
    """(servers, workers) of each job, from its plugin's ``roles()``."""
    out = []
    for e in entries:
        r = jobs.JOBS[e.kind].roles(e.workload)
        out.append((r.servers, r.workers))
    return out


def place(entries, shape: tuple[int, int]):
    """Each job's placement on a fabric of ``shape`` (leaves, hosts per leaf), and the
    problems (too few hosts: what each job needs); topologies/placement.py places them."""
    packing = entries[0].placement if entries else "packed"
    return place_jobs(host_counts(entries), [e.kind for e in entries], shape, packing)


def placements(spec) -> list:
    """Each job's placement on the spec's fabric (the spec is valid)."""
    placed, errors = place(spec.jobs, specmod.leaf_shape(spec))
    if errors:
        raise SpecError(errors, spec.source)
    return placed


def host_jobs(spec) -> dict[str, int]:
    """Host name -> the index of the job it belongs to."""
    return {h: i for i, p in enumerate(placements(spec)) for h in (*p.servers, *p.workers)}


def capture_interfaces(spec) -> list[str]:
    """Default captures with jobs: every job host's interface, and on a leaf-spine each
    spine's ports down to every leaf with a job host (the queues the jobs share)."""
    placed = placements(spec)
    hosts = [h for p in placed for h in (*p.servers, *p.workers)]
    names = [naming.intf_name(h, 0) for h in hosts]
    if spec.topology.kind == "leafspine":
        per_leaf = spec.topology.hosts_per_leaf
        leaves = sorted({(int(h[1:]) - 1) // per_leaf + 1 for h in hosts})
        names += [naming.intf_name(naming.spine_name(j), naming.spine_downlink_port(leaf))
                  for j in range(1, spec.topology.spines + 1) for leaf in leaves]
    return names


# --- the runner's view of one job ----------------------------------------------------------

@dataclass
class JobView(Spec):
    """A spec whose ``placement()`` is the hosts [[jobs]] gave one job."""

    placed_hosts: Any = None

    def placement(self):
        return self.placed_hosts


def job_view(spec, index: int, placed=None) -> JobView:
    """The spec as job ``index`` alone sees it: its table as ``[workload]``, no other
    jobs, ``placement()`` its hosts. What its plugin's ``launches()`` takes."""
    placed = placed or placements(spec)
    base = {f.name: copy.deepcopy(getattr(spec, f.name)) for f in dataclasses.fields(Spec)}
    base.update(workload=copy.deepcopy(spec.jobs[index].workload), jobs=[], events=[])
    return JobView(**base, placed_hosts=placed[index])


_ADDR_PORT = re.compile(r"(\d+\.\d+\.\d+\.\d+):(\d+)")


def shift_ports(argv: list[str], shift: int) -> list[str]:
    """``argv`` with every ``a.b.c.d:port`` moved to ``port + shift`` (the apps take
    their rendezvous and listening addresses so; a job's plan moves as a whole)."""
    if not shift:
        return list(argv)
    return [_ADDR_PORT.sub(lambda m: f"{m.group(1)}:{int(m.group(2)) + shift}", a)
            for a in argv]


@dataclass
class PlannedJob:
    index: int
    kind: str
    offset_s: float
    log_dir: Path
    launches: list


def plan(spec, ips: Mapping[str, str], run_dir: Path) -> list[PlannedJob]:
    """Every job's processes: its plugin's launch plan, its ports shifted, its logs in
    ``jobs/job-<i>/workers``."""
    placed = placements(spec)
    out = []
    for i, entry in enumerate(spec.jobs):
        if not entry.launch:  # its hosts stay idle (the job alone is another's run)
            continue
        log_dir = job_dir(run_dir, i) / "workers"
        view = job_view(spec, i, placed)
        launches = jobs.JOBS[entry.kind].launches(view, ips, str(log_dir))
        launches = [dataclasses.replace(la, argv=shift_ports(la.argv, PORT_STEP * i))
                    for la in launches]
        out.append(PlannedJob(i, entry.kind, entry.start_offset_s, log_dir, launches))
    return out


def job_dir(run_dir: Path, index: int) -> Path:
    return Path(run_dir) / "jobs" / f"job-{index}"


def manifest_jobs(spec, planned: list[PlannedJob]) -> list[dict]:
    """The manifest's ``jobs`` (every job, indexed as in the spec): which hosts belong to
    which job, whether it was launched, and its processes."""
    placed = placements(spec)
    launched = {pj.index: pj for pj in planned}
    return [{"index": i, "kind": e.kind, "start_offset_s": e.start_offset_s,
             "launched": i in launched,
             "servers": list(placed[i].servers), "workers": list(placed[i].workers),
             "hosts": [*placed[i].servers, *placed[i].workers],
             "dir": f"jobs/job-{i}",
             "processes": [{"rank": la.rank, "host": la.host, "role": la.role}
                           for la in launched[i].launches] if i in launched else []}
            for i, e in enumerate(spec.jobs)]


def write_job_dirs(spec, planned: list[PlannedJob], run_dir: Path) -> None:
    """Each job's directory as a run directory of its own (spec.toml with its table as
    [workload], a manifest with its placement, the fabric map): its plugin's analysis
    reads it as it reads a one-job run."""
    import json

    for pj in planned:
        d = job_dir(run_dir, pj.index)
        pj.log_dir.mkdir(parents=True, exist_ok=True)
        view = job_view(spec, pj.index)
        (d / "spec.toml").write_text(view.to_toml())
        p = view.placement()
        (d / "job.json").write_text(json.dumps({
            "index": pj.index, "kind": pj.kind, "start_offset_s": pj.offset_s,
            "placement": {"servers": list(p.servers), "workers": list(p.workers)},
            "processes": [{"rank": la.rank, "host": la.host, "role": la.role}
                          for la in pj.launches]}, indent=2))


# --- running them (called by incastlab.runner) ----------------------------------------------

PROGRESS_EVERY_S = 2.0


def run_jobs(spec, fab, fmap, run_dir: Path, manifest, progress, deadline: float,
             captures: list, procs: list) -> dict:
    """Start every job (each ``start_offset_s`` after the first), wait until all have
    ended, and return the capture stats if captures had to stop early (as the one-job
    wait does). ``procs`` receives every process started, for the runner to stop on
    every path out. A job's failed process fails the run, naming the job; the run
    completes when every job has. Per-job start and end times go to the manifest."""
    import json
    import shutil
    import time

    from incastlab import hostevents
    from incastlab import runner

    planned = plan(spec, fmap.ip_by_host(), run_dir)
    write_job_dirs(spec, planned, run_dir)
    records = manifest_jobs(spec, planned)
    # each job's processes in its own record: the manifest's one-job `processes` would
    # name logs under workers/, where no job writes
    manifest.update(jobs=records)
    started: dict[int, list] = {}
    ended: dict[int, float] = {}
    truncated: dict = {}
    t0 = time.monotonic()
    wall0 = time.time()
    last_shown, last_text = 0.0, ""

    def record(pj, **what) -> None:
        records[pj.index].update(what)
        manifest.update(jobs=records)
        (job_dir(run_dir, pj.index) / "times.json").write_text(json.dumps(
            {k: records[pj.index].get(k) for k in ("started_at", "ended_at", "duration_s")}))

    while True:
        now = time.monotonic()
        for pj in planned:
            if pj.index not in started and now - t0 >= pj.offset_s:
                progress.phase(f"job {pj.index} ({pj.kind}) starting "
                               f"({len(pj.launches)} processes)")
                started[pj.index] = runner.start_workload(fab, pj.launches, pj.log_dir)
                procs.extend(started[pj.index])
                record(pj, started_at=wall0 + (time.monotonic() - t0))
        for pj in planned:
            if pj.index not in started or pj.index in ended:
                continue
            codes = [p.poll() for p in started[pj.index]]
            verdict = hostevents.exit_verdict(
                pj.launches, codes, {}, 0,
                lambda la, d=pj.log_dir: (d / f"{la.rank}.stderr").read_text(
                    errors="replace").strip())
            if verdict is None:
                continue
            if verdict[0] != "complete":
                raise runner.RunFailed(verdict[0], f"job {pj.index} ({pj.kind}): {verdict[1]}")
            ended[pj.index] = time.monotonic()
            at = wall0 + (ended[pj.index] - t0)
            record(pj, ended_at=at, duration_s=at - records[pj.index]["started_at"])
            progress.phase(f"job {pj.index} ({pj.kind}) complete")
        if len(ended) == len(planned):
            return truncated
        failed = fab.controller_failed()
        if failed:
            raise runner.RunFailed("failed", failed.splitlines()[0])
        if time.monotonic() > deadline:
            raise runner.RunFailed("failed", f"the run exceeded run.duration_limit_s = "
                                             f"{spec.run.duration_limit_s:g} s (bring-up "
                                             "included)")
        if captures and shutil.disk_usage(run_dir).free < runner.LOW_FREE_BYTES:
            truncated = {cap.iface: cap.stop() for cap in captures}
            progress.phase("disk nearly full: captures stopped")
            captures.clear()
        if time.monotonic() - last_shown >= PROGRESS_EVERY_S:
            text = "; ".join(_progress_text(pj, spec.jobs[pj.index]) for pj in planned
                             if pj.index in started and pj.index not in ended)
            if text and text != last_text:
                progress.phase(text)
                last_text = text
            last_shown = time.monotonic()
        time.sleep(0.2)


def _progress_text(pj: PlannedJob, entry: JobEntry) -> str:
    """``job 0 (ring): 2/5`` — the fewest steps any of its counting processes logged."""
    from incastlab import runner

    job = jobs.JOBS[pj.kind]
    done = [runner.progress_logged(pj.log_dir / f"{la.rank}.jsonl", job.progress_event)
            for la in pj.launches if la.counts_iterations]
    return (f"job {pj.index} ({pj.kind}): {min(done, default=0)}/"
            f"{job.expected_progress(entry.workload)}")


# --- each job alone (incastlab sweep) ---------------------------------------------------------

def with_alone(runs: list) -> list:
    """``expand_sweep``'s (label, spec) runs of a [[jobs]] spec, each point once with
    every job (``jobs=together``) and once per job alone on the hosts it has together,
    the others' hosts idle (``jobs=alone-<i>``); the label's ``rep=`` stays last. A spec
    that already keeps a job idle (``launch = false``) runs as written."""
    out = []
    for label, point in runs:
        if not all(e.launch for e in point.jobs):
            out.append((label, point))
            continue
        head, _, rep = label.rpartition("rep=")
        out.append((f"{head}jobs=together,rep={rep}", point))
        for alone in range(len(point.jobs)):
            single = copy.deepcopy(point)
            for i, entry in enumerate(single.jobs):
                entry.launch = i == alone
            out.append((f"{head}jobs=alone-{alone},rep={rep}", single))
    return out
