"""The project's own BPF programs, for what this machine kind's kernel lacks (tcp_dctcp,
RED's ECN marking). Sources are `<name>.bpf.c` here; scripts/build_bpf.sh (run by
scripts/install.sh) compiles them to `build/<name>.bpf.o`."""
from __future__ import annotations

from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
BUILD_DIR = SOURCE_DIR / "build"


class BpfNotBuilt(RuntimeError):
    """An object the run needs is missing or older than its source; the message says how
    to build it."""


def object_path(name: str) -> Path:
    """The built object of incastlab/bpf/<name>.bpf.c, checked to exist and be current."""
    source = SOURCE_DIR / f"{name}.bpf.c"
    obj = BUILD_DIR / f"{name}.bpf.o"
    if not source.is_file():
        raise ValueError(f"no BPF program named {name!r} in {SOURCE_DIR}")
    if not obj.is_file():
        raise BpfNotBuilt(f"the BPF program {name!r} is not built ({obj} is missing): "
                          "run `sudo bash scripts/install.sh` (or scripts/build_bpf.sh)")
    if obj.stat().st_mtime < source.stat().st_mtime:
        raise BpfNotBuilt(f"the BPF program {name!r} is older than its source: "
                          "run `sudo bash scripts/build_bpf.sh`")
    return obj
