"""The tensor-parallel job's bound (``kind = "tensor"``): a step's all-reduces one
after the other, each at the ring's α–β bound (jobs/ring_bound.py)."""
from __future__ import annotations

from collections.abc import Sequence

from incastlab.analysis.alphabeta import (
    Bound,
    fmt,
    positive,
)
from incastlab.jobs.ring_bound import ring_bound

__all__ = ["tensor_bound"]


def tensor_bound(ranks: int, message_bytes: float, host_mbps, *, collectives: int = 1,
                 leaves: Sequence[str] | None = None, spines: int = 0,
                 fabric_mbps: float | None = None, alpha_s: float = 0.0,
                 mtu: int = 1500) -> Bound:
    """Tensor (Megatron) parallelism over T = `ranks`: `collectives` ring all-reduces of
    n = `message_bytes` each, one after the other (each layer's forward all-reduce of
    activations and backward all-reduce of gradients wait for the layer's compute, so
    they cannot overlap): the least time of all of them (s).

    Each is `ring_bound(T, n, ...)`: 2(T−1)·α + max(host, fabric) with host =
    2(T−1)/T·n·f'/B. α = `alpha_s`, the one-way latency of a message (measured by the
    app: the links have no configured delay, but every message still crosses the hosts'
    stacks and each switch on its path, more of them across leaves). For the small
    messages of tensor parallelism the 2(T−1)·α term can exceed the bandwidth term:
    then the bottleneck is 'latency', and placing the ranks under one leaf (fewer hops,
    smaller α) is what helps.

    Bound.terms: per_collective, latency (all collectives' α terms), bandwidth (the
    rest), collectives (a count). Seconds except the count."""
    c = positive(collectives, "collectives", integer=True)
    one = ring_bound(ranks, message_bytes, host_mbps, leaves=leaves, spines=spines,
                     fabric_mbps=fabric_mbps, alpha_s=alpha_s, mtu=mtu)
    lat = c * one.terms["latency"]
    bw = c * (one.seconds - one.terms["latency"])
    secs = c * one.seconds
    name = "latency" if lat > bw else one.bottleneck
    formula = (f"tensor parallel, T={ranks}, {c} all-reduces of n={fmt(float(message_bytes))}"
               f" B each: {c} × (2(T−1)α = {fmt(one.terms['latency'])} s + "
               f"{fmt(one.seconds - one.terms['latency'])} s of bytes) = {fmt(secs)} s "
               f"(latency {fmt(lat)} s, bandwidth {fmt(bw)} s); one all-reduce: "
               f"{one.formula}")
    return Bound(secs, formula, {"per_collective": one.seconds, "latency": lat,
                                 "bandwidth": bw, "collectives": c}, name)
