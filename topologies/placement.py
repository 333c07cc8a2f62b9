"""Which hosts of a fabric a job gets: a pure function of the fabric's shape and the
job's roles (no Mininet, no spec, no job registry).

A job asks for ``servers`` hosts (a PS, an incast receiver; placed first) and
``workers`` hosts (rank order). Leaf-spine: the servers are the first hosts of the
server leaf; workers fill the worker leaves round-robin, each leaf's lowest free host
first (``"spread"`` = every leaf, starting after the server leaf). Star: one switch,
workers ``h1..hN``, servers the last hosts. Host names follow
:mod:`incastlab.topologies.naming`.

Problems come back as text, one per line, naming the spec fields a user writes
(``workload.ps_leaf``, ``workload.worker_leaves``, the job's count field,
``topology.senders``), so the spec shows them as they are.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from incastlab.topologies import naming

__all__ = ["FabricShape", "Placement", "RoleCounts", "fabric_shape", "interfaces", "place",
           "place_jobs", "star_senders"]

class RoleCounts(Protocol):
    """What a job asks of the fabric (``incastlab.jobs.base.Roles`` is one): host counts
    and the nouns its messages use; ``count_field`` is the field setting ``workers``."""

    servers: int
    workers: int
    worker_noun: str
    server_noun: str
    count_field: str


@dataclass(frozen=True)
class FabricShape:
    """The fabric as placement sees it. A star is one leaf (its switch) with no spines;
    ``senders`` is the star's value as the spec gave it (``None``: just enough), kept
    for messages."""

    kind: str
    spines: int
    leaves: int
    hosts_per_leaf: int
    senders: int | None = None

    @property
    def hosts(self) -> int:
        """Number of hosts of the fabric."""
        return self.leaves * self.hosts_per_leaf


@dataclass(frozen=True)
class Placement:
    """Hosts of a workload. ``servers``: PS hosts (ps), the receiver (incast), none (ring).
    ``workers``: worker/ring/sender hosts in rank order.

    One numbering: a process's rank is its torch.distributed rank as every job launches
    it, servers first (``ranks``): a PS job's servers are ranks 0..K-1 and its workers
    K..K+N-1, a ring's ranks are its workers 0..N-1. ``incastlab check``, the spec's
    ``stragglers.rank``, events' ``rank``, the logs, the report and the trace use it."""

    servers: tuple[str, ...]
    workers: tuple[str, ...]

    @property
    def ranks(self) -> tuple[str, ...]:
        """Hosts by rank: index = the process's torch.distributed rank."""
        return tuple(self.servers) + tuple(self.workers)

    @property
    def worker_ranks(self) -> range:
        """The ranks of the workers (after the servers)."""
        return range(len(self.servers), len(self.servers) + len(self.workers))


def star_senders(senders: int | None, roles: RoleCounts) -> int:
    """A star's sending hosts besides the receiver: ``senders`` if given, else just
    enough for the job (at least one)."""
    return senders or max(roles.servers + roles.workers - 1, 1)


def fabric_shape(kind: str, spines: int, leaves: int, hosts_per_leaf: int,
                 senders: int | None, roles: RoleCounts) -> FabricShape:
    """The shape of a ``kind`` fabric from the topology table's values; a star's size
    follows from ``senders`` or the job's ``roles``."""
    if kind == "star":
        return FabricShape("star", 0, 1, star_senders(senders, roles) + 1, senders)
    return FabricShape(kind, spines, leaves, hosts_per_leaf, senders)


def interfaces(shape: FabricShape) -> set[str]:
    """Every interface name of the fabric: hosts' eth0, leaves' host and uplink ports,
    spines' downlinks."""
    leaves, per_leaf, spines = shape.leaves, shape.hosts_per_leaf, shape.spines
    names = {naming.intf_name(f"h{n}", 0) for n in range(1, leaves * per_leaf + 1)}
    for i in range(1, leaves + 1):
        names |= {naming.intf_name(naming.leaf_name(i), port)
                  for port in range(1, per_leaf + spines + 1)}
    for j in range(1, spines + 1):
        names |= {naming.intf_name(naming.spine_name(j), port) for port in range(1, leaves + 1)}
    return names


def place(shape: FabricShape, roles: RoleCounts, server_leaf: int = 1,
          worker_leaves: list[int] | str = "spread") -> tuple[Placement | None, list[str]]:
    """The job's hosts on ``shape``, or ``None`` and every problem (a leaf the fabric
    lacks, too few hosts). ``server_leaf``: the servers' leaf (1-based);
    ``worker_leaves``: leaves the workers fill round-robin, or ``"spread"``."""
    if shape.kind == "star":
        return _place_star(shape, roles, server_leaf, worker_leaves)
    return _place_leafspine(shape, roles, server_leaf, worker_leaves)


def _place_star(shape: FabricShape, roles: RoleCounts, server_leaf: int,
                worker_leaves) -> tuple[Placement | None, list[str]]:
    n_servers, n_workers, per_leaf = roles.servers, roles.workers, shape.hosts_per_leaf
    errors = []
    if server_leaf != 1 and n_servers:
        errors.append(f"workload.ps_leaf: {server_leaf!r} is not a leaf of this fabric "
                      "(a star has leaf 1 only)")
    if worker_leaves not in ("spread", [1]):
        errors.append(f"workload.worker_leaves: {worker_leaves!r} is not \"spread\" or "
                      "[1] (a star has leaf 1 only)")
    if n_servers + n_workers > per_leaf:
        errors.append(f"{roles.count_field}: {n_workers} {roles.worker_noun} + {n_servers} "
                      f"{roles.server_noun} need {n_workers + n_servers} hosts, but "
                      f"topology.senders = {shape.senders} gives {per_leaf}")
    if errors:
        return None, errors
    hosts = [naming.host_name(1, k, per_leaf) for k in range(1, per_leaf + 1)]
    return Placement(tuple(hosts[per_leaf - n_servers:]), tuple(hosts[:n_workers])), []


