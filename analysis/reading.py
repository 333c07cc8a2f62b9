"""One run directory read into the tables every report has.

`read_run(run_dir, ...)` loads the run's files (a damaged one is reported and treated
as missing), parses the captures once (chunked.py: one capture at a time, the TCP
analysis a group of connections at a time), and computes the common tables: queues,
flows, retransmissions, losses, the fabric's balance, incast episodes, the
reconciliation and the training tables; then the job's cost (network_cost.py) and the run's
metrics. The report's stages (stages.py) add theirs on top (`report.analyse`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from incastlab.topologies.fabricmap import FabricMap

from . import chunked
from . import episodes as ep
from . import flowroles as fr
from . import inputs as inp
from . import network_cost
from . import metrics as mt
from . import multijob as mj
from . import queues as qmod
from . import reconcile as rec
from . import rundir, tcp, training

__all__ = ["Analysis", "guard", "jsonable", "read_run", "received_at_host",
           "rto_threshold_from_spec"]



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
    # the names of the tables the run's job added (Job.tables; network_cost.analyse_job)
    job_tables: tuple[str, ...] = ()
    # what the one pass over the captures reduced for a stage's compute (stages.py):
    # each stage's reducer by its name (latency, events), each port's bytes per job
    captured: dict = field(default_factory=dict)


@dataclass
class _Reading:
    """The files of one run as they are read, and what went wrong reading them."""
    run_dir: Path
    rto_threshold_s: float | None
    problems: list = field(default_factory=list)
    missing: dict = field(default_factory=dict)
    broken: list = field(default_factory=list)
    errors: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)

    def load(self, fn, empty):
        """A damaged file is reported and treated as missing, never fatal."""
        try:
            return fn(self.run_dir)
        except (ValueError, KeyError, TypeError, OSError, pd.errors.ParserError) as exc:
            self.errors[fn.__name__.removeprefix('load_')] = str(exc)
            self.broken.append(f"{fn.__name__.removeprefix('load_')}: unreadable ({exc}); "
                               "treated as missing")
            return empty() if callable(empty) else empty

    def guard(self, what, fn, fallback):
        return guard(self.problems, what, fn, fallback)


def guard(problems: list, what: str, fn, fallback):
    """``fn()``; a bug or an unforeseen input in it is one of ``problems`` (and
    ``fallback()`` its result), not fatal."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        problems.append(f"{what} could not be computed ({type(exc).__name__}: {exc}); "
                        "shown as empty")
        return fallback()


def rto_threshold_from_spec(spec: dict) -> float:
    """Silence (s) that marks a retransmission as an RTO: 90 % of the run's
    `workload.rto_min_ms` when the spec sets one, else tcp.DEFAULT_RTO_THRESHOLD_S
    (the kernel's 200 ms floor less 10 %)."""
    rto_ms = (spec.get("workload") or {}).get("rto_min_ms")
    try:
        return 0.9 * float(rto_ms) / 1000 if rto_ms else tcp.DEFAULT_RTO_THRESHOLD_S
    except (TypeError, ValueError):
        return tcp.DEFAULT_RTO_THRESHOLD_S


def _manifest_problems(manifest: dict) -> list[str]:
    """What the manifest says makes the numbers less trustworthy."""
    problems = []
    if not manifest:
        problems.append("manifest.json is missing: the run's status is unknown.")
    # whether the emulation kept up is the fidelity verdict's (fidelityreport.py adds
    # it here when not); the CPU samples only support it
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
    return problems


