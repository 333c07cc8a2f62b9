"""One experiment from a validated spec to a run directory (and its report).

preflight → fabric → controller → captures → workload → teardown → analysis.
Everything started is stopped on every path out: normal end, a failed worker, a dead
controller, a deadline, SIGINT or SIGTERM. The manifest says how the run ended
(``complete``, ``aborted``, ``failed`` with the reason) and every file already written
is kept. A run that is not complete is reported as such, never as if complete.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from incastlab.analysis import fidelity
from incastlab.capture import counters, ecn_sampler
from incastlab.capture.cpu import CpuMonitor
from incastlab.capture.datapath import DatapathCounters
from incastlab import events as run_events
from incastlab import hostevents
from incastlab import multijob
from incastlab import ovs_buffer
from incastlab.capture.pcap import start_captures
from incastlab.controller.registry import POLICIES
from incastlab.ecn import EcnMarking
from incastlab.fabric import DEFAULT_CONTROLLER_PORT, Fabric, Terminated
from incastlab.jobs import job_for
from incastlab.lock import RunLock
from incastlab.manifest import Manifest
from incastlab.preflight import run_preflight
from incastlab.progress import Progress
from incastlab.spec import Spec, event_scene, validate
from incastlab.topologies import naming
from incastlab.topologies import runformat as rf
from incastlab.topologies.fabricmap import FabricMap

MIN_FREE_BYTES = 512 * 2**20     # refuse to start captures below this
LOST_GRACE_S = 10.0              # after a fatal kill, beyond workload.timeout_s
LOW_FREE_BYTES = 128 * 2**20     # stop captures when the disk gets this full


class RunFailed(Exception):
    """The run cannot go on; ``status`` is failed or aborted, the message the reason."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status


