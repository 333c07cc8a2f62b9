"""Lower bounds on the time of one iteration (or round), from bytes, rates and placement.

The α–β model: moving n bytes over a link of rate B takes at least α + n·f/B seconds,
where α is the one-way latency of a message and f the framing overhead (wire bytes per
payload byte). Where several links are crossed at once the slowest of them sets the
pace, so a phase takes at least the largest of its per-link times (its *bottleneck*);
phases that cannot overlap add up. Every function returns a `Bound`: the seconds, the
formula with the numbers filled in (for a report), the named terms in seconds and the
name of the bottleneck. Nothing here measures anything: numbers in, a bound out.

Units: rates in Mbit/s (10^6 bit/s, as fabric.json and the spec give them), sizes in
bytes of application payload (as the worker logs count them), times in seconds.

Framing (derived in the README, `benchmarks/allreduce_efficiency.py`): HTB shapes whole
Ethernet frames without preamble, FCS or gap. A full-size TCP segment of an MTU-1500
link carries 1448 payload bytes (1500 - 20 IP - 20 TCP - 12 timestamp option) in a
1514-byte frame (+14 Ethernet), so f = 1514/1448 = 1.0456 for a bulk flow whose link
carries nothing else. When a link also carries the ACKs of a flow coming the other way
(one 66-byte frame per two segments: Linux's delayed ACK), f = (2·1514 + 66)/(2·1448)
= 1.0684 (`ack_framing`): a ring host, and a parameter-server port whose push and pull
run at the same time.

Fabric (two-tier leaf–spine): a leaf reaches the spines over `spines` links of
`fabric_mbps` each, one per spine, in each direction. The fabric term of a phase is, for
every leaf, the bytes that leave it for other leaves (uplinks) and the bytes that reach
it from other leaves (downlinks), each over spines × fabric_mbps; the largest of these
is the term. It assumes the routing spreads those bytes evenly over the spines it may
use, so it is a lower bound: an ECMP hash collision shows as time above it. Pass
`spines` = the number of spines the routing lets a flow use (1 under the `single`
policy, all of them under ecmp, spread and adaptive). The spine's own links are these
same leaf–spine links, so no other fabric link can be the bottleneck.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

ETHERNET_HEADER = 14   # bytes; HTB counts it, not the preamble, FCS or inter-frame gap
IP_HEADER = 20
TCP_HEADER = 20
TCP_TIMESTAMPS = 12    # the timestamp option, padded (Linux negotiates it by default)
ACK_FRAME = ETHERNET_HEADER + IP_HEADER + TCP_HEADER + TCP_TIMESTAMPS   # 66 bytes
SEGMENTS_PER_ACK = 2   # Linux delays ACKs to one per two full-size segments
PS_MODES = ("sync", "async", "ssp", "backup")


@dataclass(frozen=True)
class Bound:
    """A lower bound in seconds.

    `formula`: one line for a report, the formula with its numbers filled in; `terms`:
    the named components in seconds (the bound is built from them as the formula says);
    `bottleneck`: the name of the term that sets the bound."""
    seconds: float
    formula: str
    terms: dict = field(default_factory=dict, hash=False)
    bottleneck: str = ""

    def ratio(self, measured_s: float) -> float:
        """measured / bound (1.0 = at the bound; NaN when the bound is 0)."""
        return measured_s / self.seconds if self.seconds > 0 else float("nan")


def segment_payload(mtu: int = 1500) -> int:
    """Payload bytes of a full-size TCP segment with timestamps (1448 for MTU 1500)."""
    payload = mtu - IP_HEADER - TCP_HEADER - TCP_TIMESTAMPS
    if payload <= 0:
        raise ValueError(f"mtu must exceed {IP_HEADER + TCP_HEADER + TCP_TIMESTAMPS} bytes, "
                         f"got {mtu}")
    return payload


def framing_factor(mtu: int = 1500) -> float:
    """Wire bytes per payload byte of a bulk TCP flow of full-size segments:
    (mtu + 14) / (mtu - 52) = 1514/1448 = 1.0456 for MTU 1500."""
    return (mtu + ETHERNET_HEADER) / segment_payload(mtu)


def ack_framing(mtu: int = 1500, segments_per_ack: int = SEGMENTS_PER_ACK) -> float:
    """Wire bytes per payload byte on a link that carries a bulk flow *and* the ACKs of
    an equal flow in the other direction: one 66-byte ACK frame per `segments_per_ack`
    segments, (2·1514 + 66)/(2·1448) = 1.0684 for MTU 1500."""
    seg = segment_payload(mtu)
    return (segments_per_ack * (mtu + ETHERNET_HEADER) + ACK_FRAME) / (segments_per_ack * seg)


def bytes_per_s(mbps: float) -> float:
    """Mbit/s -> bytes/s."""
    return float(mbps) * 1e6 / 8


def _rates(value, n: int, what: str) -> list[float]:
    """A scalar or one value per item -> n positive rates (Mbit/s)."""
    vals = [value] * n if isinstance(value, (int, float)) else list(value)
    if len(vals) != n:
        raise ValueError(f"{what}: expected one rate or {n}, got {len(vals)}")
    for v in vals:
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{what}: rates must be positive Mbit/s, got {v!r}")
    return [float(v) for v in vals]


def _positive(value, what: str, integer: bool = False):
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{what} must be a positive {'integer' if integer else 'number'}, "
                         f"got {value!r}")
    return value


def _fmt(x: float) -> str:
    """Seconds or bytes for a formula: 4 significant digits, thousands separated."""
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.4g}" if abs(x) >= 1 else f"{x:.4g}"


def _leaf_traffic(flows: Iterable[tuple[str, str, float]]) -> tuple[dict, dict]:
    """(up, down): bytes leaving each leaf for the spines and reaching it from them, for
    flows given as (source leaf, destination leaf, bytes); same-leaf flows cross no
    spine."""
    up: dict = {}
    down: dict = {}
    for src, dst, n in flows:
        if src != dst:
            up[src] = up.get(src, 0.0) + n
            down[dst] = down.get(dst, 0.0) + n
    return up, down


def _fabric_term(up: dict, down: dict, spines: int, fabric_mbps, framing: float,
                 symbol: str = "f") -> tuple[float, str, str]:
    """(seconds, name, text) of the busiest leaf-to-spine direction; (0, '', '') when
    no bytes cross the spines."""
    if not up and not down:
        return 0.0, "", ""
    if not spines or not fabric_mbps:
        raise ValueError("traffic crosses leaves: `spines` and `fabric_mbps` are needed")
    cap = bytes_per_s(spines * fabric_mbps)
    cands = [(n, f"uplinks of {leaf}") for leaf, n in up.items()] + \
            [(n, f"downlinks into {leaf}") for leaf, n in down.items()]
    n, name = max(cands, key=lambda c: c[0])
    secs = n * framing / cap
    return secs, name, (f"{name} {_fmt(n)} B·{symbol}/({spines}×{_fmt(fabric_mbps)} Mbit/s) "
                        f"= {_fmt(secs)} s")


def _leaves(leaves, n: int, what: str) -> list | None:
    if leaves is None:
        return None
    leaves = list(leaves)
    if len(leaves) != n:
        raise ValueError(f"{what}: expected {n} leaves, got {len(leaves)}")
    return leaves


def _top(terms: dict) -> str:
    return max(terms, key=lambda k: terms[k]) if terms else ""


def ps_bound(workers: int, shards: int, model_bytes: float, host_mbps, ps_mbps=None, *,
             worker_leaves: Sequence[str] | None = None,
             shard_leaves: Sequence[str] | None = None, spines: int = 0,
             fabric_mbps: float | None = None, mode: str = "sync", compute_s: float = 0.0,
             alpha_s: float = 0.0, mtu: int = 1500) -> Bound:
    """Parameter server: the least communication time of one worker iteration (s).

    N = `workers`, k = `shards`, M = `model_bytes` (the gradient, = the parameters, in
    bytes; each shard owns M/k), `host_mbps` = each worker's link (one value, or one per
    worker), `ps_mbps` = each shard host's link (one value or one per shard; default
    `host_mbps`). `worker_leaves`/`shard_leaves` (leaf of each worker/shard, same order)
    with `spines` and `fabric_mbps` add the fabric term (module docstring); without
    them the fabric is not modelled. `alpha_s`: one-way latency of a message (0 here:
    the links have no configured delay). Framing f as in the module docstring.

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

    Bound.terms: sync: shard_port (the chain), worker_link, fabric, latency,
    push_then_pull; async/ssp/backup: worker_link (incl. 2α), shard_port_period,
    fabric_period, compute. All in seconds.
    """
    if mode not in PS_MODES:
        raise ValueError(f"mode must be one of {', '.join(PS_MODES)}, got {mode!r}")
    n = _positive(workers, "workers", integer=True)
    k = _positive(shards, "shards", integer=True)
    m = float(_positive(model_bytes, "model_bytes"))
    w_rates = _rates(host_mbps, n, "host_mbps")
    if ps_mbps is None:
        if not isinstance(host_mbps, (int, float)):
            raise ValueError("ps_mbps is needed when host_mbps is given per worker")
        ps_mbps = host_mbps
    s_rates = _rates(ps_mbps, k, "ps_mbps")
    wl = _leaves(worker_leaves, n, "worker_leaves")
    sl = _leaves(shard_leaves, k, "shard_leaves")
    if (wl is None) != (sl is None):
        raise ValueError("give both worker_leaves and shard_leaves, or neither")
    slice_b = m / k
    port_bytes = n * slice_b
    b_ps = min(s_rates)
    b_w = min(w_rates)
    push_flows = [(a, b, slice_b) for a in wl for b in sl] if wl is not None else []
    pull_flows = [(b, a, n_) for a, b, n_ in push_flows]

    if mode == "sync":
        return _ps_sync(n, k, m, w_rates, s_rates, wl, sl, spines, fabric_mbps, alpha_s, mtu)
    f = framing_factor(mtu)
    fa = ack_framing(mtu)
    link = 2 * m * f / bytes_per_s(b_w) + 2 * alpha_s
    port = port_bytes * fa / bytes_per_s(b_ps)
    up1, down1 = _leaf_traffic(push_flows)
    up2, down2 = _leaf_traffic(pull_flows)
    up = {x: up1.get(x, 0.0) + up2.get(x, 0.0) for x in set(up1) | set(up2)}
    down = {x: down1.get(x, 0.0) + down2.get(x, 0.0) for x in set(down1) | set(down2)}
    fab, fab_name, fab_txt = _fabric_term(up, down, spines, fabric_mbps, fa, "f'")
    cands = {"worker link": link, "shard port": port - compute_s}
    if fab_name:
        cands[f"fabric ({fab_name})"] = fab - compute_s
    secs = max(cands.values())
    terms = {"worker_link": link, "shard_port_period": port, "fabric_period": fab,
             "compute": float(compute_s)}
    formula = (f"{mode} PS, N={n} workers, k={k} shard(s), M={_fmt(m)} B: per worker "
               f"iteration max(own link 2·M·f/B_w{' + 2α' if alpha_s else ''} = {_fmt(link)}"
               f" s, shared shard port N·M/k·f'/B_ps − compute = {_fmt(port_bytes)} B·"
               f"{fa:.4f}/{_fmt(b_ps)} Mbit/s − {_fmt(compute_s)} s = {_fmt(port - compute_s)}"
               f" s{', fabric ' + fab_txt + ' − compute' if fab_name else ''}) = "
               f"{_fmt(secs)} s (f={f:.4f}; f'={fa:.4f}: push and pull share the port "
               f"in full duplex)")
    return Bound(secs, formula, terms, _top(cands))


def _ps_sync(n, k, m, w_rates, s_rates, wl, sl, spines, fabric_mbps, alpha_s, mtu) -> Bound:
    """The sync branch of `ps_bound` (see there)."""
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
            x_s, name, txt = _fabric_term(*_leaf_traffic(pull_flows), spines, fabric_mbps, f)
            if not name:
                continue
            ret = slice_b * f / bytes_per_s(min(b_last, s_rates[j], cap_rate))
            if x_s + ret > fab:
                fab, fab_txt = x_s + ret, f"{txt} + one slice back {_fmt(ret)} s"
                cands_name = f"fabric ({name})"
        all_push = [(a, b, slice_b) for a in wl for b in sl]
        phase_fab = _fabric_term(*_leaf_traffic(all_push), spines, fabric_mbps, f)[0]
        if fab:
            cands[cands_name] = fab
    lat = 2 * alpha_s
    secs = max(cands.values()) + lat
    phased = 2 * max(n * slice_b * f / bytes_per_s(b_ps), m * f / bytes_per_s(b_w),
                     phase_fab) + lat
    formula = (f"sync PS, N={n} workers, k={k} shard(s), M={_fmt(m)} B, f={f:.4f}: "
               f"max(shard port: N pulls out then one slice back "
               f"(N·M/k)·f/B_ps + (M/k)·f/min(B_w,B_ps) "
               f"= {_fmt(pulls)} + {_fmt(back)} = {_fmt(chain)} s, worker link 2·M·f/B_w = "
               f"{_fmt(link)} s{', fabric ' + fab_txt + ' = ' + _fmt(fab) + ' s' if fab else ''})"
               f"{' + 2α = ' + _fmt(lat) + ' s' if lat else ''} = {_fmt(secs)} s; "
               f"a push phase then a pull phase with no overlap (all replies ending together): "
               f"{_fmt(phased)} s")
    terms = {"shard_port": chain, "worker_link": link, "fabric": fab, "latency": lat,
             "push_then_pull": phased}
    return Bound(secs, formula, terms, _top(cands))


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
    n = _positive(ranks, "ranks", integer=True)
    m = float(_positive(model_bytes, "model_bytes"))
    rates = _rates(host_mbps, n, "host_mbps")
    lv = _leaves(leaves, n, "leaves")
    fa = ack_framing(mtu)
    s = 2 * (n - 1) / n * m
    host = s * fa / bytes_per_s(min(rates))
    flows = [(lv[r], lv[(r + 1) % n], s) for r in range(n)] if lv is not None and n > 1 \
        else []
    fab, fab_name, fab_txt = _fabric_term(*_leaf_traffic(flows), spines, fabric_mbps, fa,
                                          "f'")
    lat = 2 * (n - 1) * alpha_s
    cands = {"host link": host}
    if fab_name:
        cands[f"fabric ({fab_name})"] = fab
    secs = max(cands.values()) + lat
    formula = (f"ring all-reduce, N={n}, M={_fmt(m)} B, f'={fa:.4f} (data + ACKs): "
               f"max(host link 2(N−1)/N·M·f'/B = {_fmt(s)} B·f'/{_fmt(min(rates))} Mbit/s = "
               f"{_fmt(host)} s{', fabric ' + fab_txt if fab_name else ''})"
               f"{' + 2(N−1)α = ' + _fmt(lat) + ' s' if lat else ''} = {_fmt(secs)} s")
    return Bound(secs, formula, {"host_link": host, "fabric": fab, "latency": lat},
                 _top(cands))


def incast_bound(senders: int, block_bytes: float, receiver_mbps: float, *,
                 sender_mbps=None, sender_leaves: Sequence[str] | None = None,
                 receiver_leaf: str | None = None, spines: int = 0,
                 fabric_mbps: float | None = None, alpha_s: float = 0.0,
                 mtu: int = 1500) -> Bound:
    """One incast round: N = `senders` each send a block of S = `block_bytes` to one
    receiver at once; the least time (s) from the request to the last byte.

    receiver port: N·S·f/B_r — the leaf's egress to the receiver carries every block
    (the incast queue); f = 1514/1448: only requests and ACKs go the other way.
    sender link: S·f/B_s (`sender_mbps`, one value or one per sender; optional).
    fabric (with `sender_leaves`, `receiver_leaf`, `spines`, `fabric_mbps`): the blocks
    of senders on other leaves cross into the receiver's leaf, and leave each sender
    leaf, over spines × fabric_mbps.
    bound = max(receiver port, sender link, fabric) + 2α (the request, then the data).

    Bound.terms: receiver_port, sender_link, fabric, latency (s).
    """
    n = _positive(senders, "senders", integer=True)
    s = float(_positive(block_bytes, "block_bytes"))
    b_r = _rates(receiver_mbps, 1, "receiver_mbps")[0]
    f = framing_factor(mtu)
    port = n * s * f / bytes_per_s(b_r)
    cands = {"receiver port": port}
    link = 0.0
    if sender_mbps is not None:
        link = s * f / bytes_per_s(min(_rates(sender_mbps, n, "sender_mbps")))
        cands["sender link"] = link
    lv = _leaves(sender_leaves, n, "sender_leaves")
    if (lv is None) != (receiver_leaf is None):
        raise ValueError("give both sender_leaves and receiver_leaf, or neither")
    flows = [(a, receiver_leaf, s) for a in lv] if lv is not None else []
    fab, fab_name, fab_txt = _fabric_term(*_leaf_traffic(flows), spines, fabric_mbps, f)
    if fab_name:
        cands[f"fabric ({fab_name})"] = fab
    lat = 2 * alpha_s
    secs = max(cands.values()) + lat
    formula = (f"incast round, N={n} senders × S={_fmt(s)} B, f={f:.4f}: max(receiver port "
               f"N·S·f/B_r = {_fmt(n * s)} B·f/{_fmt(b_r)} Mbit/s = {_fmt(port)} s"
               f"{', sender link S·f/B_s = ' + _fmt(link) + ' s' if sender_mbps else ''}"
               f"{', fabric ' + fab_txt if fab_name else ''})"
               f"{' + 2α = ' + _fmt(lat) + ' s' if lat else ''} = {_fmt(secs)} s")
    return Bound(secs, formula, {"receiver_port": port, "sender_link": link, "fabric": fab,
                                 "latency": lat}, _top(cands))


# --- model parallelism (pipeline, tensor) ----------------------------------------------------

def bubble_fraction(stages: int, micro_batches: int) -> float:
    """The idle share of a pipeline step with S = `stages` equal stages and M =
    `micro_batches`, at no communication cost: (S−1)/(M+S−1). Each stage works M·(t_f +
    t_b) of a step that lasts (M+S−1)·(t_f + t_b): the first micro-batch needs S−1
    forward times to reach the last stage, the last gradient S−1 backward times to come
    back. The same for GPipe and 1F1B (1F1B only reorders the work to hold at most S
    activations instead of M)."""
    s = _positive(stages, "stages", integer=True)
    m = _positive(micro_batches, "micro_batches", integer=True)
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
    s = _positive(stages, "stages", integer=True)
    m = _positive(micro_batches, "micro_batches", integer=True)
    a = float(_positive(activation_bytes, "activation_bytes"))
    rates = _rates(host_mbps, s, "host_mbps")
    lv = _leaves(leaves, s, "leaves")
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
    formula = (f"pipeline step, S={s} stages, M={m} micro-batches, A={_fmt(a)} B per "
               f"message, f={f:.4f}: idle ≥ bubble (S−1)(t_f+t_b) = {s - 1}×"
               f"{_fmt(op)} s = {_fmt(bubble)} s + transfers on the critical path "
               f"Σ 2(α + A·f/B_k) over {s - 1} boundaries = {_fmt(transfer)} s; step ≥ "
               f"(M+S−1)(t_f+t_b) + transfers = {_fmt(step)} s, bubble fraction "
               f"(S−1)/(M+S−1) = {bubble_fraction(s, m):.4f}")
    return Bound(transfer, formula, {"transfer": transfer, "schedule": bubble,
                                     "compute": compute, "step": step,
                                     "per_message": max(per) if per else 0.0},
                 "critical-path transfers")


def tensor_bound(ranks: int, message_bytes: float, host_mbps, *, collectives: int = 1,
                 leaves: Sequence[str] | None = None, spines: int = 0,
                 fabric_mbps: float | None = None, alpha_s: float = 0.0,
                 mtu: int = 1500) -> Bound:
    """Tensor (Megatron) parallelism over T = `ranks`: `collectives` ring all-reduces of
    n = `message_bytes` each, one after the other (each layer's forward all-reduce of
    activations and backward all-reduce of gradients wait for the layer's compute, so
    they cannot overlap): the least time of all of them (s).

    Each is `ring_bound(T, n, ...)`: 2(T−1)·α + max(host, fabric) with host =
    2(T−1)/T·n·f'/B. α = `alpha_s`, the one-way latency of a message (measured by the
    app: the links have no configured delay, but every message still crosses the hosts'
    stacks and each switch on its path, more of them across leaves). For the small
    messages of tensor parallelism the 2(T−1)·α term can exceed the bandwidth term:
    then the bottleneck is 'latency', and placing the ranks under one leaf (fewer hops,
    smaller α) is what helps.

    Bound.terms: per_collective, latency (all collectives' α terms), bandwidth (the
    rest), collectives (a count). Seconds except the count."""
    c = _positive(collectives, "collectives", integer=True)
    one = ring_bound(ranks, message_bytes, host_mbps, leaves=leaves, spines=spines,
                     fabric_mbps=fabric_mbps, alpha_s=alpha_s, mtu=mtu)
    lat = c * one.terms["latency"]
    bw = c * (one.seconds - one.terms["latency"])
    secs = c * one.seconds
    name = "latency" if lat > bw else one.bottleneck
    formula = (f"tensor parallel, T={ranks}, {c} all-reduces of n={_fmt(float(message_bytes))}"
               f" B each: {c} × (2(T−1)α = {_fmt(one.terms['latency'])} s + "
               f"{_fmt(one.seconds - one.terms['latency'])} s of bytes) = {_fmt(secs)} s "
               f"(latency {_fmt(lat)} s, bandwidth {_fmt(bw)} s); one all-reduce: "
               f"{one.formula}")
    return Bound(secs, formula, {"per_collective": one.seconds, "latency": lat,
                                 "bandwidth": bw, "collectives": c}, name)


# --- all-reduce algorithms: halving-doubling, binary tree, leaf-aware hierarchical ---------
# (issue 12; the apps are in apps/ring.py, the same schedules step by step)

ALLREDUCE_ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")


def _phase_seconds(flows: Sequence[tuple[int, int, float]], rates: Sequence[float],
                   leaves: Sequence[str] | None, spines: int, fabric_mbps,
                   mtu: int) -> tuple[float, str]:
    """(seconds, bottleneck) of one phase whose `flows` ((source rank, destination rank,
    bytes)) all run at once: its busiest link. A host link, or a leaf's spine links in one
    direction, carries f = `framing_factor` per byte, or f' = `ack_framing` when the
    other direction carries data of the phase too (the ACKs of that data share it).
    Fabric links as in the module docstring (spread evenly over `spines`)."""
    f, fa = framing_factor(mtu), ack_framing(mtu)
    out: dict = {}
    into: dict = {}
    for s, d, n in flows:
        out[s] = out.get(s, 0.0) + n
        into[d] = into.get(d, 0.0) + n
    cands = {}
    for r in sorted(set(out) | set(into)):
        for mine, other, what in ((out, into, "out of"), (into, out, "into")):
            if mine.get(r):
                frame = fa if other.get(r) else f
                cands[f"host link {what} rank {r}"] = mine[r] * frame / bytes_per_s(rates[r])
    if leaves is not None:
        up, down = _leaf_traffic((leaves[s], leaves[d], n) for s, d, n in flows)
        if up or down:
            if not spines or not fabric_mbps:
                raise ValueError("traffic crosses leaves: `spines` and `fabric_mbps` are needed")
            cap = bytes_per_s(spines * fabric_mbps)
            for leaf, n in up.items():
                cands[f"uplinks of {leaf}"] = n * (fa if down.get(leaf) else f) / cap
            for leaf, n in down.items():
                cands[f"downlinks into {leaf}"] = n * (fa if up.get(leaf) else f) / cap
            # a TCP flow takes one path (every policy here routes per flow), so a flow
            # that crosses the spines moves over one leaf-spine link at a time, however
            # many spines its leaf has
            for s, d, n in flows:
                if leaves[s] != leaves[d]:
                    frame = fa if (d, s) in {(a, b) for a, b, _ in flows} else f
                    t = n * frame / bytes_per_s(fabric_mbps)
                    if t > cands.get("one flow's spine link", 0.0):
                        cands["one flow's spine link"] = t
    if not cands:
        return 0.0, ""
    name = max(cands, key=lambda k: cands[k])
    return cands[name], name


def _serial(phases: Sequence[tuple[str, list]], rates, leaves, spines, fabric_mbps,
            mtu) -> tuple[float, list[tuple[str, float, str]]]:
    """Phases that follow one another: the sum of their times; [(phase, s, bottleneck)]."""
    done = [(name, *_phase_seconds(flows, rates, leaves, spines, fabric_mbps, mtu))
            for name, flows in phases]
    return sum(t for _, t, _ in done), done


def halving_doubling_bound(ranks: int, model_bytes: float, host_mbps, *,
                           leaves: Sequence[str] | None = None, spines: int = 0,
                           fabric_mbps: float | None = None, alpha_s: float = 0.0,
                           mtu: int = 1500) -> Bound:
    """Recursive halving then doubling (Rabenseifner) of M = `model_bytes` over N =
    `ranks`: the least time (s), phase by phase as apps.ring.halving_doubling_allreduce
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
    n = _positive(ranks, "ranks", integer=True)
    m = float(_positive(model_bytes, "model_bytes"))
    rates = _rates(host_mbps, n, "host_mbps")
    lv = _leaves(leaves, n, "leaves")
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
    _, done = _serial(phases, rates, lv, spines, fabric_mbps, mtu)
    fold_s = sum(t for name, t, _ in done if name == "fold")
    unfold_s = sum(t for name, t, _ in done if name == "unfold")
    butterfly = sum(t for name, t, _ in done if name not in ("fold", "unfold"))
    lat = (2 * steps + (2 if r else 0)) * alpha_s
    secs = fold_s + butterfly + unfold_s + lat
    worst = max(done, key=lambda d: d[1]) if done else ("", 0.0, "")
    formula = (f"halving-doubling all-reduce, N={n} (p={p}, {r} folded), M={_fmt(m)} B: "
               + (f"fold M·f/B = {_fmt(fold_s)} s + " if r else "")
               + f"butterfly 2(p−1)/p·M·f'/B = {_fmt(butterfly)} s"
               + (f" + unfold {_fmt(unfold_s)} s" if r else "")
               + (f" + latency {_fmt(lat)} s" if lat else "")
               + f" = {_fmt(secs)} s (each step at its busiest link; longest: {worst[0]}, "
               f"{worst[2]})")
    return Bound(secs, formula, {"fold": fold_s, "butterfly": butterfly, "unfold": unfold_s,
                                 "latency": lat}, worst[2])


