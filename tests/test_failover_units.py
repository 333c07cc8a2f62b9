"""The controller reacts to port-status (issue 15 item 2), without root: every policy on
the dummy datapath of test_controller_units, the messages it is sent replayed into a
small model of a flow table and a group table, then checked for any route over the
dead link. Fabric: 2 spines x 2 leaves x 4 hosts, so leaf i's uplink to spine j is
port 4 + j and spine j's downlink to leaf i is port i."""
from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest

from incastlab.controller import paths
from tests.test_controller_units import finish_barriers, make_app, outputs, tcp_packet_in

POLICIES = ["single", "ecmp", "spread", "adaptive"]


def port_status(app, dp, port, down=True):
    ofp = dp.ofproto
    desc = SimpleNamespace(port_no=port, config=0,
                           state=ofp.OFPPS_LINK_DOWN if down else ofp.OFPPS_LIVE)
    app._port_status(SimpleNamespace(msg=SimpleNamespace(datapath=dp, reason=ofp.OFPPR_MODIFY,
                                                         desc=desc)))


def replay(dp):
    """(flows, groups) a switch holds after every message it was sent, in order:
    flows {(priority, match items): [(action, port or group)]}, groups {id: [ports]}.
    Models OpenFlow's semantics as far as the controller uses them: an add replaces the
    entry of the same match and priority; a delete removes entries whose match contains
    its match and, with out_port, only those that output there; deleting a group removes
    the flows that point at it."""
    ofp = dp.ofproto
    flows, groups = {}, {}
    for m in dp.sent:
        kind = type(m).__name__
        if kind == "OFPFlowMod":
            key = (m.priority, tuple(sorted(m.match.items())))
            if m.command == ofp.OFPFC_ADD:
                flows[key] = outputs(m)
            elif m.command == ofp.OFPFC_DELETE:
                want = set(m.match.items())
                for k, acts in list(flows.items()):
                    if want <= set(k[1]) and (m.out_port == ofp.OFPP_ANY
                                              or ("OFPActionOutput", m.out_port) in acts):
                        del flows[k]
        elif kind == "OFPGroupMod":
            if m.command == ofp.OFPGC_ADD:
                assert m.group_id not in groups, "a group added twice is refused by OVS"
                groups[m.group_id] = [(outputs(b)[0][1], b.watch_port) for b in m.buckets]
            elif m.command == ofp.OFPGC_DELETE:
                gone = set(groups) if m.group_id == ofp.OFPG_ALL else {m.group_id}
                for gid in gone:
                    groups.pop(gid, None)
                flows = {k: a for k, a in flows.items()
                         if not any(t == "OFPActionGroup" and v in gone for t, v in a)}
    return flows, groups


def out_ports(acts, groups):
    """Every port a route may send to (through a group: each bucket's port)."""
    ports = set()
    for kind, value in acts:
        if kind == "OFPActionOutput":
            ports.add(value)
        elif kind == "OFPActionGroup":
            assert value in groups, f"a route points at group {value}, which does not exist"
            ports |= {port for port, _watch in groups[value]}
    return ports


def remote_routes(flows, groups, leaf_hosts):
    """ipv4_dst -> ports of a leaf's priority-10 routes to the given hosts."""
    out = {}
    for (prio, match), acts in flows.items():
        dst = dict(match).get("ipv4_dst")
        if prio == 10 and dst in leaf_hosts:
            out[dst] = out_ports(acts, groups)
    return out


