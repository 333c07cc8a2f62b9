"""What a job kind is: the interface every job plugin implements, and the parts the
built-in jobs share.

A job kind (``ps``, ``ring``, ``incast``, ...) is one module in this package that owns,
in one place, everything that differs from one kind to another:

- its spec fields: a dataclass ``Fields`` of :func:`incastlab.fields.spec_field` fields,
  which become fields of the spec's ``[workload]`` table (validated, documented and
  swept like every other field) plus ``check()`` for the rules that involve more than
  one field;
- its roles and host counts (``roles()``), from which the spec places it on the fabric;
- its launch plan (``launches()``: which program runs in which host, with which
  arguments; the apps stay standalone programs);
- how its progress is counted (``progress_event``, ``expected_progress()``);
- its cost model (``bound()``: the lower bound of one iteration on the fabric it ran
  on) and what it adds to the analysis: ``tables()``, ``sections()``, ``plots()``,
  ``metrics()`` (headline numbers), ``findings()`` and ``cost_clause()`` (sentences),
  ``summary_blocks()`` (metrics.json blocks), ``trace_spans`` (its logged events in
  trace.json) and ``role_nouns`` (what the report calls its hosts).

The orchestrator (spec, runner) and the analysis loop over the registry in
:mod:`incastlab.jobs`; none of them branches on a kind's name. Adding a job is its
module, one registry line, a spec in ``specs/`` and its tests.

Nothing here imports Mininet, os-ken or torch. The analysis never imports this package:
the command resolves the job registry and hands it to ``analyse(run_dir, jobs=...)``;
the hooks below import the analysis modules they use inside themselves (so validating
a spec does not load matplotlib), and read the run through ``incastlab.analysis.runview``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from incastlab.analysis.stages import Section  # the report's section, one declaration
from incastlab.apps.commands import Endpoint
from incastlab.fields import did_you_mean, int_check, is_int, is_num, num_check, spec_field

if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Callable, Mapping

# Where rank 0 of a torch.distributed job hosts its rendezvous (the apps' --master);
# each job runs on hosts of its own, so one port serves every kind.
RENDEZVOUS_PORT = 29500


@dataclass(frozen=True)
class Launch:
    """One process of a job: the host it runs in, its argv (never through a shell), its
    rank in the job's own numbering, its role, and whether its log counts progress."""

    host: str
    argv: list[str]
    rank: int
    role: str
    counts_iterations: bool


@dataclass(frozen=True)
class RunFlag:
    """One option of a kind's ``incastlab run`` shortcut (commands/shortcut.py): the flag
    sets ``[workload]`` field ``field`` of a spec on the default fabric. A flag that
    ``selects`` asks for the kind (``--script``); the others only go with one."""

    flag: str
    field: str
    help: str
    metavar: str
    type: Callable[[str], Any] = str
    selects: bool = False


@dataclass(frozen=True)
class Roles:
    """How many hosts a job needs and what to call them in messages.

    ``servers`` are placed first, on ``workload.ps_leaf`` (a PS, an incast receiver);
    ``workers`` fill ``workload.worker_leaves``. ``count_field`` is the spec field that
    sets the number of workers (errors about too many hosts name it)."""

    servers: int
    workers: int
    worker_noun: str
    server_noun: str = ""
    count_field: str = "workload.workers"


