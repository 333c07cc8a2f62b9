"""The data-parallel all-reduce job (``kind = "ring"``): ``workers`` ranks all-reducing
their gradients every iteration with one of our algorithms (``algorithm``: the chunked,
pipelined ring of NCCL/Horovod, recursive halving-doubling, a pipelined binary tree or
the leaf-aware hierarchical one) or gloo's own ``all_reduce``. The program is
``incastlab.apps.ring``; this module owns its spec fields, placement, launch plan (with
each rank's leaf, for the hierarchical algorithm) and cost model (each algorithm's bound,
``analysis.costmodel.allreduce_bound``)."""
from __future__ import annotations

from dataclasses import dataclass

from incastlab.apps.commands import WORKLOADS as APP_COMMANDS
from incastlab.fields import choice, spec_field
from incastlab.jobs import reporting as rep
from incastlab.jobs import runview
from incastlab.topologies import naming
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
# apps.ring.ALGORITHMS and analysis.costmodel.ALLREDUCE_ALGORITHMS (torch- and
# pandas-free here: the spec loads without them); tests/test_jobs_allreduce.py checks
# the three agree.
ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")


@dataclass
class RingFields(TrainingFields):
    impl: str = spec_field("ring", choice(*RING_IMPLS),
                           "ring: our chunked ring all-reduce; gloo: torch.distributed "
                           "all_reduce", sweep=True)
    algorithm: str = spec_field("ring", choice(*ALGORITHMS),
                                "impl ring: ring, halving-doubling (recursive halving then "
                                "doubling), tree (binary, pipelined) or hierarchical (reduce "
                                "in each leaf, ring of leaf leaders, broadcast back)",
                                sweep=True)


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
        if ok("workload.impl", "workload.algorithm") and w.impl == "gloo" \
                and w.algorithm != "ring":
            errors.append(f"workload.algorithm: {w.algorithm!r} is ours; impl \"gloo\" runs "
                          "gloo's own all_reduce (set impl = \"ring\", or algorithm = \"ring\")")
        return errors + straggler_problems(w, w.workers, ok, "workload.workers")

    def launches(self, spec, ips, out_dir) -> list[Launch]:
        w = spec.workload
        hosts = spec.placement().workers
        options = {"impl": w.impl, **training_options(spec),
                   "algorithm": w.algorithm if w.impl == "ring" else None,
                   "leaves": ",".join(leaf_names(spec, hosts))
                   if w.algorithm == "hierarchical" else None,
                   "slowdown": [f"{s.rank}:{s.factor:g}" for s in w.stragglers]}
        argvs = APP_COMMANDS["ring"](endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT, options)
        return [Launch(host, argv, rank, "ring", True)
                for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]

    # -- analysis --------------------------------------------------------------------
    def bound(self, a):
        """The bound of the run's algorithm (analysis.costmodel.allreduce_bound) over the
        ranks' own link rates and, where the fabric map gives them, their leaves and the
        spines a flow may use. The ring: 2(N−1)/N·M over the slowest rank's link with
        data + ACK framing, and the uplinks of the leaves the ring crosses; gloo's
        all_reduce is held to the ring's bound (the least any algorithm moves)."""
        w, p = runview.workload(a), runview.placed(a)
        if p is None or a.fabric is None or len(p.workers) < 2:
            return None
        rates = [runview.host_mbps(a, h) for h in p.workers]
        if None in rates:
            return None
        algorithm = algorithm_of(w)
        spines = runview.usable_spines(a)
        leaves = [runview.leaf_of(a, h) for h in p.workers]
        fabric = {"leaves": leaves, "spines": spines,
                  "fabric_mbps": a.fabric.fabric_bw_mbps} \
            if spines and a.fabric.fabric_bw_mbps else {}
        if algorithm == "hierarchical":  # its groups need the leaves, fabric or not
            fabric["leaves"] = leaves
        m = runview.gradient_bytes(a, w)
        if algorithm == "ring":  # the same call as before the other algorithms came
            return rep.costmodel.ring_bound(len(p.workers), m, rates, **fabric)
        return rep.costmodel.allreduce_bound(algorithm, len(p.workers), m, rates,
                                             slices=_logged_tree_slices(a), **fabric)

    def attribution_rows(self, a):
        """Every rank's iterations; a stalled flow anywhere holds the whole ring."""
        p = runview.placed(a)
        return a.tables["iterations"], list(p.workers) if p else []

    def tables(self, a) -> dict:
        ring = rep.training.ring_bound(a.tables["workers_raw"], a.fabric)
        if algorithm_of(runview.workload(a)) != "ring" and not ring.empty:
            # the unframed 2(N−1)/N·M/B is the ring's; other algorithms get their own
            bound = self.bound(a)
            ring["bound_s"] = bound.seconds if bound is not None else float("nan")
            ring["ratio"] = ring["allreduce_s"] / ring["bound_s"]
        return {"ring": ring}

    def plots(self, a) -> dict:
        return {"ring": lambda path: rep.plotting.ring_vs_bound(a.tables["ring"], path)}

    def sections(self, a, figs) -> list[Section]:
        ring = a.tables["ring"]
        algorithm = algorithm_of(runview.workload(a))
        title = "Ring all-reduce vs bound" if algorithm == "ring" else \
            f"All-reduce ({algorithm}) vs its bound"
        if ring.empty:
            return [Section(title, *rep.render.none("no all-reduce times in the worker logs"))]
        bound_s = float(ring["bound_s"].iloc[0])
        mean_s = float(ring["allreduce_s"].mean())
        if algorithm == "ring":
            txt = (f"all-reduce mean {rep.render.fmt(mean_s)} s vs 2(N−1)/N·M/B = "
                   f"{rep.render.fmt(bound_s)} s (ratio {rep.render.fmt(mean_s / bound_s)}; "
                   "the framing of 1514-byte frames carrying 1448 payload bytes, and the ACKs "
                   "of the incoming flow on the same link, make about 1.068 the best "
                   "possible)")
        else:
            bound = a.tables.get("bound")
            txt = (f"{algorithm} all-reduce mean {rep.render.fmt(mean_s)} s vs its bound "
                   f"{rep.render.fmt(bound_s)} s (ratio {rep.render.fmt(mean_s / bound_s)}; "
                   "the bound counts the framing, so 1.0 is the best possible)"
                   + (f": {bound.formula}" if bound is not None else ""))
        return [Section(title, f"<p>{rep.render.esc(txt)}</p>"
                        + rep.render.img(figs.get("ring"), "ring"), txt + "\n")]


def algorithm_of(w) -> str:
    """The all-reduce algorithm a run used: ``algorithm`` under impl ring; gloo's own
    all_reduce is held to the ring's bound."""
    return getattr(w, "algorithm", "ring") if w.impl == "ring" else "ring"


def leaf_names(spec, hosts) -> list[str]:
    """The leaf of each host (fabric naming: host h{n} hangs off leaf lf{(n-1)//H + 1};
    a star's hosts all share its one switch, leaf 1)."""
    per_leaf = spec.topology.hosts_per_leaf if spec.topology.kind == "leafspine" else None
    return [naming.leaf_name(naming.host_position(int(h[1:]), per_leaf)[0] if per_leaf else 1)
            for h in hosts]


def _logged_tree_slices(a) -> int:
    """The slices the tree ranks logged (start events); without them a count so large the
    fill term vanishes (the bound stays a lower bound)."""
    import pandas as pd  # analysis only: the spec loads without pandas

    starts = a.tables.get("starts")
    if isinstance(starts, pd.DataFrame) and "tree_slices" in starts:
        v = pd.to_numeric(starts["tree_slices"], errors="coerce").dropna()
        if len(v):
            return int(v.max())
    return 1 << 30
