"""Rendering an `Analysis`: the common figures, the helpers every section is written
with (tables that fit the page and their whole CSVs, figures, numbers), and the banner of
a run that did not complete. Pure presentation: every number comes from
`report.analyse`; the sections themselves are declared stages (sections.py, stages.py).
"""
from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import pandas as pd

from . import interactive, labels
from . import flowroles as fr
from . import network_cost
from . import plots as plotting

__all__ = ["CSS", "MAX_COLS", "TIME_COLUMNS", "banner", "df_html", "df_md", "esc", "figure",
           "findings_html", "findings_md", "fmt", "hot_ports", "img", "md_img", "none",
           "piece_html", "plot_all", "port_labels", "port_limits", "rel", "safe_plot",
           "split_columns",
           "table", "write_table"]


def plot_all(a, plot_dir: Path) -> dict[str, Path | None]:
    """Every common figure (and the job's, network_cost.plots) as plot_dir/<name>.png, and
    the interactive ones as '<name>_html' fragments; a failed one is a problem."""
    t = a.tables
    qsum = t["queue_summary"]
    hot, limits, labels = hot_ports(qsum), port_limits(qsum), port_labels(qsum)
    r = t["retrans"]
    marks = ce_marks(a)
    jobs = {
        "queues": lambda p: plotting.queue_occupancy(t["queues_d"], hot, a.t0, p, limits,
                                                     labels, marks),
        "throughput": lambda p: plotting.flow_throughput(
            fr.relabel(t["throughput"], t.get("flow_labels") or {}), a.t0, p),
        "sequence": lambda p: _sequence(a, p),
        "retransmissions": lambda p: plotting.retrans_timeline(t["retrans"], a.t0, a.t1, p),
        "iterations": lambda p: plotting.iteration_breakdown(t["iterations"], p),
        "timeline": lambda p: plotting.iteration_timeline(
            t["iterations"], a.t0, p, r[r["event"].astype(bool) & (r["kind"] == "rto")]
            if len(r) else None, t["queues_d"],
            a.fabric.ip_by_host() if a.fabric else {}),
        "balance": lambda p: plotting.spine_balance(t["balance"], t["utilisation"], a.t0, p),
        "reconciliation": lambda p: plotting.reconciliation_bars(t["recon"]["totals"], p),
        "loss": lambda p: plotting.loss_curve(t["loss_curve"], a.t0, p),
        # the job's own figures and the attribution (network_cost.py asks the run's job)
        **network_cost.plots(a),
    }
    out = {}
    out.update(_interactive(a, hot, limits, labels, marks))
    for name, job in jobs.items():
        out[name] = safe_plot(a, name, plot_dir / f"{name}.png", job)
    return out


def safe_plot(a, name: str, path, draw) -> Path | None:
    """draw(path) for figure `name`, after removing an earlier build's file at `path` (never
    a stale figure); a plotting bug is one of the run's problems, not a lost report."""
    path = Path(path)
    if path.exists():
        path.unlink()
    try:
        return draw(path)
    except Exception as exc:  # noqa: BLE001
        a.problems.append(f"plot {name} failed: {exc!r}")
        return None


def hot_ports(qsum: pd.DataFrame, n: int = 6) -> list[str]:
    """The ports the queue figures show: the first n of queue_summary's order (drops,
    then max backlog) that dropped or held a backlog."""
    if qsum is None or not len(qsum):
        return []
    return list(qsum[(qsum["drops"] > 0) | (qsum["max_backlog_pkts"] > 0)]["iface"][:n])


def port_limits(qsum: pd.DataFrame) -> dict:
    """{iface: queue limit in packets} of the ports with one."""
    return {r.iface: r.limit_pkts for r in qsum.itertuples() if r.limit_pkts} \
        if qsum is not None and len(qsum) else {}


def port_labels(qsum: pd.DataFrame) -> dict:
    """{iface: 'switch → peer (kind)'} for the figures' titles."""
    return {r.iface: f"{r.switch} → {r.peer} ({r.kind})" for r in qsum.itertuples()
            if isinstance(r.peer, str)} if qsum is not None and len(qsum) else {}


def ce_marks(a) -> dict:
    """{switch port: epoch times of the CE-marked packets captured behind it} from the
    ECN stage (analysis/ecn.py); empty without ECN marking."""
    ce = (a.tables.get("ecn") or {}).get("ce_times")
    if ce is None or not len(ce):
        return {}
    return {str(p): g["t"].to_numpy(float) for p, g in ce.groupby("port") if p}


