"""Remove what crashed runs of ours left behind (``incastlab clean``), like ``mn -c``
but only ours: the bridges, interfaces, namespaces, processes, CPU-throttle cgroups and
BPF struct_ops (our DCTCP) recorded in our state files (see incastlab.state), and
preflight's probe namespaces whose creator died (the name carries its pid and start
time). Idempotent; repeats until nothing recorded remains."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time

from incastlab import bpffs, congestion, subnet_guard
from incastlab.hostevents import remove_cgroup
from incastlab.lock import RunLock
from incastlab.preflight import PROBE_NETNS_PREFIX
from incastlab.state import RunState, all_states, is_same_process


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def _kill_processes(processes: list[dict], grace_s: float = 2.0) -> list[str]:
    live = [p for p in processes if is_same_process(p["pid"], p["start"])]
    removed = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in live:
            if not is_same_process(p["pid"], p["start"]):
                continue
            try:
                # our children run in their own process group: end the whole group
                if os.getpgid(p["pid"]) == p["pid"]:
                    os.killpg(p["pid"], sig)
                else:
                    os.kill(p["pid"], sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(
                is_same_process(p["pid"], p["start"]) for p in live):
            time.sleep(0.05)
    for p in live:
        if not is_same_process(p["pid"], p["start"]):
            removed.append(f"process {p['pid']} ({p['what']})")
    return removed


def bridge_owner(name: str) -> str | None:
    """The incastlab state id a bridge was created under, or None (not ours / untagged)."""
    out = _run(["ovs-vsctl", "--timeout=5", "--if-exists", "get", "Bridge", name,
                "external_ids:incastlab-state"])
    owner = out.stdout.strip().strip('"')
    return owner if out.returncode == 0 and owner else None


def _port_of_foreign_bridge(iface: str, state: RunState) -> bool:
    """True when iface is a port of a bridge that this state did not create."""
    out = _run(["ovs-vsctl", "--timeout=5", "port-to-br", iface])
    bridge = out.stdout.strip()
    return out.returncode == 0 and bool(bridge) and bridge_owner(bridge) != state.id


def existing_bridges() -> set[str]:
    out = _run(["ovs-vsctl", "--timeout=5", "list-br"])
    return set(out.stdout.split()) if out.returncode == 0 else set()


def interface_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def clean_state(state: RunState) -> list[str]:
    """Remove everything one state file lists; return what was actually removed."""
    removed = _kill_processes(state.data["processes"])
    bridges = existing_bridges()
    for br in state.data["bridges"]:
        # a bridge of the same name that another run (or a stock `mn`) created is not ours
        if br in bridges and bridge_owner(br) == state.id:
            _run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", br])
            removed.append(f"bridge {br}")
    for name in state.data["interfaces"]:
        if interface_exists(name) and not _port_of_foreign_bridge(name, state):
            _run(["ip", "link", "delete", name])
            removed.append(f"interface {name}")
    for ns in state.data["netns"]:
        if os.path.exists(f"/run/netns/{ns}"):
            _run(["ip", "netns", "delete", ns])
            removed.append(f"namespace {ns}")
    for path in state.data.get(bpffs.STATE_KIND, []):  # ECN marker, path labeller
        if bpffs.unmount(path):
            removed.append(f"bpffs {path}")
    # after the processes: a cgroup can only go once nothing of ours is left inside
    for path in state.data.get("cgroups", []):
        if os.path.isdir(path) and remove_cgroup(path):
            removed.append(f"cgroup {path}")
    # last: a struct_ops goes once the host namespaces whose default it is are gone
    # (their processes, above); until then each namespace holds it
    for name in state.data.get(congestion.STATE_KIND, []):
        if congestion.unregister(name):
            removed.append(f"struct_ops {name}")
    return removed


def leftovers(state: RunState) -> list[str]:
    bridges = existing_bridges()
    left = [f"bridge {b}" for b in state.data["bridges"]
            if b in bridges and bridge_owner(b) == state.id]
    left += [f"interface {i}" for i in state.data["interfaces"] if interface_exists(i)]
    left += [f"process {p['pid']}" for p in state.data["processes"]
             if is_same_process(p["pid"], p["start"])]
    left += [f"cgroup {c}" for c in state.data.get("cgroups", []) if os.path.isdir(c)]
    left += [f"bpffs {m}" for m in state.data.get(bpffs.STATE_KIND, []) if os.path.exists(m)]
    left += [f"struct_ops {n}" for n in state.data.get(congestion.STATE_KIND, [])
             if congestion.registered(n)]
    return left


def orphan_probe_namespaces() -> list[str]:
    """Preflight's netem-probe namespaces whose creator (pid and start time in the name,
    see incastlab.preflight.probe_netns_name) is gone: a probe cut short by SIGKILL."""
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return []
    orphans = []
    for name in names:
        m = re.fullmatch(re.escape(PROBE_NETNS_PREFIX) + r"(\d+)-(\d+)-\d+", name)
        if m and not is_same_process(int(m.group(1)), int(m.group(2))):
            orphans.append(name)
    return orphans


def clean(include_live: bool = False, attempts: int = 3) -> tuple[list[str], list[str]]:
    """Clean every state whose owner is dead (or all, with include_live).

    Returns (removed, skipped): what was removed, and the live runs left alone.
    """
    removed, skipped = [], []
    for state in all_states():
        if state.owner_alive() and not include_live:
            skipped.append(f"run of pid {state.data['owner']['pid']} is still active "
                           f"({state.data.get('run_dir') or 'no run directory'})")
            continue
        for _ in range(attempts):
            removed += clean_state(state)
            if not leftovers(state):
                state.remove()
                break
    for ns in orphan_probe_namespaces():
        if _run(["ip", "netns", "delete", ns]).returncode == 0:
            removed.append(f"namespace {ns}")
    # the emulated subnet's guard route belongs to the live run, if one is left: none
    # may be recorded (a state directory pointed elsewhere) while a fabric still holds
    # the run lock (seen: a test's clean() removed a live run's route), so ask the lock
    # too; a run that starts adopts a crashed run's route and removes it at teardown
    if not skipped and RunLock().holder() is None and subnet_guard.remove():
        removed.append(f"route unreachable {subnet_guard.SUBNET}")
    return removed, skipped
