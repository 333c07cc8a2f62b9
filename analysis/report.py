"""One run directory -> metrics.json, summary.md, report.html and plots/*.png.

`analyse(run_dir, jobs=...)` computes every table; `build_report(run_dir, jobs=...)`
writes the files. The common tables come from one pass over the run (reading.py); every
other part of the report is a declared stage (stages.py: its tables, metrics, figures
and sections), and both functions loop over that list. Each section copes with missing
inputs by saying what is missing. A run whose manifest status is not `complete` gets a
banner at the top of every output and its numbers are labelled as belonging to an
incomplete run. `jobs` is the job registry the command hands in (incastlab.jobs.JOBS):
the analysis never imports the orchestrator, and without it shows the generic sections.
"""
from __future__ import annotations

import html
import json
import traceback
from collections.abc import Mapping
from pathlib import Path

from . import chunked
from . import findings as fnd
from . import interactive
from . import metrics as mt
from . import network_cost
from . import render, stages
from . import trace as tr
from .reading import (Analysis, guard, jsonable, read_run, received_at_host,
                      rto_threshold_from_spec)

__all__ = ["REPORT_FILES", "Analysis", "analyse", "build_report", "received_at_host",
           "rto_threshold_from_spec"]

REPORT_FILES = ("metrics.json", "summary.md", "report.html", "trace.json")


