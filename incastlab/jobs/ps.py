"""The parameter-server job (``kind = "ps"``): ``shards`` PS hosts on ``ps_leaf`` and
``workers`` workers that push gradients and pull parameters back, in one of four
consistency modes (sync, async, SSP, backup workers). The program is
``incastlab.apps.ps``; this module owns its spec fields, placement, launch plan and
cost model."""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

from incastlab.analysis.trace_events import LoggedInstant
from incastlab.apps.commands import Endpoint, option_args, rank_args
from incastlab.fields import choice, int_check, num_check, optional, pattern, spec_field
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

PS_MODES = ("sync", "async", "ssp", "backup")
# The app's (incastlab.apps.ps: LR_RULES, DEFAULT_LR_RULE; not imported here, it needs
# torch); tests/test_jobs_ps_modes.py checks they agree.
LR_RULES = ("mean", "per_worker", "staleness")
DEFAULT_LR_RULE = {"sync": "mean", "backup": "mean", "async": "per_worker",
                   "ssp": "per_worker"}


@dataclass
class PsFields(TrainingFields):
    mode: str = spec_field("sync", choice(*PS_MODES),
                           "PS consistency: sync, async, ssp (bounded staleness), backup "
                           "(drop the last backup_workers gradients of each step)", sweep=True)
    shards: int = spec_field(1, int_check(1, 100), "PS hosts the model is sharded over (ps)")
    staleness: int | None = spec_field(None, optional(int_check(0, 1000, unit="steps")),
                                       "ssp: how far the fastest worker may run ahead; "
                                       "required for mode ssp", sweep=True)
    backup_workers: int | None = spec_field(None, optional(int_check(0, 999)),
                                            "backup: late gradients dropped per step; "
                                            "required for mode backup, fewer than workers",
                                            sweep=True)
    lr_rule: str | None = spec_field(
        None, optional(choice(*LR_RULES)),
        "how an update scales lr: mean (lr x the average of its gradients), per_worker "
        "(lr / workers per gradient), staleness (lr / (1 + staleness) per gradient, "
        "averaged); default: mean for sync and backup, per_worker for async and ssp, so "
        "that N gradients move the model as far in every mode", sweep=True)
    compute_ms: float = spec_field(
        0.0, num_check(0, 600_000, unit="ms"),
        "emulated compute of one worker iteration: the real compute is padded with a "
        "sleep to at least this; a straggler's factor multiplies the padded time",
        sweep=True)
    eval_every: int | None = spec_field(
        None, optional(int_check(1, 10_000_000, unit="gradients")),
        "held-out accuracy and loss are evaluated at the PS every this many gradients "
        "applied (needs shards = 1); default: workers (one sync step)")
    target_accuracy: float | None = spec_field(
        None, optional(num_check(0, 1, low_open=True, unit="fraction")),
        "held-out accuracy to reach: the report gives the time and gradients it took "
        "(needs target_source)", sweep=True)
    target_source: str = spec_field("", pattern(r"[^\x00]*", "text"),
                                    "where target_accuracy comes from (a measurement, a "
                                    "paper), shown beside it in the reports")


