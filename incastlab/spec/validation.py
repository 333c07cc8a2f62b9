"""Whole-spec validation: every field's own check, then the checks that involve several
fields, per sweep point (a problem shared by every point is said once). Every problem
is collected; :func:`validate` raises one SpecError listing them. Checks that depend on
this machine read a ``capabilities`` mapping from the runner's preflight (e.g.
``{"netem": False}``); no system calls are made here.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from incastlab import events as _events
from incastlab import jobs, pathlabel
from incastlab.controller import registry as controller_registry
from incastlab.jobs.base import Straggler
from incastlab.spec import layout, schema
from incastlab.spec.errors import SpecError
from incastlab.spec.schema import ECN_OFF, MAX_SWEEP_RUNS, POLICIES, Topology, iter_fields
from incastlab.spec.sweeps import count_runs, sweep_points
from incastlab.topologies import fabricmap
from incastlab.topologies.placement import Placement

if TYPE_CHECKING:
    from incastlab.spec.document import Spec

__all__ = ["event_scene", "problems", "validate"]


def validate(spec: Spec, capabilities: Mapping[str, Any] | Any | None = None) -> None:
    """Check the whole spec (every sweep point too); raise SpecError listing every problem.

    capabilities: ``{"netem": False, ...}`` or the preflight's Capabilities; ``None``
    skips machine-dependent checks. No system calls are made.
    """
    errors = problems(spec, capabilities)
    if errors:
        raise SpecError(errors, spec.source)


def _caps(capabilities) -> dict[str, Any]:
    if capabilities is None:
        return {}
    if hasattr(capabilities, "as_dict"):
        return capabilities.as_dict()
    return dict(capabilities)


def _value_problems(key: str, value, meta) -> list[str]:
    """One field's own check; a sweep list is checked value by value."""
    check = meta["check"]
    if key == "workload.stragglers" and isinstance(value, list):
        value = [dataclasses.asdict(v) if isinstance(v, Straggler) else v for v in value]
    found = []
    if isinstance(value, list) and meta["sweep"]:
        if not value:
            found.append(f"{key}: [] is an empty sweep; give at least one value")
        for v in value:
            problem = check(v)
            if problem:
                found.append(f"{key}: {problem}")
        seen = set()  # not value.count(v) per value: a long list would take its square
        for v in value:
            if isinstance(v, (str, int, float)):
                if v in seen:
                    found.append(f"{key}: {value!r} lists {v!r} more than once")
                    break
                seen.add(v)
    elif isinstance(value, list) and not meta["list_valued"]:
        found.append(f"{key}: {value!r} is a list, but {key} cannot be swept; "
                     f"sweepable fields are {', '.join(schema.SWEEPABLE)}")
    else:
        problem = check(value)
        for line in problem.split("\n") if problem else ():
            # "[0].rank: ..." and ": ..." continue the key (workload.stragglers[0].rank)
            joined = re.match(r"\[\d+\][.:]|:", line)
            found.append(f"{key}{line}" if joined else f"{key}: {line}")
    return found


def problems(spec: Spec, capabilities) -> list[str]:
    """Every problem of ``spec`` (each naming its field), in the order :func:`validate`
    reports them; ``[]`` when it is valid."""
    errors: list[str] = []
    bad: set[str] = set()
    for key, value, meta in iter_fields(spec):
        found = _value_problems(key, value, meta)
        if found:
            bad.add(key)
            errors += found
    found = _events.event_problems(spec.events)
    if found:
        bad.add("events")
        errors += found
    if "run.repetitions" not in bad:
        runs = count_runs(spec)
        if runs > MAX_SWEEP_RUNS:
            errors.append(f"run.repetitions: the sweep expands to {runs} runs, more than "
                          f"{MAX_SWEEP_RUNS}")
            return errors
    # Cross-field checks, per sweep point (bad axes are not expanded: checks that need a
    # bad field skip it); a problem shared by every point is said once.
    caps = _caps(capabilities)
    seen: dict[str, list[str]] = {}
    points = list(sweep_points(spec, skip=bad))
    for label, point in points:
        for problem in _point_problems(point, caps, bad):
            seen.setdefault(problem, []).append(label)
    for problem, labels in seen.items():
        if len(points) > 1 and len(labels) < len(points):
            problem += f" (sweep point {'; '.join(labels)})"
        errors.append(problem)
    return errors


