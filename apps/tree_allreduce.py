"""The pipelined binary-tree all-reduce (rank 0 the root, parent of r at (r-1)//2):
slices reduce up the tree and are broadcast down it at once, under a credit window that
keeps the child nearer a parent from taking the parent's link."""
from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from . import common, p2p

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

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
    p2p.MIN_SLICE_BYTES (one slice for a small gradient)."""
    return max(1, min(slices, nbytes // p2p.MIN_SLICE_BYTES))


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
        self.parts = p2p.split(tensor, self.per)
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
                p2p.post_recv(self.up[c], c, self.parts[j].numel(), self.dtype, j,
                      f"tree reduce slice {j + 1}/{self.per}: receive from rank {c}")

    def post_down(self) -> None:  # every slice of the parent's broadcast, up front
        if self.parent is not None:
            for j, part in enumerate(self.parts):
                p2p.post_recv(self.down, self.parent, part.numel(), self.dtype, self.per + j,
                      f"tree broadcast slice {j + 1}/{self.per}: receive from rank "
                      f"{self.parent}")

    def send_down(self, j: int) -> None:
        for c in self.children:
            self.sends_down.append((p2p.isend(self.parts[j], c, self.per + j),
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
                self.handed.put((p2p.isend(self.parts[j], self.parent, j), what))
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
