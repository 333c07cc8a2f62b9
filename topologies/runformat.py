"""The run directory's contract: its file names, the columns of its CSV files and their
units, and its format version (docs/run-directory.md describes each file).

The one seam between the halves: the writers (the queue sampler, the controller's
records, the apps' JSON-lines log, the runner) and the readers (the analysis) import
these declarations, so a column renamed on one side cannot go unnoticed on the other.
It lives beside the fabric map, the other file every half reads, and imports nothing but
the standard library: the apps, which run inside emulated hosts, may import it.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FORMAT_VERSION", "Column", "CsvFile", "QUEUES", "PORT_STATS", "FLOW_PATHS",
           "FAILOVER", "ECN_COUNTERS", "ECN_MARKS", "CSV_FILES", "worker_log", "counters_file"]

FORMAT_VERSION = 1

SPEC = "spec.toml"
MANIFEST = "manifest.json"
FABRIC = "fabric.json"
PCAP_DIR = "pcap"                         # pcap/<iface>.pcap, one classic pcap each
COUNTERS_DIR = "counters"                 # counters/<host>.<phase>.json, raw nstat JSON
WORKERS_DIR = "workers"                   # workers/<rank>.jsonl, the apps' event logs
CONTROLLER_LOG = "controller.log"
CONTROLLER_READY = "controller_ready.json"
EVENTS = "events.jsonl"                   # the event scheduler's log ([[events]])
JOBS_DIR = "jobs"                         # jobs/job-<i>/ for a spec with [[jobs]]
COUNTER_PHASES = ("before", "after")


@dataclass(frozen=True)
class Column:
    """One CSV column: its name, unit ("" for a name or a label) and meaning."""

    name: str
    unit: str
    meaning: str
    numeric: bool = False


@dataclass(frozen=True)
class CsvFile:
    """A CSV file of the run: its name, who writes it, and its columns in order."""

    name: str
    writer: str
    columns: tuple[Column, ...]

    @property
    def fields(self) -> list[str]:
        """The header line's names, in order."""
        return [c.name for c in self.columns]

    @property
    def numeric(self) -> tuple[str, ...]:
        """The columns a reader parses as numbers (a line where one is not is damaged)."""
        return tuple(c.name for c in self.columns if c.numeric)


def _t(meaning: str = "time of the sample") -> Column:
    return Column("t", "s", f"{meaning} (Unix epoch)", numeric=True)


def _count(name: str, meaning: str, unit: str = "packets", numeric: bool = True) -> Column:
    return Column(name, unit, meaning, numeric=numeric)


QUEUES = CsvFile("queues.csv", "queue sampler (incastlab.capture.queues)", (
    _t(), Column("switch", "", "switch name"),
    Column("port", "", "OpenFlow port number (-1: not a switch port)", numeric=True),
    Column("iface", "", "interface name, <switch>-eth<port>"),
    _count("backlog_bytes", "bytes queued at the sample", "bytes"),
    _count("backlog_pkts", "packets queued at the sample"),
    _count("drops", "packets the queue dropped, cumulative (tc -s)"),
    _count("overlimits", "times the shaper held a packet back, cumulative"),
    _count("sent_bytes", "bytes sent, cumulative", "bytes"),
    _count("sent_pkts", "packets sent, cumulative"),
    _count("requeues", "packets requeued, cumulative"),
))
# Queue meta: the sampler's achieved interval, written when it stops.
QUEUES_META = QUEUES.name + ".meta.json"

PORT_STATS = CsvFile("port_stats.csv", "controller (OpenFlow port statistics)", (
    _t(), Column("switch", "", "switch name"),
    Column("port", "", "OpenFlow port number", numeric=True),
    Column("peer", "", "the node on the port's other end"),
    _count("tx_bytes", "bytes sent, cumulative", "bytes"),
    _count("rx_bytes", "bytes received, cumulative", "bytes"),
    _count("tx_packets", "packets sent, cumulative"),
    _count("rx_packets", "packets received, cumulative"),
    # read as text: a switch may report no value (OFPPS counters unsupported)
    _count("tx_dropped", "packets dropped on send, cumulative", numeric=False),
))

FLOW_PATHS = CsvFile("flow_paths.csv", "controller (one row per placement)", (
    _t("time of the placement"), Column("src_ip", "", "source address"),
    Column("dst_ip", "", "destination address"),
    Column("proto", "", "IP protocol number (blank: every protocol)"),
    Column("src_port", "", "source port (blank: every port)"),
    Column("dst_port", "", "destination port (blank: every port)"),
    Column("spine", "", "the spine the flow was placed on"),
    Column("policy", "", "the routing policy that placed it"),
))

FAILOVER = CsvFile("failover.csv", "controller (one row per change of a link's liveness)", (
    Column("t_seen", "s", "arrival of the port-status (Unix epoch)", numeric=True),
    Column("switch", "", "switch that reported it"),
    Column("port", "", "OpenFlow port number", numeric=True),
    Column("iface", "", "interface name"), Column("peer", "", "the node on the other end"),
    Column("state", "", "up or down"), Column("policy", "", "routing policy"),
    _count("switches", "switches updated", ""),
    _count("flows_moved", "reactive placements forgotten", "flows"),
    Column("t_installed", "s", "the last switch's barrier reply after the new flows",
           numeric=True),
    Column("reaction_s", "s", "t_installed - t_seen", numeric=True),
))

ECN_COUNTERS = CsvFile("ecn.csv", "ECN marker sampler (incastlab.capture.ecn_sampler)", (
    _t(), Column("switch", "", "switch name"),
    Column("port", "", "OpenFlow port number", numeric=True),
    Column("iface", "", "interface name, <switch>-eth<port>"),
    _count("in_pkts", "packets that entered the queue (egress hook), cumulative"),
    _count("in_bytes", "bytes that entered the queue, cumulative", "bytes"),
    _count("out_pkts", "packets that left it (the peer's ingress hook), cumulative"),
    _count("out_bytes", "bytes that left it, cumulative", "bytes"),
    _count("marks", "ECT packets this port set to CE, cumulative"),
    _count("ce_arrived", "packets already CE on arrival (marked upstream), cumulative"),
    _count("not_ect_over", "non-ECT packets that arrived above the threshold, cumulative"),
    _count("full", "packets that arrived at a full queue (it drops them), cumulative"),
))

# tables/ecn_marks.csv (analysis): marks per port per second since the run's start
ECN_MARKS = CsvFile("ecn_marks.csv", "analysis (analysis/ecn.py, from ecn.csv)", (
    Column("iface", "", "switch egress interface"),
    Column("second", "s", "whole seconds since the run's start: the row covers "
           "[second, second + 1)", numeric=True),
    _count("marks", "CE marks set in that second"),
    _count("ce_arrived", "packets already CE on arrival in that second"),
    _count("full", "packets that arrived at a full queue in that second"),
))

CSV_FILES = (QUEUES, PORT_STATS, FLOW_PATHS, FAILOVER, ECN_COUNTERS)


def worker_log(rank: int | str) -> str:
    """The file name of one rank's event log inside a workers/ directory."""
    return f"{rank}.jsonl"


def counters_file(host: str, phase: str) -> str:
    """The file name of one host's kernel counters, taken ``before`` or ``after`` the job."""
    if phase not in COUNTER_PHASES:
        raise ValueError(f"phase must be one of {', '.join(COUNTER_PHASES)}, got {phase!r}")
    return f"{host}.{phase}.json"
