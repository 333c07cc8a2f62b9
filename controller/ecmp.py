"""Policy ``ecmp``: leaves spread flows over all uplinks like hardware ECMP.

Each leaf has one OpenFlow 1.3 SELECT group with one bucket per uplink; routes to
other leaves' hosts point at it. The switch hashes each packet's headers, so a flow
keeps one path and different flows may collide on one spine.

Which hash: OpenFlow 1.3 has no way to say. The selection method is a Netronome
extension property (NTRT_SELECTION_METHOD) that Open vSwitch accepts only in OpenFlow
1.5 group mods (ovs-ofctl(8), "selection_method"), and the fabric speaks 1.3. Without
it, OVS >= 2.10 (3.1 here) uses ``selection_method=dp_hash`` with the symmetric L3/L4
algorithm: the datapath hashes IP src/dst, IP protocol and TCP/UDP/SCTP ports, so
both directions of a flow pick the same bucket (it falls back to the old ``hash``
method over Ethernet/IP/L4 fields only when the bucket weights cannot be mapped onto
256 hash values, never with equal weights). ``ovs-ofctl -O OpenFlow15 dump-groups``
on a leaf shows what OVS chose. The controller places nothing itself, so
flow_paths.csv stays empty for this policy.
"""
from __future__ import annotations

from incastlab.controller import paths
from incastlab.controller.base import FabricApp

GROUP_ID = 1


class EcmpApp(FabricApp):
    POLICY = "ecmp"

    def install_policy_state(self, dp, leaf):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY,
                                    watch_group=ofp.OFPG_ANY,
                                    actions=[parser.OFPActionOutput(port)])
                   for port in paths.uplink_ports(self.fabric, leaf)]
        if buckets:
            self.send(dp, parser.OFPGroupMod(datapath=dp, command=ofp.OFPGC_ADD,
                                             type_=ofp.OFPGT_SELECT, group_id=GROUP_ID,
                                             buckets=buckets))

    def remote_actions(self, dp, leaf, host):
        return [dp.ofproto_parser.OFPActionGroup(GROUP_ID)]
