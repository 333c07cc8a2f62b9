"""Data-parallel training with a ring all-reduce built from gloo send/recv.

    python -m incastlab.apps.ring --rank R --world-size N --master ADDR:PORT --out DIR
        [--impl ring|gloo] [--iterations I] [--model-size MPARAMS] ...

Every rank is a worker (ranks 0..N-1, rank 0 hosts the rendezvous) holding the whole
model and its own data shard. Each iteration it computes its gradient, all-reduces it,
divides by N and applies SGD, so all ranks keep identical parameters.

`--impl ring` (default) is the NCCL/Horovod algorithm on point-to-point messages: the
flat gradient of M bytes is split into N nearly equal chunks; N-1 reduce-scatter steps
(send one chunk to the right neighbour, receive one from the left and add it) leave rank
r with the complete sum of chunk (r+1) mod N; N-1 all-gather steps pass the completed
chunks round the ring. Chunks travel in slices, pipelined across steps (see
`ring_allreduce`). Each rank sends exactly 2 (N-1)/N x M bytes when N divides the
element count (the logged `bytes_sent` is the exact sum of the chunk sizes it sent), and
only ever to rank r+1, receiving only from rank r-1. Each chunk's sum is computed once
and then copied, so every rank ends with bit-identical results.

`--impl gloo` uses `dist.all_reduce` instead (gloo chooses its own algorithm, so the
bytes it sends are not observable here and are logged as null).
"""
from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from . import common
from .model import BYTES_PER_PARAM, Digits, Trainer, build_model, params_digest

PROG = "incastlab.apps.ring"


# Each chunk is cut into up to this many slices, each at least MIN_SLICE_BYTES long.
DEFAULT_SLICES = 8
MIN_SLICE_BYTES = 16 * 1024


