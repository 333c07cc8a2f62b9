"""ECN marking at every switch egress queue, with the project's BPF marker (docs/ecn.md).

This kernel has no RED, so ``topology.ecn_threshold_packets`` (or ``_bytes``) is done by
incastlab/bpf/ecn_mark.bpf.c: ``ecn_egress`` on each switch port's clsact egress hook
(before its HTB/pfifo queue), ``ecn_ingress`` on the clsact ingress hook of the port's
peer, both keyed to the port's slot by (namespace cookie, ifindex), so the queue's
occupancy is what went in minus what came out.

Everything lives in a private bpffs at ``BPF_ROOT/<state id>`` (incastlab.bpffs), recorded in the
run's state (``bpf_mounts``) before it is mounted: unmounting it releases the pinned
programs and maps, and the clsact qdiscs go with the fabric's interfaces. Hosts get
``net.ipv4.tcp_ecn = 1`` in their own namespaces (gone with them at teardown).
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from incastlab.fields import OFF as ECN_OFF  # stdlib only: the sampler imports this module
from incastlab.bpffs import (BPF_ROOT, BpfError, PinnedObject, node_run, unmount,
                             update_commands)

__all__ = ["BPF_ROOT", "EcnError", "EcnMarker", "EcnMarking", "dump_stats", "parse_stats",
           "port_conf", "port_key", "unmount", "update_commands"]

OBJECT = "ecn_mark"
PROGRAMS = ("ecn_egress", "ecn_ingress")
MAX_PORTS = 1024  # as MAX_PORTS in ecn_mark.bpf.c
SO_NETNS_COOKIE = 71  # socket(7), Linux 5.14
_COOKIE_CODE = ("import socket;s=socket.socket();"
                f"print(int.from_bytes(s.getsockopt(socket.SOL_SOCKET,{SO_NETNS_COOKIE},8),"
                "'little'))")


class EcnError(BpfError):
    """The marker could not be set up (the message says what failed)."""


@dataclass(frozen=True)
class EcnMarking:
    """Mark CE above ``threshold`` in ``unit`` ('packets' or 'bytes', the queue's own)."""

    threshold: int
    unit: str

    @classmethod
    def of_topology(cls, t) -> EcnMarking | None:
        """From a validated spec's [topology]: None when no threshold is given (or 'off')."""
        for unit in ("bytes", "packets"):
            value = getattr(t, f"ecn_threshold_{unit}", None)
            if value is not None and value != ECN_OFF:
                return cls(int(value), unit)
        return None


def port_key(netns_cookie: int, ifindex: int) -> bytes:
    """struct ecn_port_key: u64 namespace cookie, u32 ifindex, u32 padding (pure)."""
    return struct.pack("<QII", netns_cookie, ifindex, 0)


def port_conf(threshold: int, limit: int, in_bytes: bool) -> bytes:
    """struct ecn_conf: u64 threshold, u64 limit, u32 unit flag, u32 padding (pure)."""
    return struct.pack("<QQII", threshold, limit, int(in_bytes), 0)


def root_netns_cookie() -> int:
    import socket

    with socket.socket() as s:
        return int.from_bytes(s.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), "little")


class EcnMarker:
    """The marker of one fabric: ``attach`` after the fabric is up, ``detach`` at
    teardown (safe to call twice). ``slots``: slot -> switch egress interface."""

    def __init__(self, marking: EcnMarking, state):
        self.marking = marking
        self.state = state
        self.pinned = PinnedObject(OBJECT, BPF_ROOT / state.id)
        self.pin_dir = self.pinned.pin_dir
        self.slots: dict[int, str] = {}

    @property
    def stats_map(self):
        return self.pinned.map("stats")

    def attach(self, net, fmap) -> None:
        self.pinned.load(self.state)
        for host in net.hosts:
            node_run(host, ["sysctl", "-qw", "net.ipv4.tcp_ecn=1"])
        cookies = {None: root_netns_cookie()}
        entries = []
        ports = [e for e in fmap.egresses() if e.queue_unit is not None]
        if len(ports) > MAX_PORTS:
            raise EcnError(f"{len(ports)} switch ports: the marker holds {MAX_PORTS}")
        for slot, e in enumerate(sorted(ports, key=lambda e: e.iface)):
            peer_iface = fmap.egress_iface(e.peer, e.node)
            peer_node = net[e.peer]
            peer_ns = None if fmap.switch_named(e.peer) else e.peer  # switches: root ns
            if peer_ns not in cookies:
                cookies[peer_ns] = int(node_run(peer_node, ["python3", "-c", _COOKIE_CODE]))
            self._filter(net[e.node], e.iface, "egress")
            self._filter(peer_node, peer_iface, "ingress")
            entries += [("ports", port_key(cookies[None], self._ifindex(net[e.node], e.iface)),
                         struct.pack("<I", slot)),
                        ("ports", port_key(cookies[peer_ns],
                                           self._ifindex(peer_node, peer_iface)),
                         struct.pack("<I", slot)),
                        ("conf", struct.pack("<I", slot), self._conf(e))]
            self.slots[slot] = e.iface
        self.pinned.write(entries)

    def _conf(self, e) -> bytes:
        limit = e.queue_bytes if self.marking.unit == "bytes" else e.queue_packets
        if limit is None:
            raise EcnError(f"{e.iface}: ECN threshold in {self.marking.unit} but the queue "
                           f"counts {e.queue_unit}")
        return port_conf(self.marking.threshold, int(limit), self.marking.unit == "bytes")

    def _filter(self, node, iface: str, hook: str) -> None:
        self.pinned.attach(node, iface, hook, f"ecn_{hook}")

    @staticmethod
    def _ifindex(node, iface: str) -> int:
        return int(json.loads(node_run(node, ["ip", "-j", "link", "show", "dev", iface]))
                   [0]["ifindex"])

    def totals(self) -> dict[str, dict[str, int]]:
        """Per switch egress interface, the marker's counters now (dump_stats)."""
        return {self.slots[s]: row for s, row in dump_stats(self.stats_map, self.slots).items()}

    def detach(self) -> None:
        """Unmount the run's bpffs (its programs and maps go once no filter holds them;
        the filters go with the fabric's interfaces)."""
        self.pinned.unload()


STAT_FIELDS = ("in_pkts", "in_bytes", "out_pkts", "out_bytes", "marks", "ce_arrived",
                "not_ect_over", "full")  # struct ecn_stats, in order
STATS_SIZE = 8 * len(STAT_FIELDS)


def parse_stats(value: bytes) -> dict[str, int]:
    """One struct ecn_stats (little-endian u64s) -> its counters by name (pure)."""
    return dict(zip(STAT_FIELDS, struct.unpack(f"<{len(STAT_FIELDS)}Q", value[:STATS_SIZE]),
                    strict=True))


def dump_stats(stats_map, slots) -> dict[int, dict[str, int]]:
    """The counters of ``slots`` from the pinned stats array (bpf(2) directly: a
    sampler reads it every second, and bpftool's JSON of the whole array is ~700 kB)."""
    from incastlab.capture import bpfmap

    with bpfmap.PinnedMap(stats_map) as m:
        return {s: parse_stats(m.lookup(struct.pack("<I", s), STATS_SIZE)) for s in slots}
