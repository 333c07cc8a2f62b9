"""analysis/pcap.py: which path reads what, corrupted files of every shape, the TCP option
walk at its edges (what benchmarks/mutation_score.py found unchecked after
test_analysis_pcap*.py).

The parser is redundant by design: a record the vectorised search cannot verify is read
again by the careful walk, and a frame the fixed-offset fast path skips is parsed by the
general path, so the rows alone do not show which of them did the work. These tests
watch the private functions through a spy (`Calls`) and pin, for captures built byte by
byte here, which function read which record: a clean capture is one vectorised search,
a timestamp boundary costs one careful step and a retry (eight retries, then a plain
walk), a corrupt region one resynchronisation. The spy also stops a parser that loops.
Every capture is written here byte by byte, so each expected value is known.
"""
import struct

import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import pcap
from incastlab.analysis import pcapdissect as dissect
from incastlab.analysis import pcaprecords as framing
from incastlab.analysis.pcap import PcapError, parse_pcap_bytes, read_pcap, record_offsets

SEC = 1_700_000_000  # 0x6553F100: far from a 2^16-second boundary of the high bytes
MAXCAP = pcap.MAX_CAPLEN  # 262,144: the snap limit for any snaplen up to it


# ------------------------------------------------------------------ byte builders

def ghdr(endian="<", nano=False, snaplen=65535, linktype=1):
    magic = pcap.MAGIC_NS if nano else pcap.MAGIC_US
    return struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)


def rec(frame, sec=SEC, frac=0, endian="<", cap=None, orig=None):
    """A record header (+ the frame): caplen and frame length default to the frame's."""
    cap = len(frame) if cap is None else cap
    orig = len(frame) if orig is None else orig
    return struct.pack(endian + "IIII", sec, frac, cap, orig) + frame


def ip4(payload, proto=6, ident=1, frag=0, total=None, vihl=None, opts=b""):
    total = min(20 + len(opts) + len(payload), 0xFFFF) if total is None else total
    vihl = 0x45 + len(opts) // 4 if vihl is None else vihl
    return struct.pack(">BBHHHBBHII", vihl, 0, total, ident, frag, 64, proto, 0,
                       0x0A000001, 0x0A000002) + opts + payload


def tcp(seq=1000, ack=5000, flags=0x18, opts=b"", payload=b"", doff=None):
    doff = (20 + len(opts)) // 4 if doff is None else doff
    return struct.pack(">HHIIBBHHH", 1234, 80, seq, ack, doff << 4, flags, 500, 0,
                       0) + opts + payload


def eth(l3, et=0x0800, tags=()):
    out = bytes(6) + b"\x00\x00\x00\x00\x00\x01"
    for tpid, vid in tags:
        out += struct.pack(">HH", tpid, vid)
    return out + struct.pack(">H", et) + l3


def frame(seq=1000, opts=b"", payload=b"", **kw):
    """Ethernet + IPv4 (20) + TCP (20 + options) + payload."""
    return eth(ip4(tcp(seq=seq, opts=opts, payload=payload, **kw)))


NOP, EOL, SACK_OK, MSS, WSCALE = b"\x01", b"\x00", b"\x04\x02", b"\x02\x04\x05\xb4", \
    b"\x03\x03\x07"


def ts_opt(val, ecr):
    return struct.pack(">BBII", 8, 10, val, ecr)


def sack_opt(*edges):
    return struct.pack(">BB", 5, 2 + 4 * len(edges)) + struct.pack(f">{len(edges)}I", *edges)


def records(n, sec=SEC, step=1, frac=0, endian="<", first_seq=0):
    """`n` plain TCP records `step` seconds apart; seq = record index. 12 payload bytes
    make each record 82 bytes, what the fixed-offset path reads of every record."""
    return b"".join(rec(frame(seq=first_seq + i, payload=PAY), sec + i * step, frac, endian)
                    for i in range(n))


PAY = b"d" * 12
REC = 16 + 54 + 12
JUNK = b"\xee" * 37  # caplen 0xEEEEEEEE wherever a header is read: never a record


def seqs(df):
    return [int(x) for x in df["seq"]]


class Calls:
    """Spy on the parser's inner functions: a summary of every call, in order. More than
    `limit` calls means a loop that does not end: the spy stops it with an error."""

    def __init__(self, monkeypatch, limit=3000):
        self.log = []
        self.general_rows = []
        self.option_rows = []
        for mod, name in ((framing, "_fast_segment"), (framing, "_walk"), (framing, "_resync"),
                          (dissect, "_parse_general"), (dissect, "_tcp_options")):
            monkeypatch.setattr(mod, name, self._spy(name, getattr(mod, name), limit))

    def _spy(self, name, real, limit):
        def spy(*args, **kw):
            if len(self.log) >= limit:
                raise RuntimeError(f"{limit} calls: the parser loops")
            out = real(*args, **kw)
            if name == "_fast_segment":
                self.log.append(("fast", args[2], [int(x) for x in out[0]]))
            elif name == "_walk":
                self.log.append(("walk", args[1], kw.get("limit"), list(out[0]), out[2]))
            elif name == "_resync":
                self.log.append(("resync", args[1], args[7] if len(args) > 7 else None, out))
            elif name == "_parse_general":
                self.general_rows.extend(int(r) for r in args[7])
                self.log.append(("general", len(args[7])))
            else:
                only = kw.get("only")
                self.option_rows.append(None if only is None else [int(x) for x in only])
                self.log.append(("options",))
            return out
        return spy

    def kinds(self):
        return [e[0] for e in self.log]

    def of(self, kind):
        return [e for e in self.log if e[0] == kind]


