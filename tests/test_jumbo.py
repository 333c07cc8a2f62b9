"""Jumbo frames without root: the MTU in the topology, the tc commands, the fabric map and
the framing arithmetic of the cost model (issue 16 item 1)."""
from __future__ import annotations

import json

import pytest

from incastlab.analysis import alphabeta
from incastlab.jobs.ring_bound import ring_bound
from incastlab.topologies import fabricmap
from incastlab.topologies.fabricmap import FabricError, FabricMap
from incastlab.topologies.leafspine import LeafSpineTopo, StarTopo, TopologyError
from incastlab.topologies.links import burst_bytes, gso_segments, tc_commands


# ---------------------------------------------------------------- framing by hand

def test_frame_and_segment_sizes_by_hand():
    # Ethernet 14 in front of the IP packet; IPv4 20 + TCP 20 + timestamps 12 inside it
    assert (fabricmap.frame_bytes(1500), fabricmap.mss_bytes(1500)) == (1514, 1448)
    assert (fabricmap.frame_bytes(9000), fabricmap.mss_bytes(9000)) == (9014, 8948)
    # the cost model's framing is the same arithmetic (two modules, one answer)
    for mtu in (1280, 1500, 4000, 9000):
        assert alphabeta.segment_payload(mtu) == fabricmap.mss_bytes(mtu)
        assert alphabeta.framing_factor(mtu) == fabricmap.frame_bytes(mtu) / \
            fabricmap.mss_bytes(mtu)


def test_framing_factors_at_1500_and_9000():
    assert alphabeta.framing_factor(1500) == pytest.approx(1514 / 1448)        # 1.0456
    assert alphabeta.framing_factor(9000) == pytest.approx(9014 / 8948)        # 1.0074
    # data + one 66-byte ACK per two segments (delayed ACK) on the same link
    assert alphabeta.ack_framing(1500) == pytest.approx((2 * 1514 + 66) / (2 * 1448))
    assert alphabeta.ack_framing(9000) == pytest.approx((2 * 9014 + 66) / (2 * 8948))
    assert alphabeta.ack_framing(1500) == pytest.approx(1.0684, abs=5e-5)
    assert alphabeta.ack_framing(9000) == pytest.approx(1.01106, abs=5e-5)


def test_a_ring_bound_is_smaller_with_jumbo_frames_by_the_framing_ratio():
    # 4 ranks, 1 MB, 8 Mbit/s: 2(N-1)/N * M * f' / B; only f' changes with the MTU
    small = ring_bound(4, 1e6, 8.0, mtu=1500).seconds
    jumbo = ring_bound(4, 1e6, 8.0, mtu=9000).seconds
    assert small == pytest.approx(1.5e6 * alphabeta.ack_framing(1500) / 1e6)
    assert jumbo / small == pytest.approx(alphabeta.ack_framing(9000)
                                          / alphabeta.ack_framing(1500))


# ---------------------------------------------------------------- topology

@pytest.mark.parametrize("mtu", [1280, 1500, 9000])
def test_the_mtu_reaches_every_link(mtu):
    topo = LeafSpineTopo(2, 2, 2, mtu=mtu)
    assert topo.mtu == mtu
    for _a, _b, info in topo.links(withInfo=True):
        # the default passes nothing (interfaces as before the option existed)
        assert info.get("mtu") == (None if mtu == 1500 else mtu)
    assert StarTopo(senders=3, mtu=mtu).fabric_map().mtu == mtu


@pytest.mark.parametrize("mtu", [1279, 9001, 0, 1500.0, "9000", True, None])
def test_other_mtus_are_refused_naming_the_field(mtu):
    with pytest.raises(TopologyError, match=r"^mtu must be"):
        LeafSpineTopo(2, 2, 2, mtu=mtu)


# ---------------------------------------------------------------- tc

def test_the_bucket_holds_two_frames_and_a_millisecond():
    # at MTU 1500 nothing changed: 15,000 bytes up to 120 Mbit/s, then 1 ms of the link
    assert [burst_bytes(b) for b in (20, 100, 200)] == [15_000, 15_000, 25_000]
    # at 9000 two 9,014-byte frames (18,028) beat 15,000 until 1 ms is more (144 Mbit/s)
    assert [burst_bytes(b, 9000) for b in (20, 100, 200)] == [18_028, 18_028, 25_000]


