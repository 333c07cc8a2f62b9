"""The latency figure: CDFs of RTT, queueing delay and sojourn time, drawn through at
most CDF_POINTS exact points each; the conventions of analysis/plots.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .plots import TOP_N, legend_outside, plt, save
from .samples import Dist


CDF_POINTS = 2000  # steps drawn per CDF: 1/2000 of the axis height, under a pixel


def cdf_line(ax, values, weights=None, **kw):
    """A step CDF of `values` (ms), each counted `weights` times (None: once). Unweighted
    and more than CDF_POINTS values: drawn through CDF_POINTS exact points of it (the
    value of rank i has CDF (i + 1) / n; np.partition finds them without a sort), not one
    step per value: a line of millions of steps cost ~100 bytes a sample in matplotlib
    (+300 MB for a 6 M packet run's 2.9 M RTT samples and sojourns)."""
    if weights is None:
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        n = len(v)
        if not n:
            return
        if n <= CDF_POINTS:
            x, y = np.sort(v), np.arange(1, n + 1) / n
        else:
            idx = np.unique(np.linspace(0, n - 1, CDF_POINTS).round().astype(np.int64))
            x, y = np.partition(v, idx)[idx], (idx + 1) / n
        ax.step(x, y, where="post", **kw)
        return
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    keep = np.isfinite(v) & (w > 0)
    v, w = v[keep], w[keep]
    if not len(v):
        return
    order = np.argsort(v, kind="stable")
    cw = np.cumsum(w[order])
    ax.step(v[order], cw / cw[-1], where="post", **kw)


def _values(d) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(values, weights or None, samples) of an array of delays or a samples.Dist (a
    sketch's buckets weigh what they hold)."""
    if isinstance(d, Dist):
        return np.asarray(d.values, dtype=float), d.counts, d.samples
    return np.asarray(d, dtype=float), None, len(d)


def latency_cdf(rtt: dict, queue: dict, sojourn: dict | None, path,
                top_n: int = TOP_N) -> Path | None:
    """Latency under load as CDFs (analysis/latency.py): left, RTT samples (s) per flow
    role ({role: delays or a samples.Dist}); right, queueing delay (s) per switch port,
    each sample weighted by the packets the port sent ({iface: (delays, weights)}), with
    measured sojourns ({label: delays or a Dist}, e.g. one-way host to host per flow
    role) dashed. Axes in ms; at most `top_n` groups
    per panel (the first given). None when there is nothing to draw."""
    sojourn = sojourn or {}
    if not rtt and not queue and not sojourn:
        return None
    fig, (ax_r, ax_q) = plt.subplots(1, 2, figsize=(12, 4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (role, d) in enumerate(list(rtt.items())[:top_n]):
        v, w, n = _values(d)
        cdf_line(ax_r, v * 1e3, w, color=colours[i % len(colours)], label=f"{role} ({n})")
    if not rtt:
        ax_r.text(0.5, 0.5, "no RTT samples", ha="center", va="center",
                  transform=ax_r.transAxes, color="gray")
    ax_r.set_title("RTT per flow role (samples)", fontsize="medium")
    for i, (iface, (v, w)) in enumerate(list(queue.items())[:top_n]):
        cdf_line(ax_q, np.asarray(v) * 1e3, w, color=colours[i % len(colours)], label=iface)
    shown_q = min(len(queue), top_n)  # sojourns take the colours after the ports'
    for i, (pair, d) in enumerate(list(sojourn.items())[:top_n]):
        v, w, n = _values(d)
        cdf_line(ax_q, v * 1e3, w, color=colours[(shown_q + i) % len(colours)],
                 ls="--", label=f"sojourn, {pair} ({n})")
    if not queue and not sojourn:
        ax_q.text(0.5, 0.5, "no queue samples", ha="center", va="center",
                  transform=ax_q.transAxes, color="gray")
    ax_q.set_title("Queueing delay per port (packet-weighted); sojourn dashed",
                   fontsize="medium")
    for ax in (ax_r, ax_q):
        ax.set_xlabel("delay (ms)")
        ax.set_ylabel("fraction of samples at or below")
        ax.set_ylim(0, 1.02)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        legend_outside(ax)
    fig.suptitle("Latency under load")
    fig.tight_layout()
    return save(fig, path)
