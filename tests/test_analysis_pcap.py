"""Parser tests on captures built with Scapy whose contents are known exactly."""
import struct

import numpy as np
import pandas as pd
import pytest
from scapy.layers.inet import IP, TCP, UDP, IPOption_NOP, IPOption_RR
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether

from incastlab.analysis.pcap import PcapError, ip_to_int, parse_pcap_bytes, read_pcap
from incastlab.analysis.synthetic import write_pcap

T0 = 1_700_000_000.0


def _pkts():
    """Five IPv4/TCP packets with known fields, plus options of several kinds."""
    out = []
    for i in range(5):
        out.append((i * 0.001, IP(src="10.0.0.1", dst="10.0.0.2", id=10 + i) / TCP(
            sport=1234, dport=80, seq=1000 + 100 * i, ack=77, flags="PA",
            options=[("NOP", None), ("NOP", None), ("Timestamp", (500 + i, 400 + i))])
            / (b"a" * 100)))
    return out


def _parse(tmp_path, pkts, **kw):
    p = tmp_path / "x.pcap"
    write_pcap(p, pkts, T0, **kw)
    return parse_pcap_bytes(p.read_bytes(), iface="x"), p


@pytest.mark.parametrize("nano", [False, True])
@pytest.mark.parametrize("endianness", ["<", ">"])
def test_magic_and_byte_order(tmp_path, nano, endianness):
    df, _ = _parse(tmp_path, _pkts(), nano=nano, endianness=endianness)
    assert len(df) == 5
    assert not df.attrs["partial"]
    assert df.attrs["nano"] == nano
    np.testing.assert_allclose(df["t"] - T0, [0, 0.001, 0.002, 0.003, 0.004], atol=2e-6)
    assert list(df["seq"]) == [1000, 1100, 1200, 1300, 1400]
    assert (df["ack"] == 77).all() and (df["sport"] == 1234).all() and (df["dport"] == 80).all()
    assert (df["payload_len"] == 100).all() and (df["ip_len"] == 20 + 32 + 100).all()
    assert (df["src"] == ip_to_int("10.0.0.1")).all() and (df["dst"] == ip_to_int("10.0.0.2")).all()
    assert list(df["tsval"]) == [500, 501, 502, 503, 504]
    assert list(df["tsecr"]) == [400, 401, 402, 403, 404]
    assert df["has_ts"].all() and not df["sack"].any()
    assert (df["flags"] == 0x18).all()
    assert list(df["ip_id"]) == [10, 11, 12, 13, 14]
    assert (df["iface"] == "x").all()


def test_nanosecond_resolution_kept(tmp_path):
    pkts = [(0.000000123, _pkts()[0][1])]
    df, _ = _parse(tmp_path, pkts, nano=True)
    assert abs((df["t"].iloc[0] - T0) - 123e-9) < 5e-7  # float64 epoch: ~0.2 us


def test_truncated_final_record_is_flagged_partial(tmp_path):
    p = tmp_path / "x.pcap"
    write_pcap(p, _pkts(), T0)
    data = p.read_bytes()[:-10]
    df = parse_pcap_bytes(data)
    assert len(df) == 4
    assert df.attrs["partial"] is True
    assert df.attrs["bytes_skipped"] == 16 + 14 + 152 - 10
    # a cut inside the last record *header*
    last_start = len(p.read_bytes()) - (16 + 14 + 152)
    df = parse_pcap_bytes(p.read_bytes()[: last_start + 7])
    assert len(df) == 4 and df.attrs["partial"] and df.attrs["bytes_skipped"] == 7


REC = 16 + 14 + 152  # one record of _pkts()


def test_corrupt_record_header_is_skipped_and_counted(tmp_path):
    p = tmp_path / "x.pcap"
    write_pcap(p, _pkts(), T0)
    data = bytearray(p.read_bytes())
    off = 24 + 2 * REC  # third record's caplen := absurd
    data[off + 8: off + 12] = struct.pack("<I", 0x7FFFFFFF)
    df = parse_pcap_bytes(bytes(data))
    assert list(df["seq"]) == [1000, 1100, 1300, 1400]  # the third record is gone
    assert df.attrs["partial"] and df.attrs["bytes_skipped"] == REC
    assert f"{REC} bytes at byte {off} are not records" in df.attrs["reason"]


def test_inserted_garbage_is_skipped_and_counted(tmp_path):
    p = tmp_path / "x.pcap"
    write_pcap(p, _pkts(), T0)
    data = p.read_bytes()
    cut = 24 + 2 * REC
    junk = bytes(range(7, 44))  # 37 bytes that are no record header
    df = parse_pcap_bytes(data[:cut] + junk + data[cut:])
    assert list(df["seq"]) == [1000, 1100, 1200, 1300, 1400]
    assert df.attrs["partial"] and df.attrs["bytes_skipped"] == 37


