"""Headline metrics, declared once.

Every headline number of a run is one `Metric` in `HEADLINE`: its metrics.json key
(`name`), a short `label`, its `unit`, a one-line `meaning` a student can follow, the
`inputs` it needs (keys of `Analysis.missing`, each standing for run-directory files,
see `INPUTS`), how it is computed (`compute`, a function of the `Analysis`) and how it
is shown (`fmt`). Everything that shows headline numbers reads this list:
metrics.json (`headline`, `headline_na`), the headline table of report.html (value,
unit and meaning side by side) and summary.md, `incastlab compare` (`compared()`,
`plotted()`) and the CLI's printout (`for_cli()`).

A metric whose inputs are missing or damaged is n/a (`None` in metrics.json), and
`headline_na` says why, from `Analysis.missing`; one that its job kind does not measure
(incast goodput in a parameter-server run) is n/a with that reason, and the report and
CLI leave it out.

Adding metrics. One that every job with a cost model has (the bound, the network's
cost over it) goes into `HEADLINE` with `kinds=()`, computed from `a.metrics["cost"]`
(analysis/network_cost.py) and n/a where the job has none. One that only a job kind has is
returned by that job's `Job.metrics()` (e.g. incastlab/jobs/ring.py's
`allreduce_over_bound`): they are collected from the job registry the command hands in
(`job_metrics(jobs)`; the analysis never imports the orchestrator), one that names no
`kinds` belongs to the job that declares it, and several jobs may return the same
Metric (its kinds are merged). `register(*metrics, kind=None)` adds declarations from
anywhere else (a test, a user's script). Names are unique: a second, different
declaration of a name raises ValueError. `metrics_for(kind, jobs)` is the list that
applies to one job kind (`kinds=()`: every kind); `all_metrics(jobs)` is every declared
metric, whose keys metrics.json always holds, so files of different job kinds compare
key by key.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from .jobkind import logs_iterations, run_kind  # noqa: F401 - run_kind: metrics' face

__all__ = ["COUNT_UNITS", "HEADLINE", "INPUTS", "LATENCY", "TRAINING", "Metric", "Reading",
           "aggregate_mbps", "all_metrics", "by_name", "compared", "count", "evaluate",
           "for_cli", "from_json", "headline", "job_metrics", "mean_of",
           "metrics_for", "not_available", "plotted", "register", "run_kind", "shown",
           "significant", "unregister"]

# Analysis.missing keys -> the run-directory inputs they stand for (shown in the report)
INPUTS = {
    "workers": "workers/*.jsonl",
    "queues": "queues.csv",
    "counters": "counters/*.json (nstat before/after)",
    "pcap": "pcap/*.pcap",
    "flows": "TCP payload in the captures",
    "losses": "flows captured at both ends",
    "fabric": "fabric.json",
}

COUNT_UNITS = {"packets", "segments", "firings", "rounds", "episodes"}


def significant(v: float, nd: int = 3) -> str:
    """`nd` significant digits; large values in full with thousands separators."""
    return f"{v:.{nd}g}" if abs(v) < 1e4 else f"{v:,.0f}"


def count(v: float) -> str:
    """A count: a whole number with thousands separators (metrics.json stores floats)."""
    return f"{v:,.0f}"


@dataclass(frozen=True)
class Metric:
    """One headline metric. `compute(a)` returns a number or None (not measurable);
    `absent` (text, or a function of the Analysis) says why it is None when no input is
    missing; `kinds` are the job kinds that measure it (empty: all); `cli`/`plot`/
    `compare` select it for the CLI printout, compare's plots and compare's table."""
    name: str
    label: str
    unit: str
    meaning: str
    compute: Callable[[Any], float | int | None]
    inputs: tuple[str, ...] = ()
    absent: str | Callable[[Any], str | None] = "not measured in this run"
    kinds: tuple[str, ...] = ()
    fmt: Callable[[float], str] | None = None
    cli: bool = False
    plot: bool = False
    compare: bool = True
    floor: bool = False  # a count: from an input truncated at t, a lower bound (inputs.py)
    # a job's metric shown right after this built-in one (metrics.json's key order is what
    # users' scripts and compare read, so a metric that moved into its job keeps its place)
    after: str | None = None

    def applies(self, kind: str | None, jobs: Mapping | None = None) -> bool:
        """Whether a run of job `kind` measures this metric (unknown kind: yes).
        `kinds` may hold TRAINING: every job kind of `jobs` (the registry) whose workers
        log `iteration` events (its `progress_event`), whatever it is called; without
        a registry, whether a kind logs them is unknown: yes."""
        if not self.kinds or kind is None or kind in self.kinds:
            return True
        return TRAINING in self.kinds and (not jobs or logs_iterations(jobs.get(kind)))

    def text(self, value) -> str:
        """The value as shown in tables ('n/a' for None), without the unit."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "n/a"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return str(value)
        if self.fmt:
            return self.fmt(value)
        return count(value) if self.unit in COUNT_UNITS else significant(float(value))

    def text_with_unit(self, value) -> str:
        """'6 packets', '1 packet', '0.139 s'; ratios and fractions have no unit word."""
        t = self.text(value)
        if t == "n/a" or not self.unit or self.unit in ("ratio", "fraction"):
            return t
        unit = self.unit[:-1] if self.unit in COUNT_UNITS and t == "1" else self.unit
        return f"{t} {unit}"

    def input_files(self) -> str:
        return ", ".join(INPUTS.get(k, k) for k in self.inputs) or "derived tables"


