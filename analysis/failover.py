"""Events of a run and what the network did about them: failover time, losses, flows
moved, the controller's reaction (issue 15 items 1-2).

Inputs (all optional; a missing one makes its column n/a with the reason):

- ``events.jsonl``: what the runner's event scheduler did and when (incastlab.events);
- ``failover.csv``: the controller's port-status arrivals and the barrier reply after
  its new flows/groups (controller/records.py);
- the captures (``analysis.tcp``'s packet table) and the fabric map: which spine each
  captured packet crossed, from the interface it was seen on (a leaf's uplink or a
  spine's downlink). The report feeds them a group of whole connections at a time
  (`EventFlows`, on the TCP analysis's one pass over the captures: chunked.py), so a
  run of any size is measured on all its packets;
- the TCP analysis's retransmissions.

Per network event that takes a spine out of some paths (``link_down`` of a leaf-spine
link, ``switch_down`` of a spine), for every directional flow that sent data over that
spine between one of the failed link's leaves and another leaf in the
``ACTIVE_WINDOW_S`` before the event:

    last_old_s   its last data packet captured on the failed spine before the failure
                 ended (the old path; relative to the event)
    first_new_s  its first data packet on another spine after the event
    failover_s   first_new - last_old: how long the flow carried nothing on any path;
                 negative when the new path carried it before what the old spine still
                 held queued had arrived (an overlap, no gap: at most one queue's drain)
    lost         its retransmissions of segments first sent between the event less the
                 failed link's queue drain time (what sat in the queue that went down)
                 and its first packet on the new path: what the failure cost it

``moved`` counts the flows that reached a new path. The controller's reaction: the
first failover.csv row of the event's state within ``DETECT_HORIZON_S`` after it:
``detect_s`` (port-status after the event's action), ``reaction_s`` (port-status to
the last barrier reply) and ``repaired_s`` (the event to that reply).

Pure functions of tables; nothing is written into the run directory but the report's
own files.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from incastlab.topologies import runformat

__all__ = ["ACTIVE_WINDOW_S", "BIN_S", "DETECT_HORIZON_S", "DOWN_ACTIONS", "EVENTS_FILE",
           "FAILOVER_FILE", "FLOW_COLUMNS", "SECTION_TITLE", "SUMMARY_COLUMNS",
           "EventFlows", "analyse", "analyse_events", "controller_reaction",
           "events_table", "failed_spines", "flow_failover", "load_controller", "metrics",
           "not_fired", "read_event_rows", "restore_time", "spine_of_iface",
           "spine_packets", "target_text"]

ACTIVE_WINDOW_S = 1.0    # a flow "used" the link if it sent over it this long before
DETECT_HORIZON_S = 5.0   # a port-status this long after an event belongs to it
BIN_S = 0.1              # spine_packets' bins (the events figure's packets per spine)
EVENTS_FILE = runformat.EVENTS
FAILOVER_FILE = runformat.FAILOVER.name
SECTION_TITLE = "Events and failover"
DOWN_ACTIONS = {"link_down": "down", "switch_down": "down", "link_up": "up",
                "switch_up": "up"}
FLOW_COLUMNS = ["event", "flow", "src_host", "dst_host", "last_old_s", "first_new_s",
                "failover_s", "new_spine", "lost"]
SUMMARY_COLUMNS = ["event", "action", "target", "t_rel_s", "flows_on_link", "moved",
                   "failover_median_s", "failover_max_s", "lost", "detect_s", "reaction_s",
                   "repaired_s"]


# --- inputs ----------------------------------------------------------------------------

def read_event_rows(run_dir) -> list[dict]:
    """The events.jsonl rows of kind ``apply`` in time order, each with ``t_undo`` (wall
    time of its undo, None if never undone) and ``t0`` (the workload's start)."""
    path = Path(run_dir) / EVENTS_FILE
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if isinstance(row, dict):
            rows.append(row)
    undo = {r.get("index"): r.get("t") for r in rows if r.get("kind") == "undo"}
    applied = [dict(r, t_undo=undo.get(r.get("index"))) for r in rows
               if r.get("kind") == "apply"]
    return sorted(applied, key=lambda r: r.get("t") or 0.0)


def events_table(run_dir) -> pd.DataFrame:
    """One row per applied event: index, action, target, planned, t (wall), t_rel_s
    (since the workload started), t_undo, ok, error, result."""
    rows = []
    for r in read_event_rows(run_dir):
        planned = r.get("planned") or {}
        rows.append({"index": r.get("index"), "action": r.get("action"),
                     "target": target_text(r.get("params") or {}),
                     "planned": ", ".join(f"{k} = {v}" for k, v in planned.items()),
                     "t": r.get("t"), "t_rel_s": r.get("t_rel_s"), "t_undo": r.get("t_undo"),
                     "ok": r.get("ok"), "error": r.get("error"),
                     "result": json.dumps(r.get("result") or {})})
    return pd.DataFrame(rows, columns=["index", "action", "target", "planned", "t", "t_rel_s",
                                       "t_undo", "ok", "error", "result"])


def not_fired(run_dir) -> list[dict]:
    path = Path(run_dir) / EVENTS_FILE
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("kind") == "not_fired":
            out.append(row)
    return out


def target_text(params: dict) -> str:
    parts = []
    for k, v in params.items():
        parts.append(f"{k} {'-'.join(map(str, v)) if isinstance(v, list) else v}")
    return ", ".join(parts)


def load_controller(run_dir) -> pd.DataFrame:
    """failover.csv as a table (t_seen, t_installed, reaction_s numeric); empty if absent."""
    path = Path(run_dir) / FAILOVER_FILE
    if not path.exists():
        return pd.DataFrame(columns=["t_seen", "switch", "iface", "state", "t_installed",
                                     "reaction_s"])
    df = pd.read_csv(path)
    for c in ("t_seen", "t_installed", "reaction_s"):
        if c in df:
            df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


# --- the fabric's view -------------------------------------------------------------------

def spine_of_iface(fabric) -> dict[str, str]:
    """Interface -> the spine a packet seen there crosses: a leaf's uplink (either
    direction) and a spine's downlink."""
    out = {}
    for e in fabric.egresses():
        node, peer = fabric.switch_named(e.node), fabric.switch_named(e.peer)
        if node and peer and node.role == "leaf" and peer.role == "spine":
            out[e.iface] = peer.name
        elif node and peer and node.role == "spine" and peer.role == "leaf":
            out[e.iface] = node.name
    return out


def failed_spines(event: dict, fabric) -> tuple[set[str], set[str] | None, float | None]:
    """(spines the event takes out of some paths, the leaves whose flows lose them —
    None: every leaf, the failed link's queue drain time in seconds) for a
    ``link_down`` of a leaf-spine link or a ``switch_down`` of a spine; else empty."""
    params = event.get("params") or {}
    nodes: list[str] = []
    if event.get("action") in ("link_down", "link_up") and "link" in params:
        link = params["link"]
        if isinstance(link, str):
            e = fabric.link_of_iface(link)
            nodes = [e.node, e.peer] if e else []
        else:
            nodes = list(link)
        switches = [fabric.switch_named(n) for n in nodes]
        if len(nodes) == 2 and all(switches) and {s.role for s in switches} == {"leaf",
                                                                                  "spine"}:
            spine = next(s for s in switches if s.role == "spine")
            leaf = next(s for s in switches if s.role == "leaf")
            iface = fabric.egress_iface(spine.name, leaf.name)
            return {spine.name}, {leaf.name}, _drain_s(fabric, iface)
        return set(), None, None
    if event.get("action") in ("switch_down", "switch_up"):
        sw = fabric.switch_named(params.get("switch", ""))
        if sw and sw.role == "spine":
            drains = [_drain_s(fabric, e.iface) for e in fabric.egresses() if e.node == sw.name]
            return {sw.name}, None, max([d for d in drains if d is not None], default=None)
    return set(), None, None


def _drain_s(fabric, iface: str | None) -> float | None:
    """Seconds a full egress queue takes to leave (packets x MTU frame / rate): what was
    queued when the link went down is lost with it."""
    e = fabric.link_of_iface(iface) if iface else None
    if e is None or not e.queue_packets or not e.bw_mbps:
        return None
    return e.queue_packets * 1514 * 8 / (e.bw_mbps * 1e6)


def _host_leaf(fabric) -> dict[int, str]:
    """IPv4 address as uint32 -> the name of its host's leaf."""
    from .pcap import ip_to_int

    return {ip_to_int(h.ip): fabric.leaf(h.leaf).name for h in fabric.hosts}


# --- per event ---------------------------------------------------------------------------

def flow_failover(tcp_df: pd.DataFrame, fabric, event: dict,
                  retrans: pd.DataFrame | None = None, t_restore: float | None = None
                  ) -> pd.DataFrame:
    """Per flow that used the failed spine at the event: last packet on it, first on
    another spine, the gap, and its segments lost (columns FLOW_COLUMNS, flows in key
    order; times relative to the event, seconds). ``t_restore``: when the failure ended
    (wall), None = never. A flow's row needs only its own connection's packets and
    retransmissions, so `tcp_df` may be any group of whole connections (EventFlows)."""
    return _flow_rows(tcp_df, fabric, event, retrans, t_restore).drop(columns=_KEY)


_KEY = ["_src", "_dst", "_sport", "_dport"]  # the flow key of each row, to merge parts
_TIMES = ["last_old_s", "first_new_s", "failover_s", "lost"]


def _no_flows(columns) -> pd.DataFrame:
    """An empty flow table whose times are float: concatenated with another event's rows
    it must leave them float (an untyped empty frame made the whole column object)."""
    return pd.DataFrame(columns=columns).astype({c: float for c in _TIMES})


def _flow_rows(tcp_df, fabric, event, retrans, t_restore) -> pd.DataFrame:
    """flow_failover's rows with each flow's key (the _KEY columns)."""
    from .pcap import ip_to_str

    spines, leaves, drain = failed_spines(event, fabric)
    t_ev = event.get("t")
    if not spines or t_ev is None or tcp_df is None or tcp_df.empty:
        return _no_flows(FLOW_COLUMNS + _KEY)
    end = np.inf if t_restore is None else float(t_restore)
    spine_map = spine_of_iface(fabric)
    data = tcp_df[(tcp_df["payload_len"] > 0)
                  & tcp_df["iface"].astype(str).isin(spine_map)].copy()
    if data.empty:
        return _no_flows(FLOW_COLUMNS + _KEY)
    data["spine"] = data["iface"].astype(str).map(spine_map)
    leaf_of = _host_leaf(fabric)
    data["src_leaf"] = data["src"].map(leaf_of)
    data["dst_leaf"] = data["dst"].map(leaf_of)
    if leaves is not None:
        data = data[data["src_leaf"].isin(leaves) | data["dst_leaf"].isin(leaves)]
    on_old = data["spine"].isin(spines)
    key = ["src", "dst", "sport", "dport"]
    before = data[on_old & (data["t"] >= t_ev - ACTIVE_WINDOW_S) & (data["t"] <= t_ev)]
    host_of = {int(k): h.name for k, h in
               ((ip, fabric.host_by_ip(ip_to_str(ip))) for ip in leaf_of) if h}
    rows = []
    for flow, _g in before.groupby(key, observed=True, sort=True):
        mine = data[(data["src"] == flow[0]) & (data["dst"] == flow[1])
                    & (data["sport"] == flow[2]) & (data["dport"] == flow[3])]
        old = mine[mine["spine"].isin(spines) & (mine["t"] >= t_ev - ACTIVE_WINDOW_S)
                   & (mine["t"] < end)]
        new = mine[~mine["spine"].isin(spines) & (mine["t"] > t_ev) & (mine["t"] < end)]
        last_old = float(old["t"].max())
        first_new = float(new["t"].min()) if len(new) else np.nan
        new_spine = str(new.sort_values("t")["spine"].iloc[0]) if len(new) else None
        lost = _lost(tcp_df, retrans, flow, t_ev - (drain or 0.0),
                     first_new if len(new) else min(end, last_old + ACTIVE_WINDOW_S))
        rows.append({"event": event.get("index"),
                     "flow": f"{ip_to_str(flow[0])}:{flow[2]}->{ip_to_str(flow[1])}:{flow[3]}",
                     "src_host": host_of.get(int(flow[0])), "dst_host": host_of.get(int(flow[1])),
                     "last_old_s": last_old - t_ev,
                     "first_new_s": first_new - t_ev if len(new) else np.nan,
                     "failover_s": first_new - last_old if len(new) else np.nan,
                     "new_spine": new_spine, "lost": lost,
                     **{k: int(v) for k, v in zip(_KEY, flow, strict=True)}})
    return pd.DataFrame(rows, columns=FLOW_COLUMNS + _KEY)


def _lost(tcp_df, retrans, flow, t_from: float, t_to: float) -> float:
    """Retransmissions of ``flow`` whose segment was first sent in [t_from, t_to): at
    its sender's capture, matched by time and IP id, the original = the earliest packet
    with the same sequence number there. NaN without a retransmission table."""
    if retrans is None:
        return np.nan
    if retrans.empty:
        return 0
    src, dst, sport, dport = (int(x) for x in flow)
    r = retrans[(retrans["src"] == src) & (retrans["dst"] == dst)
                & (retrans["sport"] == sport) & (retrans["dport"] == dport)]
    if r.empty:
        return 0
    pk = tcp_df[(tcp_df["src"] == src) & (tcp_df["dst"] == dst) & (tcp_df["sport"] == sport)
                & (tcp_df["dport"] == dport) & (tcp_df["payload_len"] > 0)]
    n = 0
    for iface, rg in r.groupby("iface", observed=True):
        at = pk[pk["iface"].astype(str) == str(iface)]
        first_sent = at.groupby("seq")["t"].min()
        sent = at.set_index(["t", "ip_id"])["seq"]
        sent = sent[~sent.index.duplicated()]
        for t, ip_id in zip(rg["t"], rg["ip_id"], strict=True):
            seq = sent.get((t, ip_id))
            if seq is None:
                continue
            t_orig = first_sent.get(seq)
            if t_orig is not None and t_from <= t_orig < t_to:
                n += 1
    return n


def controller_reaction(ctrl: pd.DataFrame, event: dict) -> dict:
    """detect_s, reaction_s, repaired_s of the first failover.csv row of the event's
    state (down/up) within DETECT_HORIZON_S after it; NaN each when there is none."""
    out = {"detect_s": np.nan, "reaction_s": np.nan, "repaired_s": np.nan}
    state = DOWN_ACTIONS.get(event.get("action"))
    t_ev = event.get("t")
    if state is None or t_ev is None or ctrl is None or ctrl.empty:
        return out
    rows = ctrl[(ctrl["state"] == state) & (ctrl["t_seen"] >= t_ev)
                & (ctrl["t_seen"] <= t_ev + DETECT_HORIZON_S)].sort_values("t_seen")
    if rows.empty:
        return out
    first = rows.iloc[0]
    return {"detect_s": float(first["t_seen"]) - t_ev, "reaction_s": float(first["reaction_s"]),
            "repaired_s": float(first["t_installed"]) - t_ev}


def restore_time(event: dict, later: list[dict], fabric=None) -> float | None:
    """When a down event's failure ended: its own undo (duration_s), or the first later
    up event on the same link (however either names it, with the fabric map) or switch;
    None if the run ended first."""
    ends = [event.get("t_undo")] if event.get("t_undo") and event.get("duration_s") else []
    up = {"link_down": "link_up", "switch_down": "switch_up"}.get(event.get("action"))
    for other in later:
        if other.get("action") == up and _same_target(other, event, fabric):
            ends.append(other.get("t"))
            break
    ends = [t for t in ends if t is not None]
    return min(ends) if ends else None


def _same_target(a: dict, b: dict, fabric=None) -> bool:
    pa, pb = a.get("params") or {}, b.get("params") or {}
    if "switch" in pa or "switch" in pb:
        return pa.get("switch") == pb.get("switch")
    return _link_nodes(pa.get("link"), fabric) == _link_nodes(pb.get("link"), fabric)


def _link_nodes(link, fabric) -> tuple | None:
    """A link as its sorted node pair: ``["sp1", "lf2"]`` or an interface of it."""
    if isinstance(link, str):
        e = fabric.link_of_iface(link) if fabric is not None else None
        return tuple(sorted((e.node, e.peer))) if e else (link,)
    return tuple(sorted(link)) if isinstance(link, list) else None


def spine_packets(tcp_df: pd.DataFrame | None, fabric) -> pd.DataFrame:
    """Data packets captured on each spine's links (spine_of_iface) per BIN_S of wall
    time: columns spine, bin (wall time // BIN_S), packets; empty bins left out, rows
    by spine then bin. Sums over groups of packets (EventFlows) to that of all."""
    cols = ["spine", "bin", "packets"]
    if tcp_df is None or tcp_df.empty or fabric is None:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "spine" else np.int64)
                             for c in cols})
    smap = spine_of_iface(fabric)
    iface = tcp_df["iface"].astype(str).to_numpy()
    keep = (tcp_df["payload_len"].to_numpy() > 0) & np.isin(iface, list(smap))
    out = pd.DataFrame({"spine": pd.Series(iface[keep]).map(smap).to_numpy(),
                        "bin": (tcp_df["t"].to_numpy()[keep] // BIN_S).astype(np.int64)})
    return out.groupby(["spine", "bin"]).size().rename("packets").reset_index()


class EventFlows:
    """Failover's reducer of the one pass over the captures (stages.Stage.reduce), fed
    one group of whole connections at a time (`add`): per down event, flow_failover's
    rows of the group's flows, and the group's spine_packets; merged as one pass over
    every packet gives them (`flows`, `spine_packets`). Holds a row per flow and event
    and a count per spine and BIN_S, never the packets."""

    def __init__(self, rows: list[dict], fabric):
        self.fabric, self.packets = fabric, 0
        self._down = {}  # position in `rows` -> (event, when its failure ended)
        for i, ev in enumerate(rows):
            spines = failed_spines(ev, fabric)[0] if fabric is not None else set()
            if spines and DOWN_ACTIONS.get(ev.get("action")) == "down":
                self._down[i] = (ev, restore_time(ev, rows[i + 1:], fabric))
        self._flows: dict[int, list] = {i: [] for i in self._down}
        self._spine: list[pd.DataFrame] = []

    @classmethod
    def of_run(cls, run_dir, fabric, _manifest=None) -> EventFlows | None:
        """The reducer of a run's events (events.jsonl); None: the run has none."""
        if not (Path(run_dir) / EVENTS_FILE).exists():
            return None
        return cls(read_event_rows(run_dir), fabric)

    def add(self, packets, _flows=None, _flow_summary=None, retrans=None) -> pd.DataFrame:
        """One group of whole connections: its packets (tcp.py's table) and their
        retransmissions (None: losses unknown)."""
        if packets is not None and len(packets):
            self.packets += len(packets)
            for i, (ev, t_restore) in self._down.items():
                self._flows[i].append(_flow_rows(packets, self.fabric, ev, retrans,
                                                 t_restore))
            self._spine.append(spine_packets(packets, self.fabric))
        return pd.DataFrame(columns=["flow"])

    def flows(self, i: int) -> pd.DataFrame | None:
        """flow_failover of the i-th event (in read_event_rows order) on every packet
        added; None when it takes no spine out or no packet was added."""
        if i not in self._down or not self.packets:
            return None
        parts = [p for p in self._flows[i] if len(p)]
        if not parts:
            return _no_flows(FLOW_COLUMNS)
        df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
        return (df.sort_values(_KEY, kind="stable").drop(columns=_KEY)
                .reset_index(drop=True))

    def spine_packets(self) -> pd.DataFrame:
        """spine_packets of every packet added."""
        parts = [p for p in self._spine if len(p)]
        if len(parts) <= 1:
            return parts[0] if parts else spine_packets(None, None)
        both = pd.concat(parts, ignore_index=True)
        return both.groupby(["spine", "bin"])["packets"].sum().reset_index()


def analyse_events(run_dir, tcp_df, fabric, retrans, ctrl=None,
                   reduced: EventFlows | None = None) -> dict:
    """{"events": events_table, "flows": per-flow failover of every down event,
    "summary": one row per event (SUMMARY_COLUMNS), "not_fired": rows, "spine_packets":
    spine_packets}, from the packet table `tcp_df` and its retransmissions, or from
    `reduced` (an EventFlows fed every group of connections of the run)."""
    rows = read_event_rows(run_dir)
    if reduced is None:
        reduced = EventFlows(rows, fabric)
        reduced.add(tcp_df, retrans=retrans)
    ctrl = load_controller(run_dir) if ctrl is None else ctrl
    flows, summary = [], []
    for i, ev in enumerate(rows):
        rec = {"event": ev.get("index"), "action": ev.get("action"),
               "target": target_text(ev.get("params") or {}), "t_rel_s": ev.get("t_rel_s"),
               **controller_reaction(ctrl, ev)}
        f = reduced.flows(i)
        if f is not None:
            flows.append(f)
            rec.update(flows_on_link=len(f), moved=int(f["first_new_s"].notna().sum()),
                       failover_median_s=float(f["failover_s"].median()) if len(f) else np.nan,
                       failover_max_s=float(f["failover_s"].max()) if len(f) else np.nan,
                       lost=float(f["lost"].sum()) if len(f) else 0.0)
        summary.append(rec)
    flows_df = pd.concat(flows, ignore_index=True) if flows else _no_flows(FLOW_COLUMNS)
    return {"events": events_table(run_dir), "flows": flows_df,
            "summary": pd.DataFrame(summary, columns=SUMMARY_COLUMNS),
            "not_fired": not_fired(run_dir), "spine_packets": reduced.spine_packets()}


# --- the report stage's compute (figure and section: failoverreport.py) -------------

def analyse(a) -> dict:
    """The report's events tables for an Analysis (analysis.report); {} without events.
    From what the one pass over the captures reduced (``a.captured["events"]``, an
    EventFlows: every packet of the run), else from ``a.tables["tcp"]``."""
    if not (Path(a.run_dir) / EVENTS_FILE).exists():
        return {}
    reduced = a.captured.get("events")
    if isinstance(reduced, Exception):
        raise reduced
    if reduced is not None:
        return analyse_events(a.run_dir, None, a.fabric, None, reduced=reduced)
    tcp_df = a.tables.get("tcp")
    return analyse_events(a.run_dir, tcp_df if tcp_df is not None and len(tcp_df) else None,
                          a.fabric, a.tables.get("retrans"))


def metrics(result: dict) -> list[dict]:
    """metrics.json's ``events``: the summary rows as plain values."""
    s = result.get("summary")
    if s is None or s.empty:
        return []
    return json.loads(s.to_json(orient="records"))
