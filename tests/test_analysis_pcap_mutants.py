"""analysis/pcap.py: what the first parser tests left unchecked (benchmarks/mutation_score.py
found it by planting bugs): address conversion at its edges, the Parquet cache's stored
stamp and what a cache hit gives back for a partial capture, the errors naming the file,
`read_pcaps`, and resynchronisation in nanosecond captures (fractions above 10^6)."""
import struct

import pyarrow.parquet as pq
import pytest
from scapy.layers.inet import IP, TCP

from incastlab.analysis import pcap
from incastlab.analysis import pcaprecords as framing
from incastlab.analysis.pcap import PcapError, ip_to_int, ip_to_str, parse_pcap_bytes, read_pcap
from incastlab.analysis.synthetic import write_pcap

T0 = 1_700_000_000.0
REC = 16 + 14 + 40 + 100  # record header, Ethernet, IP+TCP, payload


def _pkts(n=5, step=0.001):
    return [(i * step, IP(src="10.0.0.1", dst="10.0.0.2", id=10 + i)
             / TCP(sport=1234, dport=80, seq=1000 + 100 * i, flags="PA") / (b"a" * 100))
            for i in range(n)]


def test_ip_to_str_every_octet_in_place():
    assert ip_to_str(0x0A010203) == "10.1.2.3"
    assert ip_to_str(0xFFFEFDFC) == "255.254.253.252"
    assert ip_to_str(0) == "0.0.0.0"
    import numpy as np
    assert ip_to_str(np.uint32(0xC0A80001)) == "192.168.0.1"
    assert ip_to_str(np.array([0x0A000001, 0x7F000001], np.uint32)) == ["10.0.0.1",
                                                                        "127.0.0.1"]
    assert ip_to_str([0x01020304]) == ["1.2.3.4"]


def test_ip_to_int_edges():
    assert ip_to_int("10.1.2.3") == 0x0A010203
    assert ip_to_int("255.254.253.252") == 0xFFFEFDFC
    assert ip_to_int("0.0.0.0") == 0 and ip_to_int("255.255.255.255") == 0xFFFFFFFF
    for text in ("256.0.0.1", "1.2.3.256", "1.2.3", "1.2.3.4.5", "-1.0.0.0"):
        with pytest.raises(ValueError, match=rf"not an IPv4 address: '{text}'"):
            ip_to_int(text)


def _partial_file(tmp_path):
    """A run directory's capture whose last record is cut 10 bytes short."""
    (tmp_path / "pcap").mkdir()
    p = tmp_path / "pcap" / "h1-eth0.pcap"
    write_pcap(p, _pkts(), T0)
    p.write_bytes(p.read_bytes()[:-10])
    return p


def test_cache_stores_its_stamp_and_gives_back_a_partial_captures_attrs(tmp_path):
    p = _partial_file(tmp_path)
    first = read_pcap(p)
    assert first.attrs["cached"] is False and first.attrs["partial"] is True
    assert first.attrs["bytes_skipped"] == REC - 10 and first.attrs["reason"]
    cache = tmp_path / "analysis-cache" / "h1-eth0.pcap.parquet"
    meta = {k.decode(): v.decode() for k, v in pq.read_schema(cache).metadata.items()
            if k.startswith(b"incastlab.")}
    st = p.stat()
    assert meta == {"incastlab.size": str(st.st_size), "incastlab.mtime_ns": str(st.st_mtime_ns),
                    "incastlab.parser_version": str(pcap.PARSER_VERSION),
                    "incastlab.iface": "h1-eth0", "incastlab.partial": "True",
                    "incastlab.bytes_skipped": str(REC - 10),
                    "incastlab.reason": first.attrs["reason"]}
    assert not list(tmp_path.glob("**/*.tmp*"))  # written atomically, nothing left over
    again = read_pcap(p)
    assert again.attrs["cached"] is True
    assert (again.attrs["partial"], again.attrs["bytes_skipped"], again.attrs["reason"],
            again.attrs["iface"]) == (True, REC - 10, first.attrs["reason"], "h1-eth0")
    assert len(again) == 4 and list(again["seq"]) == [1000, 1100, 1200, 1300]
    complete = tmp_path / "pcap" / "h2-eth0.pcap"
    write_pcap(complete, _pkts(), T0)
    read_pcap(complete)
    hit = read_pcap(complete)
    assert hit.attrs["cached"] is True and hit.attrs["partial"] is False
    assert hit.attrs["bytes_skipped"] == 0 and hit.attrs["reason"] == ""


