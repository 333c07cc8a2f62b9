"""The mixture-of-experts expert-parallel job (``kind = "moe"``): ``experts`` hosts, one
expert each; every step each host routes its tokens top-k to the experts (Zipf-skewed
popularity, GShard capacity), and four all-to-alls move them: dispatch and combine, then
the backward's two. A popular expert turns into an incast at its host's port. The program
is ``incastlab.apps.moe``; this module owns its spec fields, placement, launch plan, cost
model (``jobs/moe_bound.py``: ``alltoall_bound`` on the counts the ranks logged) and report
section."""
from __future__ import annotations

import copy
import functools
import sys
from dataclasses import dataclass

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
)

VALUE_BYTES = 4  # float32 token values


@dataclass
class MoeFields:
    experts: int = spec_field(4, int_check(2, 64), "moe: experts, one host each", sweep=True)
    tokens: int = spec_field(512, int_check(1, 1_000_000),
                             "moe: tokens each host routes per step")
    hidden: int = spec_field(256, int_check(1, 65_536),
                             "moe: float32 values per token (256 = 1 KiB)")
    top_k: int = spec_field(2, int_check(1, 64), "moe: experts each token goes to")
    zipf_alpha: float = spec_field(1.0, num_check(0, 10),
                                   "moe: routing skew, P(expert e) ~ 1/(e+1)^alpha; 0 = "
                                   "uniform, expert 0 (the first host) the hottest", sweep=True)
    capacity_factor: float = spec_field(1.25, num_check(0, 100, low_open=True),
                                        "moe: an expert takes ceil(C x tokens x top_k / "
                                        "experts) of each host's assignments per step; the "
                                        "rest are dropped", sweep=True)
    routing: str = spec_field("zipf", choice("zipf", "learned"),
                              "moe: zipf = synthetic popularity; learned = a router trained "
                              "with the experts on tokens from zipf_alpha-popular clusters "
                              "(apps/moe_learned.py)", sweep=True)
    alltoall: str = spec_field("gloo", choice("gloo", "pairwise"),
                               "moe: how the tokens' all-to-alls run: gloo = "
                               "all_to_all_single, every flow at once; pairwise = N-1 steps "
                               "of send/recv, one flow per link each way (apps/alltoall.py)",
                               sweep=True)
    # learned routing's SGD rate (router and experts): the training jobs' declaration
    lr: float = copy.copy(TrainingFields.__dataclass_fields__["lr"])
    balance_coef: float = spec_field(0.1, num_check(0, 100),
                                     "moe: learned routing's load-balancing loss weight "
                                     "(Switch Transformer's auxiliary loss)", sweep=True)
    # steps per host: the training jobs' own declaration (one field, shared)
    iterations: int = copy.copy(TrainingFields.__dataclass_fields__["iterations"])


class MoeJob(Job):
    kind = "moe"
    summary = "mixture of experts: top-k routed tokens in dispatch/combine all-to-alls"
    host_count_fields = ("experts",)
    logged_modes = ("moe",)
    Fields = MoeFields

    def roles(self, w) -> Roles:
        return Roles(0, w.experts, "experts", count_field="workload.experts")

    def check(self, w, ok) -> list[str]:
        if ok("workload.top_k", "workload.experts") and w.top_k > w.experts:
            return [f"workload.top_k: {w.top_k!r} experts per token, but workload.experts = "
                    f"{w.experts}"]
        return []

    def launches(self, spec, ips, out_dir) -> list[Launch]:
        w = spec.workload
        hosts = spec.placement().workers
        options = {"steps": w.iterations, "tokens": w.tokens, "hidden": w.hidden,
                   "top_k": w.top_k, "zipf_alpha": f"{w.zipf_alpha:g}",
                   "capacity_factor": f"{w.capacity_factor:g}", "seed": spec.run.seed,
                   "routing": w.routing, "alltoall": w.alltoall, "lr": f"{w.lr:g}",
                   "balance_coef": f"{w.balance_coef:g}",
                   "timeout": f"{w.timeout_s:g}"}
        argvs = moe_commands(endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT, options)
        return [Launch(host, argv, rank, "expert", True)
                for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]

    # -- analysis --------------------------------------------------------------------
    def bound(self, analysis):
        """One step's all-to-alls at their least (jobs/moe_bound.py): the
        mean over steps of the logged token counts, as bytes host to host, dispatch then
        combine, twice (forward and backward), over the hosts' links and, through the
        spines, the leaves' spine links."""
        from incastlab.analysis import runview
        from incastlab.jobs.moe_bound import alltoall_bound

        p = runview.placed(analysis)
        mat = mean_matrix(analysis)
        if p is None or analysis.fabric is None or mat is None or len(mat) != len(p.workers):
            return None
        rates = [runview.host_mbps(analysis, h) for h in p.workers]
        if None in rates:
            return None
        spines = runview.usable_spines(analysis)
        fabric = {"leaves": [runview.leaf_of(analysis, h) for h in p.workers], "spines": spines,
                  "fabric_mbps": analysis.fabric.fabric_bw_mbps} \
            if spines and analysis.fabric.fabric_bw_mbps else {}
        return alltoall_bound(mat, rates, passes=2, mtu=runview.mtu(analysis), **fabric)

    def attribution_rows(self, analysis):
        """Every expert host's steps; each all-to-all waits on every host."""
        from incastlab.analysis import runview
        p = runview.placed(analysis)
        return analysis.tables["iterations"], list(p.workers) if p else []

    def tables(self, analysis) -> dict:
        return {"moe": step_table(analysis.tables["workers_raw"])}

    def sections(self, analysis, figs) -> list[Section]:
        from incastlab.analysis import render
        t = analysis.tables.get("moe")
        if t is None or t.empty:
            return [Section("Mixture of experts: all-to-all", *render.none(
                "no MoE steps in the worker logs"))]
        fmt = render.fmt
        per_expert = t.groupby("rank")[["tokens_received"]].mean().reset_index()
        txt = (f"tokens routed {int(t['tokens_routed'].sum()):,}, sent "
               f"{int(t['tokens_sent'].sum()):,}, dropped {int(t['tokens_dropped'].sum()):,} "
               f"(over capacity); skew (the busiest expert's tokens over the mean) "
               f"{fmt(skew(t))}; all-to-all time per step, mean over hosts "
               f"{fmt(float(t['alltoall_s'].mean()))} s; " + _checked(t))
        if t["loss"].notna().any():  # learned routing: the training it did
            first, last = (t.groupby("iteration")["loss"].mean().iloc[i] for i in (0, -1))
            txt += (f" Learned routing: loss (mean over hosts) {fmt(float(first))} in the "
                    f"first step, {fmt(float(last))} in the last.")
        html = (f"<p>{render.esc(txt)}</p><h3>Tokens each expert received per step "
                "(mean)</h3>" + render.df_html(per_expert))
        return [Section("Mixture of experts: all-to-all", html,
                        txt + "\n\n" + render.df_md(per_expert))]

    def metrics(self) -> list:
        return list(_metrics())


