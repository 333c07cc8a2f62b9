"""Policy ``single``: every inter-leaf flow crosses one fixed spine (``--spine``, default 1).

The baseline that concentrates traffic: the other spines stay idle, so incast and
all-to-all traffic meet on one spine's links. Routes are proactive
(per-destination), the controller sees only ARP.
"""
from __future__ import annotations

from incastlab.controller import paths
from incastlab.controller.base import FabricApp


class SinglePathApp(FabricApp):
    POLICY = "single"

    def remote_actions(self, dp, leaf, host):
        spine = self.settings.spine
        return [dp.ofproto_parser.OFPActionOutput(paths.uplink_port(self.fabric, leaf, spine))]

    def on_ready(self):
        # The placements are made up front: one row per inter-leaf host pair.
        for src in self.fabric.hosts:
            for dst in paths.remote_hosts(self.fabric, src.leaf):
                self.record_path(None, src.ip, dst.ip, self.settings.spine)
