"""Classic-pcap parser: bytes in, one row per captured frame out (vectorised NumPy).

Supported input
    Classic pcap ("libpcap") files with microsecond (0xa1b2c3d4) or nanosecond
    (0xa1b23c4d) magic, in either byte order. Link types: Ethernet (1, with up to two
    802.1Q/802.1ad VLAN tags), Linux cooked capture v1 (113) and v2 (276), raw IPv4
    (101, 228). pcapng files are rejected with a `PcapError` that says how to convert
    them (`editcap -F pcap in.pcapng out.pcap`).

What is kept
    Every frame becomes a row, also non-IPv4 and non-TCP frames, so row counts equal
    what tcpdump captured. For frames that are not IPv4 `proto` is 0 and the IP/L4
    columns are 0; `ethertype` says what they were. `hdr_ok` is True only when the
    whole IPv4 header and (for TCP/UDP) the fixed L4 header lie inside the captured
    bytes and the packet is not a non-first IP fragment; analyses use TCP rows with
    `hdr_ok` only. Sizes come from the IP header (`ip_len`, `payload_len`), never from
    the snap length, so header-only captures give true byte counts.

Columns (units)
    t            capture time, Unix epoch seconds (float64; ~0.2 us resolution)
    iface        capture interface (categorical; from the caller, e.g. "h1-eth0")
    frame_len    original frame length on the wire, bytes
    caplen       bytes captured
    ethertype    EtherType after VLAN tags (0 for raw-IP link types: 0x0800 assumed)
    vlan         outermost VLAN id, -1 when untagged
    src, dst     IPv4 addresses as uint32 (see `ip_to_str`)
    proto        IP protocol number (6 TCP, 17 UDP), 0 if not IPv4
    ip_len       IPv4 total length, bytes
    ip_id        IPv4 identification (tells a retransmission from a capture duplicate)
    ecn          IPv4 ECN field (RFC 3168): 0 not ECN-capable, 2 ECT(0), 1 ECT(1), 3 CE
    sport, dport L4 ports (TCP/UDP)
    seq, ack     TCP sequence and acknowledgement numbers (raw, uint32)
    flags        TCP flags byte (FIN 1, SYN 2, RST 4, PSH 8, ACK 16, URG 32, ECE 64, CWR 128)
    win          TCP window field (unscaled)
    payload_len  L4 payload bytes = ip_len - IHL - TCP data offset (UDP: - 8)
    sack         TCP SACK option (kind 5) present
    sack_hi      highest right edge among the captured SACK blocks (raw sequence number,
                 the one furthest above `ack`; 0 when no SACK block)
    sack_ok      TCP SACK-permitted option (kind 4) present (SYNs)
    tsval, tsecr TCP timestamp option values (0 when absent); `has_ts` says which
    hdr_ok       see above

Corrupt or truncated files
    A file cut inside its last record is parsed up to the last good record. Bytes that
    are not records in the middle of a file (a record header that makes no sense:
    caplen larger than the snap length and 256 KiB or than the frame length; inserted
    garbage) are skipped up to the next point where three plausible records chain. In
    both cases the result carries
    ``df.attrs['partial'] = True``, ``df.attrs['bytes_skipped']`` and
    ``df.attrs['reason']``. A file too short for its global header, with an unknown
    magic, or an unsupported link type raises `PcapError`.

Layout
    `pcaprecords.py` finds the records (the global header, record boundaries, resync
    past corrupt bytes; its docstring says how without a per-record loop),
    `pcapdissect.py` reads their headers into columns, and this module makes the
    DataFrame and keeps its Parquet cache.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .pcapdissect import OUT_DTYPES, parse_records
from .pcaprecords import (LINKTYPE_ETHERNET, LINKTYPE_IPV4, LINKTYPE_LINUX_SLL,
                          LINKTYPE_LINUX_SLL2, LINKTYPE_RAW, MAGIC_NS, MAGIC_PCAPNG,
                          MAGIC_US, MAX_CAPLEN, SUPPORTED_LINKTYPES, PcapError,
                          record_offsets)

__all__ = ["ACK", "CACHE_DIR", "COLUMNS", "CWR", "ECE", "ECN_CE", "FIN", "LINKTYPE_ETHERNET",
           "LINKTYPE_IPV4", "LINKTYPE_LINUX_SLL", "LINKTYPE_LINUX_SLL2", "LINKTYPE_RAW", "MAGIC_NS",
           "MAGIC_PCAPNG", "MAGIC_US", "MAX_CAPLEN", "PARSER_VERSION", "PSH", "RECORD_CHUNK",
           "RST", "SUPPORTED_LINKTYPES", "SYN", "PcapError", "ip_to_int", "ip_to_str",
           "parse_pcap_bytes", "read_pcap", "read_pcaps", "record_offsets"]

PARSER_VERSION = 6
RECORD_CHUNK = 1 << 20  # records parsed per step (bounds temporary memory)

FIN, SYN, RST, PSH, ACK, ECE, CWR = 1, 2, 4, 8, 16, 64, 128
ECN_CE = 3  # the ecn column's Congestion Experienced

COLUMNS = ["t", "iface", "frame_len", "caplen", "ethertype", "vlan", "src", "dst",
           "proto", "ip_len", "ip_id", "ecn", "sport", "dport", "seq", "ack", "flags", "win",
           "payload_len", "sack", "sack_hi", "sack_ok", "has_ts", "tsval", "tsecr", "hdr_ok"]


def ip_to_str(addr) -> str | list[str]:
    """Dotted-quad string(s) for IPv4 address(es) given as uint32."""
    if np.ndim(addr) == 0:
        a = int(addr)
        return f"{a >> 24 & 255}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}"
    return [ip_to_str(x) for x in np.asarray(addr)]


def ip_to_int(text: str) -> int:
    """uint32 value of a dotted-quad IPv4 address."""
    parts = [int(p) for p in text.split(".")]
    if len(parts) != 4 or not all(0 <= p <= 255 for p in parts):
        raise ValueError(f"not an IPv4 address: {text!r}")
    return parts[0] << 24 | parts[1] << 16 | parts[2] << 8 | parts[3]


def parse_pcap_bytes(buf, iface: str = "", fast: bool = True) -> pd.DataFrame:
    """Parse a classic pcap held in memory (bytes, mmap, memoryview) into a DataFrame.

    See the module docstring for the columns, their units and the partial-file rules.
    `fast=False` parses every frame with the general (any link type, VLAN, IP options)
    code instead of the fixed-offset fast path for plain Ethernet/IPv4/TCP; the result
    is the same (the tests check it), only slower.
    """
    if isinstance(buf, np.ndarray):
        buf = buf.tobytes()
    offsets, info = record_offsets(buf)
    m = len(offsets)
    # Parse in chunks of records so temporaries stay bounded; outputs preallocated.
    out = {name: np.empty(m, dt) for name, dt in OUT_DTYPES}
    for lo in range(0, m, RECORD_CHUNK):
        part = parse_records(buf, offsets[lo:lo + RECORD_CHUNK], info, fast)
        for name in out:
            out[name][lo:lo + len(part[name])] = part[name]
    cols = dict(out)
    cols["iface"] = pd.Categorical.from_codes(np.zeros(m, np.int8), categories=[iface])
    df = pd.DataFrame({k: cols[k] for k in COLUMNS}, copy=False)
    df.attrs.update({"partial": info["partial"], "bytes_skipped": info["bytes_skipped"],
                     "reason": info["reason"], "nano": info["nano"],
                     "snaplen": info["snaplen"], "linktype": info["linktype"],
                     "iface": iface})
    return df


# ---------------------------------------------------------------- files and cache

CACHE_DIR = "analysis-cache"


def _cache_path(path: Path) -> Path:
    """Where the Parquet cache of a pcap lives: never beside the raw data (the run's
    ``pcap/`` stays as captured), but in ``analysis-cache/`` of the run directory, or of
    the pcap's own folder for a pcap outside a run directory."""
    base = path.parent.parent if path.parent.name == "pcap" else path.parent
    return base / CACHE_DIR / (path.name + ".parquet")


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": str(st.st_size), "mtime_ns": str(st.st_mtime_ns),
            "parser_version": str(PARSER_VERSION)}