def new_run_dir(base: str | Path, name: str, label: str | None = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(base) / (f"{name}-{label}" if label else f"{name}-{stamp}")
    if path.exists():
        path = Path(f"{path}-{stamp}")
    path.mkdir(parents=True)
    return path


def policy_args(spec: Spec) -> list[str]:
    options = POLICIES[spec.routing.policy].options
    args = ["--poll-interval", f"{spec.routing.poll_interval_s:g}"]
    if "spine" in options:
        args += ["--spine", str(spec.routing.spine)]
    if "idle_timeout" in options:
        args += ["--idle-timeout", str(spec.routing.idle_timeout_s)]
    if "apps" in options:
        # files absolute: the controller must find them whatever its working directory
        for app in spec.routing.app:
            args += ["--app", str(Path(app).resolve()) if app.endswith(".py") else app]
    if "controller" in options:
        args += ["--controller", spec.routing.controller]
    return args


def host_tcp(spec: Spec) -> dict:
    """The Fabric's settings of every host's TCP, from the spec's topology."""
    return {"congestion_control": spec.topology.congestion_control,
            "slow_start_after_idle": spec.topology.slow_start_after_idle}


def check_ready(spec: Spec, controller_port: int):
    """Preflight plus the machine-dependent spec checks; nothing is touched yet."""
    caps = run_preflight(controller_port=controller_port, need_netem=bool(spec.topology.delay),
                         congestion_control=spec.topology.congestion_control, lock=RunLock())
    validate(spec, caps)
    return caps


def run_experiment(spec: Spec, run_dir: Path, controller_port: int = DEFAULT_CONTROLLER_PORT,
                   progress: Progress | None = None, caps=None) -> str:
    """Run one experiment into ``run_dir`` (created by the caller); return its status.

    The caller has validated the spec (``check_ready``); the report is built by the
    caller too, so that a crash in analysis never touches the raw data's status."""
    progress = progress or Progress(enabled=False)
    spec.require_single()
    (run_dir / "spec.toml").write_text(spec.to_toml())
    manifest = Manifest(run_dir, spec.to_dict())
    if caps is not None:
        manifest.update(datapath=caps.datapath, netem=caps.netem, notices=caps.notices,
                        **host_tcp(spec))
    old_term = signal.signal(signal.SIGTERM, _terminated)
    status, reason = "complete", None
    try:
        _run(spec, run_dir, controller_port, manifest, progress, caps)
    except Terminated:
        status, reason = "aborted", "stopped by SIGTERM"
    except KeyboardInterrupt:
        status, reason = "aborted", "interrupted by the user (SIGINT)"
    except RunFailed as exc:
        status, reason = exc.status, str(exc)
    except Exception as exc:  # noqa: BLE001 - recorded, with its traceback, as the reason
        status, reason = "failed", f"{type(exc).__name__}: {exc}"
        (run_dir / "error.txt").write_text(traceback.format_exc())
    finally:
        signal.signal(signal.SIGTERM, old_term)
        manifest.finish(status, reason)
        progress.phase(f"run {status}" + (f": {reason}" if reason else ""))
    return status


def _terminated(signum, _frame):
    raise Terminated(f"signal {signum}")


def _run(spec: Spec, run_dir: Path, port: int, manifest: Manifest, progress: Progress,
         caps=None):
    deadline = time.monotonic() + spec.run.duration_limit_s
    topo = spec.make_topology()
    progress.phase("fabric and controller coming up")
    fab = Fabric(topo, policy=spec.routing.policy, run_dir=run_dir, controller_port=port,
                 **host_tcp(spec), ecn_marking=EcnMarking.of_topology(spec.topology),
                 policy_args=policy_args(spec), ready_timeout=spec.run.phase_timeout_s,
                 flowlet_gap_us=spec.routing.flowlet_gap_us,
                 # check_ready's preflight, not a second one (a copy: the fabric adds notices)
                 capabilities=dataclasses.replace(caps, notices=list(caps.notices))
                 if caps else None)
    with fab:
        fmap = FabricMap.load(run_dir / "fabric.json")
        _record_fabric(spec, fab, topo, manifest, progress)
        if spec.workload.rto_min_ms is not None:
            _set_rto_min(fab, spec.workload.rto_min_ms)
        counters.snapshot(fab, run_dir / rf.COUNTERS_DIR, "before")
        procs: list = []
        captures: list = []
        samplers: list = []  # the queue sampler, and the ECN marker's with marking on
        scheduler = None
        datapath = None
        try:
            samplers.append(_start_sampler(fab, fmap, run_dir, spec.capture.queue_sample_ms))
            if fab.labelling is not None:
                manifest.update(path_labels=fab.labelling.as_dict())
            if fab.ecn is not None:
                manifest.update(ecn=_ecn_record(fab))
                samplers.append(_start_ecn_sampler(fab, run_dir))
                _await_ecn_sampler(samplers[-1], run_dir, spec.run.phase_timeout_s)
            if spec.capture.enabled:
                _require_disk(run_dir, MIN_FREE_BYTES)
                progress.phase("captures starting")
                captures = start_captures(fab, spec.capture_interfaces(), run_dir / rf.PCAP_DIR,
                                          spec.capture.snaplen, spec.run.phase_timeout_s)
            datapath = DatapathCounters(fmap.switch_egress_ifaces())  # fidelity's evidence
            if spec.jobs:  # several jobs on one fabric (incastlab/multijob.py)
                with CpuMonitor() as cpu:
                    try:
                        truncated = multijob.run_jobs(spec, fab, fmap, run_dir, manifest,
                                                      progress, deadline, captures, procs)
                    finally:
                        manifest.update(cpu=cpu.summary())
                if truncated:
                    manifest.update(capture_drops=truncated, captures_truncated="disk nearly full")
                return  # the finally below stops every process and capture
            job = job_for(spec.workload.kind)
            launches = job.launches(spec, fmap.ip_by_host(), str(run_dir / rf.WORKERS_DIR))
            placed = spec.placement()
            manifest.update(placement={"servers": list(placed.servers),
                                       "workers": list(placed.workers)},
                            processes=[{"rank": la.rank, "host": la.host, "role": la.role}
                                       for la in launches])
            progress.phase(f"workload {spec.workload.kind} starting "
                           f"({len(launches)} processes)")
            with CpuMonitor() as cpu:
                try:
                    procs = start_workload(fab, launches, run_dir / rf.WORKERS_DIR)
                    if spec.events:
                        scheduler = _start_events(spec, fab, fmap, run_dir, launches, procs)
                    truncated = _wait_workload(spec, fab, procs, launches, captures, run_dir,
                                               deadline, progress, cpu, scheduler)
                    if truncated:
                        manifest.update(capture_drops=truncated,
                                        captures_truncated="disk nearly full")
                finally:
                    manifest.update(cpu=cpu.summary())
        finally:
            _stop_workload(fab, run_dir, manifest, scheduler, procs, captures, samplers)
            if datapath is not None:  # after the captures' stats: the verdict reads both
                manifest.update(fidelity={"counters": datapath.finish()})
                manifest.update(fidelity=fidelity.runtime_verdict(manifest.data))
        progress.phase("tearing down")


def _record_fabric(spec: Spec, fab: Fabric, topo, manifest: Manifest,
                   progress: Progress) -> None:
    """The fabric that came up, into the manifest: datapath, netem, OVS, notices, the
    hosts' TCP and, on the userspace datapath, OVS's socket buffers."""
    manifest.update(datapath=fab.capabilities.datapath, netem=fab.capabilities.netem,
                    ovs=fab.capabilities.ovs_version, notices=fab.capabilities.notices,
                    congestion=fab.congestion.as_dict(), **host_tcp(spec))
    if fab.capabilities.datapath == "user":  # what bounded all switch queues together
        have, source = ovs_buffer.send_buffer()
        manifest.update(ovs_send_buffer={"bytes": have, "source": source,
                                         "needed": ovs_buffer.topology_required_bytes(topo)},
                        ovs_receive_buffer=ovs_buffer.receive_buffer())
    progress.phase(f"fabric ready: {len(fab.net.switches)} switches, "
                   f"{len(fab.net.hosts)} hosts, policy {spec.routing.policy}")


def _stop_workload(fab: Fabric, run_dir: Path, manifest: Manifest, scheduler, procs: list,
                   captures: list, samplers: list) -> None:
    """The run's teardown inside the fabric, on every path out: events undone, the
    workload's processes, the captures and the queue sampler stopped (their stats into
    the manifest), and the counters after the run."""
    if scheduler is not None:
        # before the processes stop: a paused one must be resumed to end
        scheduler.stop()
        scheduler.restore()
    _stop_all(procs)
    stats = {c.iface: c.stop() for c in captures}
    if captures:
        manifest.update(capture_drops=stats, capture_lossy=sorted(
            i for i, s in stats.items() if s.get("dropped_by_kernel")))
    if samplers:
        _stop_all(samplers)
        meta = run_dir / rf.QUEUES_META
        if meta.exists():
            manifest.update(queue_sampler=json.loads(meta.read_text()))
    if fab.net is not None:
        counters.snapshot(fab, run_dir / rf.COUNTERS_DIR, "after")


def _set_rto_min(fab: Fabric, rto_min_ms: float) -> None:
    """Apply the minimum RTO to every host's route into the fabric (per-route, as in
    the incast literature; the kernel's default floor is 200 ms)."""
    for host in fab.net.hosts:
        intf = host.defaultIntf().name
        out = host.cmd(f"ip route replace {naming.SUBNET} dev {intf} proto kernel scope link "
                       f"src {host.IP()} rto_min {rto_min_ms:g}ms 2>&1; echo rc=$?")
        if "rc=0" not in out:
            raise RunFailed("failed", f"could not set rto_min on {host.name}: {out.strip()}")


def _start_sampler(fab: Fabric, fmap: FabricMap, run_dir: Path, interval_ms: float):
    argv = [sys.executable, "-m", "incastlab.capture.queues", "--ifaces",
            ",".join(fmap.switch_egress_ifaces()), "--interval-ms", f"{interval_ms:g}",
            "--out", str(run_dir / rf.QUEUES.name)]
    # switch ports live in the root namespace, so the sampler runs there too
    proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)
    fab.state.add_process(proc.pid, "queue sampler")
    return proc


