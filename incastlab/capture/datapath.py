"""The datapath's own drop counters, read when the workload starts and when it ends.

Open vSwitch loses packets in places no tc qdisc sees, and counts some of them itself:

- ``ss -0 -m -p -n``: ovs-vswitchd's AF_PACKET sockets, one bound to each switch port
  (``*:<port>``) that receives the port's packets, and one unbound (``[0]:*``) that
  sends them (incastlab/ovs_buffer.py). skmem's ``d`` is the socket's drops: packets the
  kernel had for ovs-vswitchd and threw away because it did not read them in time.
- ``ovs-appctl dpctl/show -s``: the datapath's ``lookups: ... lost:`` (upcalls lost) and
  every port's RX/TX ``dropped`` and ``errors`` (the kernel's counters of the veth plus
  what OVS counted itself), read live (the Interface table in ovsdb lags by up to 5 s).
- ``ovs-appctl coverage/show``: the datapath's drop reasons (``datapath_drop_*``,
  ``drop_action_*``), machine-wide totals (one run at a time holds the run lock).

``snapshot()`` reads all three (pure parsers below, unit-tested on captured output);
``delta(before, after, ports)`` is what the workload's window added, which the runner puts
into the manifest (``fidelity.counters``) for analysis/fidelity.py to judge.
"""
from __future__ import annotations

import re
import subprocess

# A counter that is not a loss: it rises with every packet-out a controller sends
# (measured equal to ofproto_packet_out here: the bring-up's ARP replies).
NOT_A_LOSS = frozenset({"datapath_drop_userspace_action_error"})
DROP_PREFIXES = ("datapath_drop_", "drop_action_")

_SOCKET = re.compile(r'^p_raw\s+\d+\s+\d+\s+(\S+)\s+\S+\s+users:\(\("ovs-vswitchd",'
                     r'.*skmem:\([^)]*\bd(\d+)\)')
_PORT = re.compile(r"^\s*port \d+: (\S+)")
_STATS = re.compile(r"^\s*(RX|TX) packets:\d+ errors:(\d+) dropped:(\d+)")
_LOST = re.compile(r"lookups: .*\blost:(\d+)")
_COVERAGE = re.compile(r"^(\w+)\s+.*total: (\d+)\s*$")


def parse_socket_drops(ss_output: str) -> dict:
    """{'receive': {port: drops}, 'send': drops or None} of ovs-vswitchd's packet sockets
    in ``ss -0 -m -p -n`` output (a bound socket ``*:<port>`` receives, ``[0]:*`` sends)."""
    receive, send = {}, None
    for line in ss_output.splitlines():
        found = _SOCKET.match(line)
        if not found:
            continue
        local, drops = found.group(1), int(found.group(2))
        if local.startswith("*:"):
            receive[local[2:]] = drops
        else:
            send = (send or 0) + drops
    return {"receive": receive, "send": send}


def parse_dpctl(text: str) -> dict:
    """{'lookups_lost': n or None, 'ports': {port: {rx_errors, rx_dropped, tx_errors,
    tx_dropped}}} from ``ovs-appctl dpctl/show -s``."""
    lost = _LOST.search(text)
    ports: dict = {}
    port = None
    for line in text.splitlines():
        named = _PORT.match(line)
        if named:
            port = named.group(1)
            ports[port] = {}
            continue
        stats = _STATS.match(line)
        if stats and port is not None:
            way = stats.group(1).lower()
            ports[port][f"{way}_errors"] = int(stats.group(2))
            ports[port][f"{way}_dropped"] = int(stats.group(3))
    return {"lookups_lost": int(lost.group(1)) if lost else None, "ports": ports}


def parse_coverage(text: str) -> dict[str, int]:
    """{counter: total} of the drop counters (``DROP_PREFIXES``) in ``coverage/show``
    output; counters never hit are not listed there (total 0)."""
    out = {}
    for line in text.splitlines():
        found = _COVERAGE.match(line.strip())
        if found and found.group(1).startswith(DROP_PREFIXES):
            out[found.group(1)] = int(found.group(2))
    return out


def _read(argv: list[str], errors: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        errors.append(f"{' '.join(argv)}: {exc}")
        return None
    if done.returncode != 0:
        errors.append(f"{' '.join(argv)}: exit {done.returncode} {done.stderr.strip()[:200]}")
        return None
    return done.stdout


def snapshot() -> dict:
    """The three sources now; a source that cannot be read is None, with why in
    ``errors``."""
    errors: list[str] = []
    ss = _read(["ss", "-0", "-m", "-p", "-n"], errors)
    dpctl = _read(["ovs-appctl", "dpctl/show", "-s"], errors)
    coverage = _read(["ovs-appctl", "coverage/show"], errors)
    return {"sockets": parse_socket_drops(ss) if ss is not None else None,
            "dpctl": parse_dpctl(dpctl) if dpctl is not None else None,
            "coverage": parse_coverage(coverage) if coverage is not None else None,
            "errors": errors}


def _grown(before: dict, after: dict) -> dict:
    """Per key, what a cumulative counter grew by (a key new in ``after`` counts whole);
    only the keys that grew."""
    out = {}
    for key, value in after.items():
        d = value - before.get(key, 0) if value is not None else 0
        if d > 0:
            out[key] = d
    return out


def delta(before: dict, after: dict, ports: list[str]) -> dict:
    """What the workload's window added, for the switch ``ports`` of this fabric:
    socket drops per port (receive) and of the send socket, each port's RX/TX drops and
    errors, upcalls lost, and the drop counters (without ``NOT_A_LOSS``). A source either
    snapshot could not read is listed in ``not_read``, with its error."""
    keep = set(ports)
    out: dict = {"socket_drops": None, "send_socket_drops": None, "port_drops": None,
                 "lookups_lost": None, "coverage_drops": None,
                 "not_read": list(before.get("errors") or []) + list(after.get("errors") or [])}
    sb, sa = before.get("sockets"), after.get("sockets")
    if sb is not None and sa is not None:
        out["socket_drops"] = _grown({p: v for p, v in sb["receive"].items() if p in keep},
                                     {p: v for p, v in sa["receive"].items() if p in keep})
        if sa["send"] is not None:
            out["send_socket_drops"] = max(0, sa["send"] - (sb["send"] or 0))
    db, da = before.get("dpctl"), after.get("dpctl")
    if db is not None and da is not None:
        out["port_drops"] = {p: grown for p, c in da["ports"].items() if p in keep
                             if (grown := _grown(db["ports"].get(p, {}), c))}
        if da["lookups_lost"] is not None:
            out["lookups_lost"] = max(0, da["lookups_lost"] - (db["lookups_lost"] or 0))
    cb, ca = before.get("coverage"), after.get("coverage")
    if cb is not None and ca is not None:
        out["coverage_drops"] = {k: v for k, v in _grown(cb, ca).items() if k not in NOT_A_LOSS}
    return out


class DatapathCounters:
    """The counters at the workload's start (``DatapathCounters(ports)``) and what had
    grown by its end (``finish()``)."""

    def __init__(self, ports: list[str]):
        self.ports = list(ports)
        self.before = snapshot()

    def finish(self) -> dict:
        return delta(self.before, snapshot(), self.ports)
