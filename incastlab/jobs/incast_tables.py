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


def rounds_with_rto(rounds: pd.DataFrame | None, retrans: pd.DataFrame | None) -> int | None:
    """Incast rounds during which an RTO fired (None without rounds or captures)."""
    if rounds is None or rounds.empty or retrans is None:
        return None
    rto = retrans.loc[retrans["event"].astype(bool) & (retrans["kind"] == "rto"), "t"] \
        if len(retrans) else pd.Series(dtype=float)
    t0 = pd.to_numeric(rounds["t_start"], errors="coerce").to_numpy()
    t1 = pd.to_numeric(rounds["t_end"], errors="coerce").to_numpy()
    r = rto.to_numpy()
    return int(sum(((r >= s) & (r <= e)).any() for s, e in zip(t0, t1, strict=True)))
