"""The all-reduce job's figures (matplotlib; imported by its plot hooks only)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.ticker import MaxNLocator

from incastlab.analysis.plots import legend_outside, plt, save


def ring_vs_bound(ring: pd.DataFrame, path) -> Path | None:
    """All-reduce time per iteration against the 2(N-1)/N*M/B bound."""
    if ring.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for r, g in ring.groupby("rank"):
        ax.plot(g["iteration"], g["allreduce_s"], lw=0.8, label=f"rank {r}")
    b = ring["bound_s"].dropna()
    if len(b):
        ax.axhline(b.iloc[0], color="k", ls="--", label=f"bound 2(N-1)/N·M/B = {b.iloc[0]:.3f} s")
    ax.set_xlabel("iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("all-reduce time (s)")
    ax.set_ylim(bottom=0)
    ax.set_title("Ring all-reduce time vs the bandwidth-optimal bound")
    legend_outside(ax)
    return save(fig, path)
