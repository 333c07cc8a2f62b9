"""The fabric map: one typed, versioned object for ``fabric.json``.

The topology writes it (``topologies.leafspine.fabric_map``), and the controller, the
runner and the analysis read it with this same code; nobody else parses the file. It
holds what the topology decided — names, DPIDs, ports, addresses from
``topologies/naming.py`` — as data, so readers re-derive nothing (no role guessed from a
name, no interface name built from a port number).

No Mininet and no os-ken import here: the controller stays Mininet-free and the analysis
runs on any laptop.

Units: rates in Mbit/s, queue limits in packets (``queue_packets``) or bytes
(``queue_bytes``), the MTU in bytes, ports as OpenFlow port numbers (a host's own
interface is port 0), DPIDs as integers.

Format version 1 (``FORMAT_VERSION``) holds exactly the fields of the dataclasses below,
under the same names, plus ``format_version``. A file without ``format_version`` is read
as version 1 only if its top-level keys are exactly version 1's (the files written
before the field existed); any other version, an unknown or a missing key, or a value of
the wrong type is refused with a ``FabricError`` that names the field.

Optional fields (``OPTIONAL``: the map's ``mtu`` and ``queue_bytes``, a link's
``queue_bytes``) have defaults — MTU 1500, no byte limit — and are written only when they
differ from them: a default fabric's file is exactly what it was before they existed, an
older map reads with the defaults, and an older incastlab refuses (unknown field) a map
it would misread, e.g. one of jumbo frames. With ``queue_bytes``, ``queue_packets`` is
null: a switch queue has exactly one limit.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields

try:
    from incastlab.topologies.fabricparts import (DEFAULT_MTU, ETHERNET_HEADER, HOST_DOWNLINK,
                                                  HOST_UPLINK, MTU_RANGE, ROLES,
                                                  SPINE_DOWNLINK, TCP_IP_OVERHEAD, UPLINK,
                                                  Egress, FabricError, Host, Link, Switch,
                                                  Uplink, check_keys, egress_kind,
                                                  frame_bytes, json_value, mss_bytes)
except ImportError:  # a file beside topologies/leafspine.py, loaded by stock `mn --custom`
    import importlib.util
    import sys
    from pathlib import Path

    _spec = importlib.util.spec_from_file_location(
        "_incastlab_fabricparts", Path(__file__).with_name("fabricparts.py"))
    sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # as leafspine's
    _spec.loader.exec_module(sys.modules[_spec.name])
    from _incastlab_fabricparts import (DEFAULT_MTU, ETHERNET_HEADER, HOST_DOWNLINK,
                                        HOST_UPLINK, MTU_RANGE, ROLES, SPINE_DOWNLINK,
                                        TCP_IP_OVERHEAD, UPLINK, Egress, FabricError, Host,
                                        Link, Switch, Uplink, check_keys, egress_kind,
                                        frame_bytes, json_value, mss_bytes)

__all__ = ["DEFAULT_MTU", "ETHERNET_HEADER", "FORMAT_VERSION", "HOST_DOWNLINK", "HOST_UPLINK",
           "MTU_RANGE", "OPTIONAL", "OPTIONAL_ITEM", "ROLES", "SPINE_DOWNLINK",
           "TCP_IP_OVERHEAD", "UPLINK", "V1_KEYS", "Egress", "FabricError", "FabricMap", "Host",
           "Link", "Switch", "Uplink", "frame_bytes", "mss_bytes"]

FORMAT_VERSION = 1


@dataclass(frozen=True)
class FabricMap:
    """Switches, hosts and links of one fabric plus the parameters it was built with.

    kind: the topology class (``LeafSpineTopo``, ``StarTopo``). spines, leaves: counts;
    hosts_per_leaf: hosts on every leaf. host_bw_mbps / fabric_bw_mbps: host-leaf and
    leaf-spine rates (Mbit/s; fabric_bw_mbps is None without spines). queue_packets: the
    switch egress queue limit (packets), None when queue_bytes (bytes, a bfifo) is the
    limit instead. delay: one-way link delay ('2ms') or None. subnet: the hosts' network,
    e.g. '10.0.0.0/16'. mtu: every interface's MTU (bytes).

    Construction checks that everything refers to everything else consistently (every
    leaf has one link to every spine, every host one link to its leaf on its leaf_port,
    no port used twice, ...) and raises FabricError naming the field.
    """
    kind: str
    spines: int
    leaves: int
    hosts_per_leaf: int
    host_bw_mbps: float
    fabric_bw_mbps: float | None
    queue_packets: int | None
    delay: str | None
    subnet: str
    switches: tuple[Switch, ...]
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    mtu: int = DEFAULT_MTU
    queue_bytes: int | None = None

    def __post_init__(self):
        for name in ("switches", "hosts", "links"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        # look-up tables, not a field: equality, repr and the file see only the data
        object.__setattr__(self, "_ix", _Index(self))

    # ---- serialisation ------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain data, keys in file order, ``format_version`` first."""
        out = {"format_version": FORMAT_VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in OPTIONAL and value == f.default:
                continue  # written only when not the default (see the module docstring)
            if isinstance(value, tuple):
                value = [{g.name: getattr(item, g.name) for g in fields(item)
                          if not (g.name in OPTIONAL_ITEM.get(type(item), ())
                                  and getattr(item, g.name) == g.default)}
                         for item in value]
            out[f.name] = value
        return out

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data) -> FabricMap:
        """Validate parsed fabric.json and build the map; FabricError names the field."""
        return _parse(data)

    @classmethod
    def from_json(cls, text: str) -> FabricMap:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise FabricError(f"not valid JSON: {e}") from None
        return _parse(data)

    @classmethod
    def load(cls, path) -> FabricMap:
        """Read and validate the file at ``path``; errors start with the path."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise FabricError(f"{path}: cannot read: {e.strerror}") from None
        try:
            return cls.from_json(text)
        except FabricError as e:
            raise FabricError(f"{path}: {e}") from None

    def save(self, path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json() + "\n")

    # ---- switches -----------------------------------------------------------------
    @property
    def dpids(self) -> list[int]:
        """Every switch DPID, sorted."""
        return sorted(self._ix.by_dpid)

    @property
    def spine_indices(self) -> list[int]:
        return sorted(self._ix.spine)

    @property
    def leaf_indices(self) -> list[int]:
        return sorted(self._ix.leaf)

    @property
    def spine_names(self) -> list[str]:
        """Spine names in index order."""
        return [self._ix.spine[j].name for j in self.spine_indices]

    @property
    def leaf_names(self) -> list[str]:
        """Leaf names in index order."""
        return [self._ix.leaf[i].name for i in self.leaf_indices]

    def spine(self, index: int) -> Switch:
        """Spine number ``index`` (KeyError if there is none)."""
        return self._ix.spine[index]

    def leaf(self, index: int) -> Switch:
        """Leaf number ``index`` (KeyError if there is none)."""
        return self._ix.leaf[index]

    def switch(self, dpid: int) -> Switch | None:
        return self._ix.by_dpid.get(dpid)

    def switch_named(self, name: str) -> Switch | None:
        return self._ix.switch_by_name.get(name)

    def uplink(self, leaf: int, spine: int) -> Uplink:
        """The link of leaf ``leaf`` to spine ``spine`` (indices; KeyError if none)."""
        return self._ix.uplinks[(leaf, spine)]

    # ---- hosts --------------------------------------------------------------------
    def host(self, name: str) -> Host | None:
        return self._ix.host_by_name.get(name)

    def host_by_ip(self, ip: str) -> Host | None:
        return self._ix.host_by_ip.get(ip)

    def hosts_on(self, leaf: int | str) -> list[Host]:
        """Hosts of a leaf given by index or by name, in file order."""
        if isinstance(leaf, str):
            sw = self._ix.switch_by_name.get(leaf)
            if sw is None or sw.role != "leaf":
                return []
            leaf = sw.index
        return [h for h in self.hosts if h.leaf == leaf]

    def leaf_of(self, host: str) -> str | None:
        """Name of the leaf ``host`` hangs off (None for an unknown host)."""
        h = self.host(host)
        return self._ix.leaf[h.leaf].name if h else None

    def ip_by_host(self) -> dict[str, str]:
        """{host name: IP address}."""
        return {h.name: h.ip for h in self.hosts}

    # ---- ports and interfaces -----------------------------------------------------
    def egresses(self) -> list[Egress]:
        """Every egress interface, hosts' included: per link in file order, node1's
        end then node2's."""
        return list(self._ix.egress.values())

    def link_of_iface(self, iface: str) -> Egress | None:
        """What is behind interface ``iface``: node, port, peer, kind, rate, queue."""
        return self._ix.egress.get(iface)

    def switch_egress_ifaces(self) -> list[str]:
        """Every switch egress interface, sorted (the queues the sampler reads)."""
        return sorted(e.iface for e in self.egresses() if e.kind != HOST_UPLINK)

    def egress_iface(self, node: str, peer: str) -> str | None:
        """Interface of ``node`` on its link to ``peer`` (its egress towards peer)."""
        return self._ix.by_pair.get((node, peer))

    def ports(self, dpid: int) -> dict[int, Egress]:
        """Port number -> Egress for every wired port of switch ``dpid``."""
        sw = self.switch(dpid)
        return dict(self._ix.ports_of.get(sw.name, {})) if sw else {}

    @property
    def queue_unit(self) -> str:
        """'bytes' when the switch queues' limit is queue_bytes, else 'packets'."""
        return "bytes" if self.queue_bytes is not None else "packets"

    def queue_limit_bytes(self, iface: str) -> int | None:
        """The most bytes the switch egress queue behind ``iface`` can hold: its byte
        limit, or its packet limit times a full frame at the map's MTU (the largest a
        pfifo of jumbo frames holds); None for a host's interface or an unknown one.
        With `Egress.bw_mbps` this bounds the queueing delay a port can add."""
        e = self.link_of_iface(iface)
        if e is None or e.queue_unit is None:
            return None
        return e.queue_bytes if e.queue_bytes is not None \
            else e.queue_packets * frame_bytes(self.mtu)

    def queue_limit_text(self, iface: str | None = None) -> str:
        """The switch queues' limit in the unit configured, for reports: '100 packets'
        or '30,280 bytes' (of ``iface``'s queue, else the fabric's own setting)."""
        e = self.link_of_iface(iface) if iface else None
        packets, nbytes = (e.queue_packets, e.queue_bytes) if e else \
            (self.queue_packets, self.queue_bytes)
        return f"{nbytes:,} bytes" if nbytes is not None else f"{packets} packets"

    def capacity_mbps(self, dpid: int, port: int) -> float | None:
        """Rate (Mbit/s) of the link behind port ``port`` of switch ``dpid``."""
        sw = self.switch(dpid)
        e = self._ix.ports_of.get(sw.name, {}).get(port) if sw else None
        return e.bw_mbps if e else None


