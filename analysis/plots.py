"""Report figures. Each function takes tables, writes one PNG and returns its path, or
returns None when there is nothing to draw (the report then says so).

Conventions: time axes are seconds since the run's start; every axis names its unit;
with many series only the top N are drawn in colour and the rest in grey as 'others',
with the legend outside the axes; y axes start at zero unless the data are signed.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import pandas as pd  # noqa: E402
from .labels import trigger_name  # noqa: E402

TOP_N = 8
KIND_COLOURS = {"fast": "tab:blue", "rto": "tab:red", "tlp": "tab:orange", "other": "tab:gray"}


def save(fig, path) -> Path:
    """Write `fig` as a PNG at `path` (its folder made), close it; the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def legend_outside(ax, **kw):
    """The legend of `ax` outside its right edge (none when nothing is labelled)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  fontsize="small", frameon=False, **kw)


def queue_occupancy(queues_d: pd.DataFrame, ports: list[str], t0: float, path,
                    limits: dict | None = None, labels: dict | None = None,
                    marks: dict | None = None) -> Path | None:
    """Backlog (packets) over time of the given ports, drops marked with red crosses
    (marker label gives the count); `labels` {iface: description} for the titles;
    `marks` {iface: epoch times of the CE-marked packets that crossed it}, drawn as
    orange ticks along the bottom of its panel."""
    labels, marks = labels or {}, marks or {}
    if queues_d.empty or not ports:
        return None
    limits = limits or {}
    fig, axes = plt.subplots(len(ports), 1, figsize=(10, 1.9 * len(ports) + 0.8),
                             sharex=True, squeeze=False)
    for ax, iface in zip(axes[:, 0], ports, strict=True):
        g = queues_d[queues_d["iface"] == iface].sort_values("t")
        x = g["t"] - t0
        ax.step(x, g["backlog_pkts"], where="post", color="tab:blue", lw=1,
                label="backlog (packets)")
        lim = limits.get(iface)
        if lim:
            ax.axhline(lim, color="k", ls="--", lw=0.8, label=f"limit {lim:g} packets")
        d = g[g["d_drops"] > 0]
        if len(d):
            top = max(float(g["backlog_pkts"].max()), float(lim or 0), 1.0)
            ax.scatter(d["t"] - t0, np.full(len(d), top * 1.05), marker="x", color="red",
                       s=18 + 4 * np.sqrt(d["d_drops"]),
                       label=f"drops ({int(d['d_drops'].sum())} packets)")
        ce = np.asarray(marks.get(iface, ()), dtype=float)
        if len(ce):
            ax.plot(ce - t0, np.zeros(len(ce)), ls="none", marker="|", ms=9, mew=1.0,
                    color="tab:orange", alpha=0.8, clip_on=False,
                    label=f"CE marked ({len(ce)} packets)")
        ax.set_ylim(bottom=0)
        ax.set_ylabel("packets")
        ax.set_title(f"{iface}{' — ' + labels[iface] if labels.get(iface) else ''}",
                     fontsize="small", loc="left")
        legend_outside(ax)
    axes[-1, 0].set_xlabel("time since run start (s)")
    fig.suptitle("Egress queue occupancy of the hottest ports")
    fig.tight_layout()
    return save(fig, path)


def flow_throughput(series: pd.DataFrame, t0: float, path, top_n: int = TOP_N) -> Path | None:
    """Per-flow throughput (Mbit/s) over time: the top N flows by bytes as lines (the
    rest grey), and with more than 4 flows a heat map of every flow below."""
    if series.empty:
        return None
    total = series.groupby("flow")["mbps"].sum().sort_values(ascending=False)
    top = list(total.index[:top_n])
    # the heat map shows flows with at least 1 % of the bytes (control connections of a
    # few bytes would only add empty rows)
    big = total[total >= 0.01 * total.sum()]
    heat = len(big) > 4
    fig, axes = plt.subplots(2 if heat else 1, 1, squeeze=False, sharex=True,
                             figsize=(10, 4 + (0.25 * len(big) + 1 if heat else 0)),
                             gridspec_kw={"height_ratios": [4, 0.25 * len(big) + 1]}
                             if heat else None)
    ax = axes[0, 0]
    for flow, g in series.groupby("flow"):
        if flow not in top:
            ax.plot(g["t"] - t0, g["mbps"], color="0.75", lw=0.6)
    for flow in top:
        g = series[series["flow"] == flow]
        ax.plot(g["t"] - t0, g["mbps"], lw=1, label=flow)
    if len(total) > top_n:
        ax.plot([], [], color="0.75", label=f"{len(total) - top_n} other flows")
    ax.set_ylim(bottom=0)
    unit = f"Mbit/s, {series.attrs.get('bin_s', 0) * 1000:.0f} ms bins"
    ax.set_ylabel(f"throughput ({unit})")
    ax.set_title(f"Per-flow throughput at the sender ({len(total)} flows)")
    legend_outside(ax)
    if heat:
        hx = axes[1, 0]
        wide = series.pivot_table(index="flow", columns="t", values="mbps", aggfunc="sum")
        wide = wide.reindex(big.index)
        ts = wide.columns.to_numpy() - t0
        step = float(np.median(np.diff(ts))) if len(ts) > 1 else 1.0
        im = hx.imshow(wide.to_numpy(), aspect="auto", interpolation="nearest", cmap="viridis",
                       extent=(ts[0], ts[-1] + step, len(wide) - 0.5, -0.5), vmin=0)
        hx.set_yticks(range(len(wide)), wide.index, fontsize="x-small")
        fig.colorbar(im, ax=hx, label="Mbit/s", fraction=0.03, pad=0.01)
        rest = len(total) - len(big)
        hx.set_title("flows with >= 1 % of the bytes, sorted by bytes"
                     + (f" ({rest} smaller flows not shown)" if rest else ""),
                     fontsize="small", loc="left")
        axes[-1, 0].set_xlabel("time since run start (s)")
    else:
        ax.set_xlabel("time since run start (s)")
    return save(fig, path)


def retrans_timeline(retrans: pd.DataFrame, t0: float, t1: float, path) -> Path | None:
    """Retransmissions over time, stacked by trigger; RTO firings as red lines."""
    if retrans.empty:
        return None
    span = max(t1 - t0, 1e-3)
    bins = np.linspace(0, span, min(100, max(10, int(span / 0.05))) + 1)
    fig, ax = plt.subplots(figsize=(10, 3.5))
    kinds = [k for k in KIND_COLOURS if (retrans["kind"] == k).any()]
    data = [retrans.loc[retrans["kind"] == k, "t"] - t0 for k in kinds]
    ax.hist(data, bins=bins, stacked=True, color=[KIND_COLOURS[k] for k in kinds],
            label=[f"{trigger_name(k, len(d))} ({len(d)})"
                   for k, d in zip(kinds, data, strict=True)])
    rto = retrans[retrans["event"] & (retrans["kind"] == "rto")]
    for i, t in enumerate(rto["t"] - t0):
        ax.axvline(t, color="red", lw=0.6, alpha=0.6,
                   label=f"RTO firings ({len(rto)})" if i == 0 else None)
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel(f"retransmitted packets per {bins[1] * 1000:.0f} ms")
    ax.set_title("Retransmissions by what triggered them")
    legend_outside(ax)
    return save(fig, path)


def iteration_breakdown(iters: pd.DataFrame, path) -> Path | None:
    """Mean compute / communication / waiting per iteration (stacked, seconds) and the
    distribution of iteration times per worker."""
    if iters.empty:
        return None
    it = iters.copy()
    for c in ("compute_s", "comm_s", "wait_s"):
        it[c] = pd.to_numeric(it[c], errors="coerce")
    # PS logs include the server's hold time (wait_s) in comm_s: split it out
    it["transfer_s"] = (it["comm_s"] - it["wait_s"].fillna(0)).clip(lower=0)
    g = it.groupby("iteration")[["compute_s", "transfer_s", "wait_s", "duration_s"]].mean()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [2, 1]})
    bottom = np.zeros(len(g))
    x = g.index.to_numpy()
    for col, colour, label in (("compute_s", "tab:green", "compute"),
                               ("transfer_s", "tab:blue", "communication (excl. waiting)"),
                               ("wait_s", "tab:orange", "waiting (server barrier)")):
        v = g[col].fillna(0).to_numpy(dtype=float)
        if v.any():
            a1.bar(x, v, bottom=bottom, color=colour, label=label, width=0.9)
            bottom += v
    a1.scatter(x, g["duration_s"], marker="_", s=300, color="k", zorder=3,
               label="iteration time (t_end - t_start)")
    if "rtos" in iters:
        hit = iters.groupby("iteration")["rtos"].sum()
        hx = hit[hit > 0].index
        if len(hx):
            a1.scatter(hx, g.loc[hx, "duration_s"] * 1.05, marker="v", color="red",
                       label="iteration with an RTO", zorder=3)
    a1.set_xlabel("iteration")
    a1.xaxis.set_major_locator(MaxNLocator(integer=True))
    a1.set_ylabel("time (s, mean over workers)")
    a1.set_ylim(bottom=0)
    a1.set_title("Where the iteration time went")
    legend_outside(a1)
    ranks = sorted(iters["rank"].dropna().unique(), key=str)
    data = [iters.loc[iters["rank"] == r, "duration_s"].dropna() for r in ranks]
    a2.boxplot(data, tick_labels=[str(r) for r in ranks], showfliers=True)
    a2.set_xlabel("worker rank")
    a2.set_ylabel("iteration time (s)")
    a2.set_ylim(bottom=0)
    a2.set_title("Distribution per worker")
    fig.tight_layout()
    return save(fig, path)


def iteration_timeline(iters: pd.DataFrame, t0: float, path, rto: pd.DataFrame | None = None,
                       drops: pd.DataFrame | None = None, host_ips: dict | None = None
                       ) -> Path | None:
    """Every worker's iterations on one time axis (compute green, communication blue),
    with RTO firings of flows to or from that worker's host (red) and queue drops on
    any port (top strip) — what the network did to each step."""
    if iters.empty:
        return None
    ranks = sorted(iters["rank"].dropna().unique(), key=lambda r: (str(type(r)), r))
    fig, (top, ax) = plt.subplots(2, 1, sharex=True, figsize=(12, 1.2 + 0.45 * len(ranks)),
                                  gridspec_kw={"height_ratios": [1, max(len(ranks), 2)]})
    host_ips = host_ips or {}
    from .pcap import ip_to_int
    for y, r in enumerate(ranks):
        g = iters[iters["rank"] == r]
        s = g["t_start"].to_numpy(float) - t0
        comp = pd.to_numeric(g["compute_s"], errors="coerce").fillna(0).to_numpy(float)
        dur = (g["t_end"] - g["t_start"]).to_numpy(float)
        comp = np.minimum(comp, dur)
        ax.broken_barh(list(zip(s, comp, strict=True)), (y - 0.35, 0.7), color="tab:green")
        ax.broken_barh(list(zip(s + comp, dur - comp, strict=True)), (y - 0.35, 0.7),
                       color="tab:blue")
        for x in s:  # iteration boundaries
            ax.plot([x, x], [y - 0.35, y + 0.35], color="white", lw=0.8)
        if rto is not None and len(rto):
            host = g["host"].dropna().iloc[0] if g["host"].notna().any() else None
            ip = host_ips.get(host)
            mine = rto if ip is None else rto[(rto["src"] == ip_to_int(ip))
                                              | (rto["dst"] == ip_to_int(ip))]
            if len(mine):
                ax.scatter(mine["t"] - t0, np.full(len(mine), y), marker="x", color="red",
                           zorder=3, s=40)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.set_ylim(-0.6, len(ranks) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("time since run start (s)")
    ax.legend(handles=[Patch(color="tab:green", label="compute"),
                       Patch(color="tab:blue", label="communication (incl. waiting)"),
                       plt.Line2D([], [], marker="x", color="red", ls="",
                                  label="RTO fired (this worker's flows)")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    if drops is not None and len(drops):
        d = drops[drops["d_drops"] > 0]
        top.bar(d["t"] - t0, d["d_drops"], width=max(float(d["dt"].median()), 1e-3)
                if len(d) else 0.01, color="tab:red")
    top.set_ylabel("drops\n(packets)", fontsize="small")
    top.set_ylim(bottom=0)
    top.set_title("Iteration timeline with network events", fontsize="medium")
    fig.tight_layout()
    return save(fig, path)


def loss_curve(curve: pd.DataFrame, t0: float, path) -> Path | None:
    """Training loss over time, one line per worker."""
    if curve.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for r, g in curve.groupby("rank"):
        ax.plot(g["t"] - t0, g["loss"], lw=0.9, label=f"rank {r}")
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("training loss")
    ax.set_ylim(bottom=0)
    ax.set_title("Training loss over time")
    legend_outside(ax)
    return save(fig, path)


def spine_balance(per_link: pd.DataFrame, util: pd.DataFrame, t0: float, path) -> Path | None:
    """Bytes per leaf-spine link direction (MB) and utilisation over time (% of rate)."""
    if per_link.empty or per_link["bytes"].notna().sum() == 0:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4))
    p = per_link.sort_values(["spine", "leaf", "direction"])
    labels = [f"{r.leaf}->{r.spine}" if r.direction == "up" else f"{r.spine}->{r.leaf}"
              for r in p.itertuples()]
    colours = ["tab:blue" if d == "up" else "tab:green" for d in p["direction"]]
    a1.bar(range(len(p)), p["bytes"] / 1e6, color=colours)
    a1.set_xticks(range(len(p)), labels, rotation=60, ha="right", fontsize="small")
    a1.set_ylabel("bytes sent (MB)")
    mean = p["bytes"].mean()
    a1.axhline(mean / 1e6, color="k", ls="--", lw=0.8, label="mean")
    ratio = p["bytes"].max() / mean if mean else float("nan")
    a1.set_title(f"Bytes per spine link (max/mean {ratio:.2f}; blue up, green down)")
    a1.legend(fontsize="small")
    if util is not None and not util.empty:
        busiest = (util.groupby("iface")["mbps"].mean().sort_values(ascending=False)
                   .index[:TOP_N])
        for iface in busiest:
            g = util[util["iface"] == iface]
            y = g["utilisation"] * 100 if g["utilisation"].notna().any() else g["mbps"]
            a2.plot(g["t"] - t0, y, lw=0.9, label=iface)
        has_rate = util["utilisation"].notna().any()
        bin_ms = util.attrs.get("bin_s", 0) * 1000
        a2.set_ylabel(("utilisation (% of link rate" if has_rate else "throughput (Mbit/s")
                      + f", {bin_ms:.0f} ms bins)")
        a2.set_xlabel("time since run start (s)")
        a2.set_ylim(bottom=0)
        a2.set_title("Spine link load over time (busiest links)")
        legend_outside(a2)
    else:
        a2.axis("off")
    fig.tight_layout()
    return save(fig, path)


def reconciliation_bars(totals: pd.DataFrame, path) -> Path | None:
    """Each measure's value from each source, side by side."""
    t = totals.dropna(subset=["value"])
    t = t[t["measure"].isin(["packets dropped", "retransmitted segments",
                             "segments resent in fast/SACK recovery",
                             "segments resent after an RTO", "loss recoveries entered",
                             "RTO firings", "tail-loss probes"])]
    if t.empty:
        return None
    fig, ax = plt.subplots(figsize=(12, 4))
    measures = list(dict.fromkeys(t["measure"]))
    width = 0.4
    for i, m in enumerate(measures):
        rows = t[t["measure"] == m].reset_index(drop=True)
        for j, r in rows.iterrows():
            x = i + (j - (len(rows) - 1) / 2) * width
            kernel = r["source"].startswith("kernel") or r["source"].startswith("tc")
            ax.bar(x, r["value"], width=width * 0.95,
                   color="tab:gray" if kernel else "tab:blue")
            ax.text(x, r["value"], f"{r['value']:g}", ha="center", va="bottom",
                    fontsize="x-small")
    # wrapped to the bar group's width: long measure names ran into each other
    ax.set_xticks(range(len(measures)), [textwrap.fill(m, 14) for m in measures],
                  fontsize="small")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)
    ax.legend(handles=[Patch(color="tab:gray", label="counters (tc / kernel)"),
                       Patch(color="tab:blue", label="captures")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    ax.set_ylabel("packets / events (linear to 10, log above)")
    ax.set_title("Reconciliation: counters vs captures")
    return save(fig, path)


PART_COLOURS = {"compute_s": "tab:green", "transfer_at_bound_s": "tab:blue",
                "schedule_s": "tab:cyan", "rto_stall_s": "tab:red",
                "loss_recovery_s": "tab:orange", "straggler_wait_s": "tab:purple",
                "unexplained_s": "tab:gray"}


def stacked_parts(parts: pd.DataFrame, path, xlabel: str = "iteration",
                  title: str = "") -> Path | None:
    """Stacked bars, one per row of `parts` (index = iteration), one colour per column
    (seconds); a negative part (an iteration below its bound) is drawn below zero."""
    if parts.empty:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.6))
    x = np.arange(len(parts))
    pos = np.zeros(len(parts))
    neg = np.zeros(len(parts))
    for col in parts.columns:
        v = parts[col].fillna(0.0).to_numpy(dtype=float)
        bottom = np.where(v >= 0, pos, neg)
        ax.bar(x, v, bottom=bottom, color=PART_COLOURS.get(col, None), width=0.8,
               label=col.removesuffix("_s").replace("_", " "))
        pos += np.where(v >= 0, v, 0)
        neg += np.where(v < 0, v, 0)
    step = max(1, int(np.ceil(len(parts) / 20)))  # at most ~20 labels
    labels = [f"{i:g}" if isinstance(i, float) else str(i) for i in parts.index]
    ax.set_xticks(x[::step], labels[::step], fontsize="small")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds")
    if title:
        ax.set_title(title)
    legend_outside(ax)
    return save(fig, path)


