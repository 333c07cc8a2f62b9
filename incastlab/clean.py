"""Remove what crashed runs of ours left behind (``incastlab clean``), like ``mn -c``
but only ours: the bridges, interfaces, namespaces and processes recorded in our state
files (see incastlab.state). Idempotent; repeats until nothing recorded remains."""
from __future__ import annotations

import os
import signal
import subprocess
import time

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
        if br in bridges:
            _run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", br])
            removed.append(f"bridge {br}")
    for name in state.data["interfaces"]:
        if interface_exists(name):
            _run(["ip", "link", "delete", name])
            removed.append(f"interface {name}")
    for ns in state.data["netns"]:
        if os.path.exists(f"/run/netns/{ns}"):
            _run(["ip", "netns", "delete", ns])
            removed.append(f"namespace {ns}")
    return removed


def leftovers(state: RunState) -> list[str]:
    bridges = existing_bridges()
    left = [f"bridge {b}" for b in state.data["bridges"] if b in bridges]
    left += [f"interface {i}" for i in state.data["interfaces"] if interface_exists(i)]
    left += [f"process {p['pid']}" for p in state.data["processes"]
             if is_same_process(p["pid"], p["start"])]
    return left


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
    return removed, skipped
