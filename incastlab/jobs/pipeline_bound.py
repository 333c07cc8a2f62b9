"""The pipeline-parallel job's bound (``kind = "pipeline"``): a step's bubble and the
transfers on its critical path, written with the cost model's primitives
(:mod:`incastlab.analysis.alphabeta`)."""
from __future__ import annotations

from collections.abc import Sequence

from incastlab.analysis.alphabeta import (
    Bound,
    bytes_per_s,
    check_leaves,
    fmt,
    framing_factor,
    link_rates,
    positive,
)

__all__ = ["bubble_fraction", "pipeline_bound"]


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """The idle share of a pipeline step with S = `stages` equal stages and M =
    `micro_batches`, at no communication cost: (S−1)/(M+S−1). Each stage works M·(t_f +
    t_b) of a step that lasts (M+S−1)·(t_f + t_b): the first micro-batch needs S−1
    forward times to reach the last stage, the last gradient S−1 backward times to come
    back. The same for GPipe and 1F1B (1F1B only reorders the work to hold at most S
    activations instead of M)."""
    s = positive(stages, "stages", integer=True)
    m = positive(micro_batches, "micro_batches", integer=True)
    return (s - 1) / (m + s - 1)


def pipeline_bound(stages: int, micro_batches: int, activation_bytes: float, host_mbps, *,
                   fwd_s: float = 0.0, bwd_s: float = 0.0,
                   leaves: Sequence[str] | None = None, fabric_mbps: float | None = None,
                   alpha_s: float = 0.0, mtu: int = 1500) -> Bound:
    """One pipeline step (GPipe or 1F1B) of S = `stages` stages and M = `micro_batches`:
    the least time it spends not computing, split into its schedule's bubble and the
    transfers that lie on its critical path (s).

    A = `activation_bytes`: one micro-batch's activation between two neighbouring stages
    (its gradient coming back has the same size). `host_mbps`: each stage host's link
    (one value or one per stage, in stage order). Boundary k (stage k to k+1) moves a
    message in c_k = α + A·f/B_k, B_k = the slower of the two hosts' links and, when
    `leaves` (each stage's leaf) puts them on different leaves, `fabric_mbps` (one
    message is one TCP flow on one spine). f = 1514/1448.

    With every forward taking t_f = `fwd_s` and every backward t_b = `bwd_s` on every
    stage, the step's critical path is (S−1)·t_f for the first micro-batch to reach the
    last stage, M·(t_f + t_b) there, (S−1)·t_b to bring the last gradient back, plus one
    transfer per boundary each way: step ≥ (M+S−1)(t_f+t_b) + Σ_k 2·c_k. A stage
    computes M(t_f+t_b) of it, so its idle time is at least
      schedule (the bubble, on any network)  (S−1)(t_f+t_b)
      + transfers on the critical path       Σ_k 2·c_k        (= `seconds`).
    Assumes transfers shorter than the compute they overlap (c_k ≤ t_f, t_b); a link
    slower than that paces the pipeline by itself (M·c_k per step), above this bound.

    Bound.seconds: the transfers; terms: transfer (the same), schedule (the bubble),
    compute (M(t_f+t_b)), step ((M+S−1)(t_f+t_b) + transfers), per_message (the largest
    c_k). All in seconds."""
    s = positive(stages, "stages", integer=True)
    m = positive(micro_batches, "micro_batches", integer=True)
    a = float(positive(activation_bytes, "activation_bytes"))
    rates = link_rates(host_mbps, s, "host_mbps")
    lv = check_leaves(leaves, s, "leaves")
    if fwd_s < 0 or bwd_s < 0 or alpha_s < 0:
        raise ValueError("fwd_s, bwd_s and alpha_s must be >= 0")
    f = framing_factor(mtu)
    per = []
    for k in range(s - 1):
        b = min(rates[k], rates[k + 1])
        if lv is not None and lv[k] != lv[k + 1]:
            if not fabric_mbps:
                raise ValueError("stages on different leaves: `fabric_mbps` is needed")
            b = min(b, fabric_mbps)
        per.append(alpha_s + a * f / bytes_per_s(b))
    transfer = 2 * sum(per)
    op = fwd_s + bwd_s
    bubble = (s - 1) * op
    compute = m * op
    step = (m + s - 1) * op + transfer
    formula = (f"pipeline step, S={s} stages, M={m} micro-batches, A={fmt(a)} B per "
               f"message, f={f:.4f}: idle ≥ bubble (S−1)(t_f+t_b) = {s - 1}×"
               f"{fmt(op)} s = {fmt(bubble)} s + transfers on the critical path "
               f"Σ 2(α + A·f/B_k) over {s - 1} boundaries = {fmt(transfer)} s; step ≥ "
               f"(M+S−1)(t_f+t_b) + transfers = {fmt(step)} s, bubble fraction "
               f"(S−1)/(M+S−1) = {bubble_fraction(s, m):.4f}")
    return Bound(transfer, formula, {"transfer": transfer, "schedule": bubble,
                                     "compute": compute, "step": step,
                                     "per_message": max(per) if per else 0.0},
                 "critical-path transfers")