def ring_allreduce(tensor: torch.Tensor, rank: int, world: int, timeout: float,
                   slices: int = DEFAULT_SLICES, group: Sequence[int] | None = None,
                   tag_base: int = 0) -> tuple[int, int]:
    """Sum `tensor` (1-D, contiguous) in place across the ring; return (bytes sent, recv).

    Uses the default process group; every send/receive waits at most `timeout` seconds.
    `group` (global ranks in ring order, `rank` among them) runs the ring over those ranks
    only (the hierarchical all-reduce's leaf leaders); default: all `world` ranks. Tags
    are `tag_base` + item, so rings of different phases never match each other's messages.

    Pipelined, as NCCL does it: every chunk is cut into `slices` slices (fewer if that
    would make them shorter than MIN_SLICE_BYTES) and each slice travels on its own, so
    slice j of step s+1 leaves as soon as slice j of step s has arrived (and been added),
    not when the whole step is over on both sides. Receives are posted two steps ahead.
    Why it matters: gloo's send waits until the receiver has posted its receive and told
    the sender so (a NOTIFY_RECV_READY message); in a lockstep ring (one isend + irecv per
    step, wait both) every step boundary costs a round trip of that message, which in a
    fabric crosses the same queues as the data, and each step waits for the slowest of
    the N flows. Measured in the leaf-spine fabric (benchmarks/allreduce_efficiency.py,
    M = 4 MiB, N = 4, 20 Mbit/s; pcaps showed 50-200 ms of idle link before most steps):
    lockstep 1.53 x the bound, pipelined 1.13 x. (Later, at 50 Mbit/s, pipelined: 1.11-1.31
    x with one host FIFO, 1.07 x once hosts sent their pure ACKs ahead of their own data,
    see topologies/links.py.) Bytes and
    summation order are unchanged: every rank sends exactly the same 2 (N-1) chunks (now
    in slices) and each element's sum is formed in the same ring order, once, then
    copied, so every rank ends with bit-identical results.
    """
    members = list(group) if group is not None else list(range(world))
    me, world = members.index(rank), len(members)
    if world == 1:
        return 0, 0
    if slices < 1:
        raise ValueError(f"slices must be >= 1, got {slices}")
    esize = tensor.element_size()
    chunks = list(torch.tensor_split(tensor, world))
    smallest = min(c.numel() for c in chunks) * esize
    per = max(1, min(slices, smallest // MIN_SLICE_BYTES))
    parts = [list(torch.tensor_split(c, per)) for c in chunks]
    right, left = members[(me + 1) % world], members[(me - 1) % world]
    rank = me  # below, chunk arithmetic uses the position in the ring
    steps = 2 * (world - 1)  # world-1 reduce-scatter steps, then world-1 all-gather steps
    total = steps * per  # items: item i = step s, slice j with i = s * per + j
    window = 2 * per  # receives posted ahead
    biggest = max(p.numel() for c in parts for p in c)
    scratch = [torch.empty(biggest, dtype=tensor.dtype) for _ in range(window)]
    # Step s (either phase) sends chunk (rank - s) and receives chunk (rank - s - 1).
    sending: dict[tuple[int, int], int] = {}  # (chunk, slice) -> item of the send reading it
    sends: dict[int, tuple[Any, str]] = {}  # item -> its send, until waited for (once only)
    receives: dict[int, tuple[Any, torch.Tensor, str]] = {}
    sent = recv = 0

    def describe(s: int, j: int) -> str:
        phase, k = ("reduce-scatter", s) if s < world - 1 else ("all-gather", s - world + 1)
        return f"ring {phase} step {k + 1}/{world - 1} slice {j + 1}/{per}"

    def post_recv(i: int) -> None:
        s, j = divmod(i, per)
        c = (rank - s - 1) % world
        if s < world - 1:  # reduce-scatter: into scratch, added below
            target = scratch[i % window][:parts[c][j].numel()]
        else:  # all-gather: the final values, straight into place
            target = parts[c][j]
            if (c, j) in sending:  # sent during reduce-scatter: that send must be done
                send = sends.pop(sending.pop((c, j)), None)
                if send is not None:
                    common.wait(send[0], timeout, send[1])
        what = f"{describe(s, j)}: receive from rank {left}"
        receives[i] = (dist.irecv(target, src=left, tag=tag_base + i), target, what)

    def post_send(i: int) -> None:
        nonlocal sent
        s, j = divmod(i, per)
        c = (rank - s) % world
        what = f"{describe(s, j)}: send to rank {right}"
        work = dist.isend(parts[c][j], dst=right, tag=tag_base + i)
        sending[(c, j)] = i
        sends[i] = (work, what)
        sent += parts[c][j].numel() * esize

    for i in range(min(window, total)):
        post_recv(i)
    for i in range(per):  # step 0 sends local data: all of it at once
        post_send(i)
    for i in range(total):
        work, target, what = receives.pop(i)
        common.wait(work, timeout, what)
        s, j = divmod(i, per)
        if s < world - 1:
            parts[(rank - s - 1) % world][j] += target
        recv += target.numel() * esize
        if i + window < total:
            post_recv(i + window)
        if i + per < total:
            post_send(i + per)  # slice j of the next step: the chunk part just received
    for work, what in sends.values():
        common.wait(work, timeout, what)
    return sent, recv


def gloo_allreduce(tensor: torch.Tensor, timeout: float) -> None:
    """Sum `tensor` in place with gloo's own all_reduce, waiting at most `timeout` s."""
    work = dist.all_reduce(tensor, async_op=True)
    common.wait(work, timeout, "gloo all_reduce")


# --- the other all-reduce algorithms ------------------------------------------------------
# Each sums `tensor` (1-D, contiguous) in place over the default process group and returns
# (bytes sent, bytes received) of this rank, exactly. Each element's sum is formed once, on
# one rank, in an order fixed by the schedule, and copied from there, so every rank ends
# bit-identical (and equal to gloo's all_reduce wherever float addition is exact).
# Receives are posted before the sends they answer: gloo's send waits until its receiver
# has posted (see ring_allreduce), so a late receive costs a round trip per message.

# A tree pipelines its gradient in up to this many slices (each >= MIN_SLICE_BYTES). The
# last slice must still climb to the root and come back down after the busiest link's
# other bytes are through (store and forward, a slice at a time): on the fabric
# (benchmarks/allreduce_efficiency.py, N = 8, M = 4 MiB, 50 Mbit/s) that tail measured
# ~0.10 s with 32 slices and ~0.05 s with 64, of a 2.15 s bound.
TREE_SLICES = 64
# A parent posts its receive for a child's slice j + window only once slice j has
# arrived from every child: gloo's send waits for its receiver's post, so this is a credit
# window. With every receive posted at once, the child nearer the parent (the shorter
# round trip) took most of the parent's shared link: on the fabric (N = 4, M = 4 MiB,
# 50 Mbit/s) it ran ~35 of 50 Mbit/s against the other child's ~15, the root could only
# broadcast what both had sent (at the slower's pace, its own uplink 30 of 50 Mbit/s
# busy), and the broadcast's backlog ran on after the reduce: 1.14-1.21 x the bound;
# with the window 1.076-1.110. Counted in slices: at M = 4 MiB (64 slices) four are
# 256 KiB, a child's share of the link over a loaded round trip (~30 ms) and more.
TREE_WINDOW = 4
# With jumbo frames the window is smaller. A 64 KiB slice is then 8 packets, so two
# children with 4 slices each and the parent's broadcast fill the inner rank's
# 100-packet downlink queue: 180-290 tc drops per run at N = 8 (lf1-eth2/3, ranks 1 and
# 2), each a 9000-byte frame recovered behind a queue that drains in 144 ms, and the
# tree at 1.11-1.23 x its bound (windows 4, 8, 16). The datapath has headroom with jumbo
# frames (unflagged), so the round trip a credit must cover is short: with 2 slices no
# drop, 1.051-1.063 at N = 8 (five runs) and 1.027-1.035 at N = 4 (1.065 with 4). With
# standard frames the datapath is at its ceiling at N = 8, a loaded round trip is long,
# and 2 slices measured 1.21 (4: 1.07-1.13): 4 stays there. (Measured with the lab's
# 100-packet queues; a much shorter queue of jumbo frames may want less.)
TREE_WINDOW_JUMBO = 2
STANDARD_MTU = 1500


def tree_window(mtu: int | None) -> int:
    """The tree's credit window in slices for links of `mtu` bytes (None: unknown, taken
    as standard Ethernet): TREE_WINDOW up to 1500 bytes, TREE_WINDOW_JUMBO above (also
    loopback's 65536, where the window only paces the sends)."""
    return TREE_WINDOW if mtu is None or mtu <= STANDARD_MTU else TREE_WINDOW_JUMBO


def default_tree_window() -> int:
    """`tree_window` of the interface gloo uses (GLOO_SOCKET_IFNAME; --iface sets it)."""
    return tree_window(link_mtu(os.environ.get("GLOO_SOCKET_IFNAME")))


def link_mtu(iface: str | None) -> int | None:
    """The MTU of network interface `iface` (from /sys/class/net; of a comma-separated
    list, as GLOO_SOCKET_IFNAME may be, the smallest), or None when no interface is
    named or one cannot be read."""
    if not iface:
        return None
    try:
        return min(int(Path(f"/sys/class/net/{name.strip()}/mtu").read_text())
                   for name in iface.split(","))
    except (OSError, ValueError):
        return None


def _post(recvs: list, src: int, numel: int, dtype: torch.dtype, tag: int, what: str) -> None:
    buf = torch.empty(numel, dtype=dtype)
    recvs.append((dist.irecv(buf, src=src, tag=tag), buf, what))


def halving_doubling_allreduce(tensor: torch.Tensor, rank: int, world: int,
                               timeout: float) -> tuple[int, int]:
    """Recursive halving (reduce-scatter) then recursive doubling (all-gather), for any N.

    With p = the largest power of two <= N and r = N - p: the first 2r ranks pair up and
    each even one of them folds its whole gradient into the odd one above it (which adds
    it: odd + even) and sits out; the p remaining ranks (virtual ranks 0..p-1) run the
    butterfly on the gradient cut into p blocks: in step s (mask = p/2, p/4, ..., 1) a
    rank exchanges with virtual rank v XOR mask the half of its current range it gives up
    and adds the half it keeps (own + partner), ending with block v summed; then the
    all-gather retraces the steps, doubling the range each time. Finally each folded rank
    gets the result back from its partner. Bytes per butterfly rank: 2 (p-1)/p x M, as a
    ring; a folded pair adds M each way (the cost of N not a power of two).
    """
    if world == 1:
        return 0, 0
    esize, dtype = tensor.element_size(), tensor.dtype
    p = 1 << (world.bit_length() - 1)
    r = world - p
    steps = p.bit_length() - 1
    unfold_tag = 2 + 2 * steps
    if rank < 2 * r and rank % 2 == 0:  # folded: hand the gradient over, get the sum back
        common.wait(dist.isend(tensor, dst=rank + 1, tag=0), timeout,
                    f"halving-doubling fold: send to rank {rank + 1}")
        common.wait(dist.irecv(tensor, src=rank + 1, tag=unfold_tag), timeout,
                    f"halving-doubling unfold: receive from rank {rank + 1}")
        return tensor.numel() * esize, tensor.numel() * esize
    v = rank // 2 if rank < 2 * r else rank - r

    def real(u: int) -> int:  # global rank of virtual rank u
        return 2 * u + 1 if u < r else u + r

    sizes = [b.numel() for b in torch.tensor_split(tensor, p)]
    offs = [0]
    for n in sizes:
        offs.append(offs[-1] + n)
    plan = []  # (partner, kept blocks, given blocks), one per halving step
    lo, hi, mask = 0, p, p // 2
    while mask:
        mid = (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if v & mask else ((lo, mid), (mid, hi))
        plan.append((real(v ^ mask), keep, give))
        lo, hi = keep
        mask //= 2

    def span(blocks: tuple[int, int]) -> torch.Tensor:
        return tensor[offs[blocks[0]]:offs[blocks[1]]]

    sent = recv = 0
    fold: list = []
    if rank < 2 * r:
        _post(fold, rank - 1, tensor.numel(), dtype, 0,
              f"halving-doubling fold: receive from rank {rank - 1}")
    rs: list = []
    ag: list = []
    for s, (partner, keep, give) in enumerate(plan):
        _post(rs, partner, offs[keep[1]] - offs[keep[0]], dtype, 1 + s,
              f"halving-doubling reduce-scatter step {s + 1}/{steps}: receive from rank "
              f"{partner}")
        _post(ag, partner, offs[give[1]] - offs[give[0]], dtype, 1 + steps + s,
              f"halving-doubling all-gather step {steps - s}/{steps}: receive from rank "
              f"{partner}")
    if fold:
        work, buf, what = fold[0]
        common.wait(work, timeout, what)
        tensor += buf
        recv += buf.numel() * esize
    for s, (partner, keep, give) in enumerate(plan):
        send = dist.isend(span(give), dst=partner, tag=1 + s)
        work, buf, what = rs[s]
        common.wait(work, timeout, what)
        span(keep).add_(buf)
        common.wait(send, timeout, f"halving-doubling reduce-scatter step {s + 1}/{steps}: "
                                   f"send to rank {partner}")
        sent += span(give).numel() * esize
        recv += buf.numel() * esize
    for s in reversed(range(steps)):
        partner, keep, give = plan[s]
        send = dist.isend(span(keep), dst=partner, tag=1 + steps + s)
        work, buf, what = ag[s]
        common.wait(work, timeout, what)
        span(give).copy_(buf)
        common.wait(send, timeout, f"halving-doubling all-gather step {steps - s}/{steps}: "
                                   f"send to rank {partner}")
        sent += span(keep).numel() * esize
        recv += buf.numel() * esize
    if rank < 2 * r:
        common.wait(dist.isend(tensor, dst=rank - 1, tag=unfold_tag), timeout,
                    f"halving-doubling unfold: send to rank {rank - 1}")
        sent += tensor.numel() * esize
    return sent, recv


def tree_slices(nbytes: int, slices: int = TREE_SLICES) -> int:
    """Slices a tree cuts a gradient of `nbytes` into: up to `slices`, each at least
    MIN_SLICE_BYTES (one slice for a small gradient)."""
    return max(1, min(slices, nbytes // MIN_SLICE_BYTES))


def tree_height(world: int) -> int:
    """Edges from the root to the deepest rank of the binary tree of `world` ranks."""
    return (world.bit_length() - 1) if world > 0 else 0


def tree_allreduce(tensor: torch.Tensor, rank: int, world: int, timeout: float,
                   slices: int = TREE_SLICES, window: int | None = None) -> tuple[int, int]:
    """Reduce up a binary tree to rank 0, then broadcast down it, pipelined in slices.

    The tree is a heap: rank r's parent is (r-1)//2, its children 2r+1 and 2r+2 (those
    < N), so any N works and its height is floor(log2 N). The gradient is cut into up to
    `slices` slices (`tree_slices`); a rank adds slice j of its children to its own (own
    + left + right) and sends it up as soon as both arrived; the root's slice j is then
    final and goes down the tree. The parent's broadcast is received into buffers posted
    at the start; the children's slices within a window of `window` slices ahead of the
    last one added (a credit, so that one child cannot take the parent's link while the
    other falls behind); default `tree_window` of the MTU of the interface gloo uses
    (GLOO_SOCKET_IFNAME, which --iface sets).

    The two directions run independently, as NCCL's tree does: the calling thread
    reduces (waits for the children's slices, sends up), and on a non-root rank a second
    thread broadcasts (waits for the parent's slice j, copies it into place once slice j's
    send up is done, sends it down). A single thread interleaving the two (broadcast slice
    j after sending slice j + 2h up, the previous design) chained every rank's wait for
    its parent to its wait for its children: on the fabric (benchmarks/
    allreduce_efficiency.py, 50 Mbit/s, M = 4 MiB, 32 slices) the broadcast of slice j
    reached rank 1 of N = 8 about 0.9 s after the root had it, each slice needed a full
    round trip of the deepest path before the next could leave a leaf (one slice per
    ~0.17 s instead of one per ~0.06 s at the busiest link's fair share), and the tree
    measured 1.28 x its bound at N = 4 and 1.9-2.4 x at N = 8.
    Bytes: a rank with c children sends M up (not the root) and c x M down, and receives
    c x M from its children and M from its parent (not the root).
    """
    if window is None:
        window = default_tree_window()
    if window < 1:  # no credit at all: no child could ever send
        raise ValueError(f"tree window: {window} slices; at least 1")
    if world == 1:
        return 0, 0
    esize, dtype = tensor.element_size(), tensor.dtype
    per = tree_slices(tensor.numel() * esize, slices)
    parts = list(torch.tensor_split(tensor, per))
    parent = (rank - 1) // 2 if rank else None
    children = [c for c in (2 * rank + 1, 2 * rank + 2) if c < world]
    up: dict[int, list] = {c: [] for c in children}

    def post_up(j: int) -> None:  # the receive of slice j from every child
        if j < per:
            for c in children:
                _post(up[c], c, parts[j].numel(), dtype, j,
                      f"tree reduce slice {j + 1}/{per}: receive from rank {c}")

    for j in range(min(window, per)):
        post_up(j)
    down: list = []
    if parent is not None:
        for j, part in enumerate(parts):
            _post(down, parent, part.numel(), dtype, per + j,
                  f"tree broadcast slice {j + 1}/{per}: receive from rank {parent}")
    sends_down: list = []  # appended by the broadcasting thread only
    counts = {"up_sent": 0, "up_recv": 0, "down_sent": 0, "down_recv": 0}

    def send_down(j: int) -> None:
        for c in children:
            sends_down.append((dist.isend(parts[j], dst=c, tag=per + j),
                               f"tree broadcast slice {j + 1}/{per}: send to rank {c}"))
            counts["down_sent"] += parts[j].numel() * esize

    # slice j's send up, handed from the reducing thread to the broadcasting one, which
    # must not overwrite parts[j] before it is done; None: the reducing thread failed
    handed: queue.Queue = queue.Queue()
    failed: list[BaseException] = []

    def broadcast() -> None:
        try:
            for j in range(per):
                item = handed.get()  # the reducing thread hands every slice or None
                if item is None:
                    return
                work, what = item
                common.wait(work, timeout, what)
                work, buf, what = down[j]
                common.wait(work, timeout, what)
                parts[j].copy_(buf)
                counts["down_recv"] += buf.numel() * esize
                send_down(j)
        except BaseException as exc:  # noqa: B036 - re-raised in the calling thread
            failed.append(exc)

    helper = None
    if parent is not None:
        helper = threading.Thread(target=broadcast, name="tree-broadcast", daemon=True)
        helper.start()
    try:
        for j in range(per):
            for c in children:
                work, buf, what = up[c][j]
                common.wait(work, timeout, what)
                parts[j] += buf
                counts["up_recv"] += buf.numel() * esize
                up[c][j] = None  # its buffer is added in: free it
            post_up(j + window)  # credit: every child may send one slice more
            if parent is None:  # the root: slice j is final
                send_down(j)
            else:
                what = f"tree reduce slice {j + 1}/{per}: send to rank {parent}"
                handed.put((dist.isend(parts[j], dst=parent, tag=j), what))
                counts["up_sent"] += parts[j].numel() * esize
    except BaseException:
        handed.put(None)  # the helper stops at its next slice (a daemon: not joined)
        raise
    if helper is not None:
        helper.join()  # every wait of the helper has its own deadline: it ends
    if failed:
        raise failed[0]
    for work, what in sends_down:
        common.wait(work, timeout, what)
    return (counts["up_sent"] + counts["down_sent"], counts["up_recv"] + counts["down_recv"])


def leaf_groups(leaves: Sequence) -> list[list[int]]:
    """Ranks grouped by leaf (`leaves[r]` = rank r's leaf), each group in rank order, the
    groups in the order of their first (leader) rank."""
    groups: dict = {}
    for r, leaf in enumerate(leaves):
        groups.setdefault(leaf, []).append(r)
    return sorted(groups.values(), key=lambda g: g[0])


def hierarchical_allreduce(tensor: torch.Tensor, rank: int, world: int, timeout: float,
                           leaves: Sequence) -> tuple[int, int]:
    """Leaf-aware: reduce inside each leaf, all-reduce among leaf leaders, broadcast back.

    `leaves[r]` is rank r's leaf (any labels; one per rank). A leaf's leader is its lowest
    rank. (1) Every other rank of the leaf sends its whole gradient to the leader, which
    adds them in rank order; (2) the leaders run the pipelined ring all-reduce among
    themselves (ring_allreduce over the group of leaders, in rank order): the only
    traffic that crosses the spines, 2 (L-1)/L x M out of each leaf for L leaves instead
    of the flat ring's 2 (N-1)/N x M per ring edge leaving the leaf; (3) each leader sends
    the sum to its leaf's other ranks. The phases follow one another.
    """
    if len(leaves) != world:
        raise ValueError(f"leaves: expected one leaf per rank ({world}), got {len(leaves)}")
    groups = leaf_groups(leaves)
    mine = next(g for g in groups if rank in g)
    leader, members = mine[0], mine[1:]
    esize = tensor.element_size()
    nbytes = tensor.numel() * esize
    sent = recv = 0
    if rank != leader:
        common.wait(dist.isend(tensor, dst=leader, tag=0), timeout,
                    f"hierarchical leaf reduce: send to leader rank {leader}")
        common.wait(dist.irecv(tensor, src=leader, tag=1), timeout,
                    f"hierarchical leaf broadcast: receive from leader rank {leader}")
        return nbytes, nbytes
    got: list = []
    for m in members:
        _post(got, m, tensor.numel(), tensor.dtype, 0,
              f"hierarchical leaf reduce: receive from rank {m}")
    for work, buf, what in got:
        common.wait(work, timeout, what)
        tensor += buf
        recv += nbytes
    leaders = [g[0] for g in groups]
    s, rv = ring_allreduce(tensor, rank, world, timeout, group=leaders, tag_base=2)
    sent, recv = sent + s, recv + rv
    sends = [(dist.isend(tensor, dst=m, tag=1), m) for m in members]
    for work, m in sends:
        common.wait(work, timeout, f"hierarchical leaf broadcast: send to rank {m}")
        sent += nbytes
    return sent, recv


ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")


def allreduce(algorithm: str, tensor: torch.Tensor, rank: int, world: int, timeout: float,
              leaves: Sequence | None = None) -> tuple[int, int]:
    """Sum `tensor` in place with `algorithm` (one of ALGORITHMS); (bytes sent, recv).
    `leaves` (rank r's leaf at [r]) is needed by "hierarchical" only."""
    if algorithm == "hierarchical":
        if leaves is None:
            raise ValueError("algorithm hierarchical needs the leaf of every rank (leaves)")
        return hierarchical_allreduce(tensor, rank, world, timeout, leaves)
    run = {"ring": ring_allreduce, "halving-doubling": halving_doubling_allreduce,
           "tree": tree_allreduce}.get(algorithm)
    if run is None:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    return run(tensor, rank, world, timeout)


# --- gradient buckets overlapped with an emulated layer-by-layer backward -------------------

def layer_bounds(numel: int, layers: int) -> list[tuple[int, int]]:
    """[lo, hi) element ranges of the emulated layers, in forward order: the flat gradient
    cut into `layers` nearly equal parts (the first ones one element longer)."""
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    base, extra = divmod(numel, layers)
    out, lo = [], 0
    for i in range(layers):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def assign_buckets(layer_bytes: Sequence[int], cap_bytes: float) -> list[list[int]]:
    """Layers grouped into buckets as DDP does with bucket_cap_mb: in backward order (the
    last layer's gradient is ready first), each bucket closed as soon as it holds
    `cap_bytes` or more (a layer is never split, so a bucket may exceed the cap by less
    than one layer). Returns the buckets in the order they become ready, each listing its
    layers (forward indices, descending)."""
    if not cap_bytes > 0:
        raise ValueError(f"cap_bytes must be > 0, got {cap_bytes}")
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0
    for layer in reversed(range(len(layer_bytes))):
        current.append(layer)
        size += layer_bytes[layer]
        if size >= cap_bytes:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


class BucketedBackward:
    """One iteration's emulated backward with bucketed all-reduces overlapping it.

    The main thread plays the backward pass layer by layer, last layer first, sleeping
    `layer_s` per layer; a bucket is handed to the communication thread as soon as its
    last layer is done, and that thread all-reduces the buckets one after the other in
    that order (every rank has the same buckets in the same order, so their messages
    match), as DDP's reducer does. `run()` returns when the backward is over and every
    bucket is reduced; its timings say how much of the communication the backward hid.
    """

    def __init__(self, grad: torch.Tensor, layers: int, layer_s: float, cap_bytes: float,
                 reduce: Any, timeout: float) -> None:
        self.grad = grad
        self.bounds = layer_bounds(grad.numel(), layers)
        esize = grad.element_size()
        self.buckets = assign_buckets([(hi - lo) * esize for lo, hi in self.bounds],
                                      cap_bytes)
        self.layer_s = layer_s
        self.reduce = reduce  # reduce(view) -> (bytes sent, bytes received) or (None, None)
        self.timeout = timeout
        self.spans: list[tuple[float, float]] = []  # each bucket's (start, end), time.time()
        self.sent: int | None = 0
        self.recv: int | None = 0

    def _bucket_view(self, bucket: list[int]) -> torch.Tensor:
        return self.grad[self.bounds[min(bucket)][0]:self.bounds[max(bucket)][1]]

    def run(self) -> dict[str, Any]:
        ready: queue.Queue = queue.Queue()
        failed: list[BaseException] = []

        def communicate() -> None:
            try:
                while (bucket := ready.get()) is not None:
                    t0 = time.time()
                    s, r = self.reduce(self._bucket_view(bucket))
                    self.spans.append((t0, time.time()))
                    self.sent = None if s is None or self.sent is None else self.sent + s
                    self.recv = None if r is None or self.recv is None else self.recv + r
            except BaseException as exc:  # noqa: B036 - re-raised in the main thread
                failed.append(exc)

        thread = threading.Thread(target=communicate, name="bucket-allreduce", daemon=True)
        t_start = time.time()
        thread.start()
        nxt = 0
        t_backward = t_start
        for layer in reversed(range(len(self.bounds))):
            if self.layer_s > 0:
                time.sleep(self.layer_s)
            # the backward ends with its last layer, before the last bucket is handed
            # over: the thread may start that bucket before this thread runs again
            t_backward = time.time()
            # a bucket is ready once its lowest (last in backward order) layer is done
            while nxt < len(self.buckets) and min(self.buckets[nxt]) >= layer:
                ready.put(self.buckets[nxt])
                nxt += 1
        ready.put(None)
        # the comm thread's every wait has its own deadline (timeout): it always ends
        thread.join()
        if failed:
            raise failed[0]
        t_done = time.time()
        total = sum(b - a for a, b in self.spans)
        return {"sent": self.sent, "recv": self.recv,
                "backward_s": t_backward - t_start, "comm_total_s": total,
                "exposed_comm_s": t_done - t_backward, "buckets": len(self.buckets),
                "bucket_spans": [[a - t_start, b - t_start] for a, b in self.spans],
                "t_backward_end": t_backward, "t_done": t_done}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Times in seconds, sizes in bytes. Log schema: docs/run-directory.md.")
    common.add_dist_args(p)
    common.add_training_args(p)
    p.add_argument("--impl", choices=("ring", "gloo"), default="ring",
                   help="all-reduce implementation: ring (send/recv, default) or gloo "
                        "(dist.all_reduce)")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="ring",
                   help="all-reduce algorithm of --impl ring: ring (default), "
                        "halving-doubling, tree (binary, pipelined) or hierarchical "
                        "(leaf-aware; needs --leaves)")
    p.add_argument("--leaves", type=leaf_list, default=None, metavar="L0,L1,...",
                   help="the leaf of every rank, rank order (hierarchical: ranks on one "
                        "leaf reduce to their leader before the leaders' ring)")
    p.add_argument("--layer-compute-ms", type=common.non_negative_float, default=0.0,
                   metavar="MS",
                   help="emulated backward: milliseconds of compute per layer, after the "
                        "real gradient (0 with --bucket-cap-mb 0: off, as before)")
    p.add_argument("--layers", type=common.positive_int, default=8,
                   help="layers of the emulated backward: the flat gradient cut into this "
                        "many equal parts (default: 8)")
    p.add_argument("--bucket-cap-mb", type=common.non_negative_float, default=0.0, metavar="MB",
                   help="gradient buckets of about this many MB (10^6 bytes; DDP's "
                        "bucket_cap_mb), each all-reduced as soon as the emulated backward "
                        "has produced it; 0: one all-reduce after the whole backward")
    return p


def leaf_list(text: str) -> list[str]:
    """Parse 'lf1,lf2,lf1' (argparse type): one leaf label per rank."""
    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected comma-separated leaf names, got {text!r}")
    return items


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.check_rank(parser, args)
    common.check_model_size(parser, args)
    if args.world_size < 2:
        parser.error("argument --world-size: a ring needs at least 2 ranks")
    if args.impl == "gloo" and args.algorithm != "ring":
        parser.error(f"argument --algorithm: {args.algorithm} is ours; --impl gloo runs "
                     "gloo's own all_reduce (use --impl ring)")
    if args.leaves is not None and len(args.leaves) != args.world_size:
        parser.error(f"argument --leaves: {len(args.leaves)} leaves for --world-size "
                     f"{args.world_size} ranks (one per rank)")
    if args.algorithm == "hierarchical" and args.leaves is None:
        parser.error("argument --leaves: required by --algorithm hierarchical")
    return args


def run(args: argparse.Namespace, log: common.JsonLog) -> None:
    n = args.world_size
    trainer = Trainer(build_model(args.model_size, args.seed),
                      Digits(args.rank, n, args.batch_size, args.seed),
                      slowdown=common.slowdown_factor(args, args.rank))
    log.write("start", role="ring", rank=args.rank, world_size=n, mode=args.impl,
              algorithm=args.algorithm if args.impl == "ring" else None, leaves=args.leaves,
              tree_slices=tree_slices(trainer.n_params * BYTES_PER_PARAM)
              if args.algorithm == "tree" and args.impl == "ring" else None,
              tree_window=tree_window(link_mtu(args.iface))
              if args.algorithm == "tree" and args.impl == "ring" else None,
              param_count=trainer.n_params, gradient_bytes=trainer.n_params * BYTES_PER_PARAM,
              t=time.time(), **common.host_info(args.iface), slowdown=trainer.slowdown,
              options=common.options(args))
    t0 = time.time()
    common.init_gloo(args)
    log.write("ready", t=time.time(), init_s=time.time() - t0, bytes_recv=0)
    params = trainer.flat_params()

    def reduce(view: torch.Tensor) -> tuple[Any, Any]:
        if args.impl == "ring":
            return allreduce(args.algorithm, view, args.rank, n, args.timeout, args.leaves)
        gloo_allreduce(view, args.timeout)
        return None, None

    emulated = args.layer_compute_ms > 0 or args.bucket_cap_mb > 0
    cap = args.bucket_cap_mb * 1e6 if args.bucket_cap_mb > 0 else float("inf")
    if emulated:
        grad_bytes = trainer.n_params * BYTES_PER_PARAM
        bounds = layer_bounds(trainer.n_params, args.layers)
        plan = assign_buckets([(hi - lo) * BYTES_PER_PARAM for lo, hi in bounds], cap)
        log.write("buckets", t=time.time(), layers=args.layers, gradient_bytes=grad_bytes,
                  layer_compute_s=args.layer_compute_ms / 1e3, cap_bytes=args.bucket_cap_mb
                  * 1e6 or None, bucket_layers=plan,
                  bucket_bytes=[sum((bounds[i][1] - bounds[i][0]) * BYTES_PER_PARAM
                                    for i in b) for b in plan])
    for iteration in range(args.iterations):
        t_start = time.time()
        grad, loss, compute_s, slow_s = trainer.gradient(params)
        t_comm = time.time()
        overlap: dict[str, Any] = {}
        if emulated:
            overlap = BucketedBackward(grad, args.layers, args.layer_compute_ms / 1e3, cap,
                                       reduce, args.timeout).run()
            sent, recv = overlap.pop("sent"), overlap.pop("recv")
            compute_s += overlap["backward_s"]
            t_comm = overlap.pop("t_backward_end")
            t_reduced = overlap.pop("t_done")
        else:
            sent, recv = reduce(grad)
            t_reduced = time.time()
        params -= args.lr * (grad / n)
        t_end = time.time()
        log.write("iteration", iteration=iteration, t_start=t_start, t_end=t_end,
                  compute_s=compute_s, slowdown_s=slow_s, comm_s=t_reduced - t_comm,
                  wait_s=None, allreduce_s=t_reduced - t_comm, bytes_sent=sent, bytes_recv=recv,
                  model_version=iteration, staleness=0, loss=loss, **overlap)
    common.finish_gloo(args.timeout)
    accuracy, test_loss = trainer.evaluate(params)
    log.write("final", t=time.time(), accuracy=accuracy, loss=test_loss,
              iterations=args.iterations, params_sha256=params_digest(params))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = common.JsonLog(args.out, args.rank)
    return common.run_main(PROG, log, args.rank, lambda: run(args, log))


if __name__ == "__main__":
    sys.exit(main())
