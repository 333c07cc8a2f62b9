"""``[[events]]`` as data: what an event is, what it may name, the action registry with
what an action's apply and undo may use (:class:`EventContext`), and the checks of a
spec's events (against the fabric's names and the job's placement), before anything is
touched. The public face is :mod:`incastlab.events`.

No Mininet import here: the spec validates events without root.
"""
from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from incastlab.fields import did_you_mean, int_check, num_check
from incastlab.topologies import naming

__all__ = ["ACTION_MODULES", "COMMON_FIELDS", "MAX_AT_S", "Action", "Apply", "Event",
           "EventContext", "Process", "Scene", "Undo", "Validator", "actions", "as_table",
           "describe", "event_problems", "normalized", "register_action", "scene_problems",
           "schema_rows", "sort_key", "unregister_action"]

# Modules that register actions when imported (one line per module; H8: host events).
ACTION_MODULES = ["incastlab.netevents", "incastlab.hostevents"]
COMMON_FIELDS = ("at_s", "at_iteration", "action", "duration_s")
MAX_AT_S = 86_400.0

_at_s_check = num_check(0, MAX_AT_S, unit="s")
_at_iteration_check = int_check(1, 10**9)
_duration_check = num_check(0, MAX_AT_S, low_open=True, unit="s")


# --- what an event is ----------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    """One ``[[events]]`` entry, validated. ``index``: its position in the spec as
    written (0-based; messages say ``events[index]``). ``params``: the action's own
    fields as written (e.g. ``{"link": ["lf2", "sp1"]}``)."""

    action: str
    at_s: float | None = None
    at_iteration: int | None = None
    duration_s: float | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    index: int = field(default=0, compare=False)

    def __getitem__(self, name: str):
        return self.params[name]

    def get(self, name: str, default=None):
        return self.params.get(name, default)

    @property
    def when(self) -> str:
        """``at 4 s`` or ``at iteration 10``."""
        return f"at {self.at_s:g} s" if self.at_s is not None \
            else f"at iteration {self.at_iteration}"

    def to_dict(self) -> dict[str, Any]:
        """The TOML table (absent fields left out), common fields first."""
        out: dict[str, Any] = {}
        for name in ("at_s", "at_iteration"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        out["action"] = self.action
        if self.duration_s is not None:
            out["duration_s"] = self.duration_s
        out.update(self.params)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], index: int = 0) -> Event:
        """An Event from a table already checked by :func:`event_problems`."""
        params = {k: v for k, v in raw.items() if k not in COMMON_FIELDS}
        at_s, dur = raw.get("at_s"), raw.get("duration_s")
        return cls(action=raw["action"], at_s=None if at_s is None else float(at_s),
                   at_iteration=raw.get("at_iteration"),
                   duration_s=None if dur is None else float(dur), params=params,
                   index=index)


@dataclass(frozen=True)
class Scene:
    """What an event may name, from the spec alone (no Mininet): the fabric's hosts,
    switches (name -> "spine"/"leaf") and links (``link_names``: sorted node pair ->
    (interface of the first node, interface of the second)), and the job's placement
    (servers, workers in rank order; empty when unknown), its expected progress
    (``iterations``: progress events a counting process logs; None when unknown) and
    its ``[workload]`` table (``workload``; None when unknown)."""

    hosts: tuple[str, ...]
    switches: Mapping[str, str]
    links: Mapping[tuple[str, str], tuple[str, str]]
    servers: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()
    kind: str | None = None
    iterations: int | None = None
    workload: Any = None

    @classmethod
    def of_shape(cls, spines: int, leaves: int, hosts_per_leaf: int, **job) -> Scene:
        """The names of a leaf-spine (a star: 1 leaf, 0 spines), as naming.py fixes
        them: hosts h1.., leaves lf1.., spines sp1..; host k of leaf i on leaf port k,
        leaf i's uplink to spine j on port H + j, spine j's port i to leaf i."""
        hosts, switches, links = [], {}, {}
        for j in range(1, spines + 1):
            switches[naming.spine_name(j)] = "spine"
        for i in range(1, leaves + 1):
            leaf = naming.leaf_name(i)
            switches[leaf] = "leaf"
            for k in range(1, hosts_per_leaf + 1):
                host = naming.host_name(i, k, hosts_per_leaf)
                hosts.append(host)
                links[_pair(host, leaf)] = _ends(host, naming.intf_name(host, 0),
                                                 leaf, naming.intf_name(leaf, k))
            for j in range(1, spines + 1):
                spine = naming.spine_name(j)
                links[_pair(leaf, spine)] = _ends(
                    leaf, naming.intf_name(leaf, naming.leaf_uplink_port(j, hosts_per_leaf)),
                    spine, naming.intf_name(spine, naming.spine_downlink_port(i)))
        return cls(tuple(hosts), switches, links, **job)

    def link_of(self, value) -> tuple[tuple[str, str] | None, str | None]:
        """(sorted node pair, None) for a link given as an interface name (either end,
        ``lf1-eth3``) or as two node names (``["lf1", "sp2"]``, any order); else (None,
        the problem, naming the value and what is allowed)."""
        allowed = ("an interface like lf1-eth3 or h1-eth0, or two linked nodes like "
                   "[\"lf1\", \"sp2\"]")
        if isinstance(value, str):
            for pair, ends in self.links.items():
                if value in ends:
                    return pair, None
            ifaces = [i for ends in self.links.values() for i in ends]
            return None, (f"{value!r} is not an interface of this fabric"
                          f"{did_you_mean(value, ifaces)}; give {allowed}")
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str)
                                                               for v in value):
            unknown = [v for v in value if v not in self.hosts and v not in self.switches]
            if unknown:
                return None, (f"{unknown[0]!r} is not a node of this fabric"
                              f"{did_you_mean(unknown[0], [*self.hosts, *self.switches])}")
            pair = _pair(*value)
            if pair not in self.links:
                return None, f"{value!r}: {value[0]} and {value[1]} are not linked"
            return pair, None
        return None, f"{value!r} is not {allowed}"


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def _ends(a: str, ia: str, b: str, ib: str) -> tuple[str, str]:
    return (ia, ib) if a <= b else (ib, ia)


# --- the registry --------------------------------------------------------------------------

Validator = Callable[[Event, Scene], list]
Apply = Callable[["EventContext", Event], "dict | None"]
Undo = Callable[["EventContext", Event], "dict | None"]


@dataclass(frozen=True)
class Action:
    """A registered action. ``fields``: its own field names -> one line of doc.
    ``target``: what the event changes and whether it starts or ends a state
    (``(("link", "lf1|sp2"), "start")``), for the overlap check; None when it toggles
    nothing. ``undo`` None: nothing to restore (and ``duration_s`` is refused)."""

    name: str
    validate: Validator
    apply: Apply
    undo: Undo | None
    fields: Mapping[str, str]
    doc: str
    target: Callable[[Event, Scene], "tuple[tuple[str, str], str] | None"] | None


_ACTIONS: dict[str, Action] = {}
_loaded = False


def register_action(name: str, fields_validator: Validator, apply: Apply,
                    undo: Undo | None, *, fields: Mapping[str, str] | None = None,
                    doc: str = "", target=None) -> Action:
    """Register action ``name`` (new names only).

    fields_validator(event, scene) -> list of problems, each ``"<field>: <message>"``
        (the framework prefixes ``events[i].``); ``event.params`` hold the action's own
        fields as written, ``scene`` (:class:`Scene`) the fabric's names and the job's
        placement. Called for every sweep point, before anything is touched.
    apply(ctx, event) -> dict or None: do it now; the dict (JSON-able) is recorded in
        events.jsonl as ``result``. Raise to fail: the error is recorded and the run
        fails with it.
    undo(ctx, event) -> dict or None: restore the normal state; idempotent, called
        after ``duration_s`` and at teardown for every started event. None: nothing to
        restore.
    fields: the action's own field names -> one line of doc (others are refused).
    target(event, scene) -> ((kind, name), "start" | "end") or None: for the check
        that a state is not started twice or ended before it started on one target.
    """
    if name in _ACTIONS:
        raise ValueError(f"event action {name!r} is registered already")
    action = Action(name, fields_validator, apply, undo, dict(fields or {}), doc, target)
    _ACTIONS[name] = action
    return action


def unregister_action(name: str) -> None:
    """Remove an action (tests that register their own)."""
    _ACTIONS.pop(name)


def actions() -> dict[str, Action]:
    """Every registered action by name (importing ACTION_MODULES the first time)."""
    global _loaded
    if not _loaded:
        _loaded = True
        for module in ACTION_MODULES:
            importlib.import_module(module)
    return _ACTIONS


# --- what an action may use ---------------------------------------------------------------

@dataclass(frozen=True)
class Process:
    """One launched process of the job: its host, rank, role and Popen."""

    host: str
    rank: int
    role: str
    popen: Any


@dataclass
class EventContext:
    """What an action's apply/undo may use.

    fabric: the running :class:`incastlab.fabric.Fabric` (``fabric.state`` records
        what clean-up must find after a crash; ``fabric.popen`` starts a process in a
        host). net: its Mininet net (``net["h3"].pid`` is the host's shell, whose
        namespaces are the host's). fmap: the :class:`FabricMap` (interfaces, ports,
        DPIDs). run_dir: the run directory. processes: the job's launched processes
        (:class:`Process`: host, rank, role, popen). log: a logger ("incastlab.events").
        spec: the run's Spec; scene: its :class:`Scene` (placement: a worker's rank ->
        ``scene.workers[rank]``). killed: launch rank -> why, for processes an action
        ended on purpose (the runner's wait loop reads it).
    Actions that keep state between apply and undo use ``ctx.store``, a dict per
    event index (``ctx.store_for(event)``).
    """

    fabric: Any
    net: Any
    fmap: Any
    run_dir: Path
    processes: list[Process] = field(default_factory=list)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("incastlab.events"))
    store: dict[int, dict] = field(default_factory=dict)
    spec: Any = None
    scene: Scene | None = None
    killed: dict[int, str] = field(default_factory=dict)

    def on_host(self, host: str) -> list[Process]:
        return [p for p in self.processes if p.host == host]

    def with_role(self, role: str) -> list[Process]:
        return [p for p in self.processes if p.role == role]

    def store_for(self, event: Event) -> dict:
        return self.store.setdefault(event.index, {})


# --- validation ----------------------------------------------------------------------------

def as_table(item) -> Any:
    """An Event back as its table; anything else unchanged."""
    return item.to_dict() if isinstance(item, Event) else item


def event_problems(raw) -> list[str]:
    """Problems of ``[[events]]`` that need no fabric: each entry a table, its time
    (at_s xor at_iteration), a known action, only that action's fields, duration_s
    only where the action can be undone. Each names ``events[i].field``."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        return [f"events: {raw!r} is not an array of tables; write each event as "
                "[[events]]"]
    errors: list[str] = []
    registry = actions()
    for i, item in enumerate(map(as_table, raw)):
        where = f"events[{i}]"
        if not isinstance(item, dict):
            errors.append(f"{where}: {item!r} is not a table; write each event as [[events]]")
            continue
        has_s, has_it = "at_s" in item, "at_iteration" in item
        if has_s and has_it:
            errors.append(f"{where}.at_s: given together with {where}.at_iteration = "
                          f"{item['at_iteration']!r}; give one, not both")
        elif not has_s and not has_it:
            errors.append(f"{where}: missing at_s (seconds since the workload started) or "
                          "at_iteration (the job's progress count); give one")
        for name, check in (("at_s", _at_s_check), ("at_iteration", _at_iteration_check),
                            ("duration_s", _duration_check)):
            if name in item and check(item[name]):
                errors.append(f"{where}.{name}: {check(item[name])}")
        name = item.get("action")
        if name is None:
            errors.append(f"{where}.action: missing; allowed: {', '.join(registry)}")
            continue
        if not isinstance(name, str) or name not in registry:
            hint = did_you_mean(name, registry) if isinstance(name, str) else ""
            errors.append(f"{where}.action: {name!r} is not one of {', '.join(registry)}"
                          f"{hint}")
            continue
        action = registry[name]
        allowed = [*COMMON_FIELDS, *action.fields]
        for key in item:
            if key not in allowed:
                errors.append(f"{where}.{key}: unknown field{did_you_mean(key, allowed)}; "
                              f"{name} has {', '.join(allowed)}")
        if "duration_s" in item and action.undo is None:
            errors.append(f"{where}.duration_s: {name} cannot be undone, so it takes no "
                          "duration_s")
    return errors


