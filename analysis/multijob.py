"""Several jobs on one fabric (``[[jobs]]``, incastlab/multijob.py): who used what.

- A flow (or a packet) belongs to job *i* when the hosts at both its ends are job
  *i*'s (the manifest's ``jobs`` say which hosts are whose); a flow between two jobs'
  hosts, or to an address no job has, is ``other``. Control flows to a job's rank-0
  host are between two of its hosts, so they are the job's too.
- A captured switch port's bytes per job: the packets that leave through that port
  (whose src -> dst path crosses it as an egress port, ``queues.path_ports``; a
  capture on a port sees both directions, only one of them queues there), summed per
  job: the jobs' rows plus ``other`` add up to the port's egress bytes in its capture.
- A port's losses per job: the capture-inferred losses the analysis put at that port
  (``reconcile.attribute_losses``), counted per job by the lost packet's ends.
- Each job's own analysis: its workers' logs (``jobs/job-<i>/workers``), its
  iterations, and its plugin's bound, tables and sections, on a view of the run where
  that job is the run's only job (:func:`job_analysis`).

The tables go to report.html ("Jobs on the fabric", "Shared queues by job", each job's
own sections) and metrics.json ``jobs``.
"""
from __future__ import annotations

import copy
import html
import re
from pathlib import Path

import numpy as np
import pandas as pd

from . import pcap as pc
from . import queues as qmod
from . import rundir
from .stages import Stage

__all__ = ["LOSS_COLUMNS", "OTHER", "PORT_COLUMNS", "SLOWDOWN_COLUMNS", "STAGE",
           "PortBytes", "analyse", "compare_section", "egress_mask", "flow_jobs",
           "host_jobs", "ip_jobs", "job_analysis", "job_of_pairs", "job_records", "metrics",
           "port_bytes_by_job", "port_losses_by_job", "regroup", "run_mode", "sections",
           "shared_queues", "slowdown", "summary_row"]

OTHER = "other"
PORT_COLUMNS = ["port", "job", "packets", "bytes"]
LOSS_COLUMNS = ["port", "job", "lost"]
_HOST_IFACE = re.compile(r"^h\d+-eth")


def host_jobs(manifest: dict) -> dict[str, int]:
    """Host name -> index of the job it belongs to, from the manifest's ``jobs``."""
    out = {}
    for j in (manifest or {}).get("jobs") or []:
        for h in j.get("hosts") or [*(j.get("servers") or []), *(j.get("workers") or [])]:
            out[h] = int(j["index"])
    return out


def ip_jobs(host_job: dict[str, int], fabric) -> dict[str, int]:
    """Address -> job index (addresses from the fabric map)."""
    ips = fabric.ip_by_host() if fabric is not None else {}
    return {ips[h]: j for h, j in host_job.items() if h in ips}


def _ip_text(values) -> np.ndarray:
    values = np.asarray(values)
    if values.dtype.kind in "ui":
        return np.asarray(pc.ip_to_str(values.astype(np.uint32)), dtype=object)
    return values.astype(object)


def job_of_pairs(src, dst, ip_job: dict[str, int]) -> np.ndarray:
    """Per (src, dst) address pair: the job whose hosts both are, else ``other``."""
    s = pd.Series(_ip_text(src)).map(ip_job)
    d = pd.Series(_ip_text(dst)).map(ip_job)
    same = s.notna() & (s == d)
    out = np.full(len(s), OTHER, dtype=object)
    out[same.to_numpy()] = s[same].astype(int).to_numpy()
    return out


def flow_jobs(flows: pd.DataFrame, ip_job: dict[str, int]) -> pd.Series:
    """Each flow's job (index, or ``other``), by its two ends."""
    if flows is None or flows.empty:
        return pd.Series([], dtype=object)
    return pd.Series(job_of_pairs(flows["src"], flows["dst"], ip_job), index=flows.index)


