"""Rootless tests of the controller: fabric map, paths, options, and every policy
against a dummy datapath that captures the OpenFlow messages it would be sent."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from incastlab.controller import paths, records
from incastlab.controller.registry import POLICIES, OptionError, build_settings
from incastlab.topologies.fabricmap import FabricError, FabricMap
from incastlab.topologies.leafspine import LeafSpineTopo, StarTopo


def fmap(spines=2, leaves=2, hosts_per_leaf=4, **kw):
    """The map as the controller gets it: written by the topology, read from JSON."""
    return FabricMap.from_json(LeafSpineTopo(spines=spines, leaves=leaves,
                                             hosts_per_leaf=hosts_per_leaf, **kw)
                               .fabric_map().to_json())


# ---- fabric map and paths --------------------------------------------------------------

@pytest.mark.parametrize("spines,leaves,hpl", [(2, 2, 4), (1, 2, 2), (4, 3, 2), (3, 5, 1)])
def test_host_rules_cover_every_switch_and_host(spines, leaves, hpl):
    f = fmap(spines, leaves, hpl)
    rules = paths.host_rules(f)
    hosts = leaves * hpl
    assert len(rules) == hosts * (1 + spines)  # own leaf + every spine
    for spine in map(f.spine, f.spine_indices):
        mine = {r.ip_dst: r.out_port for r in rules if r.dpid == spine.dpid}
        assert len(mine) == hosts
        for h in f.hosts:
            assert mine[h.ip] == h.leaf  # spine port i faces leaf i (naming.py)
    for leaf in map(f.leaf, f.leaf_indices):
        mine = {r.ip_dst: r.out_port for r in rules if r.dpid == leaf.dpid}
        assert mine == {h.ip: h.leaf_port for h in f.hosts_on(leaf.index)}


def test_paths_two_by_two():
    f = fmap(2, 2, 4)
    lf1, lf2, sp2 = f.leaf(1).dpid, f.leaf(2).dpid, f.spine(2).dpid
    assert paths.path(f, "10.0.1.1", "10.0.1.3") == [paths.Hop(lf1, 3)]
    assert paths.path(f, "10.0.1.1", "10.0.2.4", spine=2) == [
        paths.Hop(lf1, 6), paths.Hop(sp2, 2), paths.Hop(lf2, 4)]
    assert paths.uplink_ports(f, 1) == [5, 6]
    with pytest.raises(ValueError, match="spine must be one of"):
        paths.path(f, "10.0.1.1", "10.0.2.4")
    with pytest.raises(KeyError):
        paths.path(f, "10.0.1.1", "10.0.9.9", spine=1)


def test_paths_on_a_star():
    f = FabricMap.from_json(StarTopo(senders=4).fabric_map().to_json())
    assert f.spine_indices == [] and f.leaf_indices == [1]
    assert paths.spine_indices(f) == [] and paths.uplink_ports(f, 1) == []
    assert paths.remote_hosts(f, 1) == []
    assert len(paths.host_rules(f)) == 5
    assert paths.path(f, "10.0.1.1", "10.0.1.5") == [paths.Hop(f.leaf(1).dpid, 5)]


def test_path_links_and_least_loaded():
    f = fmap(3, 3, 2)
    links = paths.path_links(f, 1, 3, 2)
    assert links == [(f.leaf(1).dpid, 2 + 2), (f.spine(2).dpid, 3)]
    util = {(f.leaf(1).dpid, 3): 0.5, (f.spine(2).dpid, 3): 0.2,
            (f.leaf(1).dpid, 5): 0.1, (f.spine(3).dpid, 3): 0.15}
    assert paths.least_loaded_spine(f, 1, 3, util) == 2    # 0.2 < 0.25 (sp3), 0.5 (sp1)
    assert paths.least_loaded_spine(f, 1, 3, {}) == 1      # tie: lowest index


def test_round_robin():
    rr = paths.RoundRobin([1, 2, 3])
    assert [rr() for _ in range(7)] == [1, 2, 3, 1, 2, 3, 1]


def test_flow_key_reverse():
    k = paths.FlowKey(6, "10.0.1.1", "10.0.2.1", 40000, 5201)
    assert k.reversed() == paths.FlowKey(6, "10.0.2.1", "10.0.1.1", 5201, 40000)
    assert k.reversed().reversed() == k


def test_capacities_and_peers_from_fabric_json():
    f = fmap(2, 2, 4, host_bw=20, fabric_bw=35)
    lf1 = f.leaf(1).dpid
    assert f.capacity_mbps(lf1, 1) == 20.0
    assert f.capacity_mbps(lf1, 5) == 35.0
    assert f.ports(lf1)[6].peer == "sp2"
    assert f.ports(f.spine(1).dpid)[2].peer == "lf2"


def test_fabric_errors_name_the_field():
    data = LeafSpineTopo(spines=2, leaves=2, hosts_per_leaf=2).fabric_map().to_dict()
    broken = json.loads(json.dumps(data))
    broken["links"] = [link for link in broken["links"] if link["node2"] != "sp2"]
    with pytest.raises(FabricError, match="exactly one link to every spine"):
        FabricMap.from_dict(broken)
    broken = json.loads(json.dumps(data))
    del broken["hosts"][0]["mac"]
    with pytest.raises(FabricError, match=r"hosts\[0\]: missing field 'mac'"):
        FabricMap.from_dict(broken)
    broken = json.loads(json.dumps(data))
    broken["switches"][0]["role"] = "core"
    with pytest.raises(FabricError, match=r"switches\[0\].role"):
        FabricMap.from_dict(broken)


# ---- options ------------------------------------------------------------------------

@pytest.fixture
def fabric_file(tmp_path):
    path = tmp_path / "fabric.json"
    LeafSpineTopo(spines=2, leaves=2, hosts_per_leaf=4).fabric_map().save(path)
    return str(path)


@pytest.mark.parametrize("kwargs,message", [
    ({"policy": "bogus"}, "--policy 'bogus' is unknown; allowed: single, ecmp, spread, adaptive"),
    ({"poll_interval": 0}, "--poll-interval must be from"),
    ({"poll_interval": -1}, "--poll-interval must be from"),
    ({"policy": "adaptive", "poll_interval": 2.0}, "from 0.1 to 0.5 seconds for policy"),
    ({"spine": 3}, r"--spine must be one of \[1, 2\], got 3"),
    ({"policy": "ecmp", "spine": 1}, "--spine applies only to policy single, not 'ecmp'"),
    ({"idle_timeout": 5}, "--idle-timeout applies only to policy spread or adaptive"),
    ({"policy": "spread", "idle_timeout": 0}, "--idle-timeout must be an integer from 1"),
    ({"port": 70000}, "--port must be an integer from 1 to 65535"),
    ({"out_dir": "/nonexistent/dir"}, "--out '/nonexistent/dir' must be an existing"),
    ({"fabric_path": "/nonexistent.json"}, "--fabric: /nonexistent.json: cannot read"),
])
def test_bad_options_refused(fabric_file, tmp_path, kwargs, message):
    args = {"policy": "single", "port": 6653, "fabric_path": fabric_file,
            "out_dir": str(tmp_path), **kwargs}
    with pytest.raises(OptionError, match=message):
        build_settings(**args)


def test_defaults(fabric_file, tmp_path):
    s = build_settings("single", 6653, fabric_file, str(tmp_path))
    assert (s.poll_interval, s.spine, s.idle_timeout) == (0.5, 1, 10)
    assert build_settings("adaptive", 6653, fabric_file, str(tmp_path),
                          poll_interval=0.2).poll_interval == 0.2
    assert set(POLICIES) == {"single", "ecmp", "spread", "adaptive", "spray", "flowlet", "app",
                             "external"}
    # the built-in routing policies: the two others run the user's controller code
    assert {p for p, spec in POLICIES.items() if not (spec.user_apps or spec.external)} \
        == {"single", "ecmp", "spread", "adaptive", "spray", "flowlet"}


def test_launcher_refuses_before_listening(fabric_file, tmp_path, capsys):
    from incastlab.controller.__main__ import main
    rc = main(["--policy", "adaptive", "--poll-interval", "0", "--fabric", fabric_file,
               "--out", str(tmp_path)])
    assert rc == 2
    assert "--poll-interval must be from 0.1 to 0.5" in capsys.readouterr().err
    assert not (tmp_path / "controller.log").exists()  # refused before logging/listening


# ---- policies against a dummy datapath -------------------------------------------------

class DummyDatapath:
    """Stands in for os-ken's Datapath: real OF1.3 encoders, captured messages."""

    def __init__(self, dpid):
        from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser
        self.id = dpid
        self.ofproto = ofproto_v1_3
        self.ofproto_parser = ofproto_v1_3_parser
        self.xid = 0
        self.sent = []

    def set_xid(self, msg):
        self.xid += 1
        msg.set_xid(self.xid)
        return self.xid

    def send_msg(self, msg):
        if msg.xid is None:
            self.set_xid(msg)
        msg.serialize()  # proves the message encodes
        self.sent.append(msg)

    def of(self, kind):
        return [m for m in self.sent if type(m).__name__ == kind]