def scene_problems(raw: list, scene: Scene) -> list[str]:
    """Problems of (already table-valid) events on one fabric and placement: the
    action's own checks (names refused against the topology), iterations the job never
    reaches, and overlaps per target (a link taken down twice, brought up while up,
    or an event during a state that a ``duration_s`` still holds)."""
    errors: list[str] = []
    registry = actions()
    events = [Event.from_dict(as_table(item), i) for i, item in enumerate(raw)]
    for ev in events:
        for problem in registry[ev.action].validate(ev, scene):
            errors.append(f"events[{ev.index}].{problem}")
        if ev.at_iteration is not None and scene.iterations is not None \
                and ev.at_iteration > scene.iterations:
            errors.append(f"events[{ev.index}].at_iteration: {ev.at_iteration} is beyond the "
                          f"job's {scene.iterations} steps; the event would never happen")
    if errors:
        return errors
    return _overlaps(events, scene, registry)


def _overlaps(events: list[Event], scene: Scene, registry) -> list[str]:
    """Per target: the events in time order must start and end its state in turn.
    The two clocks (seconds, iterations) cannot be ordered against each other, so one
    target's events must all use one clock."""
    per_target: dict[tuple[str, str], list[tuple[Event, str]]] = {}
    for ev in events:
        target = registry[ev.action].target
        hit = target(ev, scene) if target else None
        if hit:
            per_target.setdefault(hit[0], []).append((ev, hit[1]))
    errors = []
    for (kind, name), items in per_target.items():
        clocks = {ev.at_s is None for ev, _ in items}
        if len(clocks) > 1:
            first = items[0][0]
            errors.append(f"events[{first.index}]: the events on {kind} {name} mix at_s and "
                          "at_iteration, which cannot be ordered against each other; use "
                          "one clock per target")
            continue
        held_until: float | None = None   # a started state and, with duration_s, its end
        active: Event | None = None
        for ev, role in sorted(items, key=lambda x: sort_key(x[0])):
            t = ev.at_s if ev.at_s is not None else float(ev.at_iteration)
            if active is not None and held_until is not None and t >= held_until:
                active, held_until = None, None  # its duration ended before this event
            if role == "start":
                if active is not None:
                    until = (f" (its duration_s lasts until {held_until:g} s)"
                             if held_until is not None else "")
                    errors.append(f"events[{ev.index}].action: {ev.action} {ev.when} on "
                                  f"{kind} {name}, which events[{active.index}] "
                                  f"({active.action} {active.when}) already holds{until}")
                    continue
                active = ev
                if ev.duration_s is not None:
                    if ev.at_s is None:
                        held_until = float("inf")  # ends at an unknown iteration
                    else:
                        held_until = ev.at_s + ev.duration_s
            else:
                if active is None:
                    errors.append(f"events[{ev.index}].action: {ev.action} {ev.when} on "
                                  f"{kind} {name}, which no earlier event changed")
                    continue
                if held_until is not None:
                    errors.append(f"events[{ev.index}].action: {ev.action} {ev.when} on "
                                  f"{kind} {name} while events[{active.index}]'s duration_s "
                                  "still holds it; give the duration_s or this event, "
                                  "not both")
                    continue
                active = None
    return errors


