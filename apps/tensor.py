"""Tensor-parallel (Megatron-style) training: every block's weights split across ranks.

    python -m incastlab.apps.tensor --rank R --world-size T --master ADDR:PORT --out DIR
        [--layers L] [--impl ring|gloo] [--iterations I] [--model-size MPARAMS] ...

The model (`tensor_model`): the digits input layer 64 -> H (ReLU), then L residual MLP
blocks x -> x + relu(x A^T + a) B^T + b with A: H -> 4H and B: 4H -> H, then the head
H -> 10. Every rank builds the whole model from the seed and keeps its slice of each
block (Megatron-LM, Shoeybi et al. 2019): A is split by output columns (rank r holds
rows r·4H/T .. of A's weight and of a: column-parallel), B by input rows (rank r holds
the matching columns of B's weight: row-parallel), so relu(x A_r^T + a_r) B_r^T is rank
r's partial sum of the block's output and needs no communication in between. Per block:
- forward: an all-reduce (sum) of the partial outputs, batch x H float32 values (the
  `g` operator of the paper); b, the input layer and the head are replicated;
- backward: an all-reduce of the gradient with respect to the block's input (the `f`
  operator), the same size: each rank's slice contributes a part of it.
So 2·L all-reduces per step, each of batch x H x 4 bytes, in a fixed order: blocks
0..L-1 forward, then L-1..0 backward. Every rank reads the same mini-batch. The loss,
the replicated parameters and their gradients are identical on every rank, and the
step is the unpartitioned model's step (up to float rounding of the split sums).

`--impl ring` (default) all-reduces with `incastlab.apps.ring.ring_allreduce`: a known
algorithm (2(T-1) messages of 1/T of the tensor each way per rank), so each collective
has an α–β bound 2(T-1)·α + 2(T-1)/T·n·f'/B; `--impl gloo` uses `dist.all_reduce`.
Before training, rank 0 measures α, the one-way latency of a small message as this
program sees it, by passing a 4-byte token round the ranks (`latency` event).

Log (docs/run-directory.md): `start`, `latency` (rank 0), a `span` event per collective
(name "all-reduce L<i> fwd|bwd", cat "allreduce", t, dur_s, bytes, layer, direction),
an `iteration` event per step (comm_s = the collectives' time), `final`.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from . import common
from .model import BYTES_PER_PARAM, CLASSES, INPUTS, Digits, param_count, params_digest
from .collectives import gloo_allreduce, ring_allreduce

PROG = "incastlab.apps.tensor"
EXPANSION = 4        # the block's inner width is 4 H, as in a transformer's MLP
LATENCY_ROUNDS = 21  # token passes round the ranks; the median is used


def tensor_width(model_size_m: float, layers: int) -> int:
    """Hidden width H whose parameter count of `tensor_model` is nearest
    `model_size_m` x 1e6: 2·4·L·H² + (65 + 5L + 10) H + 10."""
    import math

    target = model_size_m * 1e6
    a, b = 2 * EXPANSION * layers, INPUTS + 1 + (EXPANSION + 1) * layers + CLASSES
    return max(EXPANSION, round((-b + math.sqrt(b * b + 4 * a * (target - CLASSES)))
                                / (2 * a)))


def tensor_model(model_size_m: float, layers: int, seed: int) -> nn.ModuleDict:
    """The whole (unpartitioned) model: {"inp", "blocks": [{"a", "b"}...], "head"}, He
    initialised from `seed`; the output layer of each block starts at 0.1 of its He
    scale, so the residual stack starts close to the identity and trains stably."""
    h = tensor_width(model_size_m, layers)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)

    def linear(n_in: int, n_out: int, scale: float = 1.0) -> nn.Linear:
        lin = nn.Linear(n_in, n_out)
        nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
        with torch.no_grad():
            lin.weight *= scale
        nn.init.zeros_(lin.bias)
        return lin

    model = nn.ModuleDict({
        "inp": linear(INPUTS, h),
        "blocks": nn.ModuleList([nn.ModuleDict({"a": linear(h, EXPANSION * h),
                                                "b": linear(EXPANSION * h, h, 0.1)})
                                 for _ in range(layers)]),
        "head": linear(h, CLASSES)})
    torch.random.set_rng_state(gen_state)
    return model


def reference_forward(model: nn.ModuleDict, x: torch.Tensor) -> torch.Tensor:
    """The unpartitioned model's logits (what the tensor-parallel ranks compute)."""
    x = torch.relu(model["inp"](x))
    for blk in model["blocks"]:
        x = x + blk["b"](torch.relu(blk["a"](x)))
    return model["head"](x)