DEFAULT_CHUNK = framing.CHUNK


@pytest.fixture(autouse=True)
def calls(monkeypatch):
    """Every test runs under the spy (a parser that loops fails at once instead of hanging)
    and searches record starts 64 KiB at a time instead of 16 MiB, so the step loops run
    on these small captures too (the answer may not depend on it:
    test_results_do_not_depend_on_the_chunk_sizes)."""
    monkeypatch.setattr(framing, "CHUNK", 1 << 16)
    return Calls(monkeypatch)


# ------------------------------------------------------------------ the global header

def test_pcapng_message_names_the_conversion():
    """The user is told the exact command (editcap's -F, not -f) and the capture option."""
    with pytest.raises(PcapError) as info:
        parse_pcap_bytes(struct.pack("<I", pcap.MAGIC_PCAPNG) + bytes(40))
    assert str(info.value) == ("pcapng is not supported; convert it with `editcap -F pcap "
                               "in.pcapng out.pcap` or capture with `tcpdump -w` "
                               "(classic pcap)")


@pytest.mark.parametrize("endian", ["<", ">"])
def test_snaplen_and_linktype_are_unsigned(endian):
    """A snap length of 2^32 - 1 (some writers' "no limit") is read as such, not -1; the
    link type's upper four bits (FCS information) are masked off."""
    data = ghdr(endian, snaplen=0xFFFFFFFF, linktype=0x10000001) + records(2, endian=endian)
    df = parse_pcap_bytes(data)
    assert df.attrs["snaplen"] == 0xFFFFFFFF and df.attrs["linktype"] == 1
    assert seqs(df) == [0, 1] and not df.attrs["partial"]


def test_default_iface_is_empty_and_record_offsets_are_int64():
    data = ghdr() + records(2)
    assert list(parse_pcap_bytes(data)["iface"]) == ["", ""]
    off, info = record_offsets(data)
    assert off.dtype == np.int64 and list(off) == [24, 24 + REC]
    empty, _ = record_offsets(ghdr())  # no record at all: still an int64 array
    assert empty.dtype == np.int64 and len(empty) == 0


# ------------------------------------------------------------------ which path reads what

@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_a_clean_capture_is_one_vectorised_search(calls, endian, nano):
    """Records 200 s apart (the third timestamp byte changes, the two high ones do not),
    with fractions only a nanosecond file allows when `nano`: the candidate search finds
    them all at once; no careful walk, no resynchronisation."""
    frac = 500_000_123 if nano else 999_999
    data = ghdr(endian, nano) + records(6, step=200, frac=frac, endian=endian)
    df = parse_pcap_bytes(data)
    assert seqs(df) == list(range(6)) and not df.attrs["partial"]
    assert calls.log[0] == ("fast", 24, [24 + i * REC for i in range(6)])
    assert calls.kinds() == ["fast"]  # all-TCP Ethernet: no general path, no option walk


def test_a_single_record_is_read_by_the_vectorised_search(calls):
    df = parse_pcap_bytes(ghdr() + records(1))
    assert seqs(df) == [0]
    assert calls.log == [("fast", 24, [24])]


def test_fast_path_is_the_default_and_fast_false_parses_everything_generally(calls):
    data = ghdr() + records(3)
    parse_pcap_bytes(data)
    assert "general" not in calls.kinds()
    slow = parse_pcap_bytes(data, fast=False)
    assert calls.general_rows == [0, 1, 2]
    assert seqs(slow) == [0, 1, 2]


def _boundary_records(n, nano=False, endian="<", first_seq=0):
    """Each record 65,536 s after the last: the two high timestamp bytes differ from one
    record to the next, so no record is a candidate of the search begun at another."""
    frac = 500_000_000 if nano else 0
    return b"".join(rec(frame(seq=first_seq + i, payload=PAY), SEC + i * 65536, frac, endian)
                    for i in range(n))


@pytest.mark.parametrize("nano", [False, True])
def test_timestamp_boundaries_eight_retries_then_a_plain_walk(calls, nano):
    """At each boundary the vectorised search stops, the careful walk reads one record and
    the search is tried again from there; after eight tries the rest is walked."""
    data = ghdr(nano=nano) + _boundary_records(20, nano)
    df = parse_pcap_bytes(data)
    assert seqs(df) == list(range(20)) and not df.attrs["partial"]
    at = [24 + i * REC for i in range(21)]
    expected = []
    for k in range(8):
        expected += [("fast", at[2 * k], [at[2 * k]]),
                     ("walk", at[2 * k + 1], 1, [at[2 * k + 1]], None)]
    expected.append(("walk", at[16], None, at[16:20], None))
    assert calls.log == expected