def tree_bound(ranks: int, model_bytes: float, host_mbps, *, slices: int = 1,
               leaves: Sequence[str] | None = None, spines: int = 0,
               fabric_mbps: float | None = None, alpha_s: float = 0.0,
               mtu: int = 1500) -> Bound:
    """Binary-tree all-reduce (reduce to rank 0, broadcast back, pipelined in `slices`
    slices of M/slices) over N = `ranks`: the least time (s).

    The heap tree of apps.ring.tree_allreduce (parent of r: (r−1)//2). Every tree edge
    carries M up and M down, all pipelined at once, so a rank with c children moves
    (c + 1)·M (c·M at the root) each way over its link: busiest link = max over ranks
    and leaf spine links (`_phase_seconds`, f' where both directions carry data). And a
    chain no pipelining hides: the root must take in c_root·M (c_root·M·f/B_root), and the
    last slice then still goes down h = floor(log2 N) hops, each a whole slice stored and
    forwarded (h·(M/slices)·f/B_min). bound = max(busiest link, root chain) + 2h·α.
    For N = 4, M = 1 MB at 8 Mbit/s, 4 slices: max(2·1.0684, (2 + 2/4)·1.0456) = 2.614 s.

    Bound.terms: busiest_link, root_chain, latency (s).
    """
    n = _positive(ranks, "ranks", integer=True)
    m = float(_positive(model_bytes, "model_bytes"))
    k = _positive(slices, "slices", integer=True)
    rates = _rates(host_mbps, n, "host_mbps")
    lv = _leaves(leaves, n, "leaves")
    f = framing_factor(mtu)
    flows = [e for c in range(1, n) for e in ((c, (c - 1) // 2, m), ((c - 1) // 2, c, m))]
    link, name = _phase_seconds(flows, rates, lv, spines, fabric_mbps, mtu)
    h = n.bit_length() - 1
    c_root = min(2, n - 1)
    chain = c_root * m * f / bytes_per_s(rates[0]) + h * (m / k) * f / bytes_per_s(min(rates))
    lat = 2 * h * alpha_s
    cands = {name or "host link": link, "root chain": chain}
    secs = max(cands.values()) + lat
    formula = (f"binary-tree all-reduce, N={n} (height {h}), M={_fmt(m)} B in {k} slices: "
               f"max(busiest link ({name}) = {_fmt(link)} s, root chain c·M·f/B_root + "
               f"h·(M/slices)·f/B = {_fmt(chain)} s)"
               + (f" + 2h·α = {_fmt(lat)} s" if lat else "") + f" = {_fmt(secs)} s")
    return Bound(secs, formula, {"busiest_link": link, "root_chain": chain, "latency": lat},
                 _top(cands))


def hierarchical_bound(ranks: int, model_bytes: float, host_mbps, *,
                       leaves: Sequence[str], spines: int = 0,
                       fabric_mbps: float | None = None, alpha_s: float = 0.0,
                       mtu: int = 1500) -> Bound:
    """Leaf-aware all-reduce of M = `model_bytes` over N = `ranks` on `leaves` (rank r's
    leaf at [r]): the least time (s), its three phases added (they follow one another in
    apps.ring.hierarchical_allreduce).

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
    n = _positive(ranks, "ranks", integer=True)
    m = float(_positive(model_bytes, "model_bytes"))
    rates = _rates(host_mbps, n, "host_mbps")
    if leaves is None:
        raise ValueError("leaves: the hierarchical all-reduce needs the leaf of every rank")
    lv = _leaves(leaves, n, "leaves")
    groups: dict = {}
    for r, leaf in enumerate(lv):
        groups.setdefault(leaf, []).append(r)
    leaders = sorted(g[0] for g in groups.values())
    reduce_flows = [(r, g[0], m) for g in groups.values() for r in g[1:]]
    red, red_name = _phase_seconds(reduce_flows, rates, lv, spines, fabric_mbps, mtu)
    bc, bc_name = _phase_seconds([(b, a, x) for a, b, x in reduce_flows], rates, lv, spines,
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
    formula = (f"hierarchical all-reduce, N={n} on {len(leaders)} leaves, M={_fmt(m)} B: "
               f"leaf reduce (k−1)·M·f/B = {_fmt(red)} s + leaders' ring "
               + (f"[{ring.formula}]" if ring else "(one leaf: none) 0 s")
               + f" + leaf broadcast {_fmt(bc)} s"
               + (f" + 2α = {_fmt(lat)} s" if lat else "") + f" = {_fmt(secs)} s")
    return Bound(secs, formula, {"leaf_reduce": red, "leaders_ring": ring_s,
                                 "leaf_broadcast": bc, "latency": lat}, _top(cands))


def allreduce_bound(algorithm: str, ranks: int, model_bytes: float, host_mbps, *,
                    leaves: Sequence[str] | None = None, spines: int = 0,
                    fabric_mbps: float | None = None, slices: int = 1,
                    alpha_s: float = 0.0, mtu: int = 1500) -> Bound:
    """The bound of `algorithm` (one of ALLREDUCE_ALGORITHMS); `slices` is the tree's."""
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
    raise ValueError(f"algorithm must be one of {', '.join(ALLREDUCE_ALGORITHMS)}, "
                     f"got {algorithm!r}")


def alltoall_bound(matrix: Sequence[Sequence[float]], host_mbps, *,
                   leaves: Sequence[str] | None = None, spines: int = 0,
                   fabric_mbps: float | None = None, passes: int = 1,
                   alpha_s: float = 0.0, mtu: int = 1500) -> Bound:
    """An all-to-all: host i sends matrix[i][j] bytes to host j (the diagonal stays home);
    the least time (s) of `passes` such exchanges, each with the matrix and then its
    transpose (MoE: dispatch, then combine; a training step's backward repeats both).

    One exchange: every flow at once, so its time is that of its busiest link
    (`_phase_seconds`): max over hosts of the bytes out of and into the host over its
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
    rates = _rates(host_mbps, n, "host_mbps")
    lv = _leaves(leaves, n, "leaves")
    k = _positive(passes, "passes", integer=True)
    flows = [(i, j, float(matrix[i][j])) for i in range(n) for j in range(n)
             if i != j and matrix[i][j] > 0]
    d, d_name = _phase_seconds(flows, rates, lv, spines, fabric_mbps, mtu)
    c, c_name = _phase_seconds([(j, i, x) for i, j, x in flows], rates, lv, spines,
                               fabric_mbps, mtu)
    lat = 2 * alpha_s * k
    secs = k * (d + c) + lat
    name = f"dispatch: {d_name}" if d >= c else f"combine: {c_name}"
    formula = (f"all-to-all of {n} hosts, {_fmt(sum(x for _, _, x in flows))} B across: "
               f"{k} × (dispatch at its busiest link ({d_name}) {_fmt(d)} s + combine "
               f"({c_name}) {_fmt(c)} s)" + (f" + {_fmt(lat)} s latency" if lat else "")
               + f" = {_fmt(secs)} s")
    return Bound(secs, formula, {"dispatch": k * d, "combine": k * c, "latency": lat}, name)
