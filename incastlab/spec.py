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
module makes no system calls.

Sweeps: a list at a *sweepable* field (``routing.policy = ["single", "ecmp"]``) asks for
one run per value; :func:`expand_sweep` expands the cross product times
``run.repetitions`` into labelled single-run specs (``policy=ecmp,workers=4,rep=1``).
``load_spec`` refuses sweeps unless ``allow_sweep=True`` (``incastlab sweep``).

Placement (which host is the PS, which hosts are workers 0..N-1) is decided here, once,
by :meth:`Spec.placement`, from the names in :mod:`incastlab.topologies.naming`.
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from incastlab import events as _events
from incastlab import jobs
from incastlab.controller import registry as controller_registry
from incastlab.fields import boolean as _bool
from incastlab.fields import choice as _choice
from incastlab.fields import did_you_mean as _did_you_mean
from incastlab.fields import int_check as _int
from incastlab.fields import is_int as _is_int
from incastlab.fields import is_num as _is_num
from incastlab.fields import num_check as _num
from incastlab.fields import optional as _optional
from incastlab.fields import pattern as _pattern
from incastlab.fields import spec_field as _f
from incastlab.jobs.base import Roles, Straggler
from incastlab.topologies import fabricmap, naming

TOPOLOGY_KINDS = ("leafspine", "star")
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
# The controller's registry is the one list of policies and their polling ranges.
POLICIES = tuple(controller_registry.POLICIES)
POLL_RANGE = (min(p.poll_range[0] for p in controller_registry.POLICIES.values()),
              max(p.poll_range[1] for p in controller_registry.POLICIES.values()))
MAX_SWEEP_RUNS = 500
MAX_QUEUE_BYTES = 100_000_000  # as topologies.leafspine (which imports Mininet)
FORMAT_VERSION = 1


class SpecError(ValueError):
    """The spec is invalid. ``errors`` lists every problem; the message has one per line."""

    def __init__(self, errors: Iterable[str], source: str | None = None):
        self.errors = list(errors)
        self.source = source
        where = f" ({source})" if source else ""
        super().__init__(f"invalid spec{where}:\n" + "\n".join(f"  {e}" for e in self.errors))


# --- field checks (incastlab.fields; the underscore names are this module's own use) -----

_DELAY_RE = r"\d+(\.\d+)?(us|ms|s)"  # the same form LeafSpineTopo accepts
_NAME_RE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"


def _worker_leaves(v) -> str | None:
    if v == "spread":
        return None
    if isinstance(v, list) and v and all(_is_int(x) and x >= 1 for x in v) \
            and len(set(v)) == len(v):
        return None
    return f"{v!r} is not \"spread\" or a list of distinct leaf indices >= 1"


def _ports(v) -> str | None:
    if v == "default":
        return None
    if isinstance(v, list) and v and all(
            isinstance(x, str) and re.fullmatch(naming.OUR_NAME_PATTERN, x) and "-eth" in x
            for x in v) and len(set(v)) == len(v):
        return None
    return (f"{v!r} is not \"default\" or a non-empty list of distinct interface names "
            "like h1-eth0, lf1-eth3, sp2-eth1")


# --- the schema --------------------------------------------------------------------------

@dataclass
class Topology:
    """``[topology]``: the fabric (see :class:`incastlab.topologies.leafspine.LeafSpineTopo`)."""

    kind: str = _f("leafspine", _choice(*TOPOLOGY_KINDS),
                   "leafspine: a two-tier Clos; star: one switch, the classic incast bench")
    spines: int = _f(2, _int(1, naming.MAX_SPINES), "number of spine switches (leafspine)")
    leaves: int = _f(2, _int(1, naming.MAX_LEAVES), "number of leaf switches (leafspine)")
    hosts_per_leaf: int = _f(2, _int(1, naming.MAX_HOSTS_PER_LEAF - 1),
                             "hosts under each leaf (leafspine)")
    senders: int | None = _f(None, _optional(_int(1, naming.MAX_HOSTS_PER_LEAF - 1)),
                             "star: sending hosts besides the receiver; default: just "
                             "enough for the workload")
    host_bw_mbps: float = _f(20.0, _num(0, 10_000, low_open=True, unit="Mbit/s"),
                             "host<->leaf link rate")
    fabric_bw_mbps: float | None = _f(
        None, _optional(_num(0, 10_000, low_open=True, unit="Mbit/s")),
        "leaf<->spine link rate; default non-blocking: hosts_per_leaf*host_bw/spines")
    oversubscription: float | None = _f(
        None, _optional(_num(1, 1000)),
        "alternative to fabric_bw_mbps: fabric_bw = hosts_per_leaf*host_bw/(spines*ratio)")
    queue_packets: int | None = _f(100, _optional(_int(1, 100_000, unit="packets")),
                                   "pfifo limit of every switch egress queue", sweep=True)
    delay: str | None = _f(None, _optional(_pattern(_DELAY_RE, "a delay like '2ms', '500us' "
                                                               "or '0.1s'")),
                           "one-way delay of every link; needs netem")
    congestion_control: str = _f("cubic", _choice(*CONGESTION_CONTROLS),
                                 "TCP congestion control set in every host", sweep=True)
    mtu: int = _f(fabricmap.DEFAULT_MTU, _int(*fabricmap.MTU_RANGE, unit="bytes"),
                  "MTU of every host and switch interface; 9000: jumbo frames (the "
                  "datapath's cost is per packet: about 3x the capacity)", sweep=True)
    queue_bytes: int | None = _f(None, _optional(_int(1, MAX_QUEUE_BYTES, unit="bytes")),
                                 "instead of queue_packets: bfifo limit of every switch "
                                 "egress queue, at least one frame (mtu + 14)", sweep=True)
    slow_start_after_idle: bool = _f(True, _bool,
                                     "TCP slow start after an idle period, in every host "
                                     "(net.ipv4.tcp_slow_start_after_idle; true is the "
                                     "kernel's default); false keeps a connection's window "
                                     "across the pauses between a job's steps", sweep=True)


