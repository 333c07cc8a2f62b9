"""ECN marks at the switch queues (docs/ecn.md): the marker's counters (``ecn.csv``) per
port and per second, and the cross-check against the captures' CE-marked packets and
the TCP ECE/CWR echoes.

``ecn.csv`` holds cumulative counters per port, sampled; `marks_per_second` puts each
increment between two samples into the second (since the run's start) in which the later
sample was taken. Counters start at 0 when the marker is attached, so the first sample's
increment is its value. The per-second counts of a port sum to its last sample: the
run's totals (`port_totals`).

Cross-check: every CE packet a host receives was marked by a switch port on its path,
and the last port before the host (its leaf's downlink) forwards marks it set plus
packets that arrived already CE (``ce_arrived``). So for each host-facing port whose
host was captured, CE packets captured arriving at the host = marks + ce_arrived of the
port, less what the capture lost (tcpdump's kernel and interface drops): the tolerance
is exactly those drops, one-sided.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from incastlab.topologies.runformat import ECN_COUNTERS, ECN_MARKS

from . import ecnflows, ecnreconcile, pcap
from .stages import Section, Stage

__all__ = ["STAGE", "captured_ecn", "cross_check", "marks_per_second", "port_totals",
           "read_counters"]

PER_SECOND = ("marks", "ce_arrived", "full")  # ECN_MARKS' counted columns


def read_counters(run_dir) -> pd.DataFrame | None:
    """ecn.csv of a run, or None when the run had no ECN marking."""
    path = Path(run_dir) / ECN_COUNTERS.name
    if not path.exists():
        return None
    df = pd.read_csv(path)
    missing = [c for c in ECN_COUNTERS.fields if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: columns {', '.join(missing)} missing")
    return df


def marks_per_second(counters: pd.DataFrame, t0: float) -> pd.DataFrame:
    """ECN_MARKS' rows (iface, second, marks, ce_arrived, full) from cumulative counters:
    per port, the increments between consecutive samples (the first from 0), summed by
    the whole second since ``t0`` of the later sample; seconds without a change are left
    out (pure)."""
    if counters is None or counters.empty:
        return pd.DataFrame(columns=ECN_MARKS.fields)
    df = counters.sort_values(["iface", "t"], kind="stable")
    inc = df.groupby("iface", sort=False)[list(PER_SECOND)].diff()
    first = inc[PER_SECOND[0]].isna()
    inc.loc[first] = df.loc[first, list(PER_SECOND)].to_numpy()
    inc["iface"] = df["iface"].to_numpy()
    inc["second"] = np.floor(df["t"].to_numpy(float) - t0).astype(np.int64)
    out = inc.groupby(["iface", "second"], sort=True)[list(PER_SECOND)].sum().reset_index()
    out = out[(out[list(PER_SECOND)] != 0).any(axis=1)]
    return out[ECN_MARKS.fields].astype({c: np.int64 for c in PER_SECOND}) \
        .reset_index(drop=True)


def port_totals(counters: pd.DataFrame) -> pd.DataFrame:
    """Each port's last sample (its run totals), indexed by iface (pure)."""
    last = counters.sort_values("t", kind="stable").groupby("iface").tail(1)
    return last.set_index("iface").sort_index()


def captured_ecn(packets: pd.DataFrame, host_ip: int | None = None) -> dict[str, int]:
    """Counts in one capture's parsed packets (analysis.pcap): IPv4 packets by ECN field,
    and TCP segments other than SYNs with ECE and with CWR. ``host_ip``: count only CE
    packets sent to it (what arrived at the host) in ``ce_in`` (pure)."""
    ip = packets[(packets["ethertype"] == 0x0800) & packets["hdr_ok"]]
    ecn = ip["ecn"].to_numpy()
    tcp = ip[ip["proto"] == 6]
    flags = tcp["flags"].to_numpy()
    echo = (flags & pcap.SYN) == 0  # a SYN's ECE + CWR (a SYN-ACK's ECE) negotiate ECN
    out = {"ce": int((ecn == pcap.ECN_CE).sum()), "ect": int(((ecn == 1) | (ecn == 2)).sum()),
           "not_ect": int((ecn == 0).sum()),
           "ece": int((echo & ((flags & pcap.ECE) != 0)).sum()),
           "cwr": int((echo & ((flags & pcap.CWR) != 0)).sum())}
    if host_ip is not None:
        out["ce_in"] = int(((ecn == pcap.ECN_CE) & (ip["dst"].to_numpy() == host_ip)).sum())
    return out


def capture_lost(manifest: dict, iface: str) -> int:
    """Packets tcpdump said it lost on ``iface`` (kernel and interface drops)."""
    stats = (manifest.get("capture_drops") or {}).get(iface) or {}
    return sum(int(stats.get(k) or 0) for k in ("dropped_by_kernel", "dropped_by_interface"))