def _send_buffer_problems(p: Spec, caps: dict[str, Any]) -> list[str]:
    """The userspace datapath's queues must fit Open vSwitch's send buffer
    (incastlab.ovs_buffer); a topology that does not build is reported elsewhere."""
    from incastlab import ovs_buffer
    try:
        need = ovs_buffer.topology_required_bytes(p.make_topology())
    except SpecError:
        return []
    t = p.topology
    limit = (f"topology.queue_bytes = {t.queue_bytes!r}" if t.queue_bytes is not None
             else f"topology.queue_packets = {t.queue_packets!r}")
    problem = ovs_buffer.shortfall(caps["ovs_send_buffer"], caps.get("ovs_send_buffer_source")
                                   or "net.core.wmem_default", need,
                                   f"{limit}: this fabric's switch queues")
    return [problem] if problem else []


_TOPOLOGY_KEYS = tuple(f"topology.{f.name}" for f in dataclasses.fields(Topology))


def _point_problems(p: Spec, caps: dict[str, Any], bad: set[str]) -> list[str]:
    """Problems that involve more than one field, for one single-valued spec."""

    def ok(*keys: str) -> bool:
        return not any(k in bad for k in keys)

    errors = _topology_problems(p.topology, caps, ok)
    # the fabric is built to count its queues: only from fields that passed their checks
    # (a star's hosts come from the workload)
    if caps.get("ovs_send_buffer") is not None and not any(
            k.startswith(("topology.", "workload.")) for k in bad):
        errors += _send_buffer_problems(p, caps)
    errors += _routing_problems(p.routing, p.topology, ok)
    if p.jobs:  # the jobs' own tables were checked on loading; here: do they fit
        from incastlab import multijob

        # the fabric's shape reads every [topology] field (and a star's size [workload]'s)
        if not ok(*_TOPOLOGY_KEYS) or any(k.startswith("workload.") for k in bad):
            return errors
        return errors + multijob.problems(p, layout.leaf_shape(p))
    if not ok("workload.kind"):
        return errors
    return _workload_problems(p, ok, errors)


def _topology_problems(t, caps: dict[str, Any], ok: Callable[..., bool]) -> list[str]:
    """[topology] fields that contradict each other or this machine."""
    errors: list[str] = []
    if ok("topology.fabric_bw_mbps", "topology.oversubscription") and \
            t.fabric_bw_mbps is not None and t.oversubscription is not None:
        errors.append(f"topology.oversubscription: {t.oversubscription!r} given together with "
                      f"topology.fabric_bw_mbps = {t.fabric_bw_mbps!r}; give one, not both")
    if ok("topology.queue_packets", "topology.queue_bytes") and t.queue_bytes is not None:
        if t.queue_packets is not None:
            errors.append(f"topology.queue_bytes, topology.queue_packets: {t.queue_bytes!r} "
                          f"bytes and {t.queue_packets!r} packets; a switch queue has one "
                          "limit: give one of them, not both")
        elif ok("topology.mtu") and t.queue_bytes < fabricmap.frame_bytes(t.mtu):
            errors.append(f"topology.queue_bytes: {t.queue_bytes!r} holds no frame of "
                          f"{fabricmap.frame_bytes(t.mtu)} bytes (topology.mtu = {t.mtu} "
                          "+ 14): give at least that")
        if t.delay and ok("topology.delay"):
            errors.append(f"topology.queue_bytes: {t.queue_bytes!r} given with topology.delay "
                          f"= {t.delay!r}; netem's queue limit counts packets, so a delay "
                          "needs topology.queue_packets")
    errors += _ecn_problems(t, ok)
    if t.delay and ok("topology.delay") and caps.get("netem") is False:
        errors.append(f"topology.delay: {t.delay!r} needs netem (sch_netem), which this "
                      "kernel does not have; leave topology.delay out here")
    return errors


def _ecn_problems(t, ok: Callable[..., bool]) -> list[str]:
    """An ECN threshold in the queue's own unit, below its limit (incastlab.ecn)."""
    keys = ("topology.ecn_threshold_packets", "topology.ecn_threshold_bytes",
            "topology.queue_packets", "topology.queue_bytes")
    if not ok(*keys):
        return []
    packets, nbytes = (None if v == ECN_OFF else v
                       for v in (t.ecn_threshold_packets, t.ecn_threshold_bytes))
    if packets is not None and nbytes is not None:
        return [f"topology.ecn_threshold_packets, topology.ecn_threshold_bytes: {packets!r} "
                f"packets and {nbytes!r} bytes; give one, in the unit of the queue's limit"]
    for k, unit, limit, limit_key, other in (
            (packets, "packets", t.queue_packets, "queue_packets", "ecn_threshold_bytes"),
            (nbytes, "bytes", t.queue_bytes, "queue_bytes", "ecn_threshold_packets")):
        if k is None:
            continue
        if limit is None:
            return [f"topology.ecn_threshold_{unit}: {k!r} {unit}, but the switch queues "
                    f"count {'bytes' if unit == 'packets' else 'packets'}: give "
                    f"topology.{other} instead (the queue's unit)"]
        if k >= limit:
            return [f"topology.ecn_threshold_{unit}: {k!r} is not below topology.{limit_key} "
                    f"= {limit!r}: a queue never holds more than that, so nothing would be "
                    f"marked; give 0 to {limit - 1}"]
    return []


