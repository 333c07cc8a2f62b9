"""Policy ``spread``: new flows take the spines in deterministic round-robin order.

Reactive: the first packet of a flow reaches the controller, which places the flow
(both directions, exact-match entries with an idle timeout) on the next spine in
turn, 1, 2, ..., S, 1, ... counted over all new inter-leaf flows of the fabric.
A spine that cannot carry the flow now (a link of its path is down) loses its turn.
"""
from __future__ import annotations

from incastlab.controller import paths
from incastlab.controller.base import FabricApp


class SpreadApp(FabricApp):
    POLICY = "spread"
    REACTIVE = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.next_spine = paths.RoundRobin(paths.spine_indices(self.fabric) or [0])

    def choose_spine(self, key, src_leaf, dst_leaf):
        usable = self.usable_spines(src_leaf, dst_leaf)
        for _ in paths.spine_indices(self.fabric):
            spine = self.next_spine()
            if spine in usable:
                return spine
        return spine  # none is usable: the flow waits for a link like every other
