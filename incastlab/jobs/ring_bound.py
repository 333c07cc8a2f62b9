"""The all-reduce job's bounds (``kind = "ring"``): the least time of one all-reduce
of M bytes over N ranks by each algorithm the app runs (apps/collectives.py: the ring,
halving-doubling, the binary tree, the leaf-aware hierarchical one), written with the
cost model's primitives (:mod:`incastlab.analysis.alphabeta`). The tensor-parallel job's
bound is a sequence of these rings (jobs/tensor_bound.py)."""
from __future__ import annotations

from collections.abc import Sequence

from incastlab.analysis.alphabeta import (
    Bound,
    ack_framing,
    bytes_per_s,
    check_leaves,
    fabric_term,
    fmt,
    framing_factor,
    leaf_traffic,
    link_rates,
    phase_seconds,
    positive,
    serial_phases,
    top_term,
)
from incastlab.apps.collectives import ALGORITHMS

__all__ = ["ALGORITHMS", "allreduce_bound", "halving_doubling_bound", "hierarchical_bound",
           "ring_bound", "tree_bound"]


def ring_bound(ranks: int, model_bytes: float, host_mbps, *,
               leaves: Sequence[str] | None = None, spines: int = 0,
               fabric_mbps: float | None = None, alpha_s: float = 0.0,
               mtu: int = 1500) -> Bound:
    """Ring all-reduce of M = `model_bytes` over N = `ranks`: the least time (s).

    Reduce-scatter then all-gather, N−1 steps each, every step a chunk of M/N to the
    next rank: each rank sends S = 2(N−1)/N·M bytes to its successor and receives as
    much from its predecessor, at the same time (full duplex), so each host link
    carries S in each direction *and* the ACKs of the incoming flow: f' = `ack_framing`.
    host term = S·f'/B (B = the slowest rank's link, `host_mbps` one value or one per
    rank: the steps go in lock-step, so the slowest link sets the pace).
    `leaves` = the leaf of each rank in ring order (rank r sends to rank r+1 mod N):
    every ring edge whose ends sit on different leaves puts S on the uplinks of the
    sender's leaf and the downlinks of the receiver's; the edges leaving a leaf share
    its spines × fabric_mbps (the order of ranks matters: grouping a leaf's ranks
    together crosses the fabric twice, interleaving them N times). Those links carry
    the reverse edges' ACKs too (as many edges enter a leaf as leave it), so f' again.
    fabric term = max over leaves and directions of (edges × S)·f'/(spines × B_fabric).
    bound = max(host term, fabric term) + 2(N−1)·α (a chunk's path round the ring is
    2(N−1) messages long; α = 0 here).

    Bound.terms: host_link, fabric, latency (s). N = 1 moves nothing: bound 0.
    """
    n = positive(ranks, "ranks", integer=True)
    m = float(positive(model_bytes, "model_bytes"))
    rates = link_rates(host_mbps, n, "host_mbps")
    lv = check_leaves(leaves, n, "leaves")
    fa = ack_framing(mtu)
    s = 2 * (n - 1) / n * m
    host = s * fa / bytes_per_s(min(rates))
    flows = [(lv[r], lv[(r + 1) % n], s) for r in range(n)] if lv is not None and n > 1 \
        else []
    fab, fab_name, fab_txt = fabric_term(*leaf_traffic(flows), spines, fabric_mbps, fa,
                                          "f'")
    lat = 2 * (n - 1) * alpha_s
    cands = {"host link": host}
    if fab_name:
        cands[f"fabric ({fab_name})"] = fab
    secs = max(cands.values()) + lat
    formula = (f"ring all-reduce, N={n}, M={fmt(m)} B, f'={fa:.4f} (data + ACKs): "
               f"max(host link 2(N−1)/N·M·f'/B = {fmt(s)} B·f'/{fmt(min(rates))} Mbit/s = "
               f"{fmt(host)} s{', fabric ' + fab_txt if fab_name else ''})"
               f"{' + 2(N−1)α = ' + fmt(lat) + ' s' if lat else ''} = {fmt(secs)} s")
    return Bound(secs, formula, {"host_link": host, "fabric": fab, "latency": lat},
                 top_term(cands))