class _Index:
    """Look-up tables of one FabricMap, built (and the map checked) once."""

    def __init__(self, m: FabricMap):
        _check_parameters(m)
        self._index_switches(m)
        self._index_hosts(m)
        self._index_links(m)

    def _index_switches(self, m: FabricMap) -> None:
        self.spine, self.leaf, self.by_dpid, self.switch_by_name = {}, {}, {}, {}
        for n, s in enumerate(m.switches):
            where = f"switches[{n}]"
            if s.role not in ROLES:
                raise FabricError(f"{where}.role must be 'spine' or 'leaf', got {s.role!r}")
            group = self.spine if s.role == "spine" else self.leaf
            if s.index in group:
                raise FabricError(f"{where}.index: duplicate {s.role} index {s.index}")
            if s.dpid in self.by_dpid:
                raise FabricError(f"{where}.dpid: duplicate dpid {s.dpid:#x}")
            if s.name in self.switch_by_name:
                raise FabricError(f"{where}.name: duplicate name {s.name!r}")
            group[s.index] = self.by_dpid[s.dpid] = self.switch_by_name[s.name] = s
        if not self.leaf:
            raise FabricError("switches: the fabric has no leaf")
        for field, group in (("spines", self.spine), ("leaves", self.leaf)):
            if getattr(m, field) != len(group):
                raise FabricError(f"{field} is {getattr(m, field)} but switches lists "
                                  f"{len(group)}")
        if m.spines and m.fabric_bw_mbps is None:
            raise FabricError("fabric_bw_mbps: a fabric with spines needs its rate")

    def _index_hosts(self, m: FabricMap) -> None:
        self.host_by_name, self.host_by_ip = {}, {}
        for n, h in enumerate(m.hosts):
            where = f"hosts[{n}]"
            if h.leaf not in self.leaf:
                raise FabricError(f"{where}.leaf {h.leaf} is not a leaf of this fabric")
            if h.name in self.host_by_name or h.name in self.switch_by_name:
                raise FabricError(f"{where}.name: duplicate name {h.name!r}")
            if h.ip in self.host_by_ip:
                raise FabricError(f"{where}.ip: duplicate ip {h.ip}")
            self.host_by_name[h.name] = self.host_by_ip[h.ip] = h
        for i, lf in self.leaf.items():
            count = sum(1 for h in m.hosts if h.leaf == i)
            if count != m.hosts_per_leaf:
                raise FabricError(f"hosts: {lf.name} has {count} hosts but hosts_per_leaf "
                                  f"is {m.hosts_per_leaf}")

    def _index_links(self, m: FabricMap) -> None:
        self.egress, self.by_pair, self.uplinks, self.ports_of = {}, {}, {}, {}
        host_link = {}
        used = set()
        for n, lk in enumerate(m.links):
            where = f"links[{n}]"
            self._check_link(lk, where, used)
            s1, s2 = self.switch_by_name.get(lk.node1), self.switch_by_name.get(lk.node2)
            if not s1 and not s2:
                raise FabricError(f"{where}: links two hosts ({lk.node1}, {lk.node2})")
            if s1 and s2:
                self._add_uplink(lk, s1, s2, where)
            else:
                host_link[self._host_of_link(lk, s1, s2, where, host_link)] = n
            self._add_egresses(lk)
        wanted = {(i, j) for i in self.leaf for j in self.spine}
        if set(self.uplinks) != wanted:
            raise FabricError("links: every leaf must have exactly one link to every spine")
        lonely = [h.name for h in m.hosts if h.name not in host_link]
        if lonely:
            raise FabricError(f"links: host {lonely[0]} has no link")

    def _check_link(self, lk: Link, where: str, used: set) -> None:
        """Both ends name a node of the fabric on a port and interface not wired yet;
        a positive rate; exactly one queue limit, each at least 1."""
        for end in ("1", "2"):
            node, port = getattr(lk, "node" + end), getattr(lk, "port" + end)
            if node not in self.switch_by_name and node not in self.host_by_name:
                raise FabricError(f"{where}.node{end} {node!r} is not a switch or host "
                                  "of this fabric")
            if (node, port) in used:
                raise FabricError(f"{where}.port{end}: port {port} of {node} is wired twice")
            used.add((node, port))
            if getattr(lk, "intf" + end) in self.egress:
                raise FabricError(f"{where}.intf{end}: interface "
                                  f"{getattr(lk, 'intf' + end)} is wired twice")
        if lk.bw_mbps <= 0:
            raise FabricError(f"{where}.bw_mbps must be positive, got {lk.bw_mbps!r}")
        for name in ("queue_packets", "queue_bytes"):
            value = getattr(lk, name)
            if value is not None and value < 1:
                raise FabricError(f"{where}.{name} must be >= 1, got {value}")
        if (lk.queue_packets is None) == (lk.queue_bytes is None):
            raise FabricError(f"{where}: exactly one of queue_packets and queue_bytes "
                              f"must be set, got {lk.queue_packets!r} and "
                              f"{lk.queue_bytes!r}")

    def _add_uplink(self, lk: Link, s1: Switch, s2: Switch, where: str) -> None:
        if {s1.role, s2.role} != {"leaf", "spine"}:
            raise FabricError(f"{where}: only leaf-spine switch links are supported")
        leaf, spine, lp, sp = (s1, s2, lk.port1, lk.port2) if s1.role == "leaf" \
            else (s2, s1, lk.port2, lk.port1)
        if (leaf.index, spine.index) in self.uplinks:
            raise FabricError("links: every leaf must have exactly one link to every "
                              f"spine ({where} links {leaf.name} to {spine.name} again)")
        self.uplinks[(leaf.index, spine.index)] = Uplink(
            leaf.index, spine.index, lp, sp, lk.bw_mbps)

    def _host_of_link(self, lk: Link, s1: Switch | None, s2: Switch | None, where: str,
                      host_link: dict) -> str:
        """The host a host-leaf link wires, checked against its hosts[] entry."""
        host = self.host_by_name[lk.node2 if s1 else lk.node1]
        sw, sw_port = (s1, lk.port1) if s1 else (s2, lk.port2)
        if host.name in host_link:
            raise FabricError(f"{where}: {host.name} has a second link")
        if sw.role != "leaf" or sw.index != host.leaf or sw_port != host.leaf_port:
            raise FabricError(f"{where}: {host.name} must link to port "
                              f"{host.leaf_port} of leaf {host.leaf} (hosts[].leaf, "
                              f"leaf_port), not to port {sw_port} of {sw.name}")
        host_intf = lk.intf2 if s1 else lk.intf1
        if host_intf != host.intf:
            raise FabricError(f"{where}: {host.name}'s interface is {host_intf}, but "
                              f"hosts[].intf says {host.intf}")
        return host.name

    def _add_egresses(self, lk: Link) -> None:
        for a, pa, ia, b, pb in ((lk.node1, lk.port1, lk.intf1, lk.node2, lk.port2),
                                 (lk.node2, lk.port2, lk.intf2, lk.node1, lk.port1)):
            kind = egress_kind(self.switch_by_name.get(a), self.switch_by_name.get(b))
            host = kind == HOST_UPLINK
            self.egress[ia] = Egress(ia, a, pa, b, pb, kind, lk.bw_mbps,
                                     None if host else lk.queue_packets,
                                     None if host else lk.queue_bytes)
            self.ports_of.setdefault(a, {})[pa] = self.egress[ia]
            self.by_pair.setdefault((a, b), ia)