def _checked(t) -> str:
    """What the combine's check found: with learned routing the experts' weights change,
    so the hosts cannot recompute them and nothing is checked (logged as null)."""
    checked = t["mismatched"].dropna()
    if checked.empty:
        return "returned rows not checked (the experts train: only zipf routing checks them)."
    return f"returned rows that differ from their expert's output: {int(checked.sum())}."


def step_table(workers):
    """One row per host × step: rank, iteration, tokens routed/sent/dropped/received,
    alltoall_s (the four all-to-alls added), mismatched, sent_counts (list)."""
    import pandas as pd

    cols = ["rank", "iteration", "tokens_routed", "tokens_sent", "tokens_dropped",
            "tokens_received", "alltoall_s", "mismatched", "sent_counts", "loss"]
    if workers is None or workers.empty or "tokens_routed" not in workers:
        return pd.DataFrame(columns=cols)
    it = workers[(workers["event"] == "iteration") & workers["tokens_routed"].notna()].copy()
    starts = workers[workers["event"] == "start"].set_index("file")
    it["rank"] = it["file"].map(starts["rank"]) if "rank" in starts else it.get("rank")
    it["alltoall_s"] = [sum(v) for v in it["alltoall_s"]]
    if "loss" not in it:  # zipf routing trains nothing
        it["loss"] = float("nan")
    return it[cols].reset_index(drop=True)


def mean_matrix(a) -> list[list[float]] | None:
    """Bytes host i sent host j per step (mean over steps): the logged sent_counts × the
    token's bytes."""
    raw = a.tables.get("workers_raw")
    t = step_table(raw)
    if t.empty:
        return None
    starts = raw[raw["event"] == "start"]
    token_bytes = float(starts["token_bytes"].dropna().iloc[0]) \
        if "token_bytes" in starts and starts["token_bytes"].notna().any() else None
    if token_bytes is None:
        return None
    n = int(t["rank"].max()) + 1
    mat = [[0.0] * n for _ in range(n)]
    for rank, g in t.groupby("rank"):
        for counts in g["sent_counts"]:
            for j, c in enumerate(counts):
                mat[int(rank)][j] += c * token_bytes / len(g)
    return mat


def skew(t) -> float | None:
    """Tokens the busiest expert received per step over the mean expert's."""
    per = t.groupby("rank")["tokens_received"].mean()
    return float(per.max() / per.mean()) if len(per) and per.mean() > 0 else None


@functools.cache
def _metrics() -> tuple:
    from incastlab.analysis.metrics import Metric

    def table(a):
        return a.tables.get("moe")

    def total(col):
        def f(a):
            t = table(a)
            return int(t[col].sum()) if t is not None and len(t) else None
        return f

    return (
        Metric("tokens_dropped", "tokens dropped over capacity", "tokens",
               "Token-expert assignments dropped because the expert's capacity for that "
               "host was full, over the whole run.", total("tokens_dropped"), ("workers",)),
        Metric("expert_skew", "expert load skew", "ratio",
               "Tokens the busiest expert received per step over the mean expert's (1.0 = "
               "even).", lambda a: skew(table(a)) if table(a) is not None else None,
               ("workers",)),
    )


def moe_commands(hosts: list[Endpoint], out: str, port: int, options: dict,
                 python: str = sys.executable) -> list[list[str]]:
    """One argv per host of incastlab.apps.moe: rank e holds expert e (hosts[0] hosts
    the rendezvous)."""
    return one_rank_per_host("incastlab.apps.moe", hosts, out, port, options, python)
