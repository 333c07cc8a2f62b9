"""Compare runs: group by what differs between their spec.toml files, then each group's
headline metrics over its repetitions.

A group's statistics (mean and 95 % CI from three runs, each run's value below that,
intervals of non-negative quantities stopped at 0) are groupstats.py's; the "can these
be compared?" box (routing balance, fidelity, capture drops, code version and
machine) is confounds.py's. Every run is listed with a link to its report; the same run
given twice is refused.

Keys that differ between repetitions of the same point by construction or are only
limits (`run.seed`, `run.name`, `run.out_dir`, `run.repetitions`, `run.description`,
`run.duration_limit_s`, `run.phase_timeout_s`) do not define groups.
Runs whose manifest status is not `complete` are listed but left out of the statistics.
"""
from __future__ import annotations

import html
import json
import os
from pathlib import Path

import pandas as pd

from . import accuracy, compare_answer, compare_plots, interactive, metrics
from . import interactive_compare as ic
from . import multijob as mj
from .findings import compare_cost
from .confounds import BALANCE_RATIO, Confound, confounds, confounds_html
from .groupstats import MIN_N_FOR_CI, cell_text, group_stats, mean_ci, t975
from .render import CSS, img
from .reading import jsonable
from .report import analyse

__all__ = ["BALANCE_RATIO", "IGNORED_KEYS", "MIN_N_FOR_CI", "NONNEG_UNITS",
           "PREFERRED_AXES", "Confound", "DuplicateRunError", "cell_text", "check_distinct",
           "compare_runs", "confounds", "confounds_html", "differing_keys", "fabrics_html",
           "flatten", "group_label", "group_stats", "headline_table", "mean_ci", "runs_html",
           "sweep_axis", "t975"]

# bookkeeping and limits, not experiment factors
IGNORED_KEYS = {"run.seed", "run.name", "run.out_dir", "run.repetitions", "run.description",
                "run.duration_limit_s", "run.phase_timeout_s"}

# units of quantities that cannot be negative: their intervals stop at 0
NONNEG_UNITS = set(metrics.COUNT_UNITS) | {"Mbit/s", "fraction", "bytes", "versions", "ms"}


class DuplicateRunError(ValueError):
    """The same run was given twice (it would count as two repetitions)."""



def check_distinct(run_dirs) -> None:
    """Refuse the same run given twice: by its resolved path, or a copy of it (the same
    manifest start time, host and pid, and the same spec.toml). Raises DuplicateRunError
    naming both."""
    seen: dict = {}
    for rd in run_dirs:
        path = Path(rd).resolve()
        ident = [("path", str(path))]
        try:
            man = json.loads((path / "manifest.json").read_text())
        except (OSError, ValueError):
            man = {}
        if isinstance(man, dict) and man.get("start") is not None:
            try:  # a copy also has the same spec; two real runs never share a start
                spec = (path / "spec.toml").read_text()
            except OSError:
                spec = None
            ident.append(("run", (man.get("start"), man.get("host"), man.get("pid"), spec)))
        for key in ident:
            if key in seen:
                raise DuplicateRunError(
                    f"{rd} is the same run as {seen[key]}"
                    + (" (a copy: same manifest start, host, pid and spec)" if key[0] == "run"
                       else "") + "; a run counted twice would fake a repetition")
            seen[key] = rd


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
    cols = ["x", "series", "mean", "ci95", "lo", "hi", "n", "values"]
    t = table[table["metric"] == metric]
    if t.empty:
        return pd.DataFrame(columns=cols)
    others = [k for k in keys if k != x_key]
    info = {}
    for r in runs:
        flat = flatten(r["spec"])
        info[r["group"]] = (flat.get(x_key), group_label(r["spec"], others) if others else "")
    return pd.DataFrame({"x": [info[g][0] for g in t["group"]],
                         "series": [info[g][1] for g in t["group"]],
                         **{c: t[c].to_numpy() for c in cols[2:]}})


