"""The parameter-server job's tables from its logs (pandas; imported by its hooks)."""
from __future__ import annotations

import pandas as pd

from incastlab.analysis.training import as_rank


def staleness(workers: pd.DataFrame) -> pd.Series:
    """Staleness values (model versions behind) from PS `update` events, else from
    worker `iteration` events."""
    if workers.empty:
        return pd.Series(dtype=float)
    up = workers[workers["event"] == "update"]
    if "staleness" in up and up["staleness"].notna().any():
        vals = [x for v in up["staleness"].dropna()
                for x in (v if isinstance(v, list) else [v])]
        return pd.Series(vals, dtype=float)
    it = workers[workers["event"] == "iteration"]
    if "staleness" in it:
        return pd.to_numeric(it["staleness"], errors="coerce").dropna().astype(float)
    return pd.Series(dtype=float)


def discarded(workers: pd.DataFrame) -> pd.DataFrame:
    """Gradients a backup-worker PS dropped, per worker rank (from `update` events'
    `discarded` lists, or the servers' `final` `discarded_by_rank`)."""
    if workers.empty:
        return pd.DataFrame(columns=["rank", "discarded"])
    counts: dict = {}
    fin = workers[workers["event"] == "final"]
    if "discarded_by_rank" in fin and fin["discarded_by_rank"].notna().any():
        for d in fin["discarded_by_rank"].dropna():
            if isinstance(d, dict):
                for r, k in d.items():
                    counts[as_rank(r)] = counts.get(as_rank(r), 0) + int(k)
    else:
        up = workers[workers["event"] == "update"]
        if "discarded" in up:
            for lst in up["discarded"].dropna():
                for r in (lst if isinstance(lst, list) else [lst]):
                    counts[as_rank(r)] = counts.get(as_rank(r), 0) + 1
    return pd.DataFrame(sorted(counts.items(), key=lambda kv: str(kv[0])),
                        columns=["rank", "discarded"])
