"""A run as a timeline for Perfetto: Chrome trace-event JSON built from the run's tables.

`build_trace(...)` returns the trace as a dict; `write_trace(path, trace)` writes it as
strict JSON. The format is the Chrome trace-event format (`{"traceEvents": [...],
"displayTimeUnit": "ms"}`), which the Perfetto UI (ui.perfetto.dev, drag the file in) and
chrome://tracing open. Timestamps `ts` and durations `dur` are whole microseconds (integers:
one clock); ts 0 is
`t0` (the run's start, epoch seconds, kept in `otherData.t0_epoch_s`).

What is in it (pids are numbered from 1; docs/run-directory.md has the same list):

- one process per rank (a `workers/<rank>.jsonl` file), named from its `start` event
  (host, role, rank: e.g. "h3 worker rank 2"), ordered by rank. Thread 1 "iterations"
  holds complete events ("ph": "X"), nested:
    * "iteration N" (cat "iteration") from t_start to t_end, with the logged fields in
      args, and inside it
    * "compute" (cat "compute"): t_start for compute_s;
    * its communication, by the fields it logged: with t_push and push_s, "push" (cat
      "comm") from t_push, then "pull" (cat "comm") for pull_s, and inside the pull
      "wait (barrier)" (cat "wait") for wait_s — the log gives the hold time but not
      where in the pull it fell, so it is drawn at the start of the pull; else with
      allreduce_s, "all-reduce" (cat "comm") after the compute; else "comm" (cat
      "comm") after the compute, for comm_s.
  A child is clipped to its parent's span (the logged pieces are measured separately
  and can overhang by microseconds).
- the job's own logged events, as its `Job.trace_spans` declare them (passed as
  `build_trace(spans=...)`; analysis/trace_events.py): a `LoggedSpan` is a complete event
  from one logged field to another, a `LoggedInstant` an instant event ("ph": "i") at
  the row's `t`, both on thread 1 (an incast client's rounds, a PS's updates).
- spans: every `span` event an app logs (name, cat, t, dur_s and any other fields as
  args) is a complete event on thread 3 "spans" of its rank's process (a stage's
  forward/backward of each micro-batch, a block's all-reduce). Apps log them in their
  own terms; nothing here knows their kinds.
- RTOs: one instant event "RTO" per RTO firing (retrans rows with `event` and `kind`
  'rto') on thread 2 "TCP" of the sending host's first rank process (a host with no
  rank gets a process of its own, "h5 (host)"; an address not in `host_ips` one named
  by the address). args: flow, gap_s (the silence before it), seq.
- one process per switch ("switch lf1"); in it a counter track ("ph": "C") per egress
  port, "<iface> queue", with the backlog in packets (`backlog_pkts` of queues.csv,
  one event per change), and a thread "<iface> drops" with an instant event "drop" at
  every sample where the port's tc drop counter rose (args: drops = the increase;
  counter resets handled as in `queues.queue_deltas`).
- with ECN marking (``ecn``: ecn.csv's rows), in the same switch's process a counter
  track per port that marked, "<iface> CE marks", with the marks set since the previous
  sample of the ECN sampler (the first sample: since the marker was attached), one
  event per sample, so a port's events sum to its marks.

Events are sorted by ts (metadata first, a parent before the children that start with
it). Nothing is read from disk here: the caller passes the tables.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from . import training
from .pcap import ip_to_str
from .queues import queue_deltas
from .trace_events import LoggedInstant, LoggedSpan

ITER_TID, TCP_TID, SPAN_TID = 1, 2, 3
SPAN_FIELDS = ("event", "file", "name", "cat", "t", "dur_s")  # not repeated in args


def _num(x) -> float | None:
    """A finite float, or None."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _clean(obj):
    """JSON-safe args: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _num(obj)
    if obj is None or isinstance(obj, str):
        return obj
    return str(obj)


class _Trace:
    """Event list with µs conversion relative to t0."""

    def __init__(self, t0: float):
        self.t0 = t0
        self.events: list[dict] = []
        self.meta: list[dict] = []

    def us(self, t: float) -> int:
        """Whole microseconds since t0: one integer clock for starts and ends, so a child
        clipped to its parent ends within it and siblings that touch do not overlap."""
        return round((t - self.t0) * 1e6)

    def name_process(self, pid: int, name: str, sort_index: int) -> None:
        self.meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
                          "args": {"name": name}})
        self.meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                          "ts": 0, "args": {"sort_index": sort_index}})

    def name_thread(self, pid: int, tid: int, name: str) -> None:
        self.meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
                          "args": {"name": name}})

    def span(self, pid, tid, name, cat, t, dur, args=None, within=None) -> None:
        """A complete event from t (epoch s) lasting dur (s), clipped to `within`
        (start, end) when given; nothing if either is missing."""
        t, dur = _num(t), _num(dur)
        if t is None or dur is None:
            return
        end = t + max(dur, 0.0)
        if within is not None:
            t, end = max(t, within[0]), min(end, within[1])
            end = max(end, t)
        start = self.us(t)
        self.events.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
                            "ts": start, "dur": self.us(end) - start,
                            "args": _clean(args or {})})

    def instant(self, pid, tid, name, cat, t, args=None) -> None:
        t = _num(t)
        if t is None:
            return
        self.events.append({"ph": "i", "s": "t", "name": name, "cat": cat, "pid": pid,
                            "tid": tid, "ts": self.us(t), "args": _clean(args or {})})

    def counter(self, pid, name, t, key, value) -> None:
        self.events.append({"ph": "C", "name": name, "pid": pid, "tid": 0,
                            "ts": self.us(t), "args": {key: _clean(value)}})

    def result(self) -> dict:
        # parents before the children that start at the same µs: longer first
        self.events.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        return {"traceEvents": self.meta + self.events, "displayTimeUnit": "ms",
                "otherData": {"t0_epoch_s": self.t0, "producer": "incastlab.analysis.trace"}}


def _times(workers: pd.DataFrame, queues, retrans) -> list[float]:
    out = []
    for df, cols in ((workers, ("t", "t_start", "t_request")), (queues, ("t",)),
                     (retrans, ("t",))):
        if df is None or df.empty:
            continue
        for c in cols:
            if c in df:
                v = pd.to_numeric(df[c], errors="coerce").dropna()
                if len(v):
                    out.append(float(v.min()))
    return out


def _process_names(workers: pd.DataFrame) -> list[tuple[str, str, object, str | None]]:
    """[(file, name, rank, host)] ordered by rank."""
    starts = training.starts(workers)
    info = {}
    for _, s in starts.iterrows():
        iface = s.get("iface")
        host = iface.split("-")[0] if isinstance(iface, str) and "-" in iface else None
        info[s["file"]] = (s.get("role"), s.get("rank"), host)
    files = sorted(set(workers["file"].dropna().astype(str))) if "file" in workers else []
    rows = []
    for f in files:
        role, rank, host = info.get(f, (None, None, None))
        rank = training.as_rank(f if rank is None or (isinstance(rank, float)
                                                        and math.isnan(rank)) else rank)
        role_txt = role if isinstance(role, str) else "rank"
        name = " ".join(x for x in (host, role_txt if role_txt != "rank" else None,
                                    f"rank {rank}") if x)
        rows.append((f, name, rank, host))
    # by rank: numbers first in numeric order, then any named files
    rows.sort(key=lambda r: (isinstance(r[2], str), r[2] if not isinstance(r[2], str) else 0,
                             str(r[2])))
    return rows


def _iteration_events(tr: _Trace, pid: int, g: pd.DataFrame) -> None:
    """The nested X events of one rank's iterations."""
    for r in g.itertuples(index=False):
        t0, t1 = _num(r.t_start), _num(r.t_end)
        if t0 is None or t1 is None:
            continue
        parent = (t0, max(t1, t0))
        args = {c: getattr(r, c) for c in ("iteration", "compute_s", "comm_s", "wait_s",
                                            "push_s", "pull_s", "allreduce_s", "bytes_sent",
                                            "bytes_recv", "model_version", "staleness",
                                            "loss")}
        label = f"iteration {int(r.iteration)}" if _num(r.iteration) is not None \
            else "iteration"
        tr.span(pid, ITER_TID, label, "iteration", t0, t1 - t0, args)
        compute = _num(r.compute_s)
        tr.span(pid, ITER_TID, "compute", "compute", t0, compute, within=parent)
        after = t0 + (compute or 0.0)
        if _num(r.push_s) is not None and _num(r.t_push) is not None:
            push_end = r.t_push + r.push_s
            tr.span(pid, ITER_TID, "push", "comm", r.t_push, r.push_s, within=parent)
            pull = _num(r.pull_s)
            if pull is None:
                pull = t1 - push_end
            tr.span(pid, ITER_TID, "pull", "comm", push_end, pull, within=parent)
            pull_span = (max(push_end, t0), min(push_end + max(pull, 0.0), t1))
            tr.span(pid, ITER_TID, "wait (barrier)", "wait", push_end, r.wait_s,
                    {"note": "the server's hold time; where in the pull it fell is not "
                             "logged"}, within=pull_span)
        elif _num(r.allreduce_s) is not None:
            tr.span(pid, ITER_TID, "all-reduce", "comm", after, r.allreduce_s, within=parent)
        elif _num(r.comm_s) is not None:
            tr.span(pid, ITER_TID, "comm", "comm", after, r.comm_s, within=parent)


