"""A learning switch written exactly as a Ryu tutorial writes it (``from ryu...``).

incastlab runs it unmodified on os-ken (``routing.policy = "app"``, see
specs/own-controller.toml): the launcher resolves ``ryu.*`` to ``os_ken.*`` and
``RyuApp`` to os-ken's ``OSKenApp``. Nothing in this file knows about incastlab.

What it does, per switch: a table-miss entry sends unknown packets to the controller;
the controller learns which port each source MAC came in on, floods packets whose
destination it has not seen yet, and installs an entry (in_port, eth_dst) -> port once
it has, so later packets of that conversation stay in the switch.

Flooding needs a loop-free topology: a star, or a leaf–spine with ONE spine. On a
leaf–spine with two or more spines a flooded broadcast comes back around the loop
forever; incastlab then stops the run rather than leave it flooding.
"""
from ryu.base import app_manager
from ryu.controller import ofp_event
from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from ryu.lib.packet import ether_types, ethernet, packet
from ryu.ofproto import ofproto_v1_3


class LearningSwitch13(app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.mac_to_port = {}  # dpid -> {mac: port}

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features_handler(self, ev):
        datapath = ev.msg.datapath
        ofproto = datapath.ofproto
        parser = datapath.ofproto_parser
        # Table-miss: everything the switch does not know goes to the controller,
        # unbuffered (the whole packet, so it can be sent on with a packet-out).
        match = parser.OFPMatch()
        actions = [parser.OFPActionOutput(ofproto.OFPP_CONTROLLER, ofproto.OFPCML_NO_BUFFER)]
        self.add_flow(datapath, 0, match, actions)

    def add_flow(self, datapath, priority, match, actions, buffer_id=None):
        ofproto = datapath.ofproto
        parser = datapath.ofproto_parser
        inst = [parser.OFPInstructionActions(ofproto.OFPIT_APPLY_ACTIONS, actions)]
        if buffer_id is not None:
            mod = parser.OFPFlowMod(datapath=datapath, buffer_id=buffer_id,
                                    priority=priority, match=match, instructions=inst)
        else:
            mod = parser.OFPFlowMod(datapath=datapath, priority=priority, match=match,
                                    instructions=inst)
        datapath.send_msg(mod)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in_handler(self, ev):
        msg = ev.msg
        datapath = msg.datapath
        ofproto = datapath.ofproto
        parser = datapath.ofproto_parser
        in_port = msg.match["in_port"]

        eth = packet.Packet(msg.data).get_protocols(ethernet.ethernet)[0]
        if eth.ethertype == ether_types.ETH_TYPE_LLDP:
            return  # link discovery, not traffic
        dpid = datapath.id
        table = self.mac_to_port.setdefault(dpid, {})
        table[eth.src] = in_port  # learn where the sender is

        out_port = table.get(eth.dst, ofproto.OFPP_FLOOD)
        actions = [parser.OFPActionOutput(out_port)]
        if out_port != ofproto.OFPP_FLOOD:
            # Known destination: install the entry so the switch forwards the rest.
            match = parser.OFPMatch(in_port=in_port, eth_dst=eth.dst)
            if msg.buffer_id != ofproto.OFP_NO_BUFFER:
                self.add_flow(datapath, 1, match, actions, msg.buffer_id)
                return
            self.add_flow(datapath, 1, match, actions)
        data = msg.data if msg.buffer_id == ofproto.OFP_NO_BUFFER else None
        datapath.send_msg(parser.OFPPacketOut(datapath=datapath, buffer_id=msg.buffer_id,
                                              in_port=in_port, actions=actions, data=data))
