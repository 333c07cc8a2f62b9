"""A group of runs' numbers for one metric: mean, 95 % confidence interval, table text.

With three or more runs in a group a metric gets its mean and 95 % confidence interval
(Student t); with fewer, each run's value is shown as it is (two points say nothing
about an interval: t(0.975, 1) = 12.7 turns any spread into a bar across the axis).
Intervals of quantities that cannot be negative (counts, rates, fractions) stop at 0.
Used by compare.py (its re-exports keep the old import paths).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["MIN_N_FOR_CI", "cell_text", "finite_values", "group_stats", "mean_ci", "t975"]

# two-sided 95 % Student t quantiles, used when scipy is not installed
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042,
         40: 2.021, 60: 2.000, 120: 1.980}


def t975(df: int) -> float:
    """0.975 quantile of Student's t with `df` degrees of freedom."""
    try:
        from scipy.stats import t
        return float(t.ppf(0.975, df))
    except ImportError:
        keys = sorted(_T975)
        for k in keys:
            if df <= k:
                return _T975[k]
        return 1.96


def mean_ci(values) -> dict:
    """n, mean, sd and the 95 % CI half-width (t-distribution; NaN when n < 2)."""
    v = np.asarray([x for x in values if x is not None and not
                    (isinstance(x, float) and math.isnan(x))], dtype=float)
    n = len(v)
    if n == 0:
        return {"n": 0, "mean": np.nan, "sd": np.nan, "ci95": np.nan}
    sd = float(v.std(ddof=1)) if n > 1 else np.nan
    return {"n": n, "mean": float(v.mean()), "sd": sd,
            "ci95": t975(n - 1) * sd / math.sqrt(n) if n > 1 else np.nan}


MIN_N_FOR_CI = 3  # fewer runs in a group: show each run's value, no interval


def finite_values(values) -> list[float]:
    """The finite numbers among `values` (None, booleans and what is not a number left out)."""
    out = []
    for x in values:
        if x is None or isinstance(x, bool):
            continue
        try:
            f = float(x)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def group_stats(values, nonneg: bool = False) -> dict:
    """One group's numbers for one metric: n, mean, sd, ci95 (half-width of the 95 %
    t-interval; NaN when n < MIN_N_FOR_CI), lo and hi (the interval's ends, lo clipped at
    0 when `nonneg`; NaN when n < MIN_N_FOR_CI) and `values` (each run's value, in order).
    """
    vals = finite_values(values)
    s = mean_ci(vals)
    if s["n"] < MIN_N_FOR_CI:
        return {**s, "ci95": np.nan, "lo": np.nan, "hi": np.nan, "values": vals}
    lo, hi = s["mean"] - s["ci95"], s["mean"] + s["ci95"]
    return {**s, "lo": max(0.0, lo) if nonneg else lo, "hi": hi, "values": vals}


def cell_text(stats: dict, fmt=None) -> str:
    """A group's value for a table cell: 'mean ± ci' (n >= 3), 'mean [lo, hi]' when the
    interval was clipped at 0, each run's value when n < 3 ('3, 5'), 'n/a' when none.
    A CI that is rounding noise of equal values (1e-16) shows as 0."""
    fmt = fmt or (lambda v: f"{v:.4g}")
    n = stats.get("n", 0)
    if not n:
        return "n/a"
    if n < MIN_N_FOR_CI or not math.isfinite(stats.get("ci95", np.nan)):
        return ", ".join(fmt(v) for v in stats.get("values") or [stats["mean"]])
    mean, ci, lo = stats["mean"], stats["ci95"], stats["lo"]
    if ci <= 1e-9 * max(1.0, abs(mean)):
        return f"{fmt(mean)} ± 0"
    if lo > mean - ci + 1e-12 * max(1.0, abs(mean)):  # clipped at 0
        return f"{fmt(mean)} [{fmt(lo)}, {fmt(stats['hi'])}]"
    return f"{fmt(mean)} ± {ci:.2g}"
