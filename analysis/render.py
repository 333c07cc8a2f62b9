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

from . import fabricpic, interactive
from . import flowroles as fr
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
        # the job's own figures and the attribution (jobcost.py asks the run's job)
        **jobcost.plots(a),
    }
    out = {}
    out.update(_interactive(a, hot, limits, labels))
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


def _interactive(a, hot, limits, labels) -> dict[str, str]:
    """The interactive versions (interactive.py) of the queue, throughput and timeline
    figures, as HTML fragments under '<name>_html'; a failure leaves the PNG alone."""
    t = a.tables
    r = t["retrans"]
    jobs = {
        "queues_html": lambda: interactive.queues(t["queues_d"], hot, a.t0, limits, labels),
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
    return figs.get(f"{name}_html") or _img(figs.get(name), alt)


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
    return _fmt(v, nd)


def _fmt(v, nd=3):
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


def _rel(df: pd.DataFrame, t0: float) -> pd.DataFrame:
    """A copy for display with epoch-second columns made relative to the run start."""
    if df is None or df.empty:
        return df
    out = df.copy()
    for c in out.columns:
        if _is_time_column(c, out[c], t0):
            out[c] = out[c] - t0
    return out


def _signed(v):
    return "n/a" if v is None else f"{v:+.3g} s"


MAX_COLS = 14  # columns per HTML table before it is split (about 1200 px of numbers)


def _split_columns(df: pd.DataFrame, keys: int) -> list[pd.DataFrame]:
    """The table as pieces of at most MAX_COLS columns, each repeating the first `keys`
    columns (what identifies a row)."""
    cols = list(df.columns)
    if len(cols) <= MAX_COLS:
        return [df]
    head, rest = cols[:keys], cols[keys:]
    pieces = math.ceil(len(rest) / max(1, MAX_COLS - keys))
    step = math.ceil(len(rest) / pieces)  # pieces of even width, not a stub at the end
    return [df[head + rest[i:i + step]] for i in range(0, len(rest), step)]


def _df_html(df: pd.DataFrame, max_rows=40, keys: int = 1, more: str | None = None) -> str:
    """A table that fits the page: at most `max_rows` rows, split into pieces of at most
    MAX_COLS columns (each repeating the first `keys`), long text wrapped. `more`: what
    to say about rows not shown (default: how many)."""
    if df is None or df.empty:
        return "<p class='none'>(empty)</p>"
    d = df.head(max_rows)
    cut = f"{len(df) - max_rows} more rows not shown" if len(df) > max_rows else ""
    note = f"<p class='none'>{html.escape(more or cut + '.')}</p>" if cut or more else ""
    return "".join(_piece_html(p) for p in _split_columns(d, keys)) + note


_TABLES = iter(range(1, 1 << 62))  # ids for per-table alignment rules


def _piece_html(df: pd.DataFrame) -> str:
    """One table; its text columns (flows, filters, names) left-aligned, numbers right."""
    text = [i for i, c in enumerate(df.columns, start=1)
            if not pd.api.types.is_numeric_dtype(df[c])
            and df[c].map(lambda v: isinstance(v, str)).any()]
    cls = f"t{next(_TABLES)}"
    style = ("<style>" + ",".join(f".{cls} td:nth-child({i}),.{cls} th:nth-child({i})"
                                  for i in text) + "{text-align:left}</style>") if text else ""
    return style + "<div class='wide'>" + df.to_html(
        index=False, na_rep="n/a", float_format=lambda x: _fmt(x, 4),
        classes=f"tbl {cls}" if text else "tbl", border=0, escape=True) + "</div>"


def _df_md(df: pd.DataFrame, max_rows=20, more: str | None = None) -> str:
    if df is None or df.empty:
        return "(empty)\n"
    d = df.head(max_rows).astype(object).where(df.head(max_rows).notna(), "n/a")
    cols = list(d.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in d.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c], 4) if isinstance(r[c], float) else str(r[c])
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
    h = _df_html(shown, max_rows, keys)
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
    m = _df_md(md_df, md_rows, more=where)
    if link and (md_df is None or len(md_df) <= md_rows):
        m += f"\n(whole table: {link})\n"
    return h, m


