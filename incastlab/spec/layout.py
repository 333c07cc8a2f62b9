"""The fabric a spec asks for: the Topo's keyword arguments (and the Topo itself, whose
own checks become spec errors), the fabric's shape and interfaces, and where the job's
hosts go (:mod:`incastlab.topologies.placement`, given the job's roles from the
registry). Nothing here imports Mininet until a Topo is built.
"""
from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

from incastlab import jobs
from incastlab.spec.errors import SpecError
from incastlab.spec.schema import Topology
from incastlab.topologies import fabricmap
from incastlab.topologies import placement as _placement
from incastlab.topologies.placement import FabricShape, Placement

if TYPE_CHECKING:
    from incastlab.jobs.base import Roles
    from incastlab.spec.document import Spec

__all__ = ["fabric_shape", "host_count", "interfaces", "job_roles", "leaf_shape",
           "make_topology", "place", "topology_error", "topology_kwargs"]


def job_roles(p: Spec) -> Roles:
    """Host counts and nouns of the spec's job (``incastlab.jobs``)."""
    return jobs.JOBS[p.workload.kind].roles(p.workload)


def fabric_shape(p: Spec) -> FabricShape:
    """The shape of the spec's fabric (a star's size follows from its job)."""
    t = p.topology
    return _placement.fabric_shape(t.kind, t.spines, t.leaves, t.hosts_per_leaf, t.senders,
                                   job_roles(p))


def leaf_shape(p: Spec) -> tuple[int, int]:
    """(leaves, hosts per leaf) of the fabric."""
    shape = fabric_shape(p)
    return shape.leaves, shape.hosts_per_leaf


def host_count(p: Spec) -> int:
    """Number of hosts of the spec's fabric."""
    return fabric_shape(p).hosts


def interfaces(p: Spec) -> set[str]:
    """Every interface name of the spec's fabric."""
    return _placement.interfaces(fabric_shape(p))


def place(p: Spec) -> tuple[Placement | None, list[str]]:
    """The job's hosts on the spec's fabric, or ``None`` and every problem."""
    w = p.workload
    return _placement.place(fabric_shape(p), job_roles(p), w.ps_leaf, w.worker_leaves)


def topology_kwargs(p: Spec) -> dict[str, Any]:
    """Keyword arguments for ``TOPOS[spec.topology.kind]``: rates in Mbit/s, queues in
    packets (bytes with ``queue_bytes``)."""
    t = p.topology
    # mtu and queue_bytes only when asked for: a default spec builds the Topo exactly as
    # before they existed (queue_packets None = the Topo's default, given queue_bytes)
    extra = {"queue_bytes": t.queue_bytes} if t.queue_bytes is not None else {}
    if t.mtu != fabricmap.DEFAULT_MTU:
        extra["mtu"] = t.mtu
    if t.kind == "star":
        return {"senders": _placement.star_senders(t.senders, job_roles(p)),
                "host_bw": t.host_bw_mbps, "queue_packets": t.queue_packets,
                "delay": t.delay, **extra}
    return {"spines": t.spines, "leaves": t.leaves, "hosts_per_leaf": t.hosts_per_leaf,
            "host_bw": t.host_bw_mbps, "fabric_bw": t.fabric_bw_mbps,
            "oversubscription": t.oversubscription, "queue_packets": t.queue_packets,
            "delay": t.delay, **extra}


def make_topology(p: Spec):
    """The Mininet Topo of the spec (a description; nothing runs); its TopologyError
    becomes a SpecError naming ``topology.<field>``."""
    from incastlab.topologies.leafspine import TOPOS, TopologyError

    try:
        return TOPOS[p.topology.kind](**topology_kwargs(p))
    except TopologyError as exc:
        raise SpecError([topology_error(str(exc))], p.source) from None


_TOPO_FIELD = {"host_bw": "host_bw_mbps", "fabric_bw": "fabric_bw_mbps", "give": "oversubscription"}


def topology_error(message: str) -> str:
    """``topology.<field>: <message>`` for a TopologyError, whose message starts with the
    name of the Topo parameter."""
    first = re.match(r"\w+", message)
    word = first.group(0) if first else ""
    name = _TOPO_FIELD.get(word, word)
    if name not in {f.name for f in dataclasses.fields(Topology)}:
        return f"topology: {message}"
    return f"topology.{name}: {message}"
