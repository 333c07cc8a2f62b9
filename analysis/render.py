"""Rendering an `Analysis`: the figures, the report's sections as HTML and Markdown, and
the banner of a run that did not complete. Pure presentation: every number comes from
`report.analyse`.
"""
from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import pandas as pd

from . import jobcost, metrics
from . import plots as plotting

def plot_all(a, plot_dir: Path) -> dict[str, Path | None]:
    t = a.tables
    qsum = t["queue_summary"]
    hot = list(qsum[(qsum["drops"] > 0) | (qsum["max_backlog_pkts"] > 0)]["iface"][:6]) \
        if len(qsum) else []
    limits = {r.iface: r.limit_pkts for r in qsum.itertuples() if r.limit_pkts} \
        if len(qsum) else {}
    labels = {r.iface: f"{r.switch} → {r.peer} ({r.kind})" for r in qsum.itertuples()
              if isinstance(r.peer, str)} if len(qsum) else {}
    r = t["retrans"]
    jobs = {
        "queues": lambda p: plotting.queue_occupancy(t["queues_d"], hot, a.t0, p, limits,
                                                     labels),
        "throughput": lambda p: plotting.flow_throughput(t["throughput"], a.t0, p),
        "retransmissions": lambda p: plotting.retrans_timeline(t["retrans"], a.t0, a.t1, p),
        "iterations": lambda p: plotting.iteration_breakdown(t["iterations"], p),
        "timeline": lambda p: plotting.iteration_timeline(
            t["iterations"], a.t0, p, r[r["event"].astype(bool) & (r["kind"] == "rto")]
            if len(r) else None, t["queues_d"],
            a.fabric.ip_by_host() if a.fabric else {}),
        "balance": lambda p: plotting.spine_balance(t["balance"], t["utilisation"], a.t0, p),
        "reconciliation": lambda p: plotting.reconciliation_bars(t["recon"]["totals"], p),
        "loss": lambda p: plotting.loss_curve(t["loss_curve"], a.t0, p),
        # the job's own figures and the attribution (jobcost.py asks the run's job)
        **jobcost.plots(a),
    }
    out = {}
    for name, job in jobs.items():
        path = plot_dir / f"{name}.png"
        if path.exists():
            path.unlink()  # never leave a stale figure from an earlier build
        try:
            out[name] = job(path)
        except Exception as exc:  # a plotting bug must not cost the whole report
            a.problems.append(f"plot {name} failed: {exc!r}")
            out[name] = None
    return out


def banner(a) -> str | None:
    if a.status == "complete":
        return None
    word = {"aborted": "ABORTED", "failed": "FAILED", "running": "INCOMPLETE (still running "
            "or killed)"}.get(a.status, f"STATUS {a.status.upper()}")
    why = f": {a.reason}" if a.reason else ""
    return (f"RUN {word}{why}. This run did not complete; its numbers describe only the "
            "part that ran and must not be compared with complete runs.")


def fmt(v, nd=3):
    """A number for a table cell: 'n/a' for missing, 3 significant digits."""
    return _fmt(v, nd)


def _fmt(v, nd=3):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{nd}g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


TIME_COLUMNS = ("t", "start", "end", "t_first", "t_last", "last_data", "stall_start",
                "t_start", "t_end")


def _rel(df: pd.DataFrame, t0: float) -> pd.DataFrame:
    """A copy for display with epoch-second columns made relative to the run start."""
    if df is None or df.empty:
        return df
    out = df.copy()
    for c in TIME_COLUMNS:
        if c in out and pd.api.types.is_numeric_dtype(out[c]):
            out[c] = out[c] - t0
    return out


def _signed(v):
    return "n/a" if v is None else f"{v:+.3g} s"


def _df_html(df: pd.DataFrame, max_rows=40) -> str:
    if df is None or df.empty:
        return "<p class='none'>(empty)</p>"
    d = df.head(max_rows)
    more = f"<p class='none'>{len(df) - max_rows} more rows not shown.</p>" \
        if len(df) > max_rows else ""
    return d.to_html(index=False, na_rep="n/a", float_format=lambda x: _fmt(x, 4),
                     classes="tbl", border=0, escape=True) + more


