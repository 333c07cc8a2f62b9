"""The tensor-parallel job (``kind = "tensor"``): Megatron-style, every MLP block's
weights split over ``tensor_ranks`` hosts (column- then row-parallel), with an
all-reduce of activations in every block's forward and of their gradients in its
backward. The program is ``incastlab.apps.tensor``; this module owns its spec fields,
placement, launch plan, cost model (``jobs/tensor_bound.py``) and its
report: every block's collective time against its α–β bound, where the latency term
is what keeps tensor parallelism inside one leaf.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import pandas as pd

from incastlab.apps.commands import Endpoint, one_rank_per_host
from incastlab.fields import int_check, spec_field
from incastlab.jobs.base import (
    RENDEZVOUS_PORT,
    Job,
    Launch,
    Roles,
    Section,
    endpoints,
    straggler_problems,
)
from incastlab.jobs.base import training_options
from incastlab.jobs.pipeline import ModelParallelFields, shared, spans, steady
from incastlab.jobs.ring import RingFields



@dataclass
class TensorFields(ModelParallelFields):
    tensor_ranks: int = spec_field(2, int_check(2, 64),
                                   "tensor: hosts each block's weights are split over",
                                   sweep=True)
    impl: str = shared(RingFields, "impl")


def alpha_s(a) -> float | None:
    """The one-way message latency rank 0 measured (its `latency` event), s."""
    w = a.tables.get("workers_raw")
    if not isinstance(w, pd.DataFrame) or w.empty or "alpha_s" not in w:
        return None
    v = pd.to_numeric(w.loc[w["event"] == "latency", "alpha_s"], errors="coerce").dropna()
    return float(v.median()) if len(v) else None


class TensorJob(Job):
    kind = "tensor"
    summary = "tensor parallel (Megatron): each block split over hosts, all-reduce per block"
    host_count_fields = ("tensor_ranks",)
    logged_modes = ("tensor",)
    Fields = TensorFields

    def roles(self, w) -> Roles:
        return Roles(0, w.tensor_ranks, "tensor-parallel ranks",
                     count_field="workload.tensor_ranks")

    def check(self, w, ok) -> list[str]:
        return straggler_problems(w, w.tensor_ranks, ok, "workload.tensor_ranks")

    def launches(self, spec, ips, out_dir) -> list[Launch]:
        w = spec.workload
        hosts = spec.placement().workers
        options = {"layers": w.layers, "impl": w.impl, **training_options(spec),
                   "slowdown": [f"{s.rank}:{s.factor:g}" for s in w.stragglers]}
        argvs = tensor_commands(endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT, options)
        return [Launch(host, argv, rank, "tensor", True)
                for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]

    # -- analysis --------------------------------------------------------------------
    def _bound(self, analysis, collectives: int):
        from incastlab.analysis import runview
        from incastlab.jobs.tensor_bound import tensor_bound

        p = runview.placed(analysis)
        if p is None or analysis.fabric is None or len(p.workers) < 2:
            return None
        rates = [runview.host_mbps(analysis, h) for h in p.workers]
        starts = analysis.tables.get("starts")
        if None in rates or not isinstance(starts, pd.DataFrame) \
                or "message_bytes" not in starts:
            return None
        n = pd.to_numeric(starts["message_bytes"], errors="coerce").dropna()
        if not len(n):
            return None
        spines = runview.usable_spines(analysis)
        fabric = {"leaves": [runview.leaf_of(analysis, h) for h in p.workers], "spines": spines,
                  "fabric_mbps": analysis.fabric.fabric_bw_mbps} \
            if spines and analysis.fabric.fabric_bw_mbps else {}
        return tensor_bound(len(p.workers), float(n.max()), rates, collectives=collectives,
                            alpha_s=alpha_s(analysis) or 0.0, mtu=runview.mtu(analysis), **fabric)

    def bound(self, analysis):
        """All 2·layers all-reduces of a step, one after the other, each at its ring
        α–β bound with the α rank 0 measured (jobs/tensor_bound.py)."""
        from incastlab.analysis import runview
        return self._bound(analysis, 2 * int(runview.workload(analysis, self.Fields).layers))

    def attribution_rows(self, analysis):
        """Every rank's steps; each collective waits for every rank."""
        from incastlab.analysis import runview
        p = runview.placed(analysis)
        return analysis.tables["iterations"], list(p.workers) if p else []

    def tables(self, analysis) -> dict:
        sp = spans(analysis.tables.get("workers_raw"), ("allreduce",))
        per_layer = pd.DataFrame(columns=["layer", "direction", "collective_s", "bytes",
                                          "bound_s", "latency_s", "over_bound"])
        if len(sp):
            st = steady(sp)
            g = st.groupby(["layer", "direction"], sort=True).agg(
                collective_s=("dur_s", "mean"), bytes=("bytes", "max")).reset_index()
            one = self._bound(analysis, 1)
            g["bound_s"] = one.seconds if one is not None else float("nan")
            # the bound's latency term 2(T−1)α: the part no link rate can shrink
            g["latency_s"] = one.terms["latency"] if one is not None else float("nan")
            g["over_bound"] = g["collective_s"] / g["bound_s"]
            per_layer = g
        return {"tensor_collectives": sp, "tensor_layers": per_layer}

    def plots(self, analysis) -> dict:
        return {"tensor_layers": lambda path: layers_plot(analysis.tables["tensor_layers"], path)}

    def sections(self, analysis, figs) -> list[Section]:
        from incastlab.analysis import render
        title = "Tensor parallel: per-block collective time vs its α–β bound"
        t = analysis.tables["tensor_layers"]
        if t.empty:
            return [Section(title, *render.none("no all-reduce spans in the logs"))]
        one = self._bound(analysis, 1)
        fmt = render.fmt
        al = alpha_s(analysis)
        txt = (f"mean all-reduce {fmt(float(t['collective_s'].mean()))} s per block and "
               f"direction (steps after the first) against one all-reduce's bound "
               f"{fmt(one.seconds) if one else 'n/a'} s; measured one-way latency α = "
               f"{fmt(al * 1e3) if al is not None else 'n/a'} ms. ")
        if one is not None:
            lat = one.terms["latency"]
            txt += (f"Of the bound, 2(T−1)α = {fmt(lat)} s is latency and "
                    f"{fmt(one.seconds - lat)} s bytes: "
                    + ("the latency term dominates, so hops and per-message cost, not "
                       "link rate, set the time: tensor parallelism belongs under one leaf."
                       if lat > one.seconds - lat else
                       "the bandwidth term dominates at this message size and link rate.")
                    + f" Bound: {one.formula}.")
        return [Section(title, f"<p>{render.esc(txt)}</p>"
                        + render.img(figs.get("tensor_layers"), "tensor layers")
                        + render.df_html(t), txt + "\n\n" + render.df_md(t))]

    def metrics(self) -> list:
        from incastlab.analysis.metrics import Metric

        def over(a):
            t = a.tables.get("tensor_layers")
            return float(t["over_bound"].mean()) if isinstance(t, pd.DataFrame) \
                and len(t) and t["over_bound"].notna().any() else None

        return [Metric("collective_over_bound", "all-reduce over its α–β bound", "ratio",
                       "Mean time of a tensor-parallel block's all-reduce over its ring "
                       "α–β bound (with the measured α): 1.0 = at the bound.",
                       over, ("workers", "fabric"), "no all-reduce spans or no bound",
                       cli=True),
                Metric("alpha_ms", "measured one-way message latency", "ms",
                       "Half of a small message's round trip between the ranks as the "
                       "program sees it (gloo, the hosts' stacks and every switch).",
                       lambda a: alpha_s(a) * 1e3 if alpha_s(a) is not None else None,
                       ("workers",), "no latency event in rank 0's log")]