def test_retries_count_again_after_a_resynchronisation(calls):
    """Garbage first (nothing read yet), then boundary records: after the skip the
    search gets its eight tries again."""
    data = ghdr() + JUNK + _boundary_records(20)
    df = parse_pcap_bytes(data)
    assert seqs(df) == list(range(20))
    assert df.attrs["bytes_skipped"] == len(JUNK)
    first = 24 + len(JUNK)
    assert calls.log[:3] == [("fast", 24, []), ("walk", 24, 1, [], "implausible record "
                                                "header at byte 24"),
                             ("resync", 25, 5, first)]
    rest = calls.log[3:]
    assert [e[0] for e in rest] == ["fast", "walk"] * 8 + ["walk"]
    assert rest[-1][1:3] == (first + 16 * REC, None)


def test_the_last_record_read_by_the_careful_walk_ends_the_loop(calls):
    """A boundary just before the last record: one careful step reads it and reaches the
    end of the file exactly; nothing more is tried."""
    data = ghdr() + records(3) + rec(frame(seq=3, payload=PAY), SEC + 65536)
    df = parse_pcap_bytes(data)
    assert seqs(df) == [0, 1, 2, 3]
    assert calls.log == [("fast", 24, [24, 24 + REC, 24 + 2 * REC]),
                         ("walk", 24 + 3 * REC, 1, [24 + 3 * REC], None)]


def test_trailing_bytes_after_a_careful_step(calls):
    """The careful step reads the last whole record; two bytes follow: the vectorised search
    is not even tried on them (too few for a header) and the file is partial by two."""
    data = ghdr() + records(3) + rec(frame(seq=3, payload=PAY), SEC + 65536) + b"\x01\x02"
    df = parse_pcap_bytes(data)
    assert seqs(df) == [0, 1, 2, 3]
    assert df.attrs["bytes_skipped"] == 2
    assert df.attrs["reason"] == "2 trailing bytes (truncated record header)"
    assert calls.kinds() == ["fast", "walk", "fast", "walk"]
    assert calls.log[2] == ("fast", len(data) - 2, [])


def test_lookalike_headers_in_payload_do_not_break_the_search(calls):
    """Payload bytes that are record headers of this capture (same timestamp, plausible
    sizes) are candidates no other candidate points to: dropped, one search reads all."""
    fake = rec(b"", SEC, 0, cap=20, orig=20) * 6
    data = ghdr() + b"".join(rec(frame(seq=i, payload=fake), SEC + i) for i in range(5))
    df = parse_pcap_bytes(data)
    assert seqs(df) == list(range(5)) and (df["payload_len"] == len(fake)).all()
    assert calls.kinds() == ["fast"]


# ------------------------------------------------------------------ the vectorised search

def _fast(data, start=24, endian="<", nano=False, snaplen=65535):
    a = np.frombuffer(data, np.uint8)
    h4 = framing.byte_views(data, len(a), endian)["h4"]
    mbuf = np.empty(len(a), bool)
    starts, end = framing._fast_segment(a, h4, start, len(a), endian, nano, snaplen, mbuf)
    assert starts.dtype == np.int64  # byte offsets, also when nothing was found
    return [int(x) for x in starts], end


def test_fast_search_reads_a_zero_length_record_ending_the_file():
    """A record that captured no bytes is 16 bytes long: as the last thing in the file it
    is a record like any other, also when the search starts on it."""
    data = ghdr() + records(2) + rec(b"", SEC + 2, cap=0, orig=60)
    n = len(data)
    assert _fast(data) == ([24, 24 + REC, n - 16], n)
    assert _fast(data, start=n - 16) == ([n - 16], n)
    # fewer than 16 bytes left: nothing, and no reading past the end
    assert _fast(data + b"\x01\x02", start=n) == ([], n)
    assert _fast(data[:-1], start=n - 16) == ([], n - 16)


def test_fast_search_caplen_at_the_snap_limit():
    big = frame(seq=1, payload=bytes(MAXCAP - 54))
    assert len(big) == MAXCAP
    data = ghdr() + records(1) + rec(big, SEC + 1) + records(1, sec=SEC + 2, first_seq=2)
    assert _fast(data) == ([24, 24 + REC, 24 + REC + 16 + MAXCAP], len(data))
    over = ghdr() + records(1) + rec(big + b"x", SEC + 1) + records(1, sec=SEC + 2)
    assert _fast(over) == ([24], 24 + REC)
    df = parse_pcap_bytes(data)
    assert seqs(df) == [0, 1, 2] and df["caplen"].iloc[1] == MAXCAP


@pytest.mark.parametrize("endian", ["<", ">"])
def test_fast_search_nanosecond_fraction_limit(endian):
    data = bytearray(ghdr(endian, nano=True) + records(4, frac=5, endian=endian))
    at = 24 + 2 * REC + 4
    data[at:at + 4] = struct.pack(endian + "I", 999_999_999)
    assert _fast(bytes(data), endian=endian, nano=True)[0] == [24 + i * REC for i in range(4)]
    data[at:at + 4] = struct.pack(endian + "I", 1_000_000_000)
    assert _fast(bytes(data), endian=endian, nano=True)[0] == [24, 24 + REC]


def test_fast_search_a_lone_record_cut_short():
    data = ghdr() + records(1)
    assert _fast(data[:-1]) == ([], 24)
    df = parse_pcap_bytes(data[:-1])
    assert len(df) == 0 and df.attrs["bytes_skipped"] == REC - 1
    assert df.attrs["reason"] == "last record truncated at byte 24"