class Job:
    """The interface of a job kind. Subclasses set the class attributes and override
    the methods; the defaults are what a job without that feature does."""

    kind: ClassVar[str]          # the registry key, `workload.kind`
    summary: ClassVar[str]       # one line, for `--help` and the schema
    Fields: ClassVar[type]       # dataclass of its [workload] fields (spec_field)
    progress_event: ClassVar[str] = "iteration"   # the JSONL event one step logs
    host_count_fields: ClassVar[tuple[str, ...]] = ("workers",)  # fields roles() reads
    logged_modes: ClassVar[tuple[str, ...]] = ()  # `mode` values its apps' start events log
    # Logged events of its own for the Perfetto trace, beyond those analysis.trace.LOGGED
    # draws (analysis.trace.LoggedSpan / LoggedInstant; passed as build_trace(spans=...)).
    trace_spans: ClassVar[tuple] = ()
    # The roles its apps log in their start events, as a reader calls them ("server":
    # "the parameter server"); the findings name a peer host by them.
    role_nouns: ClassVar[Mapping[str, str]] = {}
    # `incastlab run`'s shortcut for the kind's common case (commands/shortcut.py): its
    # flags, and the list field the words after `--` fill (None: they are refused).
    run_flags: ClassVar[tuple[RunFlag, ...]] = ()
    rest_field: ClassVar[str | None] = None

    # -- spec ------------------------------------------------------------------------
    def roles(self, w) -> Roles:
        """Host counts of workload table ``w`` (a single-valued point)."""
        raise NotImplementedError

    def check(self, w, ok: Callable[..., bool]) -> list[str]:
        """Problems involving more than one field of ``w`` (single-valued), each naming
        its field. ``ok(*keys)`` is False when one of those fields already failed its
        own check (then skip the rule)."""
        return []

    # -- launch ----------------------------------------------------------------------
    def launches(self, spec, ips: Mapping[str, str], out_dir: str) -> list[Launch]:
        """The processes to start, in start order. ``ips`` maps host name to address
        (from the fabric map); ``out_dir`` is where the apps write their JSONL logs."""
        raise NotImplementedError

    def expected_progress(self, w) -> int:
        """How many ``progress_event`` lines a counting process logs when done
        (progress display only)."""
        return int(w.iterations)

    def tolerates_lost_workers(self, w) -> int:
        """How many of its counting processes (workers) the job can lose mid-run, e.g.
        killed by a ``worker_kill`` event, and still complete (the runner then waits
        for the others instead of failing the run). A process that does not count
        iterations (a PS) is never tolerated. 0 by default: every worker is needed."""
        return 0

    # -- analysis: `analysis` is the run's analysis (analysis/report.py) --------------
    def bound(self, analysis) -> Any:
        """The lower bound of one iteration on this run's fabric (an
        ``analysis.alphabeta.Bound``), or None when the job has none."""
        return None

    def schedule_s(self, analysis, bound) -> float:
        """Seconds per iteration that the job's own schedule adds above ``bound`` on
        any network (e.g. a sync PS's push phase then pull phase, where a pipelined PS
        would overlap them); 0 by default."""
        return 0.0

    def attribution_rows(self, analysis):
        """``(rows, waits_on)``: the rows whose time is split into its causes (one per
        rank × iteration or round: t_start, t_end, host, compute_s, wait_s), and the
        hosts whose flows every row also waits on (``analysis.attribution``)."""
        return None, []

    def tables(self, analysis) -> dict:
        """Job-specific tables (name -> DataFrame) for the report and metrics.json."""
        return {}

    def sections(self, analysis, figs: Mapping[str, Any]) -> list[Section]:
        """Job-specific report sections, after the common ones."""
        return []

    def plots(self, analysis) -> dict[str, Callable]:
        """Job-specific figures: name -> function(path) -> path or None."""
        return {}

    def findings(self, analysis) -> list[str]:
        """Sentences the job adds to the findings at the top of the report (after where
        the worst queue was, the losses and what the network cost), e.g. a PS's time to
        the target accuracy. At most one or two: the findings are 3-5 sentences."""
        return []

    def metrics(self) -> list:
        """Job-specific headline metrics (``analysis.metrics.Metric`` declarations)."""
        return []

    def summary_blocks(self, analysis) -> dict:
        """Blocks the kind adds to metrics.json beside the headline (e.g. a ring's
        ``ring`` block). Asked of every kind in the registry, whatever ran, so that every
        metrics.json holds every key (None where this kind did not run)."""
        return {}

    def cost_clause(self, analysis) -> str | None:
        """A clause on what the run cost, in the job's own terms, for the findings when
        the attribution is not available (e.g. "the all-reduce took 1.2× its bound of
        0.53 s"); appended to the iteration times, or the whole sentence when the job
        logs none. None: nothing to add."""
        return None


# --- parts the training jobs share ------------------------------------------------------

@dataclass
class Straggler:
    """A slow worker: its compute time is multiplied by ``factor`` (>= 1). ``rank`` is
    the worker's torch.distributed rank as the job launches it (``Placement.ranks``,
    servers first: a PS job's workers are ranks shards..shards + workers - 1), the rank
    `incastlab check`, the logs, the report and the trace show."""

    rank: int
    factor: float


