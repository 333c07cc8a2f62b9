"""The report's events stage (stages.py): the events of the run and the failover they
caused, as a figure and the "Events and failover" section, right after the headline
numbers. The analysis itself is in failover.py."""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from .failover import (ACTIVE_WINDOW_S, BIN_S, DOWN_ACTIONS, EVENTS_FILE, FAILOVER_FILE,
                       SECTION_TITLE, EventFlows, analyse, metrics, read_event_rows)
from . import render
from .stages import Stage

__all__ = ["STAGE", "figure", "section", "sections"]


def figure(a, path) -> Path | None:
    """Iteration time of every rank against time, and data packets per spine from the
    spine-link captures (every packet of the run: failover.spine_packets), each event a
    vertical line (down red, up green)."""
    res = a.tables.get("events") or {}
    ev = res.get("events")
    if ev is None or ev.empty:
        return None
    return render.safe_plot(a, "events", path, lambda p: _figure(a, ev, p))


def _figure(a, ev, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = a.t0
    iters = a.tables.get("iterations")
    counts = (a.tables.get("events") or {}).get("spine_packets")
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(11, 5.5))
    if iters is not None and len(iters):
        for rank, g in iters.groupby("rank"):
            g = g.sort_values("t_end")
            ax1.plot(g["t_end"] - t0, g["t_end"] - g["t_start"], marker=".", lw=1,
                     label=f"rank {rank}")
        ax1.legend(fontsize="small", ncol=4, loc="upper left")
    ax1.set_ylabel("iteration (s)")
    if counts is not None and len(counts):
        # failover.spine_packets (every packet of the run): BIN_S bins of wall time,
        # empty ones as 0 (a spine that carries nothing must show it)
        bins = np.arange(counts["bin"].min(), counts["bin"].max() + 1)
        for spine, g in counts.groupby("spine"):
            n = g.set_index("bin")["packets"].reindex(bins, fill_value=0)
            ax2.plot(bins * BIN_S - t0, n.to_numpy() / BIN_S, lw=1, label=spine)
        ax2.legend(fontsize="small", loc="upper left")
    ax2.set_ylabel("data packets/s\non spine links")
    ax2.set_xlabel("time since run start (s)")
    for r in ev.itertuples(index=False):
        colour = "tab:red" if DOWN_ACTIONS.get(r.action) == "down" else "tab:green"
        for ax in (ax1, ax2):
            ax.axvline(r.t - t0, color=colour, ls="--", lw=1)
        ax1.annotate(f"{r.index}: {r.action}", (r.t - t0, 1), xycoords=("data", "axes fraction"),
                     rotation=90, va="top", ha="right", fontsize="small", color=colour)
    ax1.set_title("Events on the iteration timeline", fontsize="medium")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def section(a, figs: dict) -> tuple[str, str, str] | None:
    """(title, html, markdown), or None when the run had no events."""

    res = a.tables.get("events") or {}
    ev = res.get("events")
    if ev is None:
        return None
    h, m = [], []
    intro = ("Each event as the runner did it (events.jsonl: actual time since the workload "
             "started), and per network event: flows that used the failed spine in the "
             f"{ACTIVE_WINDOW_S:g} s before it, how many reached another spine (moved), "
             "failover time per flow (last packet on the old path to first on the new, "
             "from the spine-link captures), segments lost (retransmissions of segments "
             "sent between the failure and the flow's first packet on the new path) and "
             "the controller's reaction (failover.csv: port-status after the event, then "
             "to the last barrier reply of its new flows and groups).")
    h.append(f"<p>{html.escape(intro)}</p>")
    m.append(intro + "\n")
    if ev.empty:
        h.append("<p class='none'>no event was applied</p>")
        m.append("_no event was applied_\n")
    else:
        shown = ev.drop(columns=["t", "t_undo"]).rename(columns={"t_rel_s": "t_rel_s (actual)"})
        th, tm = render.table(a, shown, "events", keys=2)
        h.append(th)
        m.append(tm)
    summary = res.get("summary")
    if summary is not None and len(summary):
        th, tm = render.table(a, summary, "event_failover", keys=2)
        h += ["<h3>Per event</h3>", th]
        m += ["\n### Per event\n", tm]
    flows = res.get("flows")
    if flows is not None and len(flows):
        th, tm = render.table(a, flows, "failover_flows", keys=2)
        h += ["<h3>Per flow</h3>", th]
        m += ["\n### Per flow\n", tm]
    for row in res.get("not_fired") or []:
        text = (f"events[{row.get('index')}] ({row.get('action')}) never fired: "
                f"{row.get('reason')}")
        h.append(f"<p class='none'>{html.escape(text)}</p>")
        m.append(f"_{text}_\n")
    effects = _host_effects(a)
    if effects is not None and len(effects):
        from . import eventeffects

        rows = read_event_rows(a.run_dir)
        t0 = rows[0].get("t0") if rows else None  # the workload's start
        lines = [eventeffects.sentence(r, t0) for r in effects.to_dict("records")]
        th, tm = render.table(a, effects, "event_effects", keys=2)
        h += ["<h3>Iteration times around each event</h3>",
              "<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>", th]
        m += ["\n### Iteration times around each event\n",
              "\n".join(f"- {x}" for x in lines) + "\n", tm]
    h.append(render.figure(figs, "events", "events on the iteration timeline"))
    m.append(render.md_img(figs, "events"))
    return SECTION_TITLE, "\n".join(h), "\n".join(m)


def _host_effects(a) -> pd.DataFrame | None:
    """Iteration times around each host event (analysis.eventeffects)."""
    from . import eventeffects

    table = eventeffects.iteration_windows(read_event_rows(a.run_dir),
                                           a.tables.get("iterations"))
    return table if len(table) else None


def sections(a, figs: dict) -> list:
    """The events section when the run had events; a bug in it becomes a problem, never
    a lost report."""
    try:
        sec = section(a, figs)
    except Exception as exc:  # noqa: BLE001
        a.problems.append(f"the events section failed ({type(exc).__name__}: {exc})")
        sec = (SECTION_TITLE, f"<p class='none'>(failed: {html.escape(str(exc))})</p>",
               f"_(failed: {exc})_\n")
    return [] if sec is None else [sec]


# the report's events stage (stages.py): right after the headline numbers
STAGE = Stage("events", (EVENTS_FILE, FAILOVER_FILE, "tcp", "retrans", "iterations"),
              compute=analyse, metrics=lambda t: metrics(t) if t else None, render=sections,
              figures=lambda a, plot_dir: {"events": figure(a, Path(plot_dir) / "events.png")},
              after="headline", what="events and failover", reduce=EventFlows.of_run)