def test_fast_search_implausible_first_header():
    data = bytearray(ghdr() + records(3))
    data[24 + 8:24 + 12] = struct.pack("<I", 71)  # caplen above the frame length (70)
    assert _fast(bytes(data)) == ([], 24)


# ------------------------------------------------------------------ the careful walk

def test_walk_nanosecond_fractions_and_caplen_at_the_limit():
    data = bytearray(ghdr(nano=True) + records(3, frac=500_000_000))
    h = lambda d: framing.byte_views(bytes(d), len(d), "<")["h4"]  # noqa: E731
    n = len(data)
    assert framing._walk(h(data), 24, n, 65535, True) == ([24, 24 + REC, 24 + 2 * REC], n, None)
    data[24 + REC + 4:24 + REC + 8] = struct.pack("<I", 999_999_999)
    assert framing._walk(h(data), 24, n, 65535, True)[2] is None
    data[24 + REC + 4:24 + REC + 8] = struct.pack("<I", 1_000_000_000)
    assert framing._walk(h(data), 24, n, 65535, True) == (
        [24], 24 + REC, f"implausible record header at byte {24 + REC}")
    big = ghdr() + rec(frame(payload=bytes(MAXCAP - 54)))
    assert framing._walk(h(big), 24, len(big), 65535, False) == ([24], len(big), None)


# ------------------------------------------------------------------ resynchronisation

def _resync(data, start=24, need=None, nano=False, lo=SEC - 10, hi=SEC + 10):
    """`_resync` on `data`, searching 64 bytes at a time (CHUNK, 16 MiB in use, would hold
    these captures in one step and leave the step loop untried)."""
    h4 = framing.byte_views(data, len(data), "<")["h4"]
    chunk, framing.CHUNK = framing.CHUNK, 64
    try:
        if need is None:
            return framing._resync(h4, start, len(data), 65535, nano, lo, hi)
        return framing._resync(h4, start, len(data), 65535, nano, lo, hi, need)
    finally:
        framing.CHUNK = chunk


def _hdr_rec(sec=SEC, frac=0, cap=40, orig=None):
    return struct.pack("<IIII", sec, frac, cap, cap if orig is None else orig) + bytes(cap)


TAIL = b"\xff" * 20  # not a record, not the end of the file


@pytest.mark.parametrize("nano", [False, True])
@pytest.mark.parametrize("idx", [0, 1])
@pytest.mark.parametrize("field,ok", [
    ({}, True),
    ({"frac": "fmax-1"}, True), ({"frac": "fmax"}, False),
    ({"cap": MAXCAP}, True), ({"cap": 100, "orig": MAXCAP}, True),
    ({"cap": 100, "orig": MAXCAP + 1}, False), ({"cap": 100, "orig": 99}, False),
    ({"sec": SEC - 10}, True), ({"sec": SEC + 10}, True),
    ({"sec": SEC - 11}, False), ({"sec": SEC + 11}, False)])
def test_resync_plausibility_at_each_bound(nano, idx, field, ok):
    """Garbage, four records, non-record bytes. Record `idx` gets one field at (or just
    past) its bound: the chain starts at the first record when it is plausible; when the
    first is not, at the second; when the second is not, nowhere (one and two records
    followed by garbage are not enough)."""
    fmax = 10**9 if nano else 10**6
    kw = {k: (fmax - 1 if v == "fmax-1" else fmax if v == "fmax" else v)
          for k, v in field.items()}
    recs = [_hdr_rec(**(kw if i == idx else {})) for i in range(4)]
    data = ghdr(nano=nano) + JUNK + b"".join(recs) + TAIL
    first = 24 + len(JUNK)
    got = _resync(data, nano=nano)
    if ok:
        assert got == first
    else:
        assert got == (first + len(recs[0]) if idx == 0 else None)


def test_resync_a_microsecond_fraction_of_half_a_second_is_implausible():
    recs = [_hdr_rec(frac=500_000_000 if i == 1 else 0) for i in range(4)]
    data = ghdr() + JUNK + b"".join(recs) + TAIL
    assert _resync(data) is None
    assert _resync(ghdr(nano=True) + JUNK + b"".join(recs) + TAIL, nano=True) == 24 + 37


def test_resync_how_many_records_must_chain():
    first = 24 + len(JUNK)
    three = ghdr() + JUNK + _hdr_rec() * 3 + TAIL
    assert _resync(three) == first                 # the default: three
    assert _resync(three, need=3) == first
    assert _resync(three, need=4) is None
    two_then_three = ghdr() + JUNK + _hdr_rec() * 2 + TAIL + _hdr_rec() * 3 + TAIL
    assert _resync(two_then_three) == first + 2 * 56 + len(TAIL)
    # at the end of the file two records are enough, one is not
    assert _resync(ghdr() + JUNK + _hdr_rec() * 2) == first
    assert _resync(ghdr() + JUNK + _hdr_rec()) is None
    # a zero-length record may be the last
    assert _resync(ghdr() + JUNK + _hdr_rec() + _hdr_rec(cap=0)) == first
    # the second record's data runs one byte past the end: not a chain
    assert _resync(ghdr() + JUNK + _hdr_rec() + _hdr_rec()[:-1], need=2) is None
    assert _resync(ghdr() + JUNK + _hdr_rec() + _hdr_rec(), need=2) == first


