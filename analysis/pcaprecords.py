"""Classic pcap framing: the global header and where every record starts.

`record_offsets(buf)` reads the global header (magic, byte order, snap length, link
type) and returns the byte offset of every complete record; `pcap.py` turns those
records into a DataFrame (with `pcapdissect.py`). The rules for corrupt or truncated
files are in pcap.py's docstring.

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

import struct

import numpy as np

__all__ = ["CHUNK", "LINKTYPE_ETHERNET", "LINKTYPE_IPV4", "LINKTYPE_LINUX_SLL",
           "LINKTYPE_LINUX_SLL2", "LINKTYPE_RAW", "MAGIC_NS", "MAGIC_PCAPNG", "MAGIC_US",
           "MAX_CAPLEN", "MAX_RESYNC", "SUPPORTED_LINKTYPES", "PcapError", "byte_views",
           "record_offsets"]

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


class PcapError(ValueError):
    """The input is not a classic pcap this parser can read."""


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


def byte_views(buf, n: int, endian: str):
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
    h4 = byte_views(buf, n, endian)["h4"]
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

