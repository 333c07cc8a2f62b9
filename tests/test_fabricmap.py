"""The typed fabric map (topologies/fabricmap.py): one format, written by the topology and
read by the controller and the analysis with the same code."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from incastlab.analysis import queues, rundir
from incastlab.controller import paths
from incastlab.controller.registry import build_settings
from incastlab.topologies.fabricmap import FORMAT_VERSION, FabricError, FabricMap
from incastlab.topologies.leafspine import LeafSpineTopo, StarTopo


def _data(**kw) -> dict:
    """fabric.json of a 2-spine, 2-leaf, 2-hosts-per-leaf fabric as parsed JSON."""
    return json.loads(LeafSpineTopo(2, 2, 2, **kw).fabric_map().to_json())


@pytest.mark.parametrize("topo", [
    LeafSpineTopo(2, 2, 2), LeafSpineTopo(3, 4, 5, host_bw=15, delay="2ms"),
    LeafSpineTopo(1, 1, 1, oversubscription=3), StarTopo(senders=4)],
    # ids fixed in the source: the default repr holds an address, different in each
    # pytest-xdist worker, which then refuse to run (different tests collected)
    ids=["2x2x2", "3x4x5-delay", "1x1x1-oversubscribed", "star4"])
def test_round_trip(topo, tmp_path):
    fmap = topo.fabric_map()
    assert FabricMap.from_json(fmap.to_json()) == fmap
    assert FabricMap.from_dict(fmap.to_dict()) == fmap
    fmap.save(tmp_path / "fabric.json")
    assert FabricMap.load(tmp_path / "fabric.json") == fmap


def test_keys_are_those_runner_and_workloads_read():
    """Version 1 keeps every key the plain-dict writer wrote, in its order (additive)."""
    data = _data()
    assert list(data) == ["format_version", "kind", "spines", "leaves", "hosts_per_leaf",
                          "host_bw_mbps", "fabric_bw_mbps", "queue_packets", "delay",
                          "subnet", "switches", "hosts", "links"]
    assert data["format_version"] == FORMAT_VERSION == 1
    assert list(data["switches"][0]) == ["name", "role", "index", "dpid"]
    assert data["hosts"][0] == {"name": "h1", "leaf": 1, "index": 1, "ip": "10.0.1.1",
                                "mac": "02:00:00:00:01:01", "leaf_port": 1, "intf": "h1-eth0"}
    assert data["links"][0] == {"node1": "h1", "port1": 0, "node2": "lf1", "port2": 1,
                                "intf1": "h1-eth0", "intf2": "lf1-eth1", "bw_mbps": 20.0,
                                "queue_packets": 100}


def test_a_file_without_version_with_the_writers_keys_reads_as_version_1():
    data = _data()
    del data["format_version"]
    assert FabricMap.from_dict(data) == LeafSpineTopo(2, 2, 2).fabric_map()


@pytest.mark.parametrize("version", [2, 0, "1", True, None])
def test_other_versions_are_refused(version):
    data = dict(_data(), format_version=version)
    with pytest.raises(FabricError, match=rf"format_version {version!r} is not supported: "
                                          r"this incastlab reads version 1"):
        FabricMap.from_dict(data)


def _set(path, value):
    """A mutation of the parsed file: set (or with value DEL, delete) data[path...]."""
    def apply(data):
        *head, last = path
        node = data
        for key in head:
            node = node[key]
        if value is DEL:
            del node[last]
        else:
            node[last] = value
    return apply


DEL = object()


@pytest.mark.parametrize("mutate,message", [
    (_set(["hosts", 0, "mac"], DEL), r"hosts\[0\]: missing field 'mac'"),
    (_set(["links", 0, "rate_mbps"], 20), r"links\[0\]: unknown field 'rate_mbps'"),
    (_set(["switches", 0, "role"], "core"), r"switches\[0\]\.role must be 'spine' or 'leaf'"),
    (_set(["switches", 1, "dpid"], 0x0002_0000_0000_0001), r"switches\[1\]\.dpid: duplicate"),
    (_set(["switches", 1, "index"], 1), r"switches\[1\]\.index: duplicate leaf index 1"),
    (_set(["switches", 0, "index"], 1.0), r"switches\[0\]\.index must be an integer"),
    (_set(["hosts", 1, "ip"], "10.0.1.1"), r"hosts\[1\]\.ip: duplicate ip 10\.0\.1\.1"),
    (_set(["hosts", 0, "leaf"], 9), r"hosts\[0\]\.leaf 9 is not a leaf of this fabric"),
    (_set(["hosts", 0, "intf"], "h1-eth9"), r"links\[0\]: h1's interface is h1-eth0, but "
                                            r"hosts\[\]\.intf says h1-eth9"),
    (_set(["hosts", 0, "leaf_port"], 2), r"links\[0\]: h1 must link to port 2 of leaf 1"),
    (_set(["links", 0, "bw_mbps"], "fast"), r"links\[0\]\.bw_mbps must be a number"),
    (_set(["links", 0, "bw_mbps"], 0), r"links\[0\]\.bw_mbps must be positive"),
    (_set(["links", 0, "queue_packets"], 0), r"links\[0\]\.queue_packets must be >= 1"),
    (_set(["links", 1, "port2"], 1), r"links\[1\]\.port2: port 1 of lf1 is wired twice"),
    (_set(["links", 0, "node2"], "lf9"), r"links\[0\]\.node2 'lf9' is not a switch or host"),
    (_set(["links", 5], DEL), r"links: every leaf must have exactly one link to every spine"),
    (_set(["spines"], 3), r"spines is 3 but switches lists 2"),
    (_set(["hosts_per_leaf"], 3), r"hosts: lf1 has 2 hosts but hosts_per_leaf is 3"),
    (_set(["queue_packets"], True), r"queue_packets must be an integer"),
    (_set(["fabric_bw_mbps"], -1), r"fabric_bw_mbps must be a positive rate"),
    (_set(["fabric_bw_mbps"], None), r"fabric_bw_mbps: a fabric with spines needs its rate"),
    (_set(["delay"], 2), r"delay must be a string"),
    (_set(["hosts"], {}), r"hosts must be a list"),
    (_set(["subnet"], DEL), r"fabric: missing field 'subnet'"),
])
def test_each_validation_error_names_its_field(mutate, message):
    data = _data()
    mutate(data)
    with pytest.raises(FabricError, match=message):
        FabricMap.from_dict(data)


def test_unreadable_input_is_named():
    with pytest.raises(FabricError, match="must hold a JSON object"):
        FabricMap.from_dict([])
    with pytest.raises(FabricError, match="not valid JSON"):
        FabricMap.from_json("{not json")
    with pytest.raises(FabricError, match="/nonexistent/fabric.json: cannot read"):
        FabricMap.load("/nonexistent/fabric.json")


NOT_V1 = "format_version is missing and the keys are not those of a version-1 file"


@pytest.mark.parametrize("old,message", [
    # what analysis/rundir.py's lenient reader took and the writer never wrote
    ({"hosts": {"h1": {"ip": "10.0.1.1/16"}}, "links": [{"a": "h1", "b": "lf1",
                                                         "rate_mbps": 20}]}, NOT_V1),
    ({"hosts": [{"name": "h1", "ip": "10.0.1.1"}],
      "links": [{"src": "h1", "dst": "lf1", "port2": "lf1-eth1", "bw": 20}]}, NOT_V1),
    # the writer's keys, but the switches' roles left to be guessed from their names
    ({**_data(), "switches": [{"name": "lf1", "index": 1, "dpid": 1}]},
     r"switches\[0\]: missing field 'role'"),
    # the writer's keys, but a link's rate under another name
    ({**_data(), "links": [{**_data()["links"][0], "capacity_mbps": 20}]},
     r"links\[0\]: unknown field 'capacity_mbps'"),
], ids=["endpoints-a-b", "src-dst-bw", "role-from-name", "capacity_mbps"])
def test_old_lenient_spellings_are_refused(old, message, tmp_path):
    (tmp_path / "fabric.json").write_text(json.dumps(old))
    with pytest.raises(FabricError, match="fabric.json: " + message):
        rundir.load_fabric(tmp_path)


def test_controller_and_analysis_read_the_same_map(tmp_path):
    """One file written from the topology; the controller's hops and the analysis's
    egress ports are the same ports."""
    written = LeafSpineTopo(2, 3, 2, host_bw=10, fabric_bw=25, queue_packets=30).fabric_map()
    written.save(tmp_path / "fabric.json")
    controller = build_settings("ecmp", 6653, str(tmp_path / "fabric.json"),
                                str(tmp_path)).fabric
    analysis = rundir.load_fabric(tmp_path)
    assert controller == analysis == written
    for src in written.hosts:
        for dst in written.hosts:
            if src is dst:
                continue
            spines = [1, 2] if src.leaf != dst.leaf else [None]
            for j in spines:
                hops = paths.path(controller, src.ip, dst.ip, spine=j)
                ifaces = [controller.ports(h.dpid)[h.out_port].iface for h in hops]
                spine = written.spine(j).name if j else None
                assert ifaces == queues.path_ports(analysis, src.name, dst.name, spine)


def test_queries_on_a_two_by_two():
    f = LeafSpineTopo(2, 2, 2, host_bw=10, fabric_bw=25, queue_packets=30).fabric_map()
    assert f.spine_names == ["sp1", "sp2"] and f.leaf_names == ["lf1", "lf2"]
    assert f.host("h3").ip == "10.0.2.1" and f.host("h9") is None
    assert f.host_by_ip("10.0.1.2").name == "h2" and f.host_by_ip("10.0.9.9") is None
    assert [h.name for h in f.hosts_on(2)] == ["h3", "h4"] == [h.name for h in f.hosts_on("lf2")]
    assert f.hosts_on("sp1") == [] and f.leaf_of("h4") == "lf2" and f.leaf_of("x") is None
    assert f.ip_by_host() == {"h1": "10.0.1.1", "h2": "10.0.1.2", "h3": "10.0.2.1",
                              "h4": "10.0.2.2"}
    lf1 = f.leaf(1).dpid
    assert f.switch(lf1).name == "lf1" and f.switch(12345) is None
    assert {p: e.peer for p, e in f.ports(lf1).items()} == {1: "h1", 2: "h2", 3: "sp1",
                                                           4: "sp2"}
    assert f.capacity_mbps(lf1, 1) == 10.0 and f.capacity_mbps(lf1, 4) == 25.0
    assert f.capacity_mbps(lf1, 9) is None and f.ports(999) == {}
    # naming.py: leaf i port k faces host k, port H+j spine j; spine j port i leaf i
    assert f.switch_egress_ifaces() == [f"lf{i}-eth{p}" for i in (1, 2) for p in (1, 2, 3, 4)] \
        + [f"sp{j}-eth{i}" for j in (1, 2) for i in (1, 2)]
    assert f.egress_iface("lf2", "sp1") == "lf2-eth3" and f.egress_iface("sp1", "lf2") == \
        "sp1-eth2"
    assert f.egress_iface("lf1", "h3") is None
    kinds = {e.iface: (e.kind, e.peer, e.bw_mbps, e.queue_packets) for e in f.egresses()}
    assert kinds["lf1-eth2"] == ("host-downlink", "h2", 10.0, 30)
    assert kinds["lf1-eth4"] == ("uplink", "sp2", 25.0, 30)
    assert kinds["sp2-eth1"] == ("spine-downlink", "lf1", 25.0, 30)
    # a host's own queue is not the switch queue_packets (topologies/links.py)
    assert kinds["h1-eth0"] == ("host-uplink", "lf1", 10.0, None)
    assert f.link_of_iface("lf1-eth4") == f.ports(lf1)[4] and f.link_of_iface("x") is None
    up = f.uplink(2, 1)
    assert (up.leaf_port, up.spine_port, up.bw_mbps) == (3, 2, 25.0)


def test_no_mininet_or_os_ken_behind_the_map_and_its_readers():
    code = ("import sys\n"
            "import incastlab.topologies.fabricmap, incastlab.controller.registry\n"
            "import incastlab.controller.paths, incastlab.analysis.rundir\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('mininet', 'os_ken')]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("shape", [(2, 2, 2), (3, 4, 5), (1, 1, 1), (2, 11, 3)])
def test_synthetic_runs_write_what_the_topology_writes(shape):
    """analysis/synthetic.py builds its map without Mininet; it must not drift."""
    from incastlab.analysis.synthetic import demo_fabric

    assert demo_fabric(*shape, rate_mbps=10.0, queue_packets=20) == LeafSpineTopo(
        *shape, host_bw=10, fabric_bw=10, queue_packets=20).fabric_map()
