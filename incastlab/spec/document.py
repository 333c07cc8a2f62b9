"""The Spec: a whole experiment, its tables as attributes, serialised as TOML, its sweep
axes, and the fabric and hosts it asks for."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from incastlab import events as _events
from incastlab.spec import layout
from incastlab.spec.errors import SpecError
from incastlab.spec.schema import (
    FORMAT_VERSION,
    TABLES,
    Capture,
    Routing,
    Run,
    Topology,
    iter_fields,
)
from incastlab.spec.sweeps import count_runs
from incastlab.topologies import naming
from incastlab.topologies.placement import Placement

__all__ = ["Spec"]


@dataclass
class Spec:
    """A whole experiment. Tables are attributes: ``spec.routing.policy``. In a sweep spec
    (before :func:`expand_sweep`) sweepable fields may hold lists."""

    topology: Topology = field(default_factory=Topology)
    routing: Routing = field(default_factory=Routing)
    workload: Any = field(default_factory=lambda: TABLES["workload"]())
    capture: Capture = field(default_factory=Capture)
    run: Run = field(default_factory=Run)
    # [[events]] (incastlab.events): tables as written until validated, then Events
    # sorted by time; not sweepable, every sweep point gets them all
    events: list = field(default_factory=list)
    # [[jobs]] (incastlab.multijob): several jobs on one fabric, each a JobEntry holding
    # its own [workload] table; [] = the one job of [workload]
    jobs: list = field(default_factory=list)
    source: str | None = field(default=None, compare=False, repr=False)

    # -- serialisation --
    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain nested dicts in schema order, ``None`` (= absent) fields left out."""
        out = {}
        for table in TABLES:
            values = dataclasses.asdict(getattr(self, table))
            out[table] = {k: v for k, v in values.items() if v is not None}
        if self.events:
            out["events"] = [_events.as_table(e) for e in self.events]
        if self.jobs:  # [[jobs]] replaces [workload] (both are refused on loading)
            from incastlab import multijob

            del out["workload"]
            out["jobs"] = [multijob.as_table(j) for j in self.jobs]
        return out

    def to_toml(self) -> str:
        """The resolved spec as TOML (the run directory's ``spec.toml``); loading it back
        gives an equal Spec."""
        import tomli_w

        head = (f"# incastlab spec (format {FORMAT_VERSION}), resolved: defaults and "
                "overrides applied\n")
        return head + tomli_w.dumps(self.to_dict())

    # -- sweeps --
    def swept(self) -> dict[str, list]:
        """Sweep axes: dotted field name -> its list of values, in schema order."""
        return {key: value for key, value, meta in iter_fields(self)
                if meta["sweep"] and isinstance(value, list)}

    @property
    def is_sweep(self) -> bool:
        """True when this spec asks for more than one run (list values or repetitions)."""
        return bool(self.swept()) or self.run.repetitions != 1

    def require_single(self) -> None:
        """Refuse a sweep where one run is expected (``incastlab run``)."""
        if not self.is_sweep:
            return
        axes = [f"{k} ({len(v)} values)" for k, v in self.swept().items()]
        if self.run.repetitions != 1:
            axes.append(f"run.repetitions = {self.run.repetitions}")
        runs = count_runs(self)
        raise SpecError([f"this spec is a sweep of {runs} runs over {', '.join(axes)}: "
                         "`incastlab run` does one run; use `incastlab sweep` instead"],
                        self.source)

    # -- topology --
    def topology_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``TOPOS[spec.topology.kind]`` (LeafSpineTopo/StarTopo):
        rates in Mbit/s, queues in packets."""
        self._require_unswept()
        return layout.topology_kwargs(self)

    def _require_unswept(self) -> None:
        if self.swept():
            raise SpecError([f"{', '.join(self.swept())} hold sweep lists: expand the spec "
                             "with expand_sweep() first"], self.source)

    def make_topology(self):
        """Construct the Mininet Topo (a description; nothing runs). Its own checks'
        TopologyError becomes a SpecError naming ``topology.<field>``."""
        self._require_unswept()
        return layout.make_topology(self)

    # -- hosts --
    def placement(self) -> Placement:
        """Which hosts are servers and which are workers (rank order). Leaf–spine: the
        ``shards`` PS hosts (or the incast receiver) are the first hosts of ``ps_leaf``;
        workers fill ``worker_leaves`` round-robin, each leaf's lowest free host first
        (``"spread"`` = every leaf, starting after the PS leaf, for a ring from leaf 1).
        Star: workers are ``h1..hN``, servers the last hosts."""
        self._require_unswept()
        placed, errors = layout.place(self)
        if errors:
            raise SpecError(errors, self.source)
        return placed

    def capture_interfaces(self) -> list[str]:
        """Interfaces to capture on, resolved (``[]`` when capture is disabled)."""
        if not self.capture.enabled:
            return []
        if self.capture.ports != "default":
            return list(self.capture.ports)
        if self.jobs:
            from incastlab import multijob

            return multijob.capture_interfaces(self)
        placed = self.placement()
        names = [naming.intf_name(h, 0) for h in placed.servers + placed.workers]
        if placed.servers:  # every spine's port down to the servers' leaf (a star has none)
            names += [naming.intf_name(naming.spine_name(j),
                                       naming.spine_downlink_port(self.workload.ps_leaf))
                      for j in range(1, layout.fabric_shape(self).spines + 1)]
        return names