def accuracy_curves(curves: list[tuple[str, pd.DataFrame]], path,
                    target: float | None = None) -> Path | None:
    """Held-out accuracy against seconds since training started (left) and against
    gradients applied (right), one line per (label, curve) (analysis/accuracy.curve);
    runs sharing a label share a colour. The target accuracy as a dashed line."""
    curves = [(label, c) for label, c in curves if c is not None and len(c)]
    if not curves:
        return None
    fig, (ax_t, ax_g) = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    colours: dict[str, str] = {}
    for label, c in curves:
        first = label not in colours
        colour = colours.setdefault(label, f"C{len(colours) % 10}")
        ax_t.plot(c["t_s"], c["accuracy"], marker=".", ms=3, lw=1, color=colour,
                  label=label if first else None)
        ax_g.plot(c["applied"], c["accuracy"], marker=".", ms=3, lw=1, color=colour)
    for ax in (ax_t, ax_g):
        if target is not None:
            ax.axhline(target, color="k", ls="--", lw=0.8)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    ax_t.set_xlabel("time since training started (s)")
    ax_g.set_xlabel("gradients applied")
    ax_t.set_ylabel("held-out accuracy")
    ax_t.set_xlim(left=0)
    ax_g.set_xlim(left=0)
    fig.suptitle("Held-out accuracy" + (f" (dashed: target {target:g})"
                                        if target is not None else ""), fontsize="medium")
    handles, labels = ax_t.get_legend_handles_labels()  # shown beside the right panel
    ax_g.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                fontsize="small", frameon=False)
    return save(fig, path)


