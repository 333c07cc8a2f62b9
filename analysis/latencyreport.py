"""The report's latency stage (stages.py): the latency tables from what the one pass
over the captures reduced, the CDF figure and the "Latency under load" section. The
measurements themselves are in latency.py."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .latency import (RTT_COLUMNS, RTT_KEYS, SOJOURN_COLUMNS, SOJOURN_KEYS, analyse,
                      queue_delay, rtt_samples, sojourns, summary, summary_table,
                      weighted_quantiles, write_full)
from .samples import Samples, compact, groups
from . import render
from .stages import Stage

__all__ = ["FIGURE_GROUPS", "SECTION_TITLE", "STAGE", "LatencyPass", "figure",
           "from_reduced", "section", "sections"]


class LatencyPass:
    """The latency stage's reducer of the one pass over the captures (stages.Stage.reduce):
    the RTT samples and sojourns of each group of connections, kept as `Samples` (rows
    in a file, in memory at most a bounded summary of their values)."""

    def __init__(self, _run_dir, fabric, manifest):
        self.fabric, self.manifest = fabric, manifest
        self.rtt = Samples(RTT_COLUMNS, "rtt_s", RTT_KEYS)
        self.sojourn = Samples(SOJOURN_COLUMNS, "sojourn_s", SOJOURN_KEYS)

    def add(self, packets, _flows, flow_summary, _retrans) -> pd.DataFrame:
        """One group of connections' samples (chunked.analyse_tcp's `extra` reducer)."""
        self.rtt.add(rtt_samples(packets, flow_summary, self.fabric, self.manifest))
        self.sojourn.add(sojourns(packets, flow_summary, self.fabric))
        return pd.DataFrame(columns=["flow"])


# ---------------------------------------------------------------- the report section

def figure(a, path):
    """The report's CDF figure (latency_plots.latency_cdf) at `path`, or None without samples;
    a plotting bug is one of the run's problems, not a lost report."""
    return render.safe_plot(a, "latency", path, lambda p: _figure(a, p))


def _figure(a, path):
    from . import latency_plots

    lt = a.tables.get("latency") or {}
    rtt, qd, soj = lt.get("rtt"), lt.get("queue_delay"), lt.get("sojourn")
    r = compact(rtt, "rtt_s", RTT_KEYS)
    rtt_groups = {role: vg for role, vg, _ in groups(r, "role")} if r is not None else {}
    q_groups = {}
    if qd is not None and len(qd):
        rank = []  # the ports where packets waited longest (p99, then packets)
        for iface, g in qd.groupby("iface"):
            if g["weight"].sum() > 0:
                p99 = weighted_quantiles(g["delay_s"], g["weight"], (0.99,))[0]
                rank.append((-p99, -g["weight"].sum(), str(iface)))
        for _, _, iface in sorted(rank)[:FIGURE_GROUPS]:
            g = qd[qd["iface"] == iface]
            q_groups[iface] = (g["delay_s"].to_numpy(), g["weight"].to_numpy())
    # sojourns from host to host (one-way delay) by flow role; those to a switch port
    # (part of the path) are in the table
    s_groups = {}
    sj = compact(soj, "sojourn_s", SOJOURN_KEYS)
    if sj is not None:
        k = sj.groups
        hosts = {h.intf for h in a.fabric.hosts} if a.fabric is not None else None
        role = (dict(zip(r.groups["flow"], r.groups["role"], strict=True))
                if r is not None else {})
        # each group of sojourns (pair of points and flow): its flow's role, or None when
        # it ends at a switch port
        k = k.assign(one_way=[role.get(f, "other") if hosts is None or to in hosts else None
                              for f, to in zip(k["flow"], k["to_iface"], strict=True)])
        for who, vg, _ in groups(sj, "one_way", k.dropna(subset=["one_way"])):
            s_groups[f"one-way {who}"] = vg
    return latency_plots.latency_cdf(rtt_groups, q_groups, s_groups, path)


SECTION_TITLE = "Latency under load"
FIGURE_GROUPS = 5  # ports and capture pairs drawn (the table lists them all)


def section(a, figs: dict) -> tuple[str, str, str]:
    """(title, html, markdown) of the report's latency section."""

    lt = a.tables.get("latency") or {}
    tab = lt.get("summary")
    if tab is None or tab.empty:
        why = "no RTT samples, queue samples or sojourns"
        if "pcap" in a.missing or "flows" in a.missing:
            why += f" ({a.missing.get('pcap') or a.missing.get('flows')})"
        return (SECTION_TITLE, *render.none(why))
    text = ("RTT: from each flow's sender-side capture, one sample per ACK that covers new "
            "data, measured from the newest segment it covers; Karn's rule: no sample from "
            "a retransmitted segment or from an ACK that covers retransmitted bytes. Queue "
            "delay: backlog bytes × 8 / the port's rate at each queue sample, weighted by "
            "the packets the port sent. Sojourn: the same packet's time between two capture "
            "points (matched on flow, sequence number, length and IP id). Times in ms.")
    shown = tab.assign(**{c: tab[c].round(3) for c in ("p50_ms", "p90_ms", "p99_ms",
                                                       "max_ms")})
    th, tm = render.table(a, shown, "latency", keys=2, max_rows=40)
    full = {"latency_rtt_samples": lt.get("rtt"), "latency_queue_delay": lt.get("queue_delay"),
            "latency_sojourn": lt.get("sojourn")}
    links = []
    for name, df in full.items():
        link = write_full(a, df, name)
        if link:
            links.append(f"<a href='{render.esc(link)}'>{render.esc(name)}.csv</a>")
    more = f"<p>All samples: {', '.join(links)}.</p>" if links else ""
    return (SECTION_TITLE,
            f"<p>{render.esc(text)}</p>" + render.img(figs.get("latency"), "latency CDFs")
            + th + more,
            text + "\n" + render.md_img(figs, "latency") + tm)


def from_reduced(a) -> dict:
    """The latency tables of the run from what the one pass over the captures reduced
    (``a.captured["latency"]``, a `LatencyPass`: the RTT samples and sojourns, a group
    of connections at a time, chunked.py, kept as `Samples`) and the queues: the same
    dict as `analyse`, with the same summary (within the stated error of the samples'
    quantile sketch once a table outgrows samples.EXACT_SAMPLES). An Analysis made
    without that pass: `analyse` of its packet table."""
    reduced = a.captured.get("latency")
    if isinstance(reduced, Exception):
        raise reduced
    if reduced is None:
        return analyse(a)
    rtt, soj = reduced.rtt, reduced.sojourn
    qd = queue_delay(a.tables.get("queues_d"), a.fabric)
    return {"rtt": rtt, "queue_delay": qd, "sojourn": soj,
            "summary": summary_table(rtt, qd, soj, a.fabric)}


def sections(a, figs: dict) -> list:
    """The latency section; a bug in it becomes a problem and a note, never a lost
    report."""
    try:
        sec = section(a, figs)
    except Exception as exc:  # noqa: BLE001 - one section's bug must not cost the report
        a.problems.append(f"the latency section failed ({type(exc).__name__}: {exc})")
        sec = (SECTION_TITLE, f"<p class='none'>(failed: {exc})</p>", f"_(failed: {exc})_\n")
    return [sec]


# the report's latency stage (stages.py): after the retransmissions
STAGE = Stage("latency", ("tcp", "flows", "queues_d", "fabric"), compute=from_reduced,
              metrics=summary, render=sections,
              figures=lambda a, plot_dir: {"latency": figure(a, Path(plot_dir) / "latency.png")},
              after="retransmissions", what="latency under load", reduce=LatencyPass)
