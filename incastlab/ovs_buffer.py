"""Open vSwitch's packet send buffer: a queue limit of the userspace datapath that tc
does not see.

With the userspace datapath (bridges of datapath_type=netdev) ovs-vswitchd hands every
packet for every switch port to the kernel through one AF_PACKET socket
(``af_packet_sock()`` in OVS's lib/netdev-linux.c; ``ss -0 -m -p`` shows it as
ovs-vswitchd's ``[0]:*`` socket). A packet waiting in a port's qdisc is charged to
that socket's send buffer until the qdisc lets it go (the veth orphans it), so the
buffer bounds the packets queued at *all* switch ports together. When it is full the
send fails with EAGAIN, ovs-vswitchd logs "error sending Ethernet packet on <port>:
Resource temporarily unavailable" and drops the packet: no qdisc counts it, and a
queue of the fabric holds fewer packets than its configured limit, less still while
other ports queue too.

The buffer is ``net.core.wmem_default`` when ovs-vswitchd opened the socket: 212,992
bytes by default, about 92 full-size frames for the whole fabric. ``scripts/install.sh``
sets the default to ``INSTALL_BYTES`` and restarts Open vSwitch where its socket is
smaller; every fabric checks the buffer against what its queues can hold
(``required_bytes``) before it touches anything. How it was found:
docs/decisions/005-ovs-socket-buffers.md.
"""
from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Iterable

# What scripts/install.sh sets net.core.wmem_default to (/etc/sysctl.d/60-incastlab.conf).
# Both sysctls are machine-wide here (a new network namespace reads the same values): every
# socket that takes the default (UDP, raw, unix; not TCP, which has tcp_wmem/tcp_rmem) may
# buffer that much. A limit, not an allocation.
INSTALL_BYTES = 64 * 1024 * 1024
WMEM_DEFAULT = "/proc/sys/net/core/wmem_default"
# ... and net.core.rmem_default, the buffer of each switch port's receive socket (opened
# with the port, so a fabric gets the value current at its start). With the kernel's
# 212,992 bytes a port held 12 jumbo frames while ovs-vswitchd caught up and lost the
# rest there, uncounted by tc: specs/jumbo-ring.toml lost 431 packets with tc counting
# 51 and the ports' receive sockets 800 drops (ss: skmem d); with 4 MiB, 288 lost, tc
# counting 253, the sockets none (2026-12-02). A stalled datapath now delays packets
# there instead of losing them where no counter looks; the run's CPU flag says when.
INSTALL_RECEIVE_BYTES = 4 * 1024 * 1024
RMEM_DEFAULT = "/proc/sys/net/core/rmem_default"


def receive_buffer() -> int | None:
    """The buffer (bytes) the switch ports' receive sockets get when a fabric starts
    (None where the sysctl cannot be read)."""
    return _sysctl(RMEM_DEFAULT)

# The kernel's accounting of one packet sent on an AF_PACKET socket (packet_snd, Linux
# 6.x): the frame is copied into a linear buffer after LL_RESERVED_SPACE (16 bytes on a
# veth), rounded up to a cache line, with skb_shared_info (320 bytes) behind it, in a
# kmalloc size class (a power of two from 256 bytes; page-allocator orders beyond 8 KiB);
# truesize adds struct sk_buff (256 bytes aligned). 2,304 bytes for a 1514-byte frame
# (212,992 / 2,304 = 92 frames; a 300-packet queue peaked at 93 with that buffer: the
# root tier), 768 for a 66-byte ACK. A frame longer than a page the kernel puts in page
# fragments instead (about 13 KiB for a 9014-byte jumbo frame): this linear charge,
# 16,640 bytes there, is an upper bound for them, not measured.
_RESERVE, _SHARED_INFO, _SKB = 16, 320, 256
SMALLEST_FRAME = 66  # a pure TCP ACK with timestamps, the smallest frame our runs queue
STANDARD_FRAME = 1514  # a full frame at MTU 1500, as captured