class PsJob(Job):
    kind = "ps"
    summary = "parameter server: workers push gradients to the PS and pull parameters"
    host_count_fields = ("workers", "shards")
    logged_modes = ("sync", "async", "ssp", "backup")
    Fields = PsFields
    role_nouns = {"server": "the parameter server"}
    trace_spans = (LoggedInstant("update", "update", "update",
                                 ("version", "from_ranks", "staleness", "discarded")),)

    def roles(self, w) -> Roles:
        return Roles(w.shards, w.workers, "workers", "PS host" if w.shards == 1 else "PS hosts")

    def check(self, w, ok) -> list[str]:
        errors = []
        if w.mode == "ssp" and w.staleness is None and ok("workload.staleness"):
            errors.append("workload.staleness: missing; mode ssp needs an integer >= 0 (steps "
                          "the fastest worker may run ahead of the slowest)")
        if w.mode == "backup" and ok("workload.backup_workers", "workload.workers"):
            if w.backup_workers is None:
                errors.append("workload.backup_workers: missing; mode backup needs an integer "
                              "from 0 to workload.workers - 1")
            elif w.backup_workers >= w.workers:
                errors.append(f"workload.backup_workers: {w.backup_workers!r} is not from 0 to "
                              f"{w.workers - 1} (fewer than workload.workers = {w.workers})")
        if w.target_accuracy is not None and ok("workload.target_accuracy",
                                                "workload.target_source") \
                and not w.target_source.strip():
            errors.append("workload.target_source: missing; say where target_accuracy "
                          f"{w.target_accuracy:g} comes from (a measurement, a paper)")
        if ok("workload.shards") and w.shards > 1:
            for key in ("target_accuracy", "eval_every"):
                if getattr(w, key) is not None and ok(f"workload.{key}"):
                    errors.append(f"workload.{key}: needs shards = 1 (only a single PS "
                                  f"holds the whole model to evaluate), not {w.shards}")
        if ok("workload.compute_ms", "workload.stragglers", "workload.timeout_s"):
            factor = max([s.factor if hasattr(s, "factor") else s.get("factor", 1)
                          for s in w.stragglers] + [1])
            slowest = w.compute_ms * factor / 1000
            if slowest >= w.timeout_s:
                errors.append(f"workload.compute_ms: {w.compute_ms:g} ms x the slowest "
                              f"straggler's factor {factor:g} = {slowest:g} s, not below "
                              f"workload.timeout_s ({w.timeout_s:g} s): the others would "
                              "time out waiting for it")
        if not ok("workload.shards"):  # the workers' ranks start after the servers'
            return errors
        return errors + straggler_problems(w, w.workers, ok, "workload.workers", w.shards,
                                           "PS hosts" if w.shards > 1 else "PS host")

    def launches(self, spec, ips, out_dir) -> list[Launch]:
        w = spec.workload
        placed = spec.placement()
        shards = len(placed.servers)
        hosts = placed.ranks
        options = {"mode": w.mode, "shards": shards, **training_options(spec),
                   "staleness": w.staleness if w.mode == "ssp" else None,
                   "backup_workers": w.backup_workers if w.mode == "backup" else None,
                   "lr_rule": w.lr_rule, "eval_every": w.eval_every,
                   "compute_ms": f"{w.compute_ms:g}" if w.compute_ms else None,
                   # one numbering (Placement.ranks): the spec's rank is the app's
                   "slowdown": [f"{s.rank}:{s.factor:g}" for s in w.stragglers]}
        argvs = ps_commands(endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT, options)
        return [Launch(host, argv, rank, "server" if rank < shards else "worker",
                       rank >= shards)
                for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]

    def tolerates_lost_workers(self, w) -> int:
        """What the app does with a lost worker (incastlab.apps.ps): sync needs every
        gradient of every step (0); backup goes on while N - B are left (B); async and
        SSP go on while one is left (N - 1)."""
        return {"sync": 0, "backup": w.backup_workers or 0}.get(w.mode, w.workers - 1)

    # -- analysis --------------------------------------------------------------------
    def bound(self, analysis):
        """The sync/async PS bound (jobs/ps_bound.py) on the fabric it ran
        on: each worker's and shard's own link rate, their leaves, the spines the
        routing lets a flow use."""
        from incastlab.analysis import runview
        from incastlab.jobs.ps_bound import ps_bound

        w, p = runview.workload(analysis, self.Fields), runview.placed(analysis)
        if p is None or analysis.fabric is None or not p.servers or not p.workers:
            return None
        w_rates = [runview.host_mbps(analysis, h) for h in p.workers]
        s_rates = [runview.host_mbps(analysis, h) for h in p.servers]
        if None in w_rates or None in s_rates:
            return None
        spines = runview.usable_spines(analysis)
        leaves = {"worker_leaves": [runview.leaf_of(analysis, h) for h in p.workers],
                  "shard_leaves": [runview.leaf_of(analysis, h) for h in p.servers],
                  "spines": spines, "fabric_mbps": analysis.fabric.fabric_bw_mbps} \
            if spines and analysis.fabric.fabric_bw_mbps else {}
        compute = runview.mean_compute_s(analysis) if w.mode != "sync" else 0.0
        return ps_bound(len(p.workers), len(p.servers), runview.gradient_bytes(analysis, w),
                        w_rates, s_rates, mode=w.mode, compute_s=compute,
                        mtu=runview.mtu(analysis), **leaves)

    def schedule_s(self, analysis, bound) -> float:
        """A sync PS pushes, then (after the barrier) pulls: its schedule adds
        push_then_pull − the pipelined chain bound (ps_bound) to each
        iteration, whatever the network does."""
        from incastlab.analysis import runview
        if bound is None or runview.workload(analysis, self.Fields).mode != "sync":
            return 0.0
        return max(0.0, bound.terms.get("push_then_pull", bound.seconds) - bound.seconds)

    def attribution_rows(self, analysis):
        """Every worker iteration; under sync, backup and SSP each waits on the flows
        of the PS hosts too (the barrier), under async only on its own."""
        from incastlab.analysis import runview
        p = runview.placed(analysis)
        mode = runview.workload(analysis, self.Fields).mode
        waits_on = list(p.servers) if p and mode != "async" else []
        return analysis.tables["iterations"], waits_on

    def tables(self, analysis) -> dict:
        from incastlab.analysis import runview
        from incastlab.analysis import accuracy
        from incastlab.jobs.ps_tables import discarded, staleness

        workers = analysis.tables["workers_raw"]
        curve = accuracy.curve(workers)
        return {"staleness": staleness(workers),
                "discarded": discarded(workers),
                "accuracy": curve,
                "time_to_accuracy": accuracy.reach(
                    curve, runview.workload(analysis, self.Fields).target_accuracy),
                "lr_rule": accuracy.lr_rule(workers)}

    def plots(self, analysis) -> dict:
        from incastlab.analysis import plots as plotting
        from incastlab.analysis import runview
        from incastlab.jobs.ps_figures import staleness_hist

        t = analysis.tables
        target = runview.workload(analysis, self.Fields).target_accuracy
        return {"staleness": lambda path: staleness_hist(t["staleness"], path),
                "accuracy": lambda path: plotting.accuracy_curves(
                    [(runview.workload(analysis, self.Fields).mode, t["accuracy"])], path, target)}

    def sections(self, analysis, figs) -> list[Section]:
        return [self._accuracy_section(analysis, figs)] + self._staleness_sections(analysis, figs)

    def _accuracy_section(self, analysis, figs) -> Section:
        """The learning-rate rule, and held-out accuracy over time and gradients."""
        from incastlab.analysis import render, runview
        from incastlab.analysis import accuracy

        w = runview.workload(analysis, self.Fields)
        title = "Parameter server: learning rate and time to accuracy"
        rule = accuracy.rule_sentence(analysis.tables.get("lr_rule") or {})
        run = accuracy.run_sentence(analysis.tables.get("accuracy"),
                                    analysis.tables.get("time_to_accuracy") or {},
                                    w.target_source or None, analysis.tables.get("staleness"))
        if not run:
            run = ("No held-out evaluations in the logs (the PS evaluates only when it "
                   "holds the whole model: shards = 1).")
        text = " ".join(t for t in (rule, run) if t)
        return Section(title, f"<p>{render.esc(text)}</p>"
                       + render.img(figs.get("accuracy"), "held-out accuracy"),
                       text + "\n")

    def findings(self, analysis) -> list[str]:
        """Time to the target accuracy, with what the run's rule and staleness were."""
        from incastlab.analysis import runview
        from incastlab.analysis import accuracy

        run = accuracy.run_sentence(analysis.tables.get("accuracy"),
                                    analysis.tables.get("time_to_accuracy") or {},
                                    runview.workload(analysis, self.Fields).target_source or None,
                                    analysis.tables.get("staleness"))
        return [run] if run else []

    def _staleness_sections(self, analysis, figs) -> list[Section]:
        from incastlab.analysis import render
        stale, disc = analysis.tables["staleness"], analysis.tables["discarded"]
        mean = float(stale.mean()) if len(stale) else None
        disc_html = ("<h3>Late gradients discarded by the PS (backup workers)</h3>"
                     + render.df_html(disc)) \
            if len(disc) and disc["discarded"].sum() else ""
        if not len(stale) and not disc_html:
            return [Section("Parameter server: staleness", *render.none(
                "no staleness values in the worker logs"))]
        return [Section("Parameter server: staleness and discarded gradients",
                        render.img(figs.get("staleness"), "staleness") + disc_html,
                        f"staleness mean {render.fmt(mean)}\n"
                        + (f"\nDiscarded gradients:\n\n{render.df_md(disc)}"
                           if disc_html else ""))]

    def metrics(self) -> list:
        return list(_metrics())

    def summary_blocks(self, analysis) -> dict:
        """metrics.json `discarded_gradients`: gradients a backup-mode PS dropped (None
        where the run logged no update that says)."""
        dropped = analysis.tables.get("discarded")
        return {"discarded_gradients": int(dropped["discarded"].sum())
                if dropped is not None and len(dropped) else None}


