"""scripts/build_bpf.sh compiles incastlab/bpf/*.bpf.c with the installer's clang and
bpftool; incastlab.bpf.object_path finds the result or says how to build it."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from incastlab import bpf

REPO = Path(__file__).resolve().parents[1]
PROGRAM = """#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
SEC("tc") int probe(struct __sk_buff *skb) { return skb->len > 0 ? 0 : 2; }
char LICENSE[] SEC("license") = "GPL";
"""

needs_toolchain = pytest.mark.skipif(
    not (shutil.which("clang") and shutil.which("bpftool")
         and os.access("/sys/kernel/btf/vmlinux", os.R_OK)),
    reason="clang, bpftool or the kernel's BTF missing (scripts/install.sh installs them)")


def _tree(tmp_path: Path, source: str) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "build_bpf.sh", tmp_path / "scripts")
    (tmp_path / "incastlab" / "bpf").mkdir(parents=True)
    (tmp_path / "incastlab" / "bpf" / "probe.bpf.c").write_text(source)
    return tmp_path


def _build(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(tree / "scripts" / "build_bpf.sh")],
                          capture_output=True, text=True, timeout=300)


@needs_toolchain
def test_builds_a_program_once_and_only_rebuilds_what_changed(tmp_path):
    tree = _tree(tmp_path, PROGRAM)
    first = _build(tree)
    assert first.returncode == 0, first.stderr
    obj = tree / "incastlab" / "bpf" / "build" / "probe.bpf.o"
    assert "1 rebuilt" in first.stdout
    # an ELF object for the BPF machine (e_machine 247, EM_BPF)
    head = obj.read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 247
    again = _build(tree)
    assert again.returncode == 0 and "0 rebuilt" in again.stdout


@needs_toolchain
def test_a_program_that_does_not_compile_fails_the_build(tmp_path):
    tree = _tree(tmp_path, PROGRAM + "int broken = ;\n")
    result = _build(tree)
    assert result.returncode != 0
    assert "probe.bpf.c" in result.stderr
    assert not (tree / "incastlab" / "bpf" / "build" / "probe.bpf.o").exists()


def test_object_path_names_the_missing_build_and_the_command(tmp_path, monkeypatch):
    (tmp_path / "probe.bpf.c").write_text(PROGRAM)
    monkeypatch.setattr(bpf, "SOURCE_DIR", tmp_path)
    monkeypatch.setattr(bpf, "BUILD_DIR", tmp_path / "build")
    with pytest.raises(bpf.BpfNotBuilt, match="install.sh"):
        bpf.object_path("probe")
    (tmp_path / "build").mkdir()
    obj = tmp_path / "build" / "probe.bpf.o"
    obj.write_bytes(b"")
    os.utime(obj, (1, 1))  # older than its source
    with pytest.raises(bpf.BpfNotBuilt, match="older than its source"):
        bpf.object_path("probe")
    os.utime(obj, None)
    assert bpf.object_path("probe") == obj
    with pytest.raises(ValueError, match="no BPF program named 'nosuch'"):
        bpf.object_path("nosuch")