def halving_doubling_bound(ranks: int, model_bytes: float, host_mbps, *,
                           leaves: Sequence[str] | None = None, spines: int = 0,
                           fabric_mbps: float | None = None, alpha_s: float = 0.0,
                           mtu: int = 1500) -> Bound:
    """Recursive halving then doubling (Rabenseifner) of M = `model_bytes` over N =
    `ranks`: the least time (s), phase by phase as apps.collectives.halving_doubling_allreduce
    runs it.

    p = the largest power of two <= N, r = N − p. Fold: ranks 0, 2, .., 2r−2 send M to
    the rank above (M·f/B). Butterfly over p ranks, log2 p halving steps (step s: every
    rank sends and receives M/2^(s+1) with its partner, f' as both directions are busy)
    then as many doubling steps (the same sizes in reverse): 2(p−1)/p·M·f'/B. Unfold: M
    back, M·f/B. Each step needs what the one before delivered, so the steps add up;
    each step takes its busiest link, host or (with `leaves`, `spines`, `fabric_mbps`)
    the spine links of a leaf. For N = 4, M = 1 MB at 8 Mbit/s: 1.5 × 1.0684 = 1.603 s;
    N = 3: 1.0456 + 1.0684 + 1.0456 = 3.160 s (a power of two is worth having).
    Latency: (2·log2 p + 2·[r > 0])·α.

    Bound.terms: fold, butterfly, unfold, latency (s).
    """
    n = positive(ranks, "ranks", integer=True)
    m = float(positive(model_bytes, "model_bytes"))
    rates = link_rates(host_mbps, n, "host_mbps")
    lv = check_leaves(leaves, n, "leaves")
    p = 1 << (n.bit_length() - 1)
    r = n - p
    steps = p.bit_length() - 1

    def real(u: int) -> int:
        return 2 * u + 1 if u < r else u + r

    fold = [(2 * i, 2 * i + 1, m) for i in range(r)]
    exchange = []
    for s in range(steps):
        size = m / 2 ** (s + 1)
        exchange.append((f"halving step {s + 1}", [(real(v), real(v ^ (p >> (s + 1))), size)
                                                   for v in range(p)]))
    phases = ([("fold", fold)] if r else []) + exchange + \
        [(name.replace("halving", "doubling"), flows) for name, flows in reversed(exchange)] + \
        ([("unfold", [(b, a, x) for a, b, x in fold])] if r else [])
    _, done = serial_phases(phases, rates, lv, spines, fabric_mbps, mtu)
    fold_s = sum(t for name, t, _ in done if name == "fold")
    unfold_s = sum(t for name, t, _ in done if name == "unfold")
    butterfly = sum(t for name, t, _ in done if name not in ("fold", "unfold"))
    lat = (2 * steps + (2 if r else 0)) * alpha_s
    secs = fold_s + butterfly + unfold_s + lat
    worst = max(done, key=lambda d: d[1]) if done else ("", 0.0, "")
    formula = (f"halving-doubling all-reduce, N={n} (p={p}, {r} folded), M={fmt(m)} B: "
               + (f"fold M·f/B = {fmt(fold_s)} s + " if r else "")
               + f"butterfly 2(p−1)/p·M·f'/B = {fmt(butterfly)} s"
               + (f" + unfold {fmt(unfold_s)} s" if r else "")
               + (f" + latency {fmt(lat)} s" if lat else "")
               + f" = {fmt(secs)} s (each step at its busiest link; longest: {worst[0]}, "
               f"{worst[2]})")
    return Bound(secs, formula, {"fold": fold_s, "butterfly": butterfly, "unfold": unfold_s,
                                 "latency": lat}, worst[2])