def make_app(policy, tmp_path, **options):
    import importlib
    f = fmap(2, 2, 4)
    settings = build_settings(policy, 6653, "fabric.json", str(tmp_path), fabric=f, **options)
    module = importlib.import_module(POLICIES[policy].module)
    app_cls = next(v for v in vars(module).values()
                   if isinstance(v, type) and v.__module__ == module.__name__)
    app = app_cls(settings=settings)
    dps = {dpid: DummyDatapath(dpid) for dpid in f.dpids}
    for dp in dps.values():
        app._switch_features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))
    return app, f, dps


def flows(dp, priority=None):
    return [m for m in dp.of("OFPFlowMod")
            if m.command == dp.ofproto.OFPFC_ADD and (priority is None or m.priority == priority)]


def outputs(msg):
    if hasattr(msg, "instructions"):
        acts = [a for inst in msg.instructions for a in inst.actions]
    else:
        acts = msg.actions
    return [(type(a).__name__, getattr(a, "port", getattr(a, "group_id", None))) for a in acts]


def finish_barriers(app, dps):
    for dp in dps.values():
        barrier = dp.of("OFPBarrierRequest")[-1]
        app._barrier_reply(SimpleNamespace(msg=SimpleNamespace(datapath=dp, xid=barrier.xid)))


