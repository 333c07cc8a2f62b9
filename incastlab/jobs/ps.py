"""The parameter-server job (``kind = "ps"``): ``shards`` PS hosts on ``ps_leaf`` and
``workers`` workers that push gradients and pull parameters back, in one of four
consistency modes (sync, async, SSP, backup workers). The program is
``incastlab.apps.ps``; this module owns its spec fields, placement, launch plan and
cost model."""
from __future__ import annotations

from dataclasses import dataclass

from incastlab.apps.commands import WORKLOADS as APP_COMMANDS
from incastlab.fields import choice, int_check, optional, spec_field
from incastlab.jobs.base import (
    Job,
    Launch,
    Roles,
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
