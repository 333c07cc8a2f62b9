"""What the network cost the job: the run's job plugin asked for its tables, its bound
and its report sections, and every iteration split into its causes.

The analysis (`report.analyse`) computes the tables every run has; this module adds
what depends on the job kind, by asking the job of the run: the entry of the job
registry the command handed in (``Analysis.jobs``; the analysis never imports the
orchestrator) for the mode the workers logged, or spec.toml's ``workload.kind``. No kind
is named here:

- ``job.tables(a)``: its own tables (a ring's all-reduce times, incast rounds, a PS's
  staleness);
- ``job.bound(a)``: the lower bound of one iteration on this fabric
  (``analysis.alphabeta``), and ``job.schedule_s(a, bound)``: what the job's own
  schedule adds on any network;
- ``job.attribution_rows(a)``: the rows to split, which ``analysis.attribution`` splits
  into compute, transfer at the bound, the schedule, RTO stalls, loss recovery,
  straggler wait and what stays unexplained (the parts sum to each row's time);
- ``job.sections`` / ``job.plots``: its report sections and figures.

Results: ``a.tables['attribution']``, ``a.tables['bound']`` (the Bound), and
``a.metrics['cost']`` (per run: measured, bound, ratio, the network's cost over the bound
and its parts, the headline sentence). A job without a bound, or a run without the
inputs, gets ``cost`` with ``available: False`` and the reason.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import attribution as attr
from . import render, training
from .jobkind import run_kind
from .stages import Section

__all__ = ["COST_KEYS", "analyse_job", "attribution_plot", "cost_section", "job_of", "plots",
           "sections"]

COST_KEYS = ("bound_s", "measured_s", "ratio", "network_cost_s", "network_cost_pct",
             "rto_stall_s", "loss_recovery_s", "schedule_s", "straggler_wait_s",
             "unexplained_s", "compute_s", "transfer_at_bound_s")


def job_of(a):
    """The run's job plugin, from the registry handed in (``a.jobs``): the kind whose
    apps log the mode the workers' start events carry (what ran), else spec.toml's
    ``workload.kind`` (what was asked); None when neither is known or no registry was
    handed in."""
    jobs = getattr(a, "jobs", None) or {}
    workers = a.tables.get("workers_raw")
    kind = run_kind((a.metrics.get("run") or {}).get("mode")
                    or (training.run_mode(workers) if workers is not None else None),
                    a.spec, jobs)
    return jobs.get(kind) if isinstance(kind, str) else None


def analyse_job(a) -> None:
    """Add the job's tables, bound, attribution and cost to the Analysis ``a``."""
    job = job_of(a)
    a.tables["attribution"] = pd.DataFrame(columns=attr.OUT_COLUMNS)
    a.tables["bound"] = None
    if job is None:
        a.metrics["cost"] = {"available": False, "reason": "the run's job kind is unknown "
                             "(no spec.toml, or a kind this version does not have)"
                             if getattr(a, "jobs", None) else "no job kinds were handed to "
                             "the analysis (analyse(run_dir, jobs=...)): generic sections only"}
        return
    own = job.tables(a)
    a.tables.update(own)
    a.job_tables = tuple(own)
    bound = job.bound(a)
    a.tables["bound"] = bound
    if bound is None:
        a.metrics["cost"] = {"available": False, "kind": job.kind,
                             "reason": "no bound: the run lacks its placement or fabric.json "
                             "(or the job has no cost model)"}
        return
    schedule = float(job.schedule_s(a, bound))
    rows, waits_on = job.attribution_rows(a)
    if rows is None or rows.empty:
        a.metrics["cost"] = {"available": False, "kind": job.kind,
                             "bound_s": bound.seconds, "formula": bound.formula,
                             "reason": "no iterations or rounds in the worker logs"}
        return
    # losses and RTOs come from whole captures only (a damaged one: inputs.py)
    captured = not a.tables["flows"].empty and "pcap" not in a.missing
    rto = attr.rto_intervals(a.tables["retrans"]) if captured else None
    rec = attr.recovery_intervals(a.tables["recovery_episodes"], a.tables["retrans"]) \
        if captured else None
    table = attr.attribute(rows, bound.seconds, rto, rec, schedule_s=schedule,
                           host_ips=a.fabric.ip_by_host() if a.fabric else {},
                           depends_on=waits_on)
    a.tables["attribution"] = table
    summary = attr.run_summary(table)
    if not captured:  # their time is inside the unexplained part, not known to be 0
        summary["rto_stall_s"] = summary["loss_recovery_s"] = None
    ratio = (summary["measured_s"] - summary["compute_s"]) / bound.seconds \
        if bound.seconds > 0 else None
    a.metrics["cost"] = {
        "available": True, "kind": job.kind, "bound_s": bound.seconds,
        "formula": bound.formula, "bottleneck": bound.bottleneck, "terms": bound.terms,
        "ratio": ratio, "captures": captured,
        **{k: summary.get(k) for k in COST_KEYS if k in summary},
        "iterations": summary["iterations"],
        "below_bound_iterations": summary["below_bound_iterations"],
        "sentence": attr.headline_sentence(summary)
        + ("" if captured else " (no captures: losses and RTOs cannot be told apart "
           "from the unexplained)"),
    }


