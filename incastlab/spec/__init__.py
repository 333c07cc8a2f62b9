"""Experiment specs: TOML data, validated as a whole before anything touches the system.

A spec has five tables. Every field has a default, so an empty file is a valid spec::

    [topology]  the fabric: kind, sizes, link rates (Mbit/s), queues (packets), TCP
    [routing]   the controller's policy and its timers (seconds)
    [workload]  what runs in the hosts: PS / ring all-reduce / incast benchmark, placement
    [capture]   pcaps (snap length, which interfaces) and the queue sampler
    [run]       limits (seconds), repetitions, seed, output directory

``python -m incastlab.spec`` prints every field with its default and what is allowed.

Load with :func:`load_spec` (a file plus CLI overrides ``table.field=value``, values
parsed as TOML values, falling back to a bare string). Validation collects *every*
problem and raises one :class:`SpecError`, one problem per line, each naming the field,
the value and what is allowed. Checks that depend on this machine take a
``capabilities`` mapping from the runner's preflight (e.g. ``{"netem": False}``); this
package makes no system calls.

Sweeps: a list at a *sweepable* field (``routing.policy = ["single", "ecmp"]``) asks for
one run per value; :func:`expand_sweep` expands the cross product times
``run.repetitions`` into labelled single-run specs (``policy=ecmp,workers=4,rep=1``).
``load_spec`` refuses sweeps unless ``allow_sweep=True`` (``incastlab sweep``).

Placement (which host is the PS, which hosts are workers 0..N-1) is decided once, by
:meth:`Spec.placement`, with :mod:`incastlab.topologies.placement` (a pure function of
the fabric's shape and the job's roles).

Modules: ``schema`` (the tables and their fields), ``document`` (:class:`Spec`),
``loading`` (TOML and overrides), ``validation`` (whole-spec checks), ``sweeps``,
``layout`` (the fabric and the job's hosts on it), ``errors``, ``cli``.
"""
from __future__ import annotations

from incastlab.jobs.base import Roles, Straggler
from incastlab.spec import schema as _schema
from incastlab.spec.cli import main
from incastlab.spec.document import Spec
from incastlab.spec.errors import SpecError
from incastlab.spec.layout import (
    fabric_shape,
    host_count,
    interfaces,
    job_roles,
    leaf_shape,
    make_topology,
    place,
    topology_error,
    topology_kwargs,
)
from incastlab.spec.loading import load_spec, loads_spec, normalized, parse_value
from incastlab.spec.schema import (
    CONGESTION_CONTROLS,
    FORMAT_VERSION,
    MAX_QUEUE_BYTES,
    MAX_SWEEP_RUNS,
    POLICIES,
    POLL_RANGE,
    TABLES,
    TOPOLOGY_KINDS,
    Capture,
    Routing,
    Run,
    Topology,
    WorkloadCommon,
    iter_fields,
    schema_rows,
    set_field,
)
from incastlab.spec.sweeps import count_runs, expand_sweep, label_value, sweep_points
from incastlab.spec.validation import event_scene, problems, validate
from incastlab.topologies.placement import FabricShape, Placement

__all__ = [
    "CONGESTION_CONTROLS", "FORMAT_VERSION", "MAX_QUEUE_BYTES", "MAX_SWEEP_RUNS",
    "POLICIES", "POLL_RANGE", "SWEEPABLE", "TABLES", "TOPOLOGY_KINDS",
    "Capture", "FabricShape", "Placement", "Roles", "Routing", "Run", "Spec", "SpecError",
    "Straggler", "Topology", "Workload", "WorkloadCommon",
    "count_runs", "event_scene", "expand_sweep", "fabric_shape", "host_count",
    "interfaces", "iter_fields", "job_roles", "label_value", "leaf_shape", "load_spec",
    "loads_spec", "main", "make_topology", "normalized", "parse_value", "place",
    "problems", "schema_rows", "set_field", "sweep_points", "topology_error",
    "topology_kwargs", "validate",
]


def __getattr__(name: str):
    # rebuilt whenever a job kind is registered or removed (incastlab.jobs.on_change):
    # read them from the schema at each access, never a copy taken at import
    if name in ("Workload", "SWEEPABLE"):
        return getattr(_schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