def no_flood(dps):
    for dp in dps.values():
        for m in dp.sent:
            if hasattr(m, "instructions") or hasattr(m, "actions"):
                assert ("OFPActionOutput", dp.ofproto.OFPP_FLOOD) not in outputs(m)
                assert ("OFPActionOutput", dp.ofproto.OFPP_ALL) not in outputs(m)


def test_proactive_rules_and_readiness(tmp_path):
    app, f, dps = make_app("single", tmp_path)
    lf1, sp1 = dps[f.leaf(1).dpid], dps[f.spine(1).dpid]
    # a clean slate first, then routes, then one barrier
    assert lf1.sent[0].command == lf1.ofproto.OFPFC_DELETE
    assert type(lf1.sent[-1]).__name__ == "OFPBarrierRequest"
    arp = flows(lf1, 100)
    assert len(arp) == 1 and arp[0].match["eth_type"] == 0x0806
    assert outputs(arp[0]) == [("OFPActionOutput", lf1.ofproto.OFPP_CONTROLLER)]
    local = {m.match["ipv4_dst"]: outputs(m) for m in flows(lf1, 20)}
    assert local == {f"10.0.1.{k}": [("OFPActionOutput", k)] for k in range(1, 5)}
    down = {m.match["ipv4_dst"]: outputs(m)[0][1] for m in flows(sp1, 20)}
    assert down == {h.ip: h.leaf for h in f.hosts}
    assert flows(sp1, 100) == []  # spines never see ARP
    assert not (tmp_path / "controller_ready.json").exists()
    finish_barriers(app, dps)
    ready = json.loads((tmp_path / "controller_ready.json").read_text())
    assert ready["switches"] == f.dpids
    app.close()


