"""The MoE job's bound (``kind = "moe"``): a step's all-to-alls (dispatch, then combine)
at their busiest links, written with the cost model's primitives
(:mod:`incastlab.analysis.alphabeta`)."""
from __future__ import annotations

from collections.abc import Sequence

from incastlab.analysis.alphabeta import (
    Bound,
    check_leaves,
    fmt,
    link_rates,
    phase_seconds,
    positive,
)

__all__ = ["alltoall_bound"]


def alltoall_bound(matrix: Sequence[Sequence[float]], host_mbps, *,
                   leaves: Sequence[str] | None = None, spines: int = 0,
                   fabric_mbps: float | None = None, passes: int = 1,
                   alpha_s: float = 0.0, mtu: int = 1500) -> Bound:
    """An all-to-all: host i sends matrix[i][j] bytes to host j (the diagonal stays home);
    the least time (s) of `passes` such exchanges, each with the matrix and then its
    transpose (MoE: dispatch, then combine; a training step's backward repeats both).

    One exchange: every flow at once, so its time is that of its busiest link
    (`phase_seconds`): max over hosts of the bytes out of and into the host over its
    link (f', or f where the other direction is idle), and, with `leaves`, `spines` and
    `fabric_mbps`, the bytes leaving or entering each leaf over its spine links (the
    bisection through the spines) and any one flow over one spine link. Dispatch and
    combine follow one another (an expert answers what it received), so per pass
    bound = exchange(M) + exchange(Mᵀ) (+ 2α); `passes` of them add up.
    Example: 3 hosts at 8 Mbit/s (1 MB/s), host 0 the hot expert receiving 1 MB from each
    of the others and sending 0.25 MB to each: dispatch is host 0's ingress 2 MB·f' =
    2.137 s (its egress carries data too), combine its egress 2 MB·f', one pass 4.273 s.

    Bound.terms: dispatch, combine, latency (s, per pass × passes).
    """
    n = len(matrix)
    if n < 1 or any(len(row) != n for row in matrix):
        raise ValueError("matrix: expected a square list of lists (bytes from i to j)")
    rates = link_rates(host_mbps, n, "host_mbps")
    lv = check_leaves(leaves, n, "leaves")
    k = positive(passes, "passes", integer=True)
    flows = [(i, j, float(matrix[i][j])) for i in range(n) for j in range(n)
             if i != j and matrix[i][j] > 0]
    d, d_name = phase_seconds(flows, rates, lv, spines, fabric_mbps, mtu)
    c, c_name = phase_seconds([(j, i, x) for i, j, x in flows], rates, lv, spines,
                               fabric_mbps, mtu)
    lat = 2 * alpha_s * k
    secs = k * (d + c) + lat
    name = f"dispatch: {d_name}" if d >= c else f"combine: {c_name}"
    formula = (f"all-to-all of {n} hosts, {fmt(sum(x for _, _, x in flows))} B across: "
               f"{k} × (dispatch at its busiest link ({d_name}) {fmt(d)} s + combine "
               f"({c_name}) {fmt(c)} s)" + (f" + {fmt(lat)} s latency" if lat else "")
               + f" = {fmt(secs)} s")
    return Bound(secs, formula, {"dispatch": k * d, "combine": k * c, "latency": lat}, name)
