"""The ring all-reduce job (``kind = "ring"``): ``workers`` ranks, each talking only to
its ring neighbours (the NCCL/Horovod pattern), with our chunked, pipelined ring or
gloo's own ``all_reduce``. The program is ``incastlab.apps.ring``; this module owns its
spec fields, placement, launch plan and cost model."""
from __future__ import annotations

from dataclasses import dataclass

from incastlab.apps.commands import WORKLOADS as APP_COMMANDS
from incastlab.fields import choice, spec_field
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
RING_IMPLS = ("ring", "gloo")


@dataclass
class RingFields(TrainingFields):
    impl: str = spec_field("ring", choice(*RING_IMPLS),
                           "ring: our chunked ring all-reduce; gloo: torch.distributed "
                           "all_reduce", sweep=True)


class RingJob(Job):
    kind = "ring"
    summary = "ring all-reduce: every rank sends 2(N-1)/N of the model to its neighbour"
    Fields = RingFields

    def roles(self, w) -> Roles:
        return Roles(0, w.workers, "ring ranks")

    def check(self, w, ok) -> list[str]:
        errors = []
        if ok("workload.workers") and w.workers < 2:
            errors.append(f"workload.workers: {w.workers!r} is not an integer >= 2, as a ring "
                          "needs")
        return errors + straggler_problems(w, w.workers, ok, "workload.workers")

    def launches(self, spec, ips, out_dir) -> list[Launch]:
        w = spec.workload
        hosts = spec.placement().workers
        options = {"impl": w.impl, **training_options(spec),
                   "slowdown": [f"{s.rank}:{s.factor:g}" for s in w.stragglers]}
        argvs = APP_COMMANDS["ring"](endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT, options)
        return [Launch(host, argv, rank, "ring", True)
                for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]