def _leafspine_problems(shape: FabricShape, roles: RoleCounts, server_leaf: int,
                        worker_leaves) -> list[str]:
    n_servers, n_workers = roles.servers, roles.workers
    leaves, per_leaf = shape.leaves, shape.hosts_per_leaf
    errors = []
    if n_servers and server_leaf > leaves:
        errors.append(f"workload.ps_leaf: {server_leaf!r} is not a leaf of this fabric "
                      f"(1 to {leaves})")
    elif n_servers > per_leaf:
        errors.append(f"workload.shards: {n_servers} PS hosts do not fit on leaf "
                      f"{server_leaf}, which has {per_leaf} hosts")
    if isinstance(worker_leaves, list):
        for leaf in worker_leaves:
            if leaf > leaves:
                errors.append(f"workload.worker_leaves: {leaf!r} is not a leaf of this "
                              f"fabric (1 to {leaves})")
    if n_servers + n_workers > leaves * per_leaf:
        servers_text = f" + {n_servers} {roles.server_noun}" if n_servers else ""
        errors.append(f"{roles.count_field}: {n_workers} {roles.worker_noun}{servers_text} "
                      f"need {n_workers + n_servers} hosts, but the fabric has "
                      f"{leaves * per_leaf} ({leaves} leaves x {per_leaf} hosts)")
    return errors


def _worker_order(leaves: int, n_servers: int, server_leaf: int, worker_leaves) -> list[int]:
    """The leaves workers are dealt to, in order: as given, or every leaf starting after
    the server leaf (from leaf 1 when there are no servers)."""
    if isinstance(worker_leaves, list):
        return list(worker_leaves)
    if n_servers:
        return [(server_leaf + d - 1) % leaves + 1 for d in range(1, leaves + 1)]
    return list(range(1, leaves + 1))


def _place_leafspine(shape: FabricShape, roles: RoleCounts, server_leaf: int,
                     worker_leaves) -> tuple[Placement | None, list[str]]:
    errors = _leafspine_problems(shape, roles, server_leaf, worker_leaves)
    if errors:
        return None, errors
    n_servers, n_workers, per_leaf = roles.servers, roles.workers, shape.hosts_per_leaf
    servers = [(server_leaf, k) for k in range(1, n_servers + 1)]
    order = _worker_order(shape.leaves, n_servers, server_leaf, worker_leaves)
    free = {leaf: [k for k in range(1, per_leaf + 1) if (leaf, k) not in servers]
            for leaf in order}
    workers: list[tuple[int, int]] = []
    while len(workers) < n_workers and any(free.values()):
        for leaf in order:
            if free[leaf] and len(workers) < n_workers:
                workers.append((leaf, free[leaf].pop(0)))
    if len(workers) < n_workers:
        return None, [f"workload.worker_leaves: {n_workers} {roles.worker_noun} do not fit "
                      f"on leaves {', '.join(map(str, order))}, which have {len(workers)} "
                      "free hosts"]

    def name(pos):
        return naming.host_name(pos[0], pos[1], per_leaf)

    return Placement(tuple(map(name, servers)), tuple(map(name, workers))), []


def place_jobs(needs: list[tuple[int, int]], kinds: list[str], shape: tuple[int, int],
               packing: str = "packed") -> tuple[list[Placement] | None, list[str]]:
    """Several jobs on one leaf-spine of ``shape`` (leaves, hosts per leaf): ``needs`` is
    each job's (servers, workers), ``kinds`` its name in messages. ``"packed"``: each job
    on leaves of its own, in order; ``"interleaved"``: host k of every leaf before host
    k + 1, so the jobs share leaves. Returns the placements, or None and the problem (too
    few hosts: what each job needs)."""
    leaves, per_leaf = shape
    need = [s + w for s, w in needs]
    if packing == "interleaved":
        order = [(leaf, k) for k in range(1, per_leaf + 1) for leaf in range(1, leaves + 1)]
        groups, start = [], 0
        for n in need:
            groups.append(order[start:start + n])
            start += n
        short = sum(need) > len(order)
        have = f"{len(order)} ({leaves} leaves x {per_leaf} hosts)"
    else:
        groups, leaf = [], 1
        for n in need:
            span = -(-n // per_leaf)  # whole leaves
            slots = [(lf, k) for lf in range(leaf, leaf + span) for k in range(1, per_leaf + 1)]
            groups.append(slots[:n])
            leaf += span
        short = leaf - 1 > leaves
        have = (f"{leaves} leaves of {per_leaf} hosts, and packed jobs need "
                f"{leaf - 1} leaves (each job on its own)")
    if short:
        each = ", ".join(f"jobs[{i}] ({kind}) needs {n}" for i, (kind, n)
                         in enumerate(zip(kinds, need, strict=True)))
        return None, [f"jobs: the jobs need {sum(need)} hosts ({each}), but the fabric has "
                      f"{have}"]
    out = []
    for (servers, _), slots in zip(needs, groups, strict=True):
        names = [naming.host_name(lf, k, per_leaf) for lf, k in slots]
        out.append(Placement(tuple(names[:servers]), tuple(names[servers:])))
    return out, []
