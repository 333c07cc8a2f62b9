"""What a run's analysis read: every input file with its state, and whether it is whole.

An input is one file of the run directory (docs/run-directory.md) in one of five
states: ``ok``, ``missing`` (the run should have written it and did not), ``empty``,
``truncated`` (it stops early or lost part of its content) or ``unreadable`` (not in its
format at all). Each belongs to a *group*, the key a headline metric names in its
`inputs` (analysis/metrics.py: ``pcap``, ``queues``, ``counters``, ``workers``,
``fabric``; also ``manifest``, ``spec``, ``port_stats``, ``flow_paths``). A metric
whose group holds an expected input that is not ok is n/a with the input's reason, and
the analysis is partial (metrics.json ``analysis``).

What the run should have written is read from the run itself: the captures the
manifest's ``capture_drops`` lists (each with tcpdump's count of captured packets), the
worker log of every rank in ``processes``, counters before and after for every host of
the fabric map, one row per sample for every switch egress port of the fabric map in
queues.csv. Files the run may lack without harm (port_stats.csv, flow_paths.csv, a
capture the manifest does not list) are listed with ``expected`` false.

How truncation is recognised:
- a capture: the parser skipped bytes or stopped inside a record (analysis/pcap.py's
  ``partial``), or it holds fewer packets than tcpdump said it captured;
- queues.csv: fewer distinct sample times than the sampler wrote (the manifest's
  ``queue_sampler.samples`` less its ``bad_samples``, less 2 at the edges: a sample
  taken while the qdiscs are set up or removed lists none of ours), rows that stop before the
  workload's last logged or captured moment (the sampler is stopped after the workload
  and the captures, so its last sample is later than both when the file is whole; a
  tolerance of 5 sampling intervals, at least 0.5 s), or a port the fabric map lists
  with no rows or fewer samples than the others (every sample holds every port).
A bad line (a CSV line with the wrong number of fields or a non-number, a JSONL line
that is not UTF-8 JSON) is skipped and counted; the rest of the file is kept and the
input stays ok unless one of the rules above says it is truncated.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from incastlab.topologies import runformat as rf

from .pcap import PcapError, read_pcap

OK, MISSING, EMPTY, TRUNCATED, UNREADABLE = "ok", "missing", "empty", "truncated", "unreadable"
STATES = (OK, MISSING, EMPTY, TRUNCATED, UNREADABLE)
QUEUE_END_SLACK_S = 0.5      # least tolerance for queues.csv ending before the workload
QUEUE_END_INTERVALS = 5      # ... or this many sampling intervals, whichever is longer
# samples the sampler may count without a row of ours: one taken while the qdiscs were
# being set up or removed lists none (a real run: 1778 of 1779 counted samples in the
# file, no gap in it longer than the sampler's own longest interval)
QUEUE_EDGE_SAMPLES = 2


@dataclass
class Input:
    """One input file of the run. `truncated_at`: epoch seconds where a truncated time
    series stops (None otherwise)."""
    name: str                  # path inside the run directory
    group: str                 # the metric input key (metrics.INPUTS)
    state: str = OK
    reason: str = ""
    expected: bool = True      # the run should have written it
    bad_lines: int = 0
    first_bad: str | None = None
    truncated_at: float | None = None
    problem: str | None = None  # the problems list's sentence, when not the generic one

    @property
    def ok(self) -> bool:
        return self.state == OK

    @property
    def damaged(self) -> bool:
        """Not ok, and the run should have had it whole."""
        return self.expected and not self.ok

    def to_json(self) -> dict:
        d = {"group": self.group, "state": self.state, "reason": self.reason or None,
             "expected": self.expected}
        if self.bad_lines:
            d.update(bad_lines=self.bad_lines, first_bad=self.first_bad)
        if self.truncated_at is not None:
            d["truncated_at"] = self.truncated_at
        return d


@dataclass
class Inventory:
    """Every input of one run. `t0`: the run's start (epoch s), for times in reasons."""
    items: list[Input] = field(default_factory=list)
    t0: float | None = None

    @property
    def complete(self) -> bool:
        """True when every expected input is ok (bad lines alone do not count)."""
        return not self.damaged()

    def damaged(self, group: str | None = None) -> list[Input]:
        return [i for i in self.items if i.damaged and (group is None or i.group == group)]

    def missing(self) -> dict[str, str]:
        """{group: why its metrics are n/a} for every group with a damaged input (the
        shape of Analysis.missing)."""
        out: dict[str, list[str]] = {}
        for i in self.damaged():
            out.setdefault(i.group, []).append(self.describe(i))
        return {g: "; ".join(v) for g, v in out.items()}

    def truncated_only(self, group: str) -> bool:
        """Every damaged input of `group` is truncated (what it holds is a prefix of
        the truth, so a count from it is a lower bound)."""
        bad = self.damaged(group)
        return bool(bad) and all(i.state == TRUNCATED for i in bad)

    def describe(self, i: Input) -> str:
        """'queues.csv truncated at t = 12.3 s (rows stop ...)'."""
        head = f"{i.name} {i.state}"
        if i.truncated_at is not None and self.t0 is not None:
            head += f" at t = {i.truncated_at - self.t0:.3g} s"
        return f"{head} ({i.reason})" if i.reason else head

    def problems(self) -> list[str]:
        """Sentences for the report's problems: every file with skipped bad lines. A
        damaged input's reason is in missing() (the analysis says it once, with the
        metrics it made n/a: analysis/report.py)."""
        out = []
        for i in self.items:
            if i.bad_lines:
                out.append(f"{i.bad_lines} unreadable line(s) in {i.name} were skipped "
                           f"(first: {i.first_bad}); the rest of the file was used.")
        return out

    def banner(self) -> str | None:
        """One line for the top of report.html and summary.md (None when complete)."""
        bad = self.damaged()
        if not bad:
            return None
        names = ", ".join(f"{i.name} {i.state}" for i in bad[:4])
        more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
        return (f"ANALYSIS PARTIAL: {len(bad)} input(s) missing or damaged ({names}{more}); "
                "metrics that need them are n/a.")

    def to_json(self) -> dict:
        """metrics.json's `analysis`."""
        return {"complete": self.complete,
                "inputs": {i.name: i.to_json() for i in self.items}}


