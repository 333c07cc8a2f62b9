"""Loaders for the files of a run directory (docs/run-directory.md), tolerant of absence.

Every loader returns an empty DataFrame / dict (never raises) when its file is missing,
so each report section can say "no data" instead of failing. Malformed files raise
with the file's name.
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pandas as pd

from incastlab.topologies import naming

QUEUE_COLUMNS = ["t", "switch", "port", "iface", "backlog_bytes", "backlog_pkts", "drops",
                 "overlimits", "sent_bytes", "sent_pkts", "requeues"]
PORT_STATS_COLUMNS = ["t", "switch", "port", "peer", "tx_bytes", "rx_bytes", "tx_packets",
                      "rx_packets", "tx_dropped"]


def load_manifest(run_dir) -> dict:
    """`manifest.json` as a dict ({} if absent)."""
    p = Path(run_dir) / "manifest.json"
    if not p.exists():
        return {}
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc})") from None


def load_spec(run_dir) -> dict:
    """`spec.toml` as a dict ({} if absent)."""
    p = Path(run_dir) / "spec.toml"
    if not p.exists():
        return {}
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{p}: not valid TOML ({exc})") from None


def run_status(manifest: dict) -> tuple[str, str]:
    """(status, reason); a manifest without a status counts as 'unknown'."""
    return str(manifest.get("status", "unknown")), str(manifest.get("reason", "") or "")


def _csv(path: Path, columns: list[str]) -> pd.DataFrame:
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame(columns=columns)
    df = pd.read_csv(path)
    missing = [c for c in ("t",) if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    return df.sort_values("t", kind="stable").reset_index(drop=True)


def load_queues(run_dir) -> pd.DataFrame:
    """`queues.csv`: one row per egress port per sample; counters cumulative (tc -s)."""
    df = _csv(Path(run_dir) / "queues.csv", QUEUE_COLUMNS)
    if len(df) and "iface" not in df.columns:
        df["iface"] = df["switch"].astype(str) + "-eth" + df["port"].astype(str)
    if len(df):
        df["iface"] = df["iface"].astype(str)
    return df


def load_port_stats(run_dir) -> pd.DataFrame:
    """`port_stats.csv` from the controller (OpenFlow port counters, cumulative)."""
    return _csv(Path(run_dir) / "port_stats.csv", PORT_STATS_COLUMNS)


def load_flow_paths(run_dir) -> pd.DataFrame:
    """`flow_paths.csv`: which spine the controller placed each flow on."""
    return _csv(Path(run_dir) / "flow_paths.csv",
                ["t", "src_ip", "dst_ip", "proto", "src_port", "dst_port", "spine", "policy"])


def load_counters(run_dir) -> pd.DataFrame:
    """Kernel counters per host: columns host, counter, before, after, delta.

    Reads `counters/<host>.before.json` and `.after.json`, raw `nstat -a -z --json`
    output: ``{"kernel": {"TcpRetransSegs": 12, ...}}``. A host with only one of the
    two files is listed with NaN delta.
    """
    cdir = Path(run_dir) / "counters"
    rows = []
    if not cdir.is_dir():
        return pd.DataFrame(columns=["host", "counter", "before", "after", "delta"])
    hosts = sorted({p.name.split(".")[0] for p in cdir.glob("*.json")})
    for host in hosts:
        snap = {}
        for phase in ("before", "after"):
            p = cdir / f"{host}.{phase}.json"
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

    Lines that are not valid JSON (e.g. a log cut by a crash) are skipped and counted
    in ``df.attrs['bad_lines']``.
    """
    wdir = Path(run_dir) / "workers"
    rows, bad = [], 0
    if wdir.is_dir():
        for p in sorted(wdir.glob("*.jsonl")):
            for line in p.read_text().splitlines():
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    bad += 1
                    continue
                if isinstance(obj, dict):
                    obj["file"] = p.stem
                    rows.append(obj)
    df = pd.DataFrame(rows)
    if "event" not in df.columns:
        df["event"] = pd.Series(dtype=object)
    df.attrs["bad_lines"] = bad
    return df


def empty_fabric() -> dict:
    """The normalised fabric of a run without fabric.json."""
    return {"hosts": {}, "links": [], "spines": [], "leaves": [], "raw": {}}