@dataclass
class Routing:
    """``[routing]``: which spine each flow crosses."""

    policy: str = _f("ecmp", _choice(*POLICIES),
                     "single path, ECMP hashing, round-robin spread, adaptive "
                     "(least-loaded spine from port statistics), app (your own os-ken or "
                     "Ryu apps: routing.app) or external (a controller you run: "
                     "routing.controller)", sweep=True)
    poll_interval_s: float = _f(0.2, _num(*POLL_RANGE, unit="s"),
                                "port-statistics polling interval; adaptive needs 0.1 to 0.5")
    idle_timeout_s: int = _f(controller_registry.DEFAULT_IDLE_TIMEOUT, _int(1, 65_535, unit="s"),
                             "spread, adaptive: idle timeout of per-flow entries")
    spine: int = _f(1, _int(1, naming.MAX_SPINES),
                    "single: the spine every inter-leaf flow crosses")
    app: list[str] = _f([], controller_registry.check_apps,
                        "app: your apps, .py files (relative to where incastlab runs) or "
                        "module names; their ryu.* imports run on os-ken", list_valued=True)
    controller: str = _f(controller_registry.DEFAULT_EXTERNAL,
                         controller_registry.check_controller,
                         "external: the controller you run, 127.x.y.z:PORT (loopback only)")


def _job_kind(v) -> str | None:
    # read at check time, so a job registered later is a valid kind
    return _choice(*jobs.JOBS)(v)


@dataclass
class WorkloadCommon:
    """The ``[workload]`` fields every job kind has: which kind, its timeout, where its
    hosts go, and the hosts' minimum RTO. Each job kind adds its own fields (its
    ``Fields`` dataclass in ``incastlab.jobs.<kind>``); :class:`Workload` is the table
    with all of them."""

    kind: str = _f("ps", _job_kind, "the job kind, one module each in incastlab/jobs/",
                   sweep=True)
    timeout_s: float = _f(120.0, _num(0, 86_400, low_open=True, unit="s"),
                          "communication timeout of the apps (a stalled peer fails the run)")
    ps_leaf: int = _f(1, _int(1, naming.MAX_LEAVES),
                      "leaf of the job's servers: the PS host(s) (ps) or the receiver (incast)")
    worker_leaves: list[int] | str = _f("spread", _worker_leaves,
                                        "leaves the workers/senders fill round-robin, or "
                                        "\"spread\": all leaves, the PS leaf last",
                                        list_valued=True)
    rto_min_ms: float | None = _f(None, _optional(_num(0, 60_000, low_open=True, unit="ms")),
                                  "minimum TCP retransmission timeout set on every host's "
                                  "routes; default: the kernel's (200 ms)", sweep=True)


def _compose_workload() -> type:
    """The ``[workload]`` table: the kind, each registered job's fields in registry
    order, then the other common fields (a field two jobs share, such as ``workers``,
    comes from one shared declaration and appears once). Field metadata gains ``jobs``:
    the kinds that use it (empty for the common fields)."""
    fields: dict[str, tuple[str, Any, dataclasses.Field]] = {}
    owners: dict[str, list[str]] = {}

    def type_text(t) -> str:  # annotations as text, as `from __future__ import annotations`
        return t if isinstance(t, str) else getattr(t, "__name__", repr(t))

    common = dataclasses.fields(WorkloadCommon)
    for f in common:
        owners[f.name] = []
    fields["kind"] = ("kind", type_text(common[0].type), common[0])
    for kind, job in jobs.JOBS.items():
        for f in dataclasses.fields(job.Fields):
            if f.name in owners:
                seen = fields.get(f.name, (None, None, f))[2]
                if owners[f.name] == [] or seen.metadata["check"] is not f.metadata["check"]:
                    whose = "is common" if not owners[f.name] else "another job declares"
                    raise TypeError(f"job {kind!r} declares workload.{f.name}, which {whose}; "
                                    "share one declaration (e.g. jobs.base.TrainingFields)")
                owners[f.name].append(kind)
                continue
            fields[f.name] = (f.name, type_text(f.type), f)
            owners[f.name] = [kind]
    for f in common[1:]:  # the kind first, the jobs' fields, then the rest (sweep order)
        fields[f.name] = (f.name, type_text(f.type), f)
    spec_fields = []
    for name, ftype, f in fields.values():
        kw = {"metadata": {**f.metadata, "jobs": tuple(owners[name])}}
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        else:
            kw["default_factory"] = f.default_factory
        spec_fields.append((name, ftype, field(**kw)))
    cls = dataclasses.make_dataclass(
        "Workload", spec_fields,
        namespace={"__doc__": "``[workload]``: the job and its hosts (common fields plus "
                              "every job kind's own; see incastlab.jobs)."})
    cls.__module__ = __name__
    return cls