def sequence_plot(seq: dict, t0: float, path, title: str,
                  rto_times=None) -> Path | None:
    """tcptrace-style time-sequence graph of one flow at its sender: each data segment
    as a vertical bar from its first to its last byte (MB of the sequence space), the
    retransmitted ones in red, the cumulative ACK as a green step line, RTO firings as
    dashed lines. `seq` is flowroles.sequence_data's dict."""
    if not seq or not len(seq["t"]):
        return None
    fig, ax = plt.subplots(figsize=(10, 4))
    t = seq["t"] - t0
    lo, hi = seq["seq"] / 1e6, (seq["seq"] + seq["len"]) / 1e6
    new = ~seq["retrans"]
    ax.vlines(t[new], lo[new], hi[new], color="tab:blue", lw=1, label="data segment")
    if seq["retrans"].any():
        r = seq["retrans"]
        ax.vlines(t[r], lo[r], hi[r], color="red", lw=2,
                  label=f"retransmitted ({int(r.sum())})")
        ax.scatter(t[r], hi[r], color="red", s=8, zorder=3)
    if len(seq["ack_t"]):
        ok = seq["ack"] >= 0
        ax.step(seq["ack_t"][ok] - t0, seq["ack"][ok] / 1e6, where="post",
                color="tab:green", lw=0.8, label="cumulative ACK")
    for i, x in enumerate(rto_times if rto_times is not None else []):
        ax.axvline(x - t0, color="k", ls="--", lw=0.7, label="RTO fired" if i == 0 else None)
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("sequence number (MB from the flow's start)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize="medium")
    legend_outside(ax)
    return save(fig, path)
