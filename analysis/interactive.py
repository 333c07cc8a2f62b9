"""Interactive figures for report.html: zoom into the 10 ms queue samples, hover a flow
or an iteration. One library, plotly, with its JavaScript inlined once per page
(`script()`), so the report stays one file that opens offline; the PNGs of plots.py
stay for summary.md.

Each function returns an HTML fragment (a <div> and its <script>), or None when there
is nothing to draw, like plots.py. Times are seconds since the run's start.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# no plotly logo link, no "edit in chart studio": nothing on the page points outside
CONFIG = {"displaylogo": False, "responsive": True, "scrollZoom": False,
          "modeBarButtonsToRemove": ["sendDataToCloud"]}
HEIGHT_PER_PORT = 170  # px of one queue's panel
TOP_N = 8


def script() -> str:
    """plotly.js itself, inlined (about 4.8 MB): once per page, before the figures.

    The bundle carries URL strings a report never uses (map tile servers and geo data for
    map traces, licence comments) next to XML namespace names it does use. They are
    written with escaped slashes (`:\\/\\/`, the same string to JavaScript in string
    literals, template literals, regular expressions and comments alike), so that a
    search of report.html for "http://" finds only something the page would fetch:
    nothing (tests/test_report_browser.py checks in Chromium that no request is made)."""
    import plotly.offline

    js = plotly.offline.get_plotlyjs().replace("://", ":\\/\\/")
    return f"<script type='text/javascript'>{js}</script>"


def _html(fig, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, config=CONFIG,
                       div_id=div_id, default_width="100%")


def layout(fig, title: str, height: int) -> None:
    fig.update_layout(title={"text": title, "x": 0.01, "font": {"size": 15}}, height=height,
                      margin={"l": 60, "r": 20, "t": 50, "b": 45}, hovermode="closest",
                      template="plotly_white",
                      legend={"font": {"size": 11}})


MAX_MARKS = 4000  # CE ticks drawn per port in the interactive queue figure


def _mark_trace(fig, row: int, iface: str, x: np.ndarray) -> None:
    import plotly.graph_objects as go

    if not len(x):
        return
    shown = x[np.linspace(0, len(x) - 1, MAX_MARKS).astype(int)] if len(x) > MAX_MARKS else x
    fig.add_trace(go.Scatter(x=shown, y=np.zeros(len(shown)), mode="markers",
                             marker={"symbol": "line-ns-open", "color": "#ff7f0e", "size": 8},
                             name=f"{iface}: CE marked ({len(x)} packets)", hoverinfo="skip",
                             legendgroup=f"ce-{iface}"), row=row, col=1)


def queues(queues_d: pd.DataFrame, ports: list[str], t0: float, limits: dict | None = None,
           labels: dict | None = None, marks: dict | None = None) -> str | None:
    """Backlog (packets) over time of `ports`, one panel each with a shared time axis,
    the queue limit dashed, drops as red markers (hover: how many) and the CE-marked
    packets of `marks` {iface: epoch times} as orange ticks at 0 (at most MAX_MARKS a
    port, evenly thinned; the legend gives the count)."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    if queues_d is None or queues_d.empty or not ports:
        return None
    limits, labels, marks = limits or {}, labels or {}, marks or {}
    fig = make_subplots(rows=len(ports), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[f"{p} — {labels[p]}" if labels.get(p) else p
                                        for p in ports])
    drops_shown = False
    for i, iface in enumerate(ports, start=1):
        g = queues_d[queues_d["iface"] == iface].sort_values("t")
        x = (g["t"] - t0).to_numpy(float)
        fig.add_trace(go.Scatter(x=x, y=g["backlog_pkts"], mode="lines", line_shape="hv",
                                 line={"width": 1, "color": "#1f77b4"}, name="backlog",
                                 legendgroup="backlog", showlegend=i == 1,
                                 hovertemplate="%{x:.3f} s: %{y} packets<extra>" + iface
                                 + "</extra>"), row=i, col=1)
        lim = limits.get(iface)
        if lim:
            fig.add_trace(go.Scatter(x=[x.min(), x.max()] if len(x) else [], y=[lim, lim],
                                     mode="lines", line={"dash": "dash", "color": "black",
                                                         "width": 1},
                                     name="queue limit", legendgroup="limit",
                                     showlegend=i == 1, hoverinfo="skip"), row=i, col=1)
        d = g[g["d_drops"] > 0]
        if len(d):
            top = max(float(g["backlog_pkts"].max()), float(lim or 0), 1.0) * 1.05
            fig.add_trace(go.Scatter(x=(d["t"] - t0).to_numpy(float),
                                     y=np.full(len(d), top), mode="markers",
                                     marker={"symbol": "x", "color": "red", "size": 7},
                                     name="drops", legendgroup="drops",
                                     customdata=d["d_drops"].to_numpy(),
                                     hovertemplate="%{x:.3f} s: %{customdata} dropped"
                                     "<extra>" + iface + "</extra>",
                                     showlegend=not drops_shown), row=i, col=1)
            drops_shown = True
        _mark_trace(fig, i, iface, np.asarray(marks.get(iface, ()), dtype=float) - t0)
        fig.update_yaxes(title_text="packets", rangemode="tozero", row=i, col=1)
    fig.update_xaxes(title_text="time since run start (s)", row=len(ports), col=1)
    layout(fig, "Egress queues of the hottest ports (drag to zoom, double-click to reset)",
            HEIGHT_PER_PORT * len(ports) + 110)
    return _html(fig, "iplot-queues")