Workload = _compose_workload()


@dataclass
class Capture:
    """``[capture]``: what is recorded."""

    enabled: bool = _f(True, _bool, "capture packets with tcpdump")
    snaplen: int = _f(128, _int(64, 65_535, unit="bytes"), "bytes kept per packet (headers)")
    ports: list[str] | str = _f("default", _ports,
                                "\"default\": PS/receiver host ports, every worker port and "
                                "the spine->leaf downlinks toward the PS; or interface names",
                                list_valued=True)
    queue_sample_ms: float = _f(10.0, _num(0, 20, low_open=True, unit="ms"),
                                "queue sampling interval of every switch egress port")


@dataclass
class Run:
    """``[run]``: limits and bookkeeping."""

    name: str = _f("default", _pattern(_NAME_RE, "a name of letters, digits, '.', '_', '-'"),
                   "run name; default: the spec file's name")
    description: str = _f("", _pattern(r"[^\x00]*", "text"), "what the run asks, for reports")
    duration_limit_s: float = _f(900.0, _num(0, 86_400, low_open=True, unit="s"),
                                 "the whole run is aborted after this long")
    phase_timeout_s: float = _f(60.0, _num(0, 3600, low_open=True, unit="s"),
                                "deadline of each bring-up phase (fabric, controller, ...)")
    repetitions: int = _f(1, _int(1, 100), "runs of each sweep point (incastlab sweep)")
    seed: int = _f(1, _int(0, 2**31 - 1), "random seed; repetition r uses seed + r - 1")
    out_dir: str = _f("runs", _pattern(r"[^\x00]+", "a directory path"),
                      "where run directories are created")


