"""Policy ``spray``: every packet of a flow takes the next spine in turn.

OpenFlow cannot spray: OVS's select groups hash per flow, and nothing a switch can
match varies packet by packet. So each host labels its own packets: a tc egress BPF
program (incastlab/bpf/path_label.bpf.c, installed in every host by the runner for the
run, incastlab.pathlabel) writes label 0 .. S-1 (S spines) into the DSCP bits, round
robin per flow. This app gives each leaf one rule per (remote host, label): label k
leaves on the uplink to spine k, or, while spine k cannot reach that host's leaf, on
a live one (paths.label_spines). Packets without one of our labels (DSCP >= S) take
the first label's spine. Port-status reroutes rebuild the label rules like any route.
"""
from __future__ import annotations

from os_ken.lib.packet import ether_types

from incastlab.controller import paths
from incastlab.controller.base import PRIO_REMOTE, FabricApp

PRIO_LABEL = PRIO_REMOTE + 1  # above the unlabelled fallback, below a leaf's own hosts


class SprayApp(FabricApp):
    POLICY = "spray"

    def label_map(self, leaf: int, host) -> list[int]:
        """Spine of each label for traffic from ``leaf`` to ``host`` now."""
        return paths.label_spines(paths.spine_indices(self.fabric),
                                  self.usable_spines(leaf, host.leaf))

    def remote_actions(self, dp, leaf, host):
        spines = self.label_map(leaf, host)
        if not spines:
            return []  # no spine reaches that leaf now: drop until a link returns
        return [dp.ofproto_parser.OFPActionOutput(paths.uplink_port(self.fabric, leaf,
                                                                    spines[0]))]

    def install_label_rules(self, dp, leaf: int) -> None:
        parser = dp.ofproto_parser
        for host in paths.remote_hosts(self.fabric, leaf):
            spines = self.label_map(leaf, host)
            for label in range(len(paths.spine_indices(self.fabric))):
                actions = ([parser.OFPActionOutput(
                    paths.uplink_port(self.fabric, leaf, spines[label]))] if spines else [])
                self.add_flow(dp, PRIO_LABEL,
                              parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP,
                                              ipv4_dst=host.ip, ip_dscp=label), actions)

    def install_policy_state(self, dp, leaf):
        self.install_label_rules(dp, leaf)

    def reroute_leaf(self, dp, leaf):
        super().reroute_leaf(dp, leaf)  # the unlabelled fallback routes
        self.install_label_rules(dp, leaf)  # an add replaces the rule of the same match
