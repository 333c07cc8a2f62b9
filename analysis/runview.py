"""What a job's analysis hooks read of a finished run, in one place.

The hooks (``Job.bound``, ``Job.attribution_rows``, ``Job.tables``, ``Job.sections``)
get the analysis object of ``analysis/report.py`` (its ``spec`` dict from spec.toml,
``manifest``, typed ``fabric`` map and ``tables``). These helpers turn that into the
typed values a cost model needs: the workload table (as the job's own ``Fields`` class,
which the job hands in), where the job's hosts sat, the link rates they had and the
spines the routing let a flow use. Nothing here imports the orchestrator, Mininet or
os-ken: reports are rebuilt on any laptop.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

__all__ = ["Placed", "common_field", "gradient_bytes", "host_mbps", "leaf_of",
           "mean_compute_s", "mtu", "placed", "usable_spines", "workload"]


@dataclass(frozen=True)
class Placed:
    """The job's hosts: ``servers`` (PS shards, the incast receiver) and ``workers``
    (index = worker rank), as the run placed them."""

    servers: tuple[str, ...]
    workers: tuple[str, ...]


def workload(a, fields: type):
    """The run's ``[workload]`` table as ``fields``, the typed dataclass the job declared
    (``Job.Fields``): fields the spec.toml lacks take their defaults; the others (the
    common ones, other kinds') are ignored."""
    raw = (a.spec or {}).get("workload") or {}
    names = {f.name for f in dataclasses.fields(fields)}
    w = fields(**{k: v for k, v in raw.items() if k in names})
    if "stragglers" in names:
        w.stragglers = list(w.stragglers or [])
    return w


def common_field(a, name: str, default=None):
    """A ``[workload]`` field every kind has (``rto_min_ms``, ``timeout_s``: not in a
    job's own ``Fields``) as spec.toml gives it, else ``default``."""
    return ((a.spec or {}).get("workload") or {}).get(name, default)


def placed(a) -> Placed | None:
    """Where the job ran: the manifest's ``placement`` (the runner records it), else
    None (an older or hand-made run directory)."""
    p = (a.manifest or {}).get("placement")
    if not isinstance(p, dict):
        return None
    return Placed(tuple(p.get("servers") or ()), tuple(p.get("workers") or ()))


def host_mbps(a, host: str) -> float | None:
    """The rate (Mbit/s) of ``host``'s own link, from the fabric map."""
    if a.fabric is None or a.fabric.host(host) is None:
        return None
    link = a.fabric.link_of_iface(a.fabric.host(host).intf)
    return float(link.bw_mbps) if link is not None else None


def mtu(a) -> int:
    """The MTU (bytes) every interface of the run had, from the fabric map (1500 for a
    map written before the field existed, or without a map): what the bounds' framing
    uses (analysis.alphabeta.framing_factor / ack_framing)."""
    return int(getattr(a.fabric, "mtu", 1500) or 1500) if a.fabric is not None else 1500


def leaf_of(a, host: str) -> str | None:
    return a.fabric.leaf_of(host) if a.fabric is not None else None


def usable_spines(a) -> int:
    """Spines a cross-leaf flow may use under the run's policy: one under ``single``
    (every flow on one spine), all of them otherwise (ECMP, spread, adaptive)."""
    if a.fabric is None:
        return 0
    policy = ((a.spec or {}).get("routing") or {}).get("policy")
    return min(1, a.fabric.spines) if policy == "single" else int(a.fabric.spines)


def gradient_bytes(a, w) -> float:
    """Bytes of one gradient (= the parameters): what the workers logged in their start
    events, else 4 bytes × the spec's model_size."""
    starts = a.tables.get("starts")
    if isinstance(starts, pd.DataFrame) and "gradient_bytes" in starts:
        v = pd.to_numeric(starts["gradient_bytes"], errors="coerce").dropna()
        if len(v):
            return float(v.max())
    return 4.0 * float(w.model_size)


def mean_compute_s(a) -> float:
    """Mean logged compute time of an iteration (s), 0 without iterations."""
    it = a.tables.get("iterations")
    if not isinstance(it, pd.DataFrame) or "compute_s" not in it:
        return 0.0
    v = pd.to_numeric(it["compute_s"], errors="coerce").dropna()
    return float(v.mean()) if len(v) else 0.0
