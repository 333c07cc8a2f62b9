"""Queue sampler: every switch egress queue, from ``tc -s -j qdisc show``, into CSV.

Runs as its own process (``python -m incastlab.capture.queues``) so that sampling
keeps its pace whatever the runner does. One ``tc`` call per sample reads every
interface of the root namespace (where the switch ports live); rows are kept for the
interfaces asked for, reading the packet-holding child qdisc (handle ``10:``, see
incastlab.topologies.links): its backlog is the queue, its drops are the queue's drops.
The child is a pfifo (``topology.queue_packets``) or a bfifo (``topology.queue_bytes``);
tc reports the backlog of either in bytes and in packets, and both are kept.

Its columns are the run directory's ``queues.csv`` (incastlab.topologies.runformat.QUEUES;
counters cumulative, as tc reports them). The achieved sampling interval, and how long a
``tc`` call took (a sample's counters are read somewhere within it), are written to
``<out>.meta.json`` at the end.
"""
from __future__ import annotations

import argparse
import csv
import json
import signal
import subprocess
import sys
import time

from incastlab.topologies.runformat import QUEUES

COLUMNS = QUEUES.fields
QUEUE_HANDLE = "10:"


def parse_tc_json(text: str, ifaces: set[str], t: float) -> list[list]:
    """Rows for the queue qdisc (handle 10:) of each interface in ``ifaces``.

    ``tc -s -j qdisc show`` (no ``dev``) lists qdiscs of all interfaces, each with
    its ``dev``; pure function, unit-tested on captured output."""
    rows = []
    for q in json.loads(text or "[]"):
        dev = q.get("dev")
        if dev not in ifaces or q.get("handle") != QUEUE_HANDLE:
            continue
        switch, _, port = dev.partition("-eth")
        rows.append([f"{t:.6f}", switch, int(port) if port.isdigit() else -1, dev,
                     q.get("backlog", 0), q.get("qlen", 0), q.get("drops", 0),
                     q.get("overlimits", 0), q.get("bytes", 0), q.get("packets", 0),
                     q.get("requeues", 0)])
    return rows


def sample_forever(ifaces: set[str], interval_s: float, out_path: str,
                   duration_s: float | None = None) -> dict:
    """Sample until SIGTERM/SIGINT (or duration_s); return achieved-interval stats."""
    stop = {"now": False}

    def _stop(_sig, _frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    gaps, reads, last, n = [], [], None, 0
    bad, first_bad = 0, None
    started = time.monotonic()
    next_at = started
    with open(out_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        while not stop["now"]:
            now = time.monotonic()
            if duration_s is not None and now - started >= duration_s:
                break
            t = time.time()
            out = subprocess.run(["tc", "-s", "-j", "qdisc", "show"], capture_output=True,
                                 text=True, check=False).stdout
            # the counters were read somewhere between t and now: how far off a sample's
            # time can be (analysis/fidelity.py's tolerance)
            reads.append(time.time() - t)
            try:
                writer.writerows(parse_tc_json(out, ifaces, t))
            except ValueError as exc:
                # tc's JSON of all qdiscs was seen malformed once in a demo run (while
                # qdiscs changed); one bad sample must not end the sampler and truncate
                # queues.csv: skip it, count it, and keep the first for the manifest
                bad += 1
                if first_bad is None:
                    first_bad = f"{exc} in {out[:300]!r}"
            n += 1
            if last is not None:
                gaps.append(now - last)
            last = now
            if n % 50 == 0:
                f.flush()
            next_at += interval_s
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:  # fell behind: do not try to catch up with a burst of samples
                next_at = time.monotonic()
    gaps.sort()
    reads.sort()
    stats = {"samples": n, "target_interval_ms": interval_s * 1e3,
             "mean_interval_ms": (sum(gaps) / len(gaps) * 1e3) if gaps else None,
             "p99_interval_ms": gaps[int(0.99 * (len(gaps) - 1))] * 1e3 if gaps else None,
             "max_interval_ms": gaps[-1] * 1e3 if gaps else None,
             "max_read_ms": reads[-1] * 1e3 if reads else None,
             "p99_read_ms": reads[int(0.99 * (len(reads) - 1))] * 1e3 if reads else None,
             "bad_samples": bad, "first_bad_sample": first_bad}
    with open(out_path + ".meta.json", "w") as f:
        json.dump(stats, f)
    return stats


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ifaces", required=True, help="comma-separated switch port names")
    p.add_argument("--interval-ms", type=float, default=10.0, help="sampling interval, ms")
    p.add_argument("--out", required=True, help="CSV file to write")
    p.add_argument("--duration", type=float, default=None, help="stop after this many s")
    args = p.parse_args(argv)
    if not 0 < args.interval_ms <= 1000:
        p.error(f"--interval-ms must be in (0, 1000], got {args.interval_ms}")
    sample_forever(set(args.ifaces.split(",")), args.interval_ms / 1e3, args.out, args.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
