"""Benchmark: what the script observer (apps/script_observer.py) costs a script's step.

    nice -n 10 .venv/bin/python benchmarks/observer_overhead.py [--repetitions 5]
        [--steps 60] [--warmup 10] [--ranks 2] [--results FILE]

What it does
  Runs two training scripts on loopback under torchrun with the script job's own command
  lines (jobs/script_launch.py: the bootstrap, the environment, the observer as a run on
  the fabric gets them), once with the observer (``workload.observe = true``) and once
  without (``false``: the bootstrap alone), alternately (ABBA order, so a drift of the
  shared machine's load falls on both), --repetitions times. The scripts time their own
  optimizer steps (forward, backward, the gradients' communication and the step) on two
  clocks, so the figure is the same with or without the observer: wall-clock time
  (perf_counter: the target's figure) and the rank's CPU time (process_time, all its
  threads: what the observer adds is CPU work, and on a machine shared with other jobs
  the CPU time of a step varies far less than its wall-clock time, which includes the
  time the rank waited for a core):
  - ``ddp``: DDP over an MLP (DDP's buckets: the observer's comm hook, one record a
    bucket);
  - ``collectives``: one all_reduce a parameter tensor a step, as examples/collectives.py
    does (the observer's wrapper, one record a call: its worst case per byte).
  The baseline, measured in the same run: the same script without the observer. Per
  launch, the median step of rank 0 after --warmup steps; per workload and clock, the
  median over repetitions of each condition and their ratio (target: at most 1.02), and each
  ABBA pair's own ratio, and the machine's 1-minute load average before and after (on a
  shared machine the pairs' spread, not the median, says what the figure is worth).
  Ends with one JSON line of all figures (also to --results FILE). Timings are
  measured, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from incastlab.apps.local import LocalJob, free_port
from incastlab.jobs.script_launch import loopback_torchrun

TARGET_RATIO = 1.02

# Both scripts: --steps, --warmup, --times FILE (rank 0 writes its step durations there).
COMMON = r'''
import argparse, json, time
import torch, torch.distributed as dist, torch.nn as nn
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int); p.add_argument("--warmup", type=int)
p.add_argument("--times"); p.add_argument("--width", type=int, default=256)
a = p.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)
torch.set_num_threads(1)
net = nn.Sequential(nn.Linear(64, a.width), nn.ReLU(), nn.Linear(a.width, a.width),
                    nn.ReLU(), nn.Linear(a.width, 10))
'''
SCRIPTS = {
    "ddp": COMMON + r'''
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(net, bucket_cap_mb=0.1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
times, cpu = [], []
for i in range(a.warmup + a.steps):
    x = torch.randn(32, 64)
    t, c = time.perf_counter(), time.process_time()
    opt.zero_grad(); model(x).pow(2).mean().backward(); opt.step()
    times.append(time.perf_counter() - t); cpu.append(time.process_time() - c)
''',
    "collectives": COMMON + r'''
n = dist.get_world_size()
opt = torch.optim.SGD(net.parameters(), lr=0.01)
times, cpu = [], []
for i in range(a.warmup + a.steps):
    x = torch.randn(32, 64)
    t, c = time.perf_counter(), time.process_time()
    opt.zero_grad(); net(x).pow(2).mean().backward()
    for q in net.parameters():
        dist.all_reduce(q.grad); q.grad /= n
    opt.step()
    times.append(time.perf_counter() - t); cpu.append(time.process_time() - c)
''',
}
END = r'''
if dist.get_rank() == 0:
    open(a.times, "w").write(json.dumps({"wall": times[a.warmup:], "cpu": cpu[a.warmup:]}))
dist.barrier()
dist.destroy_process_group()
'''


class LaunchFailed(RuntimeError):
    """A launch whose ranks did not all exit 0 (or that wrote no step times)."""


# torch's gloo now and then aborts a rank at exit ("terminate called without an active
# exception", SIGABRT after destroy_process_group), with or without the observer: seen in
# 2 of ~20 launches of the plain DDP script on this machine. Such a launch is run again
# (at most this many times), and every failure is kept in the figures' "relaunched".
RELAUNCHES = 2


def launch_retrying(work: Path, name: str, observe: bool, args, failures: list) -> dict:
    for _ in range(RELAUNCHES + 1):
        try:
            return launch(work, name, observe, args)
        except LaunchFailed as exc:
            failures.append({"workload": name, "observe": observe,
                             "error": str(exc).splitlines()[0],
                             "sigabrt": "SIGABRT" in str(exc)})
            last = exc
    raise SystemExit(str(last))


def launch(work: Path, name: str, observe: bool, args) -> dict[str, float]:
    """One loopback torchrun job of `args.ranks` nodes; rank 0's median step (s), in
    wall-clock time and in the process's CPU time."""
    path = work / f"{name}.py"
    path.write_text(SCRIPTS[name] + END)
    out = Path(tempfile.mkdtemp(prefix=f"{name}-{int(observe)}-", dir=work))
    times = out / "times.json"
    argvs = loopback_torchrun(args.ranks, out / "workers", free_port(), str(path),
                              ["--steps", str(args.steps), "--warmup", str(args.warmup),
                               "--times", str(times)], observe=observe)
    with LocalJob(out / "procs") as job:
        for i, argv in enumerate(argvs):
            job.start(i, argv)
        codes = job.wait(300)
    if any(c != 0 for c in codes.values()) or not times.exists():
        # each failed rank's own stderr: the one that did not fail (None: killed at the
        # timeout, waiting for it) says nothing of why
        tails = "".join(f"\n--- rank {r} (exit {c}) stderr:\n{job.stderr(r)[-2000:]}"
                        for r, c in codes.items() if c != 0)
        raise LaunchFailed(f"{name} (observe={observe}) failed: {codes}{tails}")
    records = list((out / "workers").glob("*.jsonl"))
    if observe != bool(records):  # the condition is what it says it is
        raise SystemExit(f"{name}: observe={observe} but {len(records)} observer logs")
    return {clock: statistics.median(v) for clock, v in json.loads(times.read_text()).items()}


