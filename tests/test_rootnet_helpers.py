"""The capture helpers the root tests rely on, checked on hand-made segments."""
from __future__ import annotations

import pandas as pd

from tests.rootnet import overtaken_segments, relative_seq


def _segments(rows, src=1, dst=2, sport=40000, dport=5201):
    return pd.DataFrame([{"src": src, "dst": dst, "sport": sport, "dport": dport,
                          "seq": seq % 2**32, "payload_len": n} for seq, n in rows])


def test_relative_seq_across_the_wrap():
    import numpy as np

    seq = np.array([2**32 - 100, 2**32 - 1, 5, 1000], dtype=np.uint32)
    assert list(relative_seq(seq, 2**32 - 100)) == [0, 99, 105, 1100]


def test_overtaken_segments_counts_reordered_originals_only():
    in_order = [(1000, 1448), (2448, 1448), (3896, 20)]
    assert overtaken_segments(_segments(in_order)) == 0
    # the short last segment left before the full one ahead of it
    assert overtaken_segments(_segments([(1000, 1448), (3896, 20), (2448, 1448)])) == 1
    # a retransmission, and a re-cut one starting inside an earlier segment, are not
    assert overtaken_segments(_segments(in_order + [(2448, 1448)])) == 0
    assert overtaken_segments(_segments(in_order + [(3000, 500)])) == 0
    # across the sequence-number wrap
    base = 2**32 - 2000
    assert overtaken_segments(_segments([(base, 1448), (base + 1448, 1448)])) == 0
    assert overtaken_segments(_segments([(base + 1448, 1448), (base, 1448)])) == 1
    assert overtaken_segments(_segments([(base, 1000), (base + 2448, 1448),
                                         (base + 1000, 1448)])) == 1
    # the same ports towards another host are another flow, with its own numbers
    two = pd.concat([_segments([(10**9, 1448)]), _segments([(5, 1448)], dst=3)])
    assert overtaken_segments(two) == 0
    # pure ACKs carry no data and never count
    assert overtaken_segments(_segments([(1000, 1448), (500, 0)])) == 0
