"""The incast benchmark's bound (``kind = "incast"``): the least time of one round,
written with the cost model's primitives (:mod:`incastlab.analysis.alphabeta`)."""
from __future__ import annotations

from collections.abc import Sequence

from incastlab.analysis.alphabeta import (
    Bound,
    bytes_per_s,
    check_leaves,
    fabric_term,
    fmt,
    framing_factor,
    leaf_traffic,
    link_rates,
    positive,
    top_term,
)

__all__ = ["incast_bound"]


def incast_bound(senders: int, block_bytes: float, receiver_mbps: float, *,
                 sender_mbps=None, sender_leaves: Sequence[str] | None = None,
                 receiver_leaf: str | None = None, spines: int = 0,
                 fabric_mbps: float | None = None, alpha_s: float = 0.0,
                 mtu: int = 1500) -> Bound:
    """One incast round: N = `senders` each send a block of S = `block_bytes` to one
    receiver at once; the least time (s) from the request to the last byte.

    receiver port: N·S·f/B_r — the leaf's egress to the receiver carries every block
    (the incast queue); f = 1514/1448: only requests and ACKs go the other way.
    sender link: S·f/B_s (`sender_mbps`, one value or one per sender; optional).
    fabric (with `sender_leaves`, `receiver_leaf`, `spines`, `fabric_mbps`): the blocks
    of senders on other leaves cross into the receiver's leaf, and leave each sender
    leaf, over spines × fabric_mbps.
    bound = max(receiver port, sender link, fabric) + 2α (the request, then the data).

    Bound.terms: receiver_port, sender_link, fabric, latency (s).
    """
    n = positive(senders, "senders", integer=True)
    s = float(positive(block_bytes, "block_bytes"))
    b_r = link_rates(receiver_mbps, 1, "receiver_mbps")[0]
    f = framing_factor(mtu)
    port = n * s * f / bytes_per_s(b_r)
    cands = {"receiver port": port}
    link = 0.0
    if sender_mbps is not None:
        link = s * f / bytes_per_s(min(link_rates(sender_mbps, n, "sender_mbps")))
        cands["sender link"] = link
    lv = check_leaves(sender_leaves, n, "sender_leaves")
    if (lv is None) != (receiver_leaf is None):
        raise ValueError("give both sender_leaves and receiver_leaf, or neither")
    flows = [(a, receiver_leaf, s) for a in lv] if lv is not None else []
    fab, fab_name, fab_txt = fabric_term(*leaf_traffic(flows), spines, fabric_mbps, f)
    if fab_name:
        cands[f"fabric ({fab_name})"] = fab
    lat = 2 * alpha_s
    secs = max(cands.values()) + lat
    formula = (f"incast round, N={n} senders × S={fmt(s)} B, f={f:.4f}: max(receiver port "
               f"N·S·f/B_r = {fmt(n * s)} B·f/{fmt(b_r)} Mbit/s = {fmt(port)} s"
               f"{', sender link S·f/B_s = ' + fmt(link) + ' s' if sender_mbps else ''}"
               f"{', fabric ' + fab_txt if fab_name else ''})"
               f"{' + 2α = ' + fmt(lat) + ' s' if lat else ''} = {fmt(secs)} s")
    return Bound(secs, formula, {"receiver_port": port, "sender_link": link, "fabric": fab,
                                 "latency": lat}, top_term(cands))
