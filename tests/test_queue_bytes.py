"""Switch buffers in bytes without root: queue_bytes against queue_packets in the
topology, the bfifo tc builds, the fabric map (issue 16 item 2)."""
from __future__ import annotations

import json

import pytest

from incastlab.topologies.fabricmap import FabricError, FabricMap
from incastlab.topologies.leafspine import DEFAULT_QUEUE_PACKETS, LeafSpineTopo, StarTopo, \
    TopologyError
from incastlab.topologies.links import tc_commands


def test_neither_limit_means_the_default_packet_limit():
    topo = LeafSpineTopo(2, 2, 2)
    assert (topo.queue_packets, topo.queue_bytes) == (DEFAULT_QUEUE_PACKETS, None)
    assert all(info["queue_packets"] == DEFAULT_QUEUE_PACKETS and "queue_bytes" not in info
               for _a, _b, info in topo.links(withInfo=True))


def test_a_byte_limit_replaces_the_packet_limit_on_every_link():
    topo = LeafSpineTopo(2, 2, 2, queue_bytes=30_280)
    assert (topo.queue_packets, topo.queue_bytes) == (None, 30_280)
    for _a, _b, info in topo.links(withInfo=True):
        assert info["queue_bytes"] == 30_280 and "queue_packets" not in info
    fmap = topo.fabric_map()
    assert fmap.queue_unit == "bytes"
    for e in fmap.egresses():
        if e.kind == "host-uplink":  # hosts keep their deep per-connection FIFOs
            assert (e.queue_packets, e.queue_bytes, e.queue_unit) == (None, None, None)
        else:
            assert (e.queue_packets, e.queue_bytes, e.queue_unit) == (None, 30_280, "bytes")


def test_both_limits_are_refused_naming_both():
    with pytest.raises(TopologyError, match=r"^queue_bytes \(30000\) and queue_packets "
                                            r"\(20\): give one of them, not both"):
        LeafSpineTopo(2, 2, 2, queue_packets=20, queue_bytes=30_000)
    with pytest.raises(TopologyError, match="not both"):
        StarTopo(senders=2, queue_packets=20, queue_bytes=30_000)


@pytest.mark.parametrize("kw,message", [
    ({"queue_bytes": 1513}, r"queue_bytes must be from 1514 to 100000000, got 1513"),
    ({"queue_bytes": 9013, "mtu": 9000}, r"queue_bytes must be from 9014 "),
    ({"queue_bytes": 100_000_001}, r"queue_bytes must be from 1514 "),
    ({"queue_bytes": 20_000.0}, r"queue_bytes must be an integer"),
    ({"queue_bytes": 20_000, "delay": "1ms"}, r"queue_bytes cannot be combined with delay"),
])
def test_a_byte_limit_holds_at_least_one_frame(kw, message):
    with pytest.raises(TopologyError, match=message):
        LeafSpineTopo(2, 2, 2, **kw)
    # exactly one frame is a queue that can hold a packet
    assert LeafSpineTopo(2, 2, 2, queue_bytes=1514).queue_bytes == 1514


def test_tc_builds_a_bfifo_of_the_byte_limit():
    cmds = tc_commands("lf1-eth1", 20.0, None, None, queue_bytes=30_280)
    assert cmds[2] == ["tc", "qdisc", "replace", "dev", "lf1-eth1", "parent", "1:1",
                       "handle", "10:", "bfifo", "limit", "30280"]
    # the same shaping as with a packet limit: only the child differs
    assert cmds[:2] == tc_commands("lf1-eth1", 20.0, 20, None)[:2]
    with pytest.raises(ValueError, match="exactly one"):
        tc_commands("lf1-eth1", 20.0, 20, None, queue_bytes=30_280)
    with pytest.raises(ValueError, match="exactly one"):
        tc_commands("lf1-eth1", 20.0, None, None)
    with pytest.raises(ValueError, match="netem"):
        tc_commands("lf1-eth1", 20.0, None, "2ms", queue_bytes=30_280)


def test_the_map_round_trips_a_byte_limit_and_refuses_two():
    fmap = LeafSpineTopo(2, 2, 2, queue_bytes=45_000).fabric_map()
    data = json.loads(fmap.to_json())
    assert data["queue_bytes"] == 45_000 and data["queue_packets"] is None
    assert data["links"][0]["queue_bytes"] == 45_000
    assert data["links"][0]["queue_packets"] is None
    assert FabricMap.from_dict(data) == fmap
    both = dict(data, queue_packets=20)
    with pytest.raises(FabricError, match=r"queue_packets, queue_bytes: exactly one must be "
                                          r"set, got 20 and 45000"):
        FabricMap.from_dict(both)
    data["links"][0]["queue_packets"] = 20
    with pytest.raises(FabricError, match=r"links\[0\]: exactly one of queue_packets and "
                                          r"queue_bytes must be set"):
        FabricMap.from_dict(data)
    neither = json.loads(LeafSpineTopo(2, 2, 2).fabric_map().to_json())
    neither["queue_packets"] = None
    with pytest.raises(FabricError, match="exactly one must be set, got None and None"):
        FabricMap.from_dict(neither)
