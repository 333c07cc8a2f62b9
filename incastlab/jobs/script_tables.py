"""The script job's analysis: the observer's records as tables, the bound of every step,
and the report section (what the script sent, per step: bytes, time, exposed part, the
bound). Read through ``incastlab.analysis.runview``; imported only by the job's hooks.

Tables: ``collectives`` (tables/collectives.csv: rank, step, op, bytes, t_start, t_end,
then call, group_size, peer, async_op, seq, duration_s, bound_s) and ``script_steps``
(one row per rank × step: collectives, bytes, comm_s, exposed_comm_s, duration_s,
bound_total_s, bound_exposed_s; jobs/script_bound.py)."""
from __future__ import annotations

import pandas as pd

COLLECTIVE_COLUMNS = ["rank", "step", "op", "bytes", "t_start", "t_end", "call", "group_size",
                      "peer", "async_op", "seq", "duration_s", "bound_s"]
STEP_COLUMNS = ["rank", "step", "collectives", "bytes", "duration_s", "comm_s",
                "exposed_comm_s", "bound_total_s", "bound_exposed_s"]


def _ranked(raw: pd.DataFrame, event: str) -> pd.DataFrame:
    """The rows of ``event`` with each file's rank from its start event."""
    from incastlab.analysis import training

    rows = raw[raw["event"] == event].copy()
    starts = raw[raw["event"] == "start"].set_index("file")["rank"] if "rank" in raw \
        else pd.Series(dtype=object)
    rows["rank"] = [training.as_rank(starts.get(f, f)) for f in rows["file"]]
    return rows


def fabric_context(a) -> dict | None:
    """The numbers the bounds need: each rank's host rate, the MTU, and for a full
    group's all-reduce the ranks' leaves and the usable spines; None without them."""
    from incastlab.analysis import runview

    p = runview.placed(a)
    if p is None or a.fabric is None or not p.workers:
        return None
    rates = [runview.host_mbps(a, h) for h in p.workers]
    if None in rates:
        return None
    spines = runview.usable_spines(a)
    ring_fabric = {"leaves": [runview.leaf_of(a, h) for h in p.workers], "spines": spines,
                   "fabric_mbps": a.fabric.fabric_bw_mbps} \
        if spines and a.fabric.fabric_bw_mbps else {}
    return {"rates": rates, "world": len(p.workers), "mtu": runview.mtu(a),
            "ring_fabric": ring_fabric}


def collectives_table(a, context: dict | None) -> pd.DataFrame:
    from incastlab.jobs.script_bound import one_bound

    raw = a.tables.get("workers_raw")
    if raw is None or raw.empty or not (raw["event"] == "collective").any():
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    c = _ranked(raw, "collective")
    for col in COLLECTIVE_COLUMNS:
        if col not in c:
            c[col] = None
    for col in ("step", "bytes", "group_size", "peer", "seq"):  # integers, NA where absent
        c[col] = pd.to_numeric(c[col], errors="coerce").astype("Int64")
    c["duration_s"] = pd.to_numeric(c["t_end"], errors="coerce") - c["t_start"]
    c["bound_s"] = [one_bound(r, context) if context else float("nan")
                    for r in c.to_dict("records")]
    return c[COLLECTIVE_COLUMNS].sort_values(["rank", "seq"], kind="stable") \
        .reset_index(drop=True)


def steps_table(a, coll: pd.DataFrame, context: dict | None) -> pd.DataFrame:
    from incastlab.jobs.script_bound import step_bounds

    raw = a.tables.get("workers_raw")
    if raw is None or raw.empty or not (raw["event"] == "iteration").any():
        return pd.DataFrame(columns=STEP_COLUMNS)
    it = _ranked(raw, "iteration")
    groups = {k: g.to_dict("records") for k, g in coll.groupby(["rank", "step"])} \
        if len(coll) else {}
    rows = []
    for r in it.to_dict("records"):
        mine = groups.get((r["rank"], r["iteration"]), [])
        total, exposed = step_bounds(mine, context) if context else (float("nan"),) * 2
        rows.append({"rank": r["rank"], "step": int(r["iteration"]), "collectives": len(mine),
                     "bytes": float(sum(m["bytes"] or 0 for m in mine)),
                     "duration_s": r["t_end"] - r["t_start"], "comm_s": r.get("comm_s"),
                     "exposed_comm_s": r.get("exposed_comm_s"), "bound_total_s": total,
                     "bound_exposed_s": exposed})
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def tables(a) -> dict:
    context = fabric_context(a)
    coll = collectives_table(a, context)
    return {"collectives": coll, "script_steps": steps_table(a, coll, context)}