def _read_files(run_dir: Path, rto_threshold_s: float | None) -> _Reading:
    """Every file of the run but the captures."""
    r = _Reading(run_dir, rto_threshold_s)
    f = r.files
    f["manifest"] = manifest = r.load(rundir.load_manifest, dict)
    f["spec"] = spec = r.load(rundir.load_spec, dict)
    f["fabric"] = fabric = r.load(rundir.load_fabric, None)
    if r.rto_threshold_s is None:
        r.rto_threshold_s = rto_threshold_from_spec(spec)
    r.problems += _manifest_problems(manifest)
    if fabric is None:
        r.missing["fabric"] = "no fabric.json: losses are not attributed to ports and " \
            "spine balance cannot be computed"
    f["queues"] = r.load(rundir.load_queues, lambda: pd.DataFrame(columns=rundir.QUEUE_COLUMNS))
    f["port_stats"] = r.load(rundir.load_port_stats,
                             lambda: pd.DataFrame(columns=rundir.PORT_STATS_COLUMNS))
    f["flow_paths"] = r.load(rundir.load_flow_paths, pd.DataFrame)
    policy = (spec.get("routing") or {}).get("policy")
    if f["flow_paths"].empty and _foreign_controller(policy):
        r.problems.append(f"Flow paths: n/a — the run's controller (routing.policy = "
                          f"{policy}) is the user's, so which spine each flow took is not "
                          "recorded; losses are attributed to ports from the captures and "
                          "queues only.")
    f["counters"] = r.load(rundir.load_counters, lambda: pd.DataFrame(
        columns=["host", "counter", "before", "after", "delta"]))
    f["workers"] = r.load(rundir.load_workers, lambda: pd.DataFrame({"event": []}))
    r.problems += r.broken  # bad lines of any file: the inventory's problems (inputs.py)
    if f["queues"].empty:
        r.missing["queues"] = "no queues.csv (or it is empty)"
    if f["counters"].empty:
        r.missing["counters"] = "no counters/*.json"
    if f["workers"].empty:
        r.missing["workers"] = "no workers/*.jsonl"
        if (manifest or {}).get("jobs"):  # several jobs: each job's logs and figures
            r.missing["workers"] = ("several jobs on the fabric: each job's own figures "
                                    "are under 'Jobs on the fabric' (metrics.json jobs)")
    return r


def _read_captures(r: _Reading, cache: bool) -> chunked.CaptureStore:
    """The captures, parsed, each with its state against the manifest's list
    (inputs.py); their TCP rows go to scratch files that the TCP analysis reads a group
    of connections at a time (chunked.py; removed by close(), or by the store's
    finalizer if the analysis fails before)."""
    f = r.files
    store = chunked.CaptureStore()
    f["n_packets"] = n_packets = {}
    f["job_ports"] = job_ports = mj.PortBytes(f["manifest"], f["fabric"])  # [[jobs]]

    def keep(iface, df):
        """Each capture as it is parsed: its TCP rows to the store, then let go; what
        inputs.py still reads of it is its last packet's time, not its rows."""
        n_packets[iface] = len(df)
        job_ports.add(iface, df)
        try:
            store.add(iface, df)
        except OSError as exc:  # e.g. a full disk: the report goes on without its packets
            r.problems.append(f"capture {iface}: its TCP packets could not be kept for the "
                              f"analysis ({exc}); they are left out")
        return (df[["t"]].iloc[[int(df["t"].to_numpy().argmax())]] if len(df)
                else df[["t"]])

    f["pcaps"], f["capture_inputs"] = inp.read_captures(r.run_dir, f["manifest"], f["spec"],
                                                        cache, keep=keep)
    if not f["pcaps"]:
        r.missing["pcap"] = "no readable captures in pcap/"
    try:  # the queue episodes whose senders the captures tell (episodes.py)
        f["windows"] = ep.episode_windows(f["queues"], f["fabric"])
    except Exception:  # noqa: BLE001 - reported by the incast episodes' own guard
        f["windows"] = []
    return store


