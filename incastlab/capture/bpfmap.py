"""Read a pinned BPF map with the bpf(2) system call (no bpftool process per read)."""
from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

BPF_MAP_LOOKUP_ELEM = 1
BPF_OBJ_GET = 7
SYS_BPF = {"x86_64": 321, "aarch64": 280}

_libc = ctypes.CDLL(None, use_errno=True)


class _ObjGet(ctypes.Structure):
    _fields_ = [("pathname", ctypes.c_uint64), ("bpf_fd", ctypes.c_uint32),
                ("file_flags", ctypes.c_uint32), ("path_fd", ctypes.c_int32)]


class _Lookup(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("key", ctypes.c_uint64), ("value", ctypes.c_uint64),
                ("flags", ctypes.c_uint64)]


def _bpf(cmd: int, attr) -> int:
    number = SYS_BPF.get(platform.machine())
    if number is None:
        raise OSError(f"bpf(2): no syscall number known for {platform.machine()}")
    rc = _libc.syscall(number, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return rc


class PinnedMap:
    """A map pinned in bpffs, opened for lookups; a context manager that closes it."""

    def __init__(self, path: str | Path):
        name = ctypes.create_string_buffer(os.fsencode(str(path)))
        self.fd = _bpf(BPF_OBJ_GET, _ObjGet(pathname=ctypes.addressof(name)))

    def lookup(self, key: bytes, value_size: int) -> bytes:
        """The value stored under ``key`` (OSError ENOENT if none)."""
        k = ctypes.create_string_buffer(key, len(key))
        v = ctypes.create_string_buffer(value_size)
        _bpf(BPF_MAP_LOOKUP_ELEM, _Lookup(map_fd=self.fd, key=ctypes.addressof(k),
                                          value=ctypes.addressof(v)))
        return v.raw

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PinnedMap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
