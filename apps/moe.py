"""Mixture-of-experts expert parallelism: top-k routing and two all-to-alls per pass.

    python -m incastlab.apps.moe --rank R --world-size E --master ADDR:PORT --out DIR
        [--tokens T] [--hidden D] [--top-k K] [--zipf-alpha A] [--capacity-factor C]
        [--routing zipf|learned] [--lr LR] [--balance-coef B] [--steps S] ...

E ranks, one expert each (expert e lives on rank e: a D x D linear layer with seeded
weights). Every step each rank routes its T tokens (D float32 values each) to experts:

- routing `zipf` (default): synthetic, skewed by a Zipf law: expert e is chosen with
  probability proportional to 1 / (e + 1)^A (A = 0: uniform; expert 0 is the hottest),
  each token to K distinct experts (sampled without replacement: Gumbel top-k on the
  log-probabilities, seeded per rank and step);
- routing `learned`: a real router trained with the experts (apps/moe_learned.py):
  tokens from E clusters whose popularity follows the same Zipf law, a linear softmax
  gate replicated on every rank (its gradient all-reduced each step), the experts'
  outputs weighted by the gate and trained by SGD on a regression task, with the Switch
  Transformer's load-balancing loss. The skew then comes from what the router learned;
- capacity (GShard's, per group: this rank's tokens are one group): expert e takes at
  most ceil(C x T x K / E) of this rank's token-expert assignments per step; the rest are
  dropped (counted, not sent). Every assignment is either sent or dropped;
- dispatch: first the counts (an all_to_all_single of E integers), then the tokens, an
  all_to_all_single with uneven input and output split sizes (gloo supports these in
  all_to_all_single; its list form all_to_all needs equal sizes, checked on torch
  2.13), rows grouped by destination expert; or, with `--alltoall pairwise`, our
  pairwise exchange (apps/alltoall.py: N-1 steps of send/recv, one flow per link each
  way) with the same split sizes;
- expert compute: each expert multiplies the rows it received by its weights;
- combine: the outputs go back with the reverse split sizes; each rank checks every
  returned row against its own x @ W_e (the weights are seeded by expert, so any rank
  can recompute them): `mismatched` counts rows that differ (must be 0);
- backward: two more all-to-alls of the same sizes, as a training step's gradients
  travel (the output gradients to the experts, the input gradients back). With
  `learned` routing these are the real gradients, and each expert updates its weights;
  the input gradients are what a preceding layer would consume (this model has none).
  `mismatched` is checked with `zipf` routing only (the experts' weights stay fixed).

Logs per step (event `iteration`): the counts sent to and received from every expert,
routed / dropped / sent assignments, bytes out and in, each all-to-all's time, the step
time. Times in seconds, sizes in bytes.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from . import alltoall as exchange
from . import common
from . import moe_learned as learned

PROG = "incastlab.apps.moe"
ROUTINGS = ("zipf", "learned")
BYTES_PER_VALUE = 4  # float32


def zipf_probs(experts: int, alpha: float) -> torch.Tensor:
    """P(expert e) proportional to 1/(e+1)^alpha, e = 0..experts-1 (float64)."""
    w = torch.tensor([1.0 / (e + 1) ** alpha for e in range(experts)], dtype=torch.float64)
    return w / w.sum()


def route(tokens: int, experts: int, top_k: int, alpha: float,
          gen: torch.Generator) -> torch.Tensor:
    """(tokens, top_k) expert indices: each token's K distinct experts, drawn without
    replacement from the Zipf(alpha) popularity (Gumbel top-k)."""
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be from 1 to {experts}, got {top_k}")
    logp = zipf_probs(experts, alpha).log()
    u = torch.rand((tokens, experts), generator=gen, dtype=torch.float64).clamp_(1e-12, 1.0)
    gumbel = -torch.log(-torch.log(u))
    return torch.topk(logp + gumbel, top_k, dim=1).indices


def capacity(tokens: int, experts: int, top_k: int, factor: float) -> int:
    """Assignments one expert takes from one rank per step: ceil(C·T·K/E)."""
    return math.ceil(factor * tokens * top_k / experts)


def dispatch_plan(choice: torch.Tensor, experts: int, cap: int) -> dict[str, Any]:
    """Which assignments go where. `choice` (tokens, K) expert indices. Assignments are
    taken token by token (token 0's K choices first), each expert accepting the first
    `cap`; the rest are dropped. Returns per expert the token indices sent (`sent`, a list
    of lists) and the counts routed, sent and dropped (lists of E integers)."""
    sent: list[list[int]] = [[] for _ in range(experts)]
    routed = [0] * experts
    for t, row in enumerate(choice.tolist()):
        for e in row:
            routed[e] += 1
            if len(sent[e]) < cap:
                sent[e].append(t)
    counts = [len(s) for s in sent]
    return {"sent": sent, "routed": routed, "sent_counts": counts,
            "dropped": [r - c for r, c in zip(routed, counts, strict=True)]}


def expert_weights(e: int, hidden: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1_000_003 * (seed + 1) + e)
    return torch.randn((hidden, hidden), generator=g) / math.sqrt(hidden)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Log schema: docs/run-directory.md.")
    common.add_dist_args(p)
    p.add_argument("--steps", type=common.positive_int, default=10, help="steps (default: 10)")
    p.add_argument("--tokens", type=common.positive_int, default=512,
                   help="tokens per rank per step (default: 512)")
    p.add_argument("--hidden", type=common.positive_int, default=256,
                   help="values per token, float32 (default: 256 = 1 KiB a token)")
    p.add_argument("--top-k", type=common.positive_int, default=2,
                   help="experts per token (default: 2)")
    p.add_argument("--zipf-alpha", type=float, default=1.0,
                   help="routing skew: P(expert e) ~ 1/(e+1)^alpha; 0 = uniform (default: 1)")
    p.add_argument("--capacity-factor", type=common.positive_float, default=1.25,
                   help="per-expert capacity ceil(C x tokens x top_k / experts) per rank "
                        "(default: 1.25)")
    p.add_argument("--routing", choices=ROUTINGS, default="zipf",
                   help="zipf: synthetic popularity; learned: a trained router on tokens "
                        "from Zipf-popular clusters (default: zipf)")
    p.add_argument("--lr", type=common.positive_float, default=0.5,
                   help="learned routing: SGD rate of the router and the experts "
                        "(default: 0.5, the spec's workload.lr)")
    p.add_argument("--balance-coef", type=common.non_negative_float, default=0.1,
                   help="learned routing: weight of the load-balancing loss (default: 0.1; "
                        "Switch's 0.01 lets this task's router collapse onto one expert)")
    p.add_argument("--alltoall", choices=exchange.ALGORITHMS, default="gloo",
                   help="how the tokens' all-to-alls run: gloo = all_to_all_single (every "
                        "flow at once); pairwise = N-1 steps, one flow per link each way "
                        "(apps/alltoall.py) (default: gloo)")
    p.add_argument("--seed", type=int, default=0, help="routing and weights seed (default: 0)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.check_rank(parser, argparse.Namespace(rank=args.rank, world_size=args.world_size,
                                                 slowdown=[]))
    if args.world_size < 2:
        parser.error("argument --world-size: expert parallelism needs at least 2 ranks")
    if args.top_k > args.world_size:
        parser.error(f"argument --top-k: {args.top_k} experts per token, but only "
                     f"{args.world_size} experts (--world-size)")
    if not 0 <= args.zipf_alpha <= 10:
        parser.error(f"argument --zipf-alpha: must be within 0..10, got {args.zipf_alpha:g}")
    return args


def _a2a(out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int],
         timeout: float, what: str, algorithm: str, rank: int, world: int) -> float:
    t0 = time.time()
    exchange.alltoall(algorithm, out, inp, out_splits, in_splits, rank, world, timeout, what)
    return time.time() - t0


def _log_start(args: argparse.Namespace, log: common.JsonLog, cap: int) -> None:
    e_n, d, trained = args.world_size, args.hidden, args.routing == "learned"
    log.write("start", role="expert", rank=args.rank, world_size=e_n, mode="moe",
              param_count=d * d, gradient_bytes=None, t=time.time(),
              **common.host_info(args.iface), tokens=args.tokens, hidden=d,
              token_bytes=d * BYTES_PER_VALUE, top_k=args.top_k, zipf_alpha=args.zipf_alpha,
              capacity_factor=args.capacity_factor, capacity=cap, routing=args.routing,
              alltoall=args.alltoall,
              router_bytes=d * e_n * BYTES_PER_VALUE if trained else 0,
              options=common.options(args))


def _learned_backward(args: argparse.Namespace, x, target, probs, choice, plan: dict,
                      back: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Learned routing: this rank's loss backward through the returned rows (and the
    router); the rows' gradients and the step's losses."""
    rows = back.clone().requires_grad_()
    mse, balance = learned.rank_loss(x, target, probs, choice, plan["sent"],
                                     list(torch.split(rows, plan["sent_counts"])),
                                     args.balance_coef)
    (mse + balance).backward()
    return rows.grad, {"loss": float(mse.detach()), "balance_loss": float(balance.detach())}


def _update_router(args: argparse.Namespace, step: int, router: torch.Tensor,
                   mine: torch.Tensor, in_rows: torch.Tensor, g_in: torch.Tensor) -> float:
    """Learned routing: the router's gradient all-reduced (the loss is the mean over
    ranks), then SGD on the router and on this rank's expert, in place; the all-reduce's
    seconds."""
    e_n = args.world_size
    tr = time.time()
    grad_router = router.grad
    common.wait(dist.all_reduce(grad_router, async_op=True), args.timeout,
                f"step {step}: router gradient all-reduce")
    t_router = time.time() - tr
    with torch.no_grad():
        router -= args.lr * grad_router / e_n
        mine -= args.lr * (in_rows.T @ g_in) / e_n
    router.grad = None
    return t_router


def _mismatched(x: torch.Tensor, back: torch.Tensor, plan: dict, weights: dict,
                order: list, d: int) -> int:
    """Zipf routing: the returned rows that are not their expert's output for the token."""
    e_n = len(weights)
    expect = torch.cat([x[plan["sent"][e]] @ weights[e] for e in range(e_n)
                        if plan["sent"][e]]) if order else torch.empty((0, d))
    return int((~torch.isclose(back, expect, rtol=1e-5, atol=1e-5).all(dim=1))
               .sum()) if order else 0


def _remote_bytes(counts: list[int], rank: int, d: int) -> int:
    """Bytes of the tokens counted per expert that travel to (or from) other ranks."""
    return sum(c for e, c in enumerate(counts) if e != rank) * d * BYTES_PER_VALUE


def run(args: argparse.Namespace, log: common.JsonLog) -> None:
    e_n, d, rank = args.world_size, args.hidden, args.rank
    trained = args.routing == "learned"
    cap = capacity(args.tokens, e_n, args.top_k, args.capacity_factor)
    _log_start(args, log, cap)
    t0 = time.time()
    common.init_gloo(args)
    log.write("ready", t=time.time(), init_s=time.time() - t0, bytes_recv=0)
    weights = {e: expert_weights(e, d, args.seed) for e in range(e_n)}
    mine = weights[rank].clone()
    if trained:
        centres, teachers = learned.task(e_n, d, args.seed)
        popularity = zipf_probs(e_n, args.zipf_alpha)
        router = learned.router_init(d, e_n, args.seed).requires_grad_()
    for step in range(args.steps):
        t_start = time.time()
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 4099 + rank)
        if trained:
            x, target, _ = learned.batch(centres, teachers, args.tokens, popularity, gen)
            probs, choice = learned.route(x, router, args.top_k)
        else:
            x = torch.randn((args.tokens, d), generator=gen)
            choice = route(args.tokens, e_n, args.top_k, args.zipf_alpha, gen)
        plan = dispatch_plan(choice, e_n, cap)
        send_counts = torch.tensor(plan["sent_counts"], dtype=torch.int64)
        recv_counts = torch.empty(e_n, dtype=torch.int64)
        how = (args.alltoall, rank, e_n)  # the tokens' all-to-alls (the counts: gloo's)
        t_counts = _a2a(recv_counts, send_counts, [1] * e_n, [1] * e_n, args.timeout,
                        f"step {step}: count exchange", "gloo", rank, e_n)
        recv = recv_counts.tolist()
        order = [t for e in range(e_n) for t in plan["sent"][e]]
        out_rows = x[order] if order else torch.empty((0, d))
        in_rows = torch.empty((sum(recv), d))
        rows_out = [c * d for c in plan["sent_counts"]]
        rows_in = [c * d for c in recv]
        t_dispatch = _a2a(in_rows.view(-1), out_rows.contiguous().view(-1), rows_in, rows_out,
                          args.timeout, f"step {step}: dispatch all-to-all", *how)
        tc = time.time()
        y = in_rows @ mine
        compute_s = time.time() - tc
        back = torch.empty((len(order), d))
        t_combine = _a2a(back.view(-1), y.contiguous().view(-1), rows_out, rows_in,
                         args.timeout, f"step {step}: combine all-to-all", *how)
        losses = {}
        if trained:  # the gradient of this rank's loss by each returned row and the router
            grad_rows, losses = _learned_backward(args, x, target, probs, choice, plan, back)
        else:
            grad_rows = back
        # backward: output gradients to the experts, input gradients back (same sizes)
        g_in = torch.empty_like(in_rows)
        t_bwd1 = _a2a(g_in.view(-1), grad_rows.contiguous().view(-1), rows_in, rows_out,
                      args.timeout, f"step {step}: backward dispatch all-to-all", *how)
        g_back = torch.empty_like(back)
        t_bwd2 = _a2a(g_back.view(-1), (g_in @ mine.T).contiguous().view(-1), rows_out,
                      rows_in, args.timeout, f"step {step}: backward combine all-to-all", *how)
        t_router = 0.0
        if trained:  # the loss is the mean over ranks: mean the router's gradients
            t_router = _update_router(args, step, router, mine, in_rows, g_in)
        t_end = time.time()
        mismatched = None
        if not trained:  # every row that came back is its expert's output for the token
            mismatched = _mismatched(x, back, plan, weights, order, d)
        payload_out = _remote_bytes(plan["sent_counts"], rank, d)
        payload_in = _remote_bytes(recv, rank, d)
        comm = t_counts + t_dispatch + t_combine + t_bwd1 + t_bwd2 + t_router
        log.write("iteration", iteration=step, t_start=t_start, t_end=t_end,
                  compute_s=compute_s, comm_s=comm, wait_s=None,
                  alltoall_s=[t_dispatch, t_combine, t_bwd1, t_bwd2], counts_s=t_counts,
                  router_allreduce_s=t_router if trained else None,
                  routed=plan["routed"], sent_counts=plan["sent_counts"],
                  dropped=plan["dropped"], recv_counts=recv,
                  tokens_routed=sum(plan["routed"]), tokens_sent=sum(plan["sent_counts"]),
                  tokens_dropped=sum(plan["dropped"]), tokens_received=sum(recv),
                  # each pass moves these both ways twice (forward and backward)
                  dispatch_bytes_out=payload_out, dispatch_bytes_in=payload_in,
                  bytes_sent=2 * (payload_out + payload_in),
                  bytes_recv=2 * (payload_in + payload_out), mismatched=mismatched,
                  **losses)
    common.finish_gloo(args.timeout)
    log.write("final", t=time.time(), iterations=args.steps)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = common.JsonLog(args.out, args.rank)
    return common.run_main(PROG, log, args.rank, lambda: run(args, log))


if __name__ == "__main__":
    sys.exit(main())