def test_corruption_near_the_end_stops_with_partial(tmp_path):
    p = tmp_path / "x.pcap"
    write_pcap(p, _pkts(), T0)
    data = bytearray(p.read_bytes())
    off = 24 + 4 * REC  # the last record: nothing after it to resynchronise on
    data[off + 8: off + 12] = struct.pack("<I", 0x7FFFFFFF)
    df = parse_pcap_bytes(bytes(data))
    assert len(df) == 4 and df.attrs["partial"] and df.attrs["bytes_skipped"] == REC
    assert "implausible" in df.attrs["reason"]


def test_bad_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(PcapError, match="too short"):
        parse_pcap_bytes(b"\xd4\xc3\xb2\xa1")
    with pytest.raises(PcapError, match="pcapng"):
        parse_pcap_bytes(struct.pack("<I", 0x0A0D0D0A) + b"\0" * 40)
    with pytest.raises(PcapError, match="not a classic pcap"):
        parse_pcap_bytes(b"hello world, this is not a pcap file")
    with pytest.raises(PcapError, match="link type"):
        parse_pcap_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 105))


def test_header_only_file_is_empty_not_partial():
    df = parse_pcap_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    assert len(df) == 0 and not df.attrs["partial"]


def test_vlan_ip_options_tcp_options_and_snaplen(tmp_path):
    pkt = IP(src="10.0.1.1", dst="10.0.2.2", id=5,
             options=[IPOption_RR(routers=["1.2.3.4"]), IPOption_NOP()]) / TCP(
        sport=5555, dport=6666, seq=42, ack=43, flags="A",
        options=[("NOP", None), ("NOP", None), ("Timestamp", (9, 8)), ("NOP", None),
                 ("NOP", None), ("SAck", (100, 200, 300, 400))]) / (b"z" * 1000)
    pkt = IP(bytes(pkt))  # let Scapy fill in IHL and data offset
    ihl = pkt[IP].ihl * 4
    doff = pkt[TCP].dataofs * 4
    assert ihl > 20 and doff > 32
    df, _ = _parse(tmp_path, [(0, pkt)], vlan=7, snaplen=128)
    r = df.iloc[0]
    assert r["vlan"] == 7 and r["ethertype"] == 0x0800
    assert r["caplen"] == 128 and r["frame_len"] == 18 + ihl + doff + 1000
    assert r["payload_len"] == 1000 and r["ip_len"] == ihl + doff + 1000
    assert (r["sport"], r["dport"], r["seq"], r["ack"]) == (5555, 6666, 42, 43)
    assert r["sack"] and r["has_ts"] and (r["tsval"], r["tsecr"]) == (9, 8)
    assert r["sack_hi"] == 400  # highest right edge of the two blocks
    assert r["hdr_ok"]


def test_syn_options_walk(tmp_path):
    syn = IP(src="10.0.0.1", dst="10.0.0.2") / TCP(
        flags="S", options=[("MSS", 1460), ("SAckOK", b""), ("Timestamp", (7, 0)),
                            ("NOP", None), ("WScale", 7)])
    df, _ = _parse(tmp_path, [(0, syn)])
    r = df.iloc[0]
    assert r["sack_ok"] and not r["sack"] and r["has_ts"] and r["tsval"] == 7
    assert r["flags"] == 0x02 and r["payload_len"] == 0


def test_non_tcp_frames_are_kept(tmp_path):
    p = tmp_path / "m.pcap"
    frames = [Ether() / ARP(), Ether() / IPv6() / UDP(), Ether() / IP(src="1.1.1.1", dst="2.2.2.2")
              / UDP(sport=53, dport=5353) / (b"q" * 30), Ether() / IP() / TCP()]
    raw = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, f in enumerate(frames):
        b = bytes(f)
        raw.append(struct.pack("<IIII", 1000 + i, 0, len(b), len(b)) + b)
    p.write_bytes(b"".join(raw))
    df = parse_pcap_bytes(p.read_bytes())
    assert len(df) == 4
    assert list(df["proto"]) == [0, 0, 17, 6]
    assert list(df["ethertype"]) == [0x0806, 0x86DD, 0x0800, 0x0800]
    assert df["payload_len"].iloc[2] == 30 and df["dport"].iloc[2] == 5353


def test_truncated_tcp_header_not_ok(tmp_path):
    df, _ = _parse(tmp_path, _pkts()[:1], snaplen=14 + 20 + 10)
    r = df.iloc[0]
    assert r["proto"] == 6 and not r["hdr_ok"] and r["ip_len"] == 152


def test_raw_ip_linktype(tmp_path):
    df, _ = _parse(tmp_path, _pkts(), ethernet=False)
    assert len(df) == 5 and (df["payload_len"] == 100).all()