@dataclass(frozen=True)
class Reading:
    """A metric's value in one run, or None with the reason."""
    metric: Metric
    value: float | int | None
    reason: str | None = None

    @property
    def text(self) -> str:
        return self.metric.text(self.value)


# ---- computations (each reads what report.analyse put into the Analysis) -------------

def _get(a, section: str, key: str):
    return (a.metrics.get(section) or {}).get(key)


def _kernel(name: str):
    return lambda a: ((a.metrics.get("reconciliation") or {}).get("kernel") or {}).get(name)


def mean_of(table: str, col: str):
    """A metric's compute: the mean of `col` in the Analysis table `table` (None where
    the table or its numbers are missing)."""
    def f(a):
        t = a.tables.get(table)
        if t is None or not len(t) or col not in t:
            return None
        v = pd.to_numeric(t[col], errors="coerce").dropna()
        return float(v.mean()) if len(v) else None
    return f


def aggregate_mbps(fsum: pd.DataFrame) -> float | None:
    """All flows' unique payload bytes over the span from the first flow's start to the
    last flow's last data packet (Mbit/s)."""
    if fsum is None or fsum.empty:
        return None
    span = float(fsum["last_data"].max() - fsum["start"].min())
    return float(fsum["bytes"].sum()) * 8 / span / 1e6 if span > 0 else None


def _incast_episodes(a):
    e = a.tables.get("episodes")
    return int(e["incast"].sum()) if e is not None and len(e) else 0


def _cost(key: str):
    """A number from metrics.json's `cost` (analysis/network_cost.py), None where the run's
    job has no cost available."""
    def f(a):
        c = a.metrics.get("cost") or {}
        return c.get(key) if c.get("available") else None
    return f


def _cost_absent(a):
    return (a.metrics.get("cost") or {}).get("reason") or "the job has no cost model"


def _balance_note(a):
    return (a.metrics.get("balance") or {}).get("note") or \
        "no leaf-spine links or no byte counters on them"


TRAINING = "*training"   # in Metric.kinds: every job that logs iteration events