def measure(name: str, work: Path, args, failures: list) -> dict:
    """ABBA repetitions of one script; medians and ratios, per clock."""
    runs = {False: [], True: []}
    for rep in range(args.repetitions):
        order = (False, True) if rep % 2 == 0 else (True, False)
        got = {observe: launch_retrying(work, name, observe, args, failures)
               for observe in order}
        for observe in order:
            runs[observe].append(got[observe])
        print(json.dumps({"workload": name, "rep": rep, **{
            f"{'observed' if o else 'plain'}_{clock}_ms": got[o][clock] * 1e3
            for o in order for clock in CLOCKS}}), file=sys.stderr, flush=True)
    row = {"workload": name}
    for clock, prefix in CLOCKS.items():
        plain = [r[clock] for r in runs[False]]
        observed = [r[clock] for r in runs[True]]
        p, o = statistics.median(plain), statistics.median(observed)
        row.update({f"{prefix}plain_step_ms": p * 1e3, f"{prefix}observed_step_ms": o * 1e3,
                    f"{prefix}ratio": o / p,
                    f"{prefix}pair_ratios": [round(b / a, 4)
                                             for a, b in zip(plain, observed, strict=True)],
                    f"{prefix}plain_runs_ms": [round(t * 1e3, 3) for t in plain],
                    f"{prefix}observed_runs_ms": [round(t * 1e3, 3) for t in observed]})
    return row


# the scripts' two clocks -> the prefix of their figures ("": wall-clock, the target's)
CLOCKS = {"wall": "", "cpu": "cpu_"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repetitions", type=int, default=6, help="launches per condition")
    p.add_argument("--steps", type=int, default=60, help="timed steps per launch")
    p.add_argument("--warmup", type=int, default=10, help="steps not timed, first")
    p.add_argument("--ranks", type=int, default=2, help="torchrun nodes on loopback")
    p.add_argument("--workloads", default=",".join(SCRIPTS), help="of " + ", ".join(SCRIPTS))
    p.add_argument("--results", default=None,
                   help="also write the JSON there (benchmarks/results/observer_overhead.json)")
    args = p.parse_args(argv)
    load_before = os.getloadavg()[0]  # the shared machine's load: what the spread means
    with tempfile.TemporaryDirectory(prefix="observer-overhead-") as tmp:
        failures: list[dict] = []
        rows = [measure(name, Path(tmp), args, failures)
                for name in args.workloads.split(",")]
    for r in rows:
        for clock, x in CLOCKS.items():
            print(f"{r['workload']:12s} {clock:4s} plain {r[x + 'plain_step_ms']:8.3f} ms  "
                  f"observed {r[x + 'observed_step_ms']:8.3f} ms  ratio {r[x + 'ratio']:.3f}  "
                  f"pairs {min(r[x + 'pair_ratios']):.3f}-{max(r[x + 'pair_ratios']):.3f}")
    figures = {"benchmark": "observer_overhead", "title": "Script observer overhead",
               "target_ratio": TARGET_RATIO, "ranks": args.ranks, "steps": args.steps,
               "warmup": args.warmup, "repetitions": args.repetitions, "results": rows,
               "relaunched": failures,
               "cpus": os.cpu_count(), "load_average_1min": [round(load_before, 2),
                                                             round(os.getloadavg()[0], 2)]}
    from render_results import write_results  # benchmarks/, the script's own folder

    write_results(args.results, figures)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