def _tcp_tables(r: _Reading, store, chunk_packets: int) -> dict:
    """The TCP tables of every connection, in one pass over the store that also feeds
    the report stages' reducers (stages.Stage.reduce: latency's samples, failover's
    per-flow rows), so that no stage needs the run's packets in memory."""
    from .stages import declared

    fabric, manifest = r.files["fabric"], r.files["manifest"]
    reducers = {s.name: s.reduce(r.run_dir, fabric, manifest) for s in declared() if s.reduce}
    reducers = {name: red for name, red in reducers.items() if red is not None}
    # "spurious" means the receiver already had the data: only the capture at the
    # destination host can say so (one upstream of a drop would call the repair of a
    # real loss spurious, as with a deleted receiver pcap); others stay unknown (NaN).
    tt = chunked.analyse_tcp(store, rto_threshold_s=r.rto_threshold_s,
                             at_host=lambda fl: received_at_host(fl, fabric),
                             windows=r.files["windows"], chunk_packets=chunk_packets,
                             extra={name: (red.add, None) for name, red in reducers.items()})
    captured = {k: v if isinstance(v, Exception) else reducers[k] for k, v in tt.extra.items()}
    flows = tt.flows
    for row in tt.reused.drop_duplicates("flow").itertuples(index=False):
        r.problems.append(f"flow {row.flow} carried {row.connections} connections (same "
                          "ports reused); its retransmission and loss counts mix them")
    spurious = (pd.Series(tt.retrans["spurious"].to_numpy(), dtype=object)
                if len(tt.retrans) else
                pd.Series(np.nan, index=tt.retrans.index, dtype=object))
    at_host = received_at_host(flows, fabric)
    if len(flows) and not at_host.all():
        r.problems.append(f"{int((~at_host).sum())} flow(s) have no capture at their "
                          "destination host: whether their retransmissions were spurious "
                          "is unknown, and losses after their last capture point are "
                          "unseen.")
    t = {"flows": flows, "retrans": tt.retrans, "recovery_episodes": tt.recovery_episodes,
         "lost": tt.losses, "spurious": spurious, "flow_summary": tt.flow_summary,
         "throughput": tt.throughput, "flow_bytes": tt.flow_bytes, "captured": captured,
         "attributed": rec.attribute_losses(tt.losses, fabric, r.files["queues"],
                                            r.files["flow_paths"])}
    t["tcp"] = _tcp_sample(store, chunk_packets, flows, tt.flow_summary, tt.retrans)
    return t


def _tcp_sample(store, chunk_packets, flows, fsum, retrans) -> pd.DataFrame:
    """tables["tcp"], for the view that reads packets itself (render.py's sequence
    graph): all TCP packets when they fit in one chunk; beyond that only the connection
    of the worst flow (the sequence graph's), so that the run's packets are never all in
    memory at once."""
    if store.rows <= chunk_packets:
        return store.frame()
    worst = fr.worst_flow(fsum, retrans)
    sample = store.frame(0, 0)
    if worst is not None:
        f = flows[flows["flow"] == worst].iloc[0]
        h = int(chunked.connection_hash(f.src, f.dst, f.sport, f.dport))
        sample = store.frame(h, h + 1)
    sample.attrs["only_connection_of"] = worst
    return sample


def _network_tables(r: _Reading, t: dict) -> dict:
    """Queues, the fabric's balance, incast episodes and the reconciliation."""
    queues, fabric, flows = r.files["queues"], r.files["fabric"], t["flows"]
    out = {"queues_d": qmod.queue_deltas(queues),
           "queue_summary": qmod.queue_summary(queues, fabric)}

    def balance_tables():
        balance, balance_sum = qmod.fabric_balance(fabric, queues, r.files["port_stats"])
        sl = qmod.spine_links(fabric)
        util = qmod.link_utilisation(queues, sl["iface"], dict(zip(
            sl["iface"], sl["rate_mbps"], strict=True))) if len(sl) and len(queues) \
            else pd.DataFrame()
        return balance, balance_sum, util

    out["balance"], out["balance_summary"], out["utilisation"] = r.guard(
        "fabric balance", balance_tables, lambda: (
            pd.DataFrame(columns=["iface", "spine", "leaf", "direction", "bytes"]), {},
            pd.DataFrame()))
    out["episodes"] = r.guard("incast episodes", lambda: ep.incast_episodes(
        queues, fabric, None, t["retrans"], r.files["flow_paths"],
        flow_bytes=t["flow_bytes"]), lambda: pd.DataFrame(columns=ep.COLUMNS))
    out["recon"] = rec.reconcile(
        queue_summary=out["queue_summary"], attributed=t["attributed"],
        retrans=t["retrans"], spurious=t["spurious"], counters=r.files["counters"],
        manifest=r.files["manifest"], captured_flows=len(flows), fabric=fabric,
        both_ends_flows=int(flows["receiver_iface"].notna().sum()) if len(flows) else 0)
    return out


