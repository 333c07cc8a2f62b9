"""The worker of apps/ps.py: compute a gradient, push it to every shard still running,
pull the new parameters back; until every shard said stop.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

import torch
import torch.distributed as dist

from . import common
from .model import BYTES_PER_PARAM, Digits, Trainer, build_model, params_digest
from .ps_common import PULL_TRAILER, finish, log_start, shard_bounds

__all__ = ["ShardLink", "run_worker"]


class ShardLink:
    """A worker's view of one server shard: its slice, version and whether it stopped."""

    def __init__(self, rank: int, lo: int, hi: int) -> None:
        self.rank, self.lo, self.hi = rank, lo, hi
        self.params = torch.empty(0)
        self.version = 0
        self.stopped = False
        self._posted: tuple[Any, torch.Tensor] | None = None

    def post_pull(self) -> None:
        buf = torch.empty(self.hi - self.lo + PULL_TRAILER)
        self._posted = (dist.irecv(buf, src=self.rank), buf)

    def push(self, grad: torch.Tensor, iteration: int) -> tuple[Any, torch.Tensor]:
        msg = torch.cat([grad[self.lo:self.hi],
                         torch.tensor([self.version, iteration], dtype=torch.float32)])
        return dist.isend(msg, dst=self.rank), msg

    def finish_pull(self, timeout: float) -> dict[str, Any]:
        assert self._posted is not None
        work, buf = self._posted
        self._posted = None
        common.wait(work, timeout, f"receive parameters from server rank {self.rank}")
        version, stale, hold, stop, accepted = buf[-PULL_TRAILER:].tolist()
        self.params = buf[:-PULL_TRAILER]
        self.version, self.stopped = int(version), stop > 0
        return {"staleness": int(stale), "hold": hold, "accepted": accepted > 0,
                "bytes": buf.numel() * BYTES_PER_PARAM}


def run_worker(args: argparse.Namespace, log: common.JsonLog) -> None:
    """Compute, push to every shard still running, pull from them; until all stopped.

    A shard that has answered with the stop flag gets no more traffic from this worker
    (its slice is final), so each server knows when every worker is done with it.
    """
    workers = args.world_size - args.shards
    index = args.rank - args.shards
    trainer = Trainer(build_model(args.model_size, args.seed),
                      Digits(index, workers, args.batch_size, args.seed),
                      slowdown=common.slowdown_factor(args, args.rank),
                      compute_floor_s=args.compute_ms / 1000)
    shards = [ShardLink(k, lo, hi)
              for k, (lo, hi) in enumerate(shard_bounds(trainer.n_params, args.shards))]
    log_start(args, log, trainer.n_params, "worker", worker_index=index,
              slowdown=trainer.slowdown, compute_ms=args.compute_ms)
    t0 = time.time()
    common.init_gloo(args)
    for shard in shards:
        shard.post_pull()
    got = [shard.finish_pull(args.timeout) for shard in shards]
    log.write("ready", t=time.time(), init_s=time.time() - t0,
              bytes_recv=sum(g["bytes"] for g in got))
    iteration = 0
    while not all(shard.stopped for shard in shards):
        active = [shard for shard in shards if not shard.stopped]
        versions = [shard.version for shard in shards]
        t_start = time.time()
        params = torch.cat([shard.params for shard in shards])
        grad, loss, compute_s, slow_s = trainer.gradient(params)
        for shard in active:
            shard.post_pull()
        t_push = time.time()
        sends = [(shard, *shard.push(grad, iteration)) for shard in active]
        for shard, work, _msg in sends:
            common.wait(work, args.timeout, f"send gradient to server rank {shard.rank}")
        t_pushed = time.time()
        got = [shard.finish_pull(args.timeout) for shard in active]
        t_end = time.time()
        log.write("iteration", iteration=iteration, t_start=t_start, t_end=t_end,
                  compute_s=compute_s, slowdown_s=slow_s, emulated_s=trainer.emulated_s,
                  t_push=t_push, comm_s=t_end - t_push,
                  wait_s=max(g["hold"] for g in got), push_s=t_pushed - t_push,
                  pull_s=t_end - t_pushed,
                  bytes_sent=sum(msg.numel() for _, _, msg in sends) * BYTES_PER_PARAM,
                  bytes_recv=sum(g["bytes"] for g in got),
                  model_version=min(versions), shard_versions=versions,
                  new_version=min(shard.version for shard in shards),
                  staleness=max(g["staleness"] for g in got),
                  accepted=all(g["accepted"] for g in got), loss=loss)
        iteration += 1
    finish(args, [])
    params = torch.cat([shard.params for shard in shards])
    accuracy, test_loss = trainer.evaluate(params)
    log.write("final", t=time.time(), accuracy=accuracy, loss=test_loss, iterations=iteration,
              params_sha256=params_digest(params))