def test_tc_commands_follow_the_mtu():
    default = tc_commands("h1-eth0", 100.0, 1000, None, flow_filter="1,6 0 0 0",
                          flow_classes=2)
    assert default == tc_commands("h1-eth0", 100.0, 1000, None, flow_filter="1,6 0 0 0",
                                  flow_classes=2, mtu=1500)
    jumbo = tc_commands("h1-eth0", 100.0, 1000, None, flow_filter="1,6 0 0 0",
                        flow_classes=2, mtu=9000)
    root = next(c for c in jumbo if "classid" in c and c[c.index("classid") + 1] == "1:1")
    assert root[root.index("burst") + 1] == root[root.index("cburst") + 1] == "18028"
    leaves = [c for c in jumbo if "classid" in c and c[c.index("classid") + 1] != "1:1"]
    assert len(leaves) == 2
    for leaf in leaves:  # one jumbo frame per round-robin turn, and as the leaf's burst
        assert leaf[leaf.index("quantum") + 1] == leaf[leaf.index("burst") + 1] == "9014"
        assert leaf[leaf.index("cburst") + 1] == "18028"
    switch = tc_commands("lf1-eth1", 100.0, 20, None, mtu=9000)
    assert switch[2][-3:] == ["pfifo", "limit", "20"]


def test_gso_segments_count_segments_of_the_mtu():
    # 1 ms at 200 Mbit/s = 25,000 bytes: 17 segments of 1,448, 2 of 8,948
    assert gso_segments(200) == 17 and gso_segments(200, 9000) == 2
    # 1 Gbit/s: 125,000 bytes = 13 jumbo segments; never fewer than 2
    assert gso_segments(1000, 9000) == 13 and gso_segments(20, 9000) == 2


# ---------------------------------------------------------------- fabric map

def test_the_default_map_is_written_exactly_as_before():
    data = json.loads(LeafSpineTopo(2, 2, 2).fabric_map().to_json())
    assert "mtu" not in data and "queue_bytes" not in data
    assert all("queue_bytes" not in link for link in data["links"])


@pytest.mark.parametrize("topo", [LeafSpineTopo(2, 2, 2, mtu=9000),
                                  LeafSpineTopo(1, 2, 3, mtu=4000, queue_bytes=30_000),
                                  StarTopo(senders=3, mtu=9000, queue_bytes=100_000)],
                         ids=["2x2x2-mtu9000", "1x2x3-mtu4000-bytes", "star3-mtu9000-bytes"])
def test_round_trip_with_mtu(topo, tmp_path):
    fmap = topo.fabric_map()
    data = json.loads(fmap.to_json())
    assert data["mtu"] == topo.mtu and data["format_version"] == 1
    assert FabricMap.from_json(fmap.to_json()) == fmap
    fmap.save(tmp_path / "fabric.json")
    assert FabricMap.load(tmp_path / "fabric.json").mtu == topo.mtu


def test_an_old_map_reads_with_mtu_1500():
    data = json.loads(LeafSpineTopo(2, 2, 2).fabric_map().to_json())
    fmap = FabricMap.from_dict(data)
    assert fmap.mtu == 1500 and fmap.queue_bytes is None and fmap.queue_unit == "packets"
    del data["format_version"]  # the files written before the version existed
    assert FabricMap.from_dict(data).mtu == 1500


@pytest.mark.parametrize("value,message", [
    (9001, r"mtu must be from 1280 to 9000 bytes, got 9001"),
    (1279, r"mtu must be from 1280 to 9000 bytes, got 1279"),
    ("9000", r"mtu must be an integer"),
    (9000.0, r"mtu must be an integer"),
])
def test_a_bad_mtu_in_the_map_is_refused(value, message):
    data = json.loads(LeafSpineTopo(2, 2, 2, mtu=9000).fabric_map().to_json())
    data["mtu"] = value
    with pytest.raises(FabricError, match=message):
        FabricMap.from_dict(data)


# ---------------------------------------------------------------- the spec

def test_the_spec_mtu_reaches_the_topology():
    from incastlab.spec import load_spec, loads_spec

    assert load_spec().topology.mtu == 1500
    assert "mtu" not in load_spec().topology_kwargs()  # the Topo built as before
    spec = loads_spec("[topology]\nmtu = 9000\n")
    assert spec.topology_kwargs()["mtu"] == 9000
    assert loads_spec(spec.to_toml()) == spec
    assert load_spec(None, ["topology.mtu=[1500, 9000]"], allow_sweep=True).swept() == {
        "topology.mtu": [1500, 9000]}


@pytest.mark.parametrize("value", ["1279", "9001", "1500.0", '"9000"', "true"])
def test_the_spec_refuses_other_mtus_naming_the_field(value):
    from incastlab.spec import SpecError, loads_spec

    with pytest.raises(SpecError) as info:
        loads_spec(f"[topology]\nmtu = {value}\n")
    (error,) = info.value.errors
    assert error.startswith("topology.mtu: ") and \
        error.endswith(" is not an integer from 1280 to 9000 (bytes)")
