"""The all-reduce job's tables from its workers' logs (pandas; imported by its hooks)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from incastlab.analysis.training import iterations


def allreduce_vs_bound(workers: pd.DataFrame) -> pd.DataFrame:
    """Each rank's all-reduce times, one row per rank × iteration. Columns: rank,
    iteration, allreduce_s, and bound_s and ratio (allreduce_s / bound_s) left NaN:
    the job fills them with its own bound (ring.RingJob.bound: framing, ACKs, fabric),
    the one the headline's bound_s is, so the run has one bound."""
    it = iterations(workers)
    if it.empty or it["allreduce_s"].isna().all():
        return pd.DataFrame(columns=["rank", "iteration", "allreduce_s", "bound_s", "ratio"])
    out = it[["rank", "iteration", "allreduce_s"]].dropna().copy()
    out["bound_s"] = np.nan
    out["ratio"] = np.nan
    return out.reset_index(drop=True)
