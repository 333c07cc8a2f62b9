"""The spec's schema: its five tables as dataclasses, every field declared once with its
default, its check, its documentation and whether it may be swept
(:func:`incastlab.fields.spec_field`). ``[workload]`` is composed from the job registry
(:mod:`incastlab.jobs`) and rebuilt when a job is registered or removed.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from incastlab import events as _events
from incastlab import jobs, pathlabel
from incastlab.controller import registry as controller_registry
from incastlab.fields import boolean as _bool
from incastlab.fields import choice as _choice
from incastlab.fields import int_check as _int
from incastlab.fields import is_int as _is_int
from incastlab.fields import num_check as _num
from incastlab.fields import optional as _optional
from incastlab.fields import OFF as _OFF
from incastlab.fields import or_off as _or_off
from incastlab.fields import pattern as _pattern
from incastlab.fields import spec_field as _f
from incastlab.topologies import fabricmap, naming

__all__ = ["CONGESTION_CONTROLS", "ECN_OFF", "FORMAT_VERSION", "MAX_QUEUE_BYTES", "MAX_SWEEP_RUNS",
           "POLICIES", "POLL_RANGE", "SWEEPABLE", "TABLES", "TOPOLOGY_KINDS", "Capture",
           "Routing", "Run", "Topology", "Workload", "WorkloadCommon", "iter_fields",
           "schema_rows", "set_field"]

TOPOLOGY_KINDS = ("leafspine", "star")
# dctcp: the kernel's tcp_dctcp, or the project's BPF one (incastlab.congestion)
CONGESTION_CONTROLS = ("cubic", "reno", "bbr", "dctcp")
# The controller's registry is the one list of policies and their polling ranges.
POLICIES = tuple(controller_registry.POLICIES)
POLL_RANGE = (min(p.poll_range[0] for p in controller_registry.POLICIES.values()),
              max(p.poll_range[1] for p in controller_registry.POLICIES.values()))
MAX_SWEEP_RUNS = 500
ECN_OFF = _OFF  # an ECN threshold's "no marking", for sweeps: ecn_threshold_packets = [20, "off"]
MAX_QUEUE_BYTES = 100_000_000  # as topologies.leafspine (which imports Mininet)
FORMAT_VERSION = 1


# --- field checks (incastlab.fields; the underscore names are this module's own use) -----

# the form LeafSpineTopo accepts, in ASCII digits only (\d takes any script's, which tc
# and netem do not)
_DELAY_RE = r"[0-9]+(\.[0-9]+)?(us|ms|s)"
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
    spines: int = _f(2, _int(1, naming.MAX_SPINES), "number of spine switches (leafspine)",
                     sweep=True)
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
    ecn_threshold_packets: int | str | None = _f(
        None, _optional(_or_off(_int(0, 100_000, unit="packets"), ECN_OFF)),
        "mark CE on ECN-capable packets that arrive at a switch egress queue holding more "
        "than this many packets (below topology.queue_packets; the hosts then negotiate "
        "ECN, net.ipv4.tcp_ecn = 1); default or 'off': no marking (a sweep can hold both, "
        "[20, 'off']). docs/ecn.md", sweep=True)
    ecn_threshold_bytes: int | str | None = _f(
        None, _optional(_or_off(_int(0, MAX_QUEUE_BYTES, unit="bytes"), ECN_OFF)),
        "as ecn_threshold_packets, in bytes, for queues of topology.queue_bytes",
        sweep=True)


@dataclass
class Routing:
    """``[routing]``: which spine each flow crosses."""

    policy: str = _f("ecmp", _choice(*POLICIES),
                     "single path, ECMP hashing, round-robin spread, adaptive "
                     "(least-loaded spine from port statistics), spray (every packet the "
                     "next spine), flowlet (a flow moves after a gap), app (your own "
                     "os-ken or Ryu apps: routing.app) or external (a controller you run: "
                     "routing.controller)", sweep=True)
    poll_interval_s: float = _f(0.2, _num(*POLL_RANGE, unit="s"),
                                "port-statistics polling interval; adaptive needs 0.1 to 0.5")
    idle_timeout_s: int = _f(controller_registry.DEFAULT_IDLE_TIMEOUT, _int(1, 65_535, unit="s"),
                             "spread, adaptive: idle timeout of per-flow entries")
    spine: int = _f(1, _int(1, naming.MAX_SPINES),
                    "single: the spine every inter-leaf flow crosses")
    flowlet_gap_us: int | None = _f(
        None, _optional(_int(*pathlabel.GAP_RANGE_US, unit="us")),
        "flowlet: a flow moves to the next spine when its packet follows the previous one "
        "by at least this; default: the fabric's base RTT (a full frame and its ACK over "
        "the 4 links of an inter-leaf path). docs/routing-below-the-flow.md", sweep=True)
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
    cls.__module__ = __package__  # the name it is imported by: incastlab.spec
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


def iter_fields(spec):
    """(``table.field``, value, field metadata) of every field of ``spec``, in schema
    order."""
    for table in TABLES:
        obj = getattr(spec, table)
        for f in dataclasses.fields(obj):
            yield f"{table}.{f.name}", getattr(obj, f.name), f.metadata


def set_field(spec, key: str, value) -> None:
    """Set the field ``table.field`` of ``spec`` to ``value``."""
    table, name = key.split(".")
    setattr(getattr(spec, table), name, value)


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

