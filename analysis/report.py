"""One run directory -> metrics.json, summary.md, report.html and plots/*.png.

`analyse(run_dir)` computes every table; `build_report(run_dir)` writes the files. Each
section copes with missing inputs by saying what is missing. A run whose manifest
status is not `complete` gets a banner at the top of every output and its numbers are
labelled as belonging to an incomplete run.
"""
from __future__ import annotations

import html
import json
import math
import traceback
from dataclasses import dataclass, field
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from incastlab.topologies.fabricmap import FabricMap

from . import chunked
from . import episodes as ep
from . import failover as fo
from . import findings as fnd
from . import inputs as inp
from . import flowroles as fr
from . import interactive
from . import jobcost
from . import latency as lat
from . import multijob as mj
from . import metrics as mt
from . import render
from . import queues as qmod
from . import reconcile as rec
from . import rundir, tcp, training
from . import trace as tr

REPORT_FILES = ("metrics.json", "summary.md", "report.html", "trace.json")


@dataclass
class Analysis:
    """Everything computed from one run directory (tables are pandas DataFrames)."""
    run_dir: Path
    manifest: dict
    spec: dict
    fabric: FabricMap | None  # None: the run has no (readable) fabric.json
    status: str
    reason: str
    t0: float
    t1: float
    tables: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)   # section -> why it is empty
    problems: list = field(default_factory=list)  # warnings worth showing at the top
    inputs: inp.Inventory | None = None  # every input file and its state (inputs.py)
    out_dir: Path | None = None  # where build_report writes (full tables go to tables/)
    # the job registry the command handed in (kind -> Job: incastlab.jobs.JOBS); empty:
    # the generic sections only (the analysis never imports the orchestrator)
    jobs: Mapping = field(default_factory=dict)


def _time_range(manifest, queues, tcp_df, workers):
    starts, ends = [], []
    for df, a, b in ((queues, "t", "t"), (tcp_df, "t", "t")):
        if df is not None and len(df):
            starts.append(float(df[a].min()))
            ends.append(float(df[b].max()))
    if workers is not None and len(workers):
        for c in ("t", "t_start", "t_end"):
            if c in workers:
                v = pd.to_numeric(workers[c], errors="coerce").dropna()
                if len(v):
                    starts.append(float(v.min()))
                    ends.append(float(v.max()))
    start = manifest.get("start") if isinstance(manifest.get("start"), (int, float)) else None
    first = min(starts) if starts else None
    note = None
    if start is not None and (first is None or -1.0 <= first - start <= 86_400):
        t0 = float(start)
    elif first is not None:
        t0 = first
        if start is not None:
            note = (f"manifest start ({start:.3f}) does not match the data (first sample "
                    f"{first:.3f}); times are relative to the first sample")
    else:
        t0 = 0.0
    end = manifest.get("end") if isinstance(manifest.get("end"), (int, float)) else None
    t1 = max(ends) if ends else (end if end is not None else t0)
    return float(t0), float(t1), note