def stragglers_check(v) -> str | None:
    what = "a list of {rank = integer >= 0, factor = number >= 1} tables"
    if not isinstance(v, list):
        return f"{v!r} is not {what}"
    problems = []
    for i, item in enumerate(v):
        if isinstance(item, Straggler):
            item = {"rank": item.rank, "factor": item.factor}
        if not isinstance(item, dict):
            problems.append(f"[{i}]: {item!r} is not a table {{rank = ..., factor = ...}}")
            continue
        for key in item:
            if key not in ("rank", "factor"):
                hint = did_you_mean(key, ("rank", "factor"))
                problems.append(f"[{i}].{key}: unknown key{hint}")
        if "rank" not in item:
            problems.append(f"[{i}].rank: missing; an integer >= 0 (a worker's rank)")
        elif not (is_int(item["rank"]) and item["rank"] >= 0):
            problems.append(f"[{i}].rank: {item['rank']!r} is not an integer >= 0")
        if "factor" not in item:
            problems.append(f"[{i}].factor: missing; a number >= 1 (compute-time multiplier)")
        elif not (is_num(item["factor"]) and 1 <= item["factor"] < math.inf):
            finite = " finite" if item["factor"] == math.inf else ""
            problems.append(f"[{i}].factor: {item['factor']!r} is not a{finite} number >= 1 "
                            "(compute-time multiplier)")
    ranks = [_rank_of(item) for item in v]
    for rank in sorted({r for r in ranks if is_int(r) and ranks.count(r) > 1}):
        problems.append(f": rank {rank} is listed more than once")
    # Several problems, one per line, each continuing "workload.stragglers".
    return "\n".join(problems) or None


def _rank_of(item):
    if isinstance(item, Straggler):
        return item.rank
    return item.get("rank") if isinstance(item, dict) else None


def straggler_problems(w, count: int, ok: Callable[..., bool], count_key: str,
                       first: int = 0, servers: str = "") -> list[str]:
    """Every straggler's rank must be a worker's rank of this job: ``first`` (the
    servers' count; they are ranks 0..first - 1, named ``servers``) to first + count - 1."""
    if not ok("workload.stragglers", count_key):
        return []
    last = first + count - 1
    where = "" if not first else f" (rank 0 is the {servers})" if first == 1 else \
        f" (ranks 0..{first - 1} are the {servers})"
    return [f"workload.stragglers[{i}].rank: {_rank_of(s)!r} is not a worker rank from "
            f"{first} to {last}{where}" for i, s in enumerate(w.stragglers)
            if not first <= _rank_of(s) <= last]


@dataclass
class TrainingFields:
    """Fields every training job (PS, ring, ...) has: the model, the steps, the SGD
    learning rate and the stragglers. A job's ``Fields`` inherits them."""

    workers: int = spec_field(3, int_check(1, 1000),
                              "training workers (ps) or ring ranks (ring)", sweep=True)
    model_size: int = spec_field(250_000, int_check(10_000, 10_000_000, unit="parameters"),
                                 "model parameter count (float32: 4 bytes each)", sweep=True)
    iterations: int = spec_field(10, int_check(1, 100_000), "training iterations per worker")
    batch_size: int = spec_field(32, int_check(1, 65_536), "samples per worker per iteration")
    lr: float = spec_field(0.5, num_check(0, 10, low_open=True),
                           "SGD learning rate (no momentum)")
    stragglers: list[Straggler] = spec_field(
        [], stragglers_check, "slow workers: [{rank = the worker's rank as `incastlab "
        "check` lists it (torch.distributed's, servers first: a PS job's first worker is "
        "rank shards), factor = compute-time multiplier}]", list_valued=True)


def training_options(spec) -> dict:
    """The options every training app takes, from the spec."""
    w = spec.workload
    return {"timeout": f"{w.timeout_s:g}", "iterations": w.iterations,
            "model_size": f"{w.model_size / 1e6:.6g}",  # the apps take millions
            "batch_size": w.batch_size, "lr": f"{w.lr:g}", "seed": spec.run.seed}


def endpoints(ips: Mapping[str, str], hosts) -> list[Endpoint]:
    """The apps' view of hosts: address and the interface gloo must use."""
    return [Endpoint(ips[h], f"{h}-eth0") for h in hosts]
