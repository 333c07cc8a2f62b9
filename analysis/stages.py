"""The report as declared stages.

A report section is a :class:`Section` (title, HTML, Markdown). A :class:`Stage` is one
part of the report: its ``name``, the ``inputs`` it reads (keys of ``Analysis.tables``
and ``Analysis.metrics``, or run-directory files), an optional ``compute`` whose result
is ``Analysis.tables[name]`` (``metrics`` of it, when not None, becomes
``metrics.json[name]``), its ``figures`` and ``render``, which turns its tables into
sections. :func:`declared` is the one list: the core sections (sections.py), then the
stages fidelity, failover, latency, multi-job, ECN and reordering declare in their own
modules, then any added with :func:`register`. ``report.analyse`` runs every ``compute``
in list order, ``report.build_report`` every ``figures`` and ``render`` in list order,
and places each stage's sections after the stage its ``after`` names (the page's order;
None: in list order), as Flent's declared PLOTS feed every output.

A stage that reads packets declares ``reduce``: reading.py makes its reducer before the
TCP analysis's one pass over the captures and calls ``reducer.add(packets, flows,
flow_summary, retrans)`` on every group of connections (chunked.analyse_tcp: a
connection's packets, both ways and at every capture, are all in one group); the
reducer is then ``Analysis.captured[name]`` (or the exception it raised), for the
stage's ``compute``. Only what it keeps stays in memory, never the run's packets.

Nothing here imports pandas or matplotlib: the job plugins import :class:`Section`
when a spec is validated.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["Section", "Stage", "compute_all", "declared", "figures_all", "page_order",
           "register", "render_all", "unregister"]


class Section(NamedTuple):
    """A report section: its title, its HTML and its Markdown."""

    title: str
    html: str
    markdown: str


@dataclass(frozen=True)
class Stage:
    """One declared part of the report (see the module docstring)."""

    name: str
    inputs: tuple[str, ...]
    render: Callable[[Any, dict], list] | None = None  # (analysis, figures) -> sections
    compute: Callable[[Any], dict] | None = None  # analysis -> tables[name]
    metrics: Callable[[dict], dict | None] | None = None  # tables[name] -> metrics[name]
    figures: Callable[[Any, Any], dict] | None = None  # (analysis, plot dir) -> {name: path}
    after: str | None = None  # the stage whose sections this one's follow on the page
    what: str = ""  # how a failure of its compute is named among the run's problems
    # (run_dir, fabric, manifest) -> a reducer of the one pass over the captures, or None
    # when the run has nothing for it; see the module docstring
    reduce: Callable[[Any, Any, Any], Any] | None = None


_REGISTERED: list[Stage] = []


def declared() -> list[Stage]:
    """Every stage of the report, in list order (see the module docstring)."""
    from . import (ecn, failoverreport, fidelityreport, latencyreport, multijob, queuecdf,
                   reorderreport, sections)

    return [*sections.STAGES, fidelityreport.STAGE, failoverreport.STAGE, latencyreport.STAGE,
            multijob.STAGE, queuecdf.STAGE, ecn.STAGE, reorderreport.STAGE, *_REGISTERED]


def register(stage: Stage) -> Stage:
    """Add a stage after the declared ones (a test, a user's script); its name must be
    new and ``after`` must name a stage before it."""
    names = {s.name for s in declared()}
    if stage.name in names:
        raise ValueError(f"report stage {stage.name!r} is declared twice")
    if stage.after is not None and stage.after not in names:
        raise ValueError(f"report stage {stage.name!r}: no stage {stage.after!r} before it")
    _REGISTERED.append(stage)
    return stage


def unregister(name: str) -> None:
    """Remove a stage added with :func:`register`."""
    _REGISTERED[:] = [s for s in _REGISTERED if s.name != name]


def compute_all(a, guard: Callable, stages: list[Stage]) -> None:
    """Every stage's ``compute`` in list order: ``a.tables[name]`` is its result, or {}
    when it fails (``guard(what, fn, fallback)`` makes that one of the run's problems);
    ``a.metrics[name]`` its ``metrics`` of that, when not None."""
    from .reading import jsonable

    for s in stages:
        if s.compute is None:
            continue
        a.tables[s.name] = guard(s.what or s.name, lambda s=s: s.compute(a), dict)
        got = s.metrics(a.tables[s.name]) if s.metrics is not None else None
        if got is not None:
            a.metrics[s.name] = jsonable(got)


def figures_all(a, plot_dir, stages: list[Stage]) -> dict:
    """Every stage's figures, in list order: {figure name: path, HTML or None}."""
    out: dict = {}
    for s in stages:
        if s.figures is not None:
            out.update(s.figures(a, plot_dir))
    return out


def render_all(a, figs: dict, stages: list[Stage]) -> list[Section]:
    """Every stage's sections, rendered in list order and returned in page order."""
    rendered = {s.name: [Section(*sec) for sec in s.render(a, figs)] if s.render else []
                for s in stages}
    return [sec for name in page_order(stages) for sec in rendered[name]]


def page_order(stages: list[Stage]) -> list[str]:
    """Stage names in the order the page shows them: the list's order, each stage with
    ``after`` moved to just behind that stage (and behind those placed there before)."""
    order = [s.name for s in stages if s.after is None]
    for s in stages:
        if s.after is not None:
            at = order.index(s.after) + 1
            while at < len(order) and any(t.name == order[at] and t.after == s.after
                                          for t in stages):
                at += 1
            order.insert(at, s.name)
    return order