def headline_table(table: pd.DataFrame, declared: list) -> str:
    """The comparison's headline table: a row per declared metric any group measured
    (label, metrics.json key, unit, each group's value, meaning). A group's value is
    'mean ± CI' with three or more runs, else each run's value (cell_text)."""
    if table.empty:
        return "<p class='none'>(no complete runs with headline numbers)</p>"
    groups = list(dict.fromkeys(table["group"]))
    n = table.groupby("group")["n"].max()
    by_name = {m.name: m for m in declared}
    cell = {(r["metric"], r["group"]): cell_text(r, by_name[r["metric"]].text
                                                 if r["metric"] in by_name else None)
            for r in table.to_dict(orient="records")}
    head = ("<tr><th class='l'>metric (metrics.json key)</th><th class='l'>unit</th>"
            + "".join(f"<th>{html.escape(str(g))}<br><span class='none'>n = {n[g]}</span>"
                      "</th>" for g in groups)
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
    return f"<div class='wide'><table class='tbl head'>{head}{''.join(rows)}</table></div>"


def _run_link(run_dir: Path, out: Path) -> str | None:
    """The run's report.html relative to the comparison's directory (None: not built)."""
    rep = Path(run_dir) / "report.html"
    return os.path.relpath(rep.resolve(), out.resolve()) if rep.exists() else None


def runs_html(runs: list[dict], declared: list, out: Path) -> str:
    """Every run: its name linked to its report, group, status and its CLI metrics
    (the full table is runs.csv beside compare.html)."""
    shown = [m for m in declared if m.cli and any(
        (r["headline"] or {}).get(m.name) is not None for r in runs)]
    head = ("<tr><th class='l'>run</th><th class='l'>group</th><th class='l'>status</th>"
            + "".join(f"<th>{html.escape(m.label)}"
                      + (f" ({html.escape(m.unit)})" if m.unit else "") + "</th>"
                      for m in shown) + "</tr>")
    rows = []
    for r in runs:
        link = _run_link(Path(r["dir"]), out)
        name = html.escape(r["name"])
        name = f"<a href='{html.escape(link)}'>{name}</a>" if link else \
            f"{name} <span class='none'>(no report.html)</span>"
        status = r["status"] + (f": {r['reason']}" if r["reason"] else "")
        rows.append(f"<tr><td class='l'>{name}</td><td class='l'>{html.escape(r['group'])}"
                    f"</td><td class='l'>{html.escape(status)}</td>"
                    + "".join(f"<td>{html.escape(m.text((r['headline'] or {}).get(m.name)))}"
                              "</td>" for m in shown) + "</tr>")
    return (f"<div class='wide'><table class='tbl'>{head}{''.join(rows)}</table></div>"
            "<p>Every headline number of every run: <a href='runs.csv'>runs.csv</a>; each "
            "group's statistics: <a href='compare.csv'>compare.csv</a>.</p>")


def _damaged_inputs(r: dict) -> str:
    """'queues.csv truncated, pcap/h1-eth0.pcap missing' from a run's analysis.inputs."""
    ins = (r.get("inputs") or {}).get("inputs") or {}
    return ", ".join(f"{k} {v.get('state')}" for k, v in ins.items()
                     if v.get("expected") and v.get("state") != "ok")


def _all_zero(table: pd.DataFrame, metric: str) -> bool:
    vals = [v for vs in table.loc[table["metric"] == metric, "values"] for v in vs]
    return bool(vals) and all(v == 0 for v in vals)


def _load_runs(run_dirs, jobs=None) -> list[dict]:
    runs = []
    for rd in run_dirs:
        a = analyse(rd, jobs=jobs)
        runs.append({"dir": str(rd), "name": Path(rd).name, "status": a.status,
                     "reason": a.reason, "spec": a.spec, "manifest": a.manifest,
                     "headline": a.metrics["headline"], "analysis": a,
                     "headline_na": a.metrics.get("headline_na") or {},
                     "fidelity": a.metrics.get("fidelity"),
                     "inputs": a.metrics.get("analysis") or {}})
    return runs


def compare_runs(run_dirs, out_dir, include_incomplete: bool = False, jobs=None) -> dict:
    """Compare several run directories; write compare.html, compare.csv, runs.csv,
    compare.json and plots/compare_*.png into `out_dir`.

    Returns {'report': Path, 'table': Path, 'metrics': Path, 'plots': [Path],
    'confounds': [Confound]}. The table (long format) has group, metric, unit, n, mean,
    sd, ci95 (half-width of the 95 % CI; empty when n < 3), lo, hi (the interval, lo
    clipped at 0 for quantities that cannot be negative) and values (each run's value,
    ';'-separated). Raises DuplicateRunError when a run is given twice. `jobs`: the
    job registry the command hands in (report.analyse).
    """
    check_distinct(run_dirs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = _load_runs(run_dirs, jobs)
    keys = differing_keys([r["spec"] for r in runs])
    for r in runs:
        r["group"] = group_label(r["spec"], keys)
    keys = mj.regroup(runs, keys)  # [[jobs]]: jobs=together / alone-<i>, not the array
    used = [r for r in runs if include_incomplete or r["status"] == "complete"]
    declared = metrics.compared(jobs)  # the one declared list (metrics.py)
    table = _group_table(used, declared)
    table_path = out / "compare.csv"
    table.assign(values=[";".join(f"{v:g}" for v in vs) for vs in table["values"]]
                 ).to_csv(table_path, index=False)
    pd.DataFrame([{"run": r["name"], "dir": r["dir"], "group": r["group"],
                   "status": r["status"], "reason": r["reason"],
                   **{m.name: r["headline"].get(m.name) for m in declared}} for r in runs]
                 ).to_csv(out / "runs.csv", index=False)
    figs, not_drawn, sweeps = _draw_pngs(table, used, keys, declared, out, jobs)
    # the interactive figure: every compared metric per group, each run a point linked
    # to its report (interactive_compare.py); the PNGs above stay as files
    links = {r["dir"]: _run_link(Path(r["dir"]), out) for r in used}
    iplot, zero = ic.figure(table, ic.run_points(used, [m.name for m in declared], links),
                            declared, cell_text)
    zeros, not_drawn = list(dict.fromkeys([*not_drawn, *zero])), []
    checks = confounds(used)
    # time to accuracy, where the runs logged held-out evaluations (analysis/accuracy.py)
    tta_html, tta_figs, tta = accuracy.compare_section(
        [{**accuracy.run_inputs(r["analysis"]), "group": r["group"], "spec": r["spec"]}
         for r in used], out)
    if tta.get("left_out"):
        not_drawn.append(tta["left_out"])
    # [[jobs]]: each job's iteration time together / alone (analysis/multijob.py)
    jobs_html, jobs_slow = mj.compare_section(used, out)
    # the answer first: what the time went to, per group and between groups, and ratios
    answer = compare_cost([{"dir": r["dir"], "group": r["group"],
                            "cost": r["analysis"].metrics.get("cost")} for r in used])
    ratios = compare_answer.ratio_rows(table, declared)
    body = [f"<h1>Comparison of {len(runs)} runs</h1>", *_banners(runs, used),
            compare_answer.answer_html(answer, ratios)]
    body.append("<p>Groups differ in: " + (html.escape(", ".join(keys)) or "nothing (all "
                "runs share one spec apart from seeds)") + f". With {MIN_N_FOR_CI} or more "
                "runs in a group: mean ± half-width of the 95 % confidence interval (Student "
                "t; [low, high] where the interval stops at 0); with fewer, each run's value."
                "</p>")
    body.append(confounds_html(checks))
    body.append(tta_html)
    body.append(jobs_html)
    body.append("<h2>Headline metrics</h2>" + headline_table(table, declared))
    body.append(fabrics_html(used))
    body.append("<h2>Plots</h2>" + _plots_html(iplot, figs, sweeps))
    if zeros or not_drawn:
        body.append("<p class='none' id='not-drawn'>" + html.escape(
            not_drawn_text(zeros, declared, not_drawn)) + "</p>")
    body.append("<h2>Runs</h2>" + runs_html(runs, declared, out))
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>incastlab comparison"
            f"</title><style>{CSS}{COMPARE_CSS}</style>"
            + (interactive.script() if iplot else "")  # plotly.js once, only if drawn
            + f"</head><body>{''.join(body)}"
            "</body></html>")
    report = out / "compare.html"
    report.write_text(page)
    mpath = out / "compare.json"
    mpath.write_text(_compare_json(keys, runs, checks, tta, jobs_slow, table, answer))
    return {"report": report, "table": table_path, "metrics": mpath, "plots": figs + tta_figs,
            "confounds": checks}


def _group_table(used: list[dict], declared: list) -> pd.DataFrame:
    """The long table: one row per group and declared metric the group measured."""
    rows = []
    for group in dict.fromkeys(r["group"] for r in used):
        members = [r for r in used if r["group"] == group]
        for m in declared:
            stats = group_stats((r["headline"].get(m.name) for r in members),
                                nonneg=m.unit in NONNEG_UNITS)
            if stats["n"]:
                rows.append({"group": group, "metric": m.name, "unit": m.unit, **stats})
    cols = ["group", "metric", "unit", "n", "mean", "sd", "ci95", "lo", "hi", "values"]
    return pd.DataFrame(rows, columns=cols)


def not_drawn_text(zeros: list[str], declared: list, reasons: list[str]) -> str:
    """'Not drawn, being 0 in every run: RTO firings (rtos), ...' in the metrics' own
    words (their metrics.json keys in brackets), then any other reason."""
    names = {m.name: m.label for m in declared}
    said = ["Not drawn, being 0 in every run: " + ", ".join(
        f"{names.get(z, z)} ({z})" for z in zeros) + "."] if zeros else []
    return " ".join(said + [r[0].upper() + r[1:] + ("" if r.endswith(".") else ".")
                            for r in reasons if r])


def _draw_pngs(table, used, keys, declared, out: Path, jobs=None) -> tuple[list, list, list]:
    """plots/compare_*.png of every plotted metric: bars per group, and lines along the
    sweep axis when there is one. Returns (figures, the metrics not drawn for being 0 in
    every run, the line plots among the figures: they have no interactive twin)."""
    units = {m.name: m.unit for m in declared}
    figs, not_drawn, sweeps = [], [], []
    x_key = sweep_axis(used, keys)
    for metric in (m.name for m in metrics.plotted(jobs) if m.compare):
        unit = units[metric]
        if table.empty or not (table["metric"] == metric).any():
            continue
        if _all_zero(table, metric):  # a plot of nothing but zeros says less than this
            not_drawn.append(metric)
            continue
        if x_key:  # e.g. goodput vs senders, one line per value of the other factors
            lines = _line_table(table, used, keys, x_key, metric)
            p = compare_plots.compare_lines(lines, x_key.rsplit(".", 1)[-1], metric,
                                    out / "plots" / f"compare_{metric}_vs_"
                                    f"{x_key.rsplit('.', 1)[-1]}.png", unit)
            if p:
                figs.append(p)
                sweeps.append(p)
        p = compare_plots.compare_bars(table, metric, out / "plots" / f"compare_{metric}.png", unit)
        if p:
            figs.append(p)
    return figs, not_drawn, sweeps


def _banners(runs: list[dict], used: list[dict]) -> list[str]:
    """The page's warnings: runs left out of the statistics, runs analysed without some
    of their inputs."""
    out = []
    left_out = [r for r in runs if r not in used]
    if left_out:
        out.append("<div class='banner'>" + html.escape(
            f"{len(left_out)} run(s) did not complete and are left out of the statistics: "
            + ", ".join(f"{r['name']} ({r['status']}{': ' + r['reason'] if r['reason'] else ''})"
                        for r in left_out)) + "</div>")
    partial = [r for r in used if r["inputs"].get("complete") is False]
    if partial:  # their n/a metrics are left out of the means, never counted as 0
        out.append("<div class='banner' id='partial-runs'>" + html.escape(
            f"{len(partial)} run(s) were analysed without some of their inputs; the metrics "
            "those inputs feed are n/a there and left out of the statistics (n counts the "
            "runs that measured them): " + "; ".join(
                f"{r['name']} ({_damaged_inputs(r)})" for r in partial)) + "</div>")
    return out


def _plots_html(iplot: str | None, figs: list, sweeps: list) -> str:
    """The interactive figure and the sweep lines, the per-group PNGs folded away; every
    PNG when there is no interactive figure."""
    return (iplot or "") + (
        "".join(img(p, p.stem) for p in figs) if not iplot else
        "".join(img(p, p.stem) for p in sweeps)
        + "<details><summary>The same per-group plots as PNG images (plots/compare_*.png)"
        "</summary>" + "".join(img(p, p.stem) for p in figs if p not in sweeps)
        + "</details>")


def _compare_json(keys, runs, checks, tta, jobs_slow, table, answer) -> str:
    """compare.json's text; `answer`: the sentences the page opens with (the terminal
    prints them)."""
    return json.dumps(jsonable({
        "groups_differ_in": keys, "answer": answer,
        "runs": [{**{k: r[k] for k in ("dir", "group", "status", "reason", "headline",
                                       "headline_na")},
                  "analysis_complete": r["inputs"].get("complete")} for r in runs],
        "confounds": [{"check": c.check, "differs": c.differs, "text": c.text}
                      for c in checks],
        "time_to_accuracy": tta,
        "jobs_slowdown": jobs_slow,
        "table": table.to_dict(orient="records")}), indent=2, default=str)


def fabrics_html(runs: list[dict]) -> str:
    """The fabric picture (fabricpic.py) of each group's run with the most queue drops
    (its first run when none dropped), side by side."""
    from . import fabricpic
    from . import flowroles as fr

    cells = []
    for group in dict.fromkeys(r["group"] for r in runs):
        members = [r for r in runs if r["group"] == group and r.get("analysis") is not None]
        if not members:
            continue
        pick = max(members, key=lambda r: (r["headline"].get("tc_drops") or 0))
        a = pick["analysis"]
        try:
            svg = fabricpic.fabric_svg(a.fabric, a.tables.get("queue_summary"),
                                       fr.host_roles(a.manifest))
        except Exception as exc:  # noqa: BLE001 - a drawing bug must not cost the page
            svg = f"<p class='none'>(no picture: {html.escape(repr(exc))})</p>"
        cells.append(f"<div class='fab'><h3>{html.escape(group)}</h3><p class='none'>run "
                     f"{html.escape(pick['name'])} (the group's most queue drops)</p>{svg}</div>")
    if not cells:
        return ""
    return "<h2>The fabric, one run per group</h2><div class='fabs'>" + "".join(cells) + \
        "</div>"


COMPARE_CSS = """.fabs{display:flex;flex-wrap:wrap;gap:1em}.fab{flex:1 1 45%;min-width:400px}
.confounds{background:#f7f7f2;border-left:4px solid #888;padding:.3em 1em;
margin:1em 0}.confounds tr.bad td,.confounds tr.bad th{background:#fff3cd}
.confounds tr.ok td:nth-child(2){color:#2a7a2a}.confounds h2{margin:.3em 0}"""