@dataclass(frozen=True)
class Placement:
    """Hosts of a workload. ``servers``: PS hosts (ps), the receiver (incast), none (ring).
    ``workers``: worker/ring/sender hosts, index = worker rank."""

    servers: tuple[str, ...]
    workers: tuple[str, ...]


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
        return {key: value for key, value, meta in _iter_fields(self)
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
        runs = _count_runs(self)
        raise SpecError([f"this spec is a sweep of {runs} runs over {', '.join(axes)}: "
                         "`incastlab run` does one run; use `incastlab sweep` instead"],
                        self.source)

    # -- topology --
    def topology_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``TOPOS[spec.topology.kind]`` (LeafSpineTopo/StarTopo):
        rates in Mbit/s, queues in packets."""
        self._require_unswept()
        return _topology_kwargs(self)

    def _require_unswept(self) -> None:
        if self.swept():
            raise SpecError([f"{', '.join(self.swept())} hold sweep lists: expand the spec "
                             "with expand_sweep() first"], self.source)

    def make_topology(self):
        """Construct the Mininet Topo (a description; nothing runs). Its own checks'
        TopologyError becomes a SpecError naming ``topology.<field>``."""
        self._require_unswept()
        return _make_topology(self)

    # -- hosts --
    def placement(self) -> Placement:
        """Which hosts are servers and which are workers (rank order). Leaf–spine: the
        ``shards`` PS hosts (or the incast receiver) are the first hosts of ``ps_leaf``;
        workers fill ``worker_leaves`` round-robin, each leaf's lowest free host first
        (``"spread"`` = every leaf, starting after the PS leaf, for a ring from leaf 1).
        Star: workers are ``h1..hN``, servers the last hosts."""
        self._require_unswept()
        placed, errors = _place(self)
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
        if self.topology.kind == "leafspine" and placed.servers:
            names += [naming.intf_name(naming.spine_name(j),
                                       naming.spine_downlink_port(self.workload.ps_leaf))
                      for j in range(1, self.topology.spines + 1)]
        return names


TABLES: dict[str, type] = {"topology": Topology, "routing": Routing, "workload": Workload,
                           "capture": Capture, "run": Run}


def _sweepable() -> tuple[str, ...]:
    keys = tuple(f"{t}.{f.name}" for t, cls in TABLES.items() for f in dataclasses.fields(cls)
                 if f.metadata["sweep"])
    if len({key.split(".")[1] for key in keys}) != len(keys):
        raise RuntimeError("sweep labels use bare field names: sweepable names must be unique")
    return keys


SWEEPABLE: tuple[str, ...] = _sweepable()


def _rebuild_workload() -> None:
    """A job was registered or removed: rebuild the [workload] table from the registry."""
    global Workload, SWEEPABLE
    Workload = TABLES["workload"] = _compose_workload()
    SWEEPABLE = _sweepable()


jobs.on_change(_rebuild_workload)


def _iter_fields(spec: Spec):
    for table in TABLES:
        obj = getattr(spec, table)
        for f in dataclasses.fields(obj):
            yield f"{table}.{f.name}", getattr(obj, f.name), f.metadata


def _set(spec: Spec, key: str, value) -> None:
    table, name = key.split(".")
    setattr(getattr(spec, table), name, value)


# --- loading -----------------------------------------------------------------------------

def _parse_value(text: str):
    """A CLI value as a TOML value (``8``, ``true``, ``["a","b"]``, ``{rank=0}``), or, when
    that fails, the bare string (``ecmp``, ``2ms``)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _apply_overrides(raw: dict, overrides: Iterable[str], errors: list[str]) -> None:
    every_field = [f"{t}.{f.name}" for t, cls in TABLES.items() for f in dataclasses.fields(cls)]
    text_fields = {f"{t}.{f.name}" for t, cls in TABLES.items() for f in dataclasses.fields(cls)
                   if f.type == "str"}
    for item in overrides:
        key, eq, value = item.partition("=")
        key = key.strip()
        parts = key.split(".")
        if not eq or len(parts) != 2 or not all(parts):
            hint = _did_you_mean(key, every_field) if "." not in key else ""
            if not hint:
                hint = next((f" (did you mean '{k}'?)" for k in every_field
                             if k.endswith("." + key)), "")
            errors.append(f"override {item!r}: expected table.field=value{hint}")
            continue
        table, name = parts
        target = raw.setdefault(table, {})
        if isinstance(target, dict):  # a non-table here is reported by _split_tables
            parsed = _parse_value(value.strip())
            if key in text_fields and not isinstance(parsed, (str, list, dict)):
                parsed = value.strip()  # --set run.name=2024 means the text "2024"
            target[name] = parsed


def _split_tables(raw: dict, errors: list[str]) -> dict[str, dict]:
    """Known tables' known fields; every unknown name is an error with a suggestion."""
    tables: dict[str, dict] = {t: {} for t in TABLES}
    owner = {f.name: t for t, cls in TABLES.items() for f in dataclasses.fields(cls)}
    for table, content in raw.items():
        if table not in TABLES:
            if not isinstance(content, dict) and table in owner:
                errors.append(f"{table}: a field outside its table; write it under "
                              f"[{owner[table]}]")
            else:
                errors.append(f"{table}: unknown table{_did_you_mean(table, TABLES)}; "
                              f"tables are {', '.join(TABLES)}")
            continue
        if not isinstance(content, dict):
            errors.append(f"{table}: {content!r} is not a table")
            continue
        names = [f.name for f in dataclasses.fields(TABLES[table])]
        for name, value in content.items():
            if name in names:
                tables[table][name] = value
                continue
            if owner.get(name):
                hint = f" (it belongs in [{owner[name]}]: {owner[name]}.{name})"
            else:
                hint = _did_you_mean(name, names, f"{table}.{{}}")
            errors.append(f"{table}.{name}: unknown field{hint}; [{table}] has "
                          f"{', '.join(names)}")
    return tables


def loads_spec(text: str, overrides: Iterable[str] = (), *,
               capabilities: Mapping[str, Any] | Any | None = None,
               allow_sweep: bool = False, source: str | None = None,
               name: str = "default") -> Spec:
    """Parse, override and validate a spec given as TOML text. See :func:`load_spec`."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError([f"not valid TOML: {exc}"], source) from None
    errors: list[str] = []
    _apply_overrides(raw, overrides, errors)
    raw_events = raw.pop("events", [])
    raw_jobs = raw.pop("jobs", None)
    if raw_jobs is not None and "workload" in raw:
        errors.append("workload, jobs: both [workload] and [[jobs]] given; with [[jobs]] "
                      "each job is its own table: leave [workload] out")
        raw.pop("workload")
    tables = _split_tables(raw, errors)
    tables["run"].setdefault("name", name)
    # a byte limit replaces the packet limit's default; both given is refused (below)
    if tables["topology"].get("queue_bytes") is not None:
        tables["topology"].setdefault("queue_packets", None)
    spec = Spec(**{t: cls(**tables[t]) for t, cls in TABLES.items()}, events=raw_events,
                source=source)
    if raw_jobs is not None:  # each job's table validated as [workload] is (multijob.py)
        from incastlab import multijob

        spec.jobs, found = multijob.parse(raw_jobs, spec, capabilities)
        errors += found
    errors += _problems(spec, capabilities)
    if errors:
        raise SpecError(errors, source)
    spec = _normalized(spec)
    if not allow_sweep:
        spec.require_single()
    return spec


def load_spec(path: str | Path | None = None, overrides: Iterable[str] = (), *,
              capabilities: Mapping[str, Any] | Any | None = None,
              allow_sweep: bool = False) -> Spec:
    """Load a spec file (``None``: all defaults), apply CLI overrides and validate it.

    overrides: strings ``table.field=value`` (``--set routing.policy=ecmp``); the value is
        parsed as a TOML value, else taken as a bare string.
    capabilities: what the runner's preflight found (``{"netem": bool}`` or its
        Capabilities object); ``None`` skips machine-dependent checks.
    allow_sweep: accept list values and repetitions (``incastlab sweep``); otherwise a
        sweep spec is refused with a pointer to ``incastlab sweep``.
    run.name defaults to the file's name without ``.toml``.
    Raises SpecError listing every problem.
    """
    if path is None:
        return loads_spec("", overrides, capabilities=capabilities, allow_sweep=allow_sweep)
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([f"cannot read the spec: {exc}"], str(path)) from None
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem).lstrip("._-") or "default"
    return loads_spec(text, overrides, capabilities=capabilities, allow_sweep=allow_sweep,
                      source=str(path), name=stem[:64])


def _normalized(spec: Spec) -> Spec:
    """A copy with numbers of float fields as floats and stragglers as Straggler."""
    spec = copy.deepcopy(spec)
    hints = {t: cls.__annotations__ for t, cls in TABLES.items()}
    for key, value, _meta in _iter_fields(spec):
        table, name = key.split(".")
        if "float" in hints[table][name]:
            if isinstance(value, list):
                _set(spec, key, [float(v) if _is_num(v) else v for v in value])
            elif _is_num(value):
                _set(spec, key, float(value))
    spec.workload.stragglers = [
        s if isinstance(s, Straggler) else Straggler(int(s["rank"]), float(s["factor"]))
        for s in spec.workload.stragglers]
    spec.events = _events.normalized(spec.events)
    return spec


# --- validation --------------------------------------------------------------------------

def validate(spec: Spec, capabilities: Mapping[str, Any] | Any | None = None) -> None:
    """Check the whole spec (every sweep point too); raise SpecError listing every problem.

    capabilities: ``{"netem": False, ...}`` or the preflight's Capabilities; ``None``
    skips machine-dependent checks. No system calls are made.
    """
    errors = _problems(spec, capabilities)
    if errors:
        raise SpecError(errors, spec.source)


def _caps(capabilities) -> dict[str, Any]:
    if capabilities is None:
        return {}
    if hasattr(capabilities, "as_dict"):
        return capabilities.as_dict()
    return dict(capabilities)


def _problems(spec: Spec, capabilities) -> list[str]:
    errors: list[str] = []
    bad: set[str] = set()
    sweepable = ", ".join(SWEEPABLE)
    for key, value, meta in _iter_fields(spec):
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
            for v in value:
                if isinstance(v, (str, int, float)) and value.count(v) > 1:
                    found.append(f"{key}: {value!r} lists {v!r} more than once")
                    break
        elif isinstance(value, list) and not meta["list_valued"]:
            found.append(f"{key}: {value!r} is a list, but {key} cannot be swept; "
                         f"sweepable fields are {sweepable}")
        else:
            problem = check(value)
            for line in problem.split("\n") if problem else ():
                # "[0].rank: ..." and ": ..." continue the key (workload.stragglers[0].rank)
                joined = re.match(r"\[\d+\][.:]|:", line)
                found.append(f"{key}{line}" if joined else f"{key}: {line}")
        if found:
            bad.add(key)
            errors += found
    found = _events.event_problems(spec.events)
    if found:
        bad.add("events")
        errors += found
    if "run.repetitions" not in bad:
        runs = _count_runs(spec)
        if runs > MAX_SWEEP_RUNS:
            errors.append(f"run.repetitions: the sweep expands to {runs} runs, more than "
                          f"{MAX_SWEEP_RUNS}")
            return errors
    # Cross-field checks, per sweep point (bad axes are not expanded: checks that need a
    # bad field skip it); a problem shared by every point is said once.
    caps = _caps(capabilities)
    seen: dict[str, list[str]] = {}
    points = list(_points(spec, skip=bad))
    for label, point in points:
        for problem in _point_problems(point, caps, bad):
            seen.setdefault(problem, []).append(label)
    for problem, labels in seen.items():
        if len(points) > 1 and len(labels) < len(points):
            problem += f" (sweep point {'; '.join(labels)})"
        errors.append(problem)
    return errors


def _count_runs(spec: Spec) -> int:
    runs = spec.run.repetitions if _is_int(spec.run.repetitions) else 1
    for values in spec.swept().values():
        runs *= max(len(values), 1)
    return runs


def _points(spec: Spec, skip: Iterable[str] = ()):
    """(label, single-valued spec) for each combination of sweep values, no repetitions;
    axes in ``skip`` are left unexpanded."""
    axes = {key: values for key, values in spec.swept().items() if key not in skip}
    for combo in itertools.product(*axes.values()):
        point = copy.deepcopy(spec)
        for key, value in zip(axes, combo, strict=True):
            _set(point, key, value)
        label = ",".join(f"{key.split('.')[1]}={_label_value(value)}"
                         for key, value in zip(axes, combo, strict=True))
        yield label, point


def _label_value(v) -> str:
    if isinstance(v, bool):
        text = "true" if v else "false"
    elif isinstance(v, float):
        text = str(int(v)) if v.is_integer() else repr(v)  # 200.0 -> 200; exact otherwise
    else:
        text = str(v)
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


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


def _point_problems(p: Spec, caps: dict[str, Any], bad: set[str]) -> list[str]:
    """Problems that involve more than one field, for one single-valued spec."""
    t, r, w = p.topology, p.routing, p.workload
    errors: list[str] = []

    def ok(*keys: str) -> bool:
        return not any(k in bad for k in keys)

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
    if t.delay and ok("topology.delay") and caps.get("netem") is False:
        errors.append(f"topology.delay: {t.delay!r} needs netem (sch_netem), which this "
                      "kernel does not have; leave topology.delay out here")
    # the fabric is built to count its queues: only from fields that passed their checks
    # (a star's hosts come from the workload)
    if caps.get("ovs_send_buffer") is not None and not any(
            k.startswith(("topology.", "workload.")) for k in bad):
        errors += _send_buffer_problems(p, caps)
    if r.policy in POLICIES and ok("routing.poll_interval_s"):
        low, high = controller_registry.POLICIES[r.policy].poll_range
        if not low <= r.poll_interval_s <= high:
            errors.append(f"routing.poll_interval_s: {r.poll_interval_s!r} is not from {low} "
                          f"to {high} (s), as policy {r.policy} needs")
    if r.policy == "single" and t.kind == "leafspine" and ok("routing.spine", "topology.spines") \
            and r.spine > t.spines:
        errors.append(f"routing.spine: {r.spine!r} is not a spine of this fabric "
                      f"(1 to {t.spines})")
    if r.policy in POLICIES and controller_registry.POLICIES[r.policy].user_apps \
            and ok("routing.app") and not r.app:
        errors.append(f"routing.app: missing; policy {r.policy} needs at least one app, a .py "
                      "file or a module name")
    if p.jobs:  # the jobs' own tables were checked on loading; here: do they fit
        from incastlab import multijob

        return errors + multijob.problems(p, _shape(p))
    if not ok("workload.kind"):
        return errors
    job = jobs.JOBS[w.kind]
    errors += job.check(w, ok)
    topo_keys = [f"topology.{f.name}" for f in dataclasses.fields(Topology)]
    place_keys = ["workload.ps_leaf", "workload.worker_leaves",
                  *(f"workload.{name}" for name in job.host_count_fields)]
    if not ok(*topo_keys) or any(e.startswith("topology.") for e in errors):
        return errors
    if not ok(*place_keys):
        # A star's size follows from the workload; a leaf-spine's does not.
        return errors if t.kind == "star" else errors + _fabric_problems(p, ok)
    placed, place_errors = _place(p)
    if place_errors:
        return errors + place_errors
    errors += _fabric_problems(p, ok)
    if p.events and ok("events") and not errors:
        errors += _events.scene_problems(p.events, event_scene(p, placed))
    return errors


def event_scene(p: Spec, placed: Placement | None = None) -> _events.Scene:
    """What [[events]] may name on this (single-valued) spec's fabric and placement."""
    if placed is None:
        placed = p.placement()
    leaves, per_leaf = _shape(p)
    spines = p.topology.spines if p.topology.kind == "leafspine" else 0
    try:
        iterations = jobs.JOBS[p.workload.kind].expected_progress(p.workload)
    except (TypeError, ValueError, AttributeError):
        iterations = None
    return _events.Scene.of_shape(spines, leaves, per_leaf, servers=placed.servers,
                                  workers=placed.workers, kind=p.workload.kind,
                                  iterations=iterations, workload=p.workload)