def test_single_routes_every_remote_host_over_spine(tmp_path):
    app, f, dps = make_app("single", tmp_path, spine=2)
    for leaf in map(f.leaf, f.leaf_indices):
        remote = {m.match["ipv4_dst"]: outputs(m) for m in flows(dps[leaf.dpid], 10)}
        assert remote == {h.ip: [("OFPActionOutput", 4 + 2)]
                          for h in paths.remote_hosts(f, leaf.index)}
    finish_barriers(app, dps)
    app.close()
    rows = (tmp_path / "flow_paths.csv").read_text().splitlines()
    assert rows[0] == "t,src_ip,dst_ip,proto,src_port,dst_port,spine,policy"
    assert len(rows) == 1 + 2 * 4 * 4 and all(r.endswith(",2,single") for r in rows[1:])
    no_flood(dps)


def test_ecmp_select_group(tmp_path):
    app, f, dps = make_app("ecmp", tmp_path)
    for leaf in map(f.leaf, f.leaf_indices):
        dp = dps[leaf.dpid]
        adds = [m for m in dp.of("OFPGroupMod") if m.command == dp.ofproto.OFPGC_ADD]
        assert len(adds) == 1
        group = adds[0]
        assert group.type == dp.ofproto.OFPGT_SELECT and group.group_id == 1
        assert [(b.weight, outputs(b)) for b in group.buckets] == [
            (1, [("OFPActionOutput", 5)]), (1, [("OFPActionOutput", 6)])]
        remote = flows(dp, 10)
        assert len(remote) == 4
        assert all(outputs(m) == [("OFPActionGroup", 1)] for m in remote)
        # the group is added before the flows that point at it
        assert dp.sent.index(group) < dp.sent.index(remote[0])
    assert all(not dps[s.dpid].of("OFPGroupMod")[1:] for s in map(f.spine, f.spine_indices))
    no_flood(dps)
    app.close()


def tcp_packet_in(dp, src, dst, sport, dport, in_port):
    from os_ken.lib.packet import ethernet, ipv4, packet, tcp
    p = packet.Packet()
    p.add_protocol(ethernet.ethernet(src="02:00:00:00:01:01", dst="02:00:00:00:02:01"))
    p.add_protocol(ipv4.ipv4(src=src, dst=dst, proto=6))
    p.add_protocol(tcp.tcp(src_port=sport, dst_port=dport, bits=tcp.TCP_SYN))
    p.serialize()
    match = dp.ofproto_parser.OFPMatch(in_port=in_port)
    return SimpleNamespace(msg=SimpleNamespace(datapath=dp, match=match, data=bytes(p.data)))


