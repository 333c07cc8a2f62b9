"""Policy ``ecmp``: leaves spread flows over all uplinks like hardware ECMP.

Each leaf has one SELECT group with one bucket per uplink; routes to other leaves'
hosts point at it. The switch hashes each packet's headers, so a flow keeps one path
and different flows may collide on one spine.

Which hash: OVS takes a select group's selection method from a Netronome experimenter
property that it accepts only in OpenFlow 1.5 group mods (ovs-ofctl(8),
"selection_method"). So this app offers OpenFlow 1.3 and 1.5:

- a switch that allows 1.5 gets ``selection_method=hash`` over --hash-fields
  (default ip_src,ip_dst,ip_proto,tcp_src,tcp_dst), visible with
  ``ovs-ofctl -O OpenFlow15 dump-groups BR``;
- a switch limited to 1.3 (the fabric's default) gets a plain 1.3 select group, and
  OVS >= 2.10 (3.1 here) then uses ``dp_hash`` with its symmetric L3/L4 algorithm:
  a hash of IP src/dst, IP protocol and TCP/UDP/SCTP ports, the same for both
  directions of a flow (``hash(sym_l4(0))`` in ``ovs-appctl dpif/dump-flows BR``).
  OVS falls back to its old default ``hash`` method only when bucket weights cannot
  be mapped onto its hash table, never with these equal weights.

The switch, not the controller, picks each flow's spine, so flow_paths.csv stays
empty for this policy.
"""
from __future__ import annotations

from os_ken.ofproto import ofproto_v1_3, ofproto_v1_5

from incastlab.controller import paths
from incastlab.controller.base import OFP15, FabricApp
from incastlab.controller.ovs_ext import SelectionMethodProp

GROUP_ID = 1


class EcmpApp(FabricApp):
    POLICY = "ecmp"
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION, ofproto_v1_5.OFP_VERSION]

    def install_policy_state(self, dp, leaf):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        ports = paths.uplink_ports(self.fabric, leaf)
        if not ports:
            return
        if ofp.OFP_VERSION >= OFP15:
            buckets = [parser.OFPBucket(
                bucket_id=n, actions=[parser.OFPActionOutput(port)],
                properties=[parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT,
                                                            weight=1)])
                for n, port in enumerate(ports)]
            props = [SelectionMethodProp("hash", self.settings.hash_fields)]
            method = f"hash over {','.join(self.settings.hash_fields)}"
        else:
            buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY,
                                        watch_group=ofp.OFPG_ANY,
                                        actions=[parser.OFPActionOutput(port)])
                       for port in ports]
            props = {}
            method = "OVS default (OpenFlow 1.3 cannot set it: dp_hash, symmetric L3/L4)"
        self.send(dp, parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, GROUP_ID,
                                         buckets=buckets,
                                         **({"properties": props} if props else {})))
        self.logger.info("leaf %d: select group over ports %s, selection %s",
                         leaf, ports, method)

    def remote_actions(self, dp, leaf, host):
        return [dp.ofproto_parser.OFPActionGroup(GROUP_ID)]
