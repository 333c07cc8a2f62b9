"""Leaf–spine and star topologies as pure Mininet ``Topo`` descriptions.

Nothing here runs anything: ``build()`` only calls addHost/addSwitch/addLink, so
names, DPIDs, ports and addresses are unit-tested without root. Names and numbers
come from :mod:`naming` (documented there, decided nowhere else).

Stock Mininet can load this file on its own::

    sudo mn --custom topologies/leafspine.py --topo leafspine,2,4,2 \\
        --controller remote,ip=127.0.0.1,port=6653 --switch ovs,protocols=OpenFlow13

Link parameters ``bw`` (Mbit/s), ``queue_packets`` or ``queue_bytes``, ``mtu`` (bytes)
and ``delay`` are read by :class:`incastlab.topologies.links.QueuedIntf`; plain Mininet
links ignore them.
"""
from __future__ import annotations

from mininet.topo import Topo

try:
    from incastlab.topologies import fabricmap, naming
except ImportError:  # loaded by stock `mn --custom` without incastlab installed
    import importlib.util
    import inspect
    import os
    import sys

    _here = os.path.dirname(os.path.abspath(inspect.currentframe().f_code.co_filename))

    def _sibling(name):
        spec = importlib.util.spec_from_file_location(f"_incastlab_{name}",
                                                      os.path.join(_here, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while decorating
        spec.loader.exec_module(module)
        return module

    naming, fabricmap = _sibling("naming"), _sibling("fabricmap")

DEFAULT_HOST_BW = 20.0  # Mbit/s: far below the ~2 Gbit/s the userspace datapath manages
DEFAULT_QUEUE_PACKETS = 100
DEFAULT_MTU = fabricmap.DEFAULT_MTU
MAX_QUEUE_BYTES = 100_000_000  # a 100 MB port buffer: beyond any switch's per-port share


class TopologyError(ValueError):
    """A topology parameter is out of range; the message names the parameter."""


def _require_int(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"{name} must be an integer from {low} to {high}, got {value!r}")
    if not low <= value <= high:
        raise TopologyError(f"{name} must be from {low} to {high}, got {value}")
    return value


def _require_rate(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise TopologyError(f"{name} must be a positive rate in Mbit/s, got {value!r}")
    if value > 10_000:
        raise TopologyError(f"{name} must be at most 10000 Mbit/s, got {value}")
    return float(value)


def _require_queue(queue_packets, queue_bytes, mtu: int) -> tuple[int | None, int | None]:
    """(queue_packets, queue_bytes) with exactly one set: neither given means
    DEFAULT_QUEUE_PACKETS; a byte limit must hold at least one full frame."""
    if queue_packets is not None and queue_bytes is not None:
        raise TopologyError(f"queue_bytes ({queue_bytes!r}) and queue_packets "
                            f"({queue_packets!r}): give one of them, not both")
    if queue_bytes is None:
        return _require_int("queue_packets", DEFAULT_QUEUE_PACKETS if queue_packets is None
                            else queue_packets, 1, 100_000), None
    return None, _require_int("queue_bytes", queue_bytes, fabricmap.frame_bytes(mtu),
                              MAX_QUEUE_BYTES)


def _require_delay(value) -> str | None:
    if value is None:
        return None
    text = str(value)
    import re

    if not re.fullmatch(r"\d+(\.\d+)?(us|ms|s)", text):
        raise TopologyError(f"delay must look like '2ms', '500us' or '0.1s', got {value!r}")
    return text


class LeafSpineTopo(Topo):
    """A two-tier Clos: every leaf links to every spine, hosts hang off leaves.

    spines, leaves, hosts_per_leaf: counts (>= 1).
    host_bw: host<->leaf link rate in Mbit/s.
    fabric_bw: leaf<->spine link rate in Mbit/s. Default: non-blocking, i.e.
        hosts_per_leaf * host_bw / spines, unless ``oversubscription`` is given, in
        which case fabric_bw = hosts_per_leaf * host_bw / (spines * oversubscription).
    queue_packets: pfifo limit of every switch egress queue, in packets (default
        DEFAULT_QUEUE_PACKETS unless queue_bytes is given).
    delay: per-link one-way delay ('2ms'); needs netem (checked at bring-up).
    mtu: every interface's MTU in bytes (fabricmap.MTU_RANGE; 1500 by default, 9000 for
        jumbo frames).
    queue_bytes: instead of queue_packets, a bfifo limit in bytes (at least one frame,
        mtu + 14); not with delay (netem's limit counts packets).
    """

    def build(self, spines=2, leaves=2, hosts_per_leaf=2, host_bw=DEFAULT_HOST_BW,
              fabric_bw=None, queue_packets=None, delay=None,
              oversubscription=None, mtu=DEFAULT_MTU, queue_bytes=None):
        # Stock `mn --topo leafspine,2,4,2` passes strings through its own parser as
        # ints already; accept only ints here so a typo cannot become a float fabric.
        self.spines = _require_int("spines", spines, 1, naming.MAX_SPINES)
        self.leaves = _require_int("leaves", leaves, 1, naming.MAX_LEAVES)
        self.hosts_per_leaf = _require_int(
            "hosts_per_leaf", hosts_per_leaf, 1, naming.MAX_HOSTS_PER_LEAF)
        if self.hosts_per_leaf + self.spines > naming.MAX_HOSTS_PER_LEAF:
            raise TopologyError(
                f"hosts_per_leaf + spines must be at most {naming.MAX_HOSTS_PER_LEAF} "
                f"(leaf port numbers), got {self.hosts_per_leaf + self.spines}")
        self.host_bw = _require_rate("host_bw", host_bw)
        self._require_queues(queue_packets, queue_bytes, mtu, delay)
        if fabric_bw is not None and oversubscription is not None:
            raise TopologyError("give either fabric_bw or oversubscription, not both")
        if oversubscription is not None:
            if isinstance(oversubscription, bool) or not isinstance(
                    oversubscription, (int, float)) or not oversubscription >= 1:
                raise TopologyError(
                    f"oversubscription must be a ratio >= 1, got {oversubscription!r}")
            fabric_bw = self.hosts_per_leaf * self.host_bw / (self.spines * oversubscription)
        elif fabric_bw is None:
            fabric_bw = self.hosts_per_leaf * self.host_bw / self.spines
        self.fabric_bw = _require_rate("fabric_bw", fabric_bw)

        queue = self._link_params()
        for j in range(1, self.spines + 1):
            self.addSwitch(naming.spine_name(j), dpid=naming.dpid_str(naming.spine_dpid(j)),
                           role="spine", index=j)
        for i in range(1, self.leaves + 1):
            leaf = naming.leaf_name(i)
            self.addSwitch(leaf, dpid=naming.dpid_str(naming.leaf_dpid(i)), role="leaf", index=i)
            for k in range(1, self.hosts_per_leaf + 1):
                host = naming.host_name(i, k, self.hosts_per_leaf)
                self.addHost(host, ip=f"{naming.host_ip(i, k)}/{naming.PREFIX_LEN}",
                             mac=naming.host_mac(i, k), leaf=i, index=k)
                self.addLink(host, leaf, port1=0, port2=naming.leaf_host_port(k),
                             bw=self.host_bw, **queue)
            for j in range(1, self.spines + 1):
                self.addLink(leaf, naming.spine_name(j),
                             port1=naming.leaf_uplink_port(j, self.hosts_per_leaf),
                             port2=naming.spine_downlink_port(i), bw=self.fabric_bw, **queue)

    def _require_queues(self, queue_packets, queue_bytes, mtu, delay) -> None:
        """Check and keep mtu, the switch queues' limit and delay (shared by both kinds)."""
        self.mtu = _require_int("mtu", mtu, *fabricmap.MTU_RANGE)
        self.queue_packets, self.queue_bytes = _require_queue(queue_packets, queue_bytes,
                                                              self.mtu)
        self.delay = _require_delay(delay)
        if self.delay and self.queue_bytes is not None:
            raise TopologyError("queue_bytes cannot be combined with delay: netem's queue "
                                "limit counts packets (use queue_packets)")

    def _link_params(self) -> dict:
        """What every link passes to its interfaces (links.QueuedIntf.config); the
        defaults (MTU 1500, a packet limit) exactly as before these options existed."""
        params = {"queue_packets": self.queue_packets}
        if self.queue_bytes is not None:
            params = {"queue_bytes": self.queue_bytes}
        if self.mtu != DEFAULT_MTU:
            params["mtu"] = self.mtu
        if self.delay:
            params["delay"] = self.delay
        return params

    def fabric_map(self) -> fabricmap.FabricMap:
        """The fabric map (``fabric.json``): what the controller routes on and the
        analysis reads. Rates in Mbit/s, ports as OpenFlow port numbers."""
        return fabric_map(self)


class StarTopo(LeafSpineTopo):
    """The classic incast bench: one switch (leaf ``lf1``), ``senders`` sending hosts
    ``h1..hN`` and the receiver, the last host ``h{N+1}``. A leaf–spine with one leaf
    and no spines, so the same naming, queues and controller apply."""

    def build(self, senders=4, host_bw=DEFAULT_HOST_BW, queue_packets=None,
              delay=None, mtu=DEFAULT_MTU, queue_bytes=None):
        self.senders = _require_int("senders", senders, 1, naming.MAX_HOSTS_PER_LEAF - 1)
        self.spines = 0
        self.leaves = 1
        self.hosts_per_leaf = self.senders + 1
        self.host_bw = _require_rate("host_bw", host_bw)
        self.fabric_bw = None
        self._require_queues(queue_packets, queue_bytes, mtu, delay)
        queue = self._link_params()
        leaf = naming.leaf_name(1)
        self.addSwitch(leaf, dpid=naming.dpid_str(naming.leaf_dpid(1)), role="leaf", index=1)
        for k in range(1, self.hosts_per_leaf + 1):
            host = naming.host_name(1, k, self.hosts_per_leaf)
            self.addHost(host, ip=f"{naming.host_ip(1, k)}/{naming.PREFIX_LEN}",
                         mac=naming.host_mac(1, k), leaf=1, index=k)
            self.addLink(host, leaf, port1=0, port2=naming.leaf_host_port(k),
                         bw=self.host_bw, **queue)

    @property
    def receiver(self) -> str:
        return naming.host_name(1, self.hosts_per_leaf, self.hosts_per_leaf)


def fabric_map(topo: LeafSpineTopo) -> fabricmap.FabricMap:
    """The typed map of a built topology (see LeafSpineTopo.fabric_map): the one writer
    of fabric.json. Everything comes from the topology's own node and link records."""
    switches = []
    for name in topo.switches():
        info = topo.nodeInfo(name)
        switches.append(fabricmap.Switch(name=name, role=info["role"], index=info["index"],
                                         dpid=int(info["dpid"], 16)))
    hosts = []
    for name in topo.hosts():
        info = topo.nodeInfo(name)
        hosts.append(fabricmap.Host(
            name=name, leaf=info["leaf"], index=info["index"], ip=info["ip"].split("/")[0],
            mac=info["mac"], leaf_port=naming.leaf_host_port(info["index"]),
            intf=naming.intf_name(name, 0)))
    links = []
    for _a, _b, info in topo.links(sort=True, withInfo=True):
        links.append(fabricmap.Link(
            node1=info["node1"], port1=info["port1"], node2=info["node2"], port2=info["port2"],
            intf1=naming.intf_name(info["node1"], info["port1"]),
            intf2=naming.intf_name(info["node2"], info["port2"]),
            bw_mbps=float(info["bw"]), queue_packets=info.get("queue_packets"),
            queue_bytes=info.get("queue_bytes")))
    return fabricmap.FabricMap(
        kind=type(topo).__name__, spines=topo.spines, leaves=topo.leaves,
        hosts_per_leaf=topo.hosts_per_leaf, host_bw_mbps=topo.host_bw,
        fabric_bw_mbps=topo.fabric_bw, queue_packets=topo.queue_packets, delay=topo.delay,
        subnet=naming.SUBNET, switches=tuple(switches), hosts=tuple(hosts), links=tuple(links),
        mtu=topo.mtu, queue_bytes=topo.queue_bytes)


TOPOS = {"leafspine": LeafSpineTopo, "star": StarTopo}
topos = TOPOS  # the name `mn --custom` looks for; one registry serves both