def test_resync_ignores_a_cut_header_at_the_end():
    """Records after the garbage, then 15 bytes of a header whose timestamp is in the
    window: a candidate too close to the end to be read."""
    data = ghdr() + JUNK + _hdr_rec() * 3 + struct.pack("<I", SEC) + bytes(11)
    assert _resync(data) == 24 + len(JUNK)
    assert _resync(data, start=24 + len(JUNK) + 1) is None


# ------------------------------------------------------------------ corrupted files

def test_one_byte_of_garbage_is_one_byte_skipped():
    data = ghdr() + records(3) + b"\xee" + records(3, sec=SEC + 3, first_seq=3)
    df = parse_pcap_bytes(data)
    assert seqs(df) == list(range(6))
    assert df.attrs["bytes_skipped"] == 1
    assert df.attrs["reason"] == f"1 bytes at byte {24 + 3 * REC} are not records (skipped)"


def test_two_notes_are_joined_with_a_semicolon():
    data = ghdr() + records(3) + JUNK + records(4, sec=SEC + 3, first_seq=3)
    cut = data[:-5]
    df = parse_pcap_bytes(cut)
    assert seqs(df) == list(range(6))
    last = 24 + 3 * REC + len(JUNK) + 3 * REC
    assert df.attrs["reason"] == (f"37 bytes at byte {24 + 3 * REC} are not records "
                                  f"(skipped); last record truncated at byte {last}")
    assert df.attrs["bytes_skipped"] == 37 + REC - 5


def test_how_much_must_chain_after_garbage_depends_on_what_was_read(calls):
    """Nothing read yet: five records must chain (any timestamp); afterwards three (near
    the timestamps read). Garbage | 3 | g | 5 | g | 3 | g | 3 (to the end): the first
    three are not enough at the start, every later run is."""
    parts = [JUNK, records(3, first_seq=0), JUNK, records(5, first_seq=10), JUNK,
             records(3, first_seq=20), JUNK, records(3, first_seq=30)]
    df = parse_pcap_bytes(ghdr() + b"".join(parts))
    assert seqs(df) == [10, 11, 12, 13, 14, 20, 21, 22, 30, 31, 32]
    assert df.attrs["bytes_skipped"] == 4 * 37 + 3 * REC
    assert [e[2] for e in calls.of("resync")] == [5, 3, 3]


@pytest.mark.parametrize("sec,kept", [(SEC - 1, True), (SEC - 2, False),
                                      (SEC + 4 + 86_400, True), (SEC + 4 + 86_401, False)])
def test_resync_timestamp_window(sec, kept):
    """After garbage, records count only within [first read - 1 s, last read + 1 day]."""
    data = ghdr() + records(5) + JUNK + records(3, sec=sec, step=0, first_seq=10)
    df = parse_pcap_bytes(data)
    assert seqs(df) == list(range(5)) + ([10, 11, 12] if kept else [])
    assert df.attrs["bytes_skipped"] == 37 + (0 if kept else 3 * REC)


@pytest.mark.parametrize("sec,kept", [(1, True), (0, False), (0xFFFFFFFF, True)])
def test_resync_with_nothing_read_accepts_any_nonzero_timestamp(sec, kept):
    data = ghdr() + JUNK + b"".join(rec(frame(seq=i), sec) for i in range(5))
    df = parse_pcap_bytes(data)
    assert seqs(df) == (list(range(5)) if kept else [])
    assert df.attrs["partial"]


def test_at_most_64_corrupt_regions_are_skipped():
    block = records(3) + JUNK
    data = ghdr() + block * 66 + records(3)
    df = parse_pcap_bytes(data)
    assert len(df) == 65 * 3  # 64 regions skipped; the 65th ends the parse
    assert df.attrs["bytes_skipped"] == len(data) - 24 - 65 * 3 * REC
    assert df.attrs["reason"].endswith(
        f"implausible record header at byte {24 + 65 * len(block) - len(JUNK)}")


@pytest.mark.parametrize("tail,resyncs", [(16, 0), (17, 1), (7, 0)])
def test_no_resync_attempt_on_sixteen_bytes_or_fewer(calls, tail, resyncs):
    """A cut last record leaves `tail` bytes: a resynchronisation needs two records, so
    16 bytes or fewer are not searched."""
    data = ghdr() + records(3) + rec(frame(seq=3), SEC + 3)[:tail]
    df = parse_pcap_bytes(data)
    assert seqs(df) == [0, 1, 2] and df.attrs["bytes_skipped"] == tail
    assert len(calls.of("resync")) == resyncs


