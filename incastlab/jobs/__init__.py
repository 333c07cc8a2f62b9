"""The job kinds by name: one registry, like the routing policies' (controller/registry).

``JOBS["ring"]`` is the ring all-reduce job object; its module owns its spec fields,
placement, launch plan, progress, cost model and report sections (see
:mod:`incastlab.jobs.base` for the interface). The spec's ``[workload]`` table is built
from these jobs' fields, the runner starts what ``launches()`` plans, and the analysis
asks the run's job for its bound and sections: nothing else names a kind.

Adding a job: write its module (a :class:`~incastlab.jobs.base.Job` subclass), add one
line below, ship a spec in ``specs/`` and its tests. A job defined elsewhere (a test, a
user's experiment) plugs in with :func:`register` and leaves with :func:`unregister`.
"""
from __future__ import annotations

from collections.abc import Callable

from incastlab.jobs.base import Job, Launch, Roles, Section, Straggler
from incastlab.jobs.incast import IncastJob
from incastlab.jobs.moe import MoeJob
from incastlab.jobs.pipeline import PipelineJob
from incastlab.jobs.ps import PsJob
from incastlab.jobs.ring import RingJob
from incastlab.jobs.script import ScriptJob
from incastlab.jobs.tensor import TensorJob

__all__ = ["JOBS", "Job", "Launch", "Roles", "Section", "Straggler", "job_for",
           "register", "unregister"]

JOBS: dict[str, Job] = {
    "ps": PsJob(),
    "ring": RingJob(),
    "incast": IncastJob(),
    "pipeline": PipelineJob(),
    "tensor": TensorJob(),
    "moe": MoeJob(),
    "script": ScriptJob(),
}

# Called after the registry changes (the spec rebuilds its [workload] table).
_listeners: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    _listeners.append(listener)


def register(job: Job) -> None:
    """Add a job kind (its ``kind`` must be new)."""
    if job.kind in JOBS:
        raise ValueError(f"job kind {job.kind!r} is registered already")
    JOBS[job.kind] = job
    for listener in _listeners:
        listener()


def unregister(kind: str) -> None:
    """Remove a job kind added with :func:`register`."""
    JOBS.pop(kind)
    for listener in _listeners:
        listener()


def job_for(kind: str) -> Job:
    """The job of ``kind``; a KeyError names the kinds there are."""
    try:
        return JOBS[kind]
    except KeyError:
        raise KeyError(f"no job kind {kind!r}; kinds are {', '.join(JOBS)}") from None
