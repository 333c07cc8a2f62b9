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

torch is imported by the few helpers that call it (`_empty`, `_split`, `_isend`,
`_irecv`), not at the top: the orchestrator reads `ALGORITHMS` without loading torch.
"""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import common

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")

# Each ring chunk is cut into up to this many slices, each at least MIN_SLICE_BYTES long.
DEFAULT_SLICES = 8
MIN_SLICE_BYTES = 16 * 1024
# A tree pipelines its gradient in up to this many slices (each >= MIN_SLICE_BYTES): the
# last slice must still climb to the root and come back down, a slice at a time, after
# the busiest link's other bytes are through, so smaller slices shorten that tail.
TREE_SLICES = 64
# The tree's credit window in slices (a parent posts its receive of a child's slice
# j + window only once slice j came from every child), so that the child nearer the
# parent cannot take the parent's link. Smaller with jumbo frames, whose slices are few
# packets and whose windows overflowed the 100-packet queues. How these were measured:
# docs/decisions/002-tree-window.md.
TREE_WINDOW = 4
TREE_WINDOW_JUMBO = 2
STANDARD_MTU = 1500


# --- the torch calls (imported on first use) ------------------------------------------

def _empty(numel: int, dtype) -> torch.Tensor:
    import torch

    return torch.empty(numel, dtype=dtype)


def _split(tensor: torch.Tensor, parts: int) -> list[torch.Tensor]:
    import torch

    return list(torch.tensor_split(tensor, parts))


def _isend(tensor: torch.Tensor, dst: int, tag: int) -> Any:
    import torch.distributed as dist

    return dist.isend(tensor, dst=dst, tag=tag)


def _irecv(tensor: torch.Tensor, src: int, tag: int) -> Any:
    import torch.distributed as dist

    return dist.irecv(tensor, src=src, tag=tag)


def _post(recvs: list, src: int, numel: int, dtype, tag: int, what: str) -> None:
    buf = _empty(numel, dtype)
    recvs.append((_irecv(buf, src, tag), buf, what))


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
    would make them shorter than MIN_SLICE_BYTES) and each slice travels on its own, so
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
        chunks = _split(tensor, self.world)
        smallest = min(c.numel() for c in chunks) * self.esize
        self.per = max(1, min(slices, smallest // MIN_SLICE_BYTES))
        self.parts = [_split(c, self.per) for c in chunks]
        self.right = members[(me + 1) % self.world]
        self.left = members[(me - 1) % self.world]
        self.total = 2 * (self.world - 1) * self.per
        self.window = 2 * self.per  # receives posted ahead
        biggest = max(p.numel() for c in self.parts for p in c)
        self.scratch = [_empty(biggest, tensor.dtype) for _ in range(self.window)]
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
        self.receives[i] = (_irecv(target, self.left, self.tag_base + i), target, what)

    def post_send(self, i: int) -> None:
        s, j = divmod(i, self.per)
        c = (self.me - s) % self.world
        what = f"{self.describe(s, j)}: send to rank {self.right}"
        work = _isend(self.parts[c][j], self.right, self.tag_base + i)
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
        common.wait(_isend(tensor, rank + 1, 0), timeout,
                    f"halving-doubling fold: send to rank {rank + 1}")
        common.wait(_irecv(tensor, rank + 1, unfold_tag), timeout,
                    f"halving-doubling unfold: receive from rank {rank + 1}")
        return tensor.numel() * esize, tensor.numel() * esize
    offs = [0]
    for n in (b.numel() for b in _split(tensor, p)):
        offs.append(offs[-1] + n)
    plan = _butterfly_plan(rank // 2 if rank < 2 * r else rank - r, p, r)

    def span(blocks: tuple[int, int]) -> torch.Tensor:
        return tensor[offs[blocks[0]]:offs[blocks[1]]]

    sent = recv = 0
    fold: list = []
    if rank < 2 * r:
        _post(fold, rank - 1, tensor.numel(), dtype, 0,
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
        common.wait(_isend(tensor, rank - 1, unfold_tag), timeout,
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
        _post(rs, partner, offs[keep[1]] - offs[keep[0]], dtype, 1 + s,
              f"halving-doubling reduce-scatter step {s + 1}/{steps}: receive from rank "
              f"{partner}")
        _post(ag, partner, offs[give[1]] - offs[give[0]], dtype, 1 + steps + s,
              f"halving-doubling all-gather step {steps - s}/{steps}: receive from rank "
              f"{partner}")
    return rs, ag


def _exchange(out, into, partner: int, tag: int, posted, timeout: float, step: str,
              add: bool) -> tuple[int, int]:
    """One butterfly step: send `out` to `partner`, wait for the `posted` receive and add
    it to (or copy it into) `into`, wait for the send; (bytes sent, received)."""
    send = _isend(out, partner, tag)
    work, buf, what = posted
    common.wait(work, timeout, what)
    if add:
        into.add_(buf)
    else:
        into.copy_(buf)
    common.wait(send, timeout, f"{step}: send to rank {partner}")
    return out.numel() * out.element_size(), buf.numel() * buf.element_size()


# --- the binary tree --------------------------------------------------------------------

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
    send up is done, sends it down). Interleaving the two in one thread chained every
    rank's wait for its parent to its wait for its children (1.9-2.4 x the bound at N =
    8; docs/decisions/002-tree-window.md).
    Bytes: a rank with c children sends M up (not the root) and c x M down, and receives
    c x M from its children and M from its parent (not the root).
    """
    if window is None:
        window = default_tree_window()
    if window < 1:  # no credit at all: no child could ever send
        raise ValueError(f"tree window: {window} slices; at least 1")
    if world == 1:
        return 0, 0
    return _Tree(tensor, rank, world, timeout, slices, window).run()