def _fabric_problems(p: Spec, ok: Callable[..., bool]) -> list[str]:
    """The topology's own validation, then the capture interfaces against the fabric."""
    try:
        _make_topology(p)
    except SpecError as exc:
        return exc.errors
    except ImportError:  # no Mininet library here: our own checks must do
        pass
    errors = []
    if p.capture.ports != "default" and ok("capture.ports"):
        known = _interfaces(p)
        for name in p.capture.ports:
            if name not in known:
                errors.append(f"capture.ports: {name!r} is not an interface of this fabric "
                              f"(hosts h1-eth0..h{_host_count(p)}-eth0; see fabric.json)")
    return errors


def _topology_kwargs(p: Spec) -> dict[str, Any]:
    t = p.topology
    # mtu and queue_bytes only when asked for: a default spec builds the Topo exactly as
    # before they existed (queue_packets None = the Topo's default, given queue_bytes)
    extra = {"queue_bytes": t.queue_bytes} if t.queue_bytes is not None else {}
    if t.mtu != fabricmap.DEFAULT_MTU:
        extra["mtu"] = t.mtu
    if t.kind == "star":
        return {"senders": _star_senders(p), "host_bw": t.host_bw_mbps,
                "queue_packets": t.queue_packets, "delay": t.delay, **extra}
    return {"spines": t.spines, "leaves": t.leaves, "hosts_per_leaf": t.hosts_per_leaf,
            "host_bw": t.host_bw_mbps, "fabric_bw": t.fabric_bw_mbps,
            "oversubscription": t.oversubscription, "queue_packets": t.queue_packets,
            "delay": t.delay, **extra}


