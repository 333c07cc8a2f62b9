"""Policy ``spread``: new flows take the spines in deterministic round-robin order.

Reactive: the first packet of a flow reaches the controller, which places the flow
(both directions, exact-match entries with an idle timeout) on the next spine in
turn, 1, 2, ..., S, 1, ... counted over all new inter-leaf flows of the fabric.
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
        return self.next_spine()
