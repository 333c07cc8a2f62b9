"""ECN marks from three independent sources side by side (docs/ecn.md), as
analysis/reconcile.py does for drops: the switch ports' marker (``ecn.csv``), the
receivers' captures (CE-marked packets arriving at each captured host, analysis.ecnflows)
and the hosts' kernels (``counters/*.json``: the receiving host's ``IpExtInCEPkts``, the
CE packets its IP layer took in; the sender's ``TcpExtTCPDeliveredCE``, the packets it
learnt were delivered CE, from the receiver's ECE echoes).

What each should equal, and why not always:

- Every CE packet was marked once, by one port (a port never re-marks one that arrived
  CE; it counts it in ``ce_arrived``), so the ports' marks sum to the CE packets made.
  The port in front of a host forwards its own marks plus the CE packets that arrived:
  per host, that port's ``marks + ce_arrived`` = the host's ``IpExtInCEPkts`` delta
  (counted in ip_rcv for every IPv4 packet), exactly, unless a CE packet was lost after
  being counted (a later queue full, a host that dropped it before IP).
- The host's capture sees the same packets, less what tcpdump lost: captured <= kernel
  <= captured + lost.
- A sender's ``TCPDeliveredCE`` counts the packets newly delivered by each ACK that
  carries ECE, so it is compared with the same count from the receivers' captures
  (analysis.ecnflows.ece_delivered: the segments each captured ECE ACK newly
  acknowledged). Beside the CE packets of the sender's flows: with DCTCP's exact echo
  (an immediate ACK at every change of CE state, ECE on those covering CE packets) the
  two are equal but for an ACK that covered packets of both states (``mixed_acks``;
  measured: 1 of 2,971 ACKs, +1 packet); with classic ECN (RFC 3168) the receiver sets
  ECE on every ACK until the sender's CWR, so it counts more.
"""
from __future__ import annotations

import math

import pandas as pd

from .rundir import counter_delta

__all__ = ["HOST_COLUMNS", "IN_CE", "DELIVERED_CE", "reconcile_ecn"]

IN_CE = "IpExtInCEPkts"
DELIVERED_CE = "TcpExtTCPDeliveredCE"
HOST_COLUMNS = ["host", "port", "port_ce_out", "kernel_in_ce", "captured_ce_in",
                "capture_lost", "captured_ce_sent", "captured_ece_delivered",
                "kernel_delivered_ce"]
EXACT_ECHO = ("dctcp",)  # congestion controls whose receiver echoes each CE exactly


def _host_delta(counters: pd.DataFrame, host: str, name: str) -> float | None:
    if counters is None or counters.empty:
        return None
    return counter_delta(counters[counters["host"] == host], name)