def _training_tables(r: _Reading, t: dict, qd) -> dict:
    """The workers' iterations, with the network events each met, and what they log."""
    workers, fabric = r.files["workers"], r.files["fabric"]
    iters = r.guard("worker iterations", lambda: training.iterations(workers),
                    lambda: pd.DataFrame(columns=training.ITER_COLUMNS))
    host_ips = fabric.ip_by_host() if fabric else {}
    iters_ev = r.guard("network events per iteration", lambda: training.with_network_events(
        iters, t["lost"], t["retrans"], qd, host_ips), lambda: training.with_network_events(
        iters.iloc[0:0], None, None, None))
    steps = training.steps(iters)
    out = {"iterations_raw": iters, "iterations": iters_ev, "steps": steps,
           "per_worker": training.per_worker(iters, steps),
           "loss_curve": training.loss_curve(workers), "finals": training.finals(workers),
           "mode": training.run_mode(workers)}
    errs = training.errors(workers)
    if len(errs):
        for _, e in errs.iterrows():
            r.problems.append(f"worker {e.get('file')} reported an error: {e.get('message')}")
    return out


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


def _assemble(r: _Reading, t: dict, net: dict, tr: dict, store_range, jobs) -> Analysis:
    """The Analysis of the run: its time range, its inputs' states and its tables."""
    f = r.files
    t0, t1, note = _time_range(f["manifest"], f["queues"], pd.DataFrame(
        {"t": list(store_range)}) if store_range else None, f["workers"])
    if note:
        r.problems.append(note)
    # every input's state; a damaged one makes the metrics that need it n/a (inputs.py)
    inventory = inp.inventory(
        r.run_dir, manifest=f["manifest"], spec=f["spec"], fabric=f["fabric"],
        queues=None if "queues" in r.errors else f["queues"], workers=f["workers"],
        capture_inputs=f["capture_inputs"], pcaps=f["pcaps"], errors=r.errors,
        port_stats=f["port_stats"], flow_paths=f["flow_paths"], t0=t0)
    for group, why in inventory.missing().items():
        r.missing.setdefault(group, why)  # an input absent as a whole already says so
    r.problems += inventory.problems()
    status, reason = rundir.run_status(f["manifest"])
    a = Analysis(r.run_dir, f["manifest"], f["spec"], f["fabric"], status, reason, t0, t1,
                 missing=r.missing, problems=r.problems, inputs=inventory,
                 jobs=dict(jobs or {}), captured={**t["captured"], "jobs": f["job_ports"]})
    a.tables = {"queues_d": net["queues_d"], "queue_summary": net["queue_summary"],
                "flows": t["flow_summary"], "throughput": t["throughput"],
                "retrans": t["retrans"], "recovery_episodes": t["recovery_episodes"],
                "losses": t["attributed"], "balance": net["balance"],
                "utilisation": net["utilisation"], "episodes": net["episodes"],
                "iterations": tr["iterations"], "steps": tr["steps"],
                "per_worker": tr["per_worker"], "loss_curve": tr["loss_curve"],
                "finals": tr["finals"], "workers_raw": f["workers"],
                "counters": f["counters"], "recon": net["recon"], "pcaps": f["n_packets"],
                "starts": training.starts(f["workers"]),
                # all TCP packets up to chunk_packets, else the worst flow's connection
                "tcp": t["tcp"]}
    # flows by the hosts and roles at their ends; the packets behind each finding
    labels = r.guard("flow labels", lambda: fr.flow_labels(t["flows"], f["fabric"],
                                                           f["manifest"]), dict)
    a.tables["flow_labels"] = labels
    a.tables["rto_packets"] = r.guard("RTO packets", lambda: fr.rto_packets(
        t["retrans"], t["flows"], labels), pd.DataFrame)
    a.tables["episode_packets"] = r.guard("incast episode packets", lambda: fr.episode_packets(
        net["episodes"], f["fabric"], [p for p in f["pcaps"]]), pd.DataFrame)
    return a


