"""How evenly each routing policy loads the spines, and what that buys in throughput.

For every policy, a fabric comes up (incastlab.fabric.Fabric: real queues, the real
controller) and carries N concurrent TCP flows (iperf3) from the hosts of the first
half of the leaves to the hosts of the second half, repeated with a different server
port each time (a different 5-tuple, so ECMP hashes anew). Per run:

- spine load ratio = max / mean of the bytes each spine transmitted (from OVS's own
  port counters): 1.0 is perfect balance, S (number of spines) is everything on one;
- throughput fraction = the flows' aggregate goodput / the fabric's bisection
  bandwidth (one direction: leaves/2 * spines * fabric_bw, capped by the source
  hosts' links).

Traffic: every source host runs one iperf3 client with N / hosts parallel streams to
its peer host on the other side. (One iperf3 client per flow would not do for
``spread``: each client opens a control connection right before its data connection,
and round-robin over two spines would put every data connection on the same one.)

Run as root, under the shared dev lock, e.g.:
    flock /tmp/incastlab-dev.lock .venv/bin/python benchmarks/routing_balance.py --repeats 5
Prints a table and ends with one JSON line (all runs and the summary; also to --results).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from incastlab import iperf
from incastlab.apps.local import free_port
from incastlab.controller.registry import POLICIES


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policies", default=",".join(POLICIES),
                   help=f"comma-separated, from {', '.join(POLICIES)}")
    p.add_argument("--flows", default="8,16", help="comma-separated flow counts")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seconds", type=float, default=4.0, help="iperf3 duration per run")
    p.add_argument("--spines", type=int, default=2)
    p.add_argument("--leaves", type=int, default=2)
    p.add_argument("--hosts-per-leaf", type=int, default=4)
    p.add_argument("--host-bw", type=float, default=20.0, help="Mbit/s")
    p.add_argument("--out", default=None, help="directory for the run directories")
    p.add_argument("--results", default=None, metavar="FILE",
                   help="also write the JSON there (benchmarks/results/NAME.json)")
    args = p.parse_args(argv)
    args.policies = args.policies.split(",")
    unknown = [x for x in args.policies if x not in POLICIES]
    if unknown:
        p.error(f"--policies: unknown {unknown}; allowed: {', '.join(POLICIES)}")
    args.flows = [int(x) for x in args.flows.split(",")]
    if args.leaves < 2 or args.leaves % 2:
        p.error("--leaves must be an even number >= 2 (sources and sinks are halves)")
    if args.repeats < 1 or args.seconds <= 0:
        p.error("--repeats must be >= 1 and --seconds > 0")
    return args


def spine_tx_bytes(spines: list[str]) -> dict[str, int]:
    totals = {}
    for name in spines:
        out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "--no-names", "dump-ports",
                              name], capture_output=True, text=True, check=True).stdout
        totals[name] = sum(
            int(m.group(2)) for m in re.finditer(
                r"port\s+(\S+): rx pkts=\S+, bytes=\S+.*?\n\s+tx pkts=\S+, bytes=(\d+)", out)
            if m.group(1) != "LOCAL")
    return totals


def host_pairs(topo) -> list[tuple[str, str]]:
    """(source, sink) host names: leaf i's host k sends to leaf i + L/2's host k."""
    from incastlab.topologies import naming
    half, hpl = topo.leaves // 2, topo.hosts_per_leaf
    return [(naming.host_name(i, k, hpl), naming.host_name(i + half, k, hpl))
            for i in range(1, half + 1) for k in range(1, hpl + 1)]


def one_run(fab, pairs, flows: int, port: int, seconds: float) -> dict:
    per_client = [flows // len(pairs) + (1 if n < flows % len(pairs) else 0)
                  for n in range(len(pairs))]
    spines = fab.topo.fabric_map().spine_names
    servers, clients = [], []
    try:
        for (_, dst), streams in zip(pairs, per_client, strict=True):
            if streams:  # every server listens before any traffic is counted
                servers.append(iperf.start_server(fab, dst, port))
        before = spine_tx_bytes(spines)
        for (src, dst), streams in zip(pairs, per_client, strict=True):
            if streams:
                clients.append(iperf.start_client(fab, src, dst, seconds, port,
                                                  extra=["-P", str(streams)]))
        goodput = sum(iperf.result(proc, timeout=seconds + 30)["end"]["sum_received"]
                      ["bits_per_second"] / 1e6 for proc in clients)
        moved = {k: v - before[k] for k, v in spine_tx_bytes(spines).items()}
    finally:
        for proc in [*clients, *servers]:
            if proc.poll() is None:  # Fabric.popen: each leads its own process group
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    mean = statistics.mean(moved.values()) or 1
    return {"spine_bytes": moved, "load_ratio": max(moved.values()) / mean,
            "goodput_mbps": goodput}


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("routing_balance: needs root (Mininet, OVS)", file=sys.stderr)
        return 2
    from incastlab.fabric import Fabric
    from incastlab.topologies.leafspine import LeafSpineTopo

    topo = LeafSpineTopo(spines=args.spines, leaves=args.leaves,
                         hosts_per_leaf=args.hosts_per_leaf, host_bw=args.host_bw)
    pairs = host_pairs(topo)
    bisection = min(args.leaves // 2 * args.spines * topo.fabric_bw, len(pairs) * topo.host_bw)
    out = Path(args.out or tempfile.mkdtemp(prefix="routing-balance-"))
    runs = []
    for policy in args.policies:
        with Fabric(topo, policy=policy, run_dir=out / policy,
                    controller_port=free_port()) as fab:
            for flows in args.flows:
                for rep in range(args.repeats):
                    r = one_run(fab, pairs, flows, 5301 + rep, args.seconds)
                    r.update(policy=policy, flows=flows, repeat=rep,
                             throughput_fraction=r["goodput_mbps"] / bisection)
                    runs.append(r)
                    print(f"  {policy:9s} {flows:3d} flows #{rep}: ratio {r['load_ratio']:.2f}"
                          f" goodput {r['goodput_mbps']:.1f} Mbit/s", file=sys.stderr)
    summary = []
    print(f"\nbisection bandwidth {bisection:g} Mbit/s; {args.repeats} repeats of "
          f"{args.seconds:g} s\n")
    print(f"{'policy':10s}{'flows':>6s}{'max/mean load':>16s}{'(worst)':>9s}"
          f"{'throughput/bisection':>23s}")
    for policy in args.policies:
        for flows in args.flows:
            sel = [r for r in runs if r["policy"] == policy and r["flows"] == flows]
            ratio = statistics.mean(r["load_ratio"] for r in sel)
            worst = max(r["load_ratio"] for r in sel)
            frac = statistics.mean(r["throughput_fraction"] for r in sel)
            summary.append({"policy": policy, "flows": flows, "load_ratio_mean": ratio,
                            "load_ratio_max": worst, "throughput_fraction_mean": frac})
            print(f"{policy:10s}{flows:6d}{ratio:16.2f}{worst:9.2f}{frac:23.2f}")
    figures = {"benchmark": "routing_balance", "bisection_mbps": bisection,
               "spines": args.spines, "leaves": args.leaves,
               "hosts_per_leaf": args.hosts_per_leaf, "host_bw_mbps": args.host_bw,
               "seconds": args.seconds, "repeats": args.repeats,
               "summary": summary, "runs": runs, "run_dirs": str(out)}
    print(json.dumps(figures))
    from render_results import write_results  # benchmarks/, the script's own folder
    write_results(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
