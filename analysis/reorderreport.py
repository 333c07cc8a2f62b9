"""The report's reordering stage (stages.py): reorder.py's per-flow reordering at each
receiver's capture, reduced a group of connections at a time in the one pass over the
captures, and each host's D-SACK and reordering counters beside it: the "Reordering"
section, ``tables/reorder_flows.csv``, ``tables/reorder_hosts.csv`` and
``metrics.json`` ``reorder``."""
from __future__ import annotations

import pandas as pd

from .pcap import ip_to_int
from .reorder import FLOW_COLUMNS, flow_reordering, reorder_table
from .rundir import host_by_ip
from .stages import Section, Stage

__all__ = ["STAGE", "ReorderPass", "compute", "metrics", "render"]
TITLE = "Reordering"
FLOW_SHOWN = ["flow", "data_packets", "reordered", "max_displacement", "max_late_s",
              "below_highest", "duplicates"]
HOST_SHOWN = {"host": "host", "received_reordered": "reordered in",
              "received_duplicates": "duplicates in", "dsack_sent": "dsack_sent",
              "TcpExtTCPDSACKRecv": "DSACKRecv", "TcpExtTCPSACKReorder": "SACKReorder"}


class ReorderPass:
    """The stage's reducer (stages.Stage.reduce): each group of connections' per-flow
    rows, kept (a row a flow)."""

    def __init__(self, _run_dir, fabric, _manifest):
        self.names = host_by_ip(fabric)
        self.parts: list[pd.DataFrame] = []

    def add(self, packets, flows, _flow_summary, _retrans) -> pd.DataFrame:
        part = flow_reordering(packets, flows, self.names)
        self.parts.append(part)
        return part

    def per_flow(self) -> pd.DataFrame:
        parts = [p for p in self.parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else \
            pd.DataFrame(columns=FLOW_COLUMNS)


def in_flow_order(per_flow: pd.DataFrame) -> pd.DataFrame:
    """Rows in the flows' order of the all-in-memory analysis (tcp.data_flows: by src,
    dst, sport, dport as numbers), whichever groups of connections they came from."""
    def key(name: str):
        (src, sport), (dst, dport) = (side.rsplit(":", 1) for side in name.split(">"))
        return ip_to_int(src), ip_to_int(dst), int(sport), int(dport)

    order = sorted(range(len(per_flow)), key=lambda i: key(per_flow["flow"].iloc[i]))
    return per_flow.iloc[order].reset_index(drop=True)


def compute(a) -> dict | None:
    """{"flows": per flow, "hosts": per host with its counters}; None without data
    flows seen at a receiver."""
    reduced = a.captured.get("reorder")
    if isinstance(reduced, Exception):
        raise reduced
    if reduced is not None:
        per_flow = reduced.per_flow()
    else:  # an Analysis made without the pass: its packet table
        tcp = a.tables.get("tcp")
        per_flow = flow_reordering(tcp, names=host_by_ip(a.fabric)) \
            if tcp is not None and len(tcp) else pd.DataFrame(columns=FLOW_COLUMNS)
    if per_flow.empty:
        return None
    per_flow = in_flow_order(per_flow)
    counters = a.tables.get("counters")
    counters = counters if counters is not None else pd.DataFrame(
        columns=["host", "counter", "delta"])
    return {"flows": per_flow, "hosts": reorder_table(per_flow, counters)}


def metrics(t: dict | None) -> dict | None:
    if not t:
        return None
    f, hosts = t["flows"], t["hosts"]
    packets = int(f["data_packets"].sum())
    return {"data_packets": packets, "reordered": int(f["reordered"].sum()),
            "reordered_fraction": float(f["reordered"].sum() / packets) if packets else None,
            "max_displacement": int(f["max_displacement"].max()),
            "max_late_s": float(f["max_late_s"].max()),
            "below_highest": int(f["below_highest"].sum()),
            "duplicates": int(f["duplicates"].sum()),
            "hosts": hosts.astype(object).where(hosts.notna(), None).to_dict("records")}


def render(a, _figs) -> list:
    from . import render as rd

    t = a.tables.get("reorder")
    if not t:
        return []
    m = metrics(t)
    flows = t["flows"].sort_values(["reordered", "duplicates"], ascending=False,
                                   kind="stable")
    # the page keeps to what fits its width; the CSVs have every column
    h1, m1 = rd.table(a, flows[FLOW_SHOWN], "reorder_flows", full=flows)
    hosts = t["hosts"]
    shown = hosts[list(HOST_SHOWN)].rename(columns=HOST_SHOWN)
    h2, m2 = rd.table(a, shown, "reorder_hosts", full=hosts)
    frac = m["reordered_fraction"]
    lead = (f"At the receivers' captures {m['reordered']} of {m['data_packets']} data "
            f"packets ({frac:.2%}) arrived after a packet their sender sent later "
            f"(displaced by at most {m['max_displacement']} packets, at most "
            f"{m['max_late_s'] * 1e3:.2f} ms late); {m['below_highest']} arrived below the "
            f"highest sequence seen and {m['duplicates']} were duplicates (spurious "
            "retransmissions, each answered by a D-SACK: dsack_sent). Per flow, then per "
            "host beside its kernel counters (docs/routing-below-the-flow.md).")
    return [Section(TITLE, f"<p>{rd.esc(lead)}</p>{h1}{h2}", f"{lead}\n\n{m1}{m2}")]


STAGE = Stage("reorder", ("tcp", "counters", "fabric"), compute=compute, metrics=metrics,
              render=render, after="retransmissions", what="reordering", reduce=ReorderPass)
