"""What a fabric watches while it comes up and runs, without Mininet: its switches'
controller connections in OVSDB (``ovs-vsctl``'s JSON, decoded) and broadcast storms on
the switch-to-switch links of a fabric with loops (:class:`StormWatch`). The public face
is :mod:`incastlab.fabric`.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

__all__ = ["STORM_PPS_FLOOR", "FabricError", "StormWatch", "ovs_value", "ovsdb_rows",
           "storm_limit_pps", "uuids"]


class FabricError(RuntimeError):
    """Bring-up failed; the message says which step and why."""


STORM_PPS_FLOOR = 300.0


def storm_limit_pps(hosts: int) -> float:
    """Packets per second on the switch-to-switch links (all of them together) above
    which a fabric whose hosts only ping is taken to be looping broadcasts.

    What readiness sends: one ping per ordered host pair and round, 2 packets each,
    each crossing at most 2 switch-to-switch links (leaf->spine, spine->leaf), ARP at
    most as much again: 8·H·(H−1) packets a round, and a round that does not end the
    wait lasts >= 1 s (ping's deadline). The limit is twice that, and never below
    STORM_PPS_FLOOR. Measured here with a learning switch on 2 spines x 2 leaves x 2
    hosts: 26 packets/s for a working 3-ping exchange on one spine, 2,500-4,000
    packets/s of storm on two (each looping packet crosses a link per controller round
    trip, about a millisecond)."""
    return max(STORM_PPS_FLOOR, 16.0 * hosts * (hosts - 1))


class StormWatch:
    """Watches the switch-to-switch links of a fabric with loops for flooding.

    ``check`` compares the links' transmit counters (/sys/class/net: the kernel's veth
    counters count what either OVS datapath sends) with the previous call's;
    ``check_quiet`` measures one more second with the hosts idle. Either raises
    FabricError when the rate is above ``limit_pps`` (storm_limit_pps)."""

    def __init__(self, ifaces: list[str], spines: int, limit_pps: float = STORM_PPS_FLOOR):
        self.ifaces = ifaces
        self.spines = spines
        self.limit_pps = limit_pps
        self.peak_pps = 0.0
        self._last = self._sample()

    def _sample(self) -> tuple[float, int]:
        total = 0
        for iface in self.ifaces:
            try:
                total += int(Path(f"/sys/class/net/{iface}/statistics/tx_packets").read_text())
            except (OSError, ValueError):
                pass  # an interface going away is teardown's business, not a storm
        return time.monotonic(), total

    def check(self) -> float:
        """Packets/s since the last call; FabricError above the limit."""
        (t0, n0), (t1, n1) = self._last, self._sample()
        self._last = (t1, n1)
        rate = (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0
        self.peak_pps = max(self.peak_pps, rate)
        if rate > self.limit_pps:
            raise FabricError(self.advice(f"{rate:.0f} packets/s circulate on the "
                                          "switch-to-switch links") + "; stopped")
        return rate

    def check_quiet(self, window_s: float = 1.0) -> float:
        self._last = self._sample()
        time.sleep(window_s)
        return self.check()

    def advice(self, what: str) -> str:
        return (f"{what} on a fabric with loops ({self.spines} spines): a flooding "
                "controller (a learning switch) sends broadcasts around the loops forever "
                "here. Flooding apps suit a star or a leaf-spine with one spine; on this "
                "fabric the app must install routes (see docs/controller.md)")


def ovsdb_rows(table: str, columns: str) -> list[dict]:
    """Rows of an OVSDB table as {column: value} (ovs-vsctl's JSON, values decoded)."""
    out = subprocess.run(["ovs-vsctl", "--format=json", f"--columns={columns}", "list", table],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    data = json.loads(out)
    return [{name: ovs_value(value) for name, value in zip(data["headings"], row,
                                                            strict=True)}
            for row in data["data"]]


def ovs_value(value):
    """An OVSDB JSON value decoded: a uuid's string, a set's list, a map's dict, an atom
    as it is."""
    # OVSDB JSON: ["uuid", "..."], ["set", [...]], ["map", [...]] or a plain atom
    if isinstance(value, list) and len(value) == 2 and value[0] in ("uuid", "set", "map"):
        kind, inner = value
        if kind == "uuid":
            return inner
        if kind == "set":
            return [ovs_value(v) for v in inner]
        return {ovs_value(k): ovs_value(v) for k, v in inner}
    return value


def uuids(value) -> list[str]:
    """The uuids of a decoded reference column: none, one, or a set of them."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