def test_results_do_not_depend_on_the_chunk_sizes(monkeypatch):
    """Record starts are searched CHUNK bytes at a time and rows parsed RECORD_CHUNK
    records at a time: with tiny chunks every boundary case is crossed many times, and
    the answer must be the same as with the defaults."""
    captures = {
        "clean": ghdr() + records(9, step=7),
        "garbage": ghdr() + records(3) + JUNK + records(4, sec=SEC + 3, first_seq=3),
        "start": ghdr() + JUNK + records(6),
        "zero-length last": ghdr() + records(4) + rec(b"", SEC + 5, cap=0, orig=60),
        "cut header": ghdr() + records(3) + JUNK + records(3, sec=SEC + 3, first_seq=3)
        + struct.pack("<I", SEC + 7) + bytes(11),
        "boundaries": ghdr() + _boundary_records(12),
    }
    monkeypatch.setattr(framing, "CHUNK", DEFAULT_CHUNK)
    want = {k: parse_pcap_bytes(v) for k, v in captures.items()}
    for chunk, rchunk in ((17, 1), (64, 2), (100, 3)):
        monkeypatch.setattr(framing, "CHUNK", chunk)
        monkeypatch.setattr(pcap, "RECORD_CHUNK", rchunk)
        for k, data in captures.items():
            got = parse_pcap_bytes(data)
            pd.testing.assert_frame_equal(got, want[k], obj=f"{k} {chunk}/{rchunk}")
            assert got.attrs == want[k].attrs, k


def test_clean_capture_is_one_search_also_in_small_chunks(monkeypatch, calls):
    monkeypatch.setattr(framing, "CHUNK", 64)
    df = parse_pcap_bytes(ghdr() + records(9) + rec(b"", SEC + 9, cap=0, orig=60))
    assert len(df) == 10 and calls.kinds() == ["fast", "general"]
    assert calls.general_rows == [9]  # the frame with no bytes: not for the fast path


# ------------------------------------------------------------------ fast path vs general

def _both(data):
    fast = parse_pcap_bytes(data)
    pd.testing.assert_frame_equal(fast, parse_pcap_bytes(data, fast=False))
    return fast


def test_which_frames_take_the_fixed_offset_path(calls):
    """Plain Ethernet/IPv4/TCP (no IP options, not a later fragment, a sane data offset,
    54 bytes captured, 82 bytes from the record start to the end of the file) is read at
    fixed offsets; everything else by the general path."""
    frames = [
        frame(seq=0),                                            # 0 plain, 54 bytes
        frame(seq=1, opts=NOP + NOP + ts_opt(7, 8), payload=b"p" * 16),
        eth(ip4(b"u" * 12, proto=17)),                          # 2 UDP
        eth(ip4(tcp(seq=3), opts=b"\x01\x01\x01\x00")),         # 3 IP options
        eth(b"\x00" * 28, et=0x0806),                           # 4 ARP
        eth(ip4(b"i" * 12, proto=1)),                           # 5 ICMP
        eth(ip4(tcp(seq=6)), tags=((0x8100, 9),)),              # 6 VLAN
        eth(ip4(tcp(seq=7), frag=0x2000)),                      # 7 first fragment (MF)
        eth(ip4(b"\x00" * 20, frag=0x0003)),                    # 8 later fragment
        eth(ip4(tcp(seq=9, doff=4))),                           # 9 data offset 16 bytes
        frame(seq=10)[:53],                                     # 10 53 bytes captured
        frame(seq=11, opts=NOP + NOP + ts_opt(1, 2)),           # 11 last, ends at EOF
    ]
    data = ghdr() + b"".join(rec(f, SEC + i, orig=54 if i == 10 else None)
                             for i, f in enumerate(frames))
    assert len(rec(frames[11])) == dissect._FAST_W  # the last record: exactly 82 bytes
    df = parse_pcap_bytes(data)
    assert calls.general_rows == [2, 3, 4, 5, 6, 8, 9, 10]
    assert [int(df["seq"].iloc[i]) for i in (0, 1, 7, 11)] == [0, 1, 7, 11]
    assert list(df["hdr_ok"]) == [True, True, True, True, False, True, True, True, False,
                                  False, False, True]
    pd.testing.assert_frame_equal(df, parse_pcap_bytes(data, fast=False))


def test_which_frames_need_the_option_walk_on_the_fast_path(calls):
    """Only options beyond one leading NOP,NOP,timestamp are walked; a timestamp read at
    fixed offsets needs 82 captured bytes."""
    frames = [
        frame(seq=0),                                                   # no options
        frame(seq=1, opts=NOP + NOP + ts_opt(1, 2), payload=b"p" * 16),  # 82 bytes: fixed
        frame(seq=2, opts=NOP + NOP + ts_opt(3, 4)),                     # 66 bytes: walked
        frame(seq=3, opts=NOP + NOP + ts_opt(5, 6) + NOP + NOP + sack_opt(10, 20)),
        frame(seq=4, flags=0x02, opts=MSS + SACK_OK + NOP + WSCALE + NOP + NOP),
        frame(seq=5, opts=NOP + NOP + ts_opt(9, 9), payload=b"q" * 40),  # fixed
    ]
    data = ghdr() + b"".join(rec(f, SEC + i) for i, f in enumerate(frames))
    df = parse_pcap_bytes(data)
    assert "general" not in calls.kinds()
    assert calls.option_rows == [[2, 3, 4]]
    assert list(df["tsval"]) == [0, 1, 3, 5, 0, 9] and list(df["has_ts"]) == [
        False, True, True, True, False, True]
    assert list(df["sack"]) == [False, False, False, True, False, False]
    assert list(df["sack_ok"]) == [False, False, False, False, True, False]
    pd.testing.assert_frame_equal(df, parse_pcap_bytes(data, fast=False))