class _Tree:
    """One pipelined tree all-reduce (`tree_allreduce`): the reducing side runs in the
    calling thread, the broadcasting side (not on the root) in a helper thread."""

    def __init__(self, tensor, rank: int, world: int, timeout: float, slices: int,
                 window: int) -> None:
        self.timeout, self.window = timeout, window
        self.esize, self.dtype = tensor.element_size(), tensor.dtype
        self.per = tree_slices(tensor.numel() * self.esize, slices)
        self.parts = _split(tensor, self.per)
        self.parent = (rank - 1) // 2 if rank else None
        self.children = [c for c in (2 * rank + 1, 2 * rank + 2) if c < world]
        self.up: dict[int, list] = {c: [] for c in self.children}
        self.down: list = []
        self.sends_down: list = []  # appended by the broadcasting thread only
        self.counts = {"up_sent": 0, "up_recv": 0, "down_sent": 0, "down_recv": 0}
        # slice j's send up, handed from the reducing thread to the broadcasting one,
        # which must not overwrite parts[j] before it is done; None: the reducer failed
        self.handed: queue.Queue = queue.Queue()
        self.failed: list[BaseException] = []

    def post_up(self, j: int) -> None:  # the receive of slice j from every child
        if j < self.per:
            for c in self.children:
                _post(self.up[c], c, self.parts[j].numel(), self.dtype, j,
                      f"tree reduce slice {j + 1}/{self.per}: receive from rank {c}")

    def post_down(self) -> None:  # every slice of the parent's broadcast, up front
        if self.parent is not None:
            for j, part in enumerate(self.parts):
                _post(self.down, self.parent, part.numel(), self.dtype, self.per + j,
                      f"tree broadcast slice {j + 1}/{self.per}: receive from rank "
                      f"{self.parent}")

    def send_down(self, j: int) -> None:
        for c in self.children:
            self.sends_down.append((_isend(self.parts[j], c, self.per + j),
                                    f"tree broadcast slice {j + 1}/{self.per}: send to "
                                    f"rank {c}"))
            self.counts["down_sent"] += self.parts[j].numel() * self.esize

    def broadcast(self) -> None:
        try:
            for j in range(self.per):
                item = self.handed.get()  # the reducing thread hands every slice or None
                if item is None:
                    return
                work, what = item
                common.wait(work, self.timeout, what)
                work, buf, what = self.down[j]
                common.wait(work, self.timeout, what)
                self.parts[j].copy_(buf)
                self.counts["down_recv"] += buf.numel() * self.esize
                self.send_down(j)
        except BaseException as exc:  # noqa: B036 - re-raised in the calling thread
            self.failed.append(exc)

    def reduce(self) -> None:
        for j in range(self.per):
            for c in self.children:
                work, buf, what = self.up[c][j]
                common.wait(work, self.timeout, what)
                self.parts[j] += buf
                self.counts["up_recv"] += buf.numel() * self.esize
                self.up[c][j] = None  # its buffer is added in: free it
            self.post_up(j + self.window)  # credit: every child may send one slice more
            if self.parent is None:  # the root: slice j is final
                self.send_down(j)
            else:
                what = f"tree reduce slice {j + 1}/{self.per}: send to rank {self.parent}"
                self.handed.put((_isend(self.parts[j], self.parent, j), what))
                self.counts["up_sent"] += self.parts[j].numel() * self.esize

    def run(self) -> tuple[int, int]:
        for j in range(min(self.window, self.per)):
            self.post_up(j)
        self.post_down()
        helper = None
        if self.parent is not None:
            helper = threading.Thread(target=self.broadcast, name="tree-broadcast",
                                      daemon=True)
            helper.start()
        try:
            self.reduce()
        except BaseException:
            self.handed.put(None)  # the helper stops at its next slice (a daemon: not joined)
            raise
        if helper is not None:
            helper.join()  # every wait of the helper has its own deadline: it ends
        if self.failed:
            raise self.failed[0]
        for work, what in self.sends_down:
            common.wait(work, self.timeout, what)
        c = self.counts
        return (c["up_sent"] + c["down_sent"], c["up_recv"] + c["down_recv"])


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
        common.wait(_isend(tensor, leader, 0), timeout,
                    f"hierarchical leaf reduce: send to leader rank {leader}")
        common.wait(_irecv(tensor, leader, 1), timeout,
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
    sends = [(_isend(tensor, m, 1), m) for m in members]
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
