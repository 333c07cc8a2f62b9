"""Packet captures: one tcpdump per interface, header-only, one classic pcap each.

A capture runs inside the namespace of the node that owns the interface (a host for
``h3-eth0``, the root namespace for switch ports such as ``sp1-eth2``). tcpdump's own
count of packets the kernel dropped is read when it stops: a capture that lost packets
is flagged in the manifest, never silently trusted.
"""
from __future__ import annotations

import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_STAT = {"captured": r"(\d+) packets? captured", "received": r"(\d+) packets? received by filter",
         "dropped_by_kernel": r"(\d+) packets? dropped by kernel",
         "dropped_by_interface": r"(\d+) packets? dropped by interface"}


def parse_tcpdump_stats(stderr: str) -> dict[str, int | None]:
    """The counters tcpdump prints on exit (pure; None where a line is missing)."""
    out = {}
    for key, pattern in _STAT.items():
        m = re.search(pattern, stderr)
        out[key] = int(m.group(1)) if m else None
    return out


def tcpdump_argv(iface: str, path: Path, snaplen: int) -> list[str]:
    # -Z root: keep root so it can write into the run directory; -U: flush per packet
    # so a run that is cut short keeps its packets; -n: no name lookups, ever.
    return ["tcpdump", "-i", iface, "-s", str(snaplen), "-w", str(path), "-U", "-n",
            "-Z", "root", "--immediate-mode"]


@dataclass
class Capture:
    iface: str
    path: Path
    proc: subprocess.Popen
    log: Path

    def stop(self, timeout: float = 10.0) -> dict:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        stats = parse_tcpdump_stats(self.log.read_text(errors="replace"))
        stats["exit_status"] = self.proc.returncode
        stats["file"] = str(self.path.name)
        return stats


def start_captures(fabric, ifaces: list[str], pcap_dir: Path, snaplen: int,
                   deadline_s: float = 10.0) -> list[Capture]:
    """Start tcpdump on every interface and wait until each says it is listening."""
    pcap_dir.mkdir(parents=True, exist_ok=True)
    captures = []
    for iface in ifaces:
        node = iface.split("-eth")[0]
        path = pcap_dir / f"{iface}.pcap"
        log = pcap_dir / f"{iface}.tcpdump.log"
        with open(log, "w") as err:
            proc = fabric.popen(node, tcpdump_argv(iface, path, snaplen), f"tcpdump {iface}",
                                stdout=subprocess.DEVNULL, stderr=err)
        captures.append(Capture(iface, path, proc, log))
    deadline = time.monotonic() + deadline_s
    for cap in captures:
        while "listening on" not in cap.log.read_text(errors="replace"):
            if cap.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tcpdump on {cap.iface} did not start: "
                                   f"{cap.log.read_text(errors='replace').strip()}")
            time.sleep(0.05)
    return captures
