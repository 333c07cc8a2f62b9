"""ECN marking (docs/ecn.md) without root: the spec's fields and refusals, the marker's
map layouts against the built object's BTF, the per-second mark table's arithmetic,
and the captures' CE / ECE / CWR parsing on pcaps whose marks we placed."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest
from scapy.layers.inet import IP, TCP

from incastlab import bpf, ecn
from incastlab.analysis import ecn as aecn
from incastlab.analysis.pcap import parse_pcap_bytes
from incastlab.analysis.synthetic import write_pcap
from incastlab.capture import ecn_sampler
from incastlab.spec import SpecError, load_spec
from incastlab.spec.sweeps import expand_sweep
from incastlab.topologies.runformat import ECN_COUNTERS, ECN_MARKS


# ------------------------------------------------------------------ spec

def _errors(overrides):
    with pytest.raises(SpecError) as info:
        load_spec(None, overrides)
    return "\n".join(info.value.errors)


def test_threshold_in_the_queue_unit_is_taken():
    t = load_spec(None, ["topology.ecn_threshold_packets=20"]).topology
    assert ecn.EcnMarking.of_topology(t) == ecn.EcnMarking(20, "packets")
    assert ecn.EcnMarking.of_topology(load_spec(None, []).topology) is None


def test_byte_threshold_with_a_byte_queue():
    t = load_spec(None, ["topology.queue_bytes=151400",
                         "topology.ecn_threshold_bytes=30280"]).topology
    assert ecn.EcnMarking.of_topology(t) == ecn.EcnMarking(30280, "bytes")
    msg = _errors(["topology.queue_bytes=151400", "topology.ecn_threshold_bytes=151400"])
    assert "topology.ecn_threshold_bytes: 151400 is not below topology.queue_bytes" in msg
    msg = _errors(["topology.queue_bytes=151400", "topology.ecn_threshold_packets=20"])
    assert "the switch queues count bytes: give topology.ecn_threshold_bytes" in msg


@pytest.mark.parametrize("k", [100, 101, 5000])
def test_threshold_at_or_above_the_queue_is_refused(k):
    msg = _errors([f"topology.ecn_threshold_packets={k}"])
    assert f"topology.ecn_threshold_packets: {k} is not below topology.queue_packets = 100" \
        in msg
    assert "give 0 to 99" in msg


@pytest.mark.parametrize("value", ['"20"', "20.5", "true", "-1", "{a = 1}"])
def test_wrong_types_name_the_field(value):
    msg = _errors([f"topology.ecn_threshold_packets={value}"])
    assert "topology.ecn_threshold_packets:" in msg and "is not an integer from 0" in msg


def test_threshold_in_the_other_unit_is_refused():
    msg = _errors(["topology.ecn_threshold_bytes=3000"])
    assert "topology.ecn_threshold_bytes: 3000 bytes, but the switch queues count packets" \
        in msg and "topology.ecn_threshold_packets instead" in msg


def test_both_thresholds_are_refused():
    msg = _errors(["topology.ecn_threshold_packets=20", "topology.ecn_threshold_bytes=3000"])
    assert "give one, in the unit of the queue's limit" in msg


@pytest.mark.parametrize("unit", ["packets", "bytes"])
def test_off_is_no_marking_and_sweeps_beside_a_threshold(unit):
    queue = "queue_packets=100" if unit == "packets" else "queue_bytes=151400"
    t = load_spec(None, [f"topology.{queue}", f'topology.ecn_threshold_{unit}="off"']).topology
    assert ecn.EcnMarking.of_topology(t) is None
    spec = load_spec(None, [f"topology.{queue}", f'topology.ecn_threshold_{unit}=[20, "off"]'],
                     allow_sweep=True)
    points = [(label, ecn.EcnMarking.of_topology(single.topology))
              for label, single in expand_sweep(spec)]
    assert points == [(f"ecn_threshold_{unit}=20,rep=1", ecn.EcnMarking(20, unit)),
                      (f"ecn_threshold_{unit}=off,rep=1", None)]


def test_off_beside_the_other_units_threshold_is_not_both():
    t = load_spec(None, ["topology.ecn_threshold_packets=20",
                         'topology.ecn_threshold_bytes="off"']).topology
    assert ecn.EcnMarking.of_topology(t) == ecn.EcnMarking(20, "packets")


def test_a_word_other_than_off_is_refused_naming_both_choices():
    msg = _errors(['topology.ecn_threshold_packets="none"'])
    assert "topology.ecn_threshold_packets: 'none' is not an integer from 0 to 100000 " \
        "(packets) or 'off'" in msg


def test_threshold_just_below_the_queue_is_taken():
    assert load_spec(None, ["topology.ecn_threshold_packets=99"]).topology \
        .ecn_threshold_packets == 99


# ------------------------------------------------------------------ the marker's maps

def _btf_sizes() -> dict[str, int]:
    obj = bpf.object_path(ecn.OBJECT)
    out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(obj)],
                         capture_output=True, text=True, check=True).stdout
    return {t["name"]: t["size"] for t in json.loads(out)["types"]
            if t.get("kind") == "STRUCT" and t.get("name", "").startswith("ecn_")}


def test_packed_layouts_match_the_object():
    try:
        sizes = _btf_sizes()
    except (ecn.bpf.BpfNotBuilt, FileNotFoundError) as exc:
        pytest.skip(f"the BPF object is not built here: {exc}")
    assert sizes["ecn_port_key"] == len(ecn.port_key(1, 2)) == 16
    assert sizes["ecn_conf"] == len(ecn.port_conf(20, 100, False)) == 24
    assert sizes["ecn_stats"] == ecn.STATS_SIZE == 64


def test_packing_is_little_endian_fields_in_order():
    assert ecn.port_key(0x0102, 7) == bytes([2, 1, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0])
    c = ecn.port_conf(20, 100, True)
    assert c[0] == 20 and c[8] == 100 and c[16] == 1
    raw = b"".join(int(i + 1).to_bytes(8, "little") for i in range(8))
    assert ecn.parse_stats(raw) == {n: i + 1 for i, n in enumerate(ecn.STAT_FIELDS)}


def test_stat_fields_are_the_sampler_columns():
    assert tuple(ECN_COUNTERS.fields[4:]) == ecn.STAT_FIELDS
    rows = ecn_sampler.rows({3: dict.fromkeys(ecn.STAT_FIELDS, 5)}, {3: "lf1-eth2"}, 12.5)
    assert rows == [["12.500000", "lf1", 2, "lf1-eth2", 5, 5, 5, 5, 5, 5, 5, 5]]
    assert ecn_sampler.parse_slots("0=lf1-eth1,7=sp2-eth3") == {0: "lf1-eth1", 7: "sp2-eth3"}


# ------------------------------------------------------------------ the mark table

def _counters(samples):
    """samples: (t, iface, marks, ce_arrived, full) cumulative."""
    rows = []
    for t, iface, marks, ce, full in samples:
        rows.append({"t": t, "switch": iface.split("-")[0], "port": 1, "iface": iface,
                     "in_pkts": 0, "in_bytes": 0, "out_pkts": 0, "out_bytes": 0,
                     "marks": marks, "ce_arrived": ce, "not_ect_over": 0, "full": full})
    return pd.DataFrame(rows, columns=ECN_COUNTERS.fields)


def test_marks_per_second_difference_and_bin():
    t0 = 1000.0
    df = _counters([
        (1000.2, "lf1-eth1", 3, 0, 0),   # from 0 at attach: 3 in second 0
        (1000.9, "lf1-eth1", 10, 1, 0),  # +7 in second 0
        (1001.1, "lf1-eth1", 10, 1, 0),  # nothing new: no row for second 1
        (1002.4, "lf1-eth1", 25, 1, 2),  # +15 in second 2
        (1000.5, "lf1-eth2", 4, 0, 0),   # another port, interleaved in time
        (1003.0, "lf1-eth2", 4, 0, 0),
    ]).sample(frac=1, random_state=1)    # the sampler's order must not matter
    out = aecn.marks_per_second(df, t0)
    assert list(out.columns) == ECN_MARKS.fields
    got = {(r.iface, r.second): (r.marks, r.ce_arrived, r.full) for r in out.itertuples()}
    assert got == {("lf1-eth1", 0): (10, 1, 0), ("lf1-eth1", 2): (15, 0, 2),
                   ("lf1-eth2", 0): (4, 0, 0)}
    totals = aecn.port_totals(df)
    per_port = out.groupby("iface")["marks"].sum()
    assert (per_port == totals["marks"]).all()
    assert out["marks"].dtype == np.int64


def test_marks_before_the_run_start_land_in_negative_seconds():
    out = aecn.marks_per_second(_counters([(999.5, "lf1-eth1", 2, 0, 0)]), 1000.0)
    assert out[["second", "marks"]].values.tolist() == [[-1, 2]]


def test_no_counters_give_an_empty_table():
    assert list(aecn.marks_per_second(None, 0.0).columns) == ECN_MARKS.fields


# ------------------------------------------------------------------ CE in the captures

def _seg(i, tos, flags="A", src="10.0.0.1", dst="10.0.0.2"):
    return (i * 0.001, IP(src=src, dst=dst, tos=tos, id=i) / TCP(
        sport=5001, dport=80, seq=1 + 100 * i, flags=flags) / (b"x" * 100))


@pytest.mark.parametrize("fast", [True, False])
def test_ecn_field_and_echo_flags_parsed(tmp_path, fast):
    # DSCP bits set too (tos 0xb8 = EF): only the low two bits are the ECN field
    pkts = [_seg(0, 0x00), _seg(1, 0x02), _seg(2, 0x01), _seg(3, 0x03), _seg(4, 0xBB),
            _seg(5, 0xB8), _seg(6, 0x02, flags="AE", src="10.0.0.2", dst="10.0.0.1"),
            _seg(7, 0x02, flags="AC")]
    path = tmp_path / "h2-eth0.pcap"
    write_pcap(path, pkts, 1e9)
    df = parse_pcap_bytes(path.read_bytes(), iface="h2-eth0", fast=fast)
    assert df["ecn"].tolist() == [0, 2, 1, 3, 3, 0, 2, 2]
    counts = aecn.captured_ecn(df, host_ip=0x0A000002)
    assert counts == {"ce": 2, "ect": 4, "not_ect": 2, "ece": 1, "cwr": 1, "ce_in": 2}


def test_ce_towards_another_host_is_not_counted_in(tmp_path):
    path = tmp_path / "h1-eth0.pcap"
    write_pcap(path, [_seg(0, 0x03), _seg(1, 0x03, src="10.0.0.2", dst="10.0.0.1")], 1e9)
    df = parse_pcap_bytes(path.read_bytes(), iface="h1-eth0")
    assert aecn.captured_ecn(df, host_ip=0x0A000001)["ce_in"] == 1