# ---- checks, one per kind of input -------------------------------------------------------

def check_file(run_dir: Path, name: str, group: str, error: str | None = None,
               expected: bool = True) -> Input:
    """A single file whose loader either read it or raised (`error`)."""
    p = Path(run_dir) / name
    if not p.exists():
        return Input(name, group, MISSING, f"no {name}", expected)
    if p.stat().st_size == 0:
        return Input(name, group, EMPTY, "0 bytes", expected)
    if error:
        return Input(name, group, UNREADABLE, error, expected)
    return Input(name, group, expected=expected)


def read_captures(run_dir, manifest: dict, spec: dict, cache: bool = True,
                  keep=None) -> tuple[dict[str, pd.DataFrame], list[Input]]:
    """Parse every capture of the run: ({iface: packets} of the readable ones, their
    Inputs). A capture the manifest lists but pcap/ lacks is missing; one with fewer
    packets than tcpdump reported, or whose parser skipped bytes, is truncated (its
    packets are still used by the sections that show them). `keep(iface, packets)`:
    called with each readable capture once it is checked; the dict holds what it returns
    instead of the packets (report.py: one parsed capture in memory at a time)."""
    pdir = Path(run_dir) / "pcap"
    listed = _listed_captures(manifest)
    present = {p.stem: p for p in sorted(pdir.glob("*.pcap"))} if pdir.is_dir() else {}
    pcaps, items = {}, []
    for iface in sorted(set(listed) | set(present)):
        name = f"pcap/{iface}.pcap"
        expected = iface in listed or not listed
        captured = listed.get(iface)
        p = present.get(iface)
        if p is None:
            items.append(Input(name, "pcap", MISSING, "the manifest lists it; pcap/ has "
                               "no such file", expected))
            continue
        if p.stat().st_size == 0:
            items.append(Input(name, "pcap", EMPTY, "0 bytes", expected))
            continue
        try:
            df = read_pcap(p, cache=cache)
        except PcapError as exc:
            why = str(exc).removeprefix(f"{p}: ")  # the name is said already
            items.append(Input(name, "pcap", UNREADABLE, f"not a capture: {why}", expected))
            continue
        except Exception as exc:  # noqa: BLE001 - one bad file must not cost the report
            items.append(Input(name, "pcap", UNREADABLE, f"{type(exc).__name__}: {exc}",
                               expected))
            continue
        if captured and df.empty:
            items.append(Input(name, "pcap", EMPTY, f"no packet records; tcpdump captured "
                               f"{captured}", expected))
        elif df.attrs.get("partial"):
            why = f"{df.attrs.get('reason')}; {df.attrs.get('bytes_skipped')} bytes skipped"
            items.append(Input(name, "pcap", TRUNCATED, f"partial: {why}", expected,
                               truncated_at=_last_t(df),
                               problem=f"capture {p.name} is partial ({why})"))
        elif captured and len(df) < captured:
            items.append(Input(name, "pcap", TRUNCATED, f"holds {len(df)} of the {captured} "
                               "packets tcpdump captured", expected, truncated_at=_last_t(df)))
        else:
            items.append(Input(name, "pcap", expected=expected))
        pcaps[iface] = keep(iface, df) if keep else df
        del df
    if not items:
        enabled = (spec.get("capture") or {}).get("enabled", True) is not False
        items.append(Input("pcap/*.pcap", "pcap", MISSING, "no captures in pcap/" if enabled
                           else "capture disabled in the spec", expected=enabled))
    return pcaps, items


