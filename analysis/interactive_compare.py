"""The interactive figure of compare.html: each compared metric per group, every run a
point (hover: run, value, its report; click: open the report), the group's mean beside
it and, with three or more runs, its 95 % interval. A menu picks the metric.

It follows compare.py's rules, with compare's own numbers (its long table): with fewer
than MIN_N_FOR_CI runs a group shows its points and their mean, no interval; intervals
of quantities that cannot be negative stop at 0 (the table's `lo`); every axis holds 0,
as in compare's PNGs, so nothing is drawn below 0 unless a value is; a metric that is 0
in every run gets no plot (compare says so in a sentence).
Same library and inlining as report.html (interactive.py): plotly, its JavaScript once
per page from `interactive.script()`, nothing fetched.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .interactive import CONFIG, layout

DIV_ID = "iplot-compare"
JITTER = 0.08  # half-width (in group slots) over which a group's points are spread
MEAN_OFFSET = 0.2  # the mean and its interval sit right of the points, not on them

# a click on a run's point opens its report (relative link; nothing outside the page)
CLICK_JS = """var gd = document.getElementById('{plot_id}');
gd.on('plotly_click', function (d) {
  var c = d.points[0].customdata;
  if (c && c[1]) { window.location.href = c[1]; }
});"""


def _value(x) -> float | None:
    """A run's headline value as a finite float, else None (compare's _finite rule)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def run_points(runs: list[dict], metric_names: list[str], links: dict) -> pd.DataFrame:
    """One row per (metric, run) with a finite value: metric, group, run (its name),
    value and link (its report.html relative to compare.html, '' when not built).
    `runs` are compare's run dicts (group, name, dir, headline); `links` maps a run's
    dir to its link. These are the points of the figure, the same values compare's
    table summarises."""
    rows = []
    for m in metric_names:
        for r in runs:
            v = _value((r.get("headline") or {}).get(m))
            if v is not None:
                rows.append({"metric": m, "group": r["group"], "run": r["name"], "value": v,
                             "link": links.get(r["dir"]) or ""})
    return pd.DataFrame(rows, columns=["metric", "group", "run", "value", "link"])


def drawable(points: pd.DataFrame, order: list[str]) -> tuple[list[str], list[str]]:
    """(metrics to draw in `order`, metrics left out because every run measured 0)."""
    drawn, zero = [], []
    for m in order:
        v = points.loc[points["metric"] == m, "value"]
        if v.empty:
            continue
        (zero if (v == 0).all() else drawn).append(m)
    return drawn, zero


def metric_traces(points: pd.DataFrame, table: pd.DataFrame, metric: str, groups: list[str],
                  unit: str, text) -> list[dict]:
    """Two traces of one metric as plain dicts (plotly's Scatter arguments): 'points',
    every run at x = its group's slot (spread by JITTER), and 'mean', each group's mean
    at slot + MEAN_OFFSET with error bars to the table's lo/hi where it has an interval
    (n >= MIN_N_FOR_CI), none otherwise. `text(stats)` writes a group's value as compare's
    table does (compare.cell_text)."""
    p = points[points["metric"] == metric]
    xs, ys, custom = [], [], []
    slot = {g: i for i, g in enumerate(groups)}
    for g, grp in p.groupby("group", sort=False):
        k = len(grp)
        offs = np.linspace(-JITTER, JITTER, k) if k > 1 else np.zeros(1)
        xs += list(slot[g] + offs)
        ys += list(grp["value"])
        custom += [[r, link, g, f"report: {link} (click the point)" if link else
                    "no report.html"] for r, link in zip(grp["run"], grp["link"], strict=True)]
    u = f" {unit}" if unit else ""
    pts = {"name": "each run", "x": xs, "y": ys, "mode": "markers", "customdata": custom,
           "marker": {"color": "#d62728", "size": 9, "line": {"width": 1, "color": "white"}},
           "hovertemplate": "<b>%{customdata[0]}</b><br>%{customdata[2]}<br>"
           "%{y:.4g}" + u + "<br>%{customdata[3]}<extra></extra>"}
    t = table[table["metric"] == metric].set_index("group")
    mx, my, up, down, texts = [], [], [], [], []
    for g in groups:
        if g not in t.index:
            continue
        s = t.loc[g]
        stats = {k: s[k] for k in ("n", "mean", "sd", "ci95", "lo", "hi", "values")}
        interval = math.isfinite(float(s["ci95"]))
        mx.append(slot[g] + MEAN_OFFSET)
        my.append(float(s["mean"]))
        # error bars only where the group has an interval; lo is already clipped at 0
        up.append(float(s["hi"]) - float(s["mean"]) if interval else None)
        down.append(float(s["mean"]) - float(s["lo"]) if interval else None)
        texts.append(f"{g}: n = {int(s['n'])}<br>" + (
            f"mean and 95 % CI: {text(stats)}" if interval else
            f"mean {s['mean']:.4g} (each run: {text(stats)}; fewer than 3 runs: no interval)")
            + u)
    mean = {"name": "group mean (95 % CI where n ≥ 3)", "x": mx, "y": my, "mode": "markers",
            "marker": {"symbol": "line-ew-open", "size": 22, "color": "black",
                       "line": {"width": 2}},
            "error_y": {"type": "data", "symmetric": False, "array": up, "arrayminus": down,
                        "color": "black", "thickness": 1.5, "width": 6},
            "hovertext": texts, "hoverinfo": "text"}
    return [pts, mean]


