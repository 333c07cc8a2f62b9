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

Failures, in two steps. In the switch, at once: each bucket watches its own uplink
(``watch_port``), and OVS hashes only over live buckets, so a leaf whose uplink goes
down moves its flows to the other spines without waiting for anyone. Only the
controller can see a failure further away (spine j's downlink to the destination
leaf): routes use one select group per set of usable spines (``usable_spines``:
group 1 = every spine, others made when a failure needs them, id 2, 3, ...), so a
leaf sends traffic for a leaf that spine j cannot reach over the other spines only.
A destination no spine reaches gets an empty action list (drop) until a link returns.
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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.groups = {}  # leaf -> {tuple of spines: group id} installed on it

    def install_policy_state(self, dp, leaf):
        # install_proactive has just deleted every group of this switch
        self.groups[leaf] = {}
        spines = tuple(paths.spine_indices(self.fabric))
        if spines:
            self.group_for(dp, leaf, spines)

    def group_for(self, dp, leaf: int, spines: tuple[int, ...]) -> int:
        """The id of leaf ``leaf``'s select group over ``spines``, added if new."""
        groups = self.groups.setdefault(leaf, {})
        if spines in groups:
            return groups[spines]
        every = spines == tuple(paths.spine_indices(self.fabric))
        gid = GROUP_ID if every else max([GROUP_ID, *groups.values()]) + 1
        parser, ofp = dp.ofproto_parser, dp.ofproto
        ports = [paths.uplink_port(self.fabric, leaf, s) for s in spines]
        if ofp.OFP_VERSION >= OFP15:
            buckets = [parser.OFPBucket(
                bucket_id=n, actions=[parser.OFPActionOutput(port)],
                properties=[parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT,
                                                            weight=1),
                            parser.OFPGroupBucketPropWatch(type_=ofp.OFPGBPT_WATCH_PORT,
                                                           watch=port)])
                for n, port in enumerate(ports)]
            props = [SelectionMethodProp("hash", self.settings.hash_fields)]
            method = f"hash over {','.join(self.settings.hash_fields)}"
        else:
            buckets = [parser.OFPBucket(weight=1, watch_port=port,
                                        watch_group=ofp.OFPG_ANY,
                                        actions=[parser.OFPActionOutput(port)])
                       for port in ports]
            props = {}
            method = "OVS default (OpenFlow 1.3 cannot set it: dp_hash, symmetric L3/L4)"
        self.send(dp, parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, gid,
                                         buckets=buckets,
                                         **({"properties": props} if props else {})))
        groups[spines] = gid
        self.logger.info("leaf %d: select group %d over ports %s, selection %s",
                         leaf, gid, ports, method)
        return gid

    def remote_actions(self, dp, leaf, host):
        spines = tuple(self.usable_spines(leaf, host.leaf))
        if not spines:
            return []  # no spine reaches that leaf now: drop until a link returns
        return [dp.ofproto_parser.OFPActionGroup(self.group_for(dp, leaf, spines))]

    def reroute_leaf(self, dp, leaf):
        super().reroute_leaf(dp, leaf)  # routes re-pointed, new groups added first
        # Then the groups no route uses any more go (deleting a group deletes the
        # flows that point at it, so never before the routes moved away).
        used = {tuple(self.usable_spines(leaf, h.leaf))
                for h in paths.remote_hosts(self.fabric, leaf)}
        parser, ofp = dp.ofproto_parser, dp.ofproto
        for spines, gid in list(self.groups.get(leaf, {}).items()):
            if gid != GROUP_ID and spines not in used:
                self.send(dp, parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, ofp.OFPGT_SELECT,
                                                 gid))
                del self.groups[leaf][spines]