def test_cache_misses_on_another_iface_or_parser_version(tmp_path, monkeypatch):
    p = _partial_file(tmp_path)
    read_pcap(p)
    other = read_pcap(p, iface="renamed")
    assert other.attrs["cached"] is False and (other["iface"] == "renamed").all()
    assert read_pcap(p, iface="renamed").attrs["cached"] is True
    monkeypatch.setattr(pcap, "PARSER_VERSION", pcap.PARSER_VERSION + 1)
    assert read_pcap(p, iface="renamed").attrs["cached"] is False


def test_no_cache_means_nothing_written(tmp_path):
    p = _partial_file(tmp_path)
    df = read_pcap(p, cache=False)
    assert df.attrs["cached"] is False and len(df) == 4
    assert not (tmp_path / "analysis-cache").exists()
    assert pcap.read_pcaps(tmp_path / "pcap", cache=False)["h1-eth0"].attrs["cached"] is False
    assert not (tmp_path / "analysis-cache").exists()


def test_errors_name_the_file(tmp_path):
    empty = tmp_path / "e.pcap"
    empty.write_bytes(b"")
    with pytest.raises(PcapError) as info:
        read_pcap(empty)
    assert str(info.value) == f"{empty}: empty file"
    bad = tmp_path / "b.pcap"
    bad.write_bytes(b"x" * 40)
    with pytest.raises(PcapError) as info:
        read_pcap(bad)
    assert str(info.value).startswith(f"{bad}: not a classic pcap file")
    one = tmp_path / "one.pcap"
    one.write_bytes(b"x")  # one byte: not empty, too short
    with pytest.raises(PcapError, match=f"{one}: too short"):
        read_pcap(one)


def test_read_pcaps_every_pcap_by_name(tmp_path):
    assert pcap.read_pcaps(tmp_path / "missing") == {}
    d = tmp_path / "pcap"
    d.mkdir()
    write_pcap(d / "lf1-eth1.pcap", _pkts(2), T0)
    write_pcap(d / "h1-eth0.pcap", _pkts(3), T0)
    (d / "notes.txt").write_text("not a capture")
    (d / "x.PCAP.bak").write_text("nor this")
    got = pcap.read_pcaps(d)
    assert list(got) == ["h1-eth0", "lf1-eth1"]
    assert (len(got["h1-eth0"]), len(got["lf1-eth1"])) == (3, 2)
    assert (got["lf1-eth1"]["iface"] == "lf1-eth1").all()
    assert pcap.read_pcaps(d)["h1-eth0"].attrs["cached"] is True


@pytest.mark.parametrize("endianness", ["<", ">"])
def test_nanosecond_capture_resynchronises_past_garbage(tmp_path, endianness):
    """Records half a second apart carry fractions of 5*10^8 ns: above a microsecond
    capture's limit, within a nanosecond one's. Garbage between records 2 and 3 must be
    skipped and all five records kept."""
    p = tmp_path / "n.pcap"
    write_pcap(p, _pkts(step=0.5), T0 + 0.25, nano=True, endianness=endianness)
    data = p.read_bytes()
    cut = 24 + 2 * REC
    junk = bytes(range(50, 87))  # 37 bytes that are no record header
    df = parse_pcap_bytes(data[:cut] + junk + data[cut:])
    assert list(df["seq"]) == [1000, 1100, 1200, 1300, 1400]
    assert df.attrs["partial"] and df.attrs["bytes_skipped"] == 37
    frac = struct.unpack(endianness + "I", data[cut + 4:cut + 8])[0]
    assert frac == 250_000_000  # T0 + 0.25 + 2 * 0.5: a fraction only ns files allow
    assert df["t"].iloc[2] - T0 == pytest.approx(1.25, abs=1e-6)


