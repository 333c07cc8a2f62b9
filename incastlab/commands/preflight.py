"""Check that this machine can run incastlab: root, Open vSwitch (started if down),
kernel or userspace datapath, netem, tools, the controller port and the run lock."""
from __future__ import annotations

import sys

from incastlab import ovs_buffer
from incastlab.lock import RunLock
from incastlab.preflight import PreflightError, run_preflight

HELP = "check the machine before a run (root, OVS, datapath, netem, tools, port, lock)"


def add_arguments(p):
    p.add_argument("--controller-port", type=int, default=6653,
                   help="TCP port the controller will listen on at 127.0.0.1")


def run(args) -> int:
    try:
        caps = run_preflight(controller_port=args.controller_port, lock=RunLock())
    except PreflightError as exc:
        print(f"preflight failed:\n{exc}", file=sys.stderr)
        return 1
    for notice in caps.notices:
        print(f"notice: {notice}")
    print(f"datapath: {caps.datapath}")
    print(f"netem: {'yes' if caps.netem else 'no (no emulated delay or loss)'}")
    print(f"TCP congestion controls: {', '.join(caps.congestion_controls)}")
    print(f"DCTCP: {caps.dctcp}")
    print(f"Open vSwitch: {caps.ovs_version}")
    if caps.ovs_send_buffer is not None:  # the userspace datapath's bound on all queues
        frames = caps.ovs_send_buffer // ovs_buffer.packet_charge(ovs_buffer.STANDARD_FRAME)
        print(f"Open vSwitch send buffer: {caps.ovs_send_buffer:,} bytes "
              f"({caps.ovs_send_buffer_source}; about {frames:,} full-size frames "
              "queued at all switch ports together)")
    print("preflight ok")
    return 0
