"""The answer compare.html opens with: what each group's iteration is made of and what
the difference between groups is made of (findings.compare_cost, the sentences the
terminal prints), and the headline ratios of each group against the fastest one
("4.31× slower").

The ratios are of group means (compare's long table: group, metric, mean); a ratio is
given only where both groups measured the metric and neither mean is 0."""
from __future__ import annotations

import html

import pandas as pd

from .metrics import COUNT_UNITS, significant

__all__ = ["BASELINE_METRIC", "SAME", "answer_html", "baseline_group", "ratio_rows",
           "ratio_text"]

# the metric that picks the baseline group (the fastest) and heads the ratios
BASELINE_METRIC = "iteration_time_mean_s"
# ratios within this of 1 read "the same": 3 significant digits cannot tell them apart
SAME = 0.005
# (larger, smaller) words by what a metric is
_TIME_OF_A_STEP = ("slower", "faster")
_DURATION = ("longer", "shorter")
_COUNT = ("as many", "fewer")
_LEVEL = ("higher", "lower")


def _words(metric) -> tuple[str, str]:
    if metric.name.startswith(("iteration_time", "step_time")):
        return _TIME_OF_A_STEP
    if metric.unit in ("s", "ms"):
        return _DURATION
    if metric.unit in COUNT_UNITS:
        return _COUNT
    return _LEVEL


def ratio_text(metric, value, base) -> str | None:
    """'4.31× slower', '12× as many', 'the same': `value` against `base` (group means);
    None where there is no ratio (a value missing, or 0 on either side)."""
    if value is None or base is None or pd.isna(value) or pd.isna(base):
        return None
    if value == 0 and base == 0:
        return "the same (0)"
    if value == 0 or base == 0 or (value < 0) != (base < 0):
        return None
    r = value / base
    if abs(r - 1) < SAME:
        return "the same"
    more, less = _words(metric)
    return f"{significant(r)}× {more}" if r > 1 else f"{significant(1 / r)}× {less}"


def _means(table: pd.DataFrame) -> dict:
    return {(r["group"], r["metric"]): r["mean"] for r in table.to_dict("records")}


def baseline_group(table: pd.DataFrame) -> str | None:
    """The group the others are compared to: the least mean iteration time; the first
    group where no group has one."""
    if table.empty:
        return None
    t = table[table["metric"] == BASELINE_METRIC].dropna(subset=["mean"])
    return str(t.loc[t["mean"].idxmin(), "group"]) if len(t) else str(table["group"].iloc[0])


def ratio_rows(table: pd.DataFrame, declared: list) -> list[dict]:
    """One row per CLI metric (metrics.py's `cli`) and group other than the baseline that
    both measured: {group, baseline, metric (the Metric), value, base, ratio (text)}.
    The baseline metric first."""
    base = baseline_group(table)
    if base is None:
        return []
    means = _means(table)
    groups = [g for g in dict.fromkeys(table["group"]) if g != base]
    shown = sorted((m for m in declared if m.cli), key=lambda m: m.name != BASELINE_METRIC)
    rows = []
    for g in groups:
        for m in shown:
            v, b = means.get((g, m.name)), means.get((base, m.name))
            text = ratio_text(m, v, b)
            if text is not None:
                rows.append({"group": g, "baseline": base, "metric": m, "value": v,
                             "base": b, "ratio": text})
    return rows


def _lead(rows: list[dict]) -> list[str]:
    """'kind=ps: mean iteration time 4.31× slower than kind=ring (2.45 s against 0.568
    s).' for each group's first ratio (the baseline metric where measured)."""
    out, seen = [], set()
    for r in rows:
        if r["group"] in seen:
            continue
        seen.add(r["group"])
        m = r["metric"]
        than = "as" if r["ratio"].startswith("the same") else "than"
        out.append(f"{r['group']}: {m.label} {r['ratio']} {than} {r['baseline']} "
                   f"({m.text_with_unit(r['value'])} against {m.text_with_unit(r['base'])}).")
    return out


def answer_html(sentences: list[str], rows: list[dict]) -> str:
    """The box at the top of compare.html: the lead ratio per group, the cost sentences,
    then the table of headline ratios."""
    lines = _lead(rows) + list(sentences)
    if not lines:
        return ""
    body = "".join(f"<li>{html.escape(s)}</li>" for s in lines)
    table = ""
    if rows:
        head = ("<tr><th class='l'>group</th><th class='l'>metric</th><th>group's mean</th>"
                "<th>baseline's mean</th><th class='l'>ratio</th></tr>")
        table = ("<div class='wide'><table class='tbl'>" + head + "".join(
            f"<tr><td class='l'>{html.escape(r['group'])}</td><td class='l'>"
            f"{html.escape(r['metric'].label)}</td>"
            f"<td>{html.escape(r['metric'].text_with_unit(r['value']))}</td>"
            f"<td>{html.escape(r['metric'].text_with_unit(r['base']))}</td>"
            f"<td class='l'><b>{html.escape(r['ratio'])}</b></td></tr>" for r in rows)
            + "</table></div><p class='note'>Ratios of group means against "
            f"{html.escape(rows[0]['baseline'])} (the group with the least mean iteration "
            "time, else the first); a metric either group did not measure, or measured as "
            "0, has none.</p>")
    return (f"<div class='findings answer' id='answer'><h2>The answer</h2><ul>{body}</ul>"
            f"{table}</div>")