def test_corrupt_header_in_a_nanosecond_capture(tmp_path):
    p = tmp_path / "n.pcap"
    write_pcap(p, _pkts(step=0.3), T0 + 0.1, nano=True)
    data = bytearray(p.read_bytes())
    off = 24 + 1 * REC
    data[off + 8: off + 12] = struct.pack("<I", 0x7FFFFFFF)  # the 2nd record's caplen
    df = parse_pcap_bytes(bytes(data))
    assert list(df["seq"]) == [1000, 1200, 1300, 1400]
    assert df.attrs["bytes_skipped"] == REC
    assert f"{REC} bytes at byte {off} are not records" in df.attrs["reason"]


def _cut_at_every_byte(tmp_path, pkt):
    """(snap length, row) for the packet captured with every snap length from 10 bytes
    to all of it, parsed by the fast and the general path (which must agree). The frame
    is built once; each capture is its first bytes behind a record header saying so."""
    import pandas as pd
    p = tmp_path / "full.pcap"
    write_pcap(p, [(0.0, pkt)], T0)
    whole = p.read_bytes()
    head, rec, frame = whole[:24], whole[24:40], whole[40:]
    sec, frac, _cap, orig = struct.unpack("<IIII", rec)
    full = len(frame)
    out = []
    for k in range(10, full + 1):
        data = head + struct.pack("<IIII", sec, frac, k, orig) + frame[:k]
        fast = parse_pcap_bytes(data, fast=True)
        slow = parse_pcap_bytes(data, fast=False)
        pd.testing.assert_frame_equal(fast, slow)
        out.append((k, fast.iloc[0]))
    return full, out


def test_each_field_appears_exactly_when_its_bytes_are_captured(tmp_path):
    """Ethernet (14) + IPv4 (20) + TCP (20) + NOP,NOP,TS (12) + NOP,NOP,SACK 1 block (12)
    + 100 bytes: a field is read only when every byte of it (and of the header it is
    in) was captured; sizes always come from the IP header."""
    pkt = IP(src="10.0.0.1", dst="10.0.0.2", id=77) / TCP(
        sport=1234, dport=80, seq=5000, ack=9000, flags="A", window=321,
        options=[("NOP", None), ("NOP", None), ("Timestamp", (11, 22)),
                 ("NOP", None), ("NOP", None), ("SAck", (9500, 9900))]) / (b"p" * 100)
    full, rows = _cut_at_every_byte(tmp_path, pkt)
    assert full == 14 + 20 + 44 + 100
    for k, r in rows:
        assert r["caplen"] == min(k, full) and r["frame_len"] == full
        assert r["ethertype"] == (0x0800 if k >= 14 else 0), k
        ip = k >= 34
        assert (r["src"], r["dst"], r["ip_len"], r["ip_id"], r["proto"]) == (
            (0x0A000001, 0x0A000002, 20 + 44 + 100, 77, 6) if ip else (0, 0, 0, 0, 0)), k
        tcp = k >= 54
        assert r["hdr_ok"] == tcp, k
        assert (r["sport"], r["dport"], r["seq"], r["ack"], r["flags"], r["win"],
                r["payload_len"]) == ((1234, 80, 5000, 9000, 16, 321, 100) if tcp
                                      else (0, 0, 0, 0, 0, 0, 0)), k
        ts = k >= 66
        assert (r["has_ts"], r["tsval"], r["tsecr"]) == ((True, 11, 22) if ts
                                                         else (False, 0, 0)), k
        sack = k >= 78  # NOP,NOP at 66-67, SACK kind/len at 68-69, one block 70-77
        assert (r["sack"], r["sack_hi"]) == ((True, 9900) if sack else (False, 0)), k


