"""Policy ``adaptive``: each new flow takes the least-loaded spine.

Reactive: the first packet of a flow reaches the controller, which puts the flow on
the spine whose two links on the path (source leaf uplink + spine downlink to the
destination leaf) carried the least traffic, as a fraction of their capacity, in the
last port-stats window (--poll-interval, 0.1-0.5 s). Capacities come from
fabric.json, not OVS (which reports the veths' nominal 10 Gbit/s).

A flow placed less than one window ago is not yet in the counters. Counting it at
an assumed rate would be a guess (iperf3, gloo and the PS open short control
connections next to their bulk ones), so each such flow adds only PENDING_SHARE of
capacity to its links: enough to alternate a burst of flows over spines whose
measured loads are equal, too little to outweigh a measured difference.
"""
from __future__ import annotations

import time

from incastlab.controller import paths
from incastlab.controller.base import FabricApp

PENDING_SHARE = 0.05  # fraction of link capacity a just-placed flow counts for


class AdaptiveApp(FabricApp):
    POLICY = "adaptive"
    REACTIVE = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recent = []  # (t, links, share) of flows placed within the last window

    def choose_spine(self, key, src_leaf, dst_leaf):
        now = time.time()
        # A rate covers the window between the last two polls, so a flow shows in
        # it only once it has run through a whole window: up to two intervals.
        horizon = 2 * self.settings.poll_interval
        self.recent = [r for r in self.recent if now - r[0] < horizon]
        links = {spine: paths.path_links(self.fabric, src_leaf, dst_leaf, spine)
                 for spine in paths.spine_indices(self.fabric)}
        capacities = {link: self.fabric.capacity_mbps(*link)
                      for spine_links in links.values() for link in spine_links}
        util = self.load.utilisation(capacities)
        for _, placed_links, share in self.recent:
            for link in placed_links:
                if link in util:
                    util[link] += share
        spine = paths.least_loaded_spine(self.fabric, src_leaf, dst_leaf, util,
                                         self.usable_spines(src_leaf, dst_leaf) or None)
        self.recent.append((now, links[spine], PENDING_SHARE))
        return spine
