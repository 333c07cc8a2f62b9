"""ECN marker sampler: the BPF marker's per-port counters, cumulative, into ``ecn.csv``.

Runs as its own process (``python -m incastlab.capture.ecn_sampler``) beside the queue
sampler, reading the pinned stats map (incastlab.ecn) every ``--interval-ms`` and once
more when it is stopped, so the last row of each port holds the run's totals. Columns:
the run directory's ``ecn.csv`` (incastlab.topologies.runformat.ECN_COUNTERS).
"""
from __future__ import annotations

import argparse
import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

from incastlab.ecn import dump_stats
from incastlab.topologies.runformat import ECN_COUNTERS


def parse_slots(text: str) -> dict[int, str]:
    """'0=lf1-eth1,1=lf1-eth2' -> {0: 'lf1-eth1', 1: 'lf1-eth2'} (pure)."""
    out = {}
    for item in text.split(","):
        slot, _, iface = item.partition("=")
        out[int(slot)] = iface
    return out


def rows(counters: dict[int, dict[str, int]], slots: dict[int, str], t: float) -> list[list]:
    """One ecn.csv row per port, in ECN_COUNTERS' column order (pure)."""
    out = []
    for slot, iface in sorted(slots.items()):
        switch, _, port = iface.partition("-eth")
        c = counters[slot]
        out.append([f"{t:.6f}", switch, int(port) if port.isdigit() else -1, iface,
                    *(c[name] for name in ECN_COUNTERS.fields[4:])])
    return out


def sample_until_stopped(stats_map: Path, slots: dict[int, str], interval_s: float,
                         out_path: str) -> None:
    stop = {"now": False}

    def _stop(_sig, _frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with open(out_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(ECN_COUNTERS.fields)
        next_at = time.monotonic()
        while True:
            last = stop["now"]
            try:
                writer.writerows(rows(dump_stats(stats_map, slots), slots, time.time()))
            except OSError:  # the fabric's teardown unmounted the map: nothing more to read
                break
            f.flush()
            if last:
                break
            next_at += interval_s
            while not stop["now"] and time.monotonic() < next_at:
                time.sleep(min(0.05, max(next_at - time.monotonic(), 0)))


def start(stats_map, slots: dict[int, str], out_path, interval_ms: float) -> subprocess.Popen:
    """This sampler as its own process (own session, so a stop signals its group);
    the caller records it, then waits for its first sample (`wait_first_sample`)."""
    argv = [sys.executable, "-m", "incastlab.capture.ecn_sampler", "--stats", str(stats_map),
            "--slots", ",".join(f"{s}={iface}" for s, iface in sorted(slots.items())),
            "--interval-ms", f"{interval_ms:g}", "--out", str(out_path)]
    return subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)


class SamplerNotReady(RuntimeError):
    """The sampler wrote no sample (the message says why)."""


def wait_first_sample(proc: subprocess.Popen, out_path, timeout_s: float) -> None:
    """Return once ``out_path`` holds a row beyond its header (the sampler has read the
    marker's map once and flushed it), so a run that ends at once still has its counters
    from before its workload; SamplerNotReady if the sampler exits or ``timeout_s``
    passes first. Python's start on a loaded machine took long enough that a 2 s run
    once ended before the sampler wrote anything."""
    path = Path(out_path)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(path, "rb") as f:
                if len(f.read(1 << 16).splitlines()) >= 2:
                    return
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise SamplerNotReady(f"the ECN sampler exited (status {proc.returncode}) "
                                  f"before its first sample in {path.name}")
        if time.monotonic() > deadline:
            raise SamplerNotReady(f"the ECN sampler wrote no sample in {path.name} within "
                                  f"{timeout_s:g} s")
        time.sleep(0.02)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stats", required=True, help="the pinned stats map")
    p.add_argument("--slots", required=True, help="slot=iface,... of every marked port")
    p.add_argument("--interval-ms", type=float, default=1000.0, help="sampling interval, ms")
    p.add_argument("--out", required=True, help="CSV file to write")
    args = p.parse_args(argv)
    if not 0 < args.interval_ms <= 60_000:
        p.error(f"--interval-ms must be in (0, 60000], got {args.interval_ms}")
    sample_until_stopped(Path(args.stats), parse_slots(args.slots), args.interval_ms / 1e3,
                         args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
