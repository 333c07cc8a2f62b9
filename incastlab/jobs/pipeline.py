"""The pipeline-parallel job (``kind = "pipeline"``): the digits MLP cut into ``stages``
stages, one host each, ``micro_batches`` micro-batches per step under the ``gpipe`` or
``1f1b`` schedule, activations forward and their gradients backward over gloo
send/recv. The program is ``incastlab.apps.pipeline``; this module owns its spec fields,
placement, launch plan, cost model (``jobs/pipeline_bound.py``) and its
report: per-stage busy and idle time, the measured bubble fraction against
(S−1)/(M+S−1), and a per-stage timeline of one step.

Placement is the common ``workload.worker_leaves``: ``[1]`` puts every stage under leaf
1; ``"spread"`` deals consecutive stages to different leaves, so every stage-to-stage
message crosses a spine.
"""
from __future__ import annotations

import copy
import dataclasses
import sys
from dataclasses import dataclass

import pandas as pd

from incastlab.apps.commands import Endpoint, one_rank_per_host
from incastlab.fields import choice, int_check, num_check, spec_field
from incastlab.jobs.base import (
    RENDEZVOUS_PORT,
    Job,
    Launch,
    Roles,
    Section,
    TrainingFields,
    endpoints,
    straggler_problems,
    training_options,
)

SCHEDULES = ("gpipe", "1f1b")


def shared(cls, name: str) -> dataclasses.Field:
    """A copy of field `name` of dataclass `cls`, to declare it again in another job's
    table: the spec requires a field several jobs have to come from one declaration
    (the same check), and a job may want some of TrainingFields' fields but not
    `workers` (a pipeline's hosts are its stages)."""
    return copy.copy(cls.__dataclass_fields__[name])


@dataclass
class ModelParallelFields:
    """The fields the pipeline and tensor jobs share: the training knobs (without
    ``workers``) and the model's depth."""

    model_size: int = shared(TrainingFields, "model_size")
    iterations: int = shared(TrainingFields, "iterations")
    batch_size: int = shared(TrainingFields, "batch_size")
    lr: float = shared(TrainingFields, "lr")
    stragglers: list = shared(TrainingFields, "stragglers")
    layers: int = spec_field(4, int_check(2, 64),
                             "pipeline: Linear layers cut into the stages (at least one "
                             "each); tensor: Megatron MLP blocks (2 all-reduces each)",
                             sweep=True)


@dataclass
class PipelineFields(ModelParallelFields):
    stages: int = spec_field(4, int_check(2, 64), "pipeline: stages, one host each",
                             sweep=True)
    micro_batches: int = spec_field(4, int_check(1, 1024),
                                    "pipeline: micro-batches per step (at most batch_size)",
                                    sweep=True)
    schedule: str = spec_field("gpipe", choice(*SCHEDULES),
                               "pipeline: gpipe (all forwards, then all backwards) or 1f1b",
                               sweep=True)
    fwd_ms: float = spec_field(20.0, num_check(0, 60_000, unit="ms"),
                               "pipeline: least time of one micro-batch's forward on a "
                               "stage (emulated compute; the real one runs too)", sweep=True)
    bwd_ms: float = spec_field(40.0, num_check(0, 60_000, unit="ms"),
                               "pipeline: least time of one micro-batch's backward on a "
                               "stage", sweep=True)
    activation_bytes: int = spec_field(0, int_check(0, 1 << 30, unit="bytes"),
                                       "pipeline: pad each activation/gradient message to "
                                       "at least this size (0: the real size)", sweep=True)


def spans(workers: pd.DataFrame, cat: tuple[str, ...]) -> pd.DataFrame:
    """The apps' `span` events of categories `cat` with the rank of their file:
    rank, iteration, name, cat, t, dur_s (+ what else they logged)."""
    if workers is None or workers.empty or "event" not in workers:
        return pd.DataFrame(columns=["rank", "iteration", "name", "cat", "t", "dur_s"])
    s = workers[(workers["event"] == "span") & workers.get("cat", pd.Series(
        dtype=object)).isin(cat)].dropna(axis=1, how="all").copy()
    if s.empty:
        return pd.DataFrame(columns=["rank", "iteration", "name", "cat", "t", "dur_s"])
    s["rank"] = pd.to_numeric(s["file"], errors="coerce").astype("Int64")
    for c in ("t", "dur_s", "iteration"):
        s[c] = pd.to_numeric(s[c], errors="coerce")
    return s.sort_values(["rank", "t"], kind="stable").reset_index(drop=True)


