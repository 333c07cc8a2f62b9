"""What the parameter-server program's servers and workers share (see apps/ps.py): the
message layout, the modes that go on without a lost worker, the learning-rate rules,
the shards' slices of the parameter vector, the start event and the end barrier.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

import torch
import torch.distributed as dist

from . import common
from .model import BYTES_PER_PARAM

__all__ = ["FINISH_TAG", "GLOO_WAIT_S", "KEEPALIVE_BOUND_S", "KEEPALIVE_IDLE_S",
           "KEEPALIVE_INTERVAL_S", "KEEPALIVE_PROBES", "LR_RULES", "PULL_TRAILER", "PUSH_TRAILER",
           "TOLERATES_LOST", "finish", "log_start", "lr_rates", "shard_bounds"]

PUSH_TRAILER = 2  # version, iteration
PULL_TRAILER = 5  # version, staleness, hold_s, stop, accepted
LR_RULES = ("mean", "per_worker", "staleness")
TOLERATES_LOST = ("async", "ssp", "backup")  # modes that can go on without a worker
GLOO_WAIT_S = 7 * 24 * 3600.0  # a gloo wait the server's own deadline always beats
FINISH_TAG = 7  # tag of the end barrier's tokens (every other message uses tag 0)
# TCP keepalive on a server's connections in the modes that go on without a worker
# (common.keep_alive): probe after 1 s without a packet from the peer, then every 1 s; 3
# unanswered probes give it up. A worker whose process is gone (its reset lost) or whose
# host is unreachable is lost at most KEEPALIVE_BOUND_S after its last packet, instead of
# at --timeout; seconds are the options' unit, and 1 s is their least.
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES = 1, 1, 3
KEEPALIVE_BOUND_S = KEEPALIVE_IDLE_S + KEEPALIVE_PROBES * KEEPALIVE_INTERVAL_S


def lr_rates(rule: str, lr: float, workers: int, staleness: list[int]) -> list[float]:
    """The rate each gradient of one update is applied with (see apps/ps.py's docstring):
    the update is params -= sum_i rates[i] * g_i, for gradients of the given staleness."""
    k = len(staleness)
    if rule == "mean":
        return [lr / k] * k
    if rule == "per_worker":
        return [lr / workers] * k
    if rule == "staleness":
        return [lr / (k * (1 + s)) for s in staleness]
    raise ValueError(f"unknown learning-rate rule {rule!r}; rules are {', '.join(LR_RULES)}")


def shard_bounds(n_params: int, shards: int) -> list[tuple[int, int]]:
    """[lo, hi) of each shard's slice: torch.tensor_split's nearly equal split."""
    sizes = [len(c) for c in torch.tensor_split(torch.arange(n_params), shards)]
    bounds, lo = [], 0
    for size in sizes:
        bounds.append((lo, lo + size))
        lo += size
    return bounds


def finish(args: argparse.Namespace, peers: list[int]) -> None:
    """The end barrier among the ranks left: every rank but 0 sends a token to rank 0
    and waits for its answer; rank 0 (`peers`: the ranks it expects, lost workers left
    out) answers once all tokens arrived. Like gloo's barrier, it keeps any rank from
    closing its connections while a peer may still be reading (see common.finish_gloo),
    without needing a dead rank. A worker lost at another shard only is given up here."""
    token = torch.zeros(1)
    if args.rank != 0:
        common.wait(dist.isend(token, dst=0, tag=FINISH_TAG), args.timeout,
                    "final barrier: send to rank 0")
        common.wait(dist.irecv(token, src=0, tag=FINISH_TAG), args.timeout,
                    "final barrier: answer from rank 0")
        return
    answered = []
    for r in peers:
        try:
            common.wait(dist.irecv(torch.zeros(1), src=r, tag=FINISH_TAG), args.timeout,
                        f"final barrier: token from rank {r}")
            answered.append(r)
        except common.PeerError:
            if r < args.shards or args.mode not in TOLERATES_LOST:
                raise
    sends = [dist.isend(token, dst=r, tag=FINISH_TAG) for r in answered]
    for r, work in zip(answered, sends, strict=True):
        common.wait(work, args.timeout, f"final barrier: answer to rank {r}")



def log_start(args: argparse.Namespace, log: common.JsonLog, n_params: int, role: str,
              **extra: Any) -> None:
    log.write("start", role=role, rank=args.rank, world_size=args.world_size,
              mode=args.mode, param_count=n_params,
              gradient_bytes=n_params * BYTES_PER_PARAM, t=time.time(),
              **common.host_info(args.iface), **extra, options=common.options(args))