def _make_topology(p: Spec):
    from incastlab.topologies.leafspine import TOPOS, TopologyError

    try:
        return TOPOS[p.topology.kind](**_topology_kwargs(p))
    except TopologyError as exc:
        raise SpecError([_topology_error(str(exc))], p.source) from None


_TOPO_FIELD = {"host_bw": "host_bw_mbps", "fabric_bw": "fabric_bw_mbps", "give": "oversubscription"}


def _topology_error(message: str) -> str:
    """``topology.<field>: <message>`` for a TopologyError, whose message starts with the
    name of the Topo parameter."""
    first = re.match(r"\w+", message)
    word = first.group(0) if first else ""
    name = _TOPO_FIELD.get(word, word)
    if name not in {f.name for f in dataclasses.fields(Topology)}:
        return f"topology: {message}"
    return f"topology.{name}: {message}"


# --- placement ---------------------------------------------------------------------------

def _roles(p: Spec) -> Roles:
    """Host counts and nouns of the spec's job (``incastlab.jobs``)."""
    return jobs.JOBS[p.workload.kind].roles(p.workload)


def _star_senders(p: Spec) -> int:
    roles = _roles(p)
    return p.topology.senders or max(roles.servers + roles.workers - 1, 1)


def _shape(p: Spec) -> tuple[int, int]:
    """(leaves, hosts per leaf) of the fabric."""
    if p.topology.kind == "star":
        return 1, _star_senders(p) + 1
    return p.topology.leaves, p.topology.hosts_per_leaf


