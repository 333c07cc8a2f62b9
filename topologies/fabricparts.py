"""The parts of a fabric map (:mod:`incastlab.topologies.fabricmap`): switches, hosts,
links, the egress interfaces derived from them, what an egress faces, the frame and MSS
sizes of an MTU, and the JSON type checks the map's file is read with. Only the standard
library: stock Mininet loads it as a file.

Units: rates in Mbit/s, queue limits in packets or bytes, the MTU in bytes, ports as
OpenFlow port numbers (a host's own interface is port 0), DPIDs as integers.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MTU", "ETHERNET_HEADER", "HOST_DOWNLINK", "HOST_UPLINK", "MTU_RANGE",
           "ROLES", "SPINE_DOWNLINK", "TCP_IP_OVERHEAD", "UPLINK", "Egress", "FabricError",
           "Host", "Link", "Switch", "Uplink", "check_keys", "egress_kind", "frame_bytes",
           "json_value", "mss_bytes"]

ROLES = ("spine", "leaf")
DEFAULT_MTU = 1500
# The MTUs an emulated link may have (bytes): 1280 (IPv6's minimum, far above what TCP
# with timestamps needs) to 9000, the jumbo frames of training fabrics. Checked here:
# veth takes 68..65535; OVS's netdev ports take mtu_request 9000 and carry 9,014-byte
# frames (tests/test_jumbo_root.py); the userspace datapath sizes its receive buffers
# from the port's MTU, and nothing above 9000 was carried end to end, so nothing above
# is offered.
MTU_RANGE = (1280, 9000)
ETHERNET_HEADER = 14  # bytes in front of the IP packet (no FCS: captures do not hold it)
TCP_IP_OVERHEAD = 52  # IPv4 20 + TCP 20 + the timestamp option 12


def frame_bytes(mtu: int = DEFAULT_MTU) -> int:
    """Bytes of a full-size Ethernet frame at ``mtu`` as captured (no FCS): mtu + 14,
    1514 at MTU 1500, 9014 at 9000."""
    return mtu + ETHERNET_HEADER


def mss_bytes(mtu: int = DEFAULT_MTU) -> int:
    """TCP payload of a full-size segment with timestamps at ``mtu``: mtu - 52, 1448 at
    MTU 1500, 8948 at 9000 (the MSS the hosts' TCP uses)."""
    return mtu - TCP_IP_OVERHEAD
# What an egress interface faces (Egress.kind); the analysis shows these strings.
HOST_DOWNLINK = "host-downlink"    # leaf -> host
UPLINK = "uplink"                  # leaf -> spine
SPINE_DOWNLINK = "spine-downlink"  # spine -> leaf
HOST_UPLINK = "host-uplink"        # host -> leaf (the host's own interface)


class FabricError(ValueError):
    """fabric.json is missing, malformed or inconsistent; the message names the field."""


@dataclass(frozen=True)
class Switch:
    name: str
    role: str   # "spine" or "leaf"
    index: int  # j of spine sp{j}, i of leaf lf{i} (1-based)
    dpid: int


@dataclass(frozen=True)
class Host:
    name: str
    leaf: int       # index of its leaf
    index: int      # k: its position on that leaf (1-based)
    ip: str         # without prefix length
    mac: str
    leaf_port: int  # the leaf's port facing this host
    intf: str       # the host's own interface, e.g. h1-eth0


@dataclass(frozen=True)
class Link:
    """One cable. Each end egresses through its own interface; ``queue_packets`` is the
    pfifo limit of the switch-side egress queues, or None when ``queue_bytes`` (a bfifo
    limit in bytes) is given instead (hosts queue more deeply, see topologies/links.py
    HOST_QUEUE_PACKETS)."""
    node1: str
    port1: int
    node2: str
    port2: int
    intf1: str
    intf2: str
    bw_mbps: float
    queue_packets: int | None
    queue_bytes: int | None = None


@dataclass(frozen=True)
class Egress:
    """One egress interface: packets leave ``node`` through ``port`` (``iface``) towards
    ``peer``. Derived from a Link, never stored."""
    iface: str
    node: str
    port: int
    peer: str
    peer_port: int
    kind: str        # HOST_DOWNLINK, UPLINK, SPINE_DOWNLINK or HOST_UPLINK
    bw_mbps: float   # the link's rate, Mbit/s
    queue_packets: int | None  # pfifo limit of a switch egress queue (packets); None at a host
    queue_bytes: int | None = None  # bfifo limit instead (bytes); None at a host

    @property
    def queue_unit(self) -> str | None:
        """'bytes' or 'packets': the unit this queue's limit was configured in (None at a
        host)."""
        if self.queue_bytes is not None:
            return "bytes"
        return "packets" if self.queue_packets is not None else None


@dataclass(frozen=True)
class Uplink:
    """The link between leaf ``leaf`` and spine ``spine`` (indices) with its two ports."""
    leaf: int
    spine: int
    leaf_port: int
    spine_port: int
    bw_mbps: float


def egress_kind(node: Switch | None, peer: Switch | None) -> str:
    """What an egress of ``node`` (None: a host) towards ``peer`` (None: a host) faces."""
    if node is None:
        return HOST_UPLINK
    if node.role == "spine":
        return SPINE_DOWNLINK
    return UPLINK if peer is not None else HOST_DOWNLINK


# ---- the JSON type checks fabric.json is read with -------------------------------

def check_keys(d: dict, allowed: tuple, where: str, optional: tuple = ()) -> None:
    """``d`` (a JSON object at ``where``) has only ``allowed`` keys and all that are not
    ``optional``."""
    unknown = [k for k in d if k not in allowed]
    if unknown:
        raise FabricError(f"{where}: unknown field {unknown[0]!r} (fields: "
                          f"{', '.join(allowed)})")
    for k in allowed:
        if k not in d and k not in optional:
            raise FabricError(f"{where}: missing field {k!r}")


def json_value(value, kind, where: str):
    """``value`` checked against ``kind`` (int, float, str, or (type, None) for a nullable
    one); numbers for float fields become floats so a map equals its round trip."""
    if isinstance(kind, tuple):
        if value is None:
            return None
        kind = kind[0]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise FabricError(f"{where} must be an integer, got {value!r}")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FabricError(f"{where} must be a number, got {value!r}")
        return float(value)
    if kind is str and not isinstance(value, str):
        raise FabricError(f"{where} must be a string, got {value!r}")
    return value