def load_fabric(run_dir) -> dict:
    """`fabric.json` (written by `topologies.leafspine.fabric_map`) normalised to
    {'hosts': {name: {ip, leaf, rate_mbps}}, 'links': [{a, a_iface, b, b_iface,
    rate_mbps}], 'spines': [names], 'leaves': [names]}.

    Also accepted, so older or hand-written files work: hosts as a
    list of objects with `name` and `ip` (or a dict name -> object); links as objects
    with endpoints under `a`/`b`, `node1`/`node2` or `src`/`dst` and optional
    interfaces (`a_iface`, `intf1`, `port1`, ...) and capacity (`rate_mbps`, `bw_mbps`,
    `bw`, `capacity_mbps`). Switch roles come from `switches[].role` or from the name
    (`sp*`/`spine*` spines, `lf*`/`leaf*` leaves).
    """
    p = Path(run_dir) / "fabric.json"
    empty = empty_fabric()
    if not p.exists():
        return empty
    try:
        raw = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc})") from None
    out = dict(empty, raw=raw)

    def items(obj):
        if isinstance(obj, dict):
            return [dict(v, name=k) if isinstance(v, dict) else {"name": k, "ip": v}
                    for k, v in obj.items()]
        return [x for x in (obj or []) if isinstance(x, dict)]

    def first(d, *keys, default=None):
        for k in keys:
            if d.get(k) is not None:
                return d[k]
        return default

    for h in items(raw.get("hosts")):
        ip = str(first(h, "ip", "address", default="")).split("/")[0]
        leaf = first(h, "leaf", "switch")
        if isinstance(leaf, int):  # topologies.leafspine.fabric_map stores the index
            leaf = naming.leaf_name(leaf)
        out["hosts"][str(h.get("name"))] = {
            "ip": ip, "leaf": leaf,
            "rate_mbps": _num(first(h, "rate_mbps", "bw_mbps", "bw", "link_mbps",
                                    default=raw.get("host_bw_mbps")))}
    roles = {}
    for s in items(raw.get("switches")):
        roles[str(s.get("name"))] = str(s.get("role", "")).lower()
    for link in items(raw.get("links")):
        a = first(link, "a", "node1", "src", "from")
        b = first(link, "b", "node2", "dst", "to")
        if isinstance(a, dict):  # {"node": ..., "iface": ...}
            link = dict(link, a_iface=first(a, "iface", "intf", "port"))
            a = first(a, "node", "name")
        if isinstance(b, dict):
            link = dict(link, b_iface=first(b, "iface", "intf", "port"))
            b = first(b, "node", "name")
        out["links"].append({
            "a": str(a), "b": str(b),
            "a_iface": _iface(a, first(link, "a_iface", "intf1", "iface1", "port1")),
            "b_iface": _iface(b, first(link, "b_iface", "intf2", "iface2", "port2")),
            "rate_mbps": _num(first(link, "rate_mbps", "bw_mbps", "bw", "capacity_mbps"))})
    names = set(roles) | {x for lk in out["links"] for x in (lk["a"], lk["b"])}
    for name in sorted(names):
        role = roles.get(name, "")
        low = name.lower()
        if role == "spine" or (not role and low.startswith(("sp", "spine"))):
            out["spines"].append(name)
        elif role == "leaf" or (not role and low.startswith(("lf", "leaf"))):
            out["leaves"].append(name)
    for hname, h in out["hosts"].items():
        if not h["leaf"]:
            for lk in out["links"]:
                if hname in (lk["a"], lk["b"]):
                    h["leaf"] = lk["b"] if lk["a"] == hname else lk["a"]
                    h["rate_mbps"] = h["rate_mbps"] or lk["rate_mbps"]
        elif not h["rate_mbps"]:
            for lk in out["links"]:
                if {hname, h["leaf"]} == {lk["a"], lk["b"]}:
                    h["rate_mbps"] = lk["rate_mbps"]
    return out


def _num(x):
    try:
        return float(x) if x is not None else None
    except (TypeError, ValueError):
        return None


def _iface(node, port):
    if port is None:
        return None
    if isinstance(port, (int, float)) or str(port).isdigit():
        return f"{node}-eth{int(port)}"
    return str(port)


def egress_iface(fabric: dict, switch: str, peer: str) -> str | None:
    """Interface of `switch` on its link to `peer` (its egress port towards peer)."""
    for lk in fabric.get("links", []):
        if lk["a"] == switch and lk["b"] == peer:
            return lk["a_iface"]
        if lk["b"] == switch and lk["a"] == peer:
            return lk["b_iface"]
    return None


def host_by_ip(fabric: dict) -> dict[str, str]:
    """{ip: host name} from fabric.json."""
    return {h["ip"]: name for name, h in fabric.get("hosts", {}).items() if h.get("ip")}


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
