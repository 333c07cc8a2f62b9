"""The report's "Fidelity" section: the verdict (analysis/fidelity.py), its evidence, the
checks that could not be made, the CPU as supporting evidence, and the seconds behind
it. Declared as a stage (stages.py): its compute puts the verdict into metrics.json
(``fidelity``) before the findings read it."""
from __future__ import annotations

import html

import pandas as pd

from . import fidelity
from .render import table
from .stages import Section, Stage

__all__ = ["STAGE", "TITLE"]

TITLE = "Fidelity: did the emulation keep up?"


def _compute(a) -> dict:
    out = fidelity.verdict(a)
    if not out["verdict"]["kept_up"]:  # at the top of the report, as every trust warning
        a.problems.append(out["verdict"]["text"] + " Treat rate- and loss-dependent "
                          "numbers of this run with care.")
    return out


def _render(a, _figs) -> list[Section]:
    t = a.tables.get("fidelity") or {}
    v = t.get("verdict")
    if not v:
        msg = "The verdict could not be computed (see the problems at the top)."
        return [Section(TITLE, f"<p class='none'>{html.escape(msg)}</p>", f"_{msg}_\n")]
    h = [f"<p><b>kept_up: {str(v['kept_up']).lower()}</b> — {html.escape(v['text'])}</p>"]
    md = [f"**kept_up: {str(v['kept_up']).lower()}** — {v['text']}\n"]
    lines = [f"checked: {', '.join(v['checked']) or 'nothing'}"]
    lines += [f"not checked, {c}: {why}" for c, why in v["not_checked"].items()]
    lines.append(f"supporting: {v['supporting']['text']}")
    if v.get("manifest_kept_up") is not None:
        lines.append(f"the manifest's run-time verdict: kept_up "
                     f"{str(v['manifest_kept_up']).lower()} ({v['authority']})")
    h.append("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>")
    md.append("".join(f"- {x}\n" for x in lines))
    for name, df, what in (("fidelity_uncounted", t.get("uncounted"),
                            "Ports where the captures lost more than tc counted"),
                           ("fidelity_seconds", t.get("per_second"),
                            "Per second: losses, tc drops, losses beyond tc's count, ports "
                            "below their rate")):
        if isinstance(df, pd.DataFrame) and len(df):
            th, tm = table(a, df, name)
            h.append(f"<p>{html.escape(what)}:</p>{th}")
            md.append(f"\n{what}:\n\n{tm}")
    below = t.get("below")
    if isinstance(below, pd.DataFrame) and len(below):
        table(a, below, "fidelity_rates")  # the whole per-port, per-second check, as CSV
    return [Section(TITLE, "".join(h), "\n".join(md))]


STAGE = Stage("fidelity", ("manifest.json", "queues_d", "queue_summary", "losses"),
              render=_render, compute=_compute, metrics=lambda t: t.get("verdict"),
              after="reconciliation", what="the fidelity verdict")