def _num(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def host_table(totals: pd.DataFrame, flows: pd.DataFrame, counters: pd.DataFrame,
               fabric, lost: dict[str, int]) -> pd.DataFrame:
    """Per host: the port facing it (its CE out = marks + ce_arrived), its kernel's
    IpExtInCEPkts and TCPDeliveredCE deltas, the CE packets its own capture saw arriving
    (None when it was not captured) with what that capture lost, and the CE packets of
    the flows it sent as the receivers' captures saw them."""
    facing = {}
    for iface, t in totals.iterrows():
        e = fabric.link_of_iface(iface) if fabric else None
        if e is not None and fabric.host(e.peer) is not None:
            facing[e.peer] = (iface, int(t["marks"]) + int(t["ce_arrived"]))
    captured = set(flows["receiver"]) if len(flows) else set()
    rows = []
    for h in fabric.hosts if fabric else ():
        iface, out = facing.get(h.name, (None, None))
        mine = flows[flows["receiver"] == h.name] if len(flows) else flows
        sent = flows[flows["sender"] == h.name] if len(flows) else flows
        rows.append({"host": h.name, "port": iface, "port_ce_out": out,
                     "kernel_in_ce": _host_delta(counters, h.name, IN_CE),
                     "captured_ce_in": int(mine["ce"].sum()) if h.name in captured else None,
                     "capture_lost": lost.get(h.intf, 0) if h.name in captured else None,
                     "captured_ce_sent": int(sent["ce"].sum()) if captured else None,
                     "captured_ece_delivered": int(sent["ece_delivered"].sum())
                     if captured else None,
                     "kernel_delivered_ce": _host_delta(counters, h.name, DELIVERED_CE)})
    return pd.DataFrame(rows, columns=HOST_COLUMNS)


def _sum(col: pd.Series):
    vals = [float(v) for v in col if _num(v) is not None]
    return sum(vals) if vals else None


def reconcile_ecn(totals: pd.DataFrame, flows: pd.DataFrame, counters: pd.DataFrame,
                  fabric, manifest: dict, lost: dict[str, int]) -> dict:
    """{'totals': DataFrame(measure, source, value, meaning), 'hosts': host_table,
    'notes': [str], 'numbers': flat dict for metrics.json with 'agrees' per comparison
    (None: a source is missing)} (pure but for the arguments)."""
    hosts = host_table(totals, flows, counters, fabric, lost)
    marks = float(totals["marks"].sum()) if len(totals) else None
    n = {"port_marks": marks, "port_ce_to_hosts": _sum(hosts["port_ce_out"]),
         "kernel_in_ce": _num(counter_delta(counters, IN_CE)) if len(counters) else None,
         "captured_ce": _sum(hosts["captured_ce_in"]), "capture_lost": _sum(hosts["capture_lost"]),
         "captured_ce_sent": _sum(hosts["captured_ce_sent"]),
         "captured_ece_delivered": _sum(hosts["captured_ece_delivered"]),
         "mixed_acks": int(flows["mixed_acks"].sum()) if len(flows) else None,
         "kernel_delivered_ce": _num(counter_delta(counters, DELIVERED_CE))
         if len(counters) else None}
    cc = ((manifest.get("congestion") or {}).get("spec_name")
          or (manifest.get("spec") or {}).get("congestion_control") or "")
    n["exact_echo"] = cc in EXACT_ECHO
    n["agrees"] = _agreement(hosts, n)
    rows = [("CE marks set", "marker: sum of ports' marks (ecn.csv)", n["port_marks"],
             "ECT packets a port marked CE above K"),
            ("CE packets into hosts", "marker: host-facing ports' marks + ce_arrived",
             n["port_ce_to_hosts"], "what the last port before each host forwarded CE"),
            ("CE packets into hosts", f"kernel {IN_CE} (sum of hosts)", n["kernel_in_ce"],
             "CE packets the hosts' IP layer received"),
            ("CE packets into hosts", "captures at the receivers", n["captured_ce"],
             "CE packets in each captured host's own capture, arriving"),
            ("CE packets acknowledged", f"kernel {DELIVERED_CE} (sum of senders)",
             n["kernel_delivered_ce"], "packets delivered by ACKs carrying ECE"),
            ("CE packets acknowledged", "captures: packets the ECE ACKs delivered",
             n["captured_ece_delivered"], "segments newly acknowledged by each captured "
             "ACK with ECE, summed by sender"),
            ("CE packets acknowledged", "captures: CE packets of each sender's flows",
             n["captured_ce_sent"], "the CE packets, counted by their sender")]
    return {"totals": pd.DataFrame(rows, columns=["measure", "source", "value", "meaning"]),
            "hosts": hosts, "notes": _notes(hosts, n), "numbers": n}


def _agreement(hosts: pd.DataFrame, n: dict) -> dict:
    """Which sources agree: per host, port CE out = kernel IpExtInCEPkts; captured <=
    kernel <= captured + lost; DeliveredCE = what the captured ECE ACKs delivered (+ up
    to what the captures lost); with an exact echo, DeliveredCE = the captured CE of the
    sender's flows but for the mixed ACKs, without one >= them. None where a source is
    missing."""
    lost = n["capture_lost"] or 0  # a CE packet a receiver's capture missed
    mixed = n["mixed_acks"] or 0  # each moves the count by the packets of the other state

    def each(a, b, cmp):
        pairs = [(_num(x), _num(y), r) for x, y, r in zip(hosts[a], hosts[b],
                                                           hosts.to_dict("records"),
                                                           strict=True)]
        pairs = [p for p in pairs if p[0] is not None and p[1] is not None]
        return all(cmp(x, y, r) for x, y, r in pairs) if pairs else None

    return {"port_vs_kernel": each("port_ce_out", "kernel_in_ce", lambda x, y, _: x == y),
            "capture_vs_kernel": each("captured_ce_in", "kernel_in_ce",
                                      lambda c, k, r: c <= k <= c + (r["capture_lost"] or 0)),
            "delivered_vs_capture": each("kernel_delivered_ce", "captured_ece_delivered",
                                         lambda d, c, _: c <= d <= c + lost),
            "delivered_vs_ce": each(
                "kernel_delivered_ce", "captured_ce_sent",
                (lambda d, c, _: abs(d - c) <= lost + mixed) if n["exact_echo"]
                else (lambda d, c, _: d >= c)),
            "marks_vs_kernel": None if n["port_marks"] is None or n["kernel_in_ce"] is None
            else n["port_marks"] == n["kernel_in_ce"]}


def _fmt(v) -> str:
    return "n/a" if _num(v) is None else f"{v:,.0f}"


def _notes(hosts: pd.DataFrame, n: dict) -> list[str]:
    """What agreed, and which known effect explains each difference."""
    ag, notes = n["agrees"], []
    if ag["marks_vs_kernel"] is not None:
        msg = (f"The ports marked {_fmt(n['port_marks'])} packets CE; the hosts' kernels "
               f"received {_fmt(n['kernel_in_ce'])} ({IN_CE})")
        notes.append(msg + (": the same." if ag["marks_vs_kernel"] else
                            f", a difference of {n['kernel_in_ce'] - n['port_marks']:+,.0f}: "
                            "fewer when a CE packet was lost after it was marked (a later "
                            "queue full), more when CE packets came from elsewhere than "
                            "the marker."))
    for r in hosts.itertuples(index=False):
        po, k = _num(r.port_ce_out), _num(r.kernel_in_ce)
        if po is not None and k is not None and po != k:
            notes.append(f"{r.host}: its port {r.port} sent {po:,.0f} CE packets, its kernel "
                         f"received {k:,.0f}.")
    if ag["capture_vs_kernel"] is False:
        notes.append("A receiver's capture holds more CE packets than its kernel received, "
                     "or fewer by more than tcpdump reported lost (per host below).")
    if ag["delivered_vs_capture"] is not None:
        notes.append(f"The senders' kernels counted {_fmt(n['kernel_delivered_ce'])} packets "
                     f"delivered CE ({DELIVERED_CE}); the ACKs with ECE in the receivers' "
                     f"captures delivered {_fmt(n['captured_ece_delivered'])}"
                     + (": the same." if ag["delivered_vs_capture"] else
                        ", a difference the captures' losses do not explain (a segment a "
                        "SACK delivered is counted here at the cumulative ACK, the kernel "
                        "at the SACK)."))
    if ag["delivered_vs_ce"] is not None:
        msg = (f"Those ACKs echoed {_fmt(n['captured_ce_sent'])} CE packets of the senders' "
               f"flows; {_fmt(n['mixed_acks'])} ACK(s) covered packets of both states")
        if n["exact_echo"]:
            msg += (": DCTCP's exact echo, each such ACK moving the count by the packets of "
                    "the other state." if ag["delivered_vs_ce"] else
                    ": DCTCP echoes each CE exactly, so the difference should be no more "
                    "than those ACKs and the captures' losses.")
        else:
            msg += (". With classic ECN the receiver sets ECE on every ACK until the "
                    "sender's CWR, so the kernel counts every packet those ACKs deliver: "
                    "at least the CE packets" + (" (it is)." if ag["delivered_vs_ce"]
                                                 else ", but it is fewer here."))
        notes.append(msg)
    if n["captured_ce"] is None:
        notes.append("No receiving host was captured: the captures' columns are empty.")
    if n["kernel_in_ce"] is None:
        notes.append("No kernel counters (counters/*.json) or no IpExtInCEPkts in them.")
    return notes