def _listed_captures(manifest: dict) -> dict[str, int | None]:
    """{iface: packets tcpdump captured (None if not said)} from the manifest."""
    drops = manifest.get("capture_drops") if isinstance(manifest, dict) else None
    out = {}
    for iface, st in (drops or {}).items() if isinstance(drops, dict) else ():
        st = st if isinstance(st, dict) else {}
        f = st.get("file")
        stem = Path(f).stem if isinstance(f, str) and f else str(iface)
        n = st.get("captured")
        out[stem] = int(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else None
    return out


def _last_t(df: pd.DataFrame) -> float | None:
    return float(df["t"].max()) if len(df) and "t" in df else None


def check_csv(run_dir, name: str, group: str, df: pd.DataFrame | None, error: str | None,
              expected: bool) -> Input:
    """A CSV read by rundir.read_csv_lines (or whose loader raised `error`)."""
    i = check_file(run_dir, name, group, error, expected)
    if not i.ok or df is None:
        return i
    i.bad_lines = int(df.attrs.get("bad_lines", 0) or 0)
    i.first_bad = df.attrs.get("first_bad")
    if df.empty:
        if df.attrs.get("lines"):
            i.state, i.reason = UNREADABLE, f"none of its {df.attrs['lines']} lines is valid"
        elif expected:
            i.state, i.reason = EMPTY, "a header and no rows"
    return i


def check_queues(run_dir, queues: pd.DataFrame | None, error: str | None, manifest: dict,
                 spec: dict, fabric, data_end: float | None) -> Input:
    """queues.csv: read, whole and covering the run (module docstring's rules)."""
    i = check_csv(run_dir, rf.QUEUES.name, "queues", queues, error, True)
    if not i.ok or queues is None or queues.empty:
        return i
    why = []
    times = queues["t"]
    last = float(times.max())
    n_samples = int(times.nunique())
    sampler = manifest.get("queue_sampler") if isinstance(manifest.get("queue_sampler"),
                                                          dict) else {}
    written = sampler.get("samples")
    if isinstance(written, int) and not isinstance(written, bool):
        written -= int(sampler.get("bad_samples") or 0)
        if n_samples < written - QUEUE_EDGE_SAMPLES:
            why.append(f"holds {n_samples} of the sampler's {written} samples")
    interval_s = _sample_interval_s(sampler, spec)
    slack = max(QUEUE_END_SLACK_S, QUEUE_END_INTERVALS * interval_s)
    if data_end is not None and last < data_end - slack:
        why.append(f"its rows stop {data_end - last:.3g} s before the workload's last "
                   "logged or captured moment")
    if fabric is not None and "iface" in queues:
        counts = queues.groupby("iface")["t"].nunique()
        want = list(fabric.switch_egress_ifaces())
        absent = [x for x in want if x not in counts.index]
        short = [f"{x} ({int(counts[x])})" for x in want
                 if x in counts.index and counts[x] < n_samples]
        if absent:
            why.append(f"no rows for {_few(absent)}, which the fabric map lists")
        if short:
            why.append(f"fewer than its {n_samples} samples for {_few(short)}")
    if why:
        i.state, i.reason, i.truncated_at = TRUNCATED, "; ".join(why), last
    return i


def _few(names: list[str], k: int = 4) -> str:
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def _sample_interval_s(sampler: dict, spec: dict) -> float:
    for v in (sampler.get("target_interval_ms"),
              (spec.get("capture") or {}).get("queue_sample_ms")):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v) / 1000
    return 0.010