def layers_plot(t: pd.DataFrame, path):
    """Bars: each block's forward and backward all-reduce time, the bound as a line."""
    from incastlab.analysis import plots as plotting
    if t is None or t.empty:
        return None
    plotting = plotting
    plt = plotting.plt
    fig, ax = plt.subplots(figsize=(8, 3.2))
    labels = [f"L{int(r.layer)} {r.direction}" for r in t.itertuples(index=False)]
    ax.bar(range(len(t)), t["collective_s"] * 1e3, color="#4c8bd6", label="measured (mean)")
    b = t["bound_s"].dropna()
    if len(b):
        ax.axhline(float(b.iloc[0]) * 1e3, color="k", ls="--", label="α–β bound")
        lat = t["latency_s"].dropna()
        if len(lat):
            ax.axhline(float(lat.iloc[0]) * 1e3, color="grey", ls=":",
                       label="its latency term 2(T−1)α")
    ax.set_xticks(range(len(t)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("all-reduce time (ms)")
    ax.set_title("Per-block all-reduce time vs its α–β bound")
    ax.legend(fontsize=7)
    return plotting.save(fig, path)


def tensor_commands(hosts: list[Endpoint], out: str, port: int, options: dict,
                    python: str = sys.executable) -> list[list[str]]:
    """One argv per host of incastlab.apps.tensor: rank i holds slice i of every
    tensor-parallel layer."""
    return one_rank_per_host("incastlab.apps.tensor", hosts, out, port, options, python)