# The logged events of the job kinds are theirs (`Job.trace_spans`), declared with these.
def build_trace(workers: pd.DataFrame, queues: pd.DataFrame | None = None,
                retrans: pd.DataFrame | None = None, *, t0: float | None = None,
                host_ips: dict[str, str] | None = None,
                spans: Sequence[LoggedSpan | LoggedInstant] = (),
                ecn: pd.DataFrame | None = None) -> dict:
    """The run as Chrome trace-event JSON (a dict; see the module docstring).

    workers: all worker events, as `rundir.load_workers` returns them (columns `event`,
      `file` and the logged fields; `start` events name the processes, `iteration`,
      `span` and the `spans` events become events).
    queues: queues.csv rows (t, iface, backlog_pkts, drops; `switch` optional, else the
      part of iface before '-eth'); None = no switch tracks.
    retrans: `tcp.retransmissions`' retrans table (flow, src, dst, t, gap_s, seq, kind,
      event); None = no RTO events.
    t0: epoch seconds of ts 0 (the manifest's start); default, or if any event is
      earlier, the earliest time in the inputs, so that no ts is negative.
    host_ips: {host name: dotted IP} (fabric.json), to put an RTO on its sender's track.
    spans: the job's logged events to draw (its `trace_spans`).
    ecn: ecn.csv rows (t, iface, marks; `switch` optional); None = no CE tracks.
    """
    workers = workers if workers is not None else pd.DataFrame({"event": []})
    if "event" not in workers:
        workers = workers.assign(event=pd.Series(dtype=object))
    if len(workers) and "file" not in workers:
        raise ValueError("workers: a `file` column (the rank file) is needed")
    rto = None
    if retrans is not None and len(retrans):
        rto = retrans[retrans["event"].astype(bool) & (retrans["kind"] == "rto")]
    times = _times(workers, queues, rto) + ([float(ecn["t"].min())]
                                             if ecn is not None and len(ecn) else [])
    earliest = min(times) if times else (t0 or 0.0)
    tr = _Trace(float(min(t0, earliest) if t0 is not None else earliest))
    pids = _rank_processes(tr, workers)
    if len(workers):
        _worker_events(tr, workers, pids.of_file, spans)
    if rto is not None and len(rto):
        _rto_events(tr, rto, host_ips or {}, pids)
    switch_pid: dict[str, int] = {}
    if queues is not None and len(queues):
        switch_pid = _queue_events(tr, queues, pids)
    if ecn is not None and len(ecn):
        _ecn_events(tr, ecn, pids, switch_pid)
    return tr.result()