def figure(table: pd.DataFrame, points: pd.DataFrame, declared: list,
           text) -> tuple[str | None, list[str]]:
    """compare.html's interactive figure and the metrics left out as all-zero.

    `table`: compare's long table (group, metric, n, mean, ci95, lo, hi, values);
    `points`: run_points(); `declared`: the compared Metric list (its order; plotted
    ones first in the menu); `text(stats, fmt)`: compare.cell_text.
    Returns (HTML fragment or None, [all-zero metrics])."""
    import plotly.graph_objects as go

    if table.empty or points.empty:
        return None, []
    by_name = {m.name: m for m in declared}
    order = [m.name for m in declared if m.plot] + [m.name for m in declared if not m.plot]
    drawn, zero = drawable(points, [m for m in order if (table["metric"] == m).any()])
    if not drawn:
        return None, zero
    groups = list(dict.fromkeys(table["group"]))
    fig = go.Figure()
    buttons = []
    for i, name in enumerate(drawn):
        m = by_name[name]
        for tr in metric_traces(points, table, name, groups, m.unit,
                                lambda s, m=m: text(s, m.text)):
            fig.add_trace(go.Scatter(**tr, visible=i == 0, legendgroup=tr["name"]))
        visible = [j // 2 == i for j in range(2 * len(drawn))]
        ytitle = f"{m.label}" + (f" ({m.unit})" if m.unit else "")
        buttons.append({"label": ytitle, "method": "update",
                        "args": [{"visible": visible},
                                 {"yaxis.title.text": ytitle}]})
    n_per = [int(table[table["group"] == g]["n"].max()) for g in groups]
    layout(fig, "Each metric per group: every run a point (hover for its name, click to "
            "open its report); the group's mean, with its 95 % CI where n ≥ 3", 480)
    fig.update_layout(
        updatemenus=[{"buttons": buttons, "direction": "down", "x": 0.0, "xanchor": "left",
                      "y": 1.0, "yanchor": "bottom", "showactive": True,
                      "pad": {"t": 4, "b": 4}}],
        margin={"t": 95}, legend={"orientation": "h", "y": -0.25, "x": 0})
    fig.update_xaxes(tickvals=list(range(len(groups))), range=[-0.5, len(groups) - 0.5],
                     ticktext=[f"{g}<br>(n = {n})" for g, n in zip(groups, n_per, strict=True)])
    fig.update_yaxes(title_text=buttons[0]["label"], zeroline=True, rangemode="tozero")
    html = fig.to_html(full_html=False, include_plotlyjs=False, config=CONFIG,
                       div_id=DIV_ID, default_width="100%", post_script=CLICK_JS)
    return html, zero