def _interactive(a, hot, limits, labels, marks=None) -> dict[str, str]:
    """The interactive versions (interactive.py) of the queue, throughput and timeline
    figures, as HTML fragments under '<name>_html'; a failure leaves the PNG alone."""
    t = a.tables
    r = t["retrans"]
    jobs = {
        "queues_html": lambda: interactive.queues(t["queues_d"], hot, a.t0, limits, labels,
                                                  marks),
        "throughput_html": lambda: interactive.throughput(
            fr.relabel(t["throughput"], t.get("flow_labels") or {}), a.t0),
        "timeline_html": lambda: interactive.timeline(
            t["iterations"], a.t0, r[r["event"].astype(bool) & (r["kind"] == "rto")]
            if len(r) else None, a.fabric.ip_by_host() if a.fabric else {}),
    }
    out = {}
    for name, job in jobs.items():
        try:
            fragment = job()
        except Exception as exc:  # noqa: BLE001 - the PNG is still there
            a.problems.append(f"interactive plot {name} failed: {exc!r}")
            fragment = None
        if fragment:
            out[name] = fragment
    return out


def md_img(figs: dict, name: str) -> str:
    """summary.md's link to a figure's PNG (plots/ beside it), or '' without one."""
    p = figs.get(name)
    return f"\n![{name}](plots/{Path(p).name})\n" if isinstance(p, Path) else ""


def figure(figs: dict, name: str, alt: str) -> str:
    """A figure for report.html: the interactive one where there is one, else the PNG."""
    return figs.get(f"{name}_html") or img(figs.get(name), alt)


def _sequence(a, path):
    """The time-sequence graph of the run's worst flow (flowroles.worst_flow)."""
    t = a.tables
    flow = fr.worst_flow(t["flows"], t["retrans"])
    if flow is None:
        return None
    r = t["retrans"]
    rto = r[(r["flow"] == flow) & (r["kind"] == "rto") & r["event"].astype(bool)]["t"] \
        if len(r) else []
    flows = t["flows"]
    label = (t.get("flow_labels") or {}).get(flow, flow)
    row = flows[flows["flow"] == flow].iloc[0]
    return plotting.sequence_plot(
        fr.sequence_data(t.get("tcp"), flows, flow), a.t0, path,
        f"Worst flow: {label}\n{int(row['retrans_packets'])} retransmitted packets, "
        f"{len(rto)} RTO(s); seen at {row['sender_iface']}", rto_times=list(rto))


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
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{nd}g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


TIME_COLUMNS = ("t", "start", "end", "t_first", "t_last", "last_data", "stall_start",
                "t_start", "t_end")


def _is_time_column(name: str, col: pd.Series, t0: float) -> bool:
    """An epoch-seconds column: named like one (TIME_COLUMNS, t_*) and holding values
    near the run's start (a duration named t_* stays as it is)."""
    if not (name in TIME_COLUMNS or str(name).startswith("t_")) or \
            not pd.api.types.is_numeric_dtype(col):
        return False
    v = pd.to_numeric(col, errors="coerce").dropna()
    return bool(len(v)) and t0 > 1e8 and bool((v > t0 - 86_400).all())


def rel(df: pd.DataFrame, t0: float) -> pd.DataFrame:
    """A copy for display with epoch-second columns made relative to the run start."""
    if df is None or df.empty:
        return df
    out = df.copy()
    for c in out.columns:
        if _is_time_column(c, out[c], t0):
            out[c] = out[c] - t0
    return out


MAX_COLS = 14  # columns per HTML table before it is split (about 1200 px of numbers)


def split_columns(df: pd.DataFrame, keys: int) -> list[pd.DataFrame]:
    """The table as pieces of at most MAX_COLS columns, each repeating the first `keys`
    columns (what identifies a row)."""
    cols = list(df.columns)
    if len(cols) <= MAX_COLS:
        return [df]
    head, rest = cols[:keys], cols[keys:]
    pieces = math.ceil(len(rest) / max(1, MAX_COLS - keys))
    step = math.ceil(len(rest) / pieces)  # pieces of even width, not a stub at the end
    return [df[head + rest[i:i + step]] for i in range(0, len(rest), step)]


def df_html(df: pd.DataFrame, max_rows=40, keys: int = 1, more: str | None = None) -> str:
    """A table that fits the page: at most `max_rows` rows, split into pieces of at most
    MAX_COLS columns (each repeating the first `keys`), long text wrapped. `more`: what
    to say about rows not shown (default: how many)."""
    if df is None or df.empty:
        return "<p class='none'>(empty)</p>"
    d = df.head(max_rows)
    cut = f"{len(df) - max_rows} more rows not shown" if len(df) > max_rows else ""
    note = f"<p class='none'>{html.escape(more or cut + '.')}</p>" if cut or more else ""
    return "".join(piece_html(p) for p in split_columns(d, keys)) + note


_TABLES = iter(range(1, 1 << 62))  # ids for per-table alignment rules