def throughput(series: pd.DataFrame, t0: float, top_n: int = TOP_N) -> str | None:
    """Per-flow throughput (Mbit/s) over time, flows named by role (flowroles.relabel
    before calling); the top N flows by bytes shown, the rest a click away in the
    legend."""
    import plotly.graph_objects as go

    if series is None or series.empty:
        return None
    total = series.groupby("flow")["mbps"].sum().sort_values(ascending=False)
    fig = go.Figure()
    for rank, flow in enumerate(total.index):
        g = series[series["flow"] == flow].sort_values("t")
        fig.add_trace(go.Scatter(x=(g["t"] - t0).to_numpy(float), y=g["mbps"], mode="lines",
                                 name=str(flow), line={"width": 1},
                                 visible=True if rank < top_n else "legendonly",
                                 hovertemplate="%{x:.2f} s: %{y:.1f} Mbit/s<extra>"
                                 + str(flow) + "</extra>"))
    bin_ms = series.attrs.get("bin_s", 0) * 1000
    layout(fig, f"Per-flow throughput at the sender ({len(total)} flows; the "
            f"{min(top_n, len(total))} largest shown, click the legend for the others)", 460)
    fig.update_xaxes(title_text="time since run start (s)")
    fig.update_yaxes(title_text=f"Mbit/s ({bin_ms:.0f} ms bins)", rangemode="tozero")
    fig.update_layout(legend={"orientation": "h", "y": -0.2, "x": 0})
    return _html(fig, "iplot-throughput")


def timeline(iters: pd.DataFrame, t0: float, rto: pd.DataFrame | None = None,
             host_ips: dict | None = None, roles: dict | None = None) -> str | None:
    """Every worker's iterations on one time axis: compute (green) then communication
    and waiting (blue), one row per rank; RTO firings of the rank's host's flows as red
    crosses. Hover an iteration for its number and times."""
    import plotly.graph_objects as go

    from .pcap import ip_to_int

    if iters is None or iters.empty:
        return None
    host_ips, roles = host_ips or {}, roles or {}
    ranks = sorted(iters["rank"].dropna().unique(), key=lambda r: (str(type(r)), r))
    names = {}
    for r in ranks:
        host = iters.loc[iters["rank"] == r, "host"].dropna()
        h = str(host.iloc[0]) if len(host) else ""
        names[r] = f"rank {r}" + (f" ({h})" if h else "")
    fig = go.Figure()
    for part, colour in (("compute", "#2ca02c"), ("communication", "#1f77b4")):
        xs, bases, ys, text = [], [], [], []
        for r in ranks:
            g = iters[iters["rank"] == r]
            start = g["t_start"].to_numpy(float) - t0
            dur = (g["t_end"] - g["t_start"]).to_numpy(float)
            comp = np.minimum(pd.to_numeric(g["compute_s"], errors="coerce").fillna(0)
                              .to_numpy(float), dur)
            length, base = (comp, start) if part == "compute" else (dur - comp, start + comp)
            xs += list(length)
            bases += list(base)
            ys += [names[r]] * len(g)
            text += [f"iteration {int(i)}: {s:.3f}–{s + d:.3f} s ({d:.3f} s, compute "
                     f"{c * 1000:.1f} ms)" for i, s, d, c in zip(
                         g["iteration"], start, dur, comp, strict=True)]
        fig.add_trace(go.Bar(x=xs, base=bases, y=ys, orientation="h", name=part,
                             marker={"color": colour, "line": {"width": 0.5,
                                                               "color": "white"}},
                             hovertext=text, hoverinfo="text"))
    if rto is not None and len(rto):
        xs, ys = [], []
        for r in ranks:
            host = iters.loc[iters["rank"] == r, "host"].dropna()
            ip = host_ips.get(str(host.iloc[0])) if len(host) else None
            if ip is None:
                continue
            mine = rto[(rto["src"] == ip_to_int(ip)) | (rto["dst"] == ip_to_int(ip))]
            xs += list(mine["t"] - t0)
            ys += [names[r]] * len(mine)
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="RTO fired",
                                     marker={"symbol": "x", "color": "red", "size": 10},
                                     hovertemplate="RTO at %{x:.3f} s<extra></extra>"))
    layout(fig, "Iteration timeline (hover an iteration; drag to zoom)",
            140 + 38 * len(ranks))
    fig.update_layout(barmode="overlay", bargap=0.3)
    fig.update_yaxes(autorange="reversed", categoryorder="array",
                     categoryarray=[names[r] for r in ranks])
    fig.update_xaxes(title_text="time since run start (s)")
    return _html(fig, "iplot-timeline")