def test_spread_places_round_robin_both_directions(tmp_path):
    app, f, dps = make_app("spread", tmp_path, idle_timeout=7)
    lf1, lf2 = dps[f.leaf(1).dpid], dps[f.leaf(2).dpid]
    ctl = [("OFPActionOutput", lf1.ofproto.OFPP_CONTROLLER)]
    assert all(outputs(m) == ctl for m in flows(lf1, 10))
    finish_barriers(app, dps)
    for dp in dps.values():
        dp.sent.clear()
    app._packet_in(tcp_packet_in(lf1, "10.0.1.1", "10.0.2.1", 40000, 5201, 1))
    fwd, = flows(lf1, 30)
    assert fwd.match["ipv4_src"] == "10.0.1.1" and fwd.match["tcp_dst"] == 5201
    assert fwd.idle_timeout == 7 and fwd.flags & lf1.ofproto.OFPFF_SEND_FLOW_REM
    assert outputs(fwd) == [("OFPActionOutput", 5)]          # spine 1
    rev, = flows(lf2, 30)
    assert (rev.match["ipv4_src"], rev.match["tcp_src"], rev.match["tcp_dst"]) == \
        ("10.0.2.1", 5201, 40000)
    assert outputs(rev) == [("OFPActionOutput", 5)]          # same spine back
    out, = lf1.of("OFPPacketOut")                            # the first packet is not lost
    assert outputs(out) == [("OFPActionOutput", 5)] and out.in_port == 1
    assert lf1.sent.index(fwd) < lf1.sent.index(out)
    # next new flow: spine 2; a repeat of flow 1 (raced its rule): spine 1, no new row
    app._packet_in(tcp_packet_in(lf1, "10.0.1.2", "10.0.2.1", 40001, 5201, 2))
    app._packet_in(tcp_packet_in(lf1, "10.0.1.1", "10.0.2.1", 40000, 5201, 1))
    assert [outputs(m)[0][1] for m in lf1.of("OFPPacketOut")] == [5, 6, 5]
    # the reverse direction reaching the controller first reuses the flow's spine
    app._packet_in(tcp_packet_in(lf2, "10.0.2.1", "10.0.1.2", 5201, 40001, 1))
    assert outputs(lf2.of("OFPPacketOut")[-1]) == [("OFPActionOutput", 6)]
    app.close()
    rows = (tmp_path / "flow_paths.csv").read_text().splitlines()[1:]
    assert [r.split(",")[1:] for r in rows] == [
        ["10.0.1.1", "10.0.2.1", "6", "40000", "5201", "1", "spread"],
        ["10.0.1.2", "10.0.2.1", "6", "40001", "5201", "2", "spread"]]
    no_flood(dps)


def test_flow_removed_forgets_placement(tmp_path):
    app, f, dps = make_app("spread", tmp_path)
    lf1 = dps[f.leaf(1).dpid]
    app._packet_in(tcp_packet_in(lf1, "10.0.1.1", "10.0.2.1", 40000, 5201, 1))
    fwd = flows(lf1, 30)[0]
    app._flow_removed(SimpleNamespace(msg=SimpleNamespace(cookie=fwd.cookie, match=fwd.match)))
    key = paths.FlowKey(6, "10.0.1.1", "10.0.2.1", 40000, 5201)
    assert key not in app._placements and key.reversed() in app._placements
    app.close()