def egress_mask(packets: pd.DataFrame, port: str, fabric, ip_host: dict[str, str]) -> np.ndarray:
    """The packets of a capture on switch port ``port`` that leave through it (their
    path's egress ports include it). A host's own interface: every packet."""
    if _HOST_IFACE.match(port) or fabric is None:
        return np.ones(len(packets), dtype=bool)
    src, dst = _ip_text(packets["src"]), _ip_text(packets["dst"])
    pairs = pd.DataFrame({"s": src, "d": dst})
    keep = {}
    for s, d in pairs.drop_duplicates().itertuples(index=False):
        hs, hd = ip_host.get(s), ip_host.get(d)
        keep[(s, d)] = bool(hs and hd and port in qmod.path_ports(fabric, hs, hd))
    return np.fromiter((keep[(s, d)] for s, d in zip(src, dst, strict=True)), dtype=bool,
                       count=len(src))


def port_bytes_by_job(packets: pd.DataFrame, port: str, ip_job: dict[str, int],
                      fabric=None, ip_host: dict[str, str] | None = None) -> pd.DataFrame:
    """One capture's egress packets and wire bytes (``frame_len``) per job at ``port``:
    rows (port, job, packets, bytes), ``other`` included when it has any, so the rows
    add up to the port's egress packets and bytes."""
    if packets is None or packets.empty:
        return pd.DataFrame(columns=PORT_COLUMNS)
    ip_host = ip_host if ip_host is not None else rundir.host_by_ip(fabric)
    p = packets[egress_mask(packets, port, fabric, ip_host)]
    if p.empty:
        return pd.DataFrame(columns=PORT_COLUMNS)
    jobs = job_of_pairs(p["src"], p["dst"], ip_job)
    g = pd.DataFrame({"job": jobs, "bytes": p["frame_len"].to_numpy(np.int64)}).groupby(
        "job", sort=False)["bytes"].agg(["size", "sum"]).reset_index()
    return pd.DataFrame({"port": port, "job": g["job"], "packets": g["size"].astype(int),
                         "bytes": g["sum"].astype(int)})[PORT_COLUMNS]


