"""Path computation on a leaf-spine fabric: pure functions, no os-ken import.

In a two-tier Clos the only routing decision is which spine an inter-leaf flow
crosses; everything else is fixed by the wiring:

- a leaf reaches its own hosts on their host ports (same-leaf traffic never leaves it);
- a spine reaches every host through its one link to that host's leaf;
- an inter-leaf flow goes source leaf -> uplink to spine j -> spine j -> downlink to
  the destination leaf -> host port.

So the policies only choose ``spine`` and these functions turn that into hops.
Works for any number of spines and leaves, including a star (1 leaf, 0 spines).
"""
from __future__ import annotations

from dataclasses import dataclass

from incastlab.topologies.fabricmap import FabricMap, Host

TCP, UDP = 6, 17


@dataclass(frozen=True)
class Rule:
    """A destination-based forwarding entry: on switch ``dpid``, IPv4 packets to
    ``ip_dst`` leave on ``out_port``."""
    dpid: int
    ip_dst: str
    out_port: int


@dataclass(frozen=True)
class Hop:
    dpid: int
    out_port: int


@dataclass(frozen=True)
class FlowKey:
    """One direction of a flow: the IPv4 5-tuple (ports 0 unless TCP or UDP)."""
    proto: int
    src_ip: str
    dst_ip: str
    src_port: int = 0
    dst_port: int = 0

    def reversed(self) -> FlowKey:
        return FlowKey(self.proto, self.dst_ip, self.src_ip, self.dst_port, self.src_port)


def host_rules(fabric: FabricMap) -> list[Rule]:
    """Every switch's route to every host, except leaves' routes to other leaves'
    hosts (those are the policy's choice). Installed proactively for all policies."""
    rules = []
    for host in fabric.hosts:
        rules.append(Rule(fabric.leaf(host.leaf).dpid, host.ip, host.leaf_port))
        for spine in fabric.spine_indices:
            rules.append(Rule(fabric.spine(spine).dpid, host.ip,
                              fabric.uplink(host.leaf, spine).spine_port))
    return rules


def remote_hosts(fabric: FabricMap, leaf: int) -> list[Host]:
    """Hosts that leaf ``leaf`` reaches only through a spine."""
    return [h for h in fabric.hosts if h.leaf != leaf]


def spine_indices(fabric: FabricMap) -> list[int]:
    return fabric.spine_indices


def uplink_port(fabric: FabricMap, leaf: int, spine: int) -> int:
    """Port of leaf ``leaf`` facing spine ``spine``."""
    return fabric.uplink(leaf, spine).leaf_port


def uplink_ports(fabric: FabricMap, leaf: int) -> list[int]:
    """Leaf ``leaf``'s uplink ports, in spine order (ECMP group buckets)."""
    return [uplink_port(fabric, leaf, s) for s in spine_indices(fabric)]


def path(fabric: FabricMap, src_ip: str, dst_ip: str, spine: int | None = None) -> list[Hop]:
    """Hops from the source host's leaf to the destination host.

    ``spine`` is required for hosts on different leaves and ignored on one leaf.
    Raises KeyError for an address outside the fabric, ValueError for a missing or
    unknown spine.
    """
    src, dst = fabric.host_by_ip(src_ip), fabric.host_by_ip(dst_ip)
    if src is None or dst is None:
        raise KeyError(f"not a host of this fabric: {src_ip if src is None else dst_ip}")
    if src.leaf == dst.leaf:
        return [Hop(fabric.leaf(src.leaf).dpid, dst.leaf_port)]
    if spine not in fabric.spine_indices:
        raise ValueError(f"spine must be one of {spine_indices(fabric)}, got {spine!r}")
    return [Hop(fabric.leaf(src.leaf).dpid, uplink_port(fabric, src.leaf, spine)),
            Hop(fabric.spine(spine).dpid, fabric.uplink(dst.leaf, spine).spine_port),
            Hop(fabric.leaf(dst.leaf).dpid, dst.leaf_port)]


def path_links(fabric: FabricMap, src_leaf: int, dst_leaf: int, spine: int
               ) -> list[tuple[int, int]]:
    """(dpid, egress port) of the two fabric links an inter-leaf flow loads on
    ``spine``: the source leaf's uplink and the spine's downlink to the destination leaf."""
    return [(fabric.leaf(src_leaf).dpid, uplink_port(fabric, src_leaf, spine)),
            (fabric.spine(spine).dpid, fabric.uplink(dst_leaf, spine).spine_port)]


def least_loaded_spine(fabric: FabricMap, src_leaf: int, dst_leaf: int,
                       utilisation: dict[tuple[int, int], float],
                       spines: list[int] | None = None) -> int:
    """The spine whose uplink + downlink utilisation (fraction of capacity, summed
    over the two links of the path; missing links count 0) is lowest; ties go to the
    lowest spine index so the choice is deterministic. ``spines``: the candidates
    (default every spine; e.g. only those whose links are up)."""
    def score(spine: int) -> float:
        return sum(utilisation.get(link, 0.0)
                   for link in path_links(fabric, src_leaf, dst_leaf, spine))
    return min(spines or spine_indices(fabric), key=lambda s: (score(s), s))


class RoundRobin:
    """Deterministic round-robin over spines: 1, 2, ..., S, 1, 2, ..."""

    def __init__(self, spines: list[int]):
        if not spines:
            raise ValueError("round-robin needs at least one spine")
        self._spines = list(spines)
        self._next = 0

    def __call__(self) -> int:
        spine = self._spines[self._next % len(self._spines)]
        self._next += 1
        return spine


def label_spines(spines: list[int], usable: list[int]) -> list[int]:
    """The path-label map of policies spray and flowlet: entry k is the spine that
    label k (DSCP value k, one label per spine of ``spines``, in order) crosses.

    Label k belongs to spine ``spines[k]`` while that spine is ``usable``; the labels of
    unusable spines go round robin over the usable ones (in order), so a failure moves
    only the dead spine's labels and spreads them. No usable spine: [] (no route)."""
    if not usable:
        return []
    orphans = 0
    out = []
    for spine in spines:
        if spine in usable:
            out.append(spine)
        else:
            out.append(usable[orphans % len(usable)])
            orphans += 1
    return out