def check_workers(run_dir, workers: pd.DataFrame | None, error: str | None,
                  manifest: dict) -> list[Input]:
    """One Input per worker log: every rank of the manifest's `processes` and every
    workers/*.jsonl present. A log with no valid line is unreadable; bad lines alone
    leave it ok (counted)."""
    if isinstance(manifest.get("jobs"), list) and manifest["jobs"]:
        return _check_job_workers(run_dir, manifest["jobs"])
    wdir = Path(run_dir) / rf.WORKERS_DIR
    ranks = [str(p.get("rank")) for p in manifest.get("processes") or []
             if isinstance(p, dict) and p.get("rank") is not None] \
        if isinstance(manifest.get("processes"), list) else []
    present = sorted(p.stem for p in wdir.glob("*.jsonl")) if wdir.is_dir() else []
    files = (workers.attrs.get("files") if workers is not None else None) or {}
    names = list(dict.fromkeys(ranks + sorted(present, key=_rank_order)))
    if not names:
        return [Input("workers/*.jsonl", "workers", MISSING, "no worker logs")]
    out = []
    for stem in names:
        i = check_file(run_dir, f"{rf.WORKERS_DIR}/{rf.worker_log(stem)}", "workers", error)
        st = files.get(stem) or {}
        if i.ok and not st.get("lines"):
            i.state, i.reason = EMPTY, "no lines"
        elif i.ok and st.get("bad_lines"):
            i.bad_lines = int(st["bad_lines"])
            i.first_bad = st.get("first_bad")
            if st["bad_lines"] >= st["lines"]:
                i.state, i.reason = UNREADABLE, f"none of its {st['lines']} lines is valid"
        out.append(i)
    return out


def _check_job_workers(run_dir, jobs: list) -> list[Input]:
    """Several jobs on one fabric (incastlab.multijob): each launched job's logs are in
    its own directory, <dir>/workers/<rank>.jsonl, for every rank of its processes."""
    out = []
    for job in jobs:
        if not isinstance(job, dict) or not job.get("dir") or job.get("launched") is False:
            continue
        ranks = [str(p["rank"]) for p in job.get("processes") or []
                 if isinstance(p, dict) and p.get("rank") is not None]
        present = sorted((p.stem for p in (Path(run_dir) / job["dir"] / "workers")
                          .glob("*.jsonl")), key=_rank_order)
        for stem in dict.fromkeys(ranks + present):
            out.append(check_file(run_dir, f"{job['dir']}/workers/{stem}.jsonl", "workers"))
    return out or [Input("jobs/*/workers/*.jsonl", "workers", MISSING, "no worker logs")]


def _rank_order(stem: str):
    return (0, int(stem), "") if stem.isdigit() else (1, 0, stem)