def test_udp_and_a_short_ip_header(tmp_path):
    from scapy.layers.inet import UDP
    pkt = IP(src="10.0.0.3", dst="10.0.0.4", id=5) / UDP(sport=53, dport=5353) / (b"u" * 30)
    full, rows = _cut_at_every_byte(tmp_path, pkt)
    for k, r in rows:
        ip, udp = k >= 34, k >= 42
        assert r["proto"] == (17 if ip else 0), k
        assert r["hdr_ok"] == udp, k
        assert (r["sport"], r["dport"], r["payload_len"]) == (
            (53, 5353, 30) if udp else (0, 0, 0)), k
    # an IP header claiming 24 bytes (one option word) with only 20 captured after it
    opt = IP(src="10.0.0.3", dst="10.0.0.4", ihl=6, options=b"\x01\x01\x01\x01") / TCP()
    p = tmp_path / "o.pcap"
    write_pcap(p, [(0.0, opt)], T0, snaplen=14 + 22)
    r = parse_pcap_bytes(p.read_bytes(), fast=False).iloc[0]
    assert (r["src"], r["proto"], r["hdr_ok"]) == (0, 0, False)


# ------------------------------------------------------------------ the record chain

def _chain(tmp_path, endianness="<", nano=False, n=5):
    p = tmp_path / f"c{endianness}{nano}.pcap"
    write_pcap(p, _pkts(n, step=0.3), T0 + 0.1, nano=nano, endianness=endianness)
    return bytearray(p.read_bytes())


def _fast(data, nano=False, endianness="<", start=24):
    import numpy as np
    buf = bytes(data)
    a = np.frombuffer(buf, np.uint8)
    h4 = framing.byte_views(buf, len(a), endianness)["h4"]
    mbuf = np.empty(len(a), bool)
    starts, end = framing._fast_segment(a, h4, start, len(a), endianness, nano, 65535, mbuf)
    return [int(x) for x in starts], end, h4


