"""All-to-all exchanges with uneven split sizes: gloo's, and a pairwise schedule of ours.

``alltoall(algorithm, out, inp, out_splits, in_splits, rank, world, timeout)``:

- ``gloo``: ``dist.all_to_all_single`` with the split sizes. Gloo posts every send and
  receive at once, so each host link carries N-1 flows at a time, sharing its switch
  queue; the exchange ends with its slowest flow.
- ``pairwise``: N-1 steps; in step i rank r sends its block for rank (r+i) mod N and
  receives rank (r-i) mod N's block for it (the receive posted first: gloo's send waits
  for its receiver's post). Every host link carries one flow each way per step, so no
  host's port takes two flows of the exchange at once (the leaf–spine links may, as the
  fabric's routing places them); a step ends with its largest block.
  This is the pairwise-exchange algorithm MPI libraries use for large messages.

Both move the same bytes and give bit-identical results (each block is copied, never
added). Split sizes count rows (dim 0), as ``all_to_all_single``'s do.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from . import common

ALGORITHMS = ("gloo", "pairwise")


def _offsets(splits: Sequence[int]) -> list[int]:
    offs = [0]
    for n in splits:
        offs.append(offs[-1] + int(n))
    return offs


def pairwise_steps(rank: int, world: int) -> list[tuple[int, int]]:
    """(send to, receive from) of each of the N-1 steps of rank ``rank``."""
    return [((rank + i) % world, (rank - i) % world) for i in range(1, world)]


def pairwise(out: torch.Tensor, inp: torch.Tensor, out_splits: Sequence[int],
             in_splits: Sequence[int], rank: int, world: int, timeout: float,
             what: str = "all-to-all") -> None:
    """The pairwise exchange (module docstring): ``out``'s block from rank s is at
    sum(out_splits[:s]), as ``all_to_all_single`` lays it out.

    A rank starts step i+1 when both of its step-i transfers are done, and posts step
    i+1's receive only then: measured on the fabric (benchmarks/allreduce_efficiency.py,
    N = 4, M = 4 MiB, 50 Mbit/s) this ran at 1.16-1.19 x the bound, against 1.28 with
    every receive posted at the start and 1.50 with the receives in a thread of their
    own. A send is done once the kernel has the block, so a rank freed that early starts
    its next block while the last is still on the wire, and its receiver takes two
    flows at once: the sharing gloo's all_to_all_single has (1.43-1.54)."""
    send_at, recv_at = _offsets(in_splits), _offsets(out_splits)
    out[recv_at[rank]:recv_at[rank + 1]].copy_(inp[send_at[rank]:send_at[rank + 1]])
    for step, (dst, src) in enumerate(pairwise_steps(rank, world), start=1):
        recv = send = None
        if out_splits[src]:
            recv = dist.irecv(out[recv_at[src]:recv_at[src + 1]], src=src, tag=step)
        if in_splits[dst]:
            send = dist.isend(inp[send_at[dst]:send_at[dst + 1]].contiguous(), dst=dst,
                              tag=step)
        if recv is not None:
            common.wait(recv, timeout, f"{what} step {step}/{world - 1}: receive from rank "
                                       f"{src}")
        if send is not None:
            common.wait(send, timeout, f"{what} step {step}/{world - 1}: send to rank {dst}")


def alltoall(algorithm: str, out: torch.Tensor, inp: torch.Tensor,
             out_splits: Sequence[int], in_splits: Sequence[int], rank: int, world: int,
             timeout: float, what: str = "all-to-all") -> None:
    """One all-to-all by ``algorithm`` (ALGORITHMS)."""
    if algorithm == "gloo":
        work = dist.all_to_all_single(out, inp, output_split_sizes=list(out_splits),
                                      input_split_sizes=list(in_splits), async_op=True)
        common.wait(work, timeout, what)
    elif algorithm == "pairwise":
        pairwise(out, inp, out_splits, in_splits, rank, world, timeout, what)
    else:
        raise ValueError(f"all-to-all algorithm {algorithm!r}: one of {', '.join(ALGORITHMS)}")
