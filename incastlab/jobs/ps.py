"""The parameter-server job (``kind = "ps"``): ``shards`` PS hosts on ``ps_leaf`` and
``workers`` workers that push gradients and pull parameters back, in one of four
consistency modes (sync, async, SSP, backup workers). The program is
``incastlab.apps.ps``; this module owns its spec fields, placement, launch plan and
cost model."""
from __future__ import annotations

from dataclasses import dataclass

from incastlab.apps.commands import WORKLOADS as APP_COMMANDS
from incastlab.fields import choice, int_check, optional, spec_field
from incastlab.jobs import reporting as rep
from incastlab.jobs import runview
from incastlab.jobs.base import (
    Job,
    Launch,
    Roles,
    Section,
    TrainingFields,
    endpoints,
    straggler_problems,
    training_options,
)

RENDEZVOUS_PORT = 29500
PS_MODES = ("sync", "async", "ssp", "backup")


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


class PsJob(Job):
    kind = "ps"
    summary = "parameter server: workers push gradients to the PS and pull parameters"
    host_count_fields = ("workers", "shards")
    logged_modes = ("sync", "async", "ssp", "backup")
    Fields = PsFields

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
        return errors + straggler_problems(w, w.workers, ok, "workload.workers")

    def launches(self, spec, ips, out_dir) -> list[Launch]:
        w = spec.workload
        placed = spec.placement()
        shards = len(placed.servers)
        hosts = placed.servers + placed.workers
        options = {"mode": w.mode, "shards": shards, **training_options(spec),
                   "staleness": w.staleness if w.mode == "ssp" else None,
                   "backup_workers": w.backup_workers if w.mode == "backup" else None,
                   # spec ranks count workers only; the PS app numbers its servers first
                   "slowdown": [f"{shards + s.rank}:{s.factor:g}" for s in w.stragglers]}
        argvs = APP_COMMANDS["ps"](endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT, options)
        return [Launch(host, argv, rank, "server" if rank < shards else "worker",
                       rank >= shards)
                for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]

    # -- analysis --------------------------------------------------------------------
    def bound(self, a):
        """The sync/async PS bound (analysis.costmodel.ps_bound) on the fabric it ran
        on: each worker's and shard's own link rate, their leaves, the spines the
        routing lets a flow use."""
        w, p = runview.workload(a), runview.placed(a)
        if p is None or a.fabric is None or not p.servers or not p.workers:
            return None
        w_rates = [runview.host_mbps(a, h) for h in p.workers]
        s_rates = [runview.host_mbps(a, h) for h in p.servers]
        if None in w_rates or None in s_rates:
            return None
        spines = runview.usable_spines(a)
        leaves = {"worker_leaves": [runview.leaf_of(a, h) for h in p.workers],
                  "shard_leaves": [runview.leaf_of(a, h) for h in p.servers],
                  "spines": spines, "fabric_mbps": a.fabric.fabric_bw_mbps} \
            if spines and a.fabric.fabric_bw_mbps else {}
        compute = runview.mean_compute_s(a) if w.mode != "sync" else 0.0
        return rep.costmodel.ps_bound(len(p.workers), len(p.servers),
                                      runview.gradient_bytes(a, w), w_rates, s_rates,
                                      mode=w.mode, compute_s=compute, **leaves)

    def schedule_s(self, a, bound) -> float:
        """A sync PS pushes, then (after the barrier) pulls: its schedule adds
        push_then_pull − the pipelined chain bound (costmodel.ps_bound) to each
        iteration, whatever the network does."""
        if bound is None or runview.workload(a).mode != "sync":
            return 0.0
        return max(0.0, bound.terms.get("push_then_pull", bound.seconds) - bound.seconds)

    def attribution_rows(self, a):
        """Every worker iteration; under sync, backup and SSP each waits on the flows
        of the PS hosts too (the barrier), under async only on its own."""
        p = runview.placed(a)
        waits_on = list(p.servers) if p and runview.workload(a).mode != "async" else []
        return a.tables["iterations"], waits_on

    def tables(self, a) -> dict:
        workers = a.tables["workers_raw"]
        return {"staleness": rep.training.staleness(workers),
                "discarded": rep.training.discarded(workers)}

    def plots(self, a) -> dict:
        t = a.tables
        return {"staleness": lambda path: rep.plotting.staleness_hist(t["staleness"], path)}

    def sections(self, a, figs) -> list[Section]:
        stale, disc = a.tables["staleness"], a.tables["discarded"]
        mean = float(stale.mean()) if len(stale) else None
        disc_html = ("<h3>Late gradients discarded by the PS (backup workers)</h3>"
                     + rep.render.df_html(disc)) \
            if len(disc) and disc["discarded"].sum() else ""
        if not len(stale) and not disc_html:
            return [Section("Parameter server: staleness", *rep.render.none(
                "no staleness values in the worker logs"))]
        return [Section("Parameter server: staleness and discarded gradients",
                        rep.render.img(figs.get("staleness"), "staleness") + disc_html,
                        f"staleness mean {rep.render.fmt(mean)}\n"
                        + (f"\nDiscarded gradients:\n\n{rep.render.df_md(disc)}"
                           if disc_html else ""))]
