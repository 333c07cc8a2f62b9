"""The incast benchmark's figures (matplotlib; imported by its plot hooks only)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from incastlab.analysis.plots import plt, save


def incast_goodput(rounds: pd.DataFrame, path, rto_times=None) -> Path | None:
    """Goodput per round (Mbit/s), rounds with an RTO firing marked; right: goodput vs
    senders when the run has several sender counts, else each round's completion time."""
    if rounds.empty:
        return None
    r = rounds.copy()
    for c in ("round", "t_start", "t_end", "senders", "goodput_mbps"):
        r[c] = pd.to_numeric(r[c], errors="coerce")
    rto = np.asarray(rto_times if rto_times is not None else [], dtype=float)
    hit = np.array([((rto >= a) & (rto <= b)).any() for a, b in zip(r["t_start"], r["t_end"],
                                                                   strict=True)], bool)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 3.5))
    a1.plot(r["round"], r["goodput_mbps"], marker=".", lw=0.6, label="goodput")
    if hit.any():
        a1.scatter(r["round"][hit], r["goodput_mbps"][hit], color="red", zorder=3,
                   label=f"round with an RTO ({int(hit.sum())})")
        a1.legend(fontsize="small")
    a1.set_xlabel("round")
    a1.xaxis.set_major_locator(MaxNLocator(integer=True))
    a1.set_ylabel("goodput (Mbit/s)")
    a1.set_ylim(bottom=0)
    a1.set_title("Incast goodput per round")
    if r["senders"].nunique() > 1:
        g = r.groupby("senders")["goodput_mbps"].agg(["mean", "std", "count"])
        a2.errorbar(g.index, g["mean"], yerr=g["std"].fillna(0), marker="o", capsize=3)
        a2.set_xlabel("senders")
        a2.xaxis.set_major_locator(MaxNLocator(integer=True))
        a2.set_ylabel("goodput (Mbit/s, mean ± sd)")
        a2.set_title("Goodput vs senders")
    else:
        dur = (r["t_end"] - r["t_start"]) * 1000
        a2.bar(r["round"], dur, color=np.where(hit, "tab:red", "tab:blue"))
        a2.set_xlabel("round")
        a2.xaxis.set_major_locator(MaxNLocator(integer=True))
        a2.set_ylabel("round completion time (ms)")
        n = int(r["senders"].iloc[0]) if r["senders"].notna().any() else "?"
        a2.set_title(f"Round completion time ({n} senders; red: an RTO fired)")
    a2.set_ylim(bottom=0)
    fig.tight_layout()
    return save(fig, path)
