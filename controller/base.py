"""Plumbing every routing policy shares (OpenFlow 1.3, os-ken).

A policy app subclasses FabricApp and only decides how a leaf reaches the hosts of
other leaves (see single.py, ecmp.py, spread.py, adaptive.py). This module does the
rest:

- the fabric comes from fabric.json (topologies/fabricmap.py), not from LLDP discovery:
  the topology is fixed before the switches connect, so reading it is deterministic and
  routes can be installed without a discovery delay;
- ARP is answered by the controller from that map (packet-in -> packet-out reply).
  Nothing is ever flooded: a leaf-spine fabric has loops;
- every switch gets its proactive routes (hosts on their leaf, spines down to every
  host) plus the policy's own, then a barrier; when every switch of the map has
  answered its barrier, controller_ready.json is written (atomically);
- port counters are polled every --poll-interval into port_stats.csv, and feed the
  per-port rates of the last window (records.PortLoad);
- reactive policies get a packet-in path for new IPv4 flows: both directions are
  installed as exact-match entries on the same spine, and the packet that reached
  the controller is sent on along that path (packet-out), so none is lost;
- failures: a port-status (a port down or up) marks the link behind it dead while
  either end is down; then every switch loses the flows that output to a dead port,
  gets its routes over live ports back, and each leaf's routes are recomputed by its
  policy over ``usable_spines`` (spines whose uplink from the source leaf and
  downlink to the destination leaf both live); reactive placements over a dead link
  are forgotten (their next packet is placed again). One failover.csv row per change:
  when the port-status arrived and when every switch acknowledged the new state
  (barrier replies): the controller's reaction time.

Threads: os-ken's native hub runs handlers in the app's event thread and hub.spawn
starts real threads, so state shared with the poller is guarded by a lock.
"""
from __future__ import annotations

import threading
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER,
                                       set_ev_cls)
from os_ken.lib import hub
from os_ken.lib.packet import arp, ethernet, ether_types, ipv4, packet, tcp, udp
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_5

from incastlab.controller import paths, records
from incastlab.topologies import runformat
from incastlab.controller.registry import Settings

PRIO_ARP = 100     # ARP to the controller, above everything
PRIO_FLOW = 30     # exact-match 5-tuple entries of reactive policies
PRIO_HOST = 20     # proactive: a leaf's own hosts, a spine's downlinks
PRIO_REMOTE = 10   # a leaf's routes to other leaves' hosts (the policy's choice)
COOKIE_FLOW = 0x1C  # marks reactive exact-match entries (FlowRemoved bookkeeping)
OFP15 = ofproto_v1_5.OFP_VERSION

_SETTINGS: Settings | None = None


def configure(settings: Settings) -> None:
    """Hand the validated settings to the app the launcher is about to start.
    (AppManager builds apps itself, so they cannot be passed to the constructor.)"""
    global _SETTINGS
    _SETTINGS = settings


