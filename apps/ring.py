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
`apps.collectives.ring_allreduce`; the other algorithms, `--algorithm`, are there too).
Each rank sends exactly 2 (N-1)/N x M bytes when N divides the element count (the
logged `bytes_sent` is the exact sum of the chunk sizes it sent), and only ever to rank
r+1, receiving only from rank r-1. Each chunk's sum is computed once and then copied, so
every rank ends with bit-identical results.

`--impl gloo` uses `dist.all_reduce` instead (gloo chooses its own algorithm, so the
bytes it sends are not observable here and are logged as null).
"""
from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

from . import common
from .collectives import (
    ALGORITHMS,
    allreduce,
    gloo_allreduce,
    link_mtu,
    tree_slices,
    tree_window,
)
from .model import BYTES_PER_PARAM, Digits, Trainer, build_model, params_digest

PROG = "incastlab.apps.ring"


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
