"""The ring all-reduce job (``kind = "ring"``): ``workers`` ranks, each talking only to
its ring neighbours (the NCCL/Horovod pattern), with our chunked, pipelined ring or
gloo's own ``all_reduce``. The program is ``incastlab.apps.ring``; this module owns its
spec fields, placement, launch plan and cost model."""
from __future__ import annotations

from dataclasses import dataclass

from incastlab.apps.commands import WORKLOADS as APP_COMMANDS
from incastlab.fields import choice, spec_field
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
RING_IMPLS = ("ring", "gloo")


@dataclass
class RingFields(TrainingFields):
    impl: str = spec_field("ring", choice(*RING_IMPLS),
                           "ring: our chunked ring all-reduce; gloo: torch.distributed "
                           "all_reduce", sweep=True)


class RingJob(Job):
    kind = "ring"
    summary = "ring all-reduce: every rank sends 2(N-1)/N of the model to its neighbour"
    logged_modes = ("ring", "gloo")
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

    # -- analysis --------------------------------------------------------------------
    def bound(self, a):
        """2(N−1)/N·M over the slowest rank's link with data + ACK framing, and the
        uplinks of the leaves the ring crosses (analysis.costmodel.ring_bound)."""
        w, p = runview.workload(a), runview.placed(a)
        if p is None or a.fabric is None or len(p.workers) < 2:
            return None
        rates = [runview.host_mbps(a, h) for h in p.workers]
        if None in rates:
            return None
        spines = runview.usable_spines(a)
        fabric = {"leaves": [runview.leaf_of(a, h) for h in p.workers], "spines": spines,
                  "fabric_mbps": a.fabric.fabric_bw_mbps} \
            if spines and a.fabric.fabric_bw_mbps else {}
        return rep.costmodel.ring_bound(len(p.workers), runview.gradient_bytes(a, w), rates,
                                        **fabric)

    def attribution_rows(self, a):
        """Every rank's iterations; a stalled flow anywhere holds the whole ring."""
        p = runview.placed(a)
        return a.tables["iterations"], list(p.workers) if p else []

    def tables(self, a) -> dict:
        return {"ring": rep.training.ring_bound(a.tables["workers_raw"], a.fabric)}

    def plots(self, a) -> dict:
        return {"ring": lambda path: rep.plotting.ring_vs_bound(a.tables["ring"], path)}

    def sections(self, a, figs) -> list[Section]:
        ring = a.tables["ring"]
        if ring.empty:
            return [Section("Ring all-reduce vs bound", *rep.render.none(
                "no all-reduce times in the worker logs"))]
        bound_s = float(ring["bound_s"].iloc[0])
        mean_s = float(ring["allreduce_s"].mean())
        txt = (f"all-reduce mean {rep.render.fmt(mean_s)} s vs 2(N−1)/N·M/B = "
               f"{rep.render.fmt(bound_s)} s (ratio {rep.render.fmt(mean_s / bound_s)}; "
               "the framing of 1514-byte frames carrying 1448 payload bytes, and the ACKs "
               "of the incoming flow on the same link, make about 1.068 the best possible)")
        return [Section("Ring all-reduce vs bound",
                        f"<p>{txt}</p>" + rep.render.img(figs.get("ring"), "ring"), txt + "\n")]