@functools.cache
def _metrics() -> tuple:
    """The PS job's headline metrics (declared once: the same objects on every call)."""
    from incastlab.analysis.metrics import Metric

    def reached(key):
        def f(a):
            r = a.tables.get("time_to_accuracy") or {}
            return r.get(key) if r.get("reached") else None
        return f

    def why_not(a):
        r = a.tables.get("time_to_accuracy") or {}
        if not r.get("evaluations"):
            return ("no eval events in the logs (the PS evaluates held-out accuracy only "
                    "with shards = 1)")
        if r.get("target") is None:
            return "no workload.target_accuracy in the spec"
        return f"the target {r['target']:g} was not reached (best {r.get('best', 0):.3f})"

    def rate(a):
        return (a.tables.get("lr_rule") or {}).get("rate_mean")

    def staleness_mean(a):
        st = a.tables.get("staleness")
        return float(st.mean()) if st is not None and len(st) else None

    return (
        Metric("staleness_mean", "mean gradient staleness", "versions",
               "Parameter server: how many model versions old a gradient was when it was "
               "applied (0 in synchronous training).",
               staleness_mean, ("workers",), "no staleness values in the logs",
               after="spine_max_mean"),
        Metric("time_to_target_s", "time to the target accuracy", "s",
               "Seconds from the start of training (the PS's first evaluation) to the "
               "first held-out evaluation at or above workload.target_accuracy.",
               reached("t_s"), ("workers",), why_not, cli=True, plot=True),
        Metric("gradients_to_target", "gradients to the target accuracy", "gradients",
               "Gradients the PS had applied at the first held-out evaluation at or above "
               "workload.target_accuracy.",
               reached("applied"), ("workers",), why_not, plot=True),
        Metric("lr_per_gradient", "learning rate per gradient", "",
               "The rate each gradient was applied with under the run's learning-rate "
               "rule (workload.lr_rule), mean over the applied gradients.",
               rate, ("workers",), "no rates in the PS's update events"),
    )


def ps_commands(hosts: list[Endpoint], out: str, port: int, options: dict,
                python: str = sys.executable) -> list[list[str]]:
    """One argv per host of incastlab.apps.ps: ranks 0..shards-1 servers (hosts[0] hosts
    the rendezvous), the rest workers."""
    shards = int(options.get("shards", 1))
    rest = option_args({k: v for k, v in options.items() if k != "shards"})
    return [[python, "-m", "incastlab.apps.ps",
             "--role", "server" if rank < shards else "worker", *rank_args(rank, hosts, port),
             "--out", str(out), "--shards", str(shards), *rest]
            for rank in range(len(hosts))]


def ps_argv(workers: int, out, port: int, shards: int = 1, extra: list[str] | None = None
            ) -> list[list[str]]:
    """Command lines of a PS job on loopback (tests, benchmarks): ranks 0..shards-1
    servers, then `workers` workers, each with `extra` appended."""
    from incastlab.apps.local import loopback_argv

    return loopback_argv(ps_commands, shards + workers, out, port, {"shards": shards}, extra)
