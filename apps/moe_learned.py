"""A trained router for the MoE job (``--routing learned``): the task, the router and the
per-rank loss, kept apart from the all-to-alls so that a single-process reference can
check the distributed step (tests/test_apps_moe.py).

The task: tokens come from E clusters (cluster c's centre is a seeded random vector;
a token is its centre plus noise), cluster c chosen with the Zipf popularity
1/(c+1)^alpha, and the target of a token of cluster c is x @ T_c for a seeded "teacher"
matrix T_c. A mixture of E linear experts can fit it exactly once the router sends
each cluster to one expert and that expert learns its teacher. The router is a linear
gate (D x E, replicated on every rank, its gradient all-reduced); a token goes to its
top-k experts by softmax probability, an expert's output is weighted by that
probability (Switch Transformer / GShard gating), an assignment over capacity is
dropped and contributes nothing. Loss: mean squared error plus the Switch Transformer's
load-balancing term coef · E · sum_e f_e · P_e (f_e: share of tokens whose first choice
is e, P_e: mean router probability of e). What a trained router does to the fabric is
the point: the tokens of a popular cluster all go to one expert, so the data's skew
becomes one host's incast.
"""
from __future__ import annotations

import math

import torch

NOISE = 0.5  # token = centre + NOISE · N(0, 1) per value


def task(experts: int, hidden: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(centres (E, D), teachers (E, D, D)): the same on every rank (seeded)."""
    g = torch.Generator().manual_seed(7_919 * (seed + 1))
    centres = torch.randn((experts, hidden), generator=g)
    teachers = torch.randn((experts, hidden, hidden), generator=g) / math.sqrt(hidden)
    return centres, teachers


def batch(centres: torch.Tensor, teachers: torch.Tensor, tokens: int, popularity: torch.Tensor,
          gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x (T, D), target (T, D), cluster (T,)): `popularity` the clusters' probabilities."""
    cluster = torch.multinomial(popularity.float(), tokens, replacement=True, generator=gen)
    x = centres[cluster] + NOISE * torch.randn((tokens, centres.shape[1]), generator=gen)
    target = torch.einsum("td,tde->te", x, teachers[cluster])
    return x, target, cluster


def router_init(hidden: int, experts: int, seed: int) -> torch.Tensor:
    """Small random gate weights (D, E), the same on every rank."""
    g = torch.Generator().manual_seed(104_729 * (seed + 1))
    return 0.01 * torch.randn((hidden, experts), generator=g)


def route(x: torch.Tensor, router: torch.Tensor, top_k: int) -> tuple[torch.Tensor,
                                                                      torch.Tensor]:
    """(probabilities (T, E) — differentiable in `router` —, choice (T, K) indices)."""
    probs = torch.softmax(x @ router, dim=1)
    return probs, torch.topk(probs.detach(), top_k, dim=1).indices


def rank_loss(x: torch.Tensor, target: torch.Tensor, probs: torch.Tensor,
              choice: torch.Tensor, sent: list[list[int]], expert_out: list[torch.Tensor],
              balance_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mse, balance) of one rank's tokens. ``sent[e]`` are the token indices expert e
    took (in order), ``expert_out[e]`` its output rows for them. The output of a token
    is the sum over its kept assignments of probability × expert output."""
    experts = probs.shape[1]
    out = torch.zeros_like(target)
    for e in range(experts):
        if sent[e]:
            idx = torch.tensor(sent[e])
            out = out.index_add(0, idx, probs[idx, e:e + 1] * expert_out[e])
    mse = ((out - target) ** 2).mean()
    first = torch.bincount(choice[:, 0], minlength=experts).to(probs.dtype) / len(x)
    balance = balance_coef * experts * (first * probs.mean(dim=0)).sum()
    return mse, balance