def test_adaptive_picks_least_loaded_spine(tmp_path):
    app, f, dps = make_app("adaptive", tmp_path, poll_interval=0.2)
    lf1 = dps[f.leaf(1).dpid]
    sp1 = f.spine(1).dpid
    # spine 1's downlink to leaf 2 carried 30 of its 40 Mbit/s in the last window
    app.load.update(sp1, 2, 0.0, 0)
    app.load.update(sp1, 2, 1.0, 30_000_000 // 8)
    app._packet_in(tcp_packet_in(lf1, "10.0.1.1", "10.0.2.1", 40000, 5201, 1))
    assert outputs(flows(lf1, 30)[-1]) == [("OFPActionOutput", 6)]  # spine 2
    # a burst: flows placed within one window alternate while measured loads are equal
    app.load.update(sp1, 2, 2.0, 30_000_000 // 8)  # spine 1 idle again
    app.recent.clear()
    picks = []
    for n in range(4):
        app._packet_in(tcp_packet_in(lf1, f"10.0.1.{n + 1}", "10.0.2.2", 41000 + n, 5201,
                                     n + 1))
        picks.append(outputs(flows(lf1, 30)[-1])[0][1])
    assert sorted(picks) == [5, 5, 6, 6]
    app.close()


def test_arp_answered_from_the_map_never_flooded(tmp_path):
    from os_ken.lib.packet import arp, ethernet, packet
    app, f, dps = make_app("ecmp", tmp_path)
    lf1 = dps[f.leaf(1).dpid]
    lf1.sent.clear()

    def ask(target):
        p = packet.Packet()
        p.add_protocol(ethernet.ethernet(src="02:00:00:00:01:01", dst="ff:ff:ff:ff:ff:ff",
                                         ethertype=0x0806))
        p.add_protocol(arp.arp(opcode=arp.ARP_REQUEST, src_mac="02:00:00:00:01:01",
                               src_ip="10.0.1.1", dst_mac="00:00:00:00:00:00",
                               dst_ip=target))
        p.serialize()
        match = lf1.ofproto_parser.OFPMatch(in_port=1)
        app._packet_in(SimpleNamespace(msg=SimpleNamespace(datapath=lf1, match=match,
                                                           data=bytes(p.data))))

    ask("10.0.2.3")
    out, = lf1.of("OFPPacketOut")
    assert outputs(out) == [("OFPActionOutput", 1)]
    reply = packet.Packet(out.data).get_protocol(arp.arp)
    assert (reply.opcode, reply.src_ip, reply.src_mac, reply.dst_ip) == \
        (arp.ARP_REPLY, "10.0.2.3", "02:00:00:00:02:03", "10.0.1.1")
    ask("10.0.9.9")  # not a fabric host: no answer, no flood
    assert len(lf1.of("OFPPacketOut")) == 1
    no_flood(dps)
    app.close()


def test_port_stats_rows_and_load(tmp_path):
    app, f, dps = make_app("single", tmp_path)
    lf1 = dps[f.leaf(1).dpid]
    parser = lf1.ofproto_parser

    def reply(tx, n=(1, 2, 3)):
        body = [parser.OFPPortStats(port_no=p, rx_packets=n[0], tx_packets=n[1],
                                    rx_bytes=n[2], tx_bytes=tx, rx_dropped=0, tx_dropped=4,
                                    rx_errors=0, tx_errors=0, rx_frame_err=0,
                                    rx_over_err=0, rx_crc_err=0, collisions=0,
                                    duration_sec=0, duration_nsec=0)
                for p in (1, 5, lf1.ofproto.OFPP_LOCAL)]
        app._port_stats(SimpleNamespace(msg=SimpleNamespace(datapath=lf1, body=body)))

    reply(1000)
    reply(2000)
    unavailable = records.UNAVAILABLE  # OVS's answer for ports being deleted (teardown)
    reply(unavailable, (unavailable,) * 3)
    app.close()
    lines = (tmp_path / "port_stats.csv").read_text().splitlines()
    assert lines[0] == "t,switch,port,peer,tx_bytes,rx_bytes,tx_packets,rx_packets,tx_dropped"
    assert [line.split(",")[1:] for line in lines[1:3]] == [
        ["lf1", "1", "h1", "1000", "3", "2", "1", "4"],
        ["lf1", "5", "sp1", "1000", "3", "2", "1", "4"]]
    assert len(lines) == 5  # LOCAL is not a fabric port, nor a row of 2**64 - 1 counters
    assert app.load.rate_bps(lf1.id, 5) > 0


def test_a_port_with_some_counters_unavailable_keeps_its_row():
    """Only a port whose byte and packet counters are all unavailable is left out; a
    datapath that does not count drops (tx_dropped 2**64 - 1) still reports traffic."""
    wired = {1: SimpleNamespace(peer="h1"), 2: SimpleNamespace(peer="sp1")}
    u = records.UNAVAILABLE
    body = [SimpleNamespace(port_no=1, tx_bytes=10, rx_bytes=u, tx_packets=u, rx_packets=u,
                            tx_dropped=u),
            SimpleNamespace(port_no=2, tx_bytes=u, rx_bytes=u, tx_packets=u, rx_packets=u,
                            tx_dropped=0)]
    rows = records.port_stats_rows(1.5, "lf1", wired, body)
    assert [(r["port"], r["peer"], r["tx_bytes"], r["t"]) for r in rows] == [
        (1, "h1", 10, "1.500000")]


# ---- ECMP selection method (OpenFlow 1.5) ---------------------------------------------

def test_selection_method_property_bytes():
    import struct

    from incastlab.controller import ovs_ext
    raw = ovs_ext.selection_method_property("hash", ovs_ext.DEFAULT_HASH_FIELDS)
    assert len(raw) % 8 == 0
    kind, length, vendor, exp_type = struct.unpack_from("!HHII", raw)
    entries = [(0x80001604, 4), (0x80001804, 4), (0x80001401, 1), (0x80001A02, 2),
               (0x80001C02, 2)]  # OXM IPV4_SRC, IPV4_DST, IP_PROTO, TCP_SRC, TCP_DST
    assert (kind, length, vendor, exp_type) == (0xFFFF, 40 + 33, 0x154D, 1)
    assert raw[16:32].rstrip(b"\0") == b"hash" and raw[32:40] == bytes(8)
    offset = 40
    for header, size in entries:  # header, then an all-ones "hash the whole field" mask
        assert struct.unpack_from("!I", raw, offset)[0] == header
        assert raw[offset + 4:offset + 4 + size] == b"\xff" * size
        offset += 4 + size
    assert raw[offset:] == bytes(80 - 73)
    with pytest.raises(ValueError, match="unknown hash fields"):
        ovs_ext.selection_method_property("hash", ["ip_src", "bogus"])


def test_hash_fields_option(fabric_file, tmp_path):
    s = build_settings("ecmp", 6653, fabric_file, str(tmp_path), hash_fields="ip_src, ip_dst")
    assert s.hash_fields == ("ip_src", "ip_dst")
    for bad in ("ip_src,bogus", "", "ip_src,ip_src"):
        with pytest.raises(OptionError, match="--hash-fields must be distinct names from"):
            build_settings("ecmp", 6653, fabric_file, str(tmp_path), hash_fields=bad)
    with pytest.raises(OptionError, match="--hash-fields applies only to policy ecmp"):
        build_settings("single", 6653, fabric_file, str(tmp_path), hash_fields="ip_src")


def test_ecmp_on_openflow15_sets_the_hash_explicitly(tmp_path):
    from os_ken.ofproto import ofproto_v1_5, ofproto_v1_5_parser

    from incastlab.controller.ecmp import EcmpApp
    f = fmap(2, 2, 4)
    settings = build_settings("ecmp", 6653, "fabric.json", str(tmp_path), fabric=f)
    app = EcmpApp(settings=settings)
    dp = DummyDatapath(f.leaf(1).dpid)
    dp.ofproto, dp.ofproto_parser = ofproto_v1_5, ofproto_v1_5_parser
    app._switch_features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))
    group = [m for m in dp.of("OFPGroupMod") if m.command == dp.ofproto.OFPGC_ADD][0]
    assert [b.bucket_id for b in group.buckets] == [0, 1]
    assert [outputs(b) for b in group.buckets] == [[("OFPActionOutput", 5)],
                                                  [("OFPActionOutput", 6)]]
    assert group.properties[0].fields == ("ip_src", "ip_dst", "ip_proto", "tcp_src", "tcp_dst")
    assert b"hash" in bytes(group.buf)  # the property made it into the message
    # and the 1.5 packet-out carries in_port in a match
    app.packet_out(dp, 3, 5, b"\0" * 60)
    assert dp.of("OFPPacketOut")[-1].match["in_port"] == 3
    app.close()


