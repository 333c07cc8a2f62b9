"""Compare runs: group by what differs between their spec.toml files, then mean and 95 %
confidence interval (Student t) of headline metrics over the repetitions in a group.

Keys that differ between repetitions of the same point by construction or are only
limits (`run.seed`, `run.name`, `run.out_dir`, `run.repetitions`, `run.description`,
`run.duration_limit_s`, `run.phase_timeout_s`) do not define groups.
Runs whose manifest status is not `complete` are listed but left out of the statistics.
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import metrics, plots
from .render import CSS, _df_html, _img
from .report import _jsonable, analyse

# bookkeeping and limits, not experiment factors
IGNORED_KEYS = {"run.seed", "run.name", "run.out_dir", "run.repetitions", "run.description",
                "run.duration_limit_s", "run.phase_timeout_s"}


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


def flatten(d: dict, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists become tuples (hashable)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = tuple(v) if isinstance(v, list) else v
    return out


def differing_keys(specs: list[dict]) -> list[str]:
    """Dotted spec keys whose values are not the same in every run (ignoring seeds etc.)."""
    flat = [flatten(s) for s in specs]
    keys = sorted(set().union(*flat)) if flat else []
    return [k for k in keys if k not in IGNORED_KEYS and not k.endswith(".seed")
            and len({repr(f.get(k)) for f in flat}) > 1]


def group_label(spec: dict, keys: list[str]) -> str:
    """'policy=ecmp,workers=4' from the differing keys (short names when unambiguous)."""
    if not keys:
        return "all runs"
    flat = flatten(spec)
    short = [k.rsplit(".", 1)[-1] for k in keys]
    names = short if len(set(short)) == len(short) else keys
    return ",".join(f"{n}={_value_text(flat.get(k, '(absent)'))}"
                    for n, k in zip(names, keys, strict=True))


def _value_text(v) -> str:
    if isinstance(v, tuple):
        return "[" + " ".join(_value_text(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + " ".join(f"{k}:{_value_text(x)}" for k, x in v.items()) + "}"
    return str(v)


PREFERRED_AXES = ("workload.senders", "workload.workers", "topology.queue_packets",
                  "workload.rto_min_ms", "workload.model_size")


def sweep_axis(runs: list[dict], keys: list[str]) -> str | None:
    """A numeric differing spec key with at least 3 values, to plot metrics against
    (the preferred ones first: senders, workers, queue size, RTO_min, model size)."""
    def numeric_values(k):
        vals = {flatten(r["spec"]).get(k) for r in runs}
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
        return vals if ok else set()
    order = [k for k in PREFERRED_AXES if k in keys] + [k for k in keys
                                                         if k not in PREFERRED_AXES]
    for k in order:
        if len(numeric_values(k)) >= 3:
            return k
    return None


def _line_table(table, runs, keys, x_key, metric) -> pd.DataFrame:
    """Rows of `table` for one metric with x (the sweep axis value) and series (the other
    differing keys) columns."""
    t = table[table["metric"] == metric]
    if t.empty:
        return pd.DataFrame(columns=["x", "series", "mean", "ci95", "n"])
    others = [k for k in keys if k != x_key]
    info = {}
    for r in runs:
        flat = flatten(r["spec"])
        info[r["group"]] = (flat.get(x_key), group_label(r["spec"], others) if others else "")
    return pd.DataFrame({"x": [info[g][0] for g in t["group"]],
                         "series": [info[g][1] for g in t["group"]],
                         "mean": t["mean"].to_numpy(), "ci95": t["ci95"].to_numpy(),
                         "n": t["n"].to_numpy()})


def _mean_text(mean: float, ci: float) -> str:
    """'20 ± 25'; a CI that is rounding noise of equal values (1e-16) shows as 0."""
    if math.isnan(ci):
        return f"{mean:.4g}"
    return f"{mean:.4g} ± {0.0 if ci <= 1e-9 * max(1.0, abs(mean)) else ci:.2g}"


def headline_table(table: pd.DataFrame, declared: list) -> str:
    """The comparison's headline table: a row per declared metric any group measured
    (label, metrics.json key, unit, mean ± CI per group, meaning)."""
    if table.empty:
        return "<p class='none'>(no complete runs with headline numbers)</p>"
    groups = list(dict.fromkeys(table["group"]))
    cell = {(r.metric, r.group): _mean_text(r.mean, r.ci95)
            for r in table.itertuples(index=False)}
    head = ("<tr><th class='l'>metric (metrics.json key)</th><th class='l'>unit</th>"
            + "".join(f"<th>{html.escape(str(g))}</th>" for g in groups)
            + "<th class='l'>what it means</th></tr>")
    rows = []
    for m in declared:
        if not any((m.name, g) in cell for g in groups):
            continue
        rows.append(f"<tr><th class='l'>{html.escape(m.label)}<br><code>"
                    f"{html.escape(m.name)}</code></th><td class='l'>{html.escape(m.unit)}</td>"
                    + "".join(f"<td class='v'>{html.escape(cell.get((m.name, g), 'n/a'))}</td>"
                              for g in groups)
                    + f"<td class='l'>{html.escape(m.meaning)}</td></tr>")
    return f"<table class='tbl head'>{head}{''.join(rows)}</table>"


def compare_runs(run_dirs, out_dir, include_incomplete: bool = False) -> dict:
    """Compare several run directories; write compare.html, compare.csv, compare.json and
    plots/compare_*.png into `out_dir`.

    Returns {'report': Path, 'table': Path, 'metrics': Path, 'plots': [Path]}. The table
    (long format) has group, metric, unit, n, mean, sd, ci95 (half-width of the 95 % CI).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for rd in run_dirs:
        a = analyse(rd)
        runs.append({"dir": str(rd), "name": Path(rd).name, "status": a.status,
                     "reason": a.reason, "spec": a.spec, "headline": a.metrics["headline"]})
    keys = differing_keys([r["spec"] for r in runs])
    for r in runs:
        r["group"] = group_label(r["spec"], keys)
    used = [r for r in runs if include_incomplete or r["status"] == "complete"]
    declared = metrics.compared()  # the one declared list (metrics.py)
    units = {m.name: m.unit for m in declared}
    rows = []
    for group in dict.fromkeys(r["group"] for r in used):
        members = [r for r in used if r["group"] == group]
        for m in declared:
            stats = mean_ci(r["headline"].get(m.name) for r in members)
            if stats["n"]:
                rows.append({"group": group, "metric": m.name, "unit": m.unit, **stats})
    table = pd.DataFrame(rows, columns=["group", "metric", "unit", "n", "mean", "sd", "ci95"])
    table_path = out / "compare.csv"
    table.to_csv(table_path, index=False)
    figs = []
    x_key = sweep_axis(used, keys)
    for metric in (m.name for m in metrics.plotted() if m.compare):
        unit = units[metric]
        if x_key:  # e.g. goodput vs senders, one line per value of the other factors
            lines = _line_table(table, used, keys, x_key, metric)
            p = plots.compare_lines(lines, x_key.rsplit(".", 1)[-1], metric,
                                    out / "plots" / f"compare_{metric}_vs_"
                                    f"{x_key.rsplit('.', 1)[-1]}.png", unit)
            if p:
                figs.append(p)
        p = plots.compare_bars(table, metric, out / "plots" / f"compare_{metric}.png", unit)
        if p:
            figs.append(p)
    runs_df = pd.DataFrame([{"run": r["name"], "group": r["group"], "status": r["status"],
                             "reason": r["reason"], **{m.name: r["headline"].get(m.name)
                                                       for m in declared}} for r in runs])
    left_out = [r for r in runs if r not in used]
    body = [f"<h1>Comparison of {len(runs)} runs</h1>"]
    if left_out:
        body.append("<div class='banner'>" + html.escape(
            f"{len(left_out)} run(s) did not complete and are left out of the statistics: "
            + ", ".join(f"{r['name']} ({r['status']}{': ' + r['reason'] if r['reason'] else ''})"
                        for r in left_out)) + "</div>")
    body.append("<p>Groups differ in: " + (html.escape(", ".join(keys)) or "nothing (all "
                "runs share one spec apart from seeds)") + ". Means with 95 % confidence "
                "intervals (Student t over repetitions; n = runs in the group).</p>")
    body.append("<h2>Headline metrics (mean ± 95 % CI half-width)</h2>"
                + headline_table(table, declared))
    body += [_img(p, p.stem) for p in figs]
    body.append("<h2>Runs</h2>" + _df_html(runs_df, 500))
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>incastlab comparison"
            f"</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>")
    report = out / "compare.html"
    report.write_text(page)
    mpath = out / "compare.json"
    mpath.write_text(json.dumps(_jsonable({
        "groups_differ_in": keys, "runs": [{k: r[k] for k in ("dir", "group", "status",
                                                              "reason", "headline")}
                                           for r in runs],
        "table": table.to_dict(orient="records")}), indent=2, default=str))
    return {"report": report, "table": table_path, "metrics": mpath, "plots": figs}
