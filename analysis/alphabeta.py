"""Lower bounds on the time of one iteration (or round), from bytes, rates and placement.

The α–β model: moving n bytes over a link of rate B takes at least α + n·f/B seconds,
where α is the one-way latency of a message and f the framing overhead (wire bytes per
payload byte). Where several links are crossed at once the slowest of them sets the
pace, so a phase takes at least the largest of its per-link times (its *bottleneck*);
phases that cannot overlap add up. Every function returns a `Bound`: the seconds, the
formula with the numbers filled in (for a report), the named terms in seconds and the
name of the bottleneck. Nothing here measures anything: numbers in, a bound out.
This module holds the primitives (framing, rates, the fabric term, a phase at its busiest
link); each job kind writes its own bound with them, beside its job module
(`incastlab/jobs/<kind>_bound.py`).

Units: rates in Mbit/s (10^6 bit/s, as fabric.json and the spec give them), sizes in
bytes of application payload (as the worker logs count them), times in seconds.

Framing (derived in the README, `benchmarks/allreduce_efficiency.py`): HTB shapes whole
Ethernet frames without preamble, FCS or gap. A full-size TCP segment of an MTU-1500
link carries 1448 payload bytes (1500 - 20 IP - 20 TCP - 12 timestamp option) in a
1514-byte frame (+14 Ethernet), so f = 1514/1448 = 1.0456 for a bulk flow whose link
carries nothing else. When a link also carries the ACKs of a flow coming the other way
(one 66-byte frame per two segments: Linux's delayed ACK), f = (2·1514 + 66)/(2·1448)
= 1.0684 (`ack_framing`): a ring host, and a parameter-server port whose push and pull
run at the same time.

Fabric (two-tier leaf–spine): a leaf reaches the spines over `spines` links of
`fabric_mbps` each, one per spine, in each direction. The fabric term of a phase is, for
every leaf, the bytes that leave it for other leaves (uplinks) and the bytes that reach
it from other leaves (downlinks), each over spines × fabric_mbps; the largest of these
is the term. It assumes the routing spreads those bytes evenly over the spines it may
use, so it is a lower bound: an ECMP hash collision shows as time above it. Pass
`spines` = the number of spines the routing lets a flow use (1 under the `single`
policy, all of them under ecmp, spread and adaptive). The spine's own links are these
same leaf–spine links, so no other fabric link can be the bottleneck.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

ETHERNET_HEADER = 14   # bytes; HTB counts it, not the preamble, FCS or inter-frame gap
IP_HEADER = 20
TCP_HEADER = 20
TCP_TIMESTAMPS = 12    # the timestamp option, padded (Linux negotiates it by default)
ACK_FRAME = ETHERNET_HEADER + IP_HEADER + TCP_HEADER + TCP_TIMESTAMPS   # 66 bytes
SEGMENTS_PER_ACK = 2   # Linux delays ACKs to one per two full-size segments


@dataclass(frozen=True)
class Bound:
    """A lower bound in seconds.

    `formula`: one line for a report, the formula with its numbers filled in; `terms`:
    the named components in seconds (the bound is built from them as the formula says);
    `bottleneck`: the name of the term that sets the bound."""
    seconds: float
    formula: str
    terms: dict = field(default_factory=dict, hash=False)
    bottleneck: str = ""

    def ratio(self, measured_s: float) -> float:
        """measured / bound (1.0 = at the bound; NaN when the bound is 0)."""
        return measured_s / self.seconds if self.seconds > 0 else float("nan")


def segment_payload(mtu: int = 1500) -> int:
    """Payload bytes of a full-size TCP segment with timestamps (1448 for MTU 1500)."""
    payload = mtu - IP_HEADER - TCP_HEADER - TCP_TIMESTAMPS
    if payload <= 0:
        raise ValueError(f"mtu must exceed {IP_HEADER + TCP_HEADER + TCP_TIMESTAMPS} bytes, "
                         f"got {mtu}")
    return payload


def framing_factor(mtu: int = 1500) -> float:
    """Wire bytes per payload byte of a bulk TCP flow of full-size segments:
    (mtu + 14) / (mtu - 52) = 1514/1448 = 1.0456 for MTU 1500."""
    return (mtu + ETHERNET_HEADER) / segment_payload(mtu)


def ack_framing(mtu: int = 1500, segments_per_ack: int = SEGMENTS_PER_ACK) -> float:
    """Wire bytes per payload byte on a link that carries a bulk flow *and* the ACKs of
    an equal flow in the other direction: one 66-byte ACK frame per `segments_per_ack`
    segments, (2·1514 + 66)/(2·1448) = 1.0684 for MTU 1500."""
    seg = segment_payload(mtu)
    return (segments_per_ack * (mtu + ETHERNET_HEADER) + ACK_FRAME) / (segments_per_ack * seg)


def bytes_per_s(mbps: float) -> float:
    """Mbit/s -> bytes/s."""
    return float(mbps) * 1e6 / 8


def link_rates(value, n: int, what: str) -> list[float]:
    """A scalar or one value per item -> n positive rates (Mbit/s)."""
    vals = [value] * n if isinstance(value, (int, float)) else list(value)
    if len(vals) != n:
        raise ValueError(f"{what}: expected one rate or {n}, got {len(vals)}")
    for v in vals:
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{what}: rates must be positive Mbit/s, got {v!r}")
    return [float(v) for v in vals]


def positive(value, what: str, integer: bool = False):
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{what} must be a positive {'integer' if integer else 'number'}, "
                         f"got {value!r}")
    return value


def fmt(x: float) -> str:
    """Seconds or bytes for a formula: 4 significant digits, thousands separated."""
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.4g}" if abs(x) >= 1 else f"{x:.4g}"


def leaf_traffic(flows: Iterable[tuple[str, str, float]]) -> tuple[dict, dict]:
    """(up, down): bytes leaving each leaf for the spines and reaching it from them, for
    flows given as (source leaf, destination leaf, bytes); same-leaf flows cross no
    spine."""
    up: dict = {}
    down: dict = {}
    for src, dst, n in flows:
        if src != dst:
            up[src] = up.get(src, 0.0) + n
            down[dst] = down.get(dst, 0.0) + n
    return up, down


def fabric_term(up: dict, down: dict, spines: int, fabric_mbps, framing: float,
                 symbol: str = "f") -> tuple[float, str, str]:
    """(seconds, name, text) of the busiest leaf-to-spine direction; (0, '', '') when
    no bytes cross the spines."""
    if not up and not down:
        return 0.0, "", ""
    if not spines or not fabric_mbps:
        raise ValueError("traffic crosses leaves: `spines` and `fabric_mbps` are needed")
    cap = bytes_per_s(spines * fabric_mbps)
    cands = [(n, f"uplinks of {leaf}") for leaf, n in up.items()] + \
            [(n, f"downlinks into {leaf}") for leaf, n in down.items()]
    n, name = max(cands, key=lambda c: c[0])
    secs = n * framing / cap
    return secs, name, (f"{name} {fmt(n)} B·{symbol}/({spines}×{fmt(fabric_mbps)} Mbit/s) "
                        f"= {fmt(secs)} s")


def check_leaves(leaves, n: int, what: str) -> list | None:
    if leaves is None:
        return None
    leaves = list(leaves)
    if len(leaves) != n:
        raise ValueError(f"{what}: expected {n} leaves, got {len(leaves)}")
    return leaves


def top_term(terms: dict) -> str:
    return max(terms, key=lambda k: terms[k]) if terms else ""



# --- phases: flows that run at once, at their busiest link ----------------------------

def phase_seconds(flows: Sequence[tuple[int, int, float]], rates: Sequence[float],
                   leaves: Sequence[str] | None, spines: int, fabric_mbps,
                   mtu: int) -> tuple[float, str]:
    """(seconds, bottleneck) of one phase whose `flows` ((source rank, destination rank,
    bytes)) all run at once: its busiest link. A host link, or a leaf's spine links in one
    direction, carries f = `framing_factor` per byte, or f' = `ack_framing` when the
    other direction carries data of the phase too (the ACKs of that data share it).
    Fabric links as in the module docstring (spread evenly over `spines`)."""
    f, fa = framing_factor(mtu), ack_framing(mtu)
    out: dict = {}
    into: dict = {}
    for s, d, n in flows:
        out[s] = out.get(s, 0.0) + n
        into[d] = into.get(d, 0.0) + n
    cands = {}
    for r in sorted(set(out) | set(into)):
        for mine, other, what in ((out, into, "out of"), (into, out, "into")):
            if mine.get(r):
                frame = fa if other.get(r) else f
                cands[f"host link {what} rank {r}"] = mine[r] * frame / bytes_per_s(rates[r])
    if leaves is not None:
        up, down = leaf_traffic((leaves[s], leaves[d], n) for s, d, n in flows)
        if up or down:
            if not spines or not fabric_mbps:
                raise ValueError("traffic crosses leaves: `spines` and `fabric_mbps` are needed")
            cap = bytes_per_s(spines * fabric_mbps)
            for leaf, n in up.items():
                cands[f"uplinks of {leaf}"] = n * (fa if down.get(leaf) else f) / cap
            for leaf, n in down.items():
                cands[f"downlinks into {leaf}"] = n * (fa if up.get(leaf) else f) / cap
            # a TCP flow takes one path (every policy here routes per flow), so a flow
            # that crosses the spines moves over one leaf-spine link at a time, however
            # many spines its leaf has
            for s, d, n in flows:
                if leaves[s] != leaves[d]:
                    frame = fa if (d, s) in {(a, b) for a, b, _ in flows} else f
                    t = n * frame / bytes_per_s(fabric_mbps)
                    if t > cands.get("one flow's spine link", 0.0):
                        cands["one flow's spine link"] = t
    if not cands:
        return 0.0, ""
    name = max(cands, key=lambda k: cands[k])
    return cands[name], name


def serial_phases(phases: Sequence[tuple[str, list]], rates, leaves, spines, fabric_mbps,
            mtu) -> tuple[float, list[tuple[str, float, str]]]:
    """Phases that follow one another: the sum of their times; [(phase, s, bottleneck)]."""
    done = [(name, *phase_seconds(flows, rates, leaves, spines, fabric_mbps, mtu))
            for name, flows in phases]
    return sum(t for _, t, _ in done), done

