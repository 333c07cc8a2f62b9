"""Loaders for the files of a run directory (docs/run-directory.md), tolerant of absence.

Every loader returns an empty DataFrame / dict (never raises) when its file is missing
(the fabric map: None), so each report section can say "no data" instead of failing.
Malformed files raise with the file's name.
"""
from __future__ import annotations

import csv
import io
import json
import tomllib
from pathlib import Path

import pandas as pd

from incastlab.topologies import naming, runformat
from incastlab.topologies.fabricmap import FabricMap

QUEUE_COLUMNS = runformat.QUEUES.fields
PORT_STATS_COLUMNS = runformat.PORT_STATS.fields


def load_manifest(run_dir) -> dict:
    """`manifest.json` as a dict ({} if absent)."""
    p = Path(run_dir) / runformat.MANIFEST
    if not p.exists():
        return {}
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc})") from None


def load_spec(run_dir) -> dict:
    """`spec.toml` as a dict ({} if absent)."""
    p = Path(run_dir) / runformat.SPEC
    if not p.exists():
        return {}
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{p}: not valid TOML ({exc})") from None


def run_status(manifest: dict) -> tuple[str, str]:
    """(status, reason); a manifest without a status counts as 'unknown'."""
    return str(manifest.get("status", "unknown")), str(manifest.get("reason", "") or "")


def read_csv_lines(path: Path, columns: list[str], numeric=("t",)) -> pd.DataFrame:
    """A CSV file of the run, line by line: a damaged line costs only itself.

    A line is skipped and counted as bad when it is not UTF-8, has another number of
    fields than the header, has a non-number in one of the `numeric` columns, or is the
    last line and lacks its line end (a writer stopped in the middle of it). The rest is
    kept, sorted by `t`. ``df.attrs``: `bad_lines` (count), `first_bad` ("line N: text",
    or None), `partial_last_line` (bool), `lines` (data lines read). A missing or empty
    file gives an empty frame with `columns`; a header without `t` raises ValueError.
    """
    empty = pd.DataFrame(columns=columns)
    empty.attrs.update(bad_lines=0, first_bad=None, partial_last_line=False, lines=0)
    if not path.exists() or path.stat().st_size == 0:
        return empty
    lines = path.read_bytes().split(b"\n")
    partial = lines[-1].strip(b"\r") != b""  # the writer ends every line with its newline
    if not partial:
        lines = lines[:-1]
    try:
        header = lines[0].decode("utf-8").strip("\r\ufeff").split(",")
    except UnicodeDecodeError:
        header = []
    if "t" not in header:
        raise ValueError(f"{path}: missing column(s) ['t'] in its header line")
    good, bad, first_bad, n = [], 0, None, 0
    for i, raw in enumerate(lines[1:], start=2):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        n += 1
        try:
            text = raw.decode("utf-8")
            fields = next(csv.reader([text])) if '"' in text else text.split(",")
            ok = len(fields) == len(header) and not (partial and i == len(lines))
        except (UnicodeDecodeError, csv.Error):
            ok = False
        if ok:
            good.append(text)
        else:
            bad += 1
            first_bad = first_bad or f"line {i}: {raw[:80]!r}"
    if not good:
        df = pd.DataFrame(columns=header)
    else:
        df = pd.read_csv(io.StringIO("\n".join([",".join(header)] + good)))
    keep = pd.Series(True, index=df.index)
    for col in [c for c in numeric if c in df.columns]:
        keep &= pd.to_numeric(df[col], errors="coerce").notna()
    if not keep.all():
        for i in df.index[~keep][:1]:
            first_bad = first_bad or f"data row {int(i) + 1}: {good[i][:80]!r}"
        bad += int((~keep).sum())
        df = _retyped(df[keep].reset_index(drop=True), numeric)
    df = df.sort_values("t", kind="stable").reset_index(drop=True)
    df.attrs.update(bad_lines=bad, first_bad=first_bad, partial_last_line=partial, lines=n)
    return df


def _retyped(df: pd.DataFrame, numeric) -> pd.DataFrame:
    """Numeric columns that held a bad value (so were read as text) as numbers again,
    whole numbers as integers, as pandas reads a clean file."""
    for col in [c for c in numeric
                if c in df.columns and not pd.api.types.is_numeric_dtype(df[c])]:
        v = pd.to_numeric(df[col])
        df[col] = v.astype("int64") if col != "t" and len(v) and (v == v.round()).all() else v
    return df


def read_run_csv(run_dir, csv_file: runformat.CsvFile) -> pd.DataFrame:
    """One of the run's CSV files, by its declaration in the contract (`read_csv_lines`)."""
    return read_csv_lines(Path(run_dir) / csv_file.name, csv_file.fields, csv_file.numeric)


def load_queues(run_dir) -> pd.DataFrame:
    """`queues.csv`: one row per egress port per sample; counters cumulative (tc -s).
    A damaged line is skipped and counted (`read_csv_lines`, ``df.attrs``)."""
    df = read_run_csv(run_dir, runformat.QUEUES)
    if len(df) and "iface" not in df.columns:
        df["iface"] = df["switch"].astype(str) + "-eth" + df["port"].astype(str)
    if len(df):
        df["iface"] = df["iface"].astype(str)
    return df


def load_port_stats(run_dir) -> pd.DataFrame:
    """`port_stats.csv` from the controller (OpenFlow port counters, cumulative)."""
    return read_run_csv(run_dir, runformat.PORT_STATS)


