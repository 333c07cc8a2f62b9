"""The incast benchmark's tables from its client's log (pandas; imported by its hooks)."""
from __future__ import annotations

import numpy as np
import pandas as pd


def incast_rounds(workers: pd.DataFrame) -> pd.DataFrame:
    """Incast benchmark `round` events: round, t_start, t_end, senders, block_bytes, bytes,
    goodput_mbps."""
    if workers.empty or not (workers["event"] == "round").any():
        return pd.DataFrame(columns=["round", "t_start", "t_end", "senders", "block_bytes",
                                     "bytes", "goodput_mbps"])
    r = workers[workers["event"] == "round"]
    cols = ["round", "t_start", "t_end", "senders", "block_bytes", "bytes", "goodput_mbps"]
    for c in cols:
        if c not in r:
            r = r.assign(**{c: np.nan})
    return r[cols].reset_index(drop=True)