@pytest.mark.parametrize("policy", sorted(p for p, spec in POLICIES.items()
                                           if not (spec.user_apps or spec.external)))
def test_every_policy_on_a_star(tmp_path, policy):
    import importlib
    f = FabricMap.from_json(StarTopo(senders=3).fabric_map().to_json())
    settings = build_settings(policy, 6653, "fabric.json", str(tmp_path), fabric=f)
    module = importlib.import_module(POLICIES[policy].module)
    app_cls = next(v for v in vars(module).values()
                   if isinstance(v, type) and v.__module__ == module.__name__)
    app = app_cls(settings=settings)
    dp = DummyDatapath(f.leaf(1).dpid)
    app._switch_features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))
    assert {m.match["ipv4_dst"]: outputs(m) for m in flows(dp, 20)} == {
        f"10.0.1.{k}": [("OFPActionOutput", k)] for k in range(1, 5)}
    assert flows(dp, 10) == [] and not [m for m in dp.of("OFPGroupMod")
                                        if m.command == dp.ofproto.OFPGC_ADD]
    finish_barriers(app, {dp.id: dp})
    assert json.loads((tmp_path / "controller_ready.json").read_text())["switches"] == [dp.id]
    app.close()


def test_launcher_listens_on_loopback_only_and_stops_on_sigterm(fabric_file, tmp_path):
    import signal
    import socket
    import subprocess
    import sys
    import time
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "incastlab.controller", "--policy", "ecmp",
                             "--port", str(port), "--fabric", fabric_file,
                             "--out", str(tmp_path)], start_new_session=True)
    try:
        deadline = time.time() + 20
        listening = []
        while time.time() < deadline and not listening:
            with open("/proc/net/tcp") as f:  # state 0A = LISTEN
                listening = [line.split()[1] for line in f.readlines()[1:]
                             if line.split()[3] == "0A"
                             and line.split()[1].endswith(f":{port:04X}")]
            time.sleep(0.1)
        assert listening == [f"0100007F:{port:04X}"]  # 127.0.0.1 only
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = (tmp_path / "controller.log").read_text()
    assert "policy ecmp on 127.0.0.1" in log and "Traceback" not in log
    assert (tmp_path / "port_stats.csv").read_text().startswith("t,switch,port,peer,")