def _check_parameters(m: FabricMap) -> None:
    """The map's own parameters: counts and queue limits in range, an MTU offered,
    exactly one queue limit, positive rates."""
    for field, low in (("spines", 0), ("leaves", 1), ("hosts_per_leaf", 1),
                       ("queue_packets", 1), ("queue_bytes", 1)):
        value = getattr(m, field)
        if value is not None and value < low:
            raise FabricError(f"{field} must be >= {low}, got {value}")
    if not MTU_RANGE[0] <= m.mtu <= MTU_RANGE[1]:
        raise FabricError(f"mtu must be from {MTU_RANGE[0]} to {MTU_RANGE[1]} bytes, "
                          f"got {m.mtu}")
    if (m.queue_packets is None) == (m.queue_bytes is None):
        raise FabricError("queue_packets, queue_bytes: exactly one must be set, got "
                          f"{m.queue_packets!r} and {m.queue_bytes!r}")
    for field in ("host_bw_mbps", "fabric_bw_mbps"):
        rate = getattr(m, field)
        if rate is not None and not rate > 0:
            raise FabricError(f"{field} must be a positive rate in Mbit/s, got {rate!r}")


# ---- parsing ------------------------------------------------------------------------
_TOP_TYPES = {"kind": str, "spines": int, "leaves": int, "hosts_per_leaf": int,
              "host_bw_mbps": float, "fabric_bw_mbps": (float, None),
              "queue_packets": (int, None), "delay": (str, None), "subnet": str}