def load_flow_paths(run_dir) -> pd.DataFrame:
    """`flow_paths.csv`: which spine the controller placed each flow on."""
    return read_run_csv(run_dir, runformat.FLOW_PATHS)


def load_counters(run_dir) -> pd.DataFrame:
    """Kernel counters per host: columns host, counter, before, after, delta.

    Reads `counters/<host>.before.json` and `.after.json`, raw `nstat -a -z --json`
    output: ``{"kernel": {"TcpRetransSegs": 12, ...}}``. A host with only one of the
    two files is listed with NaN delta.
    """
    cdir = Path(run_dir) / runformat.COUNTERS_DIR
    rows = []
    if not cdir.is_dir():
        return pd.DataFrame(columns=["host", "counter", "before", "after", "delta"])
    hosts = sorted({p.name.split(".")[0] for p in cdir.glob("*.json")})
    for host in hosts:
        snap = {}
        for phase in runformat.COUNTER_PHASES:
            p = cdir / runformat.counters_file(host, phase)
            if p.exists():
                try:
                    data = json.loads(p.read_text() or "{}")
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{p}: not valid JSON ({exc})") from None
                # nstat nests counters under "kernel"; accept a flat dict as well
                snap[phase] = data.get("kernel", data) if isinstance(data, dict) else {}
        names = set(snap.get("before", {})) | set(snap.get("after", {}))
        for name in sorted(names):
            b = snap.get("before", {}).get(name)
            a = snap.get("after", {}).get(name)
            rows.append({"host": host, "counter": name, "before": b, "after": a})
    df = pd.DataFrame(rows, columns=["host", "counter", "before", "after"])
    df["delta"] = pd.to_numeric(df["after"], errors="coerce") - pd.to_numeric(
        df["before"], errors="coerce")
    return df


def counter_delta(counters: pd.DataFrame, name: str) -> float | None:
    """Sum over hosts of after-before for one nstat counter (None if no host has it)."""
    if counters.empty:
        return None
    sel = counters[counters["counter"] == name]["delta"].dropna()
    return float(sel.sum()) if len(sel) else None


def load_workers(run_dir) -> pd.DataFrame:
    """All `workers/*.jsonl` events in one frame, with a `file` column (the rank file).

    Lines that are not valid UTF-8 JSON objects (e.g. a log cut by a crash, or one
    damaged byte) are skipped and counted in ``df.attrs['bad_lines']``; every other
    line of that file is kept (a file is decoded line by line, so one bad byte costs one
    line, not the file). ``df.attrs['files']``: each file's lines, bad lines and first
    bad line.
    """
    wdir = Path(run_dir) / runformat.WORKERS_DIR
    rows, bad, files = [], 0, {}
    if wdir.is_dir():
        for p in sorted(wdir.glob("*.jsonl")):
            lines = bad_here = 0
            first_bad = None
            for i, raw in enumerate(p.read_bytes().splitlines(), start=1):
                if not raw.strip():
                    continue
                lines += 1
                try:
                    obj = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    obj = None
                if not isinstance(obj, dict):
                    bad_here += 1
                    first_bad = first_bad or f"line {i}: {raw[:80]!r}"
                    continue
                obj["file"] = p.stem
                rows.append(obj)
            bad += bad_here
            files[p.stem] = {"lines": lines, "bad_lines": bad_here, "first_bad": first_bad}
    df = pd.DataFrame(rows)
    if "event" not in df.columns:
        df["event"] = pd.Series(dtype=object)
    df.attrs["bad_lines"] = bad
    df.attrs["files"] = files  # {rank file stem: {"lines": n, "bad_lines": k}}
    return df


def load_fabric(run_dir) -> FabricMap | None:
    """`fabric.json` as the typed fabric map (`incastlab.topologies.fabricmap`, the
    code the topology writes it with), or None when the run has no fabric.json.

    A damaged file, or one that is not format version 1, raises FabricError (a
    ValueError) naming the file and the field; nothing is guessed.
    """
    p = Path(run_dir) / runformat.FABRIC
    if not p.exists():
        return None
    return FabricMap.load(p)


def host_by_ip(fabric: FabricMap | None) -> dict[str, str]:
    """{ip: host name} from the fabric map ({} without one)."""
    return {ip: name for name, ip in fabric.ip_by_host().items()} if fabric else {}


def spine_lookup(flow_paths: pd.DataFrame):
    """A function (src_ip, dst_ip, sport, dport) -> spine name or None from flow_paths.csv.

    The controller may record a placement per 5-tuple or per address pair (ports empty);
    the last placement wins. Spines given as numbers become names (`sp{j}`, as in
    topologies.naming).
    """
    exact, pair = {}, {}
    if flow_paths is not None and not flow_paths.empty:
        for r in flow_paths.itertuples(index=False):
            spine = _spine_name(getattr(r, "spine", None))
            if spine is None:
                continue
            src, dst = str(r.src_ip), str(r.dst_ip)
            sp, dp = _port(getattr(r, "src_port", None)), _port(getattr(r, "dst_port", None))
            if sp is not None and dp is not None:
                exact[(src, dst, sp, dp)] = spine
            else:
                pair[(src, dst)] = spine

    def lookup(src, dst, sport, dport):
        return exact.get((src, dst, int(sport), int(dport))) or pair.get((src, dst))
    return lookup


def _spine_name(x):
    if x is None or (isinstance(x, float) and x != x) or str(x).strip() == "":
        return None
    text = str(x).strip()
    try:
        return naming.spine_name(int(float(text)))
    except ValueError:
        return text


def _port(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return int(v) if v == v else None
