"""Policy ``app``'s companion: watches the fabric while the user's own apps route it.

With ``--policy app`` it runs in the same os-ken process as the user's apps; with
``--policy external`` it is a second controller of every switch beside the user's, and
asks each switch for the slave role first, so it gets no packet-ins and could not
change a table if it tried. Either way it never sends a flow or a packet: it only

- writes ``controller_ready.json`` once every switch of the fabric map has connected
  (what the fabric waits for; whether routes work is then checked with pings), and
- polls port counters every ``--poll-interval`` into ``port_stats.csv``, the same
  file the built-in policies write.

``flow_paths.csv`` is not written: which spine an unknown app chose is not known here.
``OFP_VERSIONS = None`` leaves the OpenFlow version to the user's apps (os-ken uses the
intersection of every app's versions).
"""
from __future__ import annotations

import threading
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER,
                                       set_ev_cls)
from os_ken.lib import hub

from incastlab.controller import records
from incastlab.controller.registry import POLICIES, Settings
from incastlab.topologies import runformat

_SETTINGS: Settings | None = None


def configure(settings: Settings) -> None:
    """Hand the validated settings to the observer the launcher is about to start."""
    global _SETTINGS
    _SETTINGS = settings


class FabricObserver(app_manager.OSKenApp):
    OFP_VERSIONS = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if _SETTINGS is None:
            raise RuntimeError("FabricObserver needs settings: call observer.configure()")
        self.settings = _SETTINGS
        self.fabric = self.settings.fabric
        self.slave = POLICIES[self.settings.policy].external  # beside the user's controller
        self.datapaths = {}            # dpid -> Datapath, switches of the map only
        self._ready_written = False
        self._lock = threading.Lock()  # the poller thread and the event thread
        self.port_log = records.CsvLog.in_run(self.settings.out_dir, runformat.PORT_STATS)

    def start(self):
        thread = super().start()
        self.threads.append(hub.spawn(self._poll_loop))
        return thread

    def close(self):
        self.is_active = False
        self.port_log.close()

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _switch_features(self, ev):
        dp = ev.msg.datapath
        # Not dp.id: os-ken's own handler sets it from this very message in another
        # thread (native hub), and this one often runs first (seen: None here).
        dpid = ev.msg.datapath_id
        switch = self.fabric.switch(dpid)
        if switch is None:
            self.logger.warning("switch %016x is not in the fabric map; ignored", dpid)
            return
        if self.slave:
            # Before anything else: an equal-role controller would get packet-ins too.
            ofp, parser = dp.ofproto, dp.ofproto_parser
            # Keywords: OpenFlow 1.5's constructor has short_id before generation_id.
            dp.send_msg(parser.OFPRoleRequest(dp, role=ofp.OFPCR_ROLE_SLAVE, generation_id=0))
        with self._lock:
            self.datapaths[dpid] = dp
            connected = set(self.datapaths)
        self.logger.info("switch %s (%016x) connected%s", switch.name, dpid,
                         " (slave role asked for)" if self.slave else "")
        if not self._ready_written and connected >= set(self.fabric.dpids):
            path = records.write_ready(self.settings.out_dir, self.fabric.dpids, time.time())
            self._ready_written = True
            self.logger.info("ready: all %d switches connected (%s); the app(s) route them",
                             len(self.fabric.dpids), path)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _error(self, ev):
        msg = ev.msg
        self.logger.error("OpenFlow error from %016x: type=%d code=%d data=%s",
                          msg.datapath.id, msg.type, msg.code, msg.data[:64].hex())

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev):
        dp = ev.datapath
        if ev.state == DEAD_DISPATCHER and dp.id in self.datapaths:
            self.logger.warning("switch %016x disconnected", dp.id)
            with self._lock:
                self.datapaths.pop(dp.id, None)

    def _poll_loop(self):
        while self.is_active:
            with self._lock:
                dps = list(self.datapaths.values())
            for dp in dps:
                parser, ofp = dp.ofproto_parser, dp.ofproto
                # The connection's own lock is not ours to take; os-ken's send_msg
                # queues the message, and set_xid races only with the user's app
                # sending at the same instant (a duplicate xid on a stats request).
                dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
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
            self.port_log.write(row)
