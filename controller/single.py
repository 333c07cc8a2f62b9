"""Policy ``single``: every inter-leaf flow crosses one fixed spine (``--spine``, default 1).

The baseline that concentrates traffic: the other spines stay idle, so incast and
all-to-all traffic meet on one spine's links. Routes are proactive
(per-destination), the controller sees only ARP. While a link of that spine's path
between two leaves is down, those leaves' traffic takes the lowest-numbered spine
that still reaches both (``usable_spines``), and comes back when the link does.
"""
from __future__ import annotations

from incastlab.controller import paths
from incastlab.controller.base import FabricApp


class SinglePathApp(FabricApp):
    POLICY = "single"

    def remote_actions(self, dp, leaf, host):
        usable = self.usable_spines(leaf, host.leaf)
        if not usable:
            return []  # no spine reaches that leaf now: drop until a link returns
        spine = self.settings.spine if self.settings.spine in usable else usable[0]
        return [dp.ofproto_parser.OFPActionOutput(paths.uplink_port(self.fabric, leaf, spine))]

    def on_ready(self):
        # The placements are made up front: one row per inter-leaf host pair.
        for src in self.fabric.hosts:
            for dst in paths.remote_hosts(self.fabric, src.leaf):
                self.record_path(None, src.ip, dst.ip, self.settings.spine)