@pytest.mark.parametrize("policy", POLICIES)
def test_no_route_over_a_dead_link_then_back(tmp_path, policy):
    app, f, dps = make_app(policy, tmp_path)
    finish_barriers(app, dps)
    lf1, lf2 = dps[f.leaf(1).dpid], dps[f.leaf(2).dpid]
    sp1 = dps[f.spine(1).dpid]
    lf2_hosts = {h.ip for h in f.hosts_on(2)}
    lf1_hosts = {h.ip for h in f.hosts_on(1)}
    if app.REACTIVE:  # two flows placed before the failure: the first one on spine 1
        app._packet_in(tcp_packet_in(lf1, "10.0.1.1", "10.0.2.1", 40000, 5201, 1))
        app._packet_in(tcp_packet_in(lf1, "10.0.1.2", "10.0.2.2", 40001, 5201, 2))
        assert app._placements[paths.FlowKey(6, "10.0.1.1", "10.0.2.1", 40000, 5201)] == 1

    # the cable lf2 <-> sp1 is cut: both ends report it
    port_status(app, lf2, 5)
    port_status(app, sp1, 2)
    assert app.usable_spines(1, 2) == [2] and app.usable_spines(1, 1) == [1, 2]

    for dp in dps.values():
        flows, groups = replay(dp)
        for acts in flows.values():
            ports = out_ports(acts, groups)
            assert not (dp is lf2 and 5 in ports), f"{policy}: lf2 still routes to sp1"
            assert not (dp is sp1 and 2 in ports), f"{policy}: sp1 still routes to lf2"
    # lf1 no longer sends traffic for leaf 2 to spine 1 (port 5), which cannot deliver it
    flows1, groups1 = replay(lf1)
    routes = remote_routes(flows1, groups1, lf2_hosts)
    if app.REACTIVE:
        ctl = lf1.ofproto.OFPP_CONTROLLER
        assert routes and all(r == {ctl} for r in routes.values())
        placed = [acts for (prio, _m), acts in flows1.items() if prio == 30]
        assert placed and all(out_ports(a, groups1) == {6} for a in placed), placed
        # the flow that was on spine 1 is forgotten; placed again, it takes spine 2
        key = paths.FlowKey(6, "10.0.1.1", "10.0.2.1", 40000, 5201)
        assert key not in app._placements
        app._packet_in(tcp_packet_in(lf1, "10.0.1.1", "10.0.2.1", 40000, 5201, 1))
        assert app._placements[key] == 2
    else:
        assert routes and all(ports == {6} for ports in routes.values()), routes
        flows2, groups2 = replay(lf2)
        back = remote_routes(flows2, groups2, lf1_hosts)
        assert back and all(ports == {6} for ports in back.values()), back

    # the controller's reaction: one row when every switch acknowledged (barriers)
    finish_barriers(app, dps)
    app.close()
    rows = list(csv.DictReader(open(tmp_path / "failover.csv")))
    assert [(r["switch"], r["port"], r["state"], r["switches"]) for r in rows] == [
        ("lf2", "5", "down", "4")]
    assert float(rows[0]["t_installed"]) >= float(rows[0]["t_seen"])
    assert float(rows[0]["reaction_s"]) == pytest.approx(
        float(rows[0]["t_installed"]) - float(rows[0]["t_seen"]), abs=1e-5)


@pytest.mark.parametrize("policy", ["single", "ecmp"])
def test_routes_come_back_with_the_link(tmp_path, policy):
    app, f, dps = make_app(policy, tmp_path)
    lf1, lf2, sp1 = dps[f.leaf(1).dpid], dps[f.leaf(2).dpid], dps[f.spine(1).dpid]
    before = {dpid: replay(dp) for dpid, dp in dps.items()}
    port_status(app, lf2, 5)
    port_status(app, sp1, 2)
    port_status(app, lf2, 5, down=False)
    assert app.usable_spines(1, 2) == [2], "one end still down: sp1's report holds"
    port_status(app, sp1, 2, down=False)
    assert app.usable_spines(1, 2) == [1, 2]
    for dpid, dp in dps.items():
        flows, groups = replay(dp)
        old_flows, old_groups = before[dpid]
        assert {k: out_ports(a, groups) for k, a in flows.items()} == \
            {k: out_ports(a, old_groups) for k, a in old_flows.items()}, f"{policy} {dpid:x}"
    if policy == "ecmp":  # back on group 1; the failure's own groups deleted
        for dp in (lf1, lf2):
            assert set(replay(dp)[1]) == {1}
    app.close()


def test_ecmp_buckets_watch_their_uplink(tmp_path):
    """The switch skips a dead bucket by itself (OVS: a select bucket is live while its
    watch_port is), before the controller reacts."""
    app, f, dps = make_app("ecmp", tmp_path)
    _flows, groups = replay(dps[f.leaf(1).dpid])
    assert groups == {1: [(5, 5), (6, 6)]}
    app.close()


