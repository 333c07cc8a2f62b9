"""Interfaces with real, countable switch queues — without netem.

Mininet's ``TCLink(max_queue_size=...)`` puts the packet limit on a netem qdisc, and
this machine kind has no netem. So every switch egress port gets

    root HTB (rate = link bw) -> class 1:1 -> pfifo limit=queue_packets  (handle 10:)
                                          or bfifo limit=queue_bytes

which makes drops happen in one known queue, counted by ``tc -s qdisc show``. A bfifo
drops a frame that would take the backlog past its byte limit, whatever the frame's
size. Where a delay is asked for, netem (with the packet limit) replaces the child;
bring-up refuses a delay when the kernel has no netem (see incastlab.preflight).

The MTU (``mtu``, 1500 by default, up to 9000) is set on every host and switch
interface (and as OVS's ``mtu_request`` on switch ports); every size derived from a
frame follows it: a frame is mtu + 14 bytes (`frame_bytes`), a full segment carries
mtu - 52 (`mss_bytes`), the hosts' quantum is one frame, HTB's bucket at least two.

Hosts are shaped flow-fair, as a Linux host's fq/fq_codel would (this kernel has
neither): FLOW_CLASSES leaf FIFOs (pfifo of ``HOST_QUEUE_PACKETS``, deep like a NIC's
txqueuelen) served round-robin one frame at a time under the link's single token
bucket, each connection hashed to one by a classic-BPF program run by cls_bpf
(`flow_hash_bytecode`, mirrored by `flow_slot`: a symmetric hash of the 4-tuple, so a
connection has one slot in both directions; non-IP frames take slot 0):

    root HTB -> 1:1 (rate = link bw, the only token bucket) -> 1:100 .. 1:13f, one per
                slot, rate ~0, ceil = link, quantum = one frame -> pfifo (100: .. 13f:)

so a host's ACKs never wait behind another connection's bulk, and nothing of a
connection overtakes anything of the same connection. Offloads are off on every
interface (the userspace datapath stalls TCP otherwise), and ``gso_max_segs`` =
`gso_segments` (bw), ~1 ms of segments at the link rate, bounds the software-GSO
bursts the qdisc sees. Why each of these, with the measurements:
docs/decisions/003-host-flow-fifos.md and docs/emulation.md.
"""
from __future__ import annotations

import ipaddress
import os
import shlex
import tempfile

from mininet.link import Intf, Link
from mininet.node import OVSSwitch, Switch

from incastlab.topologies.fabricmap import DEFAULT_MTU, frame_bytes, mss_bytes

HOST_QUEUE_PACKETS = 1000  # per host flow class
QUEUE_HANDLE = "10:"  # switches: the pfifo/bfifo (or netem) child that holds the packets
FLOW_CLASSES = 64  # hosts: per-connection FIFOs served round-robin
FLOW_MINOR_BASE = 0x100  # slot s is HTB class 1:(0x100 + s), its FIFO handle (0x100 + s):
FLOW_QUANTUM = frame_bytes(DEFAULT_MTU)  # one full frame at MTU 1500: 1514 bytes
FLOW_LEAF_RATE = "8kbit"  # ~0: every byte borrows from 1:1 (see the module docstring)
# The flow hash: Knuth's multiplicative constants (golden ratio; MurmurHash3's fmix).
HASH_K1 = 0x9E3779B1
HASH_K2 = 0x85EBCA6B
OFFLOADS = ("tx", "tso", "gso")


MSS_BYTES = mss_bytes(DEFAULT_MTU)  # 1448: TCP payload of a 1514-byte frame


