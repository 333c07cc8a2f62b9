"""The hosts' TCP congestion control, and DCTCP where the kernel lacks it.

The spec names an algorithm (``topology.congestion_control``); ``resolve`` turns that
into what the hosts' sysctl gets. ``dctcp`` is the kernel's ``tcp_dctcp`` where it is
built in, otherwise the project's own BPF struct_ops (incastlab/bpf/dctcp.bpf.c),
registered under the name ``incast_dctcp`` so it can never clash with the kernel's.

A registered struct_ops is machine-wide state: the run records it in its state file
before registering (so a crash leaves a record) and clean_state unregisters it after
the run's processes, and with them the host namespaces that hold it, are gone.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

from incastlab import bpf

OUR_PREFIX = "incast_"       # every struct_ops of ours; clean-up touches no other
BPF_DCTCP = "incast_dctcp"   # the algorithm's name and its struct_ops map's name
BPF_OBJECT = "dctcp"         # incastlab/bpf/dctcp.bpf.c
BPF_BSS_MAP = "dctcp.bss"    # the object's globals (guard_trips, guard_last_value)
STATE_KIND = "struct_ops"    # the RunState list of what we registered
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
BTF = Path("/sys/kernel/btf/vmlinux")
NEEDS_ECN = frozenset({"dctcp"})  # algorithms that mark ECT and react to ECE


class CongestionUnavailable(RuntimeError):
    """The spec's algorithm cannot run here; the message names the field and the fix."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """What the hosts run for one spec value."""
    spec_name: str        # the spec's value, e.g. "dctcp"
    kernel_name: str      # what net.ipv4.tcp_congestion_control gets
    implementation: str   # "kernel" (built in) or "bpf" (ours, registered for the run)
    needs_ecn: bool       # hosts get net.ipv4.tcp_ecn=1

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _bpftool(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["bpftool", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def available() -> list[str]:
    """The algorithms the kernel has registered now (built in, modules, struct_ops)."""
    try:
        return AVAILABLE.read_text().split()
    except OSError:
        return []


def bpf_dctcp_problem() -> str | None:
    """Why our BPF DCTCP cannot be used here, or None when it can."""
    if shutil.which("bpftool") is None:
        return "bpftool is not installed (scripts/install.sh installs it)"
    if not BTF.exists():
        return f"this kernel has no BTF ({BTF}), which BPF struct_ops need"
    try:
        bpf.object_path(BPF_OBJECT)
    except bpf.BpfNotBuilt as exc:
        return str(exc)
    return None


def resolve(spec_name: str, kernel_algorithms: list[str],
            bpf_problem: str | None = None) -> Choice:
    """The implementation of spec_name given the kernel's algorithms (preflight's
    list) and, for dctcp, why the BPF build is unusable (None: usable).

    Raises CongestionUnavailable naming topology.congestion_control."""
    needs_ecn = spec_name in NEEDS_ECN
    if spec_name in kernel_algorithms:
        return Choice(spec_name, spec_name, "kernel", needs_ecn)
    if spec_name == "dctcp":
        if bpf_problem is None:
            return Choice(spec_name, BPF_DCTCP, "bpf", needs_ecn)
        raise CongestionUnavailable(
            "topology.congestion_control: 'dctcp' needs the kernel's tcp_dctcp (not in "
            f"this kernel: available {', '.join(kernel_algorithms) or 'none'}) or the "
            f"project's BPF DCTCP, which cannot run here: {bpf_problem}.")
    raise CongestionUnavailable(
        f"topology.congestion_control: {spec_name!r} is not available here; available: "
        f"{', '.join(kernel_algorithms) or 'none'}.")


def describe_dctcp(kernel_algorithms: list[str], bpf_problem: str | None) -> str:
    """One line for preflight: which DCTCP a run would get."""
    try:
        choice = resolve("dctcp", kernel_algorithms, bpf_problem)
    except CongestionUnavailable:
        return f"unavailable ({bpf_problem})"
    if choice.implementation == "kernel":
        return "the kernel's tcp_dctcp"
    return f"the project's BPF struct_ops {BPF_DCTCP} (incastlab/bpf/dctcp.bpf.c)"


def registered(name: str = BPF_DCTCP) -> bool:
    """True while the kernel lists name as an algorithm (registered, not merely a map
    still held by a dying namespace)."""
    return name in available()


def struct_ops_maps() -> list[str]:
    """Names of every struct_ops map the kernel still holds (registered or not yet
    freed); ours are the ones named BPF_DCTCP."""
    out = _bpftool(["-j", "struct_ops", "show"])
    if out.returncode != 0 or not out.stdout.strip():
        return []
    text = out.stdout.strip()
    try:
        rows = json.loads(text)
    except ValueError:  # some bpftool versions print one JSON object per map
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(rows, dict):
        rows = [rows]
    return [row.get("name", "") for row in rows]


def our_programs() -> list[str]:
    """Names of loaded BPF programs of our DCTCP (each op is named incast_dctcp_*)."""
    out = _bpftool(["-j", "prog", "show"])
    if out.returncode != 0 or not out.stdout.strip():
        return []
    return [p.get("name", "") for p in json.loads(out.stdout)
            if p.get("name", "").startswith(BPF_DCTCP)]


def register(state) -> None:
    """Register our BPF DCTCP for a run: recorded in state first, so that a crash
    between the two leaves a record for ``incastlab clean``. The caller holds the run
    lock, so an instance already registered is a crashed run's: it is replaced."""
    state.add(STATE_KIND, [BPF_DCTCP])
    if registered():
        unregister()
    obj = bpf.object_path(BPF_OBJECT)
    out = _bpftool(["struct_ops", "register", str(obj)])
    if out.returncode != 0 or not registered():
        raise CongestionUnavailable(
            f"topology.congestion_control: registering the BPF DCTCP ({obj}) failed: "
            f"{(out.stderr or out.stdout).strip() or 'not listed after bpftool register'}")


def unregister(name: str = BPF_DCTCP) -> bool:
    """Unregister name if it is registered; True if it was. Call it once the
    namespaces using it are gone: each one's default holds the map, which the kernel
    frees only after the last reference goes."""
    if not name.startswith(OUR_PREFIX) or not registered(name):
        return False
    _bpftool(["struct_ops", "unregister", "name", name])
    return not registered(name)


def guard_counters() -> dict | None:
    """The BPF DCTCP's guard counters ({"guard_trips": n, "guard_last_value": v}), or
    None when it is not loaded. Read before unregistering."""
    out = _bpftool(["-j", "map", "dump", "name", BPF_BSS_MAP])
    if out.returncode != 0:
        return None
    try:
        entries = json.loads(out.stdout)
        fields = entries[0]["formatted"]["value"][".bss"]
    except (ValueError, LookupError, TypeError):
        return None
    merged: dict = {}
    for field in fields:
        merged.update(field)
    return merged
