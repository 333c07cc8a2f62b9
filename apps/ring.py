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
chunks round the ring. Each rank sends exactly 2 (N-1)/N x M bytes when N divides the
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


def ring_allreduce(tensor: torch.Tensor, rank: int, world: int, timeout: float
                   ) -> tuple[int, int]:
    """Sum `tensor` (1-D, contiguous) in place across the ring; return (bytes sent, recv).

    Uses the default process group; every send/receive waits at most `timeout` seconds.
    """
    if world == 1:
        return 0, 0
    chunks = list(torch.tensor_split(tensor, world))
    right, left = (rank + 1) % world, (rank - 1) % world
    scratch = torch.empty(max(c.numel() for c in chunks), dtype=tensor.dtype)
    sent = recv = 0
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(world - 1):
            if phase == "reduce-scatter":
                out_idx, in_idx = (rank - step) % world, (rank - step - 1) % world
                target = scratch[:chunks[in_idx].numel()]
            else:
                out_idx, in_idx = (rank - step + 1) % world, (rank - step) % world
                target = chunks[in_idx]
            send = dist.isend(chunks[out_idx], dst=right)
            receive = dist.irecv(target, src=left)
            what = f"ring {phase} step {step + 1}/{world - 1}"
            common.wait(send, timeout, f"{what}: send to rank {right}")
            common.wait(receive, timeout, f"{what}: receive from rank {left}")
            if phase == "reduce-scatter":
                chunks[in_idx] += target
            sent += chunks[out_idx].numel() * tensor.element_size()
            recv += chunks[in_idx].numel() * tensor.element_size()
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