def tree_bound(ranks: int, model_bytes: float, host_mbps, *, slices: int = 1,
               leaves: Sequence[str] | None = None, spines: int = 0,
               fabric_mbps: float | None = None, alpha_s: float = 0.0,
               mtu: int = 1500) -> Bound:
    """Binary-tree all-reduce (reduce to rank 0, broadcast back, pipelined in `slices`
    slices of M/slices) over N = `ranks`: the least time (s).

    The heap tree of apps.collectives.tree_allreduce (parent of r: (r−1)//2). Every tree edge
    carries M up and M down, all pipelined at once, so a rank with c children moves
    (c + 1)·M (c·M at the root) each way over its link: busiest link = max over ranks
    and leaf spine links (`phase_seconds`, f' where both directions carry data). And a
    chain no pipelining hides: the root must take in c_root·M (c_root·M·f/B_root), and the
    last slice then still goes down h = floor(log2 N) hops, each a whole slice stored and
    forwarded (h·(M/slices)·f/B_min). bound = max(busiest link, root chain) + 2h·α.
    For N = 4, M = 1 MB at 8 Mbit/s, 4 slices: max(2·1.0684, (2 + 2/4)·1.0456) = 2.614 s.

    Bound.terms: busiest_link, root_chain, latency (s).
    """
    n = positive(ranks, "ranks", integer=True)
    m = float(positive(model_bytes, "model_bytes"))
    k = positive(slices, "slices", integer=True)
    rates = link_rates(host_mbps, n, "host_mbps")
    lv = check_leaves(leaves, n, "leaves")
    f = framing_factor(mtu)
    flows = [e for c in range(1, n) for e in ((c, (c - 1) // 2, m), ((c - 1) // 2, c, m))]
    link, name = phase_seconds(flows, rates, lv, spines, fabric_mbps, mtu)
    h = n.bit_length() - 1
    c_root = min(2, n - 1)
    chain = c_root * m * f / bytes_per_s(rates[0]) + h * (m / k) * f / bytes_per_s(min(rates))
    lat = 2 * h * alpha_s
    cands = {name or "host link": link, "root chain": chain}
    secs = max(cands.values()) + lat
    formula = (f"binary-tree all-reduce, N={n} (height {h}), M={fmt(m)} B in {k} slices: "
               f"max(busiest link ({name}) = {fmt(link)} s, root chain c·M·f/B_root + "
               f"h·(M/slices)·f/B = {fmt(chain)} s)"
               + (f" + 2h·α = {fmt(lat)} s" if lat else "") + f" = {fmt(secs)} s")
    return Bound(secs, formula, {"busiest_link": link, "root_chain": chain, "latency": lat},
                 top_term(cands))


def hierarchical_bound(ranks: int, model_bytes: float, host_mbps, *,
                       leaves: Sequence[str], spines: int = 0,
                       fabric_mbps: float | None = None, alpha_s: float = 0.0,
                       mtu: int = 1500) -> Bound:
    """Leaf-aware all-reduce of M = `model_bytes` over N = `ranks` on `leaves` (rank r's
    leaf at [r]): the least time (s), its three phases added (they follow one another in
    apps.collectives.hierarchical_allreduce).

    A leaf's leader is its lowest rank. (1) leaf reduce: each other rank sends M to its
    leader, so a leader of k ranks takes in (k−1)·M: (k−1)·M·f/B_leader, the largest over
    leaves. (2) the L leaders' ring (`ring_bound` over the leaders in rank order, their
    leaves, rates and the fabric): one ring edge leaves each leaf, 2(L−1)/L·M over its
    spine links, where the flat ring puts that on every edge leaving the leaf. (3) leaf
    broadcast: each leader sends M to its k−1 ranks, (k−1)·M·f/B_leader.
    Example: N = 4 on leaves a, b, a, b, M = 1 MB, 8 Mbit/s hosts, 2 spines of 2 Mbit/s:
    1.0456 + 2.137 + 1.0456 = 4.228 s, where the flat ring needs 6.410 s (its four
    edges all cross, two out of each leaf, 1.5 MB each, over 0.5 MB/s).

    Bound.terms: leaf_reduce, leaders_ring, leaf_broadcast, latency (s).
    """
    n = positive(ranks, "ranks", integer=True)
    m = float(positive(model_bytes, "model_bytes"))
    rates = link_rates(host_mbps, n, "host_mbps")
    if leaves is None:
        raise ValueError("leaves: the hierarchical all-reduce needs the leaf of every rank")
    lv = check_leaves(leaves, n, "leaves")
    groups: dict = {}
    for r, leaf in enumerate(lv):
        groups.setdefault(leaf, []).append(r)
    leaders = sorted(g[0] for g in groups.values())
    reduce_flows = [(r, g[0], m) for g in groups.values() for r in g[1:]]
    red, red_name = phase_seconds(reduce_flows, rates, lv, spines, fabric_mbps, mtu)
    bc, bc_name = phase_seconds([(b, a, x) for a, b, x in reduce_flows], rates, lv, spines,
                                 fabric_mbps, mtu)
    ring = ring_bound(len(leaders), m, [rates[r] for r in leaders],
                      leaves=[lv[r] for r in leaders], spines=spines, fabric_mbps=fabric_mbps,
                      alpha_s=alpha_s, mtu=mtu) if len(leaders) > 1 else None
    ring_s = ring.seconds if ring else 0.0
    lat = (2 * alpha_s if reduce_flows else 0.0)
    secs = red + ring_s + bc + lat
    cands = {f"leaf reduce ({red_name})": red, f"leaf broadcast ({bc_name})": bc}
    if ring:
        cands[f"leaders' ring ({ring.bottleneck})"] = ring_s
    formula = (f"hierarchical all-reduce, N={n} on {len(leaders)} leaves, M={fmt(m)} B: "
               f"leaf reduce (k−1)·M·f/B = {fmt(red)} s + leaders' ring "
               + (f"[{ring.formula}]" if ring else "(one leaf: none) 0 s")
               + f" + leaf broadcast {fmt(bc)} s"
               + (f" + 2α = {fmt(lat)} s" if lat else "") + f" = {fmt(secs)} s")
    return Bound(secs, formula, {"leaf_reduce": red, "leaders_ring": ring_s,
                                 "leaf_broadcast": bc, "latency": lat}, top_term(cands))


def allreduce_bound(algorithm: str, ranks: int, model_bytes: float, host_mbps, *,
                    leaves: Sequence[str] | None = None, spines: int = 0,
                    fabric_mbps: float | None = None, slices: int = 1,
                    alpha_s: float = 0.0, mtu: int = 1500) -> Bound:
    """The bound of `algorithm` (one of ALGORITHMS); `slices` is the tree's."""
    fabric = {"leaves": leaves, "spines": spines, "fabric_mbps": fabric_mbps,
              "alpha_s": alpha_s, "mtu": mtu}
    if algorithm == "ring":
        return ring_bound(ranks, model_bytes, host_mbps, **fabric)
    if algorithm == "halving-doubling":
        return halving_doubling_bound(ranks, model_bytes, host_mbps, **fabric)
    if algorithm == "tree":
        return tree_bound(ranks, model_bytes, host_mbps, slices=slices, **fabric)
    if algorithm == "hierarchical":
        return hierarchical_bound(ranks, model_bytes, host_mbps, **fabric)
    raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, "
                     f"got {algorithm!r}")