def read_pcap(path, iface: str | None = None, cache: bool = True) -> pd.DataFrame:
    """Parse the classic pcap at `path` (see `parse_pcap_bytes`), with a Parquet cache.

    `iface` defaults to the file's stem (`pcap/h1-eth0.pcap` -> "h1-eth0"). The cache
    is `<path>.parquet` next to the capture; it is used only when the pcap's size and
    mtime and the parser version match those stored in it, and it is skipped quietly
    when the directory is not writable.
    """
    path = Path(path)
    iface = path.stem if iface is None else iface
    cpath = _cache_path(path)
    stamp = _stamp(path)
    if cache and cpath.exists():
        try:
            import pyarrow.parquet as pq
            meta = pq.read_schema(cpath).metadata or {}
            stored = {k.decode(): v.decode() for k, v in meta.items()
                      if k.startswith(b"incastlab.")}
            if all(stored.get("incastlab." + k) == v for k, v in stamp.items()) \
                    and stored.get("incastlab.iface") == iface:
                df = pd.read_parquet(cpath)
                df.attrs.update({"partial": stored.get("incastlab.partial") == "True",
                                 "bytes_skipped": int(stored.get("incastlab.bytes_skipped", 0)),
                                 "reason": stored.get("incastlab.reason", ""),
                                 "iface": iface, "cached": True})
                return df
        except Exception:  # a damaged cache is just a cache miss
            pass
    if path.stat().st_size == 0:
        raise PcapError(f"{path}: empty file")
    error = None
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            df = parse_pcap_bytes(mm, iface=iface)
        except PcapError as exc:
            error = f"{path}: {exc}"
        try:
            mm.close()
        except BufferError:  # a view is still referenced; the mapping goes with it
            pass
    if error:
        raise PcapError(error)
    df.attrs["cached"] = False
    if cache:
        _write_cache(df, cpath, stamp, iface)
    return df


def _write_cache(df, cpath: Path, stamp: dict, iface: str) -> None:
    """Write the Parquet cache atomically; any failure (read-only run directory, full
    disk) just means no cache."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    tmp = cpath.with_name(cpath.name + f".tmp{os.getpid()}")
    try:
        cpath.parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pandas(df, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        extra = dict(stamp, iface=iface, partial=str(df.attrs.get("partial", False)),
                     bytes_skipped=str(df.attrs.get("bytes_skipped", 0)),
                     reason=df.attrs.get("reason", ""))
        meta.update({f"incastlab.{k}".encode(): str(v).encode() for k, v in extra.items()})
        pq.write_table(table.replace_schema_metadata(meta), tmp, compression="zstd")
        os.replace(tmp, cpath)
    except Exception:  # noqa: BLE001 - the cache is optional
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def read_pcaps(pcap_dir, cache: bool = True) -> dict[str, pd.DataFrame]:
    """Every `*.pcap` in `pcap_dir`, parsed, keyed by interface name (file stem)."""
    pcap_dir = Path(pcap_dir)
    if not pcap_dir.is_dir():
        return {}
    return {p.stem: read_pcap(p, cache=cache) for p in sorted(pcap_dir.glob("*.pcap"))}