def summary_block(a) -> dict | None:
    """metrics.json `script`: steps, collectives, bytes per step, exposed vs total
    communication per step (means over ranks × steps); None where no script ran."""
    coll, steps = a.tables.get("collectives"), a.tables.get("script_steps")
    if coll is None or steps is None or (coll.empty and steps.empty):
        return None

    def mean(col):
        v = pd.to_numeric(steps[col], errors="coerce").dropna() if len(steps) else []
        return float(v.mean()) if len(v) else None

    return {"steps": int(steps["step"].nunique()) if len(steps) else 0,
            "collectives": int(len(coll)),
            "ops": {str(k): int(v) for k, v in coll["op"].value_counts().items()},
            "bytes_per_step": mean("bytes"), "comm_s_mean": mean("comm_s"),
            "exposed_comm_s_mean": mean("exposed_comm_s"),
            "bound_total_s_mean": mean("bound_total_s"),
            "bound_exposed_s_mean": mean("bound_exposed_s")}


def cost_clause(a) -> str | None:
    from incastlab.analysis.findings import duration

    b = (a.metrics or {}).get("script") or {}
    if not b.get("steps"):
        return "the script made no optimizer steps" if b else None
    exposed, comm = b.get("exposed_comm_s_mean"), b.get("comm_s_mean")
    if exposed is None or comm is None:
        return None
    return (f"a step of the script waited {duration(exposed)} on the network of the "
            f"{duration(comm)} its collectives took")


def sections(a) -> list:
    from incastlab.analysis import render
    from incastlab.jobs.base import Section

    title = "Your script's collectives, per step"
    coll, steps = a.tables.get("collectives"), a.tables.get("script_steps")
    if coll is None or coll.empty:
        return [Section(title, *render.none("the observer logged no collectives (workload."
                                            "observe = false, or the script made none)"))]
    ops = ", ".join(f"{n} {op}" for op, n in coll["op"].value_counts().items())
    if steps is None or steps.empty:
        txt = (f"No optimizer steps: the script never called an optimizer's step(), so "
               f"there are no iterations to split; its {len(coll)} collectives ({ops}) "
               "are in the table below and the network sections above still show what "
               "they did to the fabric.")
    else:
        per = steps.groupby("step")[["bytes", "comm_s", "exposed_comm_s", "bound_total_s",
                                     "bound_exposed_s", "duration_s"]].mean()
        fmt = render.fmt
        txt = (f"{steps['step'].nunique()} step(s) on {steps['rank'].nunique()} rank(s); "
               f"{len(coll)} collectives ({ops}). Per step, mean over ranks and steps: "
               f"{per['bytes'].mean():,.0f} bytes, communication {fmt(per['comm_s'].mean())}"
               f" s of which {fmt(per['exposed_comm_s'].mean())} s exposed (the step "
               f"waited on it), against a bound of {fmt(per['bound_total_s'].mean())} s "
               f"for all of it and {fmt(per['bound_exposed_s'].mean())} s for the part "
               f"that must be exposed; step time {fmt(per['duration_s'].mean())} s.")
    h1, m1 = render.table(a, steps if steps is not None else coll.iloc[0:0], "script_steps")
    h2, m2 = render.table(a, coll, "collectives", md_cols=["rank", "step", "op", "bytes",
                                                            "duration_s", "bound_s"])
    errors = _error_tails(a)
    return [Section(title, f"<p>{render.esc(txt)}</p>{errors[0]}{h1}{h2}",
                    f"{txt}\n{errors[1]}\n{m1}\n{m2}")]


def _error_tails(a) -> tuple[str, str]:
    """The traceback tails the script's ranks logged, as html and markdown."""
    from incastlab.analysis import render

    raw = a.tables.get("workers_raw")
    if raw is None or raw.empty or "traceback_tail" not in raw:
        return "", ""
    errs = _ranked(raw, "error")
    errs = errs[errs["traceback_tail"].notna()]
    html, md = "", ""
    for r in errs.to_dict("records"):
        tail = "\n".join(r["traceback_tail"])
        html += f"<p>rank {r['rank']} raised:</p><pre>{render.esc(tail)}</pre>"
        md += f"rank {r['rank']} raised:\n\n```\n{tail}\n```\n"
    return html, md