class _Pids:
    """The pids handed out so far: each rank file's, each host's first, the next free."""

    def __init__(self) -> None:
        self.of_file: dict[str, int] = {}
        self.of_host: dict[str, int] = {}
        self.next = 1

    def take(self) -> int:
        pid, self.next = self.next, self.next + 1
        return pid


def _rank_processes(tr: _Trace, workers: pd.DataFrame) -> _Pids:
    """One process per rank file, by rank, with its "iterations" thread."""
    pids = _Pids()
    procs = _process_names(workers) if len(workers) else []
    for i, (f, name, _rank, host) in enumerate(procs):
        pid = pids.take()
        pids.of_file[f] = pid
        if host and host not in pids.of_host:
            pids.of_host[host] = pid
        tr.name_process(pid, name, i)
        tr.name_thread(pid, ITER_TID, "iterations")
    return pids


def _worker_events(tr: _Trace, workers: pd.DataFrame, pid_of_file: dict,
                   logged: Sequence[LoggedSpan | LoggedInstant]) -> None:
    """Iterations, the logged spans and instants, and the apps' `span` events."""
    its = training.iterations(workers)
    for f, g in its.groupby("file", sort=False):
        if str(f) in pid_of_file:
            _iteration_events(tr, pid_of_file[str(f)],
                              g.sort_values(["t_start", "iteration"], kind="stable"))
    ev = workers["event"]
    for decl in (d for d in logged if isinstance(d, LoggedSpan)):
        for r in workers[ev == decl.event].itertuples(index=False):
            pid = pid_of_file.get(str(r.file))
            t_s, t_e = _num(getattr(r, decl.start, None)), _num(getattr(r, decl.end, None))
            if pid and t_s is not None and t_e is not None:
                tr.span(pid, ITER_TID, decl.label(r), decl.cat, t_s, t_e - t_s,
                        {c: getattr(r, c, None) for c in decl.args})
    _span_events(tr, workers[ev == "span"], pid_of_file)
    for decl in (d for d in logged if isinstance(d, LoggedInstant)):
        for r in workers[ev == decl.event].itertuples(index=False):
            pid = pid_of_file.get(str(r.file))
            if pid:
                tr.instant(pid, ITER_TID, decl.label, decl.cat, getattr(r, "t", None),
                           {c: getattr(r, c, None) for c in decl.args})