def gso_segments(bw_mbps: float, mtu: int = DEFAULT_MTU) -> int:
    """Largest skb, in segments, that a host's TCP may hand its qdisc on a link of
    ``bw_mbps`` Mbit/s: ~1 ms of the link, at least 2 (Linux's TSO autosizing for a flow
    paced at the link rate; pure). Segments of ``mss_bytes(mtu)``."""
    return max(2, int(bw_mbps * 1e6 / 8 / 1000 // mss_bytes(mtu)))


def burst_bytes(bw_mbps: float, mtu: int = DEFAULT_MTU) -> int:
    """HTB bucket of a link (bytes): 1 ms at line rate, at least 15,000 bytes and at least
    two frames. HTB's default burst at tens of Mbit/s is ~1.6 kB and makes the achieved
    rate fall short under timer slack; with jumbo frames 15 kB would hold one frame, and
    a bucket must hold the frame being sent and the next for the same reason."""
    return max(15_000, int(bw_mbps * 1e6 / 8 / 1000), 2 * frame_bytes(mtu))


def flow_classid(slot: int) -> str:
    """tc's name of the HTB class of host flow slot ``slot`` (minor numbers are hex)."""
    return f"1:{FLOW_MINOR_BASE + slot:x}"


def flow_handle(slot: int) -> str:
    """tc handle of the FIFO under host flow slot ``slot``."""
    return f"{FLOW_MINOR_BASE + slot:x}:"


def tc_commands(dev: str, bw_mbps: float, queue_packets: int | None, delay: str | None,
                flow_filter: str | None = None,
                flow_classes: int = FLOW_CLASSES, *, mtu: int = DEFAULT_MTU,
                queue_bytes: int | None = None) -> list[list[str]]:
    """The tc argument lists that shape ``dev`` to ``bw_mbps`` Mbit/s with a queue of
    ``queue_packets`` packets — or, given ``queue_bytes`` instead, a bfifo of that many
    bytes (pure: unit-tested without root). ``mtu``: the interface's MTU (bytes), which
    sizes the bucket (`burst_bytes`) and the hosts' round-robin quantum (one frame).

    ``flow_filter`` (hosts): classic-BPF bytecode in tc's "n,c t f k,..." form that
    returns each packet's flow class (see `flow_hash_bytecode`); the host then gets
    ``flow_classes`` FIFOs of ``queue_packets`` each, served round-robin under the one
    link-rate class 1:1."""
    if (queue_packets is None) == (queue_bytes is None):
        raise ValueError("give exactly one of queue_packets and queue_bytes")
    if queue_bytes is not None and delay:
        raise ValueError("netem's limit counts packets: a delay needs queue_packets")
    burst = burst_bytes(bw_mbps, mtu)
    rate = ["rate", f"{bw_mbps:g}mbit", "ceil", f"{bw_mbps:g}mbit",
            "burst", str(burst), "cburst", str(burst)]
    if delay:
        child = ["netem", "delay", delay, "limit", str(queue_packets)]
    elif queue_bytes is not None:
        child = ["bfifo", "limit", str(queue_bytes)]
    else:
        child = ["pfifo", "limit", str(queue_packets)]
    if not flow_filter:
        return [
            ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
            ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", *rate],
            ["tc", "qdisc", "replace", "dev", dev, "parent", "1:1", "handle", QUEUE_HANDLE,
             *child],
        ]
    # unclassified (non-IP) frames: slot 0; HTB's "default" takes the minor in hex
    cmds = [
        ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default",
         f"{FLOW_MINOR_BASE:x}"],
        ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", *rate],
    ]
    # leaves: rate ~0, so all they send borrows from 1:1's bucket; ceil = the link so one
    # connection alone still gets all of it; burst: one frame (what a leaf idle for
    # 1514 * 8 / 8 kbit = 1.5 s may send before asking 1:1), cburst as the link's;
    # quantum: one frame, so a turn of the round-robin is one packet
    frame = str(frame_bytes(mtu))
    leaf = ["rate", FLOW_LEAF_RATE, "ceil", f"{bw_mbps:g}mbit", "burst", frame,
            "cburst", str(burst), "quantum", frame]
    for s in range(flow_classes):
        cmds.append(["tc", "class", "replace", "dev", dev, "parent", "1:1", "classid",
                     flow_classid(s), "htb", *leaf])
        cmds.append(["tc", "qdisc", "replace", "dev", dev, "parent", flow_classid(s),
                     "handle", flow_handle(s), *child])
    cmds.append(["tc", "filter", "replace", "dev", dev, "parent", "1:", "protocol", "all",
                 "prio", "1", "bpf", "bytecode", flow_filter])
    return cmds


# Classic BPF opcodes (linux/filter.h) used by the flow hash program.
LD_W_ABS, LD_H_ABS, LD_B_ABS, LD_H_IND, LD_IMM, LD_MEM = 0x20, 0x28, 0x30, 0x48, 0x00, 0x60
LDX_MSH, ST = 0xB1, 0x02
ADD_X, MUL_K, XOR_X, RSH_K, MOD_K, ADD_K = 0x0C, 0x24, 0xAC, 0x74, 0x94, 0x04
JA, JEQ_K, JSET_K = 0x05, 0x15, 0x45
RET_K, RET_A, TAX = 0x06, 0x16, 0x07
ETH_HLEN = 14
ETH_P_IP = 0x0800
PORT_PROTOS = (6, 17, 132)  # TCP, UDP, SCTP: ports at the start of the L4 header


def flow_hash_program(flow_classes: int = FLOW_CLASSES) -> list[tuple[int, int, int, int]]:
    """The classic-BPF program (code, jt, jf, k) that cls_bpf runs on each Ethernet frame
    a host sends: it returns the HTB classid ``1:(FLOW_MINOR_BASE + flow_slot(...))``
    (cls_bpf reads a return value other than 0 and -1 as the classid) and 0 for non-IP
    frames (no match: HTB's default class, slot 0). Pure; `flow_slot` is its mirror."""
    if not 1 <= flow_classes <= 0xFFFF - FLOW_MINOR_BASE:
        raise ValueError(f"flow_classes must be 1..{0xFFFF - FLOW_MINOR_BASE}")
    ip = ETH_HLEN
    prog: list[tuple[int, int, int, int]] = []
    labels: dict[str, int] = {}
    fixups: list[tuple[int, str, str]] = []  # (index, "jt"/"jf"/"k", label)

    def emit(code, k=0, jt=None, jf=None):
        i = len(prog)
        prog.append((code, 0, 0, k))
        for field, label in (("jt", jt), ("jf", jf)):
            if label:
                fixups.append((i, field, label))
        return i

    emit(LD_H_ABS, 12)
    emit(JEQ_K, ETH_P_IP, jf="not_ip")
    emit(LD_W_ABS, ip + 12)  # source address
    emit(TAX)
    emit(LD_W_ABS, ip + 16)  # destination address
    emit(ADD_X)  # symmetric: the sum does not care which end is which
    emit(MUL_K, HASH_K1)
    emit(ST, 0)  # M[0] = mixed addresses
    emit(LD_B_ABS, ip + 9)  # protocol
    for proto in PORT_PROTOS:
        emit(JEQ_K, proto, jt="ports")
    emit(JA, 0, jt=None)
    fixups.append((len(prog) - 1, "k", "no_ports"))
    labels["ports"] = len(prog)
    emit(LD_H_ABS, ip + 6)
    emit(JSET_K, 0x1FFF, jt="no_ports")  # a later fragment carries no L4 header
    emit(LDX_MSH, ip)  # X = IP header length
    emit(LD_H_IND, ip)  # source port
    emit(ST, 1)
    emit(LD_H_IND, ip + 2)  # destination port
    emit(TAX)
    emit(LD_MEM, 1)
    emit(ADD_X)  # symmetric again
    emit(JA, 0)
    fixups.append((len(prog) - 1, "k", "mix"))
    labels["no_ports"] = len(prog)
    emit(LD_IMM, 0)
    labels["mix"] = len(prog)
    emit(TAX)
    emit(LD_MEM, 0)
    emit(XOR_X)
    emit(MUL_K, HASH_K2)
    emit(RSH_K, 16)  # the multiply's best-mixed bits
    emit(MOD_K, flow_classes)
    emit(ADD_K, 0x10000 + FLOW_MINOR_BASE)  # classid 1:(base + slot)
    emit(RET_A)
    labels["not_ip"] = len(prog)
    emit(RET_K, 0)
    for i, field, label in fixups:
        code, jt, jf, k = prog[i]
        off = labels[label] - (i + 1)  # jumps are relative to the next instruction
        if not 0 <= off <= 255 and field != "k":
            raise AssertionError("BPF jump out of range")
        if field == "jt":
            jt = off
        elif field == "jf":
            jf = off
        else:
            k = off
        prog[i] = (code, jt, jf, k)
    return prog


def flow_hash_bytecode(flow_classes: int = FLOW_CLASSES) -> str:
    """`flow_hash_program` in the comma-separated form ``tc ... bpf bytecode`` takes."""
    prog = flow_hash_program(flow_classes)
    return ",".join([str(len(prog)), *(f"{c} {t} {f} {k}" for c, t, f, k in prog)])


def flow_slot(src: str | int, dst: str | int, sport: int = 0, dport: int = 0,
              proto: int = 6, flow_classes: int = FLOW_CLASSES) -> int:
    """The host flow slot (0..flow_classes-1) of a packet, as the BPF program computes
    it: the same for both directions of a connection. ``src``/``dst``: IPv4 addresses
    (dotted or int); ports count for TCP, UDP and SCTP only (pure)."""
    m = 0xFFFFFFFF
    a = (int(ipaddress.IPv4Address(src)) + int(ipaddress.IPv4Address(dst))) & m
    a = (a * HASH_K1) & m
    p = (sport + dport) & m if proto in PORT_PROTOS else 0
    h = ((a ^ p) * HASH_K2) & m
    return (h >> 16) % flow_classes


def _run(intf: Intf, argv: list[str]) -> str:
    """Run argv in the interface's node (its namespace); raise on failure."""
    out = intf.node.cmd(" ".join(shlex.quote(a) for a in argv) + " 2>&1; echo __rc=$?")
    body, _, rc = out.rpartition("__rc=")
    if rc.strip() != "0":
        raise RuntimeError(f"{' '.join(argv)} failed on {intf.node.name}: {body.strip()}")
    return body


def _run_tc(intf: Intf, cmds: list[list[str]]) -> None:
    """Run tc argument lists in the interface's node: a host's ~130 in one ``tc -batch``
    (one process instead of one per line), a switch port's three one by one."""
    if len(cmds) <= 3:
        for argv in cmds:
            _run(intf, argv)
        return
    fd, path = tempfile.mkstemp(prefix="incastlab-tc-", suffix=".batch")
    try:
        with os.fdopen(fd, "w") as f:
            f.writelines(" ".join(shlex.quote(a) for a in argv[1:]) + "\n" for argv in cmds)
        _run(intf, ["tc", "-batch", path])
    finally:
        os.unlink(path)


class QueuedIntf(Intf):
    """An interface shaped to ``bw`` Mbit/s with a pfifo of ``queue_packets`` packets (or
    a bfifo of ``queue_bytes`` bytes) on switches (a deep one on hosts), MTU ``mtu`` and
    segmentation offloads off."""

    def config(self, bw=None, queue_packets=None, delay=None, mtu=None, queue_bytes=None,
               **params):
        result = Intf.config(self, **params)
        self.mtu = int(mtu or DEFAULT_MTU)
        # before anything else: the hosts' TCP reads its MSS from the device's MTU
        # (veth is created at 1500: the default costs no command at bring-up)
        if self.mtu != DEFAULT_MTU:
            _run(self, ["ip", "link", "set", "dev", self.name, "mtu", str(self.mtu)])
        _run(self, ["ethtool", "-K", self.name] + [w for o in OFFLOADS for w in (o, "off")])
        # No IPv6 on emulated links: switch ports in the root namespace would otherwise
        # send router solicitations and MLD reports into the fabric and the captures.
        _run(self, ["sysctl", "-qw", f"net.ipv6.conf.{self.name}.disable_ipv6=1"])
        # ~1 ms of segments per skb: "gso off" does not stop TCP from building
        # super-packets (Linux gives every TCP socket software GSO and segments after the
        # qdisc), so without this the qdisc holds 20-45 kB skbs (see the module docstring).
        if bw:
            _run(self, ["ip", "link", "set", "dev", self.name, "gso_max_segs",
                        str(gso_segments(float(bw), self.mtu))])
        self.bw, self.queue_packets, self.delay = bw, queue_packets, delay
        self.queue_bytes = queue_bytes
        self.apply_queue()
        return result

    def apply_queue(self) -> None:
        """(Re)install the shaping qdiscs from the parameters given at creation."""
        if self.bw:
            on_switch = isinstance(self.node, Switch)
            packets, nbytes = HOST_QUEUE_PACKETS, None  # hosts: deep, in packets
            if on_switch and self.queue_bytes:
                packets, nbytes = None, int(self.queue_bytes)
            elif on_switch and self.queue_packets:
                packets = int(self.queue_packets)
            flow_filter = None if on_switch else flow_hash_bytecode()
            _run_tc(self, tc_commands(self.name, float(self.bw), packets, self.delay,
                                      flow_filter=flow_filter, mtu=self.mtu,
                                      queue_bytes=nbytes))


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
            if not isinstance(intf, QueuedIntf):
                continue
            if intf.mtu != DEFAULT_MTU:
                # OVS keeps (and the userspace datapath sizes its receive buffers for)
                # the MTU it was asked for; without a request it may set the port back
                self.vsctl("set", "Interface", intf.name, f"mtu_request={intf.mtu}")
            if intf.bw:
                self.vsctl("--", "set", "Port", intf.name, "qos=@noop", "--",
                           "--id=@noop", "create", "QoS", "type=linux-noop")
                intf.apply_queue()


class QueuedLink(Link):
    """A veth pair of QueuedIntfs. (Mininet's addLink always passes its own ``intf``
    default, so ``partial(Link, intf=...)`` would be overridden: force it here.)"""

    def __init__(self, node1, node2, **params):
        params["intf"] = QueuedIntf
        super().__init__(node1, node2, **params)