def test_fast_path_survives_lookalike_payload_and_timestamp_boundary(tmp_path):
    # payload bytes that look like record headers of this very capture
    sec = 0x6500FFFE
    fake = struct.pack("<IIII", sec, 0, 20, 20) * 20
    pkts = [(i * 0.7, IP(id=i) / TCP(seq=i) / fake) for i in range(6)]  # crosses 0x65010000
    p = tmp_path / "b.pcap"
    write_pcap(p, pkts, float(sec))
    df = parse_pcap_bytes(p.read_bytes())
    assert len(df) == 6 and not df.attrs["partial"]
    assert list(df["seq"]) == list(range(6))
    assert (df["payload_len"] == len(fake)).all()


def test_many_records_fast_path_exact(tmp_path):
    # 30,000 records of 7 sizes, snap length 96: templates from Scapy, seq patched in
    templates = [bytes(Ether() / IP(id=1) / TCP(seq=0) / (b"p" * (k * 100))) for k in range(7)]
    raw = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, 1)]
    for i in range(30_000):
        frame = bytearray(templates[i % 7])
        frame[38:42] = struct.pack(">I", i)
        cap = bytes(frame[:96])
        raw.append(struct.pack("<IIII", 1_700_000_000 + i // 10_000, i % 10_000 * 100,
                               len(cap), len(frame)) + cap)
    df = parse_pcap_bytes(b"".join(raw))
    assert len(df) == 30_000 and not df.attrs["partial"]
    assert (df["seq"].to_numpy() == np.arange(30_000)).all()
    assert (df["payload_len"].to_numpy() == np.arange(30_000) % 7 * 100).all()


def test_parquet_cache_and_invalidation(tmp_path):
    (tmp_path / "pcap").mkdir()
    p = tmp_path / "pcap" / "h1-eth0.pcap"
    write_pcap(p, _pkts(), T0)
    a = read_pcap(p)
    assert not (tmp_path / "pcap" / "h1-eth0.pcap.parquet").exists(), "raw folder touched"
    assert a.attrs["cached"] is False and (a["iface"] == "h1-eth0").all()
    assert (tmp_path / "analysis-cache" / "h1-eth0.pcap.parquet").exists()
    b = read_pcap(p)
    assert b.attrs["cached"] is True and len(b) == 5
    write_pcap(p, _pkts()[:3], T0)  # new content, new size
    c = read_pcap(p)
    assert c.attrs["cached"] is False and len(c) == 3


def test_fast_path_equals_general_path(tmp_path):
    from incastlab.analysis.synthetic import scenario_tcp
    script, _ = scenario_tcp()
    script.write(tmp_path / "s.pcap", tmp_path / "r.pcap")
    mixed = tmp_path / "mixed.pcap"
    pkts = [(i * 1e-3, p) for i, (_, p) in enumerate(script.sender)]
    pkts.append((1.0, IP(src="10.0.0.9", dst="10.0.0.8", options=[IPOption_NOP()] * 4)
                 / TCP(options=[("SAck", (1, 2))]) / b"x"))
    pkts.append((1.1, IP() / UDP() / b"u"))
    write_pcap(mixed, pkts, T0, snaplen=70)
    for path in (tmp_path / "s.pcap", tmp_path / "r.pcap", mixed):
        data = path.read_bytes()
        fast = parse_pcap_bytes(data, fast=True)
        slow = parse_pcap_bytes(data, fast=False)
        pd.testing.assert_frame_equal(fast, slow)
    assert fast["sack"].sum() == 1 and (fast["caplen"] <= 70).all()


def test_unwritable_or_damaged_cache_is_only_a_miss(tmp_path):
    p = tmp_path / "h1-eth0.pcap"
    write_pcap(p, _pkts(), T0)
    # a directory in the cache's place cannot be read nor replaced, even by root
    (tmp_path / "analysis-cache" / "h1-eth0.pcap.parquet").mkdir(parents=True)
    df = read_pcap(p)
    assert len(df) == 5 and df.attrs["cached"] is False
    assert not list(tmp_path.glob("**/*.tmp*"))
    (tmp_path / "analysis-cache" / "h1-eth0.pcap.parquet").rmdir()
    (tmp_path / "analysis-cache" / "h1-eth0.pcap.parquet").write_bytes(b"garbage")
    assert len(read_pcap(p)) == 5
    assert read_pcap(p).attrs["cached"] is True  # rewritten by the previous call


@pytest.mark.parametrize("linktype,header", [
    (113, struct.pack(">HHH8sH", 0, 1, 6, b"\x02" * 8, 0x0800)),                 # SLL
    (276, struct.pack(">HHIHBB8s", 0x0800, 0, 3, 1, 0, 6, b"\x02" * 8))])        # SLL2
def test_linux_cooked_captures(linktype, header):
    ip = bytes(_pkts()[0][1])
    raw = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
    raw += struct.pack("<IIII", 1_700_000_000, 5, len(header + ip), len(header + ip))
    df = parse_pcap_bytes(raw + header + ip)
    r = df.iloc[0]
    assert (r["proto"], r["seq"], r["payload_len"], r["tsval"]) == (6, 1000, 100, 500)