class FabricApp(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    POLICY = ""          # registry name, written into flow_paths.csv
    REACTIVE = False     # True: remote IPv4 goes to the controller, one placement per flow

    def __init__(self, *args, settings: Settings | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = settings or _SETTINGS
        if self.settings is None:
            raise RuntimeError("FabricApp needs settings: call base.configure() first")
        self.fabric = self.settings.fabric
        self.datapaths = {}          # dpid -> Datapath, switches of the map only
        self._barriers = {}          # dpid -> xid of the barrier after proactive rules
        self._installed = set()      # dpids whose barrier came back
        self._ready_written = False
        self._send_lock = threading.Lock()   # os-ken's set_xid is not atomic
        self._lock = threading.Lock()        # guards _placements (event thread, poller)
        self._placements = {}        # FlowKey -> spine, both directions of placed flows
        self._down_ports = set()     # (dpid, port) reported down by port-status
        self._reroutes = {}          # dpid -> [(xid of a reroute's barrier, its row)]
        self.load = records.PortLoad()
        out = self.settings.out_dir
        self.port_log = records.CsvLog.in_run(out, runformat.PORT_STATS)
        self.path_log = records.CsvLog.in_run(out, runformat.FLOW_PATHS)
        # one row per change of a link's liveness (reroute below)
        self.failover_log = records.CsvLog.in_run(out, runformat.FAILOVER)

    # ---- life cycle -------------------------------------------------------------
    def start(self):
        thread = super().start()
        self.threads.append(hub.spawn(self._poll_loop))
        return thread

    def close(self):
        self.is_active = False
        self.port_log.close()
        self.path_log.close()
        self.failover_log.close()

    # ---- hooks for policies -----------------------------------------------------
    def remote_actions(self, dp, leaf: int, host) -> list:
        """Actions of leaf ``leaf``'s proactive route to ``host`` on another leaf.
        Reactive policies keep the default: send to the controller."""
        parser, ofp = dp.ofproto_parser, dp.ofproto
        return [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]

    def install_policy_state(self, dp, leaf: int) -> None:
        """Anything a policy installs on a leaf before its routes (e.g. groups)."""

    def choose_spine(self, key: paths.FlowKey, src_leaf: int, dst_leaf: int) -> int:
        """Reactive policies: the spine for a new flow (called once per flow), one of
        ``usable_spines(src_leaf, dst_leaf)`` while any is."""
        raise NotImplementedError

    def reroute_leaf(self, dp, leaf: int) -> None:
        """After a link changed: bring leaf ``leaf``'s routes to other leaves' hosts in
        line with ``usable_spines``. The default re-adds each route with
        ``remote_actions`` (an add replaces the entry of the same match and priority);
        policies with groups override it (ecmp.py)."""
        parser = dp.ofproto_parser
        for host in paths.remote_hosts(self.fabric, leaf):
            self.add_flow(dp, PRIO_REMOTE,
                          parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ipv4_dst=host.ip),
                          self.remote_actions(dp, leaf, host))

    # ---- link liveness ------------------------------------------------------------
    def port_alive(self, dpid: int, port: int) -> bool:
        """The link behind port ``port`` of switch ``dpid`` carries traffic: neither of
        its switch ends was reported down."""
        if (dpid, port) in self._down_ports:
            return False
        egress = self.fabric.ports(dpid).get(port)
        peer = self.fabric.switch_named(egress.peer) if egress else None
        return peer is None or (peer.dpid, egress.peer_port) not in self._down_ports

    def usable_spines(self, src_leaf: int, dst_leaf: int) -> list[int]:
        """Spines an inter-leaf flow can cross now: the source leaf's uplink and the
        destination leaf's uplink to it both alive (spine order)."""
        return [s for s in paths.spine_indices(self.fabric)
                if self.port_alive(self.fabric.leaf(src_leaf).dpid,
                                   paths.uplink_port(self.fabric, src_leaf, s))
                and self.port_alive(self.fabric.leaf(dst_leaf).dpid,
                                    paths.uplink_port(self.fabric, dst_leaf, s))]

    # ---- helpers ------------------------------------------------------------------
    def send(self, dp, msg) -> None:
        # set_xid in os-ken is not atomic; the poller thread sends too.
        with self._send_lock:
            dp.send_msg(msg)

    def add_flow(self, dp, priority: int, match, actions, idle_timeout: int = 0,
                 cookie: int = 0, flags: int = 0) -> None:
        parser, ofp = dp.ofproto_parser, dp.ofproto
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        self.send(dp, parser.OFPFlowMod(datapath=dp, priority=priority, match=match,
                                        instructions=inst, idle_timeout=idle_timeout,
                                        cookie=cookie, flags=flags))

    def record_path(self, key: paths.FlowKey | None, src_ip: str, dst_ip: str,
                    spine: int) -> None:
        self.path_log.write({
            "t": f"{time.time():.6f}", "src_ip": src_ip, "dst_ip": dst_ip,
            "proto": key.proto if key else "", "src_port": key.src_port if key else "",
            "dst_port": key.dst_port if key else "", "spine": spine, "policy": self.POLICY})

    # ---- switch connection and proactive rules -------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _switch_features(self, ev):
        dp = ev.msg.datapath
        # os-ken's own handler sets dp.id from this same message in another green thread,
        # so dp.id may still be None here (seen): take the DPID from the message
        if dp.id is None:
            dp.id = ev.msg.datapath_id
        switch = self.fabric.switch(dp.id)
        if switch is None:
            self.logger.warning("switch %016x is not in the fabric map; ignored", dp.id)
            return
        self.datapaths[dp.id] = dp
        self._installed.discard(dp.id)
        # A port-status sent while it was away is lost: its own reports start afresh
        # (a link it lost is still dead through its peer's report).
        t_seen = time.time()
        stale = {key for key in self._down_ports if key[0] == dp.id}
        revived = [key for key in stale if not self.port_alive(*key)]
        self._down_ports -= stale
        revived = [key for key in revived if self.port_alive(*key)]
        self.logger.info("switch %s (%016x) connected", switch.name, dp.id)
        self.install_proactive(dp, switch)
        barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
        with self._send_lock:
            dp.set_xid(barrier)
            self._barriers[dp.id] = barrier.xid
            dp.send_msg(barrier)
        if revived:
            # links it had reported down before it went away (a switch_down) live again:
            # the other switches' routes must come back over them too
            self.reroute({"t_seen": f"{t_seen:.6f}", "switch": switch.name, "port": "",
                          "iface": "", "peer": "", "state": "up", "policy": self.POLICY})

    def install_proactive(self, dp, switch) -> None:
        parser, ofp = dp.ofproto_parser, dp.ofproto
        # Start from a clean table: a reconnecting switch keeps old entries.
        self.send(dp, parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE,
                                        table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                                        out_group=ofp.OFPG_ANY, match=parser.OFPMatch()))
        self.send(dp, parser.OFPGroupMod(datapath=dp, command=ofp.OFPGC_DELETE,
                                         group_id=ofp.OFPG_ALL))
        for rule in paths.host_rules(self.fabric):
            if rule.dpid == dp.id and self.port_alive(dp.id, rule.out_port):
                self.add_flow(dp, PRIO_HOST,
                              parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP,
                                              ipv4_dst=rule.ip_dst),
                              [parser.OFPActionOutput(rule.out_port)])
        if switch.role != "leaf":
            return  # spines see no ARP (answered at the leaves) and no other traffic
        self.add_flow(dp, PRIO_ARP, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_ARP),
                      [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])
        self.install_policy_state(dp, switch.index)
        for host in paths.remote_hosts(self.fabric, switch.index):
            self.add_flow(dp, PRIO_REMOTE,
                          parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ipv4_dst=host.ip),
                          self.remote_actions(dp, switch.index, host))
        # Anything else (IPv6, unknown addresses) matches nothing and is dropped.

    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _barrier_reply(self, ev):
        dp = ev.msg.datapath
        self._reroute_acked(dp.id, ev.msg.xid)
        if self._barriers.get(dp.id) != ev.msg.xid:
            return
        self._installed.add(dp.id)
        self.logger.info("switch %016x: proactive rules installed", dp.id)
        if not self._ready_written and self._installed >= set(self.fabric.dpids):
            path = records.write_ready(self.settings.out_dir, self.fabric.dpids, time.time())
            self._ready_written = True
            self.on_ready()
            self.logger.info("ready: all %d switches connected and routed (%s)",
                             len(self.fabric.dpids), path)

    def on_ready(self) -> None:
        """Called once when every switch is routed (e.g. to log proactive placements)."""

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev):
        dp = ev.datapath
        if ev.state == DEAD_DISPATCHER and dp.id in self.datapaths:
            self.logger.warning("switch %016x disconnected", dp.id)
            self.datapaths.pop(dp.id, None)
            self._installed.discard(dp.id)
            self._reroute_acked(dp.id, None)

    # ---- failures: port status ------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        t_seen = time.time()
        msg = ev.msg
        dp, desc, ofp = msg.datapath, msg.desc, msg.datapath.ofproto
        egress = self.fabric.ports(dp.id).get(desc.port_no)
        if egress is None:
            return  # the LOCAL port, or a port not in the map
        down = (msg.reason == ofp.OFPPR_DELETE or bool(desc.config & ofp.OFPPC_PORT_DOWN)
                or bool(desc.state & ofp.OFPPS_LINK_DOWN))
        key = (dp.id, desc.port_no)
        if down == (key in self._down_ports):
            return  # no change (e.g. a speed or a second flag)
        before = self.port_alive(*key)
        (self._down_ports.add if down else self._down_ports.discard)(key)
        self.logger.warning("port %s (%s -> %s) %s", egress.iface, egress.node, egress.peer,
                            "down" if down else "up")
        if self.port_alive(*key) == before:
            return  # the link's other end decides (still down there)
        self.reroute({"t_seen": f"{t_seen:.6f}", "switch": egress.node,
                      "port": desc.port_no, "iface": egress.iface, "peer": egress.peer,
                      "state": "down" if down else "up", "policy": self.POLICY})

    def reroute(self, row: dict) -> None:
        """Bring every connected switch in line with the live links, then a barrier
        each; the failover row is written when the last barrier comes back."""
        dead_keys = set()
        with self._lock:
            for key, spine in list(self._placements.items()):
                src = self.fabric.host_by_ip(key.src_ip)
                dst = self.fabric.host_by_ip(key.dst_ip)
                if src and dst and spine not in self.usable_spines(src.leaf, dst.leaf):
                    dead_keys.add(key)
                    del self._placements[key]
        pending = {}
        for dpid, dp in list(self.datapaths.items()):
            switch = self.fabric.switch(dpid)
            parser, ofp = dp.ofproto_parser, dp.ofproto
            for port in self.fabric.ports(dpid):
                if not self.port_alive(dpid, port):
                    # every entry that outputs there: host routes, placed flows, single
                    self.send(dp, parser.OFPFlowMod(
                        datapath=dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                        out_port=port, out_group=ofp.OFPG_ANY, match=parser.OFPMatch()))
            for rule in paths.host_rules(self.fabric):
                if rule.dpid == dpid and self.port_alive(dpid, rule.out_port):
                    self.add_flow(dp, PRIO_HOST,
                                  parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP,
                                                  ipv4_dst=rule.ip_dst),
                                  [parser.OFPActionOutput(rule.out_port)])
            if switch.role == "leaf":
                for key in dead_keys:
                    src = self.fabric.host_by_ip(key.src_ip)
                    if src.leaf == switch.index:
                        self.send(dp, parser.OFPFlowMod(
                            datapath=dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                            out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                            match=exact_match(parser, key)))
                self.reroute_leaf(dp, switch.index)
            barrier = parser.OFPBarrierRequest(dp)
            with self._send_lock:
                dp.set_xid(barrier)
                dp.send_msg(barrier)
            pending[dpid] = barrier.xid
        row = {**row, "switches": len(pending), "flows_moved": len(dead_keys)}
        with self._lock:
            row["_waiting"] = set(pending)
            for dpid, xid in pending.items():
                self._reroutes.setdefault(dpid, []).append((xid, row))
        if not pending:
            self._write_failover(row)

    def _reroute_acked(self, dpid: int, xid: int | None) -> None:
        """A barrier reply (xid; None: the switch is gone) acknowledges every reroute
        sent to that switch before it: one connection keeps its messages in order."""
        done = []
        with self._lock:
            entries = self._reroutes.get(dpid, [])
            if xid is not None and not any(x == xid for x, _ in entries):
                return
            acked = [(x, r) for x, r in entries if xid is None or x <= xid]
            self._reroutes[dpid] = [e for e in entries if e not in acked]
            for _x, row in acked:
                row["_waiting"].discard(dpid)
                if not row["_waiting"]:
                    done.append(row)
        for row in done:
            self._write_failover(row)

    def _write_failover(self, row: dict) -> None:
        t = time.time()
        row = {k: v for k, v in row.items() if not k.startswith("_")}
        row.update(t_installed=f"{t:.6f}", reaction_s=f"{t - float(row['t_seen']):.6f}")
        self.failover_log.write(row)
        self.logger.info("rerouted around %s %s in %s s", row["iface"], row["state"],
                         row["reaction_s"])

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _error(self, ev):
        msg = ev.msg
        self.logger.error("OpenFlow error from %016x: type=%d code=%d data=%s",
                          msg.datapath.id, msg.type, msg.code, msg.data[:64].hex())

    # ---- packet-in: ARP and new flows --------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        switch = self.fabric.switch(dp.id)
        if switch is None or switch.role != "leaf":
            return
        pkt = packet.Packet(msg.data)
        request = pkt.get_protocol(arp.arp)
        if request is not None:
            self.answer_arp(dp, msg.match["in_port"], request)
            return
        ip = pkt.get_protocol(ipv4.ipv4)
        if ip is not None and self.REACTIVE:
            self.route_new_flow(dp, switch.index, msg.match["in_port"], msg.data,
                                flow_key(pkt, ip))

    def answer_arp(self, dp, in_port: int, request) -> None:
        """Reply to an ARP request for a fabric host out of the port it came in on."""
        if request.opcode != arp.ARP_REQUEST or request.src_ip == request.dst_ip \
                or request.src_ip == "0.0.0.0":
            return  # replies, gratuitous ARP and address probes need no answer
        target = self.fabric.host_by_ip(request.dst_ip)
        if target is None:
            self.logger.debug("ARP for unknown %s dropped", request.dst_ip)
            return
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(dst=request.src_mac, src=target.mac,
                                             ethertype=ether_types.ETH_TYPE_ARP))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=target.mac,
                                   src_ip=target.ip, dst_mac=request.src_mac,
                                   dst_ip=request.src_ip))
        reply.serialize()
        self.packet_out(dp, dp.ofproto.OFPP_CONTROLLER, in_port, reply.data)

    def packet_out(self, dp, in_port: int, out_port: int, data: bytes) -> None:
        parser, ofp = dp.ofproto_parser, dp.ofproto
        # OpenFlow 1.5 (ecmp may speak it) moved in_port into a match.
        where = ({"match": parser.OFPMatch(in_port=in_port)}
                 if ofp.OFP_VERSION >= OFP15 else {"in_port": in_port})
        self.send(dp, parser.OFPPacketOut(datapath=dp, buffer_id=ofp.OFP_NO_BUFFER,
                                          actions=[parser.OFPActionOutput(out_port)],
                                          data=data, **where))

    def route_new_flow(self, dp, leaf: int, in_port: int, data: bytes,
                       key: paths.FlowKey) -> None:
        src, dst = self.fabric.host_by_ip(key.src_ip), self.fabric.host_by_ip(key.dst_ip)
        if src is None or dst is None or src.leaf != leaf or dst.leaf == leaf:
            return  # not ours to route (spoofed or unknown address)
        with self._lock:
            spine = self._placements.get(key) or self._placements.get(key.reversed())
            new = spine is None
            if new:
                spine = self.choose_spine(key, src.leaf, dst.leaf)
                self._placements[key.reversed()] = spine
            self._placements[key] = spine
        # Rules before the packet-out: the same connection keeps them in order.
        self.install_exact(self.datapaths.get(dp.id), key, paths.uplink_port(
            self.fabric, src.leaf, spine))
        if new:
            self.install_exact(self.datapaths.get(self.fabric.leaf(dst.leaf).dpid),
                               key.reversed(),
                               paths.uplink_port(self.fabric, dst.leaf, spine))
            self.record_path(key, key.src_ip, key.dst_ip, spine)
        self.packet_out(dp, in_port, paths.uplink_port(self.fabric, src.leaf, spine), data)

    def install_exact(self, dp, key: paths.FlowKey, out_port: int) -> None:
        if dp is None:
            return
        parser, ofp = dp.ofproto_parser, dp.ofproto
        self.add_flow(dp, PRIO_FLOW, exact_match(parser, key),
                      [parser.OFPActionOutput(out_port)],
                      idle_timeout=self.settings.idle_timeout, cookie=COOKIE_FLOW,
                      flags=ofp.OFPFF_SEND_FLOW_REM)

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def _flow_removed(self, ev):
        msg = ev.msg
        if msg.cookie != COOKIE_FLOW:
            return
        m = msg.match
        proto = m.get("ip_proto", 0)
        key = paths.FlowKey(proto, m.get("ipv4_src"), m.get("ipv4_dst"),
                            m.get("tcp_src", m.get("udp_src", 0)),
                            m.get("tcp_dst", m.get("udp_dst", 0)))
        with self._lock:
            self._placements.pop(key, None)

    # ---- statistics -----------------------------------------------------------------
    def _poll_loop(self):
        while self.is_active:
            for dp in list(self.datapaths.values()):
                parser, ofp = dp.ofproto_parser, dp.ofproto
                self.send(dp, parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
            hub.sleep(self.settings.poll_interval)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev):
        t = time.time()
        dp = ev.msg.datapath
        switch = self.fabric.switch(dp.id)
        if switch is None:
            return
        for row in records.port_stats_rows(t, switch.name, self.fabric.ports(dp.id),
                                           ev.msg.body):
            self.load.update(dp.id, row["port"], t, row["tx_bytes"])
            self.port_log.write(row)


def flow_key(pkt, ip) -> paths.FlowKey:
    """The 5-tuple of an IPv4 packet (ports 0 unless TCP or UDP)."""
    l4 = pkt.get_protocol(tcp.tcp) or pkt.get_protocol(udp.udp)
    if l4 is None:
        return paths.FlowKey(ip.proto, ip.src, ip.dst)
    return paths.FlowKey(ip.proto, ip.src, ip.dst, l4.src_port, l4.dst_port)


def exact_match(parser, key: paths.FlowKey):
    """OpenFlow match on one direction of a flow (the ports only for TCP/UDP)."""
    fields = {"eth_type": ether_types.ETH_TYPE_IP, "ip_proto": key.proto,
              "ipv4_src": key.src_ip, "ipv4_dst": key.dst_ip}
    if key.proto == paths.TCP:
        fields.update(tcp_src=key.src_port, tcp_dst=key.dst_port)
    elif key.proto == paths.UDP:
        fields.update(udp_src=key.src_port, udp_dst=key.dst_port)
    return parser.OFPMatch(**fields)
