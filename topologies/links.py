"""Interfaces with real, countable switch queues — without netem.

Mininet's ``TCLink(max_queue_size=...)`` puts the packet limit on a netem qdisc, and
this machine kind has no netem. So every switch egress port gets

    root HTB (rate = link bw) -> class 1:1 -> pfifo limit=queue_packets  (handle 10:)

which makes drops happen in one known queue and be counted by ``tc -s qdisc show``.
Hosts get the same HTB shaping with a deep pfifo (``HOST_QUEUE_PACKETS``), like a NIC's
txqueuelen, so that congestion drops happen in the fabric, not in the sender's stack —
plus one thing switches do not get: pure ACKs (TCP segments without payload, FIN or RST,
picked exactly by a cls_bpf filter compiled from PURE_ACK_EXPR) have an HTB class of
their own that is served first (handle ``30:``; everything else stays in ``10:``):

    root HTB -> 1:1 (rate = link bw) -> 1:20 bulk, prio 1 -> pfifo (handle 10:)
                                     -> 1:30 ACKs, prio 0 -> pfifo (handle 30:)

Why: a host that sends and receives at once (every rank of a ring all-reduce; not a PS
worker, which only pushes) used to put the ACKs of its incoming flow behind its own
outgoing data in one FIFO. TCP small queues keep that FIFO at tens of packets, not 1000,
but that is still milliseconds per ACK: in a 4-rank ring at 50 Mbit/s the captures
showed a median of 5-10 ms (90th percentile 15-19 ms) between a data packet's arrival
and its ACK leaving the host, against 2 ms in the switch queues, which inflates every
incoming flow's RTT and ACK-clocks it in bursts. With this class the turnaround is
0.2 ms (benchmarks/allreduce_efficiency.py; root test
test_hosts_send_acks_ahead_of_their_own_data: 18 ms median in one FIFO at 20 Mbit/s).
Why pure ACKs only: an earlier version sent every packet under 128 bytes first, and the
short last segment of a data message then overtook the full segments queued before it
on the same connection; the receiver saw reordering, and the senders retransmitted data
that had not been lost (a ring demo run: 19 spurious retransmissions, and the captures
counted reordered originals as retransmissions). A pure ACK occupies no sequence space,
so sending it early reorders nothing TCP cares about.
Trade-off: a real host's NIC ring is a FIFO, but the qdisc above it is, on any current
Linux, flow-fair (fq_codel or fq, neither of which this kernel has), and there a pure-ACK
flow does not wait behind a bulk flow either (while a flow's own packets stay in order);
a shared deep FIFO was the less faithful choice. The class only reorders the host's own
packets across connections: its rate, the switch queues and what they hold are
unchanged. (What tc *counts* as dropped at a switch port does shift with the packet mix:
see analysis/reconcile.py on the OVS userspace send path.) The ACK class is guaranteed
ACK_SHARE of the link and may borrow the rest; bulk may borrow all of it.

Where a delay is asked for, netem (with the packet limit) replaces the pfifo child;
bring-up refuses a delay when the kernel has no netem (see incastlab.preflight).

Segmentation offloads are switched off on every interface: with OVS's userspace
datapath TCP stalls otherwise, and captures then show wire-sized packets.
"""
from __future__ import annotations

import functools
import subprocess

from mininet.link import Intf, Link
from mininet.node import OVSSwitch, Switch

HOST_QUEUE_PACKETS = 1000
QUEUE_HANDLE = "10:"  # the pfifo (or netem) child that holds the packets
ACK_HANDLE = "30:"  # hosts: the queue of pure ACKs, served first
ACK_SHARE = 0.1  # the ACK class's guaranteed share of the host link
# Pure ACKs: TCP segments that carry no payload, no FIN and no RST (SYNs included:
# nothing of their connection can be queued before them; a FIN or RST overtaking queued
# data would end the connection early). Compiled by tcpdump into classic BPF for
# cls_bpf, so the test is exact: IP length = IP header + TCP header.
PURE_ACK_EXPR = ("tcp and (tcp[13] & 5) == 0 and "
                 "ip[2:2] - ((ip[0] & 0xf) << 2) - ((tcp[12] & 0xf0) >> 2) == 0")