def _ecn_record(fab: Fabric) -> dict:
    """What the manifest says of the ECN marking: threshold, unit, how, which ports."""
    m = fab.ecn
    return {"threshold": m.marking.threshold, "unit": m.marking.unit,
            "marker": "bpf (incastlab/bpf/ecn_mark.bpf.c)", "tcp_ecn": 1,
            "ports": sorted(m.slots.values())}


def _start_ecn_sampler(fab: Fabric, run_dir: Path, interval_ms: float = 200.0):
    """The marker's counters into ecn.csv (incastlab.capture.ecn_sampler), root namespace."""
    proc = ecn_sampler.start(fab.ecn.stats_map, fab.ecn.slots, run_dir / rf.ECN_COUNTERS.name,
                             interval_ms)
    fab.state.add_process(proc.pid, "ecn sampler")
    return proc


def _await_ecn_sampler(proc, run_dir: Path, timeout_s: float) -> None:
    """The workload starts only once the ECN sampler has its first sample in ecn.csv."""
    try:
        ecn_sampler.wait_first_sample(proc, run_dir / rf.ECN_COUNTERS.name, timeout_s)
    except ecn_sampler.SamplerNotReady as exc:
        raise RunFailed("failed", str(exc)) from None


def start_workload(fab: Fabric, launches, log_dir: Path) -> list:
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for launch in launches:
        with open(log_dir / f"{launch.rank}.stderr", "w") as err:
            procs.append(fab.popen(launch.host, launch.argv, f"{launch.role} {launch.rank}",
                                   stdout=subprocess.DEVNULL, stderr=err,
                                   stdin=subprocess.DEVNULL))
    return procs


