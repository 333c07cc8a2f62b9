"""The comparison's figures (compare_runs): one metric per group as bars and dots, or
as lines along a sweep's axis; the conventions of analysis/plots.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .plots import legend_outside, plt, save


def _interval_err(t: pd.DataFrame) -> np.ndarray:
    """Asymmetric error bars [mean - lo, hi - mean] from compare's table (NaN where the
    group has no interval: fewer than three runs)."""
    mean = t["mean"].to_numpy(dtype=float)
    lo = t["lo"].to_numpy(dtype=float) if "lo" in t else mean - t["ci95"].to_numpy(float)
    hi = t["hi"].to_numpy(dtype=float) if "hi" in t else mean + t["ci95"].to_numpy(float)
    return np.vstack([mean - lo, hi - mean])


def compare_bars(table: pd.DataFrame, metric: str, path, unit: str = "") -> Path | None:
    """One metric per group (compare_runs): every run's value as a dot; with three or
    more runs also the mean (a bar) and its 95 % CI (clipped at 0 for quantities that
    cannot be negative); with fewer only the dots and a tick at their mean."""
    t = table[table["metric"] == metric].dropna(subset=["mean"]).reset_index(drop=True)
    if t.empty:
        return None
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(t) + 2), 3.5))
    err = _interval_err(t)
    ok = np.isfinite(err).all(axis=0)
    x = np.arange(len(t))
    if ok.any():
        ax.bar(x[ok], t["mean"].to_numpy()[ok], color="tab:blue", alpha=0.35,
               label="mean (n >= 3)")
        ax.errorbar(x[ok], t["mean"].to_numpy()[ok], yerr=err[:, ok], fmt="none",
                    ecolor="k", capsize=4, label="95 % CI")
    if (~ok).any():
        ax.hlines(t["mean"].to_numpy()[~ok], x[~ok] - 0.25, x[~ok] + 0.25, color="0.3",
                  lw=1, label="mean (n < 3: no interval)")
    for i, vals in enumerate(t["values"] if "values" in t else [[]] * len(t)):
        vals = list(vals) if isinstance(vals, (list, tuple, np.ndarray)) else []
        jitter = np.linspace(-0.12, 0.12, len(vals)) if len(vals) > 1 else np.zeros(len(vals))
        ax.scatter(i + jitter, vals, color="tab:red", s=22, zorder=3,
                   label="each run" if i == 0 else None)
    labels = [f"{g}".replace(",", "\n") + f"\n(n={n})"
              for g, n in zip(t["group"], t["n"], strict=True)]
    ax.set_xticks(x, labels, fontsize="x-small")
    ax.set_ylabel(f"{metric}{f' ({unit})' if unit else ''}")
    low = np.nanmin(np.concatenate([t["mean"].to_numpy(float) - np.nan_to_num(err[0]),
                                    [0.0]]))
    ax.set_ylim(bottom=min(0.0, float(low)))
    ax.axhline(0, color="k", lw=0.5)
    ax.set_title(f"{metric}: each run, and mean with 95 % CI where a group has >= 3 runs",
                 fontsize="medium")
    legend_outside(ax)
    return save(fig, path)


def compare_lines(lines: pd.DataFrame, x_name: str, metric: str, path,
                  unit: str = "") -> Path | None:
    """A metric against a swept spec value, one line (through the means) per combination
    of the other differing spec values (compare_runs); 95 % CI bars where a point has
    three or more runs, and every run's value as a dot."""
    if lines is None or lines.empty or lines["mean"].notna().sum() < 2:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    for series, g in lines.sort_values("x").groupby("series", sort=True):
        err = np.nan_to_num(_interval_err(g), nan=0.0)
        line = ax.errorbar(g["x"], g["mean"], yerr=err, marker="o", capsize=3,
                           label=series or metric)
        if "values" in g:
            for xv, vals in zip(g["x"], g["values"], strict=True):
                ax.scatter([xv] * len(vals), vals, s=10, color=line[0].get_color(),
                           alpha=0.6, zorder=3)
    ax.set_xlabel(x_name)
    ax.set_ylabel(f"{metric}{f' ({unit})' if unit else ''}")
    low = (lines["mean"] - np.nan_to_num(_interval_err(lines)[0])).min()
    ax.set_ylim(bottom=min(0.0, float(low)))
    ax.set_title(f"{metric} vs {x_name} (dots: runs; bars: 95 % CI where n >= 3)",
                 fontsize="medium")
    legend_outside(ax)
    return save(fig, path)
