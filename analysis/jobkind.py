"""Which job kind a run is, from the job registry the command hands in (kind -> Job,
incastlab.jobs.JOBS; the analysis never imports it): what the workers logged, else what
the spec asked for."""
from __future__ import annotations

from collections.abc import Mapping

__all__ = ["kind_of_mode", "logs_iterations", "run_kind"]


def logs_iterations(job) -> bool:
    """Whether `job` (a registry entry, or None) counts its progress in `iteration`
    events."""
    return job is not None and job.progress_event == "iteration"


def kind_of_mode(mode: str | None, jobs: Mapping | None) -> str | None:
    """The kind of `jobs` whose apps log `mode` in their start events, or None."""
    return next((kind for kind, job in (jobs or {}).items() if mode in job.logged_modes),
                None)


def run_kind(mode: str | None, spec: dict | None, jobs: Mapping | None = None) -> str | None:
    """The job kind of a run, as analysis/network_cost.py finds the run's job: the kind of
    `jobs` whose apps log `mode` in their start events (what ran), else the spec's
    `workload.kind` (what was asked), else None (unknown)."""
    kind = kind_of_mode(mode, jobs) if mode else None
    if kind is None:
        kind = ((spec or {}).get("workload") or {}).get("kind")
    return kind if isinstance(kind, str) and kind else None