def piece_html(df: pd.DataFrame) -> str:
    """One table; its text columns (flows, filters, names) left-aligned, numbers right."""
    text = [i for i, c in enumerate(df.columns, start=1)
            if not pd.api.types.is_numeric_dtype(df[c])
            and df[c].map(lambda v: isinstance(v, str)).any()]
    cls = f"t{next(_TABLES)}"
    style = ("<style>" + ",".join(f".{cls} td:nth-child({i}),.{cls} th:nth-child({i})"
                                  for i in text) + "{text-align:left}</style>") if text else ""
    page = df.to_html(index=False, na_rep="n/a", float_format=lambda x: fmt(x, 4),
                      classes=f"tbl {cls}" if text else "tbl", border=0, escape=True)
    return style + "<div class='wide'>" + _readable_headers(page, df.columns) + "</div>"


def _readable_headers(page: str, columns) -> str:
    """The table's header cells in words (analysis/labels.py), each with its CSV column's
    name under it; the body is left alone."""
    head, sep, body = page.partition("</thead>")
    for c in columns:
        head = head.replace(f"<th>{html.escape(str(c))}</th>",
                            f"<th>{labels.header_html(c)}</th>", 1)
    return head + sep + body


def df_md(df: pd.DataFrame, max_rows=20, more: str | None = None) -> str:
    if df is None or df.empty:
        return "(empty)\n"
    d = df.head(max_rows).astype(object).where(df.head(max_rows).notna(), "n/a")
    cols = list(d.columns)
    heads = [labels.header(c) for c in cols]  # words; tables/*.csv keep the names
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(cols)]
    for _, r in d.iterrows():
        lines.append("| " + " | ".join(fmt(r[c], 4) if isinstance(r[c], float) else str(r[c])
                                       for c in cols) + " |")
    if len(df) > max_rows:  # say so, as the HTML does: a cut table must not look whole
        lines.append(f"\n({len(df) - max_rows} more rows not shown; "
                     + (more or "see report.html") + ")")
    return "\n".join(lines) + "\n"


def _csv_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name) + ".csv"


def write_table(a, df: pd.DataFrame, name: str) -> str | None:
    """Write the whole table to tables/<name>.csv in the report's directory; returns the
    path relative to report.html (None: no output directory, or nothing to write)."""
    out = getattr(a, "out_dir", None)
    if out is None or df is None or df.empty:
        return None
    path = Path(out) / "tables" / _csv_name(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return f"tables/{path.name}"


def table(a, df: pd.DataFrame, name: str, max_rows: int = 25, keys: int = 1,
          full: pd.DataFrame | None = None, md_cols: list[str] | None = None,
          md_rows: int = 20) -> tuple[str, str]:
    """(html, markdown) of one table that fits the page and the whole of it as
    tables/<name>.csv, linked from both. `full`: what the CSV holds (default `df`);
    columns with no value at all are left out of the page (kept in the CSV)."""
    link = write_table(a, full if full is not None else df, name)
    shown = df.dropna(axis=1, how="all") if df is not None and len(df) else df
    gone = [c for c in df.columns if c not in shown.columns] if shown is not None else []
    where = f"the whole table: {link}" if link else None
    h = df_html(shown, max_rows, keys)
    notes = []
    if gone:
        notes.append(f"columns without values left out: {', '.join(map(str, gone))}")
    if link:
        rows = len(full if full is not None else df)
        notes.append(f"whole table ({rows} rows): <a href='{html.escape(link)}'>"
                     f"{html.escape(link)}</a>")
    if notes:
        h += "<p class='none'>" + "; ".join(n if n.startswith("whole") else html.escape(n)
                                             for n in notes) + "</p>"
    md_df = shown[[c for c in md_cols if c in shown]] if md_cols and shown is not None \
        else shown
    m = df_md(md_df, md_rows, more=where)
    if link and (md_df is None or len(md_df) <= md_rows):
        m += f"\n(whole table: {link})\n"
    return h, m


def img(path: Path | None, alt: str) -> str:
    if not path:
        return ""
    b64 = base64.b64encode(Path(path).read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{b64}'>"


def findings_html(texts: list[str]) -> str:
    """The findings box at the top of report.html."""
    if not texts:
        return ""
    return ("<div class='findings' id='findings'><h2>Findings</h2><ul>"
            + "".join(f"<li>{html.escape(t)}</li>" for t in texts) + "</ul></div>")


def findings_md(texts: list[str]) -> str:
    """The findings at the top of summary.md."""
    return ("## Findings\n\n" + "".join(f"- {t}\n" for t in texts)) if texts else ""


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
margin:.3em 0;line-height:1.4}.wide{max-width:100%;overflow-x:auto}
.tbl td,.tbl th{overflow-wrap:break-word;max-width:36em}.tbl td{font-variant-numeric:
tabular-nums}.tbl th code.col{font-weight:normal;font-size:.85em;color:#666}"""




# --- the helpers job plugins build their sections with (incastlab.jobs.*) ---------------

def none(msg: str) -> tuple[str, str]:
    """(html, markdown) of a section that has nothing to show, saying why."""
    return f"<p class='none'>{html.escape(msg)}</p>", f"_{msg}_\n"


esc = html.escape
