"""Policy ``adaptive``: each new flow takes the least-loaded spine.

Reactive: the first packet of a flow reaches the controller, which puts the flow on
the spine whose two links on the path (source leaf uplink + spine downlink to the
destination leaf) carried the least traffic, as a fraction of their capacity, in the
last port-stats window (--poll-interval, 0.1-0.5 s). Capacities come from
fabric.json, not OVS (which reports the veths' nominal 10 Gbit/s).

A flow placed less than one window ago is not yet in the counters, so each such
flow adds an assumed full host-link rate to its path until the next poll; otherwise
flows started in a burst would all see the same idle spine.
"""
from __future__ import annotations

import time

from incastlab.controller import paths
from incastlab.controller.base import FabricApp


class AdaptiveApp(FabricApp):
    POLICY = "adaptive"
    REACTIVE = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recent = []  # (t, links, utilisation share) of flows placed this window

    def choose_spine(self, key, src_leaf, dst_leaf):
        now = time.time()
        window = self.settings.poll_interval
        self.recent = [r for r in self.recent if now - r[0] < window]
        links = {spine: paths.path_links(self.fabric, src_leaf, dst_leaf, spine)
                 for spine in paths.spine_indices(self.fabric)}
        capacities = {link: self.fabric.capacity_mbps(*link)
                      for spine_links in links.values() for link in spine_links}
        util = self.load.utilisation(capacities)
        for _, placed_links, share in self.recent:
            for link in placed_links:
                if link in util:
                    util[link] += share
        spine = paths.least_loaded_spine(self.fabric, src_leaf, dst_leaf, util)
        src = self.fabric.host_by_ip(key.src_ip)
        host_rate = src.bw_mbps if src and src.bw_mbps else 0.0
        for link in links[spine]:
            self.recent.append((now, [link], host_rate / (capacities[link] or 1000.0)))
        return spine
