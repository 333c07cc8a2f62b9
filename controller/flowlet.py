"""Policy ``flowlet``: a flow changes spine only between bursts.

As spray (spray.py: the hosts' BPF labeller writes a path label into DSCP, the leaves
send label k to spine k), but the labeller moves a flow to the next label only when
its packet follows the flow's previous one by at least ``routing.flowlet_gap_us``
(default: the fabric's base RTT, incastlab.pathlabel.default_gap_us): a gap that long
lets the packets in flight drain first, so a new path does not reorder them
(flowlet switching, as in CONGA and LetFlow). The leaves' rules are spray's.
"""
from __future__ import annotations

from incastlab.controller.spray import SprayApp


class FlowletApp(SprayApp):
    POLICY = "flowlet"