def _img(path: Path | None, alt: str) -> str:
    if not path:
        return ""
    b64 = base64.b64encode(Path(path).read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{b64}'>"


def headline_section(a) -> tuple[str, str, str]:
    """The headline table: every declared metric this run's job measures (metrics.py),
    with its value, unit and meaning; n/a rows say why."""
    jobs = getattr(a, "jobs", None)
    readings = metrics.shown(metrics.from_json(a.metrics, jobs), a.metrics["run"].get("kind"),
                             jobs)
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


def fabric_section(a) -> tuple[str, str, str]:
    """The fabric picture (fabricpic.py): switches, hosts with their roles, each link
    direction coloured by its queue's peak and marked with its drops."""
    if a.fabric is None:
        return ("The fabric", *none(a.missing.get("fabric", "no fabric.json")))
    roles = fr.host_roles(a.manifest)
    try:
        svg = fabricpic.fabric_svg(a.fabric, a.tables.get("queue_summary"), roles)
    except Exception as exc:  # noqa: BLE001 - a drawing bug must not cost the report
        a.problems.append(f"the fabric picture failed ({type(exc).__name__}: {exc})")
        svg = "<p class='none'>(the picture could not be drawn)</p>"
    policy = (a.spec.get("routing") or {}).get("policy")
    text = (f"{a.fabric.spines} spine(s), {a.fabric.leaves} leaf switch(es), "
            f"{len(a.fabric.hosts)} hosts; links {a.fabric.host_bw_mbps:g} Mbit/s to hosts"
            + (f", {a.fabric.fabric_bw_mbps:g} Mbit/s leaf-spine"
               if a.fabric.fabric_bw_mbps else "")
            + f"; switch queues of {a.fabric.queue_limit_text()}"
            + (f"; MTU {a.fabric.mtu} bytes" if a.fabric.mtu != 1500 else "")
            + (f"; routing policy {policy}" if policy else "") + ".")
    md = text + "\n\n" + "".join(f"- {h}: {r}\n" for h, r in roles.items())
    return "The fabric", f"<p>{html.escape(text)}</p>{svg}", md


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
    out.append(fabric_section(a))

    # reconciliation
    recon = t["recon"]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in recon["notes"])
    tot_h, tot_m = table(a, recon["totals"], "reconciliation", md_cols=["measure", "source",
                                                                       "value"], md_rows=40)
    port_h, port_m = table(a, recon["ports"], "reconciliation_ports")
    host_h, _ = table(a, recon["hosts"], "reconciliation_hosts")
    hx = (tot_h + "<h3>Per port (tc drops vs losses seen in captures)</h3>" + port_h
          + "<h3>Per host (kernel vs captures)</h3>" + host_h + f"<ul>{notes}</ul>"
          + _img(figs.get("reconciliation"), "reconciliation"))
    mx = (tot_m + "\nPer port:\n\n" + port_m + "\n" + md_img(figs, "reconciliation")
          + "".join(f"- {n}\n" for n in recon["notes"]))
    out.append(("Reconciliation: queue counters, captures, kernel counters", hx, mx))

    # queues
    if t["queue_summary"].empty:
        out.append(("Queues", *none(a.missing.get("queues", "no queue samples"))))
    else:
        qs = _rel(t["queue_summary"], a.t0)
        busy = qs[(qs["drops"] > 0) | (qs["sent_bytes"] > 0) | (qs["max_backlog_pkts"] > 0)]
        idle = len(qs) - len(busy)
        note = f"<p class='none'>{idle} idle port(s) not listed.</p>" if idle else ""
        qh, qm = table(a, busy, "queues", full=qs, md_cols=[
            "iface", "kind", "drops", "max_backlog_pkts", "sent_bytes"], md_rows=12)
        out.append(("Queues (times in s since run start)",
                    figure(figs, "queues", "queue occupancy") + qh + note,
                    md_img(figs, "queues") + qm))

    # incast episodes
    e = t["episodes"]
    if t["queue_summary"].empty:
        out.append(("Incast episodes", *none("no queue samples: episodes need queues.csv")))
    elif e.empty:
        out.append(("Incast episodes", *none("no queue reached its limit or dropped")))
    else:
        rel = e.assign(start=e["start"] - a.t0, end=e["end"] - a.t0)
        eh, em = table(a, rel, "incast_episodes", max_rows=25)
        pk = t.get("episode_packets")
        ph, pm = ("", "")
        if pk is not None and len(pk):
            ph, pm = table(a, pk.assign(start=pk["start"] - a.t0, end=pk["end"] - a.t0),
                           "incast_episode_packets", keys=1, max_rows=25)
            ph = ("<h3>The packets of each episode (open the capture in Wireshark, paste "
                  "the filter)</h3>" + ph)
            pm = "\nThe packets of each episode (capture, Wireshark display filter):\n\n" + pm
        out.append(("Incast episodes (times since run start, s)", eh + ph, em + pm))

    # flows and retransmissions
    if t["flows"].empty:
        out.append(("Flows", *none(a.missing.get("pcap") or a.missing.get("flows")
                                   or "no flows")))
    else:
        labels = t.get("flow_labels") or {}
        full = _rel(t["flows"], a.t0)
        full = full.assign(tuple=full["flow"], flow=full["flow"].map(
            lambda f: labels.get(f, f)))
        fl = full.drop(columns=["src", "dst", "sport", "dport", "tuple"])
        fh, fm = table(a, fl, "flows", full=full, md_cols=[
            "flow", "bytes", "retrans_packets", "fct_s", "goodput_mbps"])
        worst = ""
        if figs.get("sequence"):
            worst = ("<h3>The worst flow, packet by packet (time-sequence graph)</h3>"
                     + _img(figs.get("sequence"), "time-sequence graph of the worst flow"))
        out.append(("Flows (times in s since run start)",
                    figure(figs, "throughput", "throughput") + fh + worst,
                    md_img(figs, "throughput") + fm + md_img(figs, "sequence")))
    r = t["retrans"]
    if t["flows"].empty:
        out.append(("Retransmissions and RTOs", *none("no captures with TCP payload")))
    else:
        rs = m["retransmissions"]
        txt = (f"{rs['retrans_packets']} retransmitted packets ({rs['retrans_bytes']} bytes); "
               f"by trigger {rs['by_kind']}; {rs['rto_events']} RTO firing(s). "
               f"An RTO is a retransmission after >= {m['run']['rto_threshold_s']} s of "
               "silence; fast = after >= 3 duplicate ACKs; tlp = tail-loss probe.")
        labels = t.get("flow_labels") or {}
        eps = t["recovery_episodes"]
        eps = eps.assign(stall_start=eps["stall_start"] - a.t0, start=eps["start"] - a.t0,
                         end=eps["end"] - a.t0)
        eps_h, eps_m = table(a, fr.relabel(eps, labels), "recovery_episodes", keys=2)
        rto = t.get("rto_packets")
        rto_h, rto_m = "", ""
        if rto is not None and len(rto):
            rto_h, rto_m = table(a, rto.assign(t=rto["t"] - a.t0), "rto_packets")
            rto_h = ("<h3>Each RTO in the captures (open the capture in Wireshark, paste "
                     "the filter: the silence before the timer fired, then the resend)</h3>"
                     + rto_h)
            rto_m = "\nEach RTO (capture, Wireshark display filter):\n\n" + rto_m
        if "losses" in a.missing:
            loss_h = none(a.missing["losses"])[0]
        else:
            loss_h = table(a, fr.relabel(_rel(t["losses"], a.t0).drop(
                columns=["src", "dst", "sport", "dport"]), labels), "losses")[0]
        out.append(("Retransmissions and RTOs", f"<p>{html.escape(txt)}</p>"
                    + _img(figs.get("retransmissions"), "retransmissions") + rto_h
                    + "<h3>Recovery episodes (s since run start)</h3>" + eps_h
                    + "<h3>Losses between capture points (s since run start)</h3>" + loss_h,
                    txt + "\n" + md_img(figs, "retransmissions") + rto_m
                    + "\n\nRecovery episodes:\n\n" + eps_m))
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
        pw_h, pw_m = table(a, t["per_worker"], "per_worker")
        hit_h, _ = table(a, _rel(hit, a.t0).drop(columns=["file"]), "iterations_with_events",
                         keys=2, full=_rel(it, a.t0))
        out.append(("Training: iteration time", f"<p>{html.escape(txt)}</p>"
                    + figure(figs, "timeline", "timeline")
                    + _img(figs.get("iterations"), "iterations")
                    + "<h3>Per worker (straggler = last to finish a synchronous "
                    "step)</h3>" + pw_h
                    + "<h3>Iterations with network events (s since run start)</h3>" + hit_h,
                    txt + "\n" + md_img(figs, "timeline") + md_img(figs, "iterations")
                    + "\nPer worker:\n\n" + pw_m))
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
        bh, bm = table(a, t["balance"], "balance")
        out.append(("Fabric balance", f"<p>{txt}</p>" + _img(figs.get("balance"), "balance")
                    + bh, txt + "\n" + md_img(figs, "balance") + "\n" + bm))

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
margin:.3em 0;line-height:1.4}.wide{max-width:100%;overflow-x:auto}
.tbl td,.tbl th{overflow-wrap:break-word;max-width:36em}.tbl td{font-variant-numeric:
tabular-nums}"""




# --- the helpers job plugins build their sections with (incastlab.jobs.*) ---------------

def none(msg: str) -> tuple[str, str]:
    """(html, markdown) of a section that has nothing to show, saying why."""
    return f"<p class='none'>{html.escape(msg)}</p>", f"_{msg}_\n"


esc = html.escape
df_html = _df_html
df_md = _df_md
img = _img
rel = _rel
