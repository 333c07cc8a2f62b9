"""The all-reduce job's tables from its workers' logs (pandas; imported by its hooks)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from incastlab.analysis.training import iterations, starts
from incastlab.topologies.fabricmap import FabricMap


def allreduce_vs_bound(workers: pd.DataFrame, fabric: FabricMap | None) -> pd.DataFrame:
    """Ring all-reduce time vs the bandwidth bound 2(N-1)/N * M / B.

    M = gradient_bytes from the start events, N = world_size, B = the host link rate
    (fabric.json, Mbit/s -> bytes/s). Columns: rank, iteration, allreduce_s, bound_s,
    ratio (allreduce_s / bound_s; 1.0 is optimal).
    """
    it = iterations(workers)
    s = starts(workers)
    if it.empty or it["allreduce_s"].isna().all() or s.empty:
        return pd.DataFrame(columns=["rank", "iteration", "allreduce_s", "bound_s", "ratio"])
    n = pd.to_numeric(s.get("world_size"), errors="coerce").dropna()
    m = pd.to_numeric(s.get("gradient_bytes"), errors="coerce").dropna()
    # each host's rate is that of its own link (its egress towards its leaf)
    rates = [fabric.link_of_iface(h.intf).bw_mbps for h in fabric.hosts] if fabric else []
    if not len(n) or not len(m) or not rates:
        bound = np.nan
    else:
        big_n, big_m, b = float(n.max()), float(m.max()), min(rates) * 1e6 / 8
        bound = 2 * (big_n - 1) / big_n * big_m / b
    out = it[["rank", "iteration", "allreduce_s"]].dropna().copy()
    out["bound_s"] = bound
    out["ratio"] = out["allreduce_s"] / bound if bound == bound and bound > 0 else np.nan
    return out.reset_index(drop=True)
