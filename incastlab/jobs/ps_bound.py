"""The parameter server's bound (``kind = "ps"``): the least communication time of one
worker iteration, written with the cost model's primitives
(:mod:`incastlab.analysis.alphabeta`).

The derivation, per consistency mode (the function's docstring gives its inputs):

sync (BSP) — the least communication time of a worker iteration (its period less
its compute; a steady-state bound, on the mean over iterations):
  Every worker sends M/k to every shard (push) and gets M/k back (pull), so each
  shard's port (the leaf's egress to the shard host: the incast queue) carries N·M/k
  bytes each way per step, each worker's own link M each way, and the fabric every
  slice whose two ends sit on different leaves. The barrier orders them: a shard
  answers only after all N gradients of the step arrived, and a worker pushes again
  only after its pull. But the shard answers all N workers at once and takes the next
  gradient of whoever is answered first, and links are full duplex, so the push of
  one worker's next iteration *can* overlap the pulls still going to the others.
  What cannot overlap is the chain: after a shard's update its N pulls leave through
  its port (N·M/k·f/B_ps), and only then has the last-answered worker its
  parameters; its next slice must still come back through its own link and the port
  ((M/k)·f/min(B_w, B_ps), B_w of the fastest worker: any may be the last
  answered) before the next update. So per iteration
    comm ≥ max( N·M/k·f/B_ps + (M/k)·f/min(B_w, B_ps),      shard port chain
                2·M·f/B_w,                       a worker's own pull, then push
                X_j·f/(spines·B_f) + (M/k)·f/min(B_w, B_ps, spines·B_f) )  fabric
         + 2α,
  X_j the largest bytes of shard j's pulls over one leaf's uplinks or downlinks
  (the same chain through the spines). f = 1514/1448: a link is only certain to
  carry ACKs against its data. For the demo (N = 3, k = 1, M = 1 MB, 20 Mbit/s):
  (3 + 1) × 0.4 s × 1.0456 = 1.673 s. The app replies to all workers at once and
  they share the port fairly, so the pulls all end together, no worker starts early
  and an iteration takes push then pull, 2·N·M/k·f/B_ps = 2.509 s for the demo:
  `terms['push_then_pull']` gives that figure (the same max over port, worker link
  and fabric, counted once for the push and once for the pull). The difference is
  scheduling (answering workers one at a time would let them overlap), not bytes;
  with many workers the pulls end at very different times and runs do beat the
  push-then-pull figure, so it is not a lower bound and not `seconds`.

async, ssp, backup — the bound on a worker's communication per iteration:
  There is no barrier: while one worker pushes, another pulls, and each shard port
  carries both directions at once (full duplex). Each worker iteration still moves
  M/k into and M/k out of every shard, so for N workers at an equal pace one
  iteration *period* (compute + communication) per worker costs each shard port
  N·M/k bytes per direction: period ≥ N·M/k·f'/B_ps with f' = `ack_framing` (each
  direction carries data and the other direction's ACKs), and likewise the fabric
  (both phases' bytes per leaf direction, f'). A worker itself pushes its M and then
  waits for its M to come back before computing again: comm ≥ 2·M·f/B_w + 2α.
  So comm ≥ max(2·M·f/B_w + 2α, N·M/k·f'/B_ps − compute_s, fabric − compute_s),
  with `compute_s` the worker's compute time per iteration (pass the measured mean;
  0 gives the period bound itself). ssp only limits how far workers drift apart and
  backup only which gradients count: every push is still sent, received and
  answered, so the bytes are the same. This is a steady-state (mean) bound; one
  iteration can beat it while others wait.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

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
    positive,
    top_term,
)
from incastlab.jobs.ps import PS_MODES

__all__ = ["PS_MODES", "ps_bound"]


class _Inputs(NamedTuple):
    """ps_bound's inputs, checked: N, k, M, the rates (Mbit/s) and leaves (or None)."""
    n: int
    k: int
    m: float
    w_rates: list
    s_rates: list
    wl: list | None
    sl: list | None


