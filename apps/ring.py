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
import sys
import time
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
                   slices: int = DEFAULT_SLICES) -> tuple[int, int]:
    """Sum `tensor` (1-D, contiguous) in place across the ring; return (bytes sent, recv).

    Uses the default process group; every send/receive waits at most `timeout` seconds.

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
    if world == 1:
        return 0, 0
    if slices < 1:
        raise ValueError(f"slices must be >= 1, got {slices}")
    esize = tensor.element_size()
    chunks = list(torch.tensor_split(tensor, world))
    smallest = min(c.numel() for c in chunks) * esize
    per = max(1, min(slices, smallest // MIN_SLICE_BYTES))
    parts = [list(torch.tensor_split(c, per)) for c in chunks]
    right, left = (rank + 1) % world, (rank - 1) % world
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
        receives[i] = (dist.irecv(target, src=left, tag=i), target, what)

    def post_send(i: int) -> None:
        nonlocal sent
        s, j = divmod(i, per)
        c = (rank - s) % world
        what = f"{describe(s, j)}: send to rank {right}"
        work = dist.isend(parts[c][j], dst=right, tag=i)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Times in seconds, sizes in bytes. Log schema: docs/run-directory.md.")
    common.add_dist_args(p)
    common.add_training_args(p)
    p.add_argument("--impl", choices=("ring", "gloo"), default="ring",
                   help="all-reduce implementation: ring (send/recv, default) or gloo "
                        "(dist.all_reduce)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.check_rank(parser, args)
    common.check_model_size(parser, args)
    if args.world_size < 2:
        parser.error("argument --world-size: a ring needs at least 2 ranks")
    return args


def run(args: argparse.Namespace, log: common.JsonLog) -> None:
    n = args.world_size
    trainer = Trainer(build_model(args.model_size, args.seed),
                      Digits(args.rank, n, args.batch_size, args.seed),
                      slowdown=common.slowdown_factor(args, args.rank))
    log.write("start", role="ring", rank=args.rank, world_size=n, mode=args.impl,
              param_count=trainer.n_params, gradient_bytes=trainer.n_params * BYTES_PER_PARAM,
              t=time.time(), **common.host_info(args.iface), slowdown=trainer.slowdown,
              options=common.options(args))
    t0 = time.time()
    common.init_gloo(args)
    log.write("ready", t=time.time(), init_s=time.time() - t0, bytes_recv=0)
    params = trainer.flat_params()
    for iteration in range(args.iterations):
        t_start = time.time()
        grad, loss, compute_s, slow_s = trainer.gradient(params)
        t_comm = time.time()
        sent: Any = None
        recv: Any = None
        if args.impl == "ring":
            sent, recv = ring_allreduce(grad, args.rank, n, args.timeout)
        else:
            gloo_allreduce(grad, args.timeout)
        t_reduced = time.time()
        params -= args.lr * (grad / n)
        t_end = time.time()
        log.write("iteration", iteration=iteration, t_start=t_start, t_end=t_end,
                  compute_s=compute_s, slowdown_s=slow_s, comm_s=t_reduced - t_comm,
                  wait_s=None, allreduce_s=t_reduced - t_comm, bytes_sent=sent, bytes_recv=recv,
                  model_version=iteration, staleness=0, loss=loss)
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
