"""The parameter-server job's figures (matplotlib; imported by its plot hooks only)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from incastlab.analysis.plots import plt, save


def staleness_hist(values: pd.Series, path) -> Path | None:
    """Histogram of gradient staleness (model versions)."""
    if values is None or len(values) == 0:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    v = values.astype(int)
    ax.bar(*np.unique(v, return_counts=True), color="tab:purple", width=0.8)
    ax.set_xlim(min(-0.5, v.min() - 0.5), max(4.5, v.max() + 0.5))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("staleness (model versions behind)")
    ax.set_ylabel("gradients")
    ax.set_title(f"Gradient staleness (mean {values.mean():.2f}, max {values.max():.0f})")
    return save(fig, path)
