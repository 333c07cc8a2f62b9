"""The data-parallel all-reduce job (``kind = "ring"``): ``workers`` ranks all-reducing
their gradients every iteration with one of our algorithms (``algorithm``: the chunked,
pipelined ring of NCCL/Horovod, recursive halving-doubling, a pipelined binary tree or
the leaf-aware hierarchical one) or gloo's own ``all_reduce``. The program is
``incastlab.apps.ring``; this module owns its spec fields, placement, launch plan (with
each rank's leaf, for the hierarchical algorithm) and cost model (each algorithm's bound,
``jobs/ring_bound.py``)."""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

from incastlab.apps.collectives import ALGORITHMS
from incastlab.apps.commands import Endpoint, one_rank_per_host
from incastlab.fields import choice, int_check, num_check, spec_field
from incastlab.topologies import naming
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

RING_IMPLS = ("ring", "gloo")


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
    bucket_cap_mb: float = spec_field(0.0, num_check(0, 10_000, unit="MB"),
                                      "gradient buckets of about this many MB (DDP's "
                                      "bucket_cap_mb), each all-reduced as soon as the "
                                      "emulated backward produced it; 0: one all-reduce "
                                      "after the backward", sweep=True)
    layer_compute_ms: float = spec_field(0.0, num_check(0, 60_000, unit="ms"),
                                         "emulated backward: compute per layer, after the "
                                         "real gradient (0 and bucket_cap_mb 0: none)",
                                         sweep=True)
    backward_layers: int = spec_field(8, int_check(1, 1024),
                                      "layers of the emulated backward (the gradient cut "
                                      "into this many equal parts)")