def _host_count(p: Spec) -> int:
    leaves, per_leaf = _shape(p)
    return leaves * per_leaf


def _interfaces(p: Spec) -> set[str]:
    leaves, per_leaf = _shape(p)
    spines = p.topology.spines if p.topology.kind == "leafspine" else 0
    names = {naming.intf_name(f"h{n}", 0) for n in range(1, leaves * per_leaf + 1)}
    for i in range(1, leaves + 1):
        names |= {naming.intf_name(naming.leaf_name(i), port)
                  for port in range(1, per_leaf + spines + 1)}
    for j in range(1, spines + 1):
        names |= {naming.intf_name(naming.spine_name(j), port) for port in range(1, leaves + 1)}
    return names


def _place(p: Spec) -> tuple[Placement | None, list[str]]:
    w = p.workload
    roles = _roles(p)
    n_servers, n_workers, noun, server_noun = (roles.servers, roles.workers,
                                               roles.worker_noun, roles.server_noun)
    count_key = roles.count_field
    leaves, per_leaf = _shape(p)
    errors = []
    if p.topology.kind == "star":
        if w.ps_leaf != 1 and n_servers:
            errors.append(f"workload.ps_leaf: {w.ps_leaf!r} is not a leaf of this fabric "
                          "(a star has leaf 1 only)")
        if w.worker_leaves not in ("spread", [1]):
            errors.append(f"workload.worker_leaves: {w.worker_leaves!r} is not \"spread\" or "
                          "[1] (a star has leaf 1 only)")
        if n_servers + n_workers > per_leaf:
            errors.append(f"{count_key}: {n_workers} {noun} + {n_servers} {server_noun} need "
                          f"{n_workers + n_servers} hosts, but topology.senders = "
                          f"{p.topology.senders} gives {per_leaf}")
        if errors:
            return None, errors
        hosts = [naming.host_name(1, k, per_leaf) for k in range(1, per_leaf + 1)]
        return Placement(tuple(hosts[per_leaf - n_servers:]), tuple(hosts[:n_workers])), []

    if n_servers and w.ps_leaf > leaves:
        errors.append(f"workload.ps_leaf: {w.ps_leaf!r} is not a leaf of this fabric "
                      f"(1 to {leaves})")
    elif n_servers > per_leaf:
        errors.append(f"workload.shards: {n_servers} PS hosts do not fit on leaf {w.ps_leaf}, "
                      f"which has {per_leaf} hosts")
    if isinstance(w.worker_leaves, list):
        for leaf in w.worker_leaves:
            if leaf > leaves:
                errors.append(f"workload.worker_leaves: {leaf!r} is not a leaf of this "
                              f"fabric (1 to {leaves})")
    if n_servers + n_workers > leaves * per_leaf:
        servers_text = f" + {n_servers} {server_noun}" if n_servers else ""
        errors.append(f"{count_key}: {n_workers} {noun}{servers_text} need "
                      f"{n_workers + n_servers} hosts, but the fabric has "
                      f"{leaves * per_leaf} ({leaves} leaves x {per_leaf} hosts)")
    if errors:
        return None, errors
    servers = [(w.ps_leaf, k) for k in range(1, n_servers + 1)]
    if isinstance(w.worker_leaves, list):
        order = list(w.worker_leaves)
    elif n_servers:
        order = [(w.ps_leaf + d - 1) % leaves + 1 for d in range(1, leaves + 1)]
    else:
        order = list(range(1, leaves + 1))
    free = {leaf: [k for k in range(1, per_leaf + 1) if (leaf, k) not in servers]
            for leaf in order}
    workers: list[tuple[int, int]] = []
    while len(workers) < n_workers and any(free.values()):
        for leaf in order:
            if free[leaf] and len(workers) < n_workers:
                workers.append((leaf, free[leaf].pop(0)))
    if len(workers) < n_workers:
        return None, [f"workload.worker_leaves: {n_workers} {noun} do not fit on leaves "
                      f"{', '.join(map(str, order))}, which have {len(workers)} free hosts"]

    def name(pos):
        return naming.host_name(pos[0], pos[1], per_leaf)

    return Placement(tuple(map(name, servers)), tuple(map(name, workers))), []