def packet_charge(frame_bytes: int) -> int:
    """Bytes of send buffer one queued frame of ``frame_bytes`` holds."""
    data = -(-(frame_bytes + _RESERVE) // 64) * 64 + _SHARED_INFO
    return max(256, 1 << (data - 1).bit_length()) + _SKB


def queue_charge(frame_bytes: int, queue_packets: int | None, queue_bytes: int | None) -> int:
    """Send buffer one switch queue can hold when full: ``queue_packets`` full frames, or
    for a byte limit the worse of full frames and the smallest frames filling it."""
    if queue_bytes is not None:
        return max(math.ceil(queue_bytes / frame_bytes) * packet_charge(frame_bytes),
                   (queue_bytes // SMALLEST_FRAME) * packet_charge(SMALLEST_FRAME))
    return (queue_packets or 0) * packet_charge(frame_bytes)


def required_bytes(egresses: Iterable, frame_bytes: int) -> int:
    """Send buffer the switch queues of a fabric need when all are full at once (the
    hosts' own qdiscs are charged to the hosts' sockets, not to ovs-vswitchd's)."""
    return sum(queue_charge(frame_bytes, e.queue_packets, e.queue_bytes) for e in egresses
               if e.queue_packets is not None or e.queue_bytes is not None)


def topology_required_bytes(topo) -> int:
    """``required_bytes`` of a Topo (leaf–spine or star): its switch egresses at its MTU."""
    from incastlab.topologies import fabricmap
    from incastlab.topologies.leafspine import fabric_map
    return required_bytes(fabric_map(topo).egresses(), fabricmap.frame_bytes(topo.mtu))


_SEND_SOCKET = re.compile(r'^p_raw\s.*\s\S+:\*\s+\*\s+users:\(\("ovs-vswitchd",'
                          r'.*skmem:\([^)]*\btb(\d+)')


def parse_send_buffer(ss_output: str) -> int | None:
    """The send buffer (bytes) of ovs-vswitchd's unbound packet socket in ``ss -0 -m -p
    -n`` output (bound ``*:<port>`` sockets are its receive sockets); None if absent."""
    for line in ss_output.splitlines():
        found = _SEND_SOCKET.match(line)
        if found:
            return int(found.group(1))
    return None


def _sysctl(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def send_buffer() -> tuple[int | None, str]:
    """(bytes, where from): ovs-vswitchd's send socket's buffer, or, before it has sent
    its first packet (it opens the socket then), the default that socket will get;
    (None, why) when neither can be read (``ss`` missing or failing, no such sysctl)."""
    try:
        done = subprocess.run(["ss", "-0", "-m", "-p", "-n"], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"ss could not list packet sockets ({exc})"
    if done.returncode != 0:
        return None, f"ss could not list packet sockets (exit {done.returncode})"
    found = parse_send_buffer(done.stdout)
    if found is not None:
        return found, "ovs-vswitchd's packet socket"
    default = _sysctl(WMEM_DEFAULT)
    return (default, "net.core.wmem_default") if default is not None \
        else (None, f"{WMEM_DEFAULT} is not readable")


def shortfall(have: int, source: str, need: int, what: str) -> str | None:
    """One sentence saying the buffer is too small for ``what``, and the fix; None if it
    is large enough."""
    if have >= need:
        return None
    frames = have // packet_charge(STANDARD_FRAME)
    fix = (f"Run scripts/install.sh (sets net.core.wmem_default to {INSTALL_BYTES:,} and "
           "restarts Open vSwitch), or set" if need <= INSTALL_BYTES else "Set")
    return (f"{what} can hold {need:,} bytes of packets at once, but Open vSwitch's send "
            f"buffer ({source}) is {have:,} bytes (about {frames:,} full-size frames for "
            f"all switch queues together): a queue would drop packets that tc never "
            f"counts. {fix} net.core.wmem_default >= {need:,} and restart Open vSwitch.")