class RingJob(Job):
    kind = "ring"
    summary = ("data-parallel all-reduce: ring, halving-doubling, tree, hierarchical or "
               "gloo's; optionally bucketed behind an emulated backward")
    logged_modes = ("ring", "gloo")
    Fields = RingFields
    role_nouns = {"ring": "a ring rank"}

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
                   **(backward_options(w) if emulates_backward(w) else {}),
                   "slowdown": [f"{s.rank}:{s.factor:g}" for s in w.stragglers]}
        argvs = ring_commands(endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT, options)
        return [Launch(host, argv, rank, "ring", True)
                for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]

    # -- analysis --------------------------------------------------------------------
    def bound(self, analysis):
        """The bound of the run's algorithm (jobs/ring_bound.py: allreduce_bound) over the
        ranks' own link rates and, where the fabric map gives them, their leaves and the
        spines a flow may use. The ring: 2(N−1)/N·M over the slowest rank's link with
        data + ACK framing, and the uplinks of the leaves the ring crosses; gloo's
        all_reduce is held to the ring's bound (the least any algorithm moves)."""
        from incastlab.analysis import runview
        from incastlab.jobs.ring_bound import allreduce_bound, ring_bound

        w, p = runview.workload(analysis, self.Fields), runview.placed(analysis)
        if p is None or analysis.fabric is None or len(p.workers) < 2:
            return None
        rates = [runview.host_mbps(analysis, h) for h in p.workers]
        if None in rates:
            return None
        algorithm = algorithm_of(w)
        spines = runview.usable_spines(analysis)
        leaves = [runview.leaf_of(analysis, h) for h in p.workers]
        fabric = {"leaves": leaves, "spines": spines,
                  "fabric_mbps": analysis.fabric.fabric_bw_mbps} \
            if spines and analysis.fabric.fabric_bw_mbps else {}
        if algorithm == "hierarchical":  # its groups need the leaves, fabric or not
            fabric["leaves"] = leaves
        m = runview.gradient_bytes(analysis, w)

        def of(nbytes: float):
            from incastlab.analysis import runview
            if algorithm == "ring":  # the same call as before the other algorithms came
                return ring_bound(len(p.workers), nbytes, rates, mtu=runview.mtu(analysis),
                                  **fabric)
            return allreduce_bound(algorithm, len(p.workers), nbytes, rates,
                                   slices=_logged_tree_slices(analysis), mtu=runview.mtu(analysis),
                                   **fabric)

        plan = _bucket_plan(analysis) if emulates_backward(w) else None
        return exposed_bound(of, m, plan) if plan else of(m)

    def attribution_rows(self, analysis):
        """Every rank's iterations; a stalled flow anywhere holds the whole ring."""
        from incastlab.analysis import runview
        p = runview.placed(analysis)
        return analysis.tables["iterations"], list(p.workers) if p else []

    def tables(self, analysis) -> dict:
        from incastlab.jobs.ring_tables import allreduce_vs_bound

        ring = allreduce_vs_bound(analysis.tables["workers_raw"])
        if not ring.empty:
            # one bound per run: the job's own (framing, ACKs, the fabric, the algorithm,
            # the exposed part of a bucketed all-reduce), the headline's bound_s
            bound = self.bound(analysis)
            ring["bound_s"] = bound.seconds if bound is not None else float("nan")
            ring["ratio"] = ring["allreduce_s"] / ring["bound_s"]
        return {"ring": ring, "buckets": bucket_table(analysis.tables["workers_raw"])}

    def plots(self, analysis) -> dict:
        from incastlab.jobs.ring_figures import ring_vs_bound

        return {"ring": lambda path: ring_vs_bound(analysis.tables["ring"], path)}

    def sections(self, analysis, figs) -> list[Section]:
        from incastlab.analysis import render, runview
        ring = analysis.tables["ring"]
        algorithm = algorithm_of(runview.workload(analysis, self.Fields))
        title = "Ring all-reduce vs bound" if algorithm == "ring" else \
            f"All-reduce ({algorithm}) vs its bound"
        if ring.empty:
            return [Section(title, *render.none("no all-reduce times in the worker logs"))]
        bound_s = float(ring["bound_s"].iloc[0])
        mean_s = float(ring["allreduce_s"].mean())
        what = "all-reduce" if algorithm == "ring" else f"{algorithm} all-reduce"
        if bound_s != bound_s:  # NaN: the job has no bound for this run
            why = (analysis.metrics.get("cost") or {}).get("reason") or \
                "no placement or link rates in the run directory"
            txt = f"{what} mean {render.fmt(mean_s)} s; its bound (bound_s) n/a: {why}"
        else:
            bound = analysis.tables.get("bound")
            txt = (f"{what} mean {render.fmt(mean_s)} s vs its bound {render.fmt(bound_s)} "
                   f"s (bound_s in the headline and metrics.json; ratio "
                   f"{render.fmt(mean_s / bound_s)}; the bound counts the framing and the "
                   "ACKs, so 1.0 is the best possible)"
                   + (f": {bound.formula}" if bound is not None else ""))
        return [Section(title, f"<p>{render.esc(txt)}</p>"
                        + render.img(figs.get("ring"), "ring"), txt + "\n")] \
            + self._bucket_sections(analysis)

    def _bucket_sections(self, analysis) -> list[Section]:
        from incastlab.analysis import render
        b = analysis.tables.get("buckets")
        if b is None or b.empty:
            return []
        exposed, total = float(b["exposed_comm_s"].mean()), float(b["comm_total_s"].mean())
        backward = float(b["backward_s"].mean())
        plan = _bucket_plan(analysis) or {}
        fmt = render.fmt
        txt = (f"{int(b['buckets'].iloc[0])} bucket(s) of "
               f"{', '.join(f'{x:,.0f}' for x in plan.get('bucket_bytes', []))} bytes; per "
               f"iteration, mean over ranks: backward {fmt(backward)} s, communication "
               f"{fmt(total)} s in total of which {fmt(exposed)} s exposed (the iteration "
               f"waited on it after the backward): {fmt(hidden_fraction(b))} of it hidden "
               "behind the backward.")
        return [Section("Gradient buckets: exposed vs total communication",
                        f"<p>{render.esc(txt)}</p>", txt + "\n")]

    def metrics(self) -> list:
        return list(_metrics())

    def summary_blocks(self, analysis) -> dict:
        """metrics.json `ring`: the all-reduce's bound (the headline's bound_s), its mean
        time and their ratio (None where no all-reduce was logged or no bound exists)."""
        import math

        ring = analysis.tables.get("ring")
        there = ring is not None and len(ring) > 0

        def num(x):
            return None if not there or math.isnan(float(x)) else float(x)
        return {"ring": {
            "bound_s": num(ring["bound_s"].iloc[0]) if there else None,
            "allreduce_mean_s": num(ring["allreduce_s"].mean()) if there else None,
            "ratio_mean": num(ring["ratio"].mean()) if there else None}}

    def cost_clause(self, analysis) -> str | None:
        from incastlab.analysis.findings import duration

        rb = analysis.metrics.get("ring") or {}
        if rb.get("ratio_mean") is None:
            return None
        return (f"the all-reduce took {rb['ratio_mean']:.3g}× its bound of "
                f"{duration(rb['bound_s'])}")


def emulates_backward(w) -> bool:
    """Whether the run emulated a layer-by-layer backward (with or without buckets)."""
    return bool(getattr(w, "bucket_cap_mb", 0) or getattr(w, "layer_compute_ms", 0))


def backward_options(w) -> dict:
    """The app options of the emulated backward and its buckets."""
    return {"layers": w.backward_layers, "layer_compute_ms": f"{w.layer_compute_ms:g}",
            "bucket_cap_mb": f"{w.bucket_cap_mb:g}"}