def plots(a) -> dict:
    """Figures of the job plus the per-iteration attribution (stacked)."""
    job = job_of(a)
    out = dict(job.plots(a)) if job is not None else {}
    out["attribution"] = lambda path: attribution_plot(a.tables.get("attribution"), path)
    return out


def sections(a, figs) -> list:
    """The cost section, then the job's own sections."""
    out = [cost_section(a, figs)]
    job = job_of(a)
    if job is not None:
        out += list(job.sections(a, figs))
    return out


def _s_or_why(v) -> str:
    """'0.02 s', or n/a with the reason (a cost part the captures could not give)."""
    return f"{render.fmt(v)} s" if v is not None else \
        "n/a (no whole captures: inside the unexplained)"


def cost_section(a, figs):
    """What the network cost the job: the bound, the measured time and its parts."""
    c = a.metrics.get("cost") or {}
    title = "What the network cost the job (measured vs the bound)"
    if not c.get("available"):
        extra = f" Bound: {c['formula']}." if c.get("formula") else ""
        return Section(title, *render.none(f"{c.get('reason', 'no cost model')}.{extra}"))
    per_iter = a.tables["attribution"]
    mean = per_iter.groupby("iteration" if "iteration" in per_iter
                            and per_iter["iteration"].notna().any() else "round")[
        [p for p in attr.PARTS] + ["duration_s"]].mean().reset_index() \
        if len(per_iter) else per_iter
    txt = (f"Bound of one iteration ({c['bottleneck']} is the bottleneck): {c['formula']}. "
           f"Measured communication (iteration less compute) / bound = "
           f"{render.fmt(c['ratio'])}. Per iteration, on average: measured "
           f"{render.fmt(c['measured_s'])} s = compute {render.fmt(c['compute_s'])} s + "
           f"transfer at the bound {render.fmt(c['transfer_at_bound_s'])} s + the job's "
           f"schedule {render.fmt(c.get('schedule_s', 0.0))} s + RTO stalls "
           f"{_s_or_why(c['rto_stall_s'])} + loss recovery "
           f"{_s_or_why(c['loss_recovery_s'])} + waiting for stragglers "
           f"{render.fmt(c['straggler_wait_s'])} s + unexplained "
           f"{render.fmt(c['unexplained_s'])} s. In one sentence: {c['sentence']}.")
    legend = ("<p class='note'>compute: the workers' logged compute; transfer at the bound: "
              "the least time the bytes need on these links; schedule: what the job's own "
              "order of sends adds on any network (a synchronous PS pushes, then pulls); "
              "RTO stall: a flow the iteration waits on sat silent until its retransmission "
              "timer fired; loss recovery: time in fast/SACK recovery; straggler wait: the "
              "logged wait at the barrier not explained by the network; unexplained: the "
              "rest (queueing without loss, routing collisions, CPU).</p>")
    return Section(title, f"<p>{render.esc(txt)}</p>" + legend
                   + render.img(figs.get("attribution"), "attribution")
                   + "<h3>Mean per iteration (s)</h3>" + render.df_html(mean),
                   txt + "\n\n" + render.df_md(mean))


def attribution_plot(table: pd.DataFrame | None, path) -> Path | None:
    """Stacked bars: each iteration's mean time over ranks, split into its parts (s)."""
    if table is None or table.empty:
        return None
    from . import plots as plotting

    key = "iteration" if "iteration" in table and table["iteration"].notna().any() \
        else "round"
    mean = table.groupby(key)[attr.PARTS].mean()
    return plotting.stacked_parts(mean, path, xlabel=key,
                                  title="Where each iteration's time went (mean over ranks)")
