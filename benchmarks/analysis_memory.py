"""Benchmark: peak memory of `incastlab report` on synthetic runs of growing size.

    nice -n 10 .venv/bin/python benchmarks/analysis_memory.py
         [--packets 2000000,10000000,50000000] [--exact-at 10000000]
         [--workdir /tmp/incastlab-analysis-memory] [--keep] [--results FILE]

What it does
  For each size in --packets, writes a synthetic run directory of that many captured
  TCP packets (analysis.synthetic.make_bulk_run: a 4 x 4 leaf-spine fabric map, 64
  connections, every data segment and its ACK captured at both hosts' interfaces, one
  capture per host, one-way delays from FIFO queues), then runs `incastlab report` on
  it in a child process and measures the child's own peak RSS (its VmHWM, as
  parse_pcap.py does), its wall time and what the report counted (RTT samples,
  sojourns). The baseline, measured in the same run: the smallest size's peak; each
  peak is printed as a ratio to it, with the bytes per packet above it (0: memory flat
  with the run's size). --exact-at also runs the report on that size with the latency
  samples all kept exactly (samples.EXACT_SAMPLES past the run's samples: the analysis
  before the sketch), to show what the sketch saves. The run directories are deleted
  afterwards unless --keep. Ends with one JSON line of all figures (also to
  --results FILE). Timings are measured, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

# the report in-process, EXACT_SAMPLES set first (0: the default), then its own peak RSS
# (VmHWM: this process image's high-water mark; ru_maxrss would carry the parent's
# over exec) and wall time as the last line
CHILD = """
    import json, sys, time
    from incastlab.analysis import samples
    if int(sys.argv[2]):
        samples.EXACT_SAMPLES = int(sys.argv[2])
    from incastlab.cli import main
    t = time.perf_counter()
    sys.argv = ["incastlab", "report", sys.argv[1]]
    try:
        rc = main()
    except SystemExit as exc:
        rc = exc.code
    with open("/proc/self/status") as f:
        kb = next(int(x.split()[1]) for x in f if x.startswith("VmHWM"))
    print(json.dumps({"hwm_kb": kb, "seconds": time.perf_counter() - t, "rc": rc or 0}))
"""
IMPORTS_ONLY = """
    import json
    from incastlab.analysis import report, tcp
    with open("/proc/self/status") as f:
        kb = next(int(x.split()[1]) for x in f if x.startswith("VmHWM"))
    print(json.dumps({"hwm_kb": kb, "seconds": 0.0, "rc": 0}))
"""


def child(code: str, *args: str) -> dict:
    """Run `code` in a fresh interpreter; its last JSON line (or the error)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                         capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines or not lines[-1].startswith("{"):
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(lines[-1])


def measure(workdir: Path, packets: int, exact: bool, keep: bool) -> dict:
    """Write a run of `packets` packets, report it in a child; the figures."""
    from incastlab.analysis.synthetic import make_bulk_run

    run = workdir / f"run-{packets}"
    shutil.rmtree(run, ignore_errors=True)
    t = time.perf_counter()
    try:
        made = make_bulk_run(run, packets)
        made["write_seconds"] = time.perf_counter() - t
        made["bytes"] = sum(p.stat().st_size for p in (run / "pcap").glob("*.pcap"))
        r = child(CHILD, str(run), str(10**15 if exact else 0))
        if "error" not in r:
            m = json.loads((run / "metrics.json").read_text())
            soj = [g["samples"] for g in m["latency"]["groups"] if g["measure"] == "sojourn"]
            r.update(rtt_samples=m["latency"]["rtt_samples"], sojourns=sum(soj))
    finally:
        if not keep:
            shutil.rmtree(run, ignore_errors=True)
    return {"run": made, "exact_samples": exact, **r}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", default="2000000,10000000,50000000",
                    help="comma-separated run sizes (captured packets)")
    ap.add_argument("--exact-at", type=int, default=10_000_000,
                    help="also this size with every latency sample kept exactly (0: not)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="where the run directories go (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--results", default=None, metavar="FILE",
                    help="also write the JSON there (benchmarks/results/analysis_memory.json)")
    args = ap.parse_args(argv)
    try:
        args.packets = sorted(int(x) for x in args.packets.split(","))
    except ValueError:
        ap.error(f"--packets: comma-separated whole numbers, not {args.packets!r}")
    return args


def print_table(rows: list[dict], base: dict) -> None:
    """Each run's peak against the smallest run's (the baseline)."""
    print(f"{'packets':>12}{'samples':>8}{'RTT samples':>13}{'sojourns':>11}"
          f"{'peak RSS MB':>13}{'vs smallest':>13}{'B/packet above':>16}{'report s':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['run']['packets']:>12,}  failed: {r['error']}")
            continue
        above = (r["hwm_kb"] - base["hwm_kb"]) * 1024 / max(
            r["run"]["packets"] - base["run"]["packets"], 1)
        kind = "exact" if r["exact_samples"] else "sketch"
        print(f"{r['run']['packets']:>12,}{kind:>8}{r['rtt_samples']:>13,}"
              f"{r['sojourns']:>11,}{r['hwm_kb'] / 1024:>13,.0f}"
              f"{r['hwm_kb'] / base['hwm_kb']:>12.2f}x{above:>16.1f}{r['seconds']:>10.0f}")


def main(argv=None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="incastlab-analysis-memory-"))
    workdir.mkdir(parents=True, exist_ok=True)
    imports = child(IMPORTS_ONLY)
    rows = []
    for n in args.packets:
        rows.append(measure(workdir, n, False, args.keep))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # progress
    if args.exact_at:
        rows.append(measure(workdir, args.exact_at, True, args.keep))
    if args.workdir is None and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    base = rows[0]
    if "error" not in base:
        print_table(rows, base)
        for r in rows:
            if "error" not in r:
                r["ratio_to_smallest"] = r["hwm_kb"] / base["hwm_kb"]
    figures = {"benchmark": "analysis_memory", "title": "The analysis's memory at any size",
               "cpus": os.cpu_count(), "imports_only_kb": imports.get("hwm_kb"),
               "target_peak_gb": 2.0, "results": rows}
    print(json.dumps(figures))
    from render_results import write_results  # benchmarks/, the script's own folder
    write_results(args.results, figures)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