def _routing_problems(r, t, ok: Callable[..., bool]) -> list[str]:
    """[routing] fields against the policy and the fabric."""
    errors: list[str] = []
    if r.policy in POLICIES and ok("routing.poll_interval_s"):
        low, high = controller_registry.POLICIES[r.policy].poll_range
        if not low <= r.poll_interval_s <= high:
            errors.append(f"routing.poll_interval_s: {r.poll_interval_s!r} is not from {low} "
                          f"to {high} (s), as policy {r.policy} needs")
    if r.policy == "single" and t.kind == "leafspine" and ok("routing.spine", "topology.spines") \
            and r.spine > t.spines:
        errors.append(f"routing.spine: {r.spine!r} is not a spine of this fabric "
                      f"(1 to {t.spines})")
    labels = controller_registry.POLICIES[r.policy].host_labels if r.policy in POLICIES \
        else None
    if labels and t.kind == "leafspine" and ok("topology.spines") \
            and t.spines > pathlabel.MAX_LABELS:
        errors.append(f"topology.spines: {t.spines!r} spines, but policy {r.policy} labels "
                      f"paths in the 6 DSCP bits: at most {pathlabel.MAX_LABELS} spines")
    if r.policy in POLICIES and controller_registry.POLICIES[r.policy].user_apps \
            and ok("routing.app") and not r.app:
        errors.append(f"routing.app: missing; policy {r.policy} needs at least one app, a .py "
                      "file or a module name")
    return errors


def _workload_problems(p: Spec, ok: Callable[..., bool], errors: list[str]) -> list[str]:
    """``errors`` (the problems found so far), then the job's own cross-field checks,
    its hosts on the fabric, the fabric itself and the events against them."""
    job = jobs.JOBS[p.workload.kind]
    errors = errors + job.check(p.workload, ok)
    place_keys = ["workload.ps_leaf", "workload.worker_leaves",
                  *(f"workload.{name}" for name in job.host_count_fields)]
    if not ok(*_TOPOLOGY_KEYS) or any(e.startswith("topology.") for e in errors):
        return errors
    if not ok(*place_keys):
        # A star's size follows from the workload; a leaf-spine's does not.
        return errors if p.topology.kind == "star" else errors + _fabric_problems(p, ok)
    placed, place_errors = layout.place(p)
    if place_errors:
        return errors + place_errors
    errors += _fabric_problems(p, ok)
    # the scene reads the whole [workload] table (its progress count, its timeout, ...)
    if p.events and ok("events", *(f"workload.{f.name}" for f in dataclasses.fields(
            p.workload))) and not errors:
        errors += _events.scene_problems(p.events, event_scene(p, placed))
    return errors


def event_scene(p: Spec, placed: Placement | None = None) -> _events.Scene:
    """What [[events]] may name on this (single-valued) spec's fabric and placement."""
    if placed is None:
        placed = p.placement()
    shape = layout.fabric_shape(p)
    try:
        iterations = jobs.JOBS[p.workload.kind].expected_progress(p.workload)
    except (TypeError, ValueError, AttributeError):
        iterations = None
    return _events.Scene.of_shape(shape.spines, shape.leaves, shape.hosts_per_leaf,
                                  servers=placed.servers, workers=placed.workers,
                                  kind=p.workload.kind, iterations=iterations,
                                  workload=p.workload)


def _fabric_problems(p: Spec, ok: Callable[..., bool]) -> list[str]:
    """The topology's own validation, then the capture interfaces against the fabric."""
    try:
        layout.make_topology(p)
    except SpecError as exc:
        return exc.errors
    except ImportError:  # no Mininet library here: our own checks must do
        pass
    errors = []
    if p.capture.ports != "default" and ok("capture.ports"):
        known = layout.interfaces(p)
        for name in p.capture.ports:
            if name not in known:
                errors.append(f"capture.ports: {name!r} is not an interface of this fabric "
                              f"(hosts h1-eth0..h{layout.host_count(p)}-eth0; see fabric.json)")
    return errors