def test_ready_file_is_written_atomically(tmp_path):
    from incastlab.controller import records
    path = records.write_ready(str(tmp_path), [3, 1, 2], 12.5)
    assert json.loads(open(path).read()) == {"switches": [1, 2, 3], "t": 12.5}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["controller_ready.json"]


def test_port_load_window():
    from incastlab.controller.records import PortLoad
    load = PortLoad()
    load.update(1, 5, 10.0, 0)
    assert load.rate_bps(1, 5) == 0.0            # one sample: no window yet
    load.update(1, 5, 10.5, 1_250_000)           # 10 Mbit in 0.5 s
    assert load.rate_bps(1, 5) == pytest.approx(20e6)
    assert load.utilisation({(1, 5): 40.0, (1, 6): 40.0}) == {
        (1, 5): pytest.approx(0.5), (1, 6): 0.0}
    load.update(1, 5, 11.0, 100)                 # counter reset: keep the last rate
    assert load.rate_bps(1, 5) == pytest.approx(20e6)


def test_switch_features_before_os_ken_sets_the_datapath_id(tmp_path):
    """os-ken's own features handler sets dp.id in another green thread; ours may run
    first and must take the DPID from the message (a None id was seen in a real run)."""
    app, f, _dps = make_app("single", tmp_path)
    dpid = f.dpids[0]
    late = DummyDatapath(dpid)
    late.id = None
    app._switch_features(SimpleNamespace(msg=SimpleNamespace(datapath=late, datapath_id=dpid)))
    assert app.datapaths[dpid] is late and late.id == dpid
    assert flows(late), "the switch got no routes"