_ITER = (TRAINING,)
HEADLINE: list[Metric] = [
    Metric("iteration_time_mean_s", "mean iteration time", "s",
           "Wall-clock time of one worker iteration (compute + communication + waiting), "
           "mean over all workers and iterations.",
           lambda a: _get(a, "training", "mean_s"), ("workers",),
           "no iteration events in the worker logs", _ITER, cli=True, plot=True),
    Metric("iteration_time_median_s", "median iteration time", "s",
           "Half of the worker iterations took less than this.",
           lambda a: _get(a, "training", "median_s"), ("workers",),
           "no iteration events in the worker logs", _ITER),
    Metric("iteration_time_p95_s", "95th-percentile iteration time", "s",
           "95 % of worker iterations took less than this: the slow tail that timeouts "
           "(RTOs) and stragglers make.",
           lambda a: _get(a, "training", "p95_s"), ("workers",),
           "no iteration events in the worker logs", _ITER),
    Metric("step_time_mean_s", "mean synchronous step time", "s",
           "From the first worker starting iteration i to the last one finishing it, "
           "mean over iterations: a straggler's delay counts for everybody.",
           mean_of("steps", "step_s"), ("workers",),
           "no iteration events in the worker logs", _ITER),
    Metric("tc_drops", "queue drops (tc)", "packets",
           "Packets a full switch egress queue refused, as Linux's qdisc counted them "
           "(sum over switch ports). On OVS's userspace datapath this counts refusals, "
           "0-2 per lost packet: read it beside the capture losses.",
           lambda a: _get(a, "reconciliation", "tc_drops"), ("queues",), cli=True,
           floor=True),
    Metric("capture_losses", "losses seen in captures", "packets",
           "Packets the sender-side capture holds and the receiver-side capture never saw: "
           "packets really lost inside the network.",
           lambda a: _get(a, "reconciliation", "capture_losses"), ("pcap", "flows", "losses"),
           cli=True, plot=True),
    Metric("retransmissions", "TCP retransmissions", "packets",
           "Data packets TCP sent a second time (seen in the captures), whatever the "
           "trigger: duplicate ACKs, a timeout or a tail-loss probe.",
           lambda a: _get(a, "reconciliation", "capture_retrans"), ("pcap", "flows"),
           cli=True, plot=True),
    Metric("kernel_retrans_segs", "retransmitted segments (kernel)", "segments",
           "Segments the hosts' kernels say they retransmitted (TcpRetransSegs from nstat); "
           "should match the captures' retransmissions.",
           _kernel("TcpRetransSegs"), ("counters",)),
    Metric("rtos", "retransmission timeouts", "firings",
           "Retransmission timeouts (RTOs) in the captures: a sender heard nothing for the "
           "RTO threshold (about 200 ms by default) and resent; the costly kind of "
           "recovery, a stall of the whole flow.",
           lambda a: _get(a, "reconciliation", "capture_rto"), ("pcap", "flows"),
           cli=True, plot=True),
    Metric("kernel_timeouts", "retransmission timeouts (kernel)", "firings",
           "RTO timer firings the hosts' kernels counted (TCPTimeouts from nstat).",
           _kernel("TcpExtTCPTimeouts"), ("counters",)),
    Metric("throughput_mbps", "aggregate throughput", "Mbit/s",
           "All flows' payload bytes (retransmissions not counted again) over the time "
           "from the first flow's start to the last data packet.",
           lambda a: aggregate_mbps(a.tables.get("flows")), ("pcap", "flows"), plot=True),
    Metric("incast_episodes", "incast episodes", "episodes",
           "Intervals in which a switch queue was full (>= 90 % of its limit) or dropping "
           "while two or more senders sent through it to one receiver.",
           _incast_episodes, ("queues", "pcap", "fabric")),
    Metric("spine_max_mean", "spine balance (max/mean bytes)", "ratio",
           "Bytes on the busiest leaf-spine link direction over the mean of all of them (up "
           "and down, idle ones included): 1.0 = every link carried the same; traffic in "
           "one direction only makes at least 2.",
           lambda a: _get(a, "balance", "max_mean_all"), ("fabric", "queues"),
           _balance_note),
    Metric("final_accuracy", "final held-out accuracy", "fraction",
           "Share of held-out samples the trained model classifies correctly at the end, "
           "mean over workers.",
           mean_of("finals", "accuracy"), ("workers",), "no final event in the logs",
           _ITER, cli=True),
    Metric("final_loss", "final training loss", "",
           "Training loss (cross-entropy) at the end, mean over workers.",
           mean_of("finals", "loss"), ("workers",), "no final event in the logs", _ITER),
    # What the network cost the job: every job with a cost model (analysis/network_cost.py)
    Metric("bound_s", "bound of one iteration", "s",
           "The least time one iteration's communication can take on this fabric, from "
           "its bytes, link rates, placement and framing (the job's own bound, "
           "incastlab/jobs/<kind>_bound.py).",
           _cost("bound_s"), ("workers", "fabric"), _cost_absent, cli=True),
    Metric("comm_over_bound", "communication over its bound", "ratio",
           "(measured iteration time - compute) / the bound, mean over iterations: 1.0 = "
           "the communication ran at the bound.",
           _cost("ratio"), ("workers", "fabric"), _cost_absent, cli=True, plot=True),
    Metric("network_cost_s", "network's cost over the bound", "s",
           "Per iteration: measured - compute - bound - the job's own schedule - straggler "
           "wait = RTO stalls + loss recovery + what stays unexplained.",
           _cost("network_cost_s"), ("workers", "fabric"), _cost_absent, cli=True,
           plot=True),
    Metric("rto_stall_s", "RTO stall per iteration", "s",
           "Per iteration: time a flow the iteration waited on sat silent until its "
           "retransmission timer fired.",
           _cost("rto_stall_s"), ("workers", "fabric", "pcap", "flows"), _cost_absent,
           cli=True),
    Metric("loss_recovery_s", "loss recovery per iteration", "s",
           "Per iteration: further time above the bound while a flow it waited on was in "
           "fast/SACK recovery (an upper limit: a recovering flow keeps sending).",
           _cost("loss_recovery_s"), ("workers", "fabric", "pcap", "flows"), _cost_absent),
]