OFFLOADS = ("tx", "tso", "gso")


def tc_commands(dev: str, bw_mbps: float, queue_packets: int, delay: str | None,
                ack_filter: str | None = None) -> list[list[str]]:
    """The tc argument lists that shape ``dev`` to ``bw_mbps`` Mbit/s with a queue of
    ``queue_packets`` packets (pure: unit-tested without root).

    ``ack_filter`` (hosts): classic-BPF bytecode in tc's "n,c t f k,..." form that picks
    pure ACKs (see PURE_ACK_EXPR and `ack_filter_bytecode`); they go to a class of their
    own that HTB serves before the bulk class, so that a host's ACKs do not wait behind
    its own outgoing data."""
    # burst: at least one MTU-sized packet plus headroom; HTB's default burst at tens of
    # Mbit/s is ~1.6 kB and makes the achieved rate fall short under timer slack.
    burst_bytes = max(15_000, int(bw_mbps * 1e6 / 8 / 1000))  # >= 1 ms at line rate

    def htb_rate(mbps: float) -> list[str]:  # guaranteed mbps, may borrow up to the link
        return ["rate", f"{mbps:g}mbit", "ceil", f"{bw_mbps:g}mbit",
                "burst", str(burst_bytes), "cburst", str(burst_bytes)]

    rate = htb_rate(bw_mbps)
    if delay:
        child = ["netem", "delay", delay, "limit", str(queue_packets)]
    else:
        child = ["pfifo", "limit", str(queue_packets)]
    if not ack_filter:
        return [
            ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
            ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", *rate],
            ["tc", "qdisc", "replace", "dev", dev, "parent", "1:1", "handle", QUEUE_HANDLE,
             *child],
        ]
    return [
        ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default",
         "20"],
        ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", *rate],
        ["tc", "class", "replace", "dev", dev, "parent", "1:1", "classid", "1:20", "htb",
         *htb_rate(bw_mbps * (1 - ACK_SHARE)), "prio", "1"],
        ["tc", "class", "replace", "dev", dev, "parent", "1:1", "classid", "1:30", "htb",
         *htb_rate(bw_mbps * ACK_SHARE), "prio", "0"],
        ["tc", "qdisc", "replace", "dev", dev, "parent", "1:20", "handle", QUEUE_HANDLE,
         *child],
        ["tc", "qdisc", "replace", "dev", dev, "parent", "1:30", "handle", ACK_HANDLE,
         *child],  # the same delay (if any) as the bulk queue, never behind its packets
        ["tc", "filter", "replace", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
         "bpf", "bytecode", ack_filter, "classid", "1:30"],
    ]


BPF_RET_K = 6  # classic BPF "ret #k"
CLS_BPF_USE_CLASSID = 0xFFFFFFFF  # cls_bpf: -1 = "matched: use this filter's classid"


def ack_filter_bytecode(tcpdump_ddd: str) -> str:
    """``tcpdump -ddd`` output (a count line, then "code jt jf k" lines) in the
    comma-separated form ``tc ... bpf bytecode`` takes (pure).

    tcpdump's programs return the snap length on a match; cls_bpf (not in direct-action
    mode) reads any return value other than 0 and -1 as a class id, so every non-zero
    ``ret #k`` becomes ``ret #-1``: "matched, use the filter's classid"."""
    lines = [ln.strip() for ln in tcpdump_ddd.strip().splitlines() if ln.strip()]
    if not lines or not lines[0].isdigit() or int(lines[0]) != len(lines) - 1:
        raise ValueError(f"not tcpdump -ddd output: {tcpdump_ddd[:200]!r}")
    insns = []
    for ln in lines[1:]:
        code, jt, jf, k = (int(x) for x in ln.split())
        if code == BPF_RET_K and k != 0:
            k = CLS_BPF_USE_CLASSID
        insns.append(f"{code} {jt} {jf} {k}")
    return ",".join([lines[0], *insns])


