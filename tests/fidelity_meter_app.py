"""A controller app for tests/test_fidelity_root.py: an OpenFlow meter with a drop band
on the star's path to its receiver, so the datapath loses packets that no tc queue
counts (OVS's userspace datapath supports meters; it counts their drops as
``datapath_drop_meter``). Runs beside controller/examples/learning_switch.py
(``routing.policy = "app"``), which forwards everything else. The meter lives in the
switch and goes with it when the fabric is torn down."""
from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from incastlab.controller.appkit import fabric_map

METER_KBPS = 5000  # a quarter of the test's 20 Mbit/s links: TCP's bursts exceed it
# without OFPMF_BURST the bucket holds a second of the rate (625 kB), more than a
# round's blocks: 48 kbit is four full frames
BURST_KBITS = 48


class ReceiverMeter(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def meter_the_receiver(self, ev):
        dp = ev.msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        receiver = fabric_map().hosts[-1]  # a star's receiver is its last host
        band = parser.OFPMeterBandDrop(rate=METER_KBPS, burst_size=BURST_KBITS)
        dp.send_msg(parser.OFPMeterMod(dp, command=ofp.OFPMC_ADD,
                                       flags=ofp.OFPMF_KBPS | ofp.OFPMF_BURST,
                                       meter_id=1, bands=[band]))
        match = parser.OFPMatch(eth_type=0x0800, ipv4_dst=receiver.ip)
        inst = [parser.OFPInstructionMeter(1, ofp.OFPIT_METER),
                parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                             [parser.OFPActionOutput(receiver.leaf_port)])]
        dp.send_msg(parser.OFPFlowMod(datapath=dp, priority=1000, match=match,
                                      instructions=inst))