def check_counters(run_dir, fabric, manifest: dict | None = None) -> list[Input]:
    """counters/<host>.before.json and .after.json for every host that ran a process of
    the workload (the manifest's `processes`; only their TCP is counted) and every host
    with a counters file; without either, every host of the fabric map."""
    cdir = Path(run_dir) / rf.COUNTERS_DIR
    procs = (manifest or {}).get("processes")
    ran = [str(p["host"]) for p in procs if isinstance(p, dict) and p.get("host")] \
        if isinstance(procs, list) else []
    filed = sorted({p.name.split(".")[0] for p in cdir.glob("*.json")}) \
        if cdir.is_dir() else []
    hosts = list(dict.fromkeys(ran + filed)) or (
        [h.name for h in fabric.hosts] if fabric is not None else [])
    if not hosts:
        return [Input("counters/*.json", "counters", MISSING, "no kernel counters")]
    out = []
    for host in hosts:
        for phase in rf.COUNTER_PHASES:
            name = f"{rf.COUNTERS_DIR}/{rf.counters_file(host, phase)}"
            i = check_file(run_dir, name, "counters")
            if i.ok:
                try:
                    data = json.loads((Path(run_dir) / name).read_text())
                    if not isinstance(data, dict):
                        raise ValueError("not a JSON object")
                except (ValueError, UnicodeDecodeError) as exc:
                    i.state, i.reason = UNREADABLE, f"not nstat JSON ({exc})"
            out.append(i)
    return out


def data_end(workers: pd.DataFrame | None, pcaps: dict[str, pd.DataFrame]) -> float | None:
    """The workload's last logged or captured moment (epoch s): the latest time in the
    worker logs (`t`, `t_end`) and the captures; None when there is neither."""
    ends = []
    if workers is not None and len(workers):
        for c in ("t", "t_end"):
            if c in workers:
                v = pd.to_numeric(workers[c], errors="coerce").dropna()
                if len(v):
                    ends.append(float(v.max()))
    ends += [t for t in (_last_t(df) for df in pcaps.values()) if t is not None]
    return max(ends) if ends else None


def inventory(run_dir, *, manifest: dict, spec: dict, fabric, queues, workers,
              capture_inputs: list[Input], pcaps: dict[str, pd.DataFrame],
              errors: dict[str, str] | None = None, port_stats=None, flow_paths=None,
              t0: float | None = None) -> Inventory:
    """The inventory of one run from what report.analyse loaded. `errors`: {loader
    name ('manifest', 'spec', 'fabric', 'queues', 'workers', 'port_stats',
    'flow_paths', 'counters'): the error it raised}."""
    run_dir = Path(run_dir)
    errors = errors or {}
    items = [check_file(run_dir, rf.MANIFEST, "manifest", errors.get("manifest")),
             check_file(run_dir, "spec.toml", "spec", errors.get("spec")),
             check_file(run_dir, rf.FABRIC, "fabric", errors.get("fabric"))]
    items += capture_inputs
    items.append(check_queues(run_dir, queues, errors.get("queues"), manifest, spec, fabric,
                              data_end(workers, pcaps)))
    items += check_workers(run_dir, workers, errors.get("workers"), manifest)
    items += check_counters(run_dir, fabric, manifest)
    items.append(check_csv(run_dir, rf.PORT_STATS.name, "port_stats", port_stats,
                           errors.get("port_stats"), False))
    items.append(check_csv(run_dir, rf.FLOW_PATHS.name, "flow_paths", flow_paths,
                           errors.get("flow_paths"), False))
    if t0 is None and isinstance(manifest.get("start"), (int, float)):
        t0 = float(manifest["start"])
    return Inventory(items, t0)


def at_least(a, metric, groups) -> str:
    """For a count (`metric.floor`) whose only damaged inputs are truncated: ', at least
    N before that', computed from what the truncated inputs hold (a prefix of the run);
    '' otherwise. `a`: the Analysis; `groups`: the metric's damaged input keys."""
    inv = getattr(a, "inputs", None)
    if not getattr(metric, "floor", False) or inv is None or \
            not all(inv.truncated_only(g) for g in groups):
        return ""
    try:
        value = metric.compute(a)
    except Exception:  # noqa: BLE001 - no bound rather than a wrong one
        return ""
    if value is None or value != value:
        return ""
    return f"; at least {metric.text_with_unit(value)} counted before that"