def _span_events(tr: _Trace, rows: pd.DataFrame, pid_of_file: dict) -> None:
    """The apps' own `span` events, on thread 3 "spans" of their rank's process."""
    named = set()
    for r in rows.dropna(axis=1, how="all").to_dict("records"):
        pid = pid_of_file.get(str(r.get("file")))
        t_s, dur = _num(r.get("t")), _num(r.get("dur_s"))
        if pid and t_s is not None and dur is not None:
            if pid not in named:
                tr.name_thread(pid, SPAN_TID, "spans")
                named.add(pid)
            tr.span(pid, SPAN_TID, str(r.get("name")), str(r.get("cat") or "span"),
                    t_s, dur, {k: v for k, v in r.items() if k not in SPAN_FIELDS
                               and not (isinstance(v, float) and math.isnan(v))})


def _rto_events(tr: _Trace, rto: pd.DataFrame, host_ips: dict, pids: _Pids) -> None:
    """An "RTO" instant per RTO firing on thread 2 "TCP" of its sending host."""
    host_of_ip = {ip: h for h, ip in host_ips.items()}
    tcp_named = set()
    for r in rto.itertuples(index=False):
        ip = r.src if isinstance(r.src, str) else ip_to_str(int(r.src))
        host = host_of_ip.get(ip)
        key = host or ip
        if key not in pids.of_host:
            pid = pids.take()
            pids.of_host[key] = pid
            tr.name_process(pid, f"{host} (host)" if host else ip, pid - 1)
        pid = pids.of_host[key]
        if pid not in tcp_named:
            tr.name_thread(pid, TCP_TID, "TCP")
            tcp_named.add(pid)
        tr.instant(pid, TCP_TID, "RTO", "tcp", r.t,
                   {"flow": r.flow, "gap_s": getattr(r, "gap_s", None),
                    "seq": getattr(r, "seq", None)})