# Latency under load (analysis/latency.py), every job kind: built in like HEADLINE, a list
# of its own so that HEADLINE's keys stay as they were
LATENCY: list[Metric] = [
    Metric("rtt_p50_ms", "median RTT under load", "ms",
           "Round-trip time of data segments at their sender's capture (data -> the ACK "
           "that first covers it; Karn's rule: none from retransmitted data), median over "
           "all flows' samples.",
           lambda a: _get(a, "latency", "rtt_p50_ms"), ("pcap", "flows"),
           "no RTT sample (no data acknowledged without a retransmission)"),
    Metric("rtt_p99_ms", "99th-percentile RTT", "ms",
           "99 % of the RTT samples (all flows) were shorter: the queueing a loaded path "
           "adds, at its worst.",
           lambda a: _get(a, "latency", "rtt_p99_ms"), ("pcap", "flows"),
           "no RTT sample (no data acknowledged without a retransmission)", plot=True),
    Metric("queue_delay_p99_ms", "99th-percentile queueing delay", "ms",
           "Switch egress queues: backlog bytes x 8 / the port's rate at each queue "
           "sample, weighted by the packets the port sent; 99 % of packets through any "
           "port met less.",
           lambda a: _get(a, "latency", "queue_delay_p99_ms"), ("queues", "fabric"),
           "no packets through a sampled switch port", plot=True),
]

_REGISTERED: list[Metric] = []


def register(*metrics: Metric, kind: str | None = None) -> None:
    """Declare more headline metrics; names must be new. `kind`: the job kind that
    declares them (a job's `metrics()`), given to those that name no `kinds` of their
    own. Metrics every job kind has (an iteration's bound, say) are registered once
    with `kinds=()`, not once per job."""
    taken = {m.name for m in all_metrics()}
    for m in metrics:
        if m.name in taken:
            raise ValueError(f"headline metric {m.name!r} is declared twice")
        taken.add(m.name)
        _REGISTERED.append(replace(m, kinds=(kind,)) if kind and not m.kinds else m)


def unregister(*names: str) -> None:
    """Remove registered metrics by name (a job leaving the registry; tests). The
    built-in list cannot be changed."""
    _REGISTERED[:] = [m for m in _REGISTERED if m.name not in names]


def all_metrics(jobs: Mapping | None = None) -> list[Metric]:
    """Every declared metric: the built-in lists (HEADLINE, LATENCY), then those
    registered here, then each job kind's of `jobs` (the registry the command hands
    in; None: none), in that order."""
    ordered = HEADLINE + LATENCY + _REGISTERED
    placed: dict[str, list[Metric]] = {}
    rest = []
    for m in job_metrics(jobs):
        if m.after in {b.name for b in ordered}:
            placed.setdefault(m.after, []).append(m)
        else:
            rest.append(m)
    return [x for m in ordered for x in (m, *placed.get(m.name, ()))] + rest


def job_metrics(jobs: Mapping | None) -> list[Metric]:
    """The metrics the job kinds of `jobs` declare (`Job.metrics()`); one without
    `kinds` belongs to the job that declares it. Jobs may share one declaration (the
    same Metric): its kinds are merged. Two different declarations of one name, or a
    job metric with a built-in or registered name, raise ValueError."""
    taken = {m.name for m in HEADLINE + LATENCY + _REGISTERED}
    out: dict[str, tuple[Metric, str]] = {}
    for kind, job in (jobs or {}).items():
        for m in job.metrics():
            if m.name in taken:
                raise ValueError(f"job {kind!r} declares headline metric {m.name!r}, "
                                 "which is declared already")
            mine = m if m.kinds else replace(m, kinds=(kind,))
            if m.name in out:
                first, first_kind = out[m.name]
                if replace(first, kinds=()) != replace(m, kinds=()):
                    raise ValueError(f"jobs {first_kind!r} and {kind!r} declare headline "
                                     f"metric {m.name!r} differently")
                mine = replace(first, kinds=tuple(dict.fromkeys(first.kinds + mine.kinds)))
                kind = first_kind
            out[m.name] = (mine, kind)
    return [m for m, _ in out.values()]


