"""The queue-occupancy CDF per port (issue 26's analysis): for the ports the queue figure
shows (render.hot_ports), the empirical CDF of the sampled backlog in packets, a figure
and tables/queue_cdf.csv (p50, p90, p99, max per port).

Over busy time: the queue sampler's samples (queues.csv, every ``queue_sample_ms``,
10 ms by default) in which the port was busy, i.e. it sent a packet since the sample
before or held a backlog. An idle port's zeros would otherwise swamp the distribution
with the time between rounds (a 20-round incast's queue is empty most of the run), and
say more about the workload's duty cycle than about the queue; the table says how many
of the port's samples were busy. The quantiles are the empirical CDF's own, the smallest
sampled backlog x with F(x) >= p (numpy's ``inverted_cdf``), so each is a value some
sample had and the figure's steps show it.
"""
from __future__ import annotations

import html

import numpy as np
import pandas as pd

from . import render as rd
from .stages import Section, Stage

__all__ = ["COLUMNS", "QUANTILES", "STAGE", "busy_backlog", "cdf_figure", "quantile_table"]

QUANTILES = (0.5, 0.9, 0.99)
COLUMNS = ["iface", "samples", "busy_samples", "p50_pkts", "p90_pkts", "p99_pkts", "max_pkts",
           "mean_pkts", "limit_pkts"]


def busy_backlog(queues_d: pd.DataFrame, iface: str) -> np.ndarray:
    """The sampled backlog (packets) of one port over its busy samples (module docstring):
    queues_d is queues.csv with the per-sample increases of queues.queue_deltas."""
    g = queues_d[queues_d["iface"] == iface]
    busy = (g["d_sent_pkts"] > 0) | (g["backlog_pkts"] > 0)
    return g.loc[busy, "backlog_pkts"].to_numpy(dtype=float)


def quantile_table(queues_d: pd.DataFrame, ports: list[str],
                   limits: dict | None = None) -> pd.DataFrame:
    """One row per port (in the order given): its samples, the busy ones, and p50, p90,
    p99, max and mean of the busy samples' backlog (NaN without a busy sample)."""
    limits = limits or {}
    rows = []
    for iface in ports:
        x = busy_backlog(queues_d, iface)
        qs = np.quantile(x, QUANTILES, method="inverted_cdf") if len(x) else [np.nan] * 3
        rows.append({"iface": iface, "samples": int((queues_d["iface"] == iface).sum()),
                     "busy_samples": len(x), "p50_pkts": qs[0], "p90_pkts": qs[1],
                     "p99_pkts": qs[2], "max_pkts": x.max() if len(x) else np.nan,
                     "mean_pkts": x.mean() if len(x) else np.nan,
                     "limit_pkts": limits.get(iface)})
    return pd.DataFrame(rows, columns=COLUMNS)


def interval_ms(queues_d: pd.DataFrame) -> float | None:
    """The sampler's median interval over every port's samples, in ms."""
    dt = queues_d["dt"][queues_d["dt"] > 0] if "dt" in queues_d else ()
    return float(np.median(dt)) * 1e3 if len(dt) else None


def cdf_figure(queues_d: pd.DataFrame, ports: list[str], path, threshold: float | None = None,
               labels: dict | None = None):
    """The empirical CDFs of the ports' busy backlog on one axes (a step per sampled
    value), the ECN threshold K as a dotted line when there is one; None: nothing to draw."""
    from . import plots

    curves = [(p, np.sort(busy_backlog(queues_d, p))) for p in ports]
    curves = [(p, x) for p, x in curves if len(x)]
    if not curves:
        return None
    labels = labels or {}
    fig, ax = plots.plt.subplots(figsize=(8, 4))
    for iface, x in curves:
        y = np.arange(1, len(x) + 1) / len(x)
        name = f"{iface} — {labels[iface]}" if labels.get(iface) else iface
        ax.step(np.concatenate([[x[0]], x]), np.concatenate([[0.0], y]), where="post",
                lw=1.2, label=f"{name} ({len(x)} samples)")
    if threshold:
        ax.axvline(threshold, color="0.3", ls=":", lw=1, label=f"ECN K = {threshold:g}")
    ax.set_xlim(left=0)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("sampled backlog (packets)")
    ax.set_ylabel("fraction of busy samples ≤ x")
    ax.set_title("Queue occupancy CDF of the hottest ports (busy samples)", fontsize="medium")
    plots.legend_outside(ax)
    fig.tight_layout()
    return plots.save(fig, path)


def _threshold(a) -> float | None:
    ecn = a.manifest.get("ecn") or {}
    k = ecn.get("threshold")
    return float(k) if isinstance(k, (int, float)) and ecn.get("unit") == "packets" else None


def _ports(a) -> tuple[list[str], dict, dict]:
    qsum = a.tables.get("queue_summary")
    if qsum is None or not len(qsum):
        return [], {}, {}
    return rd.hot_ports(qsum), rd.port_limits(qsum), rd.port_labels(qsum)


def compute(a) -> dict:
    qd = a.tables.get("queues_d")
    ports, limits, _ = _ports(a)
    if qd is None or qd.empty or not ports:
        return {"table": pd.DataFrame(columns=COLUMNS), "interval_ms": None}
    return {"table": quantile_table(qd, ports, limits), "interval_ms": interval_ms(qd)}


def figures(a, plot_dir) -> dict:
    ports, _, labels = _ports(a)
    return {"queue_cdf": rd.safe_plot(a, "queue_cdf", plot_dir / "queue_cdf.png",
                                      lambda p: cdf_figure(a.tables["queues_d"], ports, p,
                                                           _threshold(a), labels))}


def caption(t: dict) -> str:
    every = (f"every {t['interval_ms']:.3g} ms (the median interval)" if t.get("interval_ms")
             else "at the sampler's interval")
    return ("Empirical CDF of each port's backlog in packets over the queue sampler's "
            f"samples, taken {every}, in which the port was busy (it sent since the sample "
            "before or held a backlog): over busy time, not all time, so the idle gaps "
            "between rounds do not count; busy_samples of samples says how much of the run "
            "that was. Quantiles are sampled values (the smallest x with F(x) ≥ p); a "
            "burst shorter than the interval may fall between two samples.")


def render(a, figs) -> list[Section]:
    t = a.tables.get("queue_cdf") or {}
    table = t.get("table")
    if table is None or not len(table):
        return []
    h, m = rd.table(a, table, "queue_cdf")
    cap = caption(t)
    return [Section("Queue occupancy CDF per port",
                    rd.img(figs.get("queue_cdf"), "queue occupancy CDF")
                    + f"<p>{html.escape(cap)}</p>" + h,
                    rd.md_img(figs, "queue_cdf") + f"\n{cap}\n\n" + m)]


def metrics(t: dict) -> dict | None:
    table = t.get("table")
    if table is None or not len(table):
        return None
    return {r["iface"]: {k: r[k] for k in ("busy_samples", "p50_pkts", "p90_pkts",
                                            "p99_pkts", "max_pkts")}
            for r in table.to_dict("records")}


STAGE = Stage("queue_cdf", ("queues_d", "queue_summary"), compute=compute, metrics=metrics,
              figures=figures, render=render, after="queues", what="queue occupancy CDF")