def analyse(run_dir, rto_threshold_s: float | None = None, cache: bool = True,
            chunk_packets: int = chunked.CHUNK_PACKETS,
            jobs: Mapping | None = None) -> Analysis:
    """Read a run directory and compute every table and headline metric.

    `rto_threshold_s`: silence before a retransmission that makes it an RTO (s); default
    from the spec (`rto_threshold_from_spec`). `cache`: keep/use Parquet caches of
    parsed pcaps next to them. `chunk_packets`: packets analysed at once (chunked.py:
    captures are read one at a time and analysed a group of connections at a time, so
    memory does not grow with the run; the tables do not depend on it). `jobs`: the
    job registry (kind -> Job, `incastlab.jobs.JOBS`), which the command resolves and
    hands in; without it the job's own tables, bound, sections, metrics and findings
    are left out (the generic sections only).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no run directory at {run_dir}")
    a = read_run(run_dir, rto_threshold_s, cache, chunk_packets, jobs)
    # each stage's tables and metrics (events, latency, jobs on the fabric)
    stages.compute_all(a, lambda what, fn, fallback: guard(a.problems, what, fn, fallback),
                       stages.declared())
    readings = mt.evaluate(a, a.metrics["run"]["kind"])
    a.metrics["headline"] = jsonable(mt.headline(readings))
    a.metrics["headline_na"] = mt.not_available(readings)
    a.problems += _na_problems(readings, a.missing)
    _withhold(a, a.inputs.missing())  # before the findings, which read these numbers
    a.metrics["findings"] = _findings(a)
    a.metrics["problems"] = list(a.problems)
    return a


def _withhold(a: Analysis, damaged: dict) -> None:
    """Reconciliation numbers from a damaged input (`damaged`: inputs.py's groups) are
    not stated as the run's: None in metrics.json (the findings read them), and a note
    above the reconciliation table, whose columns show what remains."""
    nums = a.metrics.get("reconciliation") or {}
    recon = a.tables.get("recon") or {}
    keys = {"pcap": [k for k in nums if k.startswith("capture_") and k != "capture_drops"],
            "queues": ["tc_drops"], "counters": ["kernel"]}
    for group, names in keys.items():
        if group in damaged:
            for k in names:
                nums[k] = {} if k == "kernel" else None
            recon.setdefault("notes", []).insert(0, (
                f"{damaged[group]}. The numbers below that come from it are what remains, "
                "not the run's totals."))


def _na_problems(readings, missing: dict) -> list[str]:
    """One sentence per missing or damaged input: why, once, and the metrics it made n/a
    (the page says each reason here and nowhere else at its top)."""
    out = []
    for key, why in missing.items():
        names = [r.metric.label for r in readings
                 if r.value is None and key in r.metric.inputs]
        out.append(why + (f"; n/a for want of it: {', '.join(names)}." if names else "."))
    return out


def _write_trace(a: Analysis, path: Path) -> Path | None:
    """trace.json for Perfetto (analysis/trace.py), with the events the run's job declares
    (``Job.trace_spans``); a failure is a problem, not fatal."""
    try:
        spans = getattr(network_cost.job_of(a), "trace_spans", ())
        trace = tr.build_trace(a.tables["workers_raw"], a.tables["queues_d"],
                               a.tables["retrans"], t0=a.t0,
                               host_ips=a.fabric.ip_by_host() if a.fabric else {},
                               spans=spans,
                               ecn=(a.tables.get("ecn") or {}).get("counters"))
        return tr.write_trace(path, trace)
    except Exception as exc:  # noqa: BLE001
        a.problems.append(f"trace.json could not be written ({type(exc).__name__}: {exc})")
        return None


def _findings(a: Analysis) -> list[str]:
    """The findings sentences (findings.py); a bug there is reported, not fatal."""
    try:
        return jsonable(fnd.texts(a))
    except Exception as exc:  # noqa: BLE001
        a.problems.append(f"findings could not be written ({type(exc).__name__}: {exc})")
        return []


def build_report(run_dir, out_dir=None, rto_threshold_s: float | None = None,
                 cache: bool = True, plots: bool = True,
                 jobs: Mapping | None = None) -> dict[str, Path]:
    """Analyse `run_dir` and write metrics.json, summary.md, report.html and plots/*.png.

    Outputs go to `out_dir` (default: the run directory itself, as the run-directory
    contract says; raw files are never touched). Returns {'metrics', 'summary', 'report':
    Path, 'plots': [Path]} (also keyed 'metrics.json', 'summary.md', 'report.html').
    Raises FileNotFoundError if run_dir does not exist; otherwise missing inputs are
    reported inside the outputs. `rto_threshold_s`: see `analyse`. `plots=False` skips
    the figures (a quick rebuild of the numbers). `jobs`: the job registry (see
    `analyse`).
    """
    a = analyse(run_dir, rto_threshold_s=rto_threshold_s, cache=cache, jobs=jobs)
    out = Path(out_dir) if out_dir else a.run_dir
    out.mkdir(parents=True, exist_ok=True)
    a.out_dir = out
    declared = stages.declared()
    figs = stages.figures_all(a, out / "plots", declared) if plots else {}
    try:
        sections = stages.render_all(a, figs, declared)
    except Exception:  # keep the banner and the numbers even if a section has a bug
        sections = [("Report error", f"<pre>{html.escape(traceback.format_exc())}</pre>",
                     "report section failed\n")]
    banner = render.banner(a)
    if len(a.problems) != len(a.metrics["problems"]):  # a figure failed: count it too
        a.metrics["findings"] = _findings(a)
    trace_path = _write_trace(a, out / "trace.json")
    a.metrics["problems"] = a.problems
    pngs = [p for p in figs.values() if isinstance(p, Path)]  # not the interactive HTML
    a.metrics["plots"] = sorted(p.name for p in pngs)
    a.metrics["trace"] = trace_path.name if trace_path else None
    metrics_path = out / "metrics.json"
    metrics_path.write_text(json.dumps(jsonable(a.metrics), indent=2, default=str))
    summary_path = out / "summary.md"
    summary_path.write_text(summary_md(a, sections, banner))
    report_path = out / "report.html"
    report_path.write_text(report_html(a, sections, banner, figs))
    return {"metrics": metrics_path, "summary": summary_path, "report": report_path,
            "plots": pngs,
            # the same paths under their file names, for callers that look them up so
            "metrics.json": metrics_path, "summary.md": summary_path,
            "report.html": report_path}


def _title(a: Analysis) -> str:
    return f"incastlab run {a.run_dir.name}"


def summary_md(a: Analysis, sections: list, banner: str | None) -> str:
    """summary.md: the banners, status, findings, problems, missing inputs, then every
    section's Markdown."""
    md = [f"# {_title(a)}\n"]
    partial = a.inputs.banner() if a.inputs else None
    if partial:  # one line: the analysis lacks inputs (metrics.json's analysis.inputs)
        md.insert(0, f"> **{partial}**\n")
    if banner:
        md.insert(0, f"> **{banner}**\n")
    md.append(f"status: {a.status}" + (f" ({a.reason})" if a.reason else "") + "\n")
    md.append(render.findings_md(a.metrics["findings"]))
    md += [f"> {p}\n" for p in a.problems]  # a missing input's reason among them, once
    for sec_title, _, sec_md in sections:
        md.append(f"\n## {sec_title}\n\n{said_once(sec_md, a.missing, str)}")
    return "\n".join(md)


def said_once(text: str, missing: dict, escape=html.escape) -> str:
    """A section's text with each missing input's reason (said whole at the top of the
    page, _na_problems) cut to its head: 'queues.csv truncated at t = 0.2 s (why: at
    the top)'. `escape`: how the text holds it (HTML-escaped in report.html)."""
    for why in (missing or {}).values():
        if why and " (" in why and len(why) > 60:  # a short one is as short as a pointer
            text = text.replace(escape(why), escape(why.split(" (", 1)[0] + " (why: at the top)"))
    return text


def report_html(a: Analysis, sections: list, banner: str | None, figs: dict) -> str:
    """report.html: the banners, status, findings, problems, missing inputs, a table of
    contents, then every section's HTML (plotly.js inlined once where an interactive
    figure is on the page)."""
    title = _title(a)
    partial = a.inputs.banner() if a.inputs else None
    body = []
    if banner:
        body.append(f"<div class='banner' id='status-banner'>{html.escape(banner)}</div>")
    if partial:
        body.append(f"<div class='banner' id='partial-banner'>{html.escape(partial)}</div>")
    body.append(f"<h1>{html.escape(title)}</h1><p>status: <b>{html.escape(a.status)}</b>"
                f"{' — ' + html.escape(a.reason) if a.reason else ''}; "
                f"duration {render.fmt(a.t1 - a.t0)} s</p>")
    body.append(render.findings_html(a.metrics["findings"]))
    for p in a.problems:  # a missing input's reason among them, once (_na_problems)
        body.append(f"<p class='warn'>{html.escape(p)}</p>")
    toc = "".join(f"<li><a href='#s{i}'>{html.escape(s[0])}</a></li>"
                  for i, s in enumerate(sections))
    body.append(f"<ul>{toc}</ul>")
    for i, (sec_title, sec_html, _) in enumerate(sections):
        body.append(f"<h2 id='s{i}'>{html.escape(sec_title)}</h2>"
                    + said_once(sec_html, a.missing))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{render.CSS}</style>"
            # plotly.js inlined once, only where an interactive figure is on the page
            + (interactive.script() if any(isinstance(v, str) for v in figs.values()) else "")
            + f"</head><body>{''.join(body)}</body></html>")
