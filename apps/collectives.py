"""The all-reduce algorithms of the ring job, on gloo send/recv: the pipelined ring (NCCL,
Horovod), recursive halving-doubling, a pipelined binary tree and the leaf-aware
hierarchical one; `ALGORITHMS` names them (the spec's `workload.algorithm`, the app's
`--algorithm` and the bounds in incastlab/jobs/ring_bound.py all read this tuple).

Each sums `tensor` (1-D, contiguous) in place over the default process group and returns
(bytes sent, bytes received) of this rank, exactly. Each element's sum is formed once, on
one rank, in an order fixed by the schedule, and copied from there, so every rank ends
bit-identical (and equal to gloo's all_reduce wherever float addition is exact).
Receives are posted before the sends they answer: gloo's send waits until its receiver
has posted (a NOTIFY_RECV_READY message), so a late receive costs a round trip per
message.

torch is imported by the point-to-point helpers (apps/p2p.py) when they are called, not
at the top: the orchestrator reads `ALGORITHMS` without loading torch. The tree lives in
apps/tree_allreduce.py.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import common, p2p
from .tree_allreduce import (  # noqa: F401 - the tree is one of the algorithms here
    TREE_SLICES, TREE_WINDOW, TREE_WINDOW_JUMBO, default_tree_window, link_mtu,
    tree_allreduce, tree_height, tree_slices, tree_window)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")

# Each ring chunk is cut into up to this many slices, each at least MIN_SLICE_BYTES long.
DEFAULT_SLICES = 8


# --- the ring ---------------------------------------------------------------------------

def ring_allreduce(tensor: torch.Tensor, rank: int, world: int, timeout: float,
                   slices: int = DEFAULT_SLICES, group: Sequence[int] | None = None,
                   tag_base: int = 0) -> tuple[int, int]:
    """Sum `tensor` (1-D, contiguous) in place across the ring; return (bytes sent, recv).

    Uses the default process group; every send/receive waits at most `timeout` seconds.
    `group` (global ranks in ring order, `rank` among them) runs the ring over those ranks
    only (the hierarchical all-reduce's leaf leaders); default: all `world` ranks. Tags
    are `tag_base` + item, so rings of different phases never match each other's messages.

    Pipelined, as NCCL does it: every chunk is cut into `slices` slices (fewer if that
    would make them shorter than p2p.MIN_SLICE_BYTES) and each slice travels on its own, so
    slice j of step s+1 leaves as soon as slice j of step s has arrived (and been added),
    not when the whole step is over on both sides. Receives are posted two steps ahead.
    Why: gloo's send waits until the receiver has posted its receive, so a lockstep ring
    (one isend + irecv per step, wait both) pays a round trip of that notice at every
    step boundary, through the same queues as the data, and each step waits for the
    slowest of the N flows (in the fabric: 1.53 x the bound lockstep, 1.13 x pipelined).
    Bytes and summation order are those of the lockstep ring: every rank sends exactly
    the same 2 (N-1) chunks and each element's sum is formed in ring order, once, then
    copied, so every rank ends with bit-identical results.
    """
    members = list(group) if group is not None else list(range(world))
    me = members.index(rank)
    if len(members) == 1:
        return 0, 0
    if slices < 1:
        raise ValueError(f"slices must be >= 1, got {slices}")
    return _Ring(tensor, members, me, timeout, slices, tag_base).run()


class _Ring:
    """One pipelined ring all-reduce (`ring_allreduce`): item i = step s, slice j with
    i = s * per + j; step s (either phase) sends chunk (me - s) and receives chunk
    (me - s - 1); world-1 reduce-scatter steps, then world-1 all-gather steps."""

    def __init__(self, tensor, members: list[int], me: int, timeout: float, slices: int,
                 tag_base: int) -> None:
        self.world, self.me, self.timeout, self.tag_base = len(members), me, timeout, tag_base
        self.esize = tensor.element_size()
        chunks = p2p.split(tensor, self.world)
        smallest = min(c.numel() for c in chunks) * self.esize
        self.per = max(1, min(slices, smallest // p2p.MIN_SLICE_BYTES))
        self.parts = [p2p.split(c, self.per) for c in chunks]
        self.right = members[(me + 1) % self.world]
        self.left = members[(me - 1) % self.world]
        self.total = 2 * (self.world - 1) * self.per
        self.window = 2 * self.per  # receives posted ahead
        biggest = max(p.numel() for c in self.parts for p in c)
        self.scratch = [p2p.empty(biggest, tensor.dtype) for _ in range(self.window)]
        self.sending: dict[tuple[int, int], int] = {}  # (chunk, slice) -> item of its send
        self.sends: dict[int, tuple[Any, str]] = {}  # item -> its send, until waited for
        self.receives: dict[int, tuple[Any, Any, str]] = {}
        self.sent = self.recv = 0

    def describe(self, s: int, j: int) -> str:
        w = self.world
        phase, k = ("reduce-scatter", s) if s < w - 1 else ("all-gather", s - w + 1)
        return f"ring {phase} step {k + 1}/{w - 1} slice {j + 1}/{self.per}"

    def post_recv(self, i: int) -> None:
        s, j = divmod(i, self.per)
        c = (self.me - s - 1) % self.world
        if s < self.world - 1:  # reduce-scatter: into scratch, added below
            target = self.scratch[i % self.window][:self.parts[c][j].numel()]
        else:  # all-gather: the final values, straight into place
            target = self.parts[c][j]
            if (c, j) in self.sending:  # sent during reduce-scatter: that send must be done
                send = self.sends.pop(self.sending.pop((c, j)), None)
                if send is not None:
                    common.wait(send[0], self.timeout, send[1])
        what = f"{self.describe(s, j)}: receive from rank {self.left}"
        self.receives[i] = (p2p.irecv(target, self.left, self.tag_base + i), target, what)

    def post_send(self, i: int) -> None:
        s, j = divmod(i, self.per)
        c = (self.me - s) % self.world
        what = f"{self.describe(s, j)}: send to rank {self.right}"
        work = p2p.isend(self.parts[c][j], self.right, self.tag_base + i)
        self.sending[(c, j)] = i
        self.sends[i] = (work, what)
        self.sent += self.parts[c][j].numel() * self.esize

    def run(self) -> tuple[int, int]:
        per, total, window = self.per, self.total, self.window
        for i in range(min(window, total)):
            self.post_recv(i)
        for i in range(per):  # step 0 sends local data: all of it at once
            self.post_send(i)
        for i in range(total):
            work, target, what = self.receives.pop(i)
            common.wait(work, self.timeout, what)
            s, j = divmod(i, per)
            if s < self.world - 1:
                self.parts[(self.me - s - 1) % self.world][j] += target
            self.recv += target.numel() * self.esize
            if i + window < total:
                self.post_recv(i + window)
            if i + per < total:
                self.post_send(i + per)  # slice j of the next step: the part just received
        for work, what in self.sends.values():
            common.wait(work, self.timeout, what)
        return self.sent, self.recv


# --- recursive halving-doubling ---------------------------------------------------------

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
        common.wait(p2p.isend(tensor, rank + 1, 0), timeout,
                    f"halving-doubling fold: send to rank {rank + 1}")
        common.wait(p2p.irecv(tensor, rank + 1, unfold_tag), timeout,
                    f"halving-doubling unfold: receive from rank {rank + 1}")
        return tensor.numel() * esize, tensor.numel() * esize
    offs = [0]
    for n in (b.numel() for b in p2p.split(tensor, p)):
        offs.append(offs[-1] + n)
    plan = _butterfly_plan(rank // 2 if rank < 2 * r else rank - r, p, r)

    def span(blocks: tuple[int, int]) -> torch.Tensor:
        return tensor[offs[blocks[0]]:offs[blocks[1]]]

    sent = recv = 0
    fold: list = []
    if rank < 2 * r:
        p2p.post_recv(fold, rank - 1, tensor.numel(), dtype, 0,
              f"halving-doubling fold: receive from rank {rank - 1}")
    rs, ag = _post_butterfly(plan, offs, dtype, steps)
    if fold:
        work, buf, what = fold[0]
        common.wait(work, timeout, what)
        tensor += buf
        recv += buf.numel() * esize
    for s, (partner, keep, give) in enumerate(plan):  # reduce-scatter: add what is kept
        s_, r_ = _exchange(span(give), span(keep), partner, 1 + s, rs[s], timeout,
                           f"halving-doubling reduce-scatter step {s + 1}/{steps}", add=True)
        sent, recv = sent + s_, recv + r_
    for s in reversed(range(steps)):  # all-gather: copy in what was given up
        partner, keep, give = plan[s]
        s_, r_ = _exchange(span(keep), span(give), partner, 1 + steps + s, ag[s], timeout,
                           f"halving-doubling all-gather step {steps - s}/{steps}", add=False)
        sent, recv = sent + s_, recv + r_
    if rank < 2 * r:
        common.wait(p2p.isend(tensor, rank - 1, unfold_tag), timeout,
                    f"halving-doubling unfold: send to rank {rank - 1}")
        sent += tensor.numel() * esize
    return sent, recv


def _butterfly_plan(v: int, p: int, r: int) -> list[tuple[int, tuple, tuple]]:
    """(partner's global rank, kept blocks, given blocks) of virtual rank `v`, one per
    halving step of a butterfly over `p` ranks (`r` ranks folded before it)."""

    def real(u: int) -> int:  # global rank of virtual rank u
        return 2 * u + 1 if u < r else u + r

    plan = []
    lo, hi, mask = 0, p, p // 2
    while mask:
        mid = (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if v & mask else ((lo, mid), (mid, hi))
        plan.append((real(v ^ mask), keep, give))
        lo, hi = keep
        mask //= 2
    return plan


def _post_butterfly(plan, offs: list[int], dtype, steps: int) -> tuple[list, list]:
    """Every receive of the butterfly, posted up front, step by step: the reduce-scatter
    one (the kept half) and the all-gather one (the given-up half) of each step."""
    rs: list = []
    ag: list = []
    for s, (partner, keep, give) in enumerate(plan):
        p2p.post_recv(rs, partner, offs[keep[1]] - offs[keep[0]], dtype, 1 + s,
              f"halving-doubling reduce-scatter step {s + 1}/{steps}: receive from rank "
              f"{partner}")
        p2p.post_recv(ag, partner, offs[give[1]] - offs[give[0]], dtype, 1 + steps + s,
              f"halving-doubling all-gather step {steps - s}/{steps}: receive from rank "
              f"{partner}")
    return rs, ag


def _exchange(out, into, partner: int, tag: int, posted, timeout: float, step: str,
              add: bool) -> tuple[int, int]:
    """One butterfly step: send `out` to `partner`, wait for the `posted` receive and add
    it to (or copy it into) `into`, wait for the send; (bytes sent, received)."""
    send = p2p.isend(out, partner, tag)
    work, buf, what = posted
    common.wait(work, timeout, what)
    if add:
        into.add_(buf)
    else:
        into.copy_(buf)
    common.wait(send, timeout, f"{step}: send to rank {partner}")
    return out.numel() * out.element_size(), buf.numel() * buf.element_size()


# --- leaf-aware hierarchical ------------------------------------------------------------

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
        common.wait(p2p.isend(tensor, leader, 0), timeout,
                    f"hierarchical leaf reduce: send to leader rank {leader}")
        common.wait(p2p.irecv(tensor, leader, 1), timeout,
                    f"hierarchical leaf broadcast: receive from leader rank {leader}")
        return nbytes, nbytes
    got: list = []
    for m in members:
        p2p.post_recv(got, m, tensor.numel(), tensor.dtype, 0,
              f"hierarchical leaf reduce: receive from rank {m}")
    for work, buf, what in got:
        common.wait(work, timeout, what)
        tensor += buf
        recv += nbytes
    leaders = [g[0] for g in groups]
    s, rv = ring_allreduce(tensor, rank, world, timeout, group=leaders, tag_base=2)
    sent, recv = sent + s, recv + rv
    sends = [(p2p.isend(tensor, m, 1), m) for m in members]
    for work, m in sends:
        common.wait(work, timeout, f"hierarchical leaf broadcast: send to rank {m}")
        sent += nbytes
    return sent, recv


def gloo_allreduce(tensor: torch.Tensor, timeout: float) -> None:
    """Sum `tensor` in place with gloo's own all_reduce (`--impl gloo`, not one of
    ALGORITHMS: gloo picks its own), waiting at most `timeout` s."""
    import torch.distributed as dist

    work = dist.all_reduce(tensor, async_op=True)
    common.wait(work, timeout, "gloo all_reduce")


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