_ITEMS = {"switches": Switch, "hosts": Host, "links": Link}
_ITEM_TYPES = {Switch: {"name": str, "role": str, "index": int, "dpid": int},
               Host: {"name": str, "leaf": int, "index": int, "ip": str, "mac": str,
                      "leaf_port": int, "intf": str},
               Link: {"node1": str, "port1": int, "node2": str, "port2": int, "intf1": str,
                      "intf2": str, "bw_mbps": float, "queue_packets": (int, None)}}
V1_KEYS = ("format_version", *_TOP_TYPES, *_ITEMS)
# Optional fields (defaults in the dataclasses; written only when not the default).
OPTIONAL = {"mtu": int, "queue_bytes": (int, None)}
OPTIONAL_ITEM = {Link: {"queue_bytes": (int, None)}}


def _parse(data) -> FabricMap:
    if not isinstance(data, dict):
        raise FabricError("fabric.json must hold a JSON object")
    if "format_version" in data:
        version = data["format_version"]
        if isinstance(version, bool) or version != FORMAT_VERSION:
            raise FabricError(f"format_version {version!r} is not supported: this incastlab "
                              f"reads version {FORMAT_VERSION} (rewrite the map with it)")
    elif set(data) != set(V1_KEYS[1:]):
        missing = [k for k in V1_KEYS[1:] if k not in data]
        unknown = sorted(set(data) - set(V1_KEYS))
        raise FabricError("format_version is missing and the keys are not those of a "
                          f"version-{FORMAT_VERSION} file (missing: {', '.join(missing) or '-'}"
                          f"; unknown: {', '.join(unknown) or '-'})")
    check_keys(data, (*V1_KEYS, *OPTIONAL), "fabric", optional=("format_version", *OPTIONAL))
    top = {k: json_value(data[k], t, k) for k, t in _TOP_TYPES.items()}
    top.update({k: json_value(data[k], t, k) for k, t in OPTIONAL.items() if k in data})
    for key, cls in _ITEMS.items():
        items = data[key]
        if not isinstance(items, list):
            raise FabricError(f"{key} must be a list, got {type(items).__name__}")
        types = {**_ITEM_TYPES[cls], **OPTIONAL_ITEM.get(cls, {})}
        optional = tuple(OPTIONAL_ITEM.get(cls, ()))
        parsed = []
        for n, item in enumerate(items):
            where = f"{key}[{n}]"
            if not isinstance(item, dict):
                raise FabricError(f"{where} must be an object, got {item!r}")
            check_keys(item, tuple(types), where, optional=optional)
            parsed.append(cls(**{k: json_value(item[k], t, f"{where}.{k}")
                                 for k, t in types.items() if k in item}))
        top[key] = tuple(parsed)
    return FabricMap(**top)