@pytest.mark.parametrize("endianness", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_a_clean_capture_is_one_fast_segment(tmp_path, endianness, nano):
    """The vectorised search finds every record of a clean file at once (the careful
    walk is only for what it cannot verify): the Speed section's promise."""
    data = _chain(tmp_path, endianness, nano)
    starts, end, _ = _fast(data, nano, endianness)
    assert starts == [24 + i * REC for i in range(5)] and end == len(data)
    # from the second record on, too
    assert _fast(data, nano, endianness, start=24 + REC)[0] == [24 + i * REC for i in
                                                                range(1, 5)]
    # a start that is no record start gives nothing
    assert _fast(data, nano, endianness, start=25)[:2] == ([], 25)


def test_fast_segment_stops_where_the_chain_breaks(tmp_path):
    data = _chain(tmp_path)
    # the last record cut 10 bytes short: the fast path keeps the four before it
    starts, end, _ = _fast(data[:-10])
    assert starts == [24 + i * REC for i in range(4)] and end == 24 + 4 * REC
    # the third record's fraction at its limit (10^6 - 1 us) is fine; at 10^6 it is not
    ok = bytearray(data)
    ok[24 + 2 * REC + 4: 24 + 2 * REC + 8] = struct.pack("<I", 999_999)
    assert _fast(ok)[0] == [24 + i * REC for i in range(5)]
    bad = bytearray(data)
    bad[24 + 2 * REC + 4: 24 + 2 * REC + 8] = struct.pack("<I", 1_000_000)
    assert _fast(bad)[0] == [24, 24 + REC]
    # fewer than 16 bytes left: no record
    assert _fast(data[:24 + 15])[:2] == ([], 24)


def test_walk_edges(tmp_path):
    data = bytes(_chain(tmp_path))
    h4 = framing.byte_views(data, len(data), "<")["h4"]
    n = len(data)
    assert framing._walk(h4, 24, n, 65535, False) == ([24 + i * REC for i in range(5)], n, None)
    assert framing._walk(h4, 24, n, 65535, False, limit=2) == ([24, 24 + REC], 24 + 2 * REC,
                                                            None)
    out, off, why = framing._walk(h4, 24, n - 3, 65535, False)
    assert (out, off, why) == ([24 + i * REC for i in range(4)], 24 + 4 * REC,
                               f"last record truncated at byte {24 + 4 * REC}")
    # a cut inside the header of the next record: trailing bytes
    cut = 24 + 2 * REC + 7
    assert framing._walk(h4, 24, cut, 65535, False) == ([24, 24 + REC], 24 + 2 * REC,
                                                     "7 trailing bytes (truncated record "
                                                     "header)")
    # a record captured with no bytes (caplen 0) ends the file exactly: no problem
    empty = struct.pack("<IIII", int(T0) + 9, 0, 0, 60)
    whole = data + empty
    h4w = framing.byte_views(whole, len(whole), "<")["h4"]
    assert framing._walk(h4w, 24, len(whole), 65535, False)[1:] == (len(whole), None)
    df = parse_pcap_bytes(whole)
    assert len(df) == 6 and not df.attrs["partial"] and df["caplen"].iloc[-1] == 0
    # implausible: fraction at 10^6 us, caplen above frame length, caplen above the cap
    for field, value in ((4, 1_000_000), (8, 200), (8, 300_000)):
        broken = bytearray(data)
        at = 24 + REC
        if field == 8 and value == 300_000:
            broken[at + 12: at + 16] = struct.pack("<I", 300_000)
        broken[at + field: at + field + 4] = struct.pack("<I", value)
        hb = framing.byte_views(bytes(broken), n, "<")["h4"]
        assert framing._walk(hb, 24, n, 65535, False) == (
            [24], at, f"implausible record header at byte {at}"), (field, value)


def test_columns_have_the_documented_types(tmp_path):
    """The module docstring's column types, on both paths and on an empty capture."""
    import numpy as np
    expected = {"t": np.float64, "frame_len": np.uint32, "caplen": np.uint32,
                "ethertype": np.uint16, "vlan": np.int32, "src": np.uint32,
                "dst": np.uint32, "proto": np.uint8, "ip_len": np.uint16, "ip_id": np.uint16,
                "sport": np.uint16, "dport": np.uint16, "seq": np.uint32, "ack": np.uint32,
                "flags": np.uint8, "win": np.uint16, "payload_len": np.int32, "sack": bool,
                "sack_hi": np.uint32, "sack_ok": bool, "has_ts": bool, "tsval": np.uint32,
                "tsecr": np.uint32, "hdr_ok": bool}
    p = tmp_path / "t.pcap"
    write_pcap(p, _pkts(3), T0)
    data = p.read_bytes()
    header_only = data[:24]
    for df in (parse_pcap_bytes(data, iface="x"), parse_pcap_bytes(data, fast=False),
               parse_pcap_bytes(header_only)):
        assert list(df.columns) == pcap.COLUMNS
        assert {c: df[c].dtype for c in expected} == {c: np.dtype(t) for c, t in
                                                      expected.items()}
        assert str(df["iface"].dtype) == "category"
    df = parse_pcap_bytes(data, iface="x")
    assert df.attrs == {"partial": False, "bytes_skipped": 0, "reason": "", "nano": False,
                        "snaplen": 65535, "linktype": 1, "iface": "x"}
    assert list(df["vlan"]) == [-1, -1, -1] and list(df["iface"]) == ["x", "x", "x"]
    arr = np.frombuffer(data, np.uint8)  # an array in: the same rows
    assert parse_pcap_bytes(arr).equals(parse_pcap_bytes(data))