@pytest.mark.parametrize("linktype", [101, 228])
def test_raw_ip_never_takes_the_ethernet_path(calls, linktype):
    data = ghdr(linktype=linktype) + rec(ip4(tcp(seq=4)), SEC) + rec(ip4(tcp(seq=5)), SEC)
    df = parse_pcap_bytes(data)
    assert seqs(df) == [4, 5] and calls.general_rows == [0, 1]


# ------------------------------------------------------------------ frames at their edges

def _one(frame_bytes, **kw):
    """Parse a capture of a plain record then `frame_bytes` (so it is not at offset 24);
    both paths must agree; the second row."""
    data = ghdr(**kw) + rec(frame(seq=99), SEC) + rec(frame_bytes, SEC + 1)
    return _both(data).iloc[1]


def test_plain_segment_with_payload_has_no_timestamp():
    r = _one(frame(seq=7, payload=b"\x01\x01\x08\x0a" + b"z" * 40))
    assert (r["has_ts"], r["tsval"], r["tsecr"], r["sack"]) == (False, 0, 0, False)
    assert r["payload_len"] == 44


def test_sack_without_timestamp():
    r = _one(frame(seq=7, ack=5000, opts=NOP + NOP + sack_opt(5100, 5300),
                   payload=b"z" * 30))
    assert (r["sack"], r["sack_hi"], r["has_ts"], r["tsval"], r["sack_ok"]) == (
        True, 5300, False, 0, False)


def test_timestamp_then_sack_without_padding():
    r = _one(frame(ack=5000, opts=NOP + NOP + ts_opt(11, 12) + sack_opt(5200, 5400)
                   + NOP + NOP, payload=b"z" * 8))
    assert (r["has_ts"], r["tsval"], r["tsecr"], r["sack"], r["sack_hi"]) == (
        True, 11, 12, True, 5400)


def test_syn_options_with_a_single_nop_and_eol_padding():
    r = _one(frame(flags=0x02, opts=MSS + NOP + WSCALE + SACK_OK + EOL + EOL))
    assert (r["sack_ok"], r["has_ts"], r["sack"]) == (True, False, False)


def test_syn_ack_timestamp_after_other_options():
    r = _one(frame(flags=0x12, opts=MSS + SACK_OK + ts_opt(0x01020304, 0x0A0B0C0D) + NOP
                   + WSCALE))
    assert (r["has_ts"], r["tsval"], r["tsecr"], r["sack_ok"]) == (
        True, 0x01020304, 0x0A0B0C0D, True)


def test_options_ending_at_the_end_of_the_file():
    """The SACK-permitted option's length byte is the very last byte of the capture."""
    data = ghdr() + rec(frame(seq=1), SEC) + rec(frame(flags=0x02, opts=MSS + NOP + NOP
                                                       + SACK_OK), SEC + 1)
    df = _both(data)
    assert list(df["sack_ok"]) == [False, True]


def test_options_after_eol_are_ignored():
    r = _one(frame(flags=0x02, opts=MSS + EOL + SACK_OK + b"\x05\x02" + bytes(3)))
    assert (r["sack_ok"], r["sack"], r["has_ts"]) == (False, False, False)


def test_sack_edges_relative_to_the_ack():
    ack = 5000
    # a D-SACK block whose right edge is the ACK itself
    r = _one(frame(ack=ack, opts=NOP + NOP + sack_opt(4000, ack)))
    assert (r["sack"], r["sack_hi"]) == (True, ack)
    # two blocks, the first one higher
    r = _one(frame(ack=ack, opts=NOP + NOP + sack_opt(7000, 8000, 6000, 6500)))
    assert r["sack_hi"] == 8000
    # an empty SACK option (length 2): present, no edge
    r = _one(frame(ack=ack, opts=NOP + NOP + b"\x05\x02"))
    assert (r["sack"], r["sack_hi"]) == (True, 0)
    # across the 2^32 wrap: an edge just past it is above the ACK
    r = _one(frame(ack=2**32 - 100, opts=NOP + NOP + sack_opt(2**32 - 50, 2**32 - 10,
                                                             2**32 - 10, 50)))
    assert r["sack_hi"] == 50


def test_sack_blocks_are_only_those_the_length_announces():
    """One block, then a timestamp whose value would be a far higher "edge" if read as a
    second block; in the same capture a segment with two blocks (so the block loop does
    look at a second block for the batch)."""
    ack = 5000
    one = frame(seq=1, ack=ack, opts=NOP + NOP + sack_opt(5100, 5200) + NOP + NOP
                + ts_opt(ack + 90_000, ack + 90_000))
    two = frame(seq=2, ack=ack, opts=NOP + NOP + sack_opt(5300, 5400, 5500, 5600))
    data = ghdr() + rec(one, SEC) + rec(two, SEC + 1)
    df = _both(data)
    assert list(df["sack_hi"]) == [5200, 5600]
    assert list(df["tsval"]) == [ack + 90_000, 0]


def test_zero_ip_total_length_gives_no_payload():
    """TCP segmentation offload: the captured IP header says total length 0."""
    r = _one(eth(ip4(tcp(seq=3, payload=b"z" * 100), total=0)))
    assert (r["ip_len"], r["payload_len"], r["hdr_ok"], r["seq"]) == (0, 0, True, 3)


