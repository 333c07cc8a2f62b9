"""Open the Mininet CLI on a leaf–spine fabric routed by an incastlab controller;
everything is torn down when the CLI exits (also on Ctrl-C)."""
from __future__ import annotations

import sys

from incastlab.controller.registry import POLICIES
from incastlab.fabric import Fabric, FabricError
from incastlab.preflight import PreflightError
from incastlab.topologies.leafspine import DEFAULT_HOST_BW, LeafSpineTopo, TopologyError

HELP = "open the Mininet CLI on a fabric (e.g. --spines 2 --leaves 2 --hosts-per-leaf 2)"


def add_arguments(p):
    p.add_argument("--spines", type=int, default=2, help="number of spine switches")
    p.add_argument("--leaves", type=int, default=2, help="number of leaf switches")
    p.add_argument("--hosts-per-leaf", type=int, default=2, help="hosts under each leaf")
    p.add_argument("--host-bw", type=float, default=DEFAULT_HOST_BW,
                   help="host link rate, Mbit/s")
    p.add_argument("--queue-packets", type=int, default=100,
                   help="switch egress queue limit, packets")
    p.add_argument("--policy", default="single", choices=sorted(POLICIES),
                   help="routing policy of the controller")
    p.add_argument("--run-dir", default=None,
                   help="where fabric.json and controller logs go (default: a temp dir)")


def run(args) -> int:
    from mininet.log import setLogLevel

    from incastlab.commands.cli_iperf import FabricCLI

    try:
        topo = LeafSpineTopo(args.spines, args.leaves, args.hosts_per_leaf,
                             host_bw=args.host_bw, queue_packets=args.queue_packets)
        with Fabric(topo, policy=args.policy, run_dir=args.run_dir) as fabric:
            print(f"fabric ready ({len(fabric.net.hosts)} hosts, policy {args.policy}); "
                  f"logs in {fabric.run_dir}. Type 'exit' to tear down.")
            setLogLevel("info")  # pingall, iperf etc. print their results at info level
            FabricCLI(fabric)  # Mininet's CLI; iperf/iperfudp through iperf3
        print(f"torn down; fabric.json and controller logs kept in {fabric.run_dir}")
    except (TopologyError, PreflightError, FabricError) as exc:
        print(f"incastlab cli: {exc}", file=sys.stderr)
        return 1
    return 0