def bubble_table(sp: pd.DataFrame, stages: int) -> pd.DataFrame:
    """Per step: the flush window (first F start to last B end, over every stage), the
    busy time summed over stages, and the bubble fraction 1 − busy / (S × window)."""
    rows = []
    for it, g in sp.groupby("iteration", sort=True):
        t0, t1 = float(g["t"].min()), float((g["t"] + g["dur_s"]).max())
        busy = float(g["dur_s"].sum())
        window = t1 - t0
        rows.append({"iteration": int(it), "window_s": window, "busy_s": busy,
                     "bubble": 1 - busy / (stages * window) if window > 0 else float("nan")})
    return pd.DataFrame(rows, columns=["iteration", "window_s", "busy_s", "bubble"])


def steady(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of every step but the first (it includes gloo's connection set-up and
    torch's first-call costs), unless there is only one."""
    if "iteration" not in df or df["iteration"].nunique() < 2:
        return df
    return df[df["iteration"] > df["iteration"].min()]


class PipelineJob(Job):
    kind = "pipeline"
    summary = "pipeline parallel: stages on hosts, micro-batches, GPipe or 1F1B schedule"
    host_count_fields = ("stages",)
    logged_modes = SCHEDULES
    Fields = PipelineFields

    def roles(self, w) -> Roles:
        return Roles(0, w.stages, "stages", count_field="workload.stages")

    def check(self, w, ok) -> list[str]:
        errors = []
        if ok("workload.layers", "workload.stages") and w.layers < w.stages:
            errors.append(f"workload.layers: {w.layers!r} layers cannot fill "
                          f"workload.stages = {w.stages} stages (one layer at least each)")
        if ok("workload.micro_batches", "workload.batch_size") and \
                w.micro_batches > w.batch_size:
            errors.append(f"workload.micro_batches: {w.micro_batches!r} is more than "
                          f"workload.batch_size = {w.batch_size} (a micro-batch needs a "
                          "sample)")
        return errors + straggler_problems(w, w.stages, ok, "workload.stages")

    def launches(self, spec, ips, out_dir) -> list[Launch]:
        w = spec.workload
        hosts = spec.placement().workers
        options = {"schedule": w.schedule, "micro_batches": w.micro_batches,
                   "layers": w.layers, "fwd_ms": f"{w.fwd_ms:g}", "bwd_ms": f"{w.bwd_ms:g}",
                   "activation_bytes": w.activation_bytes, **training_options(spec),
                   "slowdown": [f"{s.rank}:{s.factor:g}" for s in w.stragglers]}
        argvs = pipeline_commands(endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT, options)
        return [Launch(host, argv, rank, "stage", True)
                for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]

    # -- analysis --------------------------------------------------------------------
    def _op_times(self, analysis) -> tuple[float, float]:
        """Mean F and B durations (s) of the steady steps, else the spec's fwd/bwd."""
        from incastlab.analysis import runview
        sp = steady(analysis.tables.get("pipeline_spans", pd.DataFrame()))
        w = runview.workload(analysis, self.Fields)
        if sp is None or sp.empty:
            return w.fwd_ms / 1000, w.bwd_ms / 1000
        f = sp.loc[sp["cat"] == "forward", "dur_s"]
        b = sp.loc[sp["cat"] == "backward", "dur_s"]
        return (float(f.mean()) if len(f) else w.fwd_ms / 1000,
                float(b.mean()) if len(b) else w.bwd_ms / 1000)

    def bound(self, analysis):
        """The transfers on a step's critical path, with its bubble as the schedule
        (jobs/pipeline_bound.py), from the measured mean F/B times, the logged
        message size, the stage hosts' links and leaves."""
        from incastlab.analysis import runview
        from incastlab.jobs.pipeline_bound import pipeline_bound

        w, p = runview.workload(analysis, self.Fields), runview.placed(analysis)
        if p is None or analysis.fabric is None or len(p.workers) < 2:
            return None
        rates = [runview.host_mbps(analysis, h) for h in p.workers]
        if None in rates:
            return None
        starts = analysis.tables.get("starts")
        act = None
        if isinstance(starts, pd.DataFrame) and "activation_bytes" in starts:
            v = pd.to_numeric(starts["activation_bytes"], errors="coerce").dropna()
            act = float(v.max()) if len(v) else None
        if not act:
            return None
        fwd, bwd = self._op_times(analysis)
        return pipeline_bound(
            len(p.workers), int(w.micro_batches), act, rates, fwd_s=fwd, bwd_s=bwd,
            leaves=[runview.leaf_of(analysis, h) for h in p.workers],
            fabric_mbps=analysis.fabric.fabric_bw_mbps or None, mtu=runview.mtu(analysis))

    def schedule_s(self, analysis, bound) -> float:
        """The bubble, (S−1)(t_f+t_b): idle on any network, GPipe and 1F1B alike."""
        return float(bound.terms.get("schedule", 0.0)) if bound is not None else 0.0

    def attribution_rows(self, analysis):
        """Every stage's steps; a stalled flow anywhere holds the whole pipeline."""
        from incastlab.analysis import runview
        p = runview.placed(analysis)
        return analysis.tables["iterations"], list(p.workers) if p else []

    def tables(self, analysis) -> dict:
        sp = spans(analysis.tables.get("workers_raw"), ("forward", "backward"))
        stages = int(sp["rank"].nunique()) if len(sp) else 0
        per_stage = pd.DataFrame(columns=["stage", "busy_s", "idle_s", "step_s", "bubble"])
        it = analysis.tables.get("iterations")
        if isinstance(it, pd.DataFrame) and len(it):
            st = steady(it).copy()
            st["busy_s"] = pd.to_numeric(st["compute_s"], errors="coerce")
            st["idle_s"] = st["duration_s"] - st["busy_s"]
            g = st.groupby("rank")[["busy_s", "idle_s", "duration_s"]].mean().reset_index()
            per_stage = pd.DataFrame({"stage": g["rank"], "busy_s": g["busy_s"],
                                      "idle_s": g["idle_s"], "step_s": g["duration_s"],
                                      "bubble": g["idle_s"] / g["duration_s"]})
        return {"pipeline_spans": sp, "pipeline_bubbles": bubble_table(sp, max(stages, 1)),
                "pipeline_stages": per_stage}

    def bubble_summary(self, analysis) -> dict:
        """Measured bubble fraction (mean of the steady steps) and the model's."""
        from incastlab.analysis import runview
        from incastlab.jobs.pipeline_bound import bubble_fraction

        w = runview.workload(analysis, self.Fields)
        b = steady(analysis.tables.get("pipeline_bubbles", pd.DataFrame(columns=["iteration"])))
        sp = analysis.tables.get("pipeline_spans")
        s = int(sp["rank"].nunique()) if isinstance(sp, pd.DataFrame) and len(sp) \
            else int(w.stages)
        model = bubble_fraction(s, int(w.micro_batches))
        measured = float(b["bubble"].mean()) if len(b) else None
        return {"measured": measured, "model": model, "stages": s,
                "micro_batches": int(w.micro_batches), "schedule": w.schedule,
                "ratio": measured / model if measured is not None and model else None}

    def plots(self, analysis) -> dict:
        return {"pipeline_timeline": lambda path: timeline_plot(
            analysis.tables["pipeline_spans"], self.bubble_summary(analysis), path)}

    def sections(self, analysis, figs) -> list[Section]:
        from incastlab.analysis import render
        title = "Pipeline: per-stage timeline and bubbles"
        sm = self.bubble_summary(analysis)
        if sm["measured"] is None:
            return [Section(title, *render.none("no span events in the stages' logs"))]
        bound = analysis.tables.get("bound")
        fmt = render.fmt
        txt = (f"{sm['schedule']}, S = {sm['stages']} stages, M = {sm['micro_batches']} "
               f"micro-batches: measured bubble fraction {fmt(sm['measured'])} (idle share "
               f"of the stages from the first forward to the last backward of a step, mean "
               f"of the steps after the first) vs (S−1)/(M+S−1) = {fmt(sm['model'])} "
               f"(ratio {fmt(sm['ratio'])}). The formula assumes equal stages and free "
               "messages; what lies above it is the transfers on the critical path, "
               "forward and backward times that vary (2 shared cores) and straggling "
               "stages. 1F1B has the same bubble in theory (it reorders the work so a "
               "stage holds at most S−stage activations instead of M), but each of its "
               "steady-state backwards waits for a gradient from downstream, so message "
               "latency reaches its critical path more often than GPipe's.")
        if bound is not None:
            txt += f" Cost model: {bound.formula}."
        per_stage = analysis.tables["pipeline_stages"]
        md = txt + "\n\n" + render.df_md(per_stage)
        html = (f"<p>{render.esc(txt)}</p>"
                + render.img(figs.get("pipeline_timeline"), "pipeline timeline")
                + "<h3>Per stage (mean of the steps after the first; s)</h3>"
                + render.df_html(per_stage))
        return [Section(title, html, md)]

    def metrics(self) -> list:
        from incastlab.analysis.metrics import Metric

        def measured(key):
            # only a run with the pipeline's span events has them (metrics are evaluated
            # on every run, of any kind)
            def f(a):
                sp = getattr(a, "tables", {}).get("pipeline_spans")
                if not isinstance(sp, pd.DataFrame) or sp.empty:
                    return None
                return self.bubble_summary(a)[key]
            return f

        return [Metric("pipeline_bubble", "pipeline bubble fraction", "fraction",
                       "Idle share of the pipeline's stages in a step (first forward to "
                       "last backward), mean of the steps after the first.",
                       measured("measured"), ("workers",),
                       "no span events in the stages' logs", cli=True),
                Metric("pipeline_bubble_model", "bubble fraction (S−1)/(M+S−1)", "fraction",
                       "The bubble fraction of equal stages with free messages.",
                       measured("model"), ("workers",), "no span events in the stages' logs")]


def timeline_plot(sp: pd.DataFrame, sm: dict, path):
    """One steady step per stage: forwards and backwards as bars (ms since its start)."""
    from incastlab.analysis import plots as plotting
    if sp is None or sp.empty:
        return None
    plotting = plotting
    plt = plotting.plt
    its = sorted(sp["iteration"].dropna().unique())
    it = its[1] if len(its) > 1 else its[0]
    g = sp[sp["iteration"] == it]
    t0 = float(g["t"].min())
    stages = sorted(g["rank"].dropna().unique())
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * len(stages)))
    colors = {"forward": "#4c8bd6", "backward": "#e07b39"}
    for s in stages:
        gs = g[g["rank"] == s]
        for cat, gc in gs.groupby("cat"):
            ax.broken_barh([((t - t0) * 1000, d * 1000) for t, d in
                            zip(gc["t"], gc["dur_s"], strict=True)], (s - 0.4, 0.8),
                           color=colors.get(cat, "grey"), edgecolor="white",
                           label=cat if s == stages[0] else None)
        for r in gs.itertuples(index=False):
            ax.text(((r.t - t0) + r.dur_s / 2) * 1000, s, str(r.name), ha="center",
                    va="center", fontsize=6, color="white")
    ax.set_yticks(stages)
    ax.set_yticklabels([f"stage {int(s)}" for s in stages])
    ax.invert_yaxis()
    ax.set_xlabel(f"ms since the step's first forward (step {int(it)})")
    ax.set_title(f"{sm['schedule']}: measured bubble {sm['measured']:.3f} vs "
                 f"(S−1)/(M+S−1) = {sm['model']:.3f}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return plotting.save(fig, path)


def pipeline_commands(hosts: list[Endpoint], out: str, port: int, options: dict,
                      python: str = sys.executable) -> list[list[str]]:
    """One argv per host of incastlab.apps.pipeline: rank i is pipeline stage i
    (hosts[0] holds the first layers)."""
    return one_rank_per_host("incastlab.apps.pipeline", hosts, out, port, options, python)