def test_a_local_uplink_down_on_a_three_spine_fabric_keeps_ecmp_over_the_rest(tmp_path):
    """lf1's uplink to spine 2 of 3 dies: lf1 hashes over spines 1 and 3 for every
    destination, and the other leaves avoid spine 2 for leaf 1 only."""
    import importlib

    from incastlab.controller.registry import POLICIES as REG, build_settings
    from tests.test_controller_units import DummyDatapath, fmap
    f = fmap(3, 3, 2)
    settings = build_settings("ecmp", 6653, "fabric.json", str(tmp_path), fabric=f)
    module = importlib.import_module(REG["ecmp"].module)
    app = module.EcmpApp(settings=settings)
    dps = {dpid: DummyDatapath(dpid) for dpid in f.dpids}
    for dp in dps.values():
        app._switch_features(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))
    lf1, lf2 = dps[f.leaf(1).dpid], dps[f.leaf(2).dpid]
    port_status(app, lf1, 2 + 2)  # hosts_per_leaf 2: spine 2 is port 4
    flows1, groups1 = replay(lf1)
    others = {h.ip for h in f.hosts if h.leaf != 1}
    assert set(map(frozenset, remote_routes(flows1, groups1, others).values())) == {
        frozenset({3, 5})}
    flows2, groups2 = replay(lf2)
    to_lf1 = remote_routes(flows2, groups2, {h.ip for h in f.hosts_on(1)})
    to_lf3 = remote_routes(flows2, groups2, {h.ip for h in f.hosts_on(3)})
    assert set(map(frozenset, to_lf1.values())) == {frozenset({3, 5})}
    assert set(map(frozenset, to_lf3.values())) == {frozenset({3, 4, 5})}
    app.close()


def test_a_port_not_in_the_map_and_a_repeated_report_change_nothing(tmp_path):
    app, f, dps = make_app("single", tmp_path)
    lf2 = dps[f.leaf(2).dpid]
    n = len(lf2.sent)
    port_status(app, lf2, lf2.ofproto.OFPP_LOCAL)
    assert len(lf2.sent) == n and not app._down_ports
    port_status(app, lf2, 5)
    n = len(lf2.sent)
    port_status(app, lf2, 5)
    assert len(lf2.sent) == n
    app.close()


@pytest.mark.parametrize("policy", ["single", "ecmp"])
def test_a_switch_that_reported_its_own_ports_down_brings_routes_back_on_reconnect(
        tmp_path, policy):
    """switch_down: sp1 reports its ports down, then disconnects; at switch_up its
    neighbours report up, but only sp1's reconnection clears its own reports: then every
    leaf must route over sp1 again (ecmp: group 1, not sp2's alone)."""
    app, f, dps = make_app(policy, tmp_path)
    lf1, lf2, sp1 = dps[f.leaf(1).dpid], dps[f.leaf(2).dpid], dps[f.spine(1).dpid]
    before = {dpid: replay(dp) for dpid, dp in dps.items()}
    for dp, port in ((sp1, 1), (sp1, 2), (lf1, 5), (lf2, 5)):
        port_status(app, dp, port)
    app._state_change(SimpleNamespace(datapath=sp1, state="dead"))  # not DEAD_DISPATCHER
    for dp, port in ((lf1, 5), (lf2, 5)):
        port_status(app, dp, port, down=False)
    assert app.usable_spines(1, 2) == [2], "sp1's own reports still hold"
    app._switch_features(SimpleNamespace(msg=SimpleNamespace(datapath=sp1)))
    assert app.usable_spines(1, 2) == [1, 2]
    for dpid, dp in dps.items():
        flows, groups = replay(dp)
        old_flows, old_groups = before[dpid]
        assert {k: out_ports(a, groups) for k, a in flows.items()} == \
            {k: out_ports(a, old_groups) for k, a in old_flows.items()}, f"{policy} {dpid:x}"
    finish_barriers(app, dps)
    app.close()
    rows = list(csv.DictReader(open(tmp_path / "failover.csv")))
    # one row per link that died (sp1-lf1, sp1-lf2), one for the reconnection
    assert [(r["switch"], r["port"], r["state"]) for r in rows] == [
        ("sp1", "1", "down"), ("sp1", "2", "down"), ("sp1", "", "up")]