def ps_bound(workers: int, shards: int, model_bytes: float, host_mbps, ps_mbps=None, *,
             worker_leaves: Sequence[str] | None = None,
             shard_leaves: Sequence[str] | None = None, spines: int = 0,
             fabric_mbps: float | None = None, mode: str = "sync", compute_s: float = 0.0,
             alpha_s: float = 0.0, mtu: int = 1500) -> Bound:
    """Parameter server: the least communication time of one worker iteration (s); the
    module docstring derives it.

    N = `workers`, k = `shards`, M = `model_bytes` (the gradient, = the parameters, in
    bytes; each shard owns M/k), `host_mbps` = each worker's link (one value, or one per
    worker), `ps_mbps` = each shard host's link (one value or one per shard; default
    `host_mbps`). `worker_leaves`/`shard_leaves` (leaf of each worker/shard, same order)
    with `spines` and `fabric_mbps` add the fabric term (see analysis.alphabeta);
    without them the fabric is not modelled. `alpha_s`: one-way latency of a message (0
    here: the links have no configured delay). Framing f and f' as in analysis.alphabeta.

    Bound.terms: sync: shard_port (the chain), worker_link, fabric, latency,
    push_then_pull; async/ssp/backup: worker_link (incl. 2α), shard_port_period,
    fabric_period, compute. All in seconds.
    """
    if mode not in PS_MODES:
        raise ValueError(f"mode must be one of {', '.join(PS_MODES)}, got {mode!r}")
    x = _inputs(workers, shards, model_bytes, host_mbps, ps_mbps, worker_leaves, shard_leaves)
    if mode == "sync":
        return _ps_sync(*x, spines, fabric_mbps, alpha_s, mtu)
    return _ps_async(x, mode, spines, fabric_mbps, compute_s, alpha_s, mtu)


def _inputs(workers, shards, model_bytes, host_mbps, ps_mbps, worker_leaves,
            shard_leaves) -> _Inputs:
    """Check ps_bound's inputs (a ValueError names the bad one) and expand the rates."""
    n = positive(workers, "workers", integer=True)
    k = positive(shards, "shards", integer=True)
    m = float(positive(model_bytes, "model_bytes"))
    w_rates = link_rates(host_mbps, n, "host_mbps")
    if ps_mbps is None:
        if not isinstance(host_mbps, (int, float)):
            raise ValueError("ps_mbps is needed when host_mbps is given per worker")
        ps_mbps = host_mbps
    s_rates = link_rates(ps_mbps, k, "ps_mbps")
    wl = check_leaves(worker_leaves, n, "worker_leaves")
    sl = check_leaves(shard_leaves, k, "shard_leaves")
    if (wl is None) != (sl is None):
        raise ValueError("give both worker_leaves and shard_leaves, or neither")
    return _Inputs(n, k, m, w_rates, s_rates, wl, sl)


def _ps_async(x: _Inputs, mode, spines, fabric_mbps, compute_s, alpha_s, mtu) -> Bound:
    """The async/ssp/backup branch of `ps_bound` (the module docstring derives it)."""
    n, k, m, w_rates, s_rates, wl, sl = x
    slice_b = m / k
    port_bytes = n * slice_b
    b_ps = min(s_rates)
    b_w = min(w_rates)
    push_flows = [(a, b, slice_b) for a in wl for b in sl] if wl is not None else []
    pull_flows = [(b, a, n_) for a, b, n_ in push_flows]
    f = framing_factor(mtu)
    fa = ack_framing(mtu)
    link = 2 * m * f / bytes_per_s(b_w) + 2 * alpha_s
    port = port_bytes * fa / bytes_per_s(b_ps)
    up1, down1 = leaf_traffic(push_flows)
    up2, down2 = leaf_traffic(pull_flows)
    up = {x: up1.get(x, 0.0) + up2.get(x, 0.0) for x in set(up1) | set(up2)}
    down = {x: down1.get(x, 0.0) + down2.get(x, 0.0) for x in set(down1) | set(down2)}
    fab, fab_name, fab_txt = fabric_term(up, down, spines, fabric_mbps, fa, "f'")
    cands = {"worker link": link, "shard port": port - compute_s}
    if fab_name:
        cands[f"fabric ({fab_name})"] = fab - compute_s
    secs = max(cands.values())
    terms = {"worker_link": link, "shard_port_period": port, "fabric_period": fab,
             "compute": float(compute_s)}
    formula = (f"{mode} PS, N={n} workers, k={k} shard(s), M={fmt(m)} B: per worker "
               f"iteration max(own link 2·M·f/B_w{' + 2α' if alpha_s else ''} = {fmt(link)}"
               f" s, shared shard port N·M/k·f'/B_ps − compute = {fmt(port_bytes)} B·"
               f"{fa:.4f}/{fmt(b_ps)} Mbit/s − {fmt(compute_s)} s = {fmt(port - compute_s)}"
               f" s{', fabric ' + fab_txt + ' − compute' if fab_name else ''}) = "
               f"{fmt(secs)} s (f={f:.4f}; f'={fa:.4f}: push and pull share the port "
               f"in full duplex)")
    return Bound(secs, formula, terms, top_term(cands))


