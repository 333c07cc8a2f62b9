"""The hosts' path labeller of policies spray and flowlet (controller/spray.py,
controller/flowlet.py; docs/routing-below-the-flow.md).

incastlab/bpf/path_label.bpf.c's ``label_egress`` is attached to every host's fabric
interface (clsact egress) and writes a path label 0 .. spines-1 into the DSCP bits of
each IPv4 packet; the leaves route each label to its spine. The program and its maps
live in a private bpffs of the run (incastlab.bpffs), recorded in the run's state
before it is mounted, so teardown and ``incastlab clean`` unmount it; its filters go
with the hosts' namespaces.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass

from incastlab.bpffs import BPF_ROOT, PinnedObject
from incastlab.controller.registry import POLICIES
from incastlab.topologies.fabricparts import (ETHERNET_HEADER, HOST_UPLINK, TCP_IP_OVERHEAD,
                                              frame_bytes)

OBJECT = "path_label"
PROGRAMS = ("label_egress",)
MODES = {"spray": 0, "flowlet": 1}  # as MODE_* in path_label.bpf.c
MAX_LABELS = 64                      # DSCP is 6 bits
GAP_RANGE_US = (1, 10_000_000)       # routing.flowlet_gap_us
_DELAY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(us|ms|s)")
_DELAY_US = {"us": 1.0, "ms": 1e3, "s": 1e6}


def delay_us(delay: str | None) -> float:
    """A link delay of the spec's form ('2ms', '500us', '0.1s') in microseconds; 0 for
    None."""
    if not delay:
        return 0.0
    m = _DELAY.fullmatch(delay)
    if not m:
        raise ValueError(f"not a delay like '2ms', '500us' or '0.1s': {delay!r}")
    return float(m.group(1)) * _DELAY_US[m.group(2)]


def base_rtt_us(host_mbps: float, fabric_mbps: float | None, mtu: int,
                delay: str | None = None) -> float:
    """The base round-trip time of an inter-leaf path, microseconds: a full frame
    serialised host -> leaf -> spine -> leaf -> host (two host links, two fabric
    links), its ACK (66 bytes: Ethernet + IPv4 + TCP with timestamps) back the same
    way, and every one of those 8 link crossings' one-way delay. No queueing."""
    fabric = fabric_mbps or host_mbps
    bits = 8 * (frame_bytes(mtu) + ETHERNET_HEADER + TCP_IP_OVERHEAD)
    return 2 * bits / host_mbps + 2 * bits / fabric + 8 * delay_us(delay)


def default_gap_us(fmap) -> int:
    """routing.flowlet_gap_us's default: the fabric's base RTT (base_rtt_us), rounded up
    to a whole microsecond."""
    return math.ceil(base_rtt_us(fmap.host_bw_mbps, fmap.fabric_bw_mbps, fmap.mtu,
                                 fmap.delay))


@dataclass(frozen=True)
class PathLabelling:
    """What the labeller does: ``mode`` (spray or flowlet) over ``labels`` labels;
    ``gap_us`` is the flowlet gap (0 for spray)."""

    mode: str
    labels: int
    gap_us: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not 1 <= self.labels <= MAX_LABELS:
            raise ValueError(f"labels must be 1 to {MAX_LABELS} (DSCP), got {self.labels}")

    def conf(self) -> bytes:
        """struct label_conf: u32 labels, u32 mode, u64 gap in ns (pure)."""
        return struct.pack("<IIQ", self.labels, MODES[self.mode], self.gap_us * 1000)

    def as_dict(self) -> dict:
        return {"mode": self.mode, "labels": self.labels, "gap_us": self.gap_us,
                "labeller": "bpf (incastlab/bpf/path_label.bpf.c)", "field": "DSCP"}


def for_policy(policy: str, fmap, gap_us: int | None = None) -> PathLabelling | None:
    """The labelling policy ``policy`` needs on fabric ``fmap`` (None: the policy
    places whole flows). ``gap_us``: flowlet's gap, default default_gap_us(fmap)."""
    spec = POLICIES.get(policy)
    mode = spec.host_labels if spec else None
    if mode is None:
        return None
    gap = 0
    if mode == "flowlet":
        gap = default_gap_us(fmap) if gap_us is None else int(gap_us)
    return PathLabelling(mode, max(1, fmap.spines), gap)


def host_interfaces(fmap) -> dict[str, str]:
    """host name -> its fabric interface (the egress the labeller sits on)."""
    return {e.node: e.iface for e in fmap.egresses() if e.kind == HOST_UPLINK}


class PathLabeller:
    """The labeller of one fabric: ``attach`` once the hosts are up, ``detach`` at
    teardown (safe to call twice; clean_state unmounts it too)."""

    def __init__(self, labelling: PathLabelling, state):
        self.labelling = labelling
        self.pinned = PinnedObject(OBJECT, BPF_ROOT / f"{state.id}-labels")
        self.state = state

    def attach(self, net, fmap) -> None:
        self.pinned.load(self.state)
        self.pinned.write([("conf", struct.pack("<I", 0), self.labelling.conf())])
        for host, iface in sorted(host_interfaces(fmap).items()):
            self.pinned.attach(net[host], iface, "egress", PROGRAMS[0])

    def label_packets(self) -> list[int]:
        """Packets sent with each label so far, all hosts (label 0 first)."""
        from incastlab.capture import bpfmap

        with bpfmap.PinnedMap(self.pinned.map("label_packets")) as m:
            return [struct.unpack("<Q", m.lookup(struct.pack("<I", k), 8))[0]
                    for k in range(self.labelling.labels)]

    def detach(self) -> None:
        self.pinned.unload()