def _start_events(spec, fab, fmap, run_dir: Path, launches, procs):
    """The [[events]] scheduler, t = 0 now (the workload's processes just started).
    Progress for at_iteration: the most steps any counting process has logged."""
    job = job_for(spec.workload.kind)
    counting = [run_dir / rf.WORKERS_DIR / rf.worker_log(la.rank) for la in launches
                if la.counts_iterations]
    ctx = run_events.EventContext(
        fabric=fab, net=fab.net, fmap=fmap, run_dir=run_dir, spec=spec,
        scene=event_scene(spec),
        processes=[run_events.Process(la.host, la.rank, la.role, p)
                   for la, p in zip(launches, procs, strict=True)])
    scheduler = run_events.Scheduler(
        spec.events, ctx,
        progress=lambda: max((progress_logged(path, job.progress_event)
                              for path in counting), default=0))
    scheduler.start()
    return scheduler


def progress_logged(path: Path, event: str) -> int:
    """Lines of ``event`` in a JSONL log (the apps write compact JSON: ``"event":"x"``)."""
    marker = f'"event":"{event}"'.encode()
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if marker in line)
    except OSError:
        return 0


def _wait_workload(spec, fab, procs, launches, captures, run_dir, deadline, progress,
                   cpu, scheduler=None) -> dict:
    """Wait for the workload; raise RunFailed on a failed process, a dead controller or
    the run's deadline. Returns the capture stats if captures had to stop early."""
    log_dir = run_dir / rf.WORKERS_DIR
    last_shown = 0.0
    truncated: dict = {}
    steady = False
    job = job_for(spec.workload.kind)
    tolerated = job.tolerates_lost_workers(spec.workload)
    # processes a worker_kill/ps_kill event ended on purpose (launch rank -> which event)
    killed = scheduler.ctx.killed if scheduler is not None else {}
    doomed_at = None

    def stderr(launch) -> str:
        return (log_dir / f"{launch.rank}.stderr").read_text(errors="replace").strip()

    while True:
        codes = [p.poll() for p in procs]
        verdict = hostevents.exit_verdict(launches, codes, killed, tolerated, stderr)
        if verdict is not None:
            if verdict[0] != "complete":
                raise RunFailed(*verdict)
            return truncated
        doomed = hostevents.lost_beyond_tolerance(launches, killed, tolerated) \
            if killed else None
        if doomed and doomed_at is None:
            doomed_at = time.monotonic()
        if doomed and time.monotonic() - doomed_at > spec.workload.timeout_s + LOST_GRACE_S:
            # the others should have failed by their own timeout, with a clearer reason
            raise RunFailed("failed", f"{doomed}; the other processes did not end within "
                                      f"workload.timeout_s + {LOST_GRACE_S:g} s")
        failed = fab.controller_failed()
        if failed:
            raise RunFailed("failed", failed.splitlines()[0])
        if scheduler is not None and scheduler.error:
            raise RunFailed("failed", scheduler.error)
        if time.monotonic() > deadline:
            raise RunFailed("failed", f"the run exceeded run.duration_limit_s = "
                                      f"{spec.run.duration_limit_s:g} s (bring-up included)")
        if captures and shutil.disk_usage(run_dir).free < LOW_FREE_BYTES:
            truncated = {cap.iface: cap.stop() for cap in captures}
            progress.phase("disk nearly full: captures stopped")
            captures.clear()
        if time.monotonic() - last_shown >= 1.0:
            done = {launch.host: progress_logged(log_dir / f"{launch.rank}.jsonl",
                                                  job.progress_event)
                    for launch in launches if launch.counts_iterations}
            want = job.expected_progress(spec.workload)
            progress.iterations(done, want)
            if not steady and done and all(done.values()):
                # Start judging CPU saturation once every process is iterating: the
                # seconds before are torch imports and rendezvous, CPU-bound by nature.
                cpu.restart()
                steady = True
            last_shown = time.monotonic()
        time.sleep(0.2)


def _stop_all(procs, grace_s: float = 3.0) -> None:
    import os

    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [p for p in procs if p.poll() is None]
        for p in live:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + grace_s
        while time.monotonic() < end and any(p.poll() is None for p in live):
            time.sleep(0.05)


def _require_disk(run_dir: Path, need: int) -> None:
    free = shutil.disk_usage(run_dir).free
    if free < need:
        raise RunFailed("failed", f"only {free / 2**20:.0f} MiB free under {run_dir}; captures "
                                  f"need at least {need / 2**20:.0f} MiB")