def _df_md(df: pd.DataFrame, max_rows=20) -> str:
    if df is None or df.empty:
        return "(empty)\n"
    d = df.head(max_rows).astype(object).where(df.head(max_rows).notna(), "n/a")
    cols = list(d.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in d.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c], 4) if isinstance(r[c], float) else str(r[c])
                                       for c in cols) + " |")
    if len(df) > max_rows:  # say so, as the HTML does: a cut table must not look whole
        lines.append(f"\n({len(df) - max_rows} more rows not shown; see report.html or "
                     "metrics.json)")
    return "\n".join(lines) + "\n"


def _img(path: Path | None, alt: str) -> str:
    if not path:
        return ""
    b64 = base64.b64encode(Path(path).read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{b64}'>"


def headline_section(a) -> tuple[str, str, str]:
    """The headline table: every declared metric this run's job measures (metrics.py),
    with its value, unit and meaning; n/a rows say why."""
    readings = metrics.shown(metrics.from_json(a.metrics), a.metrics["run"].get("kind"))
    rows, md = [], ["| metric | value | meaning |", "|---|---|---|"]
    for r in readings:
        m = r.metric
        why = f" n/a: {r.reason}" if r.value is None and r.reason else ""
        rows.append(
            f"<tr><th class='l'>{html.escape(m.label)}<br><code title='computed from "
            f"{html.escape(m.input_files())}'>{html.escape(m.name)}</code>"
            f"</th><td class='v'>{html.escape(r.text)}</td><td class='l'>"
            f"{html.escape(m.unit)}</td><td class='l'>{html.escape(m.meaning)}"
            + (f"<br><span class='none'>{html.escape(why.strip())}</span>" if why else "")
            + "</td></tr>")
        md.append(f"| {m.label} (`{m.name}`) | {m.text_with_unit(r.value)} | "
                  f"{m.meaning}{' _' + why.strip() + '_' if why else ''} |")
    head = ("<table class='tbl head'><tr><th class='l'>metric (metrics.json key)</th><th>value</th>"
            "<th class='l'>unit</th><th class='l'>what it means</th></tr>" + "".join(rows)
            + "</table>")
    return "Headline numbers", head, "\n".join(md) + "\n"


def findings_html(texts: list[str]) -> str:
    """The findings box at the top of report.html."""
    if not texts:
        return ""
    return ("<div class='findings' id='findings'><h2>Findings</h2><ul>"
            + "".join(f"<li>{html.escape(t)}</li>" for t in texts) + "</ul></div>")


def findings_md(texts: list[str]) -> str:
    """The findings at the top of summary.md."""
    return ("## Findings\n\n" + "".join(f"- {t}\n" for t in texts)) if texts else ""


def sections(a, figs: dict) -> list[tuple[str, str, str]]:
    """(title, html, markdown) per report section."""
    t, m = a.tables, a.metrics
    out = []

    def none(msg):
        return f"<p class='none'>{html.escape(msg)}</p>", f"_{msg}_\n"

    out.append(headline_section(a))

    # reconciliation
    recon = t["recon"]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in recon["notes"])
    hx = (_df_html(recon["totals"]) + "<h3>Per port (tc drops vs losses seen in captures)"
          "</h3>" + _df_html(recon["ports"]) + "<h3>Per host (kernel vs captures)</h3>"
          + _df_html(recon["hosts"]) + f"<ul>{notes}</ul>" + _img(figs.get("reconciliation"),
                                                                  "reconciliation"))
    mx = (_df_md(recon["totals"][["measure", "source", "value"]]) + "\nPer port:\n\n"
          + _df_md(recon["ports"]) + "\n" + "".join(f"- {n}\n" for n in recon["notes"]))
    out.append(("Reconciliation: queue counters, captures, kernel counters", hx, mx))

    # queues
    if t["queue_summary"].empty:
        out.append(("Queues", *none(a.missing.get("queues", "no queue samples"))))
    else:
        qs = _rel(t["queue_summary"], a.t0)
        busy = qs[(qs["drops"] > 0) | (qs["sent_bytes"] > 0) | (qs["max_backlog_pkts"] > 0)]
        idle = len(qs) - len(busy)
        note = f"<p class='none'>{idle} idle port(s) not listed.</p>" if idle else ""
        out.append(("Queues (times in s since run start)",
                    _img(figs.get("queues"), "queue occupancy") + _df_html(busy) + note,
                    _df_md(busy[["iface", "kind", "drops", "max_backlog_pkts",
                                 "sent_bytes"]].head(12))))

    # incast episodes
    e = t["episodes"]
    if t["queue_summary"].empty:
        out.append(("Incast episodes", *none("no queue samples: episodes need queues.csv")))
    elif e.empty:
        out.append(("Incast episodes", *none("no queue reached its limit or dropped")))
    else:
        rel = e.assign(start=e["start"] - a.t0, end=e["end"] - a.t0)
        out.append(("Incast episodes (times since run start, s)", _df_html(rel),
                    _df_md(rel.drop(columns=["senders"]))))

    # flows and retransmissions
    if t["flows"].empty:
        out.append(("Flows", *none(a.missing.get("pcap") or a.missing.get("flows")
                                   or "no flows")))
    else:
        fl = _rel(t["flows"], a.t0).drop(columns=["src", "dst", "sport", "dport"])
        out.append(("Flows (times in s since run start)",
                    _img(figs.get("throughput"), "throughput") + _df_html(fl),
                    _df_md(fl[["flow", "bytes", "retrans_packets", "fct_s",
                               "goodput_mbps"]])))
    r = t["retrans"]
    if t["flows"].empty:
        out.append(("Retransmissions and RTOs", *none("no captures with TCP payload")))
    else:
        rs = m["retransmissions"]
        txt = (f"{rs['retrans_packets']} retransmitted packets ({rs['retrans_bytes']} bytes); "
               f"by trigger {rs['by_kind']}; {rs['rto_events']} RTO firing(s). "
               f"An RTO is a retransmission after >= {m['run']['rto_threshold_s']} s of "
               "silence; fast = after >= 3 duplicate ACKs; tlp = tail-loss probe.")
        eps = t["recovery_episodes"]
        eps = eps.assign(stall_start=eps["stall_start"] - a.t0, start=eps["start"] - a.t0,
                         end=eps["end"] - a.t0)
        out.append(("Retransmissions and RTOs", f"<p>{html.escape(txt)}</p>"
                    + _img(figs.get("retransmissions"), "retransmissions")
                    + "<h3>Recovery episodes (s since run start)</h3>" + _df_html(eps)
                    + "<h3>Losses between capture points</h3>"
                    + (_df_html(_rel(t["losses"], a.t0).drop(
                        columns=["src", "dst", "sport", "dport"]))
                       if "losses" not in a.missing else none(a.missing["losses"])[0]),
                    txt + "\n\n" + _df_md(eps)))
        del r

    # training
    it = t["iterations"]
    if it.empty:
        msg = "no iteration events (an incast benchmark run, or no worker logs)"
        out.append(("Training: iteration time", *none(msg)))
    else:
        imp = m["training"]
        w, wo = imp["with_rto"], imp["without_rto"]
        txt = (f"{imp['iterations']} worker iterations; mean {_fmt(imp['mean_s'])} s, median "
               f"{_fmt(imp['median_s'])} s, p95 {_fmt(imp['p95_s'])} s. With an RTO of the "
               f"worker's host: {w['n']} (mean {_fmt(w['mean_s'])} s, "
               f"{_signed(w.get('extra_s_vs_no_rto'))} vs the {wo['n']} without). With a "
               f"loss but no RTO: {imp['with_loss']['n']} (mean "
               f"{_fmt(imp['with_loss']['mean_s'])} s); clean: {imp['clean']['n']} (mean "
               f"{_fmt(imp['clean']['mean_s'])} s). A loss is a capture loss of the worker's "
               "host or a tc drop on any port during the iteration.")
        hit = it[(it["rtos"] > 0) | (it["losses"] > 0) | (it["tc_drops"] > 0)]
        out.append(("Training: iteration time", f"<p>{html.escape(txt)}</p>"
                    + _img(figs.get("timeline"), "timeline")
                    + _img(figs.get("iterations"), "iterations")
                    + "<h3>Per worker (straggler = last to finish a synchronous "
                    "step)</h3>" + _df_html(t["per_worker"])
                    + "<h3>Iterations with network events (s since run start)</h3>"
                    + _df_html(_rel(hit, a.t0).drop(columns=["file"])),
                    txt + "\n\nPer worker:\n\n" + _df_md(t["per_worker"])))
    if len(t["loss_curve"]):
        out.append(("Training: loss", _img(figs.get("loss"), "loss"),
                    f"final loss {_fmt(m['headline'].get('final_loss'))}\n"))
    # what the network cost the job, then the job's own sections (jobcost.py)
    out += [tuple(sec) for sec in jobcost.sections(a, figs)]

    # balance
    if t["balance"].empty:
        out.append(("Fabric balance", *none(m["balance"].get("note")
                                            or "no spine links or no counters")))
    else:
        b = m["balance"]
        txt = (f"max/mean bytes over spine links: up {_fmt(b.get('max_mean_up'))}, down "
               f"{_fmt(b.get('max_mean_down'))}, all {_fmt(b.get('max_mean_all'))}")
        out.append(("Fabric balance", f"<p>{txt}</p>" + _img(figs.get("balance"), "balance")
                    + _df_html(t["balance"]), txt + "\n\n" + _df_md(t["balance"])))

    # configuration
    spec_text = (a.run_dir / "spec.toml").read_text() if (a.run_dir / "spec.toml").exists() \
        else "(no spec.toml)"
    man = json.dumps(a.manifest, indent=1, default=str) if a.manifest else "(no manifest.json)"
    out.append(("Configuration and environment",
                f"<h3>spec.toml</h3><pre>{html.escape(spec_text)}</pre>"
                f"<h3>manifest.json</h3><pre>{html.escape(man)}</pre>",
                f"```toml\n{spec_text}\n```\n"))
    return out


