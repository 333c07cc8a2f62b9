"""Policies spray and flowlet without root: the label map, the labeller's settings and
default gap (hand-computed), the spec's refusals, and the leaves' label rules on the
dummy datapath of test_controller_units (fabric 2 spines x 2 leaves x 4 hosts: leaf
i's uplink to spine j is port 4 + j, spine j's downlink to leaf i is port i)."""
from __future__ import annotations

import struct

import pytest

from incastlab import pathlabel
from incastlab.controller import paths
from incastlab.spec import SpecError, load_spec
from tests.test_controller_units import finish_barriers, fmap, make_app
from tests.test_failover_units import out_ports, port_status, replay


@pytest.mark.parametrize("spines, usable, expected", [
    ([1, 2], [1, 2], [1, 2]),
    ([1, 2], [2], [2, 2]),
    ([1, 2, 3], [1, 3], [1, 1, 3]),        # spine 2's label goes to the first live one
    ([1, 2, 3, 4], [1, 4], [1, 1, 4, 4]),  # two dead spines' labels spread over the rest
    ([1, 2], [], []),
], ids=["all-up", "one-of-two", "one-of-three", "two-of-four", "none"])
def test_label_map(spines, usable, expected):
    assert paths.label_spines(spines, usable) == expected


def test_conf_is_the_programs_struct():
    # struct label_conf: u32 labels, u32 mode (flowlet 1), u64 gap in ns
    assert pathlabel.PathLabelling("flowlet", 2, 2528).conf() == \
        bytes([2, 0, 0, 0, 1, 0, 0, 0]) + (2_528_000).to_bytes(8, "little")
    assert pathlabel.PathLabelling("spray", 4).conf() == struct.pack("<IIQ", 4, 0, 0)
    with pytest.raises(ValueError, match="labels must be 1 to 64"):
        pathlabel.PathLabelling("spray", 65)
    with pytest.raises(ValueError, match="mode must be one of spray, flowlet"):
        pathlabel.PathLabelling("hash", 2)


def test_base_rtt_by_hand():
    # a 1514-byte frame and a 66-byte ACK = 12,640 bits each way over each link:
    # 632 us a link at 20 Mbit/s, 4 links
    assert pathlabel.base_rtt_us(20, 20, 1500) == pytest.approx(4 * 632)
    # fabric links at 10 Mbit/s: 2 x 632 + 2 x 1264
    assert pathlabel.base_rtt_us(20, 10, 1500) == pytest.approx(3792)
    # 8 crossings of a 1 ms link delay; no fabric rate given: the host rate
    assert pathlabel.base_rtt_us(20, None, 1500, "1ms") == pytest.approx(2528 + 8000)
    # jumbo frames: 9014 + 66 bytes = 72,640 bits, 7,264 us a link at 10 Mbit/s
    assert pathlabel.base_rtt_us(10, 10, 9000) == pytest.approx(4 * 7264)


@pytest.mark.parametrize("text, us", [(None, 0.0), ("500us", 500.0), ("2ms", 2000.0),
                                      ("0.1s", 100_000.0)])
def test_delay_in_microseconds(text, us):
    assert pathlabel.delay_us(text) == pytest.approx(us)


def test_each_policy_gets_its_labelling():
    f = fmap(3, 2, 2, host_bw=20.0, fabric_bw=10.0)
    assert pathlabel.for_policy("ecmp", f) is None
    assert pathlabel.for_policy("spray", f) == pathlabel.PathLabelling("spray", 3, 0)
    assert pathlabel.for_policy("flowlet", f, 700) == pathlabel.PathLabelling("flowlet", 3, 700)
    # default gap: the base RTT, 2 x 632 + 2 x 1264 = 3792 us
    assert pathlabel.for_policy("flowlet", f).gap_us == 3792


def test_the_labeller_sits_on_every_hosts_fabric_interface():
    f = fmap(2, 2, 2)
    assert pathlabel.host_interfaces(f) == {f"h{i}": f"h{i}-eth0" for i in range(1, 5)}


@pytest.mark.parametrize("overrides, message", [
    (["routing.policy=sprays"], "routing.policy: 'sprays' is not one of single, ecmp, "
                                "spread, adaptive, spray, flowlet, app, external"),
    (["routing.policy=flowlet", "routing.flowlet_gap_us=0"],
     "routing.flowlet_gap_us: 0 is not an integer from 1 to 10000000 (us)"),
    (["routing.policy=flowlet", "routing.flowlet_gap_us=2.5"],
     "routing.flowlet_gap_us: 2.5 is not an integer from 1 to 10000000 (us)"),
    (["routing.policy=spray", "topology.spines=65"],
     "topology.spines: 65 spines, but policy spray labels paths in the 6 DSCP bits: at "
     "most 64 spines"),
], ids=["policy", "gap-zero", "gap-fraction", "too-many-spines"])
def test_the_spec_refuses_naming_the_field(overrides, message):
    with pytest.raises(SpecError) as err:
        load_spec(None, overrides)
    assert message in str(err.value)


def test_the_spec_takes_a_gap():
    spec = load_spec(None, ["routing.policy=flowlet", "routing.flowlet_gap_us=500"])
    assert spec.routing.flowlet_gap_us == 500
    assert load_spec(None, ["routing.policy=spray"]).routing.flowlet_gap_us is None


def label_routes(dp):
    """{(ipv4_dst, label): ports} of a leaf's label rules, after every message."""
    flows, groups = replay(dp)
    return {(dict(m)["ipv4_dst"], dict(m)["ip_dscp"]): out_ports(acts, groups)
            for (prio, m), acts in flows.items() if "ip_dscp" in dict(m)}


@pytest.mark.parametrize("policy", ["spray", "flowlet"])
def test_each_label_leaves_on_its_spine_and_moves_off_a_dead_link(tmp_path, policy):
    app, f, dps = make_app(policy, tmp_path)
    finish_barriers(app, dps)
    lf1, lf2, sp1 = dps[f.leaf(1).dpid], dps[f.leaf(2).dpid], dps[f.spine(1).dpid]
    lf2_hosts = [h.ip for h in f.hosts_on(2)]
    assert label_routes(lf1) == {(ip, k): {5 + k} for ip in lf2_hosts for k in (0, 1)}
    # unlabelled packets (DSCP >= 2) take label 0's spine
    fallback = {dict(m)["ipv4_dst"]: out_ports(a, {}) for (prio, m), a in replay(lf1)[0].items()
                if prio == 10}
    assert fallback == {ip: {5} for ip in lf2_hosts}

    port_status(app, lf2, 5)  # the cable lf2 <-> sp1 is cut
    port_status(app, sp1, 2)
    assert label_routes(lf1) == {(ip, k): {6} for ip in lf2_hosts for k in (0, 1)}
    assert all(ports == {6} for ports in label_routes(lf2).values())
    for dp in dps.values():
        for acts in replay(dp)[0].values():
            ports = out_ports(acts, {})
            assert not (dp is lf2 and 5 in ports) and not (dp is sp1 and 2 in ports)

    port_status(app, lf2, 5, down=False)
    port_status(app, sp1, 2, down=False)
    assert label_routes(lf1) == {(ip, k): {5 + k} for ip in lf2_hosts for k in (0, 1)}
    app.close()