class PortBytes:
    """Accumulates :func:`port_bytes_by_job` over the captures as the analysis reads
    them one at a time (it keeps no capture's packets)."""

    def __init__(self, manifest: dict, fabric):
        self.ip_job = ip_jobs(host_jobs(manifest), fabric)
        self.fabric = fabric
        self.ip_host = rundir.host_by_ip(fabric)
        self.parts: list[pd.DataFrame] = []
        self.problems: list[str] = []

    def add(self, port: str, packets: pd.DataFrame) -> None:
        if not self.ip_job:  # a one-job run: nothing to attribute
            return
        try:
            self.parts.append(port_bytes_by_job(packets, port, self.ip_job, self.fabric,
                                                self.ip_host))
        except Exception as exc:  # noqa: BLE001 - said in the report, the rest goes on
            self.problems.append(f"bytes by job at {port} could not be computed "
                                 f"({type(exc).__name__}: {exc})")

    def table(self) -> pd.DataFrame:
        parts = [p for p in self.parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else \
            pd.DataFrame(columns=PORT_COLUMNS)


def port_losses_by_job(losses: pd.DataFrame, ip_job: dict[str, int]) -> pd.DataFrame:
    """Lost packets per (port, job): the losses the analysis put at each port, by the
    lost packet's ends."""
    if losses is None or losses.empty or "port" not in losses:
        return pd.DataFrame(columns=LOSS_COLUMNS)
    jobs = job_of_pairs(losses["src"], losses["dst"], ip_job)
    g = pd.DataFrame({"port": losses["port"].to_numpy(), "job": jobs}).groupby(
        ["port", "job"], sort=False).size().reset_index(name="lost")
    return g[LOSS_COLUMNS]


def shared_queues(port_bytes: pd.DataFrame, port_losses: pd.DataFrame) -> pd.DataFrame:
    """Per switch port and job: packets, bytes, that job's share of the port's bytes and
    its lost packets there (ports with a capture or a loss; host interfaces left out)."""
    cols = ["port", "job", "packets", "bytes", "share", "lost"]
    pb = port_bytes[~port_bytes["port"].astype(str).str.match(_HOST_IFACE)] \
        if len(port_bytes) else pd.DataFrame(columns=PORT_COLUMNS)
    pl = port_losses[~port_losses["port"].astype(str).str.match(_HOST_IFACE)] \
        if len(port_losses) else pd.DataFrame(columns=LOSS_COLUMNS)
    key = ["port", "job"]
    t = pb.astype({"job": str}).merge(pl.astype({"job": str}), on=key, how="outer")
    if t.empty:
        return pd.DataFrame(columns=cols)
    t[["packets", "bytes", "lost"]] = t[["packets", "bytes", "lost"]].fillna(0).astype(int)
    total = t.groupby("port")["bytes"].transform("sum")
    t["share"] = np.where(total > 0, t["bytes"] / total.where(total > 0, 1), np.nan)
    return t.sort_values(key, kind="stable").reset_index(drop=True)[cols]


# --- each job's own analysis -----------------------------------------------------------------

def job_records(a) -> list[dict]:
    """The manifest's jobs that ran (a job with ``launch = false`` only kept hosts idle)."""
    return [j for j in (a.manifest or {}).get("jobs") or [] if j.get("launched", True)]


def job_analysis(a, record: dict):
    """A copy of analysis ``a`` as job ``record`` alone sees the run: the job's table
    as the spec's [workload], its hosts as the placement, its workers' logs and the
    tables computed from them; then its plugin's cost model (network_cost.analyse_job)."""
    from . import network_cost, training

    import tomllib

    d = Path(a.run_dir) / record.get("dir", f"jobs/job-{record['index']}")
    sub = copy.copy(a)
    try:
        sub.spec = tomllib.loads((d / "spec.toml").read_text())
    except (OSError, ValueError):
        sub.spec = {**(a.spec or {}), "workload": {"kind": record.get("kind")}}
    sub.manifest = {**(a.manifest or {}), "placement": {
        "servers": record.get("servers") or [], "workers": record.get("workers") or []},
        "processes": record.get("processes") or []}
    sub.tables = dict(a.tables)
    sub.metrics = {}
    workers = rundir.load_workers(d)
    iters = training.iterations(workers)
    host_ips = a.fabric.ip_by_host() if a.fabric else {}
    iters_ev = training.with_network_events(iters, a.tables.get("losses"),
                                            a.tables.get("retrans"),
                                            a.tables.get("queues_d"), host_ips)
    steps = training.steps(iters)
    sub.tables.update(workers_raw=workers, iterations=iters_ev, steps=steps,
                      per_worker=training.per_worker(iters, steps),
                      loss_curve=training.loss_curve(workers), finals=training.finals(workers),
                      starts=training.starts(workers))
    for k in getattr(a, "job_tables", ()):  # the whole run's job's, not this job's
        sub.tables.pop(k, None)
    network_cost.analyse_job(sub)
    return sub


def summary_row(record: dict, sub) -> dict:
    """One job's line: kind, hosts, iterations, mean iteration time, bound, ratio."""
    it = sub.tables.get("iterations")
    dur = pd.to_numeric(it["duration_s"], errors="coerce") \
        if isinstance(it, pd.DataFrame) and "duration_s" in it else pd.Series(dtype=float)
    steps = sub.tables.get("steps")
    n = int(len(steps)) if isinstance(steps, pd.DataFrame) else 0
    cost = sub.metrics.get("cost") or {}
    bound = sub.tables.get("bound")
    return {"job": int(record["index"]), "kind": record.get("kind"),
            "hosts": list(record.get("hosts") or []),
            "start_offset_s": record.get("start_offset_s"),
            "duration_s": record.get("duration_s"),
            "iterations": n,
            "iteration_mean_s": float(dur.mean()) if len(dur.dropna()) else None,
            "bound_s": float(bound.seconds) if bound is not None else None,
            "ratio": cost.get("ratio_mean", cost.get("ratio")) if cost else None}


def analyse(a, port_bytes: PortBytes | None) -> dict:
    """Every job's analysis and the shared queues by job ({} for a one-job run)."""
    records = job_records(a)
    if not records:
        return {}
    ip_job = ip_jobs(host_jobs(a.manifest), a.fabric)
    pb = port_bytes.table() if port_bytes is not None else pd.DataFrame(columns=PORT_COLUMNS)
    if port_bytes is not None:
        a.problems += port_bytes.problems
    pl = port_losses_by_job(a.tables.get("losses"), ip_job)
    subs, rows = {}, []
    for r in records:
        sub = job_analysis(a, r)
        subs[int(r["index"])] = sub
        rows.append(summary_row(r, sub))
    flows = a.tables.get("flows")
    fj = flow_jobs(flows, ip_job) if isinstance(flows, pd.DataFrame) else pd.Series([])
    for row in rows:
        row["flows"] = int((fj.astype(str) == str(row["job"])).sum())
    return {"summary": pd.DataFrame(rows), "port_bytes": pb, "port_losses": pl,
            "shared": shared_queues(pb, pl), "subs": subs, "records": records}


def metrics(t: dict) -> list[dict]:
    """metrics.json ``jobs``: per job its summary and, per shared port, its bytes,
    share and losses."""
    if not t:
        return []
    shared = t["shared"]
    out = []
    for row in t["summary"].to_dict(orient="records"):
        mine = shared[shared["job"] == str(row["job"])] if len(shared) else shared
        out.append({**row, "ports": [
            {"port": p.port, "packets": int(p.packets), "bytes": int(p.bytes),
             "share": None if pd.isna(p.share) else float(p.share), "lost": int(p.lost)}
            for p in mine.itertuples(index=False)]})
    return out


def _table_html(df: pd.DataFrame) -> str:
    return df.to_html(index=False, na_rep="n/a", float_format=lambda v: f"{v:.3g}",
                      classes="jobs")


def sections(a, figs: dict) -> list:
    """"Jobs on the fabric", "Shared queues by job" and each job's own sections (titled
    ``Job i (kind): ...``) for a run with [[jobs]]; none for one job."""
    t = (a.tables or {}).get("jobs") or {}
    if not t:
        return []
    summary = t["summary"]
    out = []
    out.append(("Jobs on the fabric",
                "<p>Each job's hosts, its iterations and their mean time, and the bound of "
                "one iteration on this fabric (its own plugin's cost model).</p>"
                + _table_html(summary), _md(summary)))
    shared = t["shared"]
    text = ("<p>Bytes of each job's packets that left through each captured switch port "
            "(egress only: the queue they waited in), its share of the port's bytes, and "
            "its packets lost there. A job's flows are those between two of its hosts; "
            "<i>other</i>: between hosts of different jobs or none.</p>")
    out.append(("Shared queues by job", text + (_table_html(shared) if len(shared) else
                                                "<p>No switch port was captured.</p>"),
                _md(shared)))
    for r in t["records"]:
        i = int(r["index"])
        sub = t["subs"][i]
        job = (getattr(a, "jobs", None) or {}).get(r.get("kind"))
        if job is None:
            continue
        try:
            secs = job.sections(sub, {})
        except Exception as exc:  # noqa: BLE001 - one job's bug leaves the others
            secs = [("section error", f"<p>{html.escape(repr(exc))}</p>", repr(exc))]
        for title, body, md in secs:
            out.append((f"Job {i} ({r.get('kind')}): {title}", body, md))
    return out


# the report's multi-job stage (stages.py): each job's analysis, at the end of the page
STAGE = Stage("jobs", ("manifest.json jobs", "jobs/*/spec.toml", "jobs/*/workers", "losses"),
              compute=lambda a: analyse(a, a.captured.get("jobs")),
              metrics=lambda t: metrics(t) if t else None, render=sections,
              what="jobs on the fabric")


def _md(df: pd.DataFrame) -> str:
    if df is None or df.empty:
        return "(none)\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def _cell(v) -> str:
    if isinstance(v, float):
        return "n/a" if np.isnan(v) else f"{v:.3g}"
    return str(v)


# --- together / alone (incastlab sweep of a [[jobs]] spec; the comparison) ---------------------

SLOWDOWN_COLUMNS = ["context", "job", "kind", "together_s", "alone_s", "slowdown",
                    "n_together", "n_alone"]


def run_mode(manifest: dict) -> str | None:
    """``together`` (every job ran), ``alone-<i>`` (job i alone) or None (no [[jobs]])."""
    jobs = (manifest or {}).get("jobs") or []
    if not jobs:
        return None
    ran = [int(j["index"]) for j in jobs if j.get("launched", True)]
    if len(ran) == len(jobs):
        return "together"
    return f"alone-{ran[0]}" if len(ran) == 1 else "+".join(map(str, ran))


def slowdown(runs: list[dict]) -> pd.DataFrame:
    """Each job's mean iteration time together over alone, per context (the sweep point
    without its jobs axis). ``runs``: dicts with ``spec``, ``manifest`` and ``metrics``
    (metrics.json's ``jobs``) as the comparison loads them."""
    from .compare import flatten

    rows: dict[tuple, dict] = {}
    flat = [{k: v for k, v in flatten(r["spec"] or {}).items()
             if not k.startswith("jobs") and not k.endswith(".seed") and k != "run.name"}
            for r in runs]
    keys = sorted(k for k in set().union(*flat) if len({repr(f.get(k)) for f in flat}) > 1) \
        if flat else []
    for r, f in zip(runs, flat, strict=True):
        mode = run_mode(r.get("manifest"))
        if mode is None:
            continue
        context = ",".join(f"{k.rsplit('.', 1)[-1]}={f.get(k)}" for k in keys) or "all"
        for m in r.get("jobs") or []:
            if m.get("iteration_mean_s") is None:
                continue
            if mode != "together" and mode != f"alone-{m['job']}":
                continue
            row = rows.setdefault((context, int(m["job"])), {
                "context": context, "job": int(m["job"]), "kind": m.get("kind"),
                "together": [], "alone": []})
            row["together" if mode == "together" else "alone"].append(m["iteration_mean_s"])
    out = []
    for row in rows.values():
        t = float(np.mean(row["together"])) if row["together"] else np.nan
        a = float(np.mean(row["alone"])) if row["alone"] else np.nan
        out.append({"context": row["context"], "job": row["job"], "kind": row["kind"],
                    "together_s": t, "alone_s": a,
                    "slowdown": t / a if a and not np.isnan(a) else np.nan,
                    "n_together": len(row["together"]), "n_alone": len(row["alone"])})
    return pd.DataFrame(out, columns=SLOWDOWN_COLUMNS)


def compare_section(runs: list[dict], out_dir) -> tuple[str, list[dict]]:
    """The comparison's "Each job together and alone" (HTML) and its rows (compare.json);
    ("", []) when no run had [[jobs]]. Writes jobs_slowdown.csv into ``out_dir``."""
    runs = [{"spec": r.get("spec"), "manifest": r.get("manifest"),
             "jobs": ((r.get("analysis").metrics if r.get("analysis") is not None else {})
                      or {}).get("jobs") or []} for r in runs]
    t = slowdown(runs)
    if t.empty:
        return "", []
    t.to_csv(Path(out_dir) / "jobs_slowdown.csv", index=False)
    text = ("<h2>Each job together and alone</h2><p>Each job's mean iteration time with "
            "every job on the fabric, alone on the same hosts (the others' hosts idle), and "
            "their ratio: the job's slowdown from sharing the fabric.</p>")
    return text + _table_html(t), t.to_dict(orient="records")


def regroup(runs: list[dict], keys: list[str]) -> list[str]:
    """Runs of a [[jobs]] spec grouped by the other differing keys and their
    ``jobs=together`` / ``jobs=alone-<i>`` (not by the whole [[jobs]] array, whose text
    differs only in which jobs were launched). Returns the differing keys without
    ``jobs`` (an array of tables: no axis to plot or label by)."""
    from .compare import group_label

    if "jobs" not in keys:
        return keys
    others = [k for k in keys if k != "jobs"]
    for r in runs:
        mode = run_mode(r.get("manifest"))
        if mode is None:
            continue
        head = group_label(r["spec"], others) if others else ""
        r["group"] = f"{head},jobs={mode}" if head else f"jobs={mode}"
    return others