def _run_metrics(a: Analysis, r: _Reading, net: dict, mode) -> dict:
    """metrics.json's run-wide part (the stages and the declared metrics add the rest)."""
    m = a.manifest
    blocks: dict = {}  # every kind's own blocks, whatever ran: every file holds every key
    for job in (a.jobs or {}).values():
        blocks.update(job.summary_blocks(a))
    return {
        "run": {"dir": str(a.run_dir), "status": a.status, "reason": a.reason,
                "complete": a.status == "complete", "mode": mode,
                "start": a.t0, "end": a.t1, "duration_s": a.t1 - a.t0,
                "datapath": m.get("datapath"),
                "congestion_control": m.get("congestion_control"),
                "slow_start_after_idle": m.get("slow_start_after_idle"),
                "rto_threshold_s": r.rto_threshold_s,
                "kind": mt.run_kind(mode, a.spec, a.jobs)},
        "headline": {},  # filled from the declared metrics (metrics.py)
        "headline_na": {},
        "retransmissions": tcp.retrans_summary(a.tables["retrans"]),
        "reconciliation": net["recon"]["numbers"],
        "training": training.impact_summary(a.tables["iterations"]),
        "workers": a.tables["per_worker"].to_dict(orient="records"),
        **blocks,
        "balance": net["balance_summary"],
        "cost": a.metrics.get("cost"),
        "flows": int(len(a.tables["flows"])), "captures": a.tables["pcaps"],
        "missing": a.missing, "problems": a.problems,
        "analysis": a.inputs.to_json(),
    }


def read_run(run_dir: Path, rto_threshold_s: float | None = None, cache: bool = True,
             chunk_packets: int = chunked.CHUNK_PACKETS,
             jobs: Mapping | None = None) -> Analysis:
    """The run's common tables, its job's cost (network_cost.py) and its run-wide metrics
    (see report.analyse for the arguments)."""
    r = _read_files(run_dir, rto_threshold_s)
    store = _read_captures(r, cache)
    t = r.guard("TCP analysis of the captures", lambda: _tcp_tables(r, store, chunk_packets),
                lambda: _tcp_tables(r, chunked.CaptureStore(), chunk_packets))
    store_range = store.t_range
    store.close()
    flows = t["flows"]
    if len(r.files["pcaps"]) and flows.empty:
        r.missing["flows"] = "captures hold no TCP payload"
    elif len(flows) and flows["receiver_iface"].isna().all():
        r.missing["losses"] = "no flow was captured at both ends: losses cannot be inferred"
    net = _network_tables(r, t)
    tr = _training_tables(r, t, net["queues_d"])
    a = _assemble(r, t, net, tr, store_range, jobs)
    # the job's own tables, its bound and where each iteration's time went (network_cost.py)
    r.guard("the job's cost model and attribution", lambda: network_cost.analyse_job(a),
            lambda: a.metrics.setdefault("cost", {"available": False,
                                                  "reason": "the job's analysis failed"}))
    a.metrics = jsonable(_run_metrics(a, r, net, tr["mode"]))
    return a


def received_at_host(flows: pd.DataFrame, fabric) -> pd.Series:
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


def jsonable(obj):
    """``obj`` as plain JSON values: numpy numbers as Python ones, NaN/inf as None,
    keys as text."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        return None if math.isnan(float(obj)) or math.isinf(float(obj)) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
