"""What gloo's TCP transport sends for the collectives a script logged: per rank, the data
bytes and the gloo messages, from each op's algorithm (gloo 0.5 as torch 2.13 builds it),
so a root test can hold the captured host-link bytes to the logged collectives.

Algorithms (gloo/allreduce.cc, broadcast.cc, barrier.cc):
- all_reduce (UNSPECIFIED = ring): M bytes cut into ``segments = roundUp(max(ceil(M /
  1 MiB), 2N), N)`` segments of ``roundUp(ceil(M / segments), element)`` bytes (the last
  ones short or empty); rank r owns chunk r (segments r·S..r·S+S−1, S = segments/N). Its
  reduce-scatter sends every segment outside chunk r to rank r−1, its all-gather every
  segment outside chunk r−1; an empty segment is not sent. Each segment goes to N−1
  ranks in each phase: 2(N−1)·M in all.
- broadcast: a binomial tree from the root: virtual rank v sends M to v + 2^k for every
  2^k > v with v + 2^k < N; every other rank receives M once.
- barrier: a dissemination barrier: ceil(log2 N) rounds of a zero-byte message to
  r + 2^k, received from r − 2^k.

Framing of one gloo message of L bytes (gloo/transport/tcp/pair.h): a 48-byte preamble
(six size_t) before the data, one NOTIFY_RECV_READY (a preamble alone) from the receiver,
and at most one NOTIFY_SEND_READY from the sender when the receiver had not posted its
receive yet: gloo bytes per message from L + 96 to L + 144, split between the two ends.
A connection of the full mesh starts with the opener's 8-byte sequence number
(tcp/listener.h: sequence_number_t), before any message.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

PREAMBLE = 48                # bytes: struct Op's preamble, six 8-byte size_t
MAX_SEGMENT = 1024 * 1024    # AllreduceOptionsImpl::kMaxSegmentSize
CONNECT_BYTES = 8            # a new connection's sequence number, from its opener


def _round_up(value: int, multiple: int) -> int:
    return value if value % multiple == 0 else value + multiple - value % multiple


def ring_segments(nbytes: int, n: int, element: int = 4) -> list[int]:
    """The byte length of each of gloo's ring segments of an M-byte all-reduce (0:
    empty, beyond the buffer's end)."""
    max_seg = element * max(1, MAX_SEGMENT // element)
    count = _round_up(max(-(-nbytes // max_seg), 2 * n), n)
    size = _round_up(-(-nbytes // count), element)
    return [max(0, min(size, nbytes - k * size)) for k in range(count)]


@dataclass
class Traffic:
    """One rank's gloo traffic: data bytes it sends, messages it sends and receives."""

    data: int = 0
    sent: int = 0
    received: int = 0
    by_op: dict = field(default_factory=dict)

    def add(self, op: str, data: int, sent: int, received: int) -> None:
        self.data += data
        self.sent += sent
        self.received += received
        self.by_op[op] = self.by_op.get(op, 0) + data

    def payload_range(self) -> tuple[int, int]:
        """The TCP payload bytes this rank sends: its data, a preamble per message it
        sends and a receive-ready notice per message it receives, plus at most one
        send-ready notice per message it sends."""
        least = self.data + PREAMBLE * (self.sent + self.received)
        return least, least + PREAMBLE * self.sent


def ring_all_reduce(traffic: list[Traffic], nbytes: int, element: int = 4) -> None:
    n = len(traffic)
    seg = ring_segments(nbytes, n, element)
    per = len(seg) // n

    def outside(chunk):
        return [s for k, s in enumerate(seg) if k // per != chunk % n and s > 0]
    sends = [outside(r) + outside(r - 1) for r in range(n)]
    for r in range(n):  # r sends to r − 1, so receives what r + 1 sends
        traffic[r].add("all_reduce", sum(sends[r]), len(sends[r]), len(sends[(r + 1) % n]))


def broadcast(traffic: list[Traffic], nbytes: int, root: int) -> None:
    n = len(traffic)
    for r in range(n):
        v = (r - root) % n
        children = [v + 2 ** k for k in range(max(1, math.ceil(math.log2(n))))
                    if 2 ** k > v and v + 2 ** k < n]
        traffic[r].add("broadcast", nbytes * len(children), len(children), int(v != 0))


def barrier(traffic: list[Traffic]) -> None:
    rounds = math.ceil(math.log2(len(traffic))) if len(traffic) > 1 else 0
    for t in traffic:
        t.add("barrier", 0, rounds, rounds)


def expected(collectives, n: int) -> list[Traffic]:
    """Each rank's gloo traffic for the collectives of one rank's log (every rank calls
    the same ones): rows with op, bytes and peer (a broadcast's root) over the whole
    group of n. Raises on an op this model does not cover."""
    traffic = [Traffic() for _ in range(n)]
    for c in collectives:
        if int(c["group_size"]) != n:
            raise ValueError(f"collective {c['seq']}: a subgroup of {c['group_size']}")
        if c["op"] == "all_reduce":
            ring_all_reduce(traffic, int(c["bytes"]))
        elif c["op"] == "broadcast":
            broadcast(traffic, int(c["bytes"]), int(c["peer"]))
        elif c["op"] == "barrier":
            barrier(traffic)
        else:
            raise ValueError(f"collective {c['seq']}: no wire model for {c['op']!r}")
    return traffic