def exposed_bound(of, model_bytes: float, plan: dict):
    """The least exposed communication of a bucketed iteration (s): the time it waits on
    the network after its backward ends. ``of(nbytes)`` is the all-reduce bound for that
    many bytes; ``plan`` the logged ``buckets`` event (bucket_bytes in the order they
    become ready, bucket_layers, layers, layer_compute_s).

    The buckets' all-reduces run one after the other, the first starting when its layers
    are done, after ``|b_0|`` of the L layers, i.e. ``(L − |b_0|)·t_layer`` before the
    backward ends; together they need at least ``of(M)`` (the bounds grow with the bytes,
    and no bucket's bytes go faster than the whole gradient's). And the last bucket is
    ready only when the backward ends. So exposed ≥ max(of(last bucket),
    of(M) − (L − |b_0|)·t_layer, 0): buckets can hide everything but the last bucket
    behind a long enough backward, and nothing of it behind a short one."""
    from incastlab.analysis.alphabeta import Bound

    whole, last = of(model_bytes), of(float(plan["bucket_bytes"][-1]))
    window = (int(plan["layers"]) - len(plan["bucket_layers"][0])) \
        * float(plan["layer_compute_s"])
    cands = {"last bucket": last.seconds, "all buckets less the backward after the first":
             whole.seconds - window}
    name = max(cands, key=lambda k: cands[k])
    secs = max(0.0, cands[name])
    formula = (f"exposed communication of {len(plan['bucket_bytes'])} bucket(s) ≥ max(last "
               f"bucket {last.seconds:.4g} s, whole gradient {whole.seconds:.4g} s − backward "
               f"after the first bucket {window:.4g} s, 0) = {secs:.4g} s; whole gradient: "
               f"{whole.formula}")
    return Bound(secs, formula, {"last_bucket": last.seconds, "whole": whole.seconds,
                                 "overlap_window": window}, name)


def bucket_table(workers):
    """Per rank × iteration of a run with the emulated backward: backward_s,
    comm_total_s (the buckets' all-reduces added up), exposed_comm_s (waited on after the
    backward), buckets. Empty without it."""
    import pandas as pd

    cols = ["rank", "iteration", "backward_s", "comm_total_s", "exposed_comm_s", "buckets"]
    if workers is None or workers.empty or "exposed_comm_s" not in workers:
        return pd.DataFrame(columns=cols)
    it = workers[(workers["event"] == "iteration") & workers["exposed_comm_s"].notna()]
    if "rank" not in it or it["rank"].isna().all():
        starts = workers[workers["event"] == "start"].set_index("file")["rank"]
        it = it.assign(rank=it["file"].map(starts))
    return it[cols].reset_index(drop=True)


def hidden_fraction(b) -> float | None:
    """Share of the communication hidden behind the backward: 1 − exposed / total."""
    total = float(b["comm_total_s"].sum()) if len(b) else 0.0
    return 1.0 - float(b["exposed_comm_s"].sum()) / total if total > 0 else None


def _bucket_plan(a) -> dict | None:
    """The logged bucket plan (the `buckets` event of rank 0's log; every rank logs the
    same), or None."""
    raw = a.tables.get("workers_raw")
    if raw is None or raw.empty or "bucket_bytes" not in raw:
        return None
    rows = raw[raw["event"] == "buckets"]
    return rows.iloc[0].to_dict() if len(rows) else None


@functools.cache
def _metrics() -> tuple:
    """The ring job's headline metrics (declared once)."""
    from incastlab.analysis.metrics import Metric

    def mean(col):
        def f(a):
            b = a.tables.get("buckets")
            return float(b[col].mean()) if b is not None and len(b) else None
        return f

    why = ("no emulated backward in this run (workload.layer_compute_ms and "
           "workload.bucket_cap_mb are 0)")
    return (
        Metric("exposed_comm_s", "exposed communication per iteration", "s",
               "Mean time an iteration waited on its all-reduces after the emulated "
               "backward ended (ring job with workload.layer_compute_ms or bucket_cap_mb).",
               mean("exposed_comm_s"), ("workers",), why),
        Metric("comm_total_s", "total communication per iteration", "s",
               "Mean time per iteration the gradient buckets' all-reduces took, added up, "
               "whether or not the backward hid them.",
               mean("comm_total_s"), ("workers",), why),
        Metric("comm_hidden_fraction", "communication hidden behind the backward",
               "fraction", "1 − exposed / total communication, over all iterations.",
               lambda a: hidden_fraction(a.tables["buckets"])
               if a.tables.get("buckets") is not None else None, ("workers",), why),
    )


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


def ring_commands(hosts: list[Endpoint], out: str, port: int, options: dict,
                  python: str = sys.executable) -> list[list[str]]:
    """One argv per host of incastlab.apps.ring: ranks 0..N-1 of the ring."""
    return one_rank_per_host("incastlab.apps.ring", hosts, out, port, options, python)


def ring_argv(ranks: int, out, port: int, extra: list[str] | None = None
              ) -> list[list[str]]:
    """Command lines of a ring all-reduce job of `ranks` ranks on loopback (tests,
    benchmarks), each with `extra` appended."""
    from incastlab.apps.local import loopback_argv

    return loopback_argv(ring_commands, ranks, out, port, {}, extra)
