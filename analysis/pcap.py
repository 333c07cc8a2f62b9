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

Speed
    Record boundaries are found without a per-record Python loop: every position
    whose two high timestamp bytes equal those of the first record is a candidate
    record start; candidates that fail plausibility checks are dropped; the result is
    accepted only if it forms one exact chain (each start + 16 + caplen is the next
    start). Where it does not (e.g. a capture spanning an 18-hour timestamp boundary,
    or a corrupt region) the parser walks record by record past that point and tries
    the fast path again, so the answer is always the exact record chain.
"""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import numpy as np
import pandas as pd

PARSER_VERSION = 5

MAGIC_US = 0xA1B2C3D4
MAGIC_NS = 0xA1B23C4D
MAGIC_PCAPNG = 0x0A0D0D0A

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_LINUX_SLL2 = 276
SUPPORTED_LINKTYPES = (LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL,
                       LINKTYPE_IPV4, LINKTYPE_LINUX_SLL2)

MAX_CAPLEN = 262144  # tcpdump's own ceiling for a record
CHUNK = 1 << 24      # bytes compared per step when looking for record starts

FIN, SYN, RST, PSH, ACK = 1, 2, 4, 8, 16

COLUMNS = ["t", "iface", "frame_len", "caplen", "ethertype", "vlan", "src", "dst",
           "proto", "ip_len", "ip_id", "sport", "dport", "seq", "ack", "flags", "win",
           "payload_len", "sack", "sack_hi", "sack_ok", "has_ts", "tsval", "tsecr", "hdr_ok"]


class PcapError(ValueError):
    """The input is not a classic pcap this parser can read."""


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


def _global_header(a: np.ndarray):
    if len(a) < 24:
        raise PcapError(f"too short for a pcap global header ({len(a)} bytes < 24)")
    raw = a[:4].tobytes()
    le = struct.unpack("<I", raw)[0]
    be = struct.unpack(">I", raw)[0]
    if le == MAGIC_PCAPNG:
        raise PcapError("pcapng is not supported; convert it with "
                        "`editcap -F pcap in.pcapng out.pcap` or capture with "
                        "`tcpdump -w` (classic pcap)")
    for endian, value in (("<", le), (">", be)):
        if value in (MAGIC_US, MAGIC_NS):
            nano = value == MAGIC_NS
            _, _, _, _, snaplen, linktype = struct.unpack(endian + "HHiIII", a[4:24].tobytes())
            linktype &= 0x0FFFFFFF  # upper bits carry FCS info in newer files
            if linktype not in SUPPORTED_LINKTYPES:
                raise PcapError(f"unsupported link type {linktype} "
                                f"(supported: {SUPPORTED_LINKTYPES})")
            return endian, nano, snaplen, linktype
    raise PcapError(f"not a classic pcap file (magic {raw.hex()})")


def _views(buf, n: int, endian: str):
    """Unaligned uint16/uint32 views starting at every byte (stride 1)."""
    def view(dtype):
        width = np.dtype(dtype).itemsize
        return np.ndarray(shape=(max(n - width + 1, 0),), dtype=dtype, buffer=buf,
                          offset=0, strides=(1,))
    return {"h4": view(endian + "u4"), "b2": view(">u2"), "b4": view(">u4")}


def _max_cap(snaplen: int) -> int:
    return max(snaplen, MAX_CAPLEN)


def _fast_segment(a, h4, start, n, endian, nano, snaplen, mbuf):
    """Verified record starts from `start` on, found by vectorised candidate search.

    Returns (starts, end) where `end` is the offset just after the last verified
    record (or `start` if not even the first record could be verified).
    """
    if n - start < 16:
        return np.empty(0, np.int64), start
    hi, lo = (3, 2) if endian == "<" else (0, 1)
    khi, klo = int(a[start + hi]), int(a[start + lo])
    found = []
    last = n - 16  # a candidate needs its full 16-byte record header
    for s in range(start, last + 1, CHUNK):
        e = min(s + CHUNK, last + 1)
        m = mbuf[: e - s]
        np.equal(a[s + hi:e + hi], khi, out=m)
        c = np.flatnonzero(m)
        c += s
        found.append(c[a[c + lo] == klo])
    c = np.concatenate(found) if found else np.empty(0, np.int64)
    c = c.astype(np.int64, copy=False)
    if len(c) == 0 or c[0] != start:
        return np.empty(0, np.int64), start
    cap = h4[c + 8].astype(np.int64)
    orig = h4[c + 12].astype(np.int64)
    frac = h4[c + 4]
    ok = (cap <= _max_cap(snaplen)) & (cap <= orig) & (frac < (10**9 if nano else 10**6))
    if not ok[0]:
        return np.empty(0, np.int64), start
    if not ok.all():
        c, cap = c[ok], cap[ok]
    nxt = c + 16 + cap
    bad = np.flatnonzero(nxt[:-1] != c[1:])
    if len(bad):
        # Drop candidates no other candidate points to (false positives in payload
        # bytes), then check the chain again.
        pos = np.searchsorted(c, nxt)
        hit = pos < len(c)
        hit[hit] = c[pos[hit]] == nxt[hit]
        referenced = np.zeros(len(c), bool)
        referenced[pos[hit]] = True
        referenced[0] = True
        c, nxt = c[referenced], nxt[referenced]
        bad = np.flatnonzero(nxt[:-1] != c[1:])
    if len(bad):
        k = int(bad[0])          # c[0..k] verified; c[k]'s successor is not c[k+1]
        c = c[: k + 1]
    if len(c) and nxt[len(c) - 1] > n:  # last record's data runs past EOF
        c = c[:-1]
    end = int(c[-1] + 16 + h4[c[-1] + 8]) if len(c) else start
    return c, end


def _walk(h4, start, n, snaplen, nano, limit=None):
    """Record-by-record walk; returns (starts, end, reason or None)."""
    out = []
    off = start
    maxcap = _max_cap(snaplen)
    fmax = 10**9 if nano else 10**6
    while off + 16 <= n and (limit is None or len(out) < limit):
        cap = int(h4[off + 8])
        orig = int(h4[off + 12])
        if cap > maxcap or cap > orig or int(h4[off + 4]) >= fmax:
            return out, off, f"implausible record header at byte {off}"
        if off + 16 + cap > n:
            return out, off, f"last record truncated at byte {off}"
        out.append(off)
        off += 16 + cap
    if off < n and (limit is None or len(out) < limit):
        return out, off, f"{n - off} trailing bytes (truncated record header)"
    return out, off, None


MAX_RESYNC = 64  # corrupt regions skipped before giving up on the rest of a file


def _resync(h4, start, n, snaplen, nano, ts_lo, ts_hi, need=3):
    """First offset >= start where `need` plausible records chain (or at least two reach
    EOF exactly).

    Plausible: timestamp seconds within [ts_lo, ts_hi], fraction below one second,
    caplen <= snap limit and <= frame length <= 256 KiB. Returns None if there is none.
    """
    maxcap = _max_cap(snaplen)
    fmax = 10**9 if nano else 10**6
    last = n - 16
    for s in range(start, last + 1, CHUNK):
        e = min(s + CHUNK, last + 1)
        sec = h4[s:e]
        cand = np.flatnonzero((sec >= ts_lo) & (sec <= ts_hi)) + s
        if len(cand) == 0:
            continue
        cap, orig, frac = h4[cand + 8], h4[cand + 12], h4[cand + 4]
        cand = cand[(cap <= maxcap) & (cap <= orig) & (orig <= MAX_CAPLEN) & (frac < fmax)]
        for q in cand:
            off, ok = int(q), 0
            while ok < need and off + 16 <= n:
                cap, orig = int(h4[off + 8]), int(h4[off + 12])
                sec, frac = int(h4[off]), int(h4[off + 4])
                if (cap > maxcap or cap > orig or orig > MAX_CAPLEN or frac >= fmax
                        or not ts_lo <= sec <= ts_hi or off + 16 + cap > n):
                    break
                off += 16 + cap
                ok += 1
            if ok >= need or (ok >= 2 and off == n):
                return int(q)
    return None


def record_offsets(buf) -> tuple[np.ndarray, dict]:
    """Byte offsets of every complete record in a classic pcap held in `buf`.

    A region that is not a record (corrupt header, bytes inserted) is skipped up to the
    next place where three plausible records chain with timestamps near those already
    read; each skip is counted in bytes_skipped and named in reason. Returns (offsets,
    info) with info = {endian, nano, snaplen, linktype, partial, bytes_skipped, reason}.
    """
    a = np.frombuffer(buf, np.uint8)
    n = len(a)
    endian, nano, snaplen, linktype = _global_header(a)
    h4 = _views(buf, n, endian)["h4"]
    mbuf = np.empty(min(CHUNK, max(n, 1)), bool)
    parts = []
    off = 24
    reason = None
    restarts = 0
    skipped = []  # (offset, bytes)
    while off < n:
        if restarts < 8:
            c, end = _fast_segment(a, h4, off, n, endian, nano, snaplen, mbuf)
            if len(c):
                parts.append(c)
                off = end
                if off >= n:
                    break
            restarts += 1
            # one careful step past whatever stopped the fast path, then retry
            step, off2, reason = _walk(h4, off, n, snaplen, nano, limit=1)
        else:
            step, off2, reason = _walk(h4, off, n, snaplen, nano)
        if step:
            parts.append(np.asarray(step, np.int64))
        off = off2
        if reason is not None and len(skipped) < MAX_RESYNC and n - off > 16:
            done = [x for x in parts if len(x)]
            if done:
                first, lastrec = int(h4[done[0][0]]), int(h4[done[-1][-1]])
                ts_lo, ts_hi = first - 1, lastrec + 86_400
            else:  # nothing read yet: any time, but a longer chain must agree
                ts_lo, ts_hi = 1, 2**32 - 1
            q = _resync(h4, off + 1, n, snaplen, nano, ts_lo, ts_hi, 3 if done else 5)
            if q is not None:
                skipped.append((off, q - off))
                off, reason, restarts = q, None, 0
                continue
        if reason is not None:
            break
    offsets = np.concatenate(parts) if parts else np.empty(0, np.int64)
    notes = [f"{k} bytes at byte {o} are not records (skipped)" for o, k in skipped]
    if reason:
        notes.append(reason)
    lost = sum(k for _, k in skipped) + (int(n - off) if reason else 0)
    info = {"endian": endian, "nano": nano, "snaplen": snaplen, "linktype": linktype,
            "partial": bool(notes), "bytes_skipped": lost, "reason": "; ".join(notes)}
    return offsets, info


def _gather(view, idx):
    return view[np.minimum(idx, len(view) - 1)]


RECORD_CHUNK = 1 << 20  # records parsed per step (bounds temporary memory)

_COL_DTYPES = (
    ("src", np.uint32), ("dst", np.uint32), ("proto", np.uint8), ("ip_len", np.uint16),
    ("ip_id", np.uint16), ("sport", np.uint16), ("dport", np.uint16), ("seq", np.uint32),
    ("ack", np.uint32), ("flags", np.uint8), ("win", np.uint16), ("payload_len", np.int32),
    ("sack", bool), ("sack_hi", np.uint32), ("sack_ok", bool), ("has_ts", bool),
    ("tsval", np.uint32),
    ("tsecr", np.uint32), ("hdr_ok", bool))

_OUT_DTYPES = (("t", np.float64), ("frame_len", np.uint32), ("caplen", np.uint32),
               ("ethertype", np.uint16), ("vlan", np.int32)) + _COL_DTYPES

# Fast path: Ethernet + IPv4 without options + TCP, at fixed offsets from the record
# start (16-byte record header, 14-byte Ethernet header). 82 bytes reach the end of a
# leading NOP,NOP,timestamp option.
_FAST_W = 82
_FAST_IP = np.dtype({"names": ["et", "vihl", "ip_len", "ip_id", "frag", "proto"],
                     "formats": [">u2", "u1", ">u2", ">u2", ">u2", "u1"],
                     "offsets": [0, 2, 4, 6, 8, 11], "itemsize": 12})      # bytes 28..40
_FAST_TCP = np.dtype({"names": ["src", "dst", "sport", "dport", "seq", "ack", "doff",
                                "flags", "win"],
                      "formats": [">u4", ">u4", ">u2", ">u2", ">u4", ">u4", "u1", "u1", ">u2"],
                      "offsets": [0, 4, 8, 10, 12, 16, 20, 21, 22], "itemsize": 24})  # 42..66
_FAST_OPT = np.dtype({"names": ["opt", "tsval", "tsecr"], "formats": [">u4", ">u4", ">u4"],
                      "offsets": [0, 4, 8], "itemsize": 12})               # bytes 70..82


def _native(struct_arr, name):
    col = struct_arr[name]
    return col.astype(col.dtype.newbyteorder("="))


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
    out = {name: np.empty(m, dt) for name, dt in _OUT_DTYPES}
    for lo in range(0, m, RECORD_CHUNK):
        part = _parse_records(buf, offsets[lo:lo + RECORD_CHUNK], info, fast)
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


def _parse_records(buf, p, info, fast):
    """Columns (numpy arrays) for the records at byte offsets `p`."""
    a = np.frombuffer(buf, np.uint8)
    n = len(a)
    endian = info["endian"]
    m = len(p)
    hdr_dt = np.dtype([("sec", endian + "u4"), ("frac", endian + "u4"),
                       ("cap", endian + "u4"), ("orig", endian + "u4")])
    hdr = np.ndarray(shape=(max(n - 15, 0),), dtype="V16", buffer=buf, strides=(1,))[p]
    hdr = hdr.view(hdr_dt)
    cap = _native(hdr, "cap").astype(np.int64)
    t = _native(hdr, "sec").astype(np.float64) + _native(hdr, "frac").astype(np.float64) * (
        1e-9 if info["nano"] else 1e-6)
    cols = {name: np.zeros(m, dt) for name, dt in _COL_DTYPES}
    et = np.zeros(m, np.int64)
    vlan = np.full(m, -1, np.int32)
    lt = info["linktype"]

    rest = np.arange(m)
    if fast and lt == LINKTYPE_ETHERNET and m:
        cand = np.flatnonzero((p + _FAST_W <= n) & (cap >= 54))
        view = np.ndarray(shape=(n - _FAST_W + 1,), dtype=f"V{_FAST_W}", buffer=buf,
                          strides=(1,)) if n >= _FAST_W else None
        B = view[p[cand]].view(np.uint8).reshape(len(cand), _FAST_W) if len(cand) else None
        if B is not None:
            ip = np.ascontiguousarray(B[:, 28:40]).view(_FAST_IP).reshape(len(cand))
            ok = ((ip["et"] == 0x0800) & (ip["vihl"] == 0x45) & (ip["proto"] == 6)
                  & ((ip["frag"] & 0x1FFF) == 0))
            tc = np.ascontiguousarray(B[:, 42:66]).view(_FAST_TCP).reshape(len(cand))
            doff = (tc["doff"] >> 4).astype(np.int64) * 4
            ok &= doff >= 20
            all_ok = bool(ok.all())
            fi = cand if all_ok else cand[ok]
            full = len(fi) == m  # every record on the fast path: assign, don't scatter

            def put(name, values, fi=fi, full=full):
                if full:
                    cols[name] = values.astype(cols[name].dtype, copy=False)
                else:
                    cols[name][fi] = values

            if len(fi):
                ipk, tck = (ip, tc) if all_ok else (ip[ok], tc[ok])
                doff = doff if all_ok else doff[ok]
                et[fi] = 0x0800
                put("proto", np.full(len(fi), 6, np.uint8))
                ip_len = _native(ipk, "ip_len").astype(np.int64)
                put("ip_len", ip_len)
                put("ip_id", _native(ipk, "ip_id"))
                for name in ("src", "dst", "sport", "dport", "seq", "ack", "flags", "win"):
                    put(name, _native(tck, name))
                put("payload_len", np.maximum(ip_len - 20 - doff, 0))
                put("hdr_ok", np.ones(len(fi), bool))
                Bo = B if all_ok else B[ok]
                opt = np.ascontiguousarray(Bo[:, 70:82]).view(_FAST_OPT).reshape(len(fi))
                lead = (doff >= 32) & (_native(opt, "opt") == 0x0101080A) & (cap[fi] >= 82)
                put("has_ts", lead)
                put("tsval", np.where(lead, _native(opt, "tsval"), 0))
                put("tsecr", np.where(lead, _native(opt, "tsecr"), 0))
                # anything beyond a lone leading timestamp (SACK blocks, SYN options)
                more = (doff > 20) & ~(lead & (doff == 32))
                if more.any():
                    v = _views(buf, n, endian)
                    mi = np.flatnonzero(more)
                    _tcp_options(a, v["b4"], cols, fi, p[fi] + 16 + 34, doff,
                                 cap[fi] - 34, only=mi)
                done = np.zeros(m, bool)
                done[fi] = True
                rest = np.flatnonzero(~done)
    if len(rest):
        _parse_general(buf, a, n, endian, lt, p[rest], cap[rest], rest, cols, et, vlan)
    cols["ethertype"] = et
    cols["vlan"] = vlan
    cols["t"] = t
    cols["frame_len"] = _native(hdr, "orig")
    cols["caplen"] = cap
    return cols


def _parse_general(buf, a, n, endian, lt, p, cap, rows, cols, et_out, vlan_out):
    """Any supported link type, VLAN tags, IP options, UDP, non-IP frames: one gather per
    field, for the records at offsets `p`; results go to `rows` of the output columns."""
    v = _views(buf, n, endian)
    b2, b4 = v["b2"], v["b4"]
    m = len(p)
    d = p + 16
    vlan = np.full(m, -1, np.int32)
    if lt == LINKTYPE_ETHERNET:
        l3 = d + 14
        et = np.where(cap >= 14, _gather(b2, d + 12), 0).astype(np.int64)
        for _ in range(2):  # up to two stacked tags (802.1Q, 802.1ad QinQ)
            tagged = ((et == 0x8100) | (et == 0x88A8)) & (cap >= (l3 - d) + 4)
            if not tagged.any():
                break
            ti = np.flatnonzero(tagged)
            first = vlan[ti] < 0
            vlan[ti[first]] = _gather(b2, l3[ti[first]]) & 0x0FFF
            et[ti] = _gather(b2, l3[ti] + 2)
            l3[ti] += 4
    elif lt in (LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2):
        hdr, etoff = (16, 14) if lt == LINKTYPE_LINUX_SLL else (20, 0)
        l3 = d + hdr
        et = np.where(cap >= hdr, _gather(b2, d + etoff), 0).astype(np.int64)
    else:  # raw IPv4
        l3 = d.copy()
        et = np.full(m, 0x0800, np.int64)
    et_out[rows] = et
    vlan_out[rows] = vlan
    l3len = cap - (l3 - d)  # captured bytes from the IP header on
    sub = {name: np.zeros(m, dt) for name, dt in _COL_DTYPES}
    is_ip = (et == 0x0800) & (l3len >= 20)
    ii = np.flatnonzero(is_ip)
    L3 = l3[ii]
    w0 = _gather(b4, L3)                      # version/IHL, TOS, total length
    version = w0 >> 28
    ihl = ((w0 >> 24) & 15).astype(np.int64) * 4
    ip_len = (w0 & 0xFFFF).astype(np.int64)
    w1 = _gather(b4, L3 + 4)                  # id, flags/fragment offset
    proto = (_gather(b4, L3 + 8) >> 16) & 0xFF
    ok3 = (version == 4) & (ihl >= 20) & (l3len[ii] >= ihl)
    sub["src"][ii] = np.where(ok3, _gather(b4, L3 + 12), 0)
    sub["dst"][ii] = np.where(ok3, _gather(b4, L3 + 16), 0)
    sub["proto"][ii] = np.where(ok3, proto, 0)
    sub["ip_len"][ii] = np.where(ok3, ip_len, 0)
    sub["ip_id"][ii] = np.where(ok3, w1 >> 16, 0)
    frag_off = w1 & 0x1FFF
    l4 = L3 + ihl
    l4len = l3len[ii] - ihl
    is_tcp = ok3 & (proto == 6) & (frag_off == 0) & (l4len >= 20)
    is_udp = ok3 & (proto == 17) & (frag_off == 0) & (l4len >= 8)
    sub["hdr_ok"][ii] = ok3 & ~(((proto == 6) | (proto == 17)) & ~(is_tcp | is_udp))
    pw = np.where(is_tcp | is_udp, _gather(b4, l4), 0)  # ports: same place in TCP and UDP
    sub["sport"][ii] = pw >> 16
    sub["dport"][ii] = pw & 0xFFFF
    sub["payload_len"][ii] = np.where(is_udp, ip_len - ihl - 8, 0)
    ti = ii[is_tcp]
    if len(ti):
        T4 = l4[is_tcp]
        sub["seq"][ti] = _gather(b4, T4 + 4)
        sub["ack"][ti] = _gather(b4, T4 + 8)
        w3 = _gather(b4, T4 + 12)
        doff = ((w3 >> 28) & 15).astype(np.int64) * 4
        sub["flags"][ti] = (w3 >> 16) & 0xFF
        sub["win"][ti] = w3 & 0xFFFF
        sub["payload_len"][ti] = np.maximum(ip_len[is_tcp] - ihl[is_tcp] - doff, 0)
        bad_doff = doff < 20
        if bad_doff.any():
            sub["hdr_ok"][ti[bad_doff]] = False
        _tcp_options(a, b4, sub, ti, T4, doff, l4len[is_tcp])
    for name, _ in _COL_DTYPES:
        cols[name][rows] = sub[name]


def _tcp_options(a, b4, cols, ti, T4, doff, l4len, only=None):
    """Flag SACK / SACK-permitted and read timestamps, vectorised over packets.

    ti: output rows; T4: TCP header offsets; doff: TCP header lengths; l4len: captured
    bytes from the TCP header on; `only`: positions (into ti) to look at.
    """
    oi = np.flatnonzero(doff > 20) if only is None else only[doff[only] > 20]
    if len(oi) == 0:
        return
    pos = T4[oi] + 20
    end = T4[oi] + np.minimum(doff[oi], l4len[oi])  # options inside the capture only
    # Linux puts NOP,NOP,TS first on almost every segment: read it in one gather.
    w = np.where(pos + 12 <= end, _gather(b4, pos), 0)
    lead_ts = w == 0x0101080A
    if lead_ts.any():
        k = oi[lead_ts]
        cols["has_ts"][ti[k]] = True
        cols["tsval"][ti[k]] = _gather(b4, pos[lead_ts] + 4)
        cols["tsecr"][ti[k]] = _gather(b4, pos[lead_ts] + 8)
        pos = pos.copy()
        pos[lead_ts] += 12
    # Generic TLV walk for whatever remains (SACK blocks, SYN options).
    act = pos < end
    oi, pos, end = oi[act], pos[act], end[act]
    for _ in range(40):
        if len(oi) == 0:
            break
        kind = a[np.minimum(pos, len(a) - 1)]
        single = (kind == 0) | (kind == 1)
        ln = np.where(single, 1, a[np.minimum(pos + 1, len(a) - 1)]).astype(np.int64)
        valid = single | ((ln >= 2) & (pos + ln <= end))
        sel = ti[oi]
        sk = valid & (kind == 5)
        if sk.any():
            cols["sack"][sel[sk]] = True
            # highest right edge, measured from the ACK number (wrap-safe)
            ack = cols["ack"][sel[sk]].astype(np.int64)
            best = np.full(int(sk.sum()), -1, np.int64)
            p5, l5 = pos[sk], ln[sk]
            for b in range(4):
                has = (l5 >= 2 + 8 * (b + 1)) & (p5 + 2 + 8 * (b + 1) <= end[sk])
                if not has.any():
                    break
                right = _gather(b4, p5 + 2 + 8 * b + 4).astype(np.int64)
                off = (right - ack) % (1 << 32)
                best = np.where(has & (off > best), off, best)
            cols["sack_hi"][sel[sk]] = np.where(best >= 0, (ack + best) % (1 << 32), 0)
        cols["sack_ok"][sel[valid & (kind == 4)]] = True
        ts = valid & (kind == 8) & (ln == 10)
        if ts.any():
            cols["has_ts"][sel[ts]] = True
            cols["tsval"][sel[ts]] = _gather(b4, pos[ts] + 2)
            cols["tsecr"][sel[ts]] = _gather(b4, pos[ts] + 6)
        pos = pos + ln
        keep = valid & (kind != 0) & (pos < end)
        oi, pos, end = oi[keep], pos[keep], end[keep]


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