def test_fragments():
    first = _one(eth(ip4(tcp(seq=3, payload=b"z" * 8), frag=0x2000)))  # MF, offset 0
    assert (first["hdr_ok"], first["seq"], first["sport"]) == (True, 3, 1234)
    later = _one(eth(ip4(tcp(seq=3), frag=0x0002)))      # offset 16 bytes, last fragment
    assert (later["hdr_ok"], later["seq"], later["sport"], later["proto"]) == (
        False, 0, 0, 6)


@pytest.mark.parametrize("doff,ok", [(4, False), (5, True)])
def test_tcp_data_offset_below_twenty_bytes(doff, ok):
    r = _one(eth(ip4(tcp(seq=3, doff=doff))))
    assert (r["hdr_ok"], r["seq"]) == (ok, 3)


def test_only_ethertype_ipv4_is_parsed_as_ip():
    r = _one(eth(ip4(tcp(seq=3)), et=0x88B5))
    assert (r["ethertype"], r["proto"], r["src"], r["hdr_ok"]) == (0x88B5, 0, 0, False)


@pytest.mark.parametrize("vihl", [0x65, 0x44])
def test_a_bad_ip_header_leaves_every_ip_field_zero(vihl):
    r = _one(eth(ip4(tcp(seq=3), vihl=vihl)))
    assert (r["src"], r["dst"], r["proto"], r["ip_len"], r["ip_id"], r["hdr_ok"],
            r["seq"]) == (0, 0, 0, 0, 0, False, 0)


def _sweep(f, header=b"", linktype=1):
    """(k, row) for the frame captured with every snap length k: each record behind a
    plain one, so it is never at the start of the file."""
    out = []
    for k in range(0, len(f) + 1):
        data = (ghdr(linktype=linktype) + rec(header + ip4(tcp(seq=99)), SEC)
                + rec(f[:k], SEC + 1, orig=len(f)))
        out.append((k, _both(data).iloc[1]))
    return out


def test_vlan_tags_by_snap_length():
    inner = ip4(tcp(seq=3))
    f = eth(inner, tags=((0x8100, 7),))
    for k, r in _sweep(f, header=bytes(12) + b"\x08\x00"):
        tag = k >= 18
        assert (r["vlan"], r["ethertype"]) == ((7, 0x0800) if tag else
                                               (-1, 0x8100 if k >= 14 else 0)), k
        assert r["proto"] == (6 if k >= 38 else 0), k


def test_qinq_outer_tag_is_the_vlan_and_a_third_tag_is_not_read():
    inner = ip4(tcp(seq=3))
    r = _one(eth(inner, tags=((0x88A8, 100), (0x8100, 200))))
    assert (r["vlan"], r["ethertype"], r["proto"], r["seq"]) == (100, 0x0800, 6, 3)
    r = _one(eth(inner, tags=((0x88A8, 0), (0x8100, 5))))  # priority tag: VLAN 0
    assert r["vlan"] == 0
    r = _one(eth(inner, tags=((0x8100, 1), (0x8100, 2), (0x8100, 3))))
    assert (r["vlan"], r["ethertype"], r["proto"]) == (1, 0x8100, 0)


@pytest.mark.parametrize("linktype,header", [
    (113, struct.pack(">HHH8sH", 0, 1, 6, b"\x02" * 8, 0x0800)),
    (276, struct.pack(">HHIHBB8s", 0x0800, 0, 3, 1, 0, 6, b"\x02" * 8))])
def test_linux_cooked_by_snap_length(linktype, header):
    f = header + ip4(tcp(seq=3))
    for k, r in _sweep(f, header=header, linktype=linktype):
        assert r["ethertype"] == (0x0800 if k >= len(header) else 0), k
        assert r["proto"] == (6 if k >= len(header) + 20 else 0), k


# ------------------------------------------------------------------ the cache

def test_cache_hit_gives_back_exactly_the_parsed_attrs(tmp_path):
    (tmp_path / "pcap").mkdir()
    p = tmp_path / "pcap" / "h1-eth0.pcap"
    p.write_bytes(ghdr(nano=True) + records(3) + JUNK + records(3, sec=SEC + 3)
                  + b"\x01\x02")
    first = read_pcap(p)
    again = read_pcap(p)
    assert again.attrs == dict(first.attrs, cached=True)
    assert first.attrs["nano"] is True and first.attrs["partial"] is True
    pd.testing.assert_frame_equal(first, again)


def test_cache_false_ignores_a_valid_cache(tmp_path):
    p = tmp_path / "h1-eth0.pcap"
    p.write_bytes(ghdr() + records(2))
    read_pcap(p)
    assert read_pcap(p).attrs["cached"] is True
    assert read_pcap(p, cache=False).attrs["cached"] is False


def test_cache_of_a_pcap_outside_a_run_directory_is_beside_it(tmp_path):
    d = tmp_path / "captures"
    d.mkdir()
    p = d / "x.pcap"
    p.write_bytes(ghdr() + records(2))
    read_pcap(p)
    assert (d / "analysis-cache" / "x.pcap.parquet").exists()
    assert not (tmp_path / "analysis-cache").exists()