CSS = """body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}
.banner{background:#b00020;color:#fff;padding:1em;font-size:1.3em;font-weight:bold;
border-radius:4px}.warn{background:#fff3cd;padding:.5em 1em;border-left:4px solid #e0a800}
.tbl{border-collapse:collapse;font-size:.85em;margin:.5em 0}.tbl td,.tbl th{border:1px solid
#ccc;padding:2px 6px;text-align:right}.tbl th{background:#f0f0f0}.none{color:#777;
font-style:italic}img{max-width:100%;display:block;margin:.5em 0}pre{background:#f6f6f6;
padding:.5em;overflow:auto;font-size:.8em}.tbl .l{text-align:left}.tbl.head td.v{
font-weight:bold;white-space:nowrap}.tbl.head td,.tbl.head th{vertical-align:top}
.tbl.head code{font-weight:normal;color:#555}.findings{background:#eef4fb;border-left:4px
solid #2a6fb0;padding:.3em 1em;margin:1em 0}.findings h2{margin:.3em 0}.findings li{
margin:.3em 0;line-height:1.4}"""




# --- the helpers job plugins build their sections with (incastlab.jobs.*) ---------------

def none(msg: str) -> tuple[str, str]:
    """(html, markdown) of a section that has nothing to show, saying why."""
    return f"<p class='none'>{html.escape(msg)}</p>", f"_{msg}_\n"


esc = html.escape
df_html = _df_html
df_md = _df_md
img = _img
rel = _rel
