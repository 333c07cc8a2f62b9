"""Machine CPU use during a run (fidelity): a userspace-datapath fabric is only as good
as the CPU left to ovs-vswitchd. Sampled from /proc once per second in a thread."""
from __future__ import annotations

import os
import threading
import time

from incastlab.state import proc_stat

SATURATED_BUSY = 0.95      # machine busy fraction counted as saturated
VSWITCHD_BUSY = 0.90       # ovs-vswitchd is single-threaded: 90% of one core is its ceiling
SATURATED_SHARE = 0.20     # ... for at least this share of the samples


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields), idle


def _proc_ticks(pid: int) -> int | None:
    fields = proc_stat(pid)
    return int(fields[11]) + int(fields[12]) if fields else None  # utime + stime


def _vswitchd_pid() -> int | None:
    for path in ("/run/openvswitch/ovs-vswitchd.pid", "/var/run/openvswitch/ovs-vswitchd.pid"):
        try:
            return int(open(path).read().strip())
        except (OSError, ValueError):
            continue
    return None


class CpuMonitor:
    def __init__(self, interval_s: float = 1.0):
        self.interval_s = interval_s
        self.busy: list[float] = []
        self.vswitchd: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="cpu-monitor")
        self._hz = os.sysconf("SC_CLK_TCK")
        self._pid = _vswitchd_pid()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)

    def restart(self) -> None:
        """Forget the samples so far (e.g. the start-up phase before the workload)."""
        self.busy, self.vswitchd = [], []

    def _loop(self):
        total0, idle0 = _cpu_times()
        ovs0 = _proc_ticks(self._pid) if self._pid else None
        t0 = time.monotonic()
        while not self._stop.wait(self.interval_s):
            total1, idle1 = _cpu_times()
            ovs1 = _proc_ticks(self._pid) if self._pid else None
            t1 = time.monotonic()
            if total1 > total0:
                self.busy.append(1 - (idle1 - idle0) / (total1 - total0))
            if ovs0 is not None and ovs1 is not None:
                self.vswitchd.append((ovs1 - ovs0) / self._hz / (t1 - t0))
            total0, idle0, ovs0, t0 = total1, idle1, ovs1, t1

    def summary(self) -> dict:
        """Machine and ovs-vswitchd CPU use; ``saturated`` when either hit its ceiling
        often enough that the emulation may have lost packets no counter shows (the
        userspace datapath drops silently when ovs-vswitchd runs out of CPU)."""
        n = len(self.busy)
        busy = sum(b >= SATURATED_BUSY for b in self.busy)
        nv = len(self.vswitchd)
        vbusy = sum(v >= VSWITCHD_BUSY for v in self.vswitchd)
        machine = bool(n) and busy / n >= SATURATED_SHARE
        datapath = bool(nv) and vbusy / nv >= SATURATED_SHARE
        return {"cores": os.cpu_count(), "samples": n,
                "mean_busy": sum(self.busy) / n if n else None,
                "max_busy": max(self.busy) if n else None,
                "saturated_share": busy / n if n else None,
                "machine_saturated": machine,
                "vswitchd_saturated_share": vbusy / nv if nv else None,
                "datapath_saturated": datapath,
                "saturated": machine or datapath,
                "vswitchd_max_core_share": max(self.vswitchd) if self.vswitchd else None,
                "vswitchd_mean_core_share": (sum(self.vswitchd) / len(self.vswitchd)
                                             if self.vswitchd else None),
                "rule": f"saturated when the machine was >= {SATURATED_BUSY:.0%} busy, or "
                        f"ovs-vswitchd used >= {VSWITCHD_BUSY:.0%} of a core, in "
                        f">= {SATURATED_SHARE:.0%} of 1 s samples"}