def sort_key(ev: Event) -> tuple[int, float, int]:
    """Seconds first, then iterations; each in time order, ties in spec order."""
    if ev.at_s is not None:
        return (0, ev.at_s, ev.index)
    return (1, float(ev.at_iteration), ev.index)


def normalized(raw: Iterable) -> list[Event]:
    """Valid event tables as Events, sorted by time (:func:`sort_key`); each keeps its
    index in the spec as written."""
    events = [item if isinstance(item, Event) else Event.from_dict(item, i)
              for i, item in enumerate(raw)]
    return sorted(events, key=sort_key)


def describe(events: Iterable[Event]) -> list[str]:
    """One line per event, for ``incastlab check``: when, what, on what."""
    lines = []
    for ev in events:
        args = ", ".join(f"{k} = {json.dumps(v)}" for k, v in ev.params.items())
        dur = f", undone after {ev.duration_s:g} s" if ev.duration_s is not None else ""
        lines.append(f"{ev.when}: {ev.action}({args}){dur}")
    return lines


def schema_rows() -> list[tuple[str, str, str, str]]:
    """(field, default, allowed, doc) of ``[[events]]``: the common fields, then each
    action's own (for ``python -m incastlab.spec``)."""
    registry = actions()
    rows = [("events[].at_s", "(absent)", f"from 0 to {MAX_AT_S:g} (s)",
             "when: seconds since the workload started (or at_iteration)"),
            ("events[].at_iteration", "(absent)", ">= 1",
             "when: the first time any counting process has logged this many steps"),
            ("events[].action", "(required)", ", ".join(registry),
             "; ".join(f"{a.name}: {a.doc}" for a in registry.values())),
            ("events[].duration_s", "(absent)", "> 0 (s)",
             "undo the action this long after it happened (actions that can be undone)")]
    owners: dict[str, tuple[list[str], str]] = {}
    for action in registry.values():
        for name, doc in action.fields.items():
            owners.setdefault(name, ([], doc))[0].append(action.name)
    for name, (names, doc) in owners.items():
        rows.append((f"events[].{name}", "(absent)", f"[{', '.join(names)}]", doc))
    return rows
