"""The report as declared stages.

A report section is a :class:`Section` (title, HTML, Markdown). A :class:`Stage` is
one part of the report: its ``name``, the ``inputs`` it reads (keys of
``Analysis.tables`` / ``Analysis.metrics``), an optional ``compute`` that adds its tables
and metrics to the analysis, and ``render``, which turns them into sections. Each stage
is declared once in :data:`STAGES` (the core sections in analysis/sections.py; latency,
failover and multi-job register theirs with :func:`register`), and both halves of the
report loop over that list: ``report.analyse`` runs every ``compute`` in list order,
``report.build_report`` every ``render`` in list order, then places each stage's
sections after the stage named by its ``after`` (the page's order; None: at the end).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["STAGES", "Section", "Stage", "compute_all", "figures_all", "page_order",
           "register", "render_all"]


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
    render: Callable[[Any, dict], list] | None = None
    compute: Callable[[Any], None] | None = None
    figures: Callable[[Any, Any], dict] | None = None  # (analysis, plot dir) -> {name: path}
    after: str | None = None  # the stage whose sections this one's follow on the page
    what: str = ""  # how a failure of its compute is named among the run's problems


STAGES: list[Stage] = []


def register(stage: Stage) -> Stage:
    """Add ``stage`` to the report (its name must be new; ``after`` must name a stage
    declared before it)."""
    names = {s.name for s in STAGES}
    if stage.name in names:
        raise ValueError(f"report stage {stage.name!r} is declared twice")
    if stage.after is not None and stage.after not in names:
        raise ValueError(f"report stage {stage.name!r}: no stage {stage.after!r} before it")
    STAGES.append(stage)
    return stage


def compute_all(a, guard: Callable, stages: list[Stage] | None = None) -> None:
    """Every stage's ``compute`` in list order, each through ``guard(what, fn)`` (a
    failure is one of the run's problems, not a lost report)."""
    for s in STAGES if stages is None else stages:
        if s.compute is not None:
            guard(s.what or s.name, lambda s=s: s.compute(a))


def figures_all(a, plot_dir, stages: list[Stage] | None = None) -> dict:
    """Every stage's figures, in list order: {figure name: path or None}."""
    out: dict = {}
    for s in STAGES if stages is None else stages:
        if s.figures is not None:
            out.update(s.figures(a, plot_dir))
    return out


def render_all(a, figs: dict, stages: list[Stage] | None = None) -> list[Section]:
    """Every stage's sections, rendered in list order and returned in page order."""
    stages = STAGES if stages is None else stages
    rendered = {s.name: [Section(*sec) for sec in s.render(a, figs)] if s.render else []
                for s in stages}
    return [sec for name in page_order(stages) for sec in rendered[name]]


def page_order(stages: list[Stage] | None = None) -> list[str]:
    """Stage names in the order the page shows them: the list's order, each stage with
    ``after`` moved to just behind that stage (and behind those placed there before)."""
    stages = STAGES if stages is None else stages
    order = [s.name for s in stages if s.after is None]
    for s in stages:
        if s.after is not None:
            at = order.index(s.after) + 1
            while at < len(order) and any(t.name == order[at] and t.after == s.after
                                          for t in stages):
                at += 1
            order.insert(at, s.name)
    return order