class Collectives:
    """The all-reduces of one rank: runs them and keeps their timings for the log."""

    def __init__(self, rank: int, world: int, impl: str, timeout: float) -> None:
        self.rank, self.world, self.impl, self.timeout = rank, world, impl, timeout
        self.records: list[dict[str, Any]] = []
        self.sent = self.recv = 0

    def all_reduce(self, t: torch.Tensor, layer: int, direction: str) -> torch.Tensor:
        out = t.detach().contiguous().clone()
        t_wall, t0 = time.time(), time.perf_counter()
        if self.impl == "ring":
            s, r = ring_allreduce(out.view(-1), self.rank, self.world, self.timeout)
            self.sent += s
            self.recv += r
        else:
            gloo_allreduce(out, self.timeout)
        self.records.append({"t": t_wall, "dur_s": time.perf_counter() - t0, "layer": layer,
                             "direction": direction,
                             "bytes": out.numel() * out.element_size()})
        return out


class _ReduceForward(torch.autograd.Function):
    """Megatron's g: all-reduce in the forward pass, identity backward."""

    @staticmethod
    def forward(ctx, x, coll: Collectives, layer: int):  # noqa: ANN001 - autograd API
        return coll.all_reduce(x, layer, "fwd")

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        return grad, None, None


class _ReduceBackward(torch.autograd.Function):
    """Megatron's f: identity in the forward pass, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, coll: Collectives, layer: int):  # noqa: ANN001
        ctx.coll, ctx.layer = coll, layer
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        return ctx.coll.all_reduce(grad, ctx.layer, "bwd"), None, None


class ShardedModel(nn.Module):
    """Rank `rank`'s part of `tensor_model`: the replicated layers and its slices."""

    def __init__(self, full: nn.ModuleDict, rank: int, world: int, coll: Collectives
                 ) -> None:
        super().__init__()
        self.coll = coll
        self.inp = full["inp"]
        self.head = full["head"]
        self.a_w, self.a_b, self.b_w, self.b_b = (nn.ParameterList() for _ in range(4))
        for blk in full["blocks"]:
            inner = blk["a"].out_features
            # contiguous slices whose widths differ by at most one: all columns, once
            cols = slice(rank * inner // world, (rank + 1) * inner // world)
            self.a_w.append(nn.Parameter(blk["a"].weight.detach()[cols].clone()))
            self.a_b.append(nn.Parameter(blk["a"].bias.detach()[cols].clone()))
            self.b_w.append(nn.Parameter(blk["b"].weight.detach()[:, cols].clone()))
            self.b_b.append(nn.Parameter(blk["b"].bias.detach().clone()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.inp(x))
        for i in range(len(self.a_w)):
            u = _ReduceBackward.apply(x, self.coll, i)
            part = torch.relu(u @ self.a_w[i].t() + self.a_b[i]) @ self.b_w[i].t()
            x = x + _ReduceForward.apply(part, self.coll, i) + self.b_b[i]
        return self.head(x)


def measure_alpha(rank: int, world: int, timeout: float) -> float | None:
    """Rank 0: the median time of a 4-byte token's trip round all ranks, / world: the
    one-way latency of one small message (s). Other ranks pass the token on; None."""
    token = torch.zeros(1)
    trips = []
    for i in range(LATENCY_ROUNDS):
        if rank == 0:
            t0 = time.perf_counter()
            common.wait(dist.isend(token, dst=1, tag=i), timeout, "latency token out")
            common.wait(dist.irecv(token, src=world - 1, tag=i), timeout, "latency token back")
            trips.append(time.perf_counter() - t0)
        else:
            common.wait(dist.irecv(token, src=rank - 1, tag=i), timeout, "latency token in")
            common.wait(dist.isend(token, dst=(rank + 1) % world, tag=i), timeout,
                        "latency token on")
    return statistics.median(trips) / world if rank == 0 else None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Times in seconds, sizes in bytes. Log schema: docs/run-directory.md.")
    common.add_dist_args(p)
    common.add_training_args(p)
    p.add_argument("--layers", type=common.positive_int, default=4,
                   help="tensor-parallel MLP blocks, each 2 all-reduces per step (default: 4)")
    p.add_argument("--impl", choices=("ring", "gloo"), default="ring",
                   help="all-reduce: ring (ours, send/recv; default) or gloo (dist.all_reduce)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.check_rank(parser, args)
    common.check_model_size(parser, args)
    if args.world_size < 2:
        parser.error("argument --world-size: tensor parallelism needs at least 2 ranks")
    return args


def run(args: argparse.Namespace, log: common.JsonLog) -> None:
    rank, world = args.rank, args.world_size
    coll = Collectives(rank, world, args.impl, args.timeout)
    full = tensor_model(args.model_size, args.layers, args.seed)
    model = ShardedModel(full, rank, world, coll)
    data = Digits(0, 1, args.batch_size, args.seed)
    loss_fn = nn.CrossEntropyLoss()
    factor = common.slowdown_factor(args, rank)
    width = full["inp"].out_features
    log.write("start", role="tensor", rank=rank, world_size=world, mode="tensor",
              impl=args.impl, layers=args.layers, hidden=width, param_count=param_count(model),
              model_param_count=param_count(full), collectives_per_step=2 * args.layers,
              message_bytes=data.batch_size * width * BYTES_PER_PARAM,
              t=time.time(), **common.host_info(args.iface), slowdown=factor,
              options=common.options(args))
    t0 = time.time()
    common.init_gloo(args)
    log.write("ready", t=time.time(), init_s=time.time() - t0, bytes_recv=0)
    alpha = measure_alpha(rank, world, args.timeout)
    if alpha is not None:
        log.write("latency", t=time.time(), alpha_s=alpha, rounds=LATENCY_ROUNDS,
                  method="token round all ranks, median / ranks")
    for it in range(args.iterations):
        t_start = time.time()
        coll.records.clear()
        sent0, recv0 = coll.sent, coll.recv
        x, y = data.next_batch()
        model.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= args.lr * p.grad
        t_end = time.time()
        comm = sum(r["dur_s"] for r in coll.records)
        compute = t_end - t_start - comm
        slow = (factor - 1.0) * compute
        if slow > 0:  # a straggler: its compute takes `factor` times as long
            time.sleep(slow)
            t_end = time.time()
        for r in coll.records:
            log.write("span", name=f"all-reduce L{r['layer']} {r['direction']}",
                      cat="allreduce", iteration=it, **r)
        log.write("iteration", iteration=it, t_start=t_start, t_end=t_end,
                  compute_s=t_end - t_start - comm, slowdown_s=max(slow, 0.0), comm_s=comm,
                  wait_s=None, allreduce_s=None, collectives=len(coll.records),
                  bytes_sent=coll.sent - sent0 if args.impl == "ring" else None,
                  bytes_recv=coll.recv - recv0 if args.impl == "ring" else None,
                  model_version=it, staleness=0, loss=float(loss.item()))
    with torch.no_grad():
        coll.records.clear()
        logits = model(data.x_test)
        test_loss = float(loss_fn(logits, data.y_test).item())
        acc = float((logits.argmax(1) == data.y_test).float().mean().item())
    common.finish_gloo(args.timeout)
    flat = nn.utils.parameters_to_vector(model.parameters()).detach()
    log.write("final", t=time.time(), accuracy=acc, loss=test_loss,
              iterations=args.iterations, params_sha256=params_digest(flat))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = common.JsonLog(args.out, args.rank)
    return common.run_main(PROG, log, args.rank, lambda: run(args, log))


if __name__ == "__main__":
    sys.exit(main())
