"""A run's private bpffs and tc attachments of our BPF programs (incastlab/bpf/), shared
by the ECN marker (incastlab.ecn) and the path labeller (incastlab.pathlabel).

Each user mounts its own bpffs at ``BPF_ROOT/<name>``, recorded in the run's state
(``bpf_mounts``) before it is mounted: unmounting it (clean_state, also for a crashed
run's state) releases the pinned programs and maps once no tc filter holds them, and
the filters go with the fabric's interfaces and namespaces.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from incastlab import bpf

BPF_ROOT = Path(os.environ.get("INCASTLAB_BPF_DIR", "/run/incastlab/bpf"))
STATE_KIND = "bpf_mounts"


class BpfError(RuntimeError):
    """A BPF set-up step failed (the message says which command and why)."""


def run(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if out.returncode != 0:
        raise BpfError(f"{' '.join(argv)} failed: {(out.stderr or out.stdout).strip()}")
    return out.stdout


def node_run(node, argv: list[str]) -> str:
    """argv in a Mininet node's network namespace, in the root's mount namespace: a
    host's shell has its own (mnexec remounts /sys there, and our bpffs, mounted later,
    is not in it), so enter only its network namespace (nsenter --net), as a switch,
    which lives in the root namespace, needs nothing entered."""
    if getattr(node, "inNamespace", False):
        argv = ["nsenter", f"--net=/proc/{node.pid}/ns/net", *argv]
    try:
        return run(argv)
    except BpfError as exc:
        raise BpfError(f"on {node.name}: {exc}") from None


def _hex(data: bytes) -> str:
    return " ".join(f"{b:02x}" for b in data)


def update_commands(maps: Path, entries: list[tuple[str, bytes, bytes]]) -> str:
    """A ``bpftool batch`` file that writes (map, key, value) entries (pure)."""
    return "".join(f"map update pinned {shlex.quote(str(maps / name))} key hex {_hex(k)} "
                   f"value hex {_hex(v)}\n" for name, k, v in entries)


def unmount(path: str | Path) -> bool:
    """Unmount our bpffs at ``path`` (releasing its programs and maps) and remove the
    directory; True if something was there. Idempotent."""
    path = Path(path)
    found = False
    if os.path.ismount(path):
        subprocess.run(["umount", str(path)], capture_output=True, timeout=30, check=False)
        found = True
    try:
        path.rmdir()
        found = True
    except OSError:
        pass
    return found


class PinnedObject:
    """One built object of incastlab/bpf/ loaded into a private bpffs of the run:
    programs under ``prog/``, maps under ``maps/``. ``load`` records the mount in the
    run's state before mounting; ``unload`` (or clean_state) unmounts it."""

    def __init__(self, object_name: str, pin_dir: Path):
        self.object_name = object_name
        self.pin_dir = pin_dir

    def program(self, name: str) -> Path:
        return self.pin_dir / "prog" / name

    def map(self, name: str) -> Path:
        return self.pin_dir / "maps" / name

    def load(self, state) -> None:
        obj = bpf.object_path(self.object_name)
        state.add(STATE_KIND, [str(self.pin_dir)])  # recorded before it exists
        self.pin_dir.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "bpf", "bpf", str(self.pin_dir)])
        run(["bpftool", "prog", "loadall", str(obj), str(self.pin_dir / "prog"),
             "pinmaps", str(self.pin_dir / "maps")])

    def write(self, entries: list[tuple[str, bytes, bytes]]) -> None:
        """Write (map name, key, value) entries in one bpftool batch."""
        batch = self.pin_dir.parent / f"{self.pin_dir.name}.batch"
        batch.write_text(update_commands(self.pin_dir / "maps", entries))
        try:
            run(["bpftool", "batch", "file", str(batch)])
        finally:
            batch.unlink(missing_ok=True)

    def attach(self, node, iface: str, hook: str, program: str) -> None:
        """The pinned ``program`` on ``iface``'s clsact ``hook`` (ingress or egress) in
        ``node``'s namespace (direct action, prio 1, handle 1)."""
        node_run(node, ["tc", "qdisc", "replace", "dev", iface, "clsact"])
        node_run(node, ["tc", "filter", "replace", "dev", iface, hook, "prio", "1",
                        "handle", "1", "bpf", "da", "pinned", str(self.program(program))])

    def unload(self) -> None:
        unmount(self.pin_dir)