# --- sweeps ------------------------------------------------------------------------------

def expand_sweep(spec: Spec) -> list[tuple[str, Spec]]:
    """Every run a (sweep) spec asks for: the cross product of its sweep lists, in schema
    order, times ``run.repetitions`` (outermost, so each repetition completes the whole
    comparison before the next starts). Each run is a single-valued spec with
    ``repetitions = 1`` and ``seed = seed + rep - 1``, labelled deterministically and
    filesystem-safely, e.g. ``policy=ecmp,workers=4,rep=1``. A spec that is no sweep gives
    one run labelled ``rep=1``."""
    validate(spec)
    points = list(_points(spec))
    runs = []
    for rep in range(1, spec.run.repetitions + 1):
        for label, point in points:
            single = copy.deepcopy(point)
            single.run.repetitions = 1
            single.run.seed = spec.run.seed + rep - 1
            runs.append((f"{label},rep={rep}" if label else f"rep={rep}", single))
    if spec.jobs:  # and each job alone on its hosts (jobs=together / alone-<i>)
        from incastlab import multijob

        runs = multijob.with_alone(runs)
    return runs


def schema_rows() -> list[tuple[str, str, str, str]]:
    """(field, default, allowed/sweepable, doc) for every field: the schema as data."""
    rows = []
    for table, cls in TABLES.items():
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            probe = f.metadata["check"](object())  # the "what is allowed" text
            allowed = probe.split(" is not ", 1)[1] if probe and " is not " in probe else ""
            if f.metadata["sweep"]:
                allowed += "; sweepable"
            doc = f.metadata["doc"]
            if f.metadata.get("jobs"):  # a job's own field: say which kinds read it
                doc = f"[{', '.join(f.metadata['jobs'])}] {doc}"
            if table == "workload" and f.name == "kind":  # the registry's kinds, described
                doc += ": " + "; ".join(f"{k}: {job.summary}" for k, job in jobs.JOBS.items())
            rows.append((f"{table}.{f.name}", "(absent)" if default is None else repr(default),
                         allowed, doc))
    return rows + _events.schema_rows()


def main(argv: list[str] | None = None) -> int:
    """``python -m incastlab.spec [SPEC [table.field=value ...]]``: check a spec and print
    it resolved; without arguments print the schema; ``--help`` says so."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m incastlab.spec",
        description="Check an incastlab spec and print it resolved (defaults and "
                    "overrides applied; a sweep's runs listed), or, without a spec, print "
                    "the schema: every field, its default, what is allowed and what it "
                    "means. Exit status 2 lists every problem by field. "
                    "`incastlab check SPEC` also prints the host placement.")
    parser.add_argument("spec", nargs="?", default=None, help="spec file (TOML)")
    parser.add_argument("overrides", nargs="*", metavar="table.field=value",
                        help="overrides, as --set takes them (value in TOML syntax)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.spec is None:
        for key, default, allowed, doc in schema_rows():
            print(f"{key:32} {default:12} {allowed}\n{'':32} {doc}")
        return 0
    try:
        spec = load_spec(args.spec, args.overrides, allow_sweep=True)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(spec.to_toml(), end="")
    if spec.is_sweep:
        print("\n# runs: " + " ".join(label for label, _ in expand_sweep(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
