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


# ---------------------------------------------------------------- the spec

def _errors(text: str, overrides=()) -> list[str]:
    from incastlab.spec import SpecError, loads_spec

    with pytest.raises(SpecError) as info:
        loads_spec(text, overrides, allow_sweep=True)
    return info.value.errors


def test_the_spec_takes_a_byte_limit_instead_of_the_packet_limit():
    from incastlab.spec import load_spec, loads_spec

    default = load_spec()
    assert (default.topology.queue_packets, default.topology.queue_bytes) == (100, None)
    assert "queue_bytes" not in default.topology_kwargs()  # the Topo as before
    spec = loads_spec("[topology]\nqueue_bytes = 30280\n")
    assert (spec.topology.queue_packets, spec.topology.queue_bytes) == (None, 30_280)
    kwargs = spec.topology_kwargs()
    assert (kwargs["queue_packets"], kwargs["queue_bytes"]) == (None, 30_280)
    # the resolved spec (the run directory's spec.toml) loads back equal: no packet limit
    assert "queue_packets" not in spec.to_toml()
    assert loads_spec(spec.to_toml()) == spec
    # an override may give it too, and a sweep over it labels its runs by it
    assert load_spec(None, ["topology.queue_bytes=45000"]).topology.queue_packets is None
    from incastlab.spec import expand_sweep

    runs = expand_sweep(loads_spec("[topology]\nqueue_bytes = [15000, 30000]\n",
                                   allow_sweep=True))
    assert [label for label, _ in runs] == ["queue_bytes=15000,rep=1", "queue_bytes=30000,rep=1"]


@pytest.mark.parametrize("text,overrides,message", [
    ("[topology]\nqueue_bytes = 30000\nqueue_packets = 20\n", (),
     "topology.queue_bytes, topology.queue_packets: 30000 bytes and 20 packets; a switch "
     "queue has one limit: give one of them, not both"),
    ("[topology]\nqueue_packets = 20\n", ("topology.queue_bytes=30000",),
     "topology.queue_bytes, topology.queue_packets: 30000 bytes and 20 packets; a switch "
     "queue has one limit: give one of them, not both"),
    ("[topology]\nmtu = 9000\nqueue_bytes = 9013\n", (),
     "topology.queue_bytes: 9013 holds no frame of 9014 bytes (topology.mtu = 9000 + 14): "
     "give at least that"),
    ("[topology]\nqueue_bytes = 0\n", (),
     "topology.queue_bytes: 0 is not an integer from 1 to 100000000 (bytes)"),
    ("[topology]\nqueue_bytes = 30000.5\n", (),
     "topology.queue_bytes: 30000.5 is not an integer from 1 to 100000000 (bytes)"),
    ('[topology]\nqueue_bytes = 30000\ndelay = "1ms"\n', (),
     "topology.queue_bytes: 30000 given with topology.delay = '1ms'; netem's queue limit "
     "counts packets, so a delay needs topology.queue_packets"),
])
def test_spec_refusals_name_the_fields(text, overrides, message):
    assert _errors(text, overrides) == [message]


def test_queue_limits_in_bytes_and_as_text():
    # a packet limit holds at most that many full frames of the map's MTU
    fmap = LeafSpineTopo(2, 2, 2, queue_packets=20).fabric_map()
    assert fmap.queue_limit_bytes("lf1-eth1") == 20 * 1514
    assert fmap.queue_limit_text() == "20 packets"
    assert fmap.queue_limit_text("lf1-eth1") == "20 packets"
    jumbo = LeafSpineTopo(2, 2, 2, queue_packets=20, mtu=9000).fabric_map()
    assert jumbo.queue_limit_bytes("sp1-eth1") == 20 * 9014
    nbytes = LeafSpineTopo(2, 2, 2, queue_bytes=30_280).fabric_map()
    assert nbytes.queue_limit_bytes("lf1-eth3") == 30_280
    assert nbytes.queue_limit_text() == "30,280 bytes"
    # a host's own interface has no switch queue; an unknown one is not in the map
    assert nbytes.queue_limit_bytes("h1-eth0") is None
    assert nbytes.queue_limit_bytes("lf9-eth1") is None


def test_queue_summary_reports_the_backlog_in_both_units_and_the_configured_one():
    import pandas as pd

    from incastlab.analysis.queues import queue_summary

    fmap = LeafSpineTopo(2, 2, 2, queue_bytes=30_280).fabric_map()
    rows = [{"t": t, "switch": "lf1", "port": 1, "iface": "lf1-eth1", "backlog_bytes": b,
             "backlog_pkts": p, "drops": d, "overlimits": 0, "sent_bytes": 0, "sent_pkts": 0,
             "requeues": 0}
            for t, b, p, d in [(0.0, 0, 0, 0), (0.01, 30_280, 20, 3), (0.02, 15_140, 10, 5)]]
    (row,) = queue_summary(pd.DataFrame(rows), fmap).to_dict("records")
    assert (row["max_backlog_bytes"], row["max_backlog_pkts"]) == (30_280, 20)
    assert row["mean_backlog_bytes"] == 15_140 and row["drops"] == 5
    assert (row["limit_bytes"], row["limit_pkts"], row["limit_unit"]) == (30_280, None, "bytes")
    packets = LeafSpineTopo(2, 2, 2, queue_packets=20).fabric_map()
    (row,) = queue_summary(pd.DataFrame(rows), packets).to_dict("records")
    assert (row["limit_bytes"], row["limit_pkts"], row["limit_unit"]) == (None, 20, "packets")