def cross_check(totals: pd.DataFrame, fabric, run_dir, manifest: dict) -> pd.DataFrame:
    """One row per host-facing switch port whose host was captured: the marker's
    marks + ce_arrived, the CE packets captured arriving at the host, what the capture
    lost, and whether captured <= expected <= captured + lost."""
    rows = []
    pcap_dir = Path(run_dir) / "pcap"
    for iface, t in totals.iterrows():
        e = fabric.link_of_iface(iface) if fabric else None
        host = fabric.host(e.peer) if e is not None else None
        path = pcap_dir / f"{host.intf}.pcap" if host else None
        if host is None or not path.exists():
            continue
        seen = captured_ecn(pcap.read_pcap(path), pcap.ip_to_int(host.ip))
        expected = int(t["marks"]) + int(t["ce_arrived"])
        lost = capture_lost(manifest, host.intf)
        rows.append({"iface": iface, "host": host.name, "marks": int(t["marks"]),
                     "ce_arrived": int(t["ce_arrived"]), "ce_captured": seen["ce_in"],
                     "capture_lost": lost, "ece_captured": seen["ece"],
                     "cwr_captured": seen["cwr"],
                     "agrees": seen["ce_in"] <= expected <= seen["ce_in"] + lost})
    return pd.DataFrame(rows)


def compute(a) -> dict | None:
    counters = read_counters(a.run_dir)
    if counters is None:
        return None
    totals = port_totals(counters)
    flows, ce_times = ecnflows.run_flows(a.run_dir, a.fabric)
    lost = {h.intf: capture_lost(a.manifest, h.intf) for h in a.fabric.hosts} \
        if a.fabric else {}
    return {"per_second": marks_per_second(counters, a.t0), "totals": totals,
            "check": cross_check(totals, a.fabric, a.run_dir, a.manifest), "flows": flows,
            "ce_times": ce_times, "counters": counters,
            "reconcile": ecnreconcile.reconcile_ecn(totals, flows, a.tables.get("counters"),
                                                    a.fabric, a.manifest, lost)}


def metrics(t: dict | None) -> dict | None:
    if not t:
        return None
    totals, check = t["totals"], t["check"]
    return {"marks": {k: int(v) for k, v in totals["marks"].items()},
            "full": {k: int(v) for k, v in totals["full"].items()},
            "check": check.to_dict("records") if len(check) else [],
            "reconcile": t["reconcile"]["numbers"]}


def render(a, _figs) -> list:
    from . import render as rd

    t = a.tables.get("ecn")
    if not t:
        return []
    html, md = rd.table(a, t["per_second"], ECN_MARKS.name.removesuffix(".csv"), keys=2)
    check = t["check"]
    if len(check):
        h2, m2 = rd.table(a, check, "ecn_check")
        html, md = html + h2, md + m2
    flows = t["flows"]
    if len(flows):
        data = flows[flows["data_packets"] > 0]
        h5, m5 = rd.table(a, data.drop(columns=["src", "dst", "capture"]), "ecn_flows",
                          keys=2, full=flows)
        html += ("<h3>Per flow (the receiver's capture)</h3><p>Connections that carried "
                 "data to a captured host. CE: data packets that arrived marked; CWR: the "
                 "sender's window reductions; ECE: the receiver's ACKs echoing the marks "
                 "(SYNs left out); ece_delivered: the packets those ACKs newly "
                 "acknowledged (what the sender's TCPDeliveredCE counts); mixed_acks: ECE "
                 "that did not match what an ACK covered.</p>" + h5)
        md += "\nPer flow (the receiver's capture):\n\n" + m5
    rec = t["reconcile"]
    h3, m3 = rd.table(a, rec["totals"], "ecn_reconciliation", md_cols=["measure", "source",
                                                                       "value"])
    h4, m4 = rd.table(a, rec["hosts"], "ecn_reconciliation_hosts")
    notes = "".join(f"<li>{rd.esc(n)}</li>" for n in rec["notes"])
    html += ("<h3>Marks, captures and kernel counters</h3>" + h3 + "<h3>Per host</h3>" + h4
             + f"<ul>{notes}</ul>")
    md += "\nMarks, captures and kernel counters:\n\n" + m3 + "\nPer host:\n\n" + m4 \
        + "".join(f"- {n}\n" for n in rec["notes"])
    ecn = a.manifest.get("ecn") or {}
    lead = (f"CE marked above {ecn.get('threshold')} {ecn.get('unit')} at every switch "
            f"egress queue ({ecn.get('marker')}); marks per port per second, then the "
            "cross-check against the captures, then the marks beside the captures' CE packets and "
            "the hosts' kernel counters (docs/ecn.md).")
    return [Section("ECN marks", f"<p>{lead}</p>{html}", f"{lead}\n\n{md}")]


STAGE = Stage("ecn", ("fabric",), compute=compute, metrics=metrics, render=render,
              after="queues", what="ECN marks")
