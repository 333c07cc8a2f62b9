"""The fabric as the controller sees it, read from the runner's ``fabric.json``.

The controller learns the fabric from this file rather than from LLDP discovery:
the topology is fixed before the switches connect, so reading it is deterministic
and there is no discovery delay before routes can be installed (readiness then only
waits for the switches themselves). Names, DPIDs and ports are the ones decided in
``topologies/naming.py``; this module takes them as data and re-derives nothing.

No os-ken import here: everything is unit-tested on plain dicts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass


class FabricError(ValueError):
    """fabric.json is missing, malformed or inconsistent; the message names the field."""


@dataclass(frozen=True)
class Switch:
    name: str
    role: str  # "spine" or "leaf"
    index: int
    dpid: int


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    mac: str
    leaf: int  # index of its leaf
    port: int  # leaf port facing the host
    bw_mbps: float | None


@dataclass(frozen=True)
class Uplink:
    """The link between leaf ``leaf`` and spine ``spine`` (indices) with its two ports."""
    leaf: int
    spine: int
    leaf_port: int
    spine_port: int
    bw_mbps: float | None


@dataclass(frozen=True)
class PortInfo:
    """What is behind one switch port: the peer node's name and the link rate."""
    peer: str
    bw_mbps: float | None


class FabricMap:
    """Switches, hosts and leaf-spine links of one fabric, indexed for routing."""

    def __init__(self, spines: list[Switch], leaves: list[Switch], hosts: list[Host],
                 uplinks: list[Uplink]):
        self.spines = {s.index: s for s in spines}
        self.leaves = {s.index: s for s in leaves}
        self.hosts = list(hosts)
        self.uplinks = {(u.leaf, u.spine): u for u in uplinks}
        self._by_ip = {h.ip: h for h in hosts}
        self._by_dpid = {s.dpid: s for s in [*spines, *leaves]}
        self._ports: dict[int, dict[int, PortInfo]] = {s.dpid: {} for s in [*spines, *leaves]}
        for h in hosts:
            self._ports[self.leaves[h.leaf].dpid][h.port] = PortInfo(h.name, h.bw_mbps)
        for u in uplinks:
            leaf, spine = self.leaves[u.leaf], self.spines[u.spine]
            self._ports[leaf.dpid][u.leaf_port] = PortInfo(spine.name, u.bw_mbps)
            self._ports[spine.dpid][u.spine_port] = PortInfo(leaf.name, u.bw_mbps)

    @property
    def dpids(self) -> list[int]:
        """Every switch DPID, sorted."""
        return sorted(self._by_dpid)

    def switch(self, dpid: int) -> Switch | None:
        return self._by_dpid.get(dpid)

    def host_by_ip(self, ip: str) -> Host | None:
        return self._by_ip.get(ip)

    def hosts_on(self, leaf: int) -> list[Host]:
        return [h for h in self.hosts if h.leaf == leaf]

    def ports(self, dpid: int) -> dict[int, PortInfo]:
        """Port number -> PortInfo for every wired port of switch ``dpid``."""
        return dict(self._ports.get(dpid, {}))

    def capacity_mbps(self, dpid: int, port: int) -> float | None:
        info = self._ports.get(dpid, {}).get(port)
        return info.bw_mbps if info else None


def _field(d: dict, key: str, kind, where: str):
    if key not in d:
        raise FabricError(f"{where}: missing field {key!r}")
    value = d[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise FabricError(f"{where}.{key} must be an integer, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise FabricError(f"{where}.{key} must be a string, got {value!r}")
    return value


def _rate(value, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise FabricError(f"{where}.bw_mbps must be a positive number or null, got {value!r}")
    return float(value)


def fabric_from_dict(data: dict) -> FabricMap:
    """Build a FabricMap from the parsed ``fabric.json`` (see topologies/leafspine.py
    ``fabric_map``). Raises FabricError naming the offending field."""
    if not isinstance(data, dict):
        raise FabricError("fabric.json must hold a JSON object")
    spines, leaves = [], []
    names = {}
    for n, sw in enumerate(_field(data, "switches", list, "fabric")):
        where = f"switches[{n}]"
        role = _field(sw, "role", str, where)
        if role not in ("spine", "leaf"):
            raise FabricError(f"{where}.role must be 'spine' or 'leaf', got {role!r}")
        s = Switch(_field(sw, "name", str, where), role, _field(sw, "index", int, where),
                   _field(sw, "dpid", int, where))
        (spines if role == "spine" else leaves).append(s)
        names[s.name] = s
    if not leaves:
        raise FabricError("switches: the fabric has no leaf")
    for group in (spines, leaves):
        if len({s.index for s in group}) != len(group):
            raise FabricError(f"switches: duplicate {group[0].role} index")
    if len({s.dpid for s in [*spines, *leaves]}) != len(spines) + len(leaves):
        raise FabricError("switches: duplicate dpid")
    leaf_by_index = {s.index: s for s in leaves}

    host_bw = {}
    uplinks = []
    for n, link in enumerate(_field(data, "links", list, "fabric")):
        where = f"links[{n}]"
        a, b = _field(link, "node1", str, where), _field(link, "node2", str, where)
        pa, pb = _field(link, "port1", int, where), _field(link, "port2", int, where)
        bw = _rate(link.get("bw_mbps"), where)
        sa, sb = names.get(a), names.get(b)
        if sa and sb:
            if {sa.role, sb.role} != {"leaf", "spine"}:
                raise FabricError(f"{where}: only leaf-spine switch links are supported")
            if sa.role == "spine":
                sa, sb, pa, pb = sb, sa, pb, pa
            uplinks.append(Uplink(sa.index, sb.index, pa, pb, bw))
        elif sa or sb:
            host_bw[b if sa else a] = bw  # its leaf port comes from hosts[].leaf_port
        else:
            raise FabricError(f"{where}: links two hosts ({a}, {b})")

    hosts = []
    for n, h in enumerate(_field(data, "hosts", list, "fabric")):
        where = f"hosts[{n}]"
        name = _field(h, "name", str, where)
        leaf = _field(h, "leaf", int, where)
        if leaf not in leaf_by_index:
            raise FabricError(f"{where}.leaf {leaf} is not a leaf of this fabric")
        hosts.append(Host(name, _field(h, "ip", str, where), _field(h, "mac", str, where),
                          leaf, _field(h, "leaf_port", int, where), host_bw.get(name)))
    if len({h.ip for h in hosts}) != len(hosts):
        raise FabricError("hosts: duplicate ip")
    wanted = {(lf.index, sp.index) for lf in leaves for sp in spines}
    have = {(u.leaf, u.spine) for u in uplinks}
    if wanted != have or len(uplinks) != len(have):
        raise FabricError("links: every leaf must have exactly one link to every spine")
    return FabricMap(spines, leaves, hosts, uplinks)


def load_fabric(path: str) -> FabricMap:
    """Read and validate ``fabric.json`` at ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise FabricError(f"--fabric {path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise FabricError(f"--fabric {path}: not valid JSON: {e}") from None
    return fabric_from_dict(data)