@functools.lru_cache(maxsize=1)
def pure_ack_bytecode() -> str:
    """PURE_ACK_EXPR compiled by tcpdump for Ethernet framing (the veths' link type);
    tcpdump compiles it offline, with no interface and no privileges."""
    out = subprocess.run(["tcpdump", "-y", "EN10MB", "-ddd", PURE_ACK_EXPR],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"tcpdump could not compile the ACK filter: {out.stderr.strip()}")
    return ack_filter_bytecode(out.stdout)


def _run(intf: Intf, argv: list[str]) -> str:
    """Run argv in the interface's node (its namespace); raise on failure."""
    import shlex

    out = intf.node.cmd(" ".join(shlex.quote(a) for a in argv) + " 2>&1; echo __rc=$?")
    body, _, rc = out.rpartition("__rc=")
    if rc.strip() != "0":
        raise RuntimeError(f"{' '.join(argv)} failed on {intf.node.name}: {body.strip()}")
    return body


class QueuedIntf(Intf):
    """An interface shaped to ``bw`` Mbit/s with a pfifo of ``queue_packets`` packets
    on switches (a deep one on hosts) and segmentation offloads off."""

    def config(self, bw=None, queue_packets=None, delay=None, **params):
        result = Intf.config(self, **params)
        _run(self, ["ethtool", "-K", self.name] + [w for o in OFFLOADS for w in (o, "off")])
        # No IPv6 on emulated links: switch ports in the root namespace would otherwise
        # send router solicitations and MLD reports into the fabric and the captures.
        _run(self, ["sysctl", "-qw", f"net.ipv6.conf.{self.name}.disable_ipv6=1"])
        self.bw, self.queue_packets, self.delay = bw, queue_packets, delay
        self.apply_queue()
        return result

    def apply_queue(self) -> None:
        """(Re)install the shaping qdiscs from the parameters given at creation."""
        if self.bw:
            on_switch = isinstance(self.node, Switch)
            limit = self.queue_packets if (on_switch and self.queue_packets) \
                else HOST_QUEUE_PACKETS
            ack_filter = None if on_switch else pure_ack_bytecode()
            for argv in tc_commands(self.name, float(self.bw), int(limit), self.delay,
                                    ack_filter=ack_filter):
                _run(self, argv)


class QueuedOVSSwitch(OVSSwitch):
    """OVSSwitch that keeps our queues: when OVS adds a port without a QoS row it
    resets the port's root qdisc (the veth goes back to ``noqueue``). So after start,
    give every port QoS type ``linux-noop`` — "leave tc alone" — and reinstall ours."""

    OWNER_KEY = "incastlab-state"

    def __init__(self, name, owner=None, **params):
        """owner: an id written into the bridge's external_ids as it is created, so that
        clean-up can tell our bridge from someone else's of the same name."""
        OVSSwitch.__init__(self, name, **params)
        self.owner = owner

    def bridgeOpts(self):
        opts = OVSSwitch.bridgeOpts(self)
        if self.owner:
            opts += f" external_ids:{self.OWNER_KEY}={self.owner}"
        return opts

    def start(self, controllers):
        OVSSwitch.start(self, controllers)
        for intf in self.intfList():
            if isinstance(intf, QueuedIntf) and intf.bw:
                self.vsctl("--", "set", "Port", intf.name, "qos=@noop", "--",
                           "--id=@noop", "create", "QoS", "type=linux-noop")
                intf.apply_queue()


class QueuedLink(Link):
    """A veth pair of QueuedIntfs. (Mininet's addLink always passes its own ``intf``
    default, so ``partial(Link, intf=...)`` would be overridden: force it here.)"""

    def __init__(self, node1, node2, **params):
        params["intf"] = QueuedIntf
        super().__init__(node1, node2, **params)
