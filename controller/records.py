"""What the controller writes into the run directory, and the port-load window.

Pure Python (no os-ken): CSV writers that flush every row (a crash or SIGKILL loses
nothing already observed), the atomic ready file, and per-port rates over the last
polling window that the adaptive policy routes on.
"""
from __future__ import annotations

import csv
import json
import os
import threading

from incastlab.topologies import runformat


class CsvLog:
    """Append rows to ``path`` with a header, flushing each row as it is written.
    Thread-safe: the stats poller and the event loop may both write."""

    def __init__(self, path: str, fields: list[str]):
        self.fields = fields
        self._lock = threading.Lock()
        self._file = open(path, "w", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._file, fieldnames=fields)
        self._writer.writeheader()
        self._file.flush()

    @classmethod
    def in_run(cls, out_dir: str, csv_file: runformat.CsvFile) -> CsvLog:
        """The run directory's ``csv_file`` (its name and columns from the contract)."""
        return cls(os.path.join(out_dir, csv_file.name), csv_file.fields)

    def write(self, row: dict) -> None:
        with self._lock:
            if self._file.closed:
                return
            self._writer.writerow(row)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


UNAVAILABLE = 2**64 - 1  # OpenFlow's "counter not available"
_COUNTERS = ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")


def port_stats_rows(t: float, switch: str, wired: dict, body) -> list[dict]:
    """The port_stats.csv rows of one port-stats reply (``body``: OFPPortStats entries)
    of switch ``switch`` at time ``t`` (epoch s), for the ports of ``wired`` (port ->
    its fabric-map egress) in port order. A port whose byte and packet counters are all
    unavailable (2**64 - 1: what Open vSwitch answers for a port being deleted, the
    last poll at teardown) has no row: it would read as 2**64 - 1 packets sent."""
    rows = []
    for st in sorted(body, key=lambda s: s.port_no):
        if st.port_no not in wired:
            continue  # the bridge's LOCAL port and anything not in the map
        if all(getattr(st, c) == UNAVAILABLE for c in _COUNTERS):
            continue
        rows.append({"t": f"{t:.6f}", "switch": switch, "port": st.port_no,
                     "peer": wired[st.port_no].peer, "tx_bytes": st.tx_bytes,
                     "rx_bytes": st.rx_bytes, "tx_packets": st.tx_packets,
                     "rx_packets": st.rx_packets, "tx_dropped": st.tx_dropped})
    return rows


def write_ready(out_dir: str, dpids: list[int], t: float) -> str:
    """Write ``controller_ready.json`` atomically (temp file + rename), so the
    runner polling for it never reads half a file. Returns its path."""
    path = os.path.join(out_dir, runformat.CONTROLLER_READY)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"switches": sorted(dpids), "t": t}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


class PortLoad:
    """Transmit rate of each (dpid, port) over the last polling window.

    ``update`` takes cumulative tx byte counters as the switch reports them;
    ``utilisation`` divides the last window's rate by the link capacity (Mbit/s, from
    fabric.json, not from OVS: OVS reports the veth's nominal 10 Gbit/s, not the
    emulated rate). Thread-safe.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._last: dict[tuple[int, int], tuple[float, int]] = {}
        self._rate: dict[tuple[int, int], float] = {}  # bit/s

    def update(self, dpid: int, port: int, t: float, tx_bytes: int) -> None:
        key = (dpid, port)
        with self._lock:
            prev = self._last.get(key)
            self._last[key] = (t, tx_bytes)
            if prev and t > prev[0] and tx_bytes >= prev[1]:
                self._rate[key] = 8.0 * (tx_bytes - prev[1]) / (t - prev[0])

    def rate_bps(self, dpid: int, port: int) -> float:
        with self._lock:
            return self._rate.get((dpid, port), 0.0)

    def utilisation(self, capacities: dict[tuple[int, int], float | None]
                    ) -> dict[tuple[int, int], float]:
        """(dpid, port) -> fraction of capacity used in the last window, for the
        links in ``capacities`` (Mbit/s; None or unknown capacity counts as 1 Gbit/s)."""
        with self._lock:
            return {key: self._rate.get(key, 0.0) / (1e6 * (cap or 1000.0))
                    for key, cap in capacities.items()}