def rto_threshold_from_spec(spec: dict) -> float:
    """Silence (s) that marks a retransmission as an RTO: 90 % of the run's
    `workload.rto_min_ms` when the spec sets one, else tcp.DEFAULT_RTO_THRESHOLD_S
    (the kernel's 200 ms floor less 10 %)."""
    rto_ms = (spec.get("workload") or {}).get("rto_min_ms")
    try:
        return 0.9 * float(rto_ms) / 1000 if rto_ms else tcp.DEFAULT_RTO_THRESHOLD_S
    except (TypeError, ValueError):
        return tcp.DEFAULT_RTO_THRESHOLD_S


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
    broken, errors = [], {}

    def load(fn, empty):
        """A damaged file is reported and treated as missing, never fatal."""
        try:
            return fn(run_dir)
        except (ValueError, KeyError, TypeError, OSError, pd.errors.ParserError) as exc:
            errors[fn.__name__.removeprefix('load_')] = str(exc)
            broken.append(f"{fn.__name__.removeprefix('load_')}: unreadable ({exc}); "
                          "treated as missing")
            return empty() if callable(empty) else empty

    manifest = load(rundir.load_manifest, dict)
    spec = load(rundir.load_spec, dict)
    fabric = load(rundir.load_fabric, None)
    status, reason = rundir.run_status(manifest)
    if rto_threshold_s is None:
        rto_threshold_s = rto_threshold_from_spec(spec)
    missing, problems = {}, []
    if not manifest:
        problems.append("manifest.json is missing: the run's status is unknown.")
    cpu = manifest.get("cpu") if isinstance(manifest.get("cpu"), dict) else {}
    if cpu.get("saturated"):
        problems.append("The CPU was saturated during the workload "
                        f"({cpu.get('rule', '')}): the emulation may have dropped or "
                        "delayed packets no counter shows; treat these numbers with care.")
    sampler = manifest.get("queue_sampler") if isinstance(manifest.get("queue_sampler"),
                                                          dict) else {}
    if sampler.get("bad_samples"):
        problems.append(f"The queue sampler skipped {sampler['bad_samples']} of "
                        f"{sampler.get('samples')} samples whose tc output did not parse "
                        f"({sampler.get('first_bad_sample')}); queue counters are "
                        "cumulative, so drops are still counted, but backlog peaks there "
                        "are unseen.")
    lossy = manifest.get("capture_lossy") or []
    if lossy:
        problems.append(f"tcpdump dropped packets on {', '.join(map(str, lossy))}: losses "
                        "inferred from those captures are overstated by the capture drops.")
    if fabric is None:
        missing["fabric"] = "no fabric.json: losses are not attributed to ports and spine " \
            "balance cannot be computed"

    queues = load(rundir.load_queues, lambda: pd.DataFrame(columns=rundir.QUEUE_COLUMNS))
    port_stats = load(rundir.load_port_stats,
                      lambda: pd.DataFrame(columns=rundir.PORT_STATS_COLUMNS))
    flow_paths = load(rundir.load_flow_paths, pd.DataFrame)
    policy = (spec.get("routing") or {}).get("policy")
    if flow_paths.empty and _foreign_controller(policy):
        problems.append(f"Flow paths: n/a — the run's controller (routing.policy = {policy}) "
                        "is the user's, so which spine each flow took is not recorded; "
                        "losses are attributed to ports from the captures and queues only.")
    counters = load(rundir.load_counters,
                    lambda: pd.DataFrame(columns=["host", "counter", "before", "after",
                                                  "delta"]))
    workers = load(rundir.load_workers, lambda: pd.DataFrame({"event": []}))
    problems += broken  # bad lines of any file: the inventory's problems (inputs.py)
    if queues.empty:
        missing["queues"] = "no queues.csv (or it is empty)"
    if counters.empty:
        missing["counters"] = "no counters/*.json"
    if workers.empty:
        missing["workers"] = "no workers/*.jsonl"
        if (manifest or {}).get("jobs"):  # several jobs: each job's logs and figures
            missing["workers"] = ("several jobs on the fabric: each job's own figures are "
                                  "under 'Jobs on the fabric' (metrics.json jobs)")

    # captures: parsed, each with its state against the manifest's list (inputs.py);
    # their TCP rows go to scratch files that the TCP analysis reads a group of
    # connections at a time (chunked.py; removed by close() below, or by the store's
    # finalizer if analyse fails before)
    store = chunked.CaptureStore()
    n_packets = {}
    job_ports = mj.PortBytes(manifest, fabric)  # [[jobs]]: each port's bytes per job

    def keep(iface, df):
        """Each capture as it is parsed: its TCP rows to the store, then let go; what
        inputs.py still reads of it is its last packet's time, not its rows."""
        n_packets[iface] = len(df)
        job_ports.add(iface, df)
        try:
            store.add(iface, df)
        except OSError as exc:  # e.g. a full disk: the report goes on without its packets
            problems.append(f"capture {iface}: its TCP packets could not be kept for the "
                            f"analysis ({exc}); they are left out")
        return (df[["t"]].iloc[[int(df["t"].to_numpy().argmax())]] if len(df)
                else df[["t"]])

    pcaps, capture_inputs = inp.read_captures(run_dir, manifest, spec, cache, keep=keep)
    if not pcaps:
        missing["pcap"] = "no readable captures in pcap/"
    def guard(what, fn, fallback):
        """A bug or an unforeseen input in one part is reported, not fatal."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{what} could not be computed ({type(exc).__name__}: {exc}); "
                            "shown as empty")
            return fallback()

    try:  # the queue episodes whose senders the captures tell (episodes.py)
        windows = ep.episode_windows(queues, fabric)
    except Exception:  # noqa: BLE001 - reported by the incast episodes' own guard below
        windows = []

    def tcp_tables(store):
        # "spurious" means the receiver already had the data: only the capture at the
        # destination host can say so (one upstream of a drop would call the repair of a
        # real loss spurious, as with a deleted receiver pcap); others stay unknown (NaN).
        # latency.py's per-flow tables are reduced on the same pass over the connections,
        # each chunk's rows appended to a file and only their values kept (lat.Samples:
        # one row per sample for the whole run would grow with it)
        kept = {"rtt": lat.Samples(lat.RTT_COLUMNS, "rtt_s", lat.RTT_KEYS),
                "sojourn": lat.Samples(lat.SOJOURN_COLUMNS, "sojourn_s", lat.SOJOURN_KEYS)}
        extra = {"rtt": (lambda d, _fl, fs: kept["rtt"].add(
                     lat.rtt_samples(d, fs, fabric, manifest)), None),
                 "sojourn": (lambda d, _fl, fs: kept["sojourn"].add(
                     lat.sojourns(d, fs, fabric)), None)}
        tt = chunked.analyse_tcp(store, rto_threshold_s=rto_threshold_s,
                                 at_host=lambda f: _received_at_host(f, fabric),
                                 windows=windows, chunk_packets=chunk_packets, extra=extra)
        tt.extra = {k: v if isinstance(v, Exception) else kept[k] for k, v in tt.extra.items()}
        flows, rec_eps, lost = tt.flows, tt.recovery_episodes, tt.losses
        for r in tt.reused.drop_duplicates("flow").itertuples(index=False):
            problems.append(f"flow {r.flow} carried {r.connections} connections (same ports "
                            "reused); its retransmission and loss counts mix them")
        spurious = (pd.Series(tt.retrans["spurious"].to_numpy(), dtype=object)
                    if len(tt.retrans) else
                    pd.Series(np.nan, index=tt.retrans.index, dtype=object))
        at_host = _received_at_host(flows, fabric)
        if len(flows) and not at_host.all():
            problems.append(f"{int((~at_host).sum())} flow(s) have no capture at their "
                            "destination host: whether their retransmissions were spurious "
                            "is unknown, and losses after their last capture point are "
                            "unseen.")
        retrans = tt.retrans
        attributed = rec.attribute_losses(lost, fabric, queues, flow_paths)
        fsum = tt.flow_summary
        # tables["tcp"], for the views that read packets themselves (render.py's sequence
        # graph, failover.py): all TCP packets when they fit in one chunk; beyond that
        # only the connection of the worst flow (the sequence graph's), so that the run's
        # packets are never all in memory at once
        if store.rows <= chunk_packets:
            return (store.frame(), flows, retrans, rec_eps, lost, spurious, attributed,
                    fsum, tt.throughput, tt.flow_bytes, tt.extra)
        worst = fr.worst_flow(fsum, retrans)
        sample = store.frame(0, 0)
        if worst is not None:
            f = flows[flows["flow"] == worst].iloc[0]
            h = int(chunked.connection_hash(f.src, f.dst, f.sport, f.dport))
            sample = store.frame(h, h + 1)
        sample.attrs["only_connection_of"] = worst
        if (run_dir / fo.EVENTS_FILE).exists():
            problems.append(f"The run's {store.rows} TCP packets are more than one chunk of "
                            f"the analysis ({chunk_packets}): the events' failover table "
                            "and figure see only the packets of the worst flow's connection "
                            "(analyse(chunk_packets=...) larger to see all, at ~300 bytes "
                            "a packet).")
        return (sample, flows, retrans, rec_eps, lost, spurious, attributed, fsum,
                tt.throughput, tt.flow_bytes, tt.extra)

    (tcp_df, flows, retrans, rec_eps, lost, spurious, attributed, fsum, tput, flow_bytes,
     lat_parts) = guard(
        "TCP analysis of the captures", lambda: tcp_tables(store),
        lambda: tcp_tables(chunked.CaptureStore()))
    store_range = store.t_range
    store.close()
    if len(pcaps) and flows.empty:
        missing["flows"] = "captures hold no TCP payload"
    elif len(flows) and flows["receiver_iface"].isna().all():
        missing["losses"] = "no flow was captured at both ends: losses cannot be inferred"

    qd = qmod.queue_deltas(queues)
    qsum = qmod.queue_summary(queues, fabric)

    def balance_tables():
        balance, balance_sum = qmod.fabric_balance(fabric, queues, port_stats)
        sl = qmod.spine_links(fabric)
        util = qmod.link_utilisation(queues, sl["iface"], dict(zip(
            sl["iface"], sl["rate_mbps"], strict=True))) if len(sl) and len(queues) \
            else pd.DataFrame()
        return balance, balance_sum, util

    balance, balance_sum, util = guard("fabric balance", balance_tables, lambda: (
        pd.DataFrame(columns=["iface", "spine", "leaf", "direction", "bytes"]), {},
        pd.DataFrame()))
    episodes = guard("incast episodes", lambda: ep.incast_episodes(
        queues, fabric, None, retrans, flow_paths, flow_bytes=flow_bytes),
        lambda: pd.DataFrame(columns=ep.COLUMNS))
    recon = rec.reconcile(queue_summary=qsum, attributed=attributed, retrans=retrans,
                          spurious=spurious, counters=counters, manifest=manifest,
                          captured_flows=len(flows), fabric=fabric,
                          both_ends_flows=int(flows["receiver_iface"].notna().sum())
                          if len(flows) else 0)

    # training
    iters = guard("worker iterations", lambda: training.iterations(workers),
                  lambda: pd.DataFrame(columns=training.ITER_COLUMNS))
    host_ips = fabric.ip_by_host() if fabric else {}
    iters_ev = guard("network events per iteration", lambda: training.with_network_events(
        iters, lost, retrans, qd, host_ips), lambda: training.with_network_events(
        iters.iloc[0:0], None, None, None))
    steps = training.steps(iters)
    workers_tbl = training.per_worker(iters, steps)
    curve = training.loss_curve(workers)
    finals = training.finals(workers)
    errs = training.errors(workers)
    mode = training.run_mode(workers)
    if len(errs):
        for _, e in errs.iterrows():
            problems.append(f"worker {e.get('file')} reported an error: {e.get('message')}")

    t0, t1, note = _time_range(manifest, queues, pd.DataFrame({"t": list(store_range)})
                               if store_range else None, workers)
    if note:
        problems.append(note)
    # every input's state; a damaged one makes the metrics that need it n/a (inputs.py)
    inventory = inp.inventory(run_dir, manifest=manifest, spec=spec, fabric=fabric,
                              queues=None if "queues" in errors else queues,
                              workers=workers, capture_inputs=capture_inputs, pcaps=pcaps,
                              errors=errors, port_stats=port_stats, flow_paths=flow_paths,
                              t0=t0)
    for group, why in inventory.missing().items():
        missing.setdefault(group, why)  # an input absent as a whole already says so
    problems += inventory.problems()
    a = Analysis(run_dir, manifest, spec, fabric, status, reason, t0, t1,
                 missing=missing, problems=problems, inputs=inventory, jobs=dict(jobs or {}))
    a.tables = {"queues_d": qd, "queue_summary": qsum, "flows": fsum, "throughput": tput,
                "retrans": retrans, "recovery_episodes": rec_eps, "losses": attributed,
                "balance": balance, "utilisation": util, "episodes": episodes,
                "iterations": iters_ev, "steps": steps, "per_worker": workers_tbl,
                "loss_curve": curve, "finals": finals, "workers_raw": workers,
                "counters": counters, "recon": recon, "pcaps": n_packets,
                "starts": training.starts(workers),
                # all TCP packets up to chunk_packets, else the worst flow's connection
                "tcp": tcp_df}
    # flows by the hosts and roles at their ends; the packets behind each finding
    labels = guard("flow labels", lambda: fr.flow_labels(flows, fabric, manifest), dict)
    a.tables["flow_labels"] = labels
    a.tables["rto_packets"] = guard("RTO packets", lambda: fr.rto_packets(
        retrans, flows, labels), pd.DataFrame)
    a.tables["episode_packets"] = guard("incast episode packets", lambda: fr.episode_packets(
        episodes, fabric, [p for p in pcaps]), pd.DataFrame)
    # the job's own tables, its bound and where each iteration's time went (jobcost.py)
    guard("the job's cost model and attribution", lambda: jobcost.analyse_job(a),
          lambda: a.metrics.setdefault("cost", {"available": False,
                                                "reason": "the job's analysis failed"}))
    cost = a.metrics.get("cost")
    ring = a.tables.get("ring", pd.DataFrame(columns=["bound_s", "allreduce_s", "ratio"]))
    dropped = a.tables.get("discarded", pd.DataFrame(columns=["rank", "discarded"]))
    impact = training.impact_summary(iters_ev)
    kind = mt.run_kind(mode, spec, a.jobs)
    rs = tcp.retrans_summary(retrans)
    a.metrics = _jsonable({
        "run": {"dir": str(run_dir), "status": status, "reason": reason,
                "complete": status == "complete", "mode": mode,
                "start": t0, "end": t1, "duration_s": t1 - t0,
                "datapath": manifest.get("datapath"),
                "congestion_control": manifest.get("congestion_control"),
                "slow_start_after_idle": manifest.get("slow_start_after_idle"),
                "rto_threshold_s": rto_threshold_s, "kind": kind},
        "headline": {},  # filled below from the declared metrics (metrics.py)
        "headline_na": {},
        "retransmissions": rs,
        "reconciliation": recon["numbers"],
        "training": impact,
        "workers": workers_tbl.to_dict(orient="records"),
        "discarded_gradients": int(dropped["discarded"].sum()) if len(dropped) else None,
        "balance": balance_sum,
        "ring": {"bound_s": float(ring["bound_s"].iloc[0]) if len(ring) else None,
                 "allreduce_mean_s": float(ring["allreduce_s"].mean()) if len(ring) else None,
                 "ratio_mean": float(ring["ratio"].mean()) if len(ring) else None},
        "cost": cost,
        "flows": int(len(fsum)), "captures": a.tables["pcaps"],
        "missing": missing, "problems": problems,
        "analysis": inventory.to_json(),
    })
    # events of the run and the failover they caused (failover.py; {} without events)
    a.tables["events"] = guard("events and failover", lambda: fo.analyse(a), dict)
    if a.tables["events"]:
        a.metrics["events"] = _jsonable(fo.metrics(a.tables["events"]))
    # latency under load (latency.py): RTT samples, queueing delay, sojourn
    a.tables["latency"] = guard("latency under load", lambda: _latency(a, lat_parts), dict)
    a.metrics["latency"] = _jsonable(lat.summary(a.tables["latency"]))
    # [[jobs]] (multijob.py): each job's own analysis, shared queues by job ({} for one job)
    a.tables["jobs"] = guard("jobs on the fabric", lambda: mj.analyse(a, job_ports), dict)
    if a.tables["jobs"]:
        a.metrics["jobs"] = _jsonable(mj.metrics(a.tables["jobs"]))
    readings = mt.evaluate(a, kind)
    a.metrics["headline"] = _jsonable(mt.headline(readings))
    a.metrics["headline_na"] = mt.not_available(readings)
    a.problems += _na_problems(readings, missing)
    _withhold(a, inventory.missing())  # before the findings, which read these numbers
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
                f"{mt.INPUTS.get(group, group)}: {damaged[group]}. The numbers below that "
                "come from it are what remains, not the run's totals."))


def _na_problems(readings, missing: dict) -> list[str]:
    """One sentence per missing or damaged input naming the metrics it made n/a."""
    out = []
    for key, why in missing.items():
        names = [r.metric.name for r in readings if r.value is None and key in r.metric.inputs]
        if names:
            out.append(f"n/a for want of {mt.INPUTS.get(key, key)} ({why}): "
                       + ", ".join(names) + ".")
    return out


def _latency(a: Analysis, parts: dict) -> dict:
    """latency.analyse's tables, with the RTT samples and sojourns reduced a group of
    connections at a time with the other TCP tables (chunked.py), not from all packets,
    and kept as lat.Samples (rows on disk, values in memory; the same summary)."""
    for v in parts.values():
        if isinstance(v, Exception):
            raise v
    rtt, soj = parts["rtt"], parts["sojourn"]
    qd = lat.queue_delay(a.tables.get("queues_d"), a.fabric)
    return {"rtt": rtt, "queue_delay": qd, "sojourn": soj,
            "summary": lat.summary_table(rtt, qd, soj, a.fabric)}


def _received_at_host(flows: pd.DataFrame, fabric) -> pd.Series:
    """Per flow: is its receiver-side capture the destination host's own interface?
    Without a fabric map the interface names cannot be checked: the last capture point
    is taken as the receiver (the behaviour before fabric maps)."""
    if flows.empty:
        return pd.Series(dtype=bool)
    if fabric is None:
        return flows["receiver_iface"].notna()
    from .pcap import ip_to_str

    def at_host(dst, iface):
        host = fabric.host_by_ip(ip_to_str(dst))
        return host is not None and iface == host.intf

    return pd.Series([at_host(d, i) for d, i in zip(flows["dst"], flows["receiver_iface"],
                                                      strict=True)], index=flows.index)


def _foreign_controller(policy) -> bool:
    """The policy runs the user's controller code (an app or an external controller),
    whose path choices our controller cannot record (controller/registry.py)."""
    from incastlab.controller.registry import POLICIES

    p = POLICIES.get(policy) if isinstance(policy, str) else None
    return bool(p and (p.user_apps or p.external))


def _write_trace(a: Analysis, path: Path) -> Path | None:
    """trace.json for Perfetto (analysis/trace.py); a failure is a problem, not fatal."""
    try:
        trace = tr.build_trace(a.tables["workers_raw"], a.tables["queues_d"],
                               a.tables["retrans"], t0=a.t0,
                               host_ips=a.fabric.ip_by_host() if a.fabric else {})
        return tr.write_trace(path, trace)
    except Exception as exc:  # noqa: BLE001
        a.problems.append(f"trace.json could not be written ({type(exc).__name__}: {exc})")
        return None


def _findings(a: Analysis) -> list[str]:
    """The findings sentences (findings.py); a bug there is reported, not fatal."""
    try:
        return _jsonable(fnd.texts(a))
    except Exception as exc:  # noqa: BLE001
        a.problems.append(f"findings could not be written ({type(exc).__name__}: {exc})")
        return []


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        return None if math.isnan(float(obj)) or math.isinf(float(obj)) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


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
    figs = render.plot_all(a, out / "plots") if plots else {}
    if plots:
        figs["latency"] = lat.figure(a, out / "plots" / "latency.png")
        figs["events"] = fo.figure(a, out / "plots" / "events.png")
    try:
        sections = fo.with_section(lat.with_section(render.sections(a, figs), a, figs), a,
                                   figs)
        sections = mj.with_section(sections, a, figs)
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
    metrics_path.write_text(json.dumps(_jsonable(a.metrics), indent=2, default=str))

    title = f"incastlab run {a.run_dir.name}"
    md = [f"# {title}\n"]
    partial = a.inputs.banner() if a.inputs else None
    if partial:  # one line: the analysis lacks inputs (metrics.json's analysis.inputs)
        md.insert(0, f"> **{partial}**\n")
    if banner:
        md.insert(0, f"> **{banner}**\n")
    md.append(f"status: {a.status}" + (f" ({a.reason})" if a.reason else "") + "\n")
    md.append(render.findings_md(a.metrics["findings"]))
    md += [f"> {p}\n" for p in a.problems]
    if a.missing:
        md.append("Missing inputs:\n" + "".join(f"- {k}: {v}\n" for k, v in a.missing.items()))
    for sec_title, _, sec_md in sections:
        md.append(f"\n## {sec_title}\n\n{sec_md}")
    summary_path = out / "summary.md"
    summary_path.write_text("\n".join(md))

    body = []
    if banner:
        body.append(f"<div class='banner' id='status-banner'>{html.escape(banner)}</div>")
    if partial:
        body.append(f"<div class='banner' id='partial-banner'>{html.escape(partial)}</div>")
    body.append(f"<h1>{html.escape(title)}</h1><p>status: <b>{html.escape(a.status)}</b>"
                f"{' — ' + html.escape(a.reason) if a.reason else ''}; "
                f"duration {render.fmt(a.t1 - a.t0)} s</p>")
    body.append(render.findings_html(a.metrics["findings"]))
    for p in a.problems:
        body.append(f"<p class='warn'>{html.escape(p)}</p>")
    if a.missing:
        body.append("<p class='warn'>Missing inputs: " + "; ".join(
            f"{html.escape(k)}: {html.escape(v)}" for k, v in a.missing.items()) + "</p>")
    toc = "".join(f"<li><a href='#s{i}'>{html.escape(s[0])}</a></li>"
                  for i, s in enumerate(sections))
    body.append(f"<ul>{toc}</ul>")
    for i, (sec_title, sec_html, _) in enumerate(sections):
        body.append(f"<h2 id='s{i}'>{html.escape(sec_title)}</h2>{sec_html}")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{render.CSS}</style>"
            # plotly.js inlined once, only where an interactive figure is on the page
            + (interactive.script() if any(isinstance(v, str) for v in figs.values()) else "")
            + f"</head><body>{''.join(body)}</body></html>")
    report_path = out / "report.html"
    report_path.write_text(page)
    return {"metrics": metrics_path, "summary": summary_path, "report": report_path,
            "plots": pngs,
            # the same paths under their file names, for callers that look them up so
            "metrics.json": metrics_path, "summary.md": summary_path,
            "report.html": report_path}