def _ps_sync(n, k, m, w_rates, s_rates, wl, sl, spines, fabric_mbps, alpha_s, mtu) -> Bound:
    """The sync branch of `ps_bound` (the module docstring derives it)."""
    f = framing_factor(mtu)
    slice_b = m / k
    b_ps, b_w = min(s_rates), min(w_rates)
    # any worker may be the last answered, so its slice comes back at the fastest
    # worker's rate at best (every worker's own pull and push count at the slowest's)
    b_last = max(w_rates)
    # shard chain: N pulls leave the port after the update, then the last-answered
    # worker's next slice must come in through its own link and the port
    pulls = n * slice_b * f / bytes_per_s(b_ps)
    back = slice_b * f / bytes_per_s(min(b_last, b_ps))
    chain = pulls + back
    link = 2 * m * f / bytes_per_s(b_w)
    cands = {"shard port": chain, "worker link": link}
    fab, fab_txt, phase_fab, cands_name = 0.0, "", 0.0, ""
    if wl is not None:
        cap_rate = spines * fabric_mbps if spines and fabric_mbps else None
        for j, leaf in enumerate(sl):  # one chain per shard: its own update starts it
            pull_flows = [(leaf, a, slice_b) for a in wl]
            x_s, name, txt = fabric_term(*leaf_traffic(pull_flows), spines, fabric_mbps, f)
            if not name:
                continue
            ret = slice_b * f / bytes_per_s(min(b_last, s_rates[j], cap_rate))
            if x_s + ret > fab:
                fab, fab_txt = x_s + ret, f"{txt} + one slice back {fmt(ret)} s"
                cands_name = f"fabric ({name})"
        all_push = [(a, b, slice_b) for a in wl for b in sl]
        phase_fab = fabric_term(*leaf_traffic(all_push), spines, fabric_mbps, f)[0]
        if fab:
            cands[cands_name] = fab
    lat = 2 * alpha_s
    secs = max(cands.values()) + lat
    phased = 2 * max(n * slice_b * f / bytes_per_s(b_ps), m * f / bytes_per_s(b_w),
                     phase_fab) + lat
    formula = (f"sync PS, N={n} workers, k={k} shard(s), M={fmt(m)} B, f={f:.4f}: "
               f"max(shard port: N pulls out then one slice back "
               f"(N·M/k)·f/B_ps + (M/k)·f/min(B_w,B_ps) "
               f"= {fmt(pulls)} + {fmt(back)} = {fmt(chain)} s, worker link 2·M·f/B_w = "
               f"{fmt(link)} s{', fabric ' + fab_txt + ' = ' + fmt(fab) + ' s' if fab else ''})"
               f"{' + 2α = ' + fmt(lat) + ' s' if lat else ''} = {fmt(secs)} s; "
               f"a push phase then a pull phase with no overlap (all replies ending together): "
               f"{fmt(phased)} s")
    terms = {"shard_port": chain, "worker_link": link, "fabric": fab, "latency": lat,
             "push_then_pull": phased}
    return Bound(secs, formula, terms, top_term(cands))