def metrics_for(kind: str | None, jobs: Mapping | None = None) -> list[Metric]:
    """The metrics a run of job `kind` ('ps', 'ring', 'incast', ...) measures."""
    return [m for m in all_metrics(jobs) if m.applies(kind, jobs)]


def by_name(name: str, jobs: Mapping | None = None) -> Metric:
    for m in all_metrics(jobs):
        if m.name == name:
            return m
    raise KeyError(name)


def compared(jobs: Mapping | None = None) -> list[Metric]:
    """Metrics in `incastlab compare`'s table (mean and 95 % CI per group)."""
    return [m for m in all_metrics(jobs) if m.compare]


def plotted(jobs: Mapping | None = None) -> list[Metric]:
    """Metrics `incastlab compare` draws."""
    return [m for m in all_metrics(jobs) if m.plot]


def for_cli(jobs: Mapping | None = None) -> list[Metric]:
    """Metrics the terminal printout shows after each run."""
    return [m for m in all_metrics(jobs) if m.cli]


def _number(v):
    """A plain int/float for JSON (NaN/inf and non-numbers become None)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if math.isnan(f) or math.isinf(f):
        return None
    return int(v) if isinstance(v, int) or (hasattr(v, "dtype") and v.dtype.kind in "iu") \
        else f


def evaluate(a, kind: str | None = None) -> list[Reading]:
    """Compute every declared metric on Analysis `a` (its tables and the non-headline
    parts of a.metrics must be in place). A metric that raises is n/a and the error is
    added to a.problems."""
    out = []
    jobs = getattr(a, "jobs", None)
    for m in all_metrics(jobs):
        gone = [k for k in m.inputs if k in a.missing]
        if gone:  # never a number from a missing or damaged input; a count's floor at most
            from .inputs import at_least
            out.append(Reading(m, None, "; ".join(a.missing[k] for k in gone)
                               + at_least(a, m, gone)))
            continue
        try:
            value = _number(m.compute(a))
        except Exception as exc:  # noqa: BLE001 - one metric's bug must not cost the rest
            a.problems.append(f"metric {m.name} could not be computed "
                              f"({type(exc).__name__}: {exc})")
            out.append(Reading(m, None, f"could not be computed ({type(exc).__name__})"))
            continue
        if value is not None and m.unit in COUNT_UNITS and float(value).is_integer():
            value = int(value)  # a count is an integer in metrics.json (6, not 6.0)
        reason = None
        if value is None:
            if not m.applies(kind, jobs):
                reason = f"not measured in {kind} runs"
            else:
                reason = m.absent(a) if callable(m.absent) else m.absent
        out.append(Reading(m, value, reason))
    return out


def headline(readings: Iterable[Reading]) -> dict:
    """{name: value} for metrics.json's `headline`."""
    return {r.metric.name: r.value for r in readings}


def not_available(readings: Iterable[Reading]) -> dict:
    """{name: why it is None} for metrics.json's `headline_na`."""
    return {r.metric.name: r.reason for r in readings if r.value is None}


def from_json(metrics: dict, jobs: Mapping | None = None) -> list[Reading]:
    """Readings from a written metrics.json (the CLI and compare read files) of every
    metric declared with `jobs`."""
    head = metrics.get("headline") or {}
    na = metrics.get("headline_na") or {}
    return [Reading(m, _number(head.get(m.name)),
                    None if head.get(m.name) is not None
                    else na.get(m.name, "not in this metrics.json"))
            for m in all_metrics(jobs)]


def shown(readings: Iterable[Reading], kind: str | None,
          jobs: Mapping | None = None) -> list[Reading]:
    """The readings a report shows for a run of `kind`: those its kind measures, and
    any other that has a value."""
    return [r for r in readings if r.value is not None or r.metric.applies(kind, jobs)]