def _switch_of(df: pd.DataFrame) -> pd.Series:
    return (df["switch"] if "switch" in df
            else df["iface"].astype(str).str.split("-eth").str[0]).astype(str)


def _ecn_events(tr: _Trace, ecn: pd.DataFrame, pids: _Pids, switch_pid: dict) -> None:
    """A "<iface> CE marks" counter per port that marked, in its switch's process."""
    df = ecn.assign(switch=_switch_of(ecn), iface=ecn["iface"].astype(str))
    for (sw, iface), g in df.groupby(["switch", "iface"], sort=True):
        g = g.sort_values("t", kind="stable")
        m = pd.to_numeric(g["marks"], errors="coerce").to_numpy(dtype=float)
        if not (m > 0).any():
            continue  # a port that never marked gets no track
        if sw not in switch_pid:
            switch_pid[sw] = pids.take()
            tr.name_process(switch_pid[sw], f"switch {sw}", switch_pid[sw] - 1)
        inc = np.diff(m, prepend=0.0)  # every sample: the events sum to the port's marks
        for tt, v in zip(g["t"].to_numpy(dtype=float), inc, strict=True):
            if math.isfinite(v):
                tr.counter(switch_pid[sw], f"{iface} CE marks", tt, "marks", max(v, 0.0))


def _queue_events(tr: _Trace, queues: pd.DataFrame, pids: _Pids) -> dict[str, int]:
    """One process per switch: a backlog counter and a drops thread per port; returns
    {switch: its pid}."""
    q = queue_deltas(queues)
    q = q.assign(switch=_switch_of(q))
    out = {}
    for sw, gs in q.groupby(q["switch"].astype(str), sort=True):
        pid = pids.take()
        out[sw] = pid
        tr.name_process(pid, f"switch {sw}", pid - 1)
        for j, (iface, g) in enumerate(gs.groupby(gs["iface"].astype(str), sort=True)):
            g = g.sort_values("t", kind="stable")
            tid = j + 1
            tr.name_thread(pid, tid, f"{iface} drops")
            v = pd.to_numeric(g["backlog_pkts"], errors="coerce").to_numpy(dtype=float)
            t = g["t"].to_numpy(dtype=float)
            # a counter track holds its last value: emit the changes (and the last)
            keep = np.ones(len(v), dtype=bool)
            keep[1:] = v[1:] != v[:-1]
            keep[-1] = True
            for tt, vv in zip(t[keep], v[keep], strict=True):
                if math.isfinite(vv):
                    tr.counter(pid, f"{iface} queue", tt, "packets", vv)
            d = g["d_drops"].to_numpy(dtype=float)
            for tt, dd in zip(t[d > 0], d[d > 0], strict=True):
                tr.instant(pid, tid, "drop", "queue", tt, {"drops": dd, "iface": iface})
    return out


def write_trace(path, trace: dict) -> Path:
    """Write `trace` as strict JSON (no NaN) to `path` (e.g. <run>/trace.json); returns
    the path."""
    path = Path(path)
    path.write_text(json.dumps(trace, allow_nan=False, separators=(",", ":")))
    return path
