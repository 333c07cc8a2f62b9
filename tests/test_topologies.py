"""Rootless tests of the topology descriptions: counts, names, DPIDs, ports, addresses."""
import ipaddress
import operator
import subprocess
from pathlib import Path

import pytest

from incastlab.topologies import naming
from incastlab.topologies.leafspine import LeafSpineTopo, StarTopo, TopologyError
from incastlab.topologies.links import (FLOW_CLASSES, flow_classid, flow_hash_bytecode,
                                        flow_slot, tc_commands)

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("spines,leaves,hpl", [(1, 1, 1), (2, 2, 2), (2, 4, 4), (4, 3, 5)])
def test_counts_names_and_ports(spines, leaves, hpl):
    topo = LeafSpineTopo(spines, leaves, hpl)
    assert len(topo.switches()) == spines + leaves
    assert len(topo.hosts()) == leaves * hpl
    assert len(topo.links()) == leaves * hpl + leaves * spines
    assert sorted(topo.hosts(), key=lambda h: int(h[1:])) == [
        f"h{n}" for n in range(1, leaves * hpl + 1)]
    fmap = topo.fabric_map()
    for link in fmap.links:
        for node, port in ((link.node1, link.port1), (link.node2, link.port2)):
            to_host = link.node1.startswith("h") or link.node2.startswith("h")
            if node.startswith("lf") and to_host:
                assert 1 <= port <= hpl
            elif node.startswith("lf"):
                assert hpl < port <= hpl + spines
            elif node.startswith("sp"):
                assert 1 <= port <= leaves
            else:
                assert port == 0
        assert len(link.intf1) <= 15 and len(link.intf2) <= 15


def test_addresses_and_dpids_are_unique_and_documented():
    topo = LeafSpineTopo(2, 3, 4)
    fmap = topo.fabric_map()
    ips = [h.ip for h in fmap.hosts]
    macs = [h.mac for h in fmap.hosts]
    dpids = [s.dpid for s in fmap.switches]
    assert len(set(ips)) == len(ips) and len(set(macs)) == len(macs)
    assert len(set(dpids)) == len(dpids)
    subnet = ipaddress.ip_network(naming.SUBNET)
    assert all(ipaddress.ip_address(ip) in subnet for ip in ips)
    h7 = fmap.host("h7")
    assert (h7.leaf, h7.index, h7.ip, h7.mac) == (2, 3, "10.0.2.3", "02:00:00:00:02:03")
    assert fmap.spine(2).name == "sp2" and fmap.spine(2).dpid == 0x0001_0000_0000_0002
    assert naming.host_position(7, 4) == (2, 3)


def test_fabric_bw_defaults_non_blocking_and_oversubscription():
    assert LeafSpineTopo(2, 2, 4, host_bw=10).fabric_bw == 20.0
    assert LeafSpineTopo(2, 2, 4, host_bw=10, oversubscription=4).fabric_bw == 5.0
    assert LeafSpineTopo(2, 2, 4, host_bw=10, fabric_bw=7).fabric_bw == 7.0


@pytest.mark.parametrize("kwargs,field", [
    ({"spines": 0}, "spines"), ({"leaves": -1}, "leaves"),
    ({"hosts_per_leaf": 0}, "hosts_per_leaf"),
    ({"hosts_per_leaf": 200}, "hosts_per_leaf"), ({"host_bw": -5}, "host_bw"),
    ({"fabric_bw": 0}, "fabric_bw"), ({"queue_packets": 0}, "queue_packets"),
    ({"oversubscription": 0.5}, "oversubscription"), ({"delay": "fast"}, "delay"),
    ({"spines": 2.5}, "spines"),
])
def test_bad_parameters_name_the_parameter(kwargs, field):
    with pytest.raises(TopologyError, match=field):
        LeafSpineTopo(**kwargs)


def test_star_topology_is_one_leaf_with_receiver_last():
    star = StarTopo(senders=5)
    assert star.switches() == ["lf1"]
    assert len(star.hosts()) == 6 and star.receiver == "h6"
    assert star.fabric_map().spines == 0 and star.fabric_map().spine_names == []


def test_tc_commands_shape_and_limit():
    cmds = tc_commands("lf1-eth1", 20.0, 20, None)
    assert cmds[0][-4:] == ["1:", "htb", "default", "1"]
    assert "20mbit" in cmds[1]
    assert cmds[2][-3:] == ["pfifo", "limit", "20"]
    assert tc_commands("x", 5, 30, "2ms")[2][-5:] == ["netem", "delay", "2ms", "limit", "30"]


def test_tc_commands_hosts_get_round_robin_flow_fifos():
    cmds = tc_commands("h1-eth0", 20.0, 1000, None, flow_filter="1,6 0 0 0", flow_classes=4)
    assert cmds[0][-4:] == ["1:", "htb", "default", "100"]  # unclassified = slot 0 (hex)
    by_id = {c[c.index("classid") + 1]: c for c in cmds if c[1] == "class"}
    assert sorted(by_id) == ["1:1", "1:100", "1:101", "1:102", "1:103"]
    root = by_id["1:1"]
    assert root[root.index("rate") + 1] == root[root.index("ceil") + 1] == "20mbit"
    for s in range(4):
        leaf = by_id[flow_classid(s)]
        assert leaf[leaf.index("parent") + 1] == "1:1"
        # ~0 own rate: all of it borrows from 1:1's one bucket; the link as ceil
        assert leaf[leaf.index("rate") + 1] == "8kbit"
        assert leaf[leaf.index("ceil") + 1] == "20mbit"
        assert leaf[leaf.index("quantum") + 1] == "1514"  # one frame per round
        assert "prio" not in leaf  # all equal: plain round-robin
    qdiscs = {c[c.index("handle") + 1]: c for c in cmds if c[1] == "qdisc" and "parent" in c}
    assert sorted(qdiscs) == ["100:", "101:", "102:", "103:"]
    assert all(q[-3:] == ["pfifo", "limit", "1000"] for q in qdiscs.values())
    assert qdiscs["102:"][qdiscs["102:"].index("parent") + 1] == "1:102"
    (flt,) = [c for c in cmds if c[1] == "filter"]
    assert flt[flt.index("bpf"):] == ["bpf", "bytecode", "1,6 0 0 0"]  # it returns the class
    assert flt[flt.index("protocol") + 1] == "all"  # ARP too: slot 0
    delayed = tc_commands("h1-eth0", 20.0, 1000, "2ms", flow_filter="1,6 0 0 0",
                          flow_classes=4)
    assert len([c for c in delayed if "netem" in c]) == 4  # every FIFO has the delay
    assert len(tc_commands("h1-eth0", 20.0, 1000, None, flow_filter="1,6 0 0 0")) == \
        2 + 2 * FLOW_CLASSES + 1
    # switches: one FIFO, unchanged, no filter
    assert tc_commands("lf1-eth1", 20.0, 20, None) == \
        tc_commands("lf1-eth1", 20.0, 20, None, flow_filter=None)
    assert not [c for c in tc_commands("lf1-eth1", 20.0, 20, None) if c[1] == "filter"]


def _run_bpf(bytecode: str, frame: bytes) -> int:
    """A small classic-BPF interpreter (linux/filter.h semantics: 32-bit unsigned A and
    X, 16 scratch words, jumps relative to the next instruction; a load past the frame's
    end returns 0, as the kernel does) for the instructions our programs use."""
    count, *rest = bytecode.split(",")
    insns = [tuple(int(x) for x in i.split()) for i in rest]
    assert int(count) == len(insns)
    a = x = 0
    mem = [None] * 16
    pc = 0
    m32 = 0xFFFFFFFF
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        cls, size, mode = code & 0x07, code & 0x18, code & 0xE0
        src_x = code & 0x08
        if cls in (0x00, 0x01):  # ld / ldx
            if cls == 0x01 and mode == 0xA0:  # ldxb 4*([k]&0xf)
                x = 4 * (frame[k] & 0xF)
                continue
            n = {0x00: 4, 0x08: 2, 0x10: 1}[size]
            if mode == 0x60:  # M[k]
                assert mem[k] is not None, "scratch word read before written"
                val = mem[k]
            elif mode == 0x00:  # imm
                val = k
            else:
                off = k + (x if mode == 0x40 else 0)
                if off + n > len(frame):
                    return 0  # the kernel aborts the program: no match
                val = int.from_bytes(frame[off:off + n], "big")
            if cls == 0x00:
                a = val
            else:
                x = val
        elif cls == 0x02:
            mem[k] = a
        elif cls == 0x03:
            mem[k] = x
        elif cls == 0x04:  # alu
            op, b = code & 0xF0, (x if src_x else k)
            ops = {0x00: operator.add, 0x10: operator.sub, 0x20: operator.mul,
                   0x30: operator.floordiv, 0x40: operator.or_, 0x50: operator.and_,
                   0x60: operator.lshift, 0x70: operator.rshift, 0x90: operator.mod,
                   0xA0: operator.xor}
            a = ops[op](a, b) & m32
        elif cls == 0x05:  # jmp
            op, b = code & 0xF0, (x if src_x else k)
            if op == 0x00:  # ja
                pc += k
                continue
            hit = {0x10: a == b, 0x20: a > b, 0x30: a >= b, 0x40: bool(a & b)}[op]
            pc += jt if hit else jf
        elif cls == 0x06:  # ret #k / ret a
            return a if code & 0x18 == 0x10 else k
        elif cls == 0x07:
            a, x = (x, x) if code == 0x87 else (a, a)  # txa / tax
        else:
            raise AssertionError(f"unexpected BPF code {code}")


def _ip(addr: str) -> bytes:
    return bytes(int(o) for o in addr.split("."))


def _frame(src: str, dst: str, sport: int, dport: int, *, proto: int = 6, payload: int = 0,
           flags: int = 0x10, ihl: int = 5, frag: int = 0) -> bytes:
    """An Ethernet + IPv4 frame; TCP (12 option bytes) or UDP after ``ihl`` words."""
    l4 = (sport.to_bytes(2, "big") + dport.to_bytes(2, "big")
          + (bytes(8) + bytes([0x80, flags]) + bytes(18) if proto == 6 else bytes(4)))
    ip_len = 4 * ihl + len(l4) + payload
    ip = bytes([0x40 | ihl, 0, ip_len >> 8, ip_len & 0xFF, 0, 0, frag >> 8, frag & 0xFF,
                64, proto, 0, 0]) + _ip(src) + _ip(dst) + bytes(4 * ihl - 20)
    return bytes(12) + b"\x08\x00" + ip + l4 + bytes(payload)


def _slot(result: int) -> int:
    assert result >> 16 == 1, hex(result)  # a classid of qdisc 1: (not 0 = no match)
    return (result & 0xFFFF) - 0x100


def test_flow_hash_keeps_a_connection_in_one_class_in_both_directions():
    """The program the hosts run, on hand-made frames: every packet of a connection —
    data, a short last segment, a pure ACK, SYN, FIN, RST — gets one class, and the
    other direction the same one (the hash is symmetric, like Linux's flow hash)."""
    code = flow_hash_bytecode()
    a, b = ("10.0.1.1", 40001), ("10.0.2.1", 5001)
    slots = {_slot(_run_bpf(code, _frame(s[0], d[0], s[1], d[1], payload=n, flags=f)))
             for s, d in ((a, b), (b, a)) for n, f in (
                 (1448, 0x10), (20, 0x18), (0, 0x10), (0, 0x02), (0, 0x11), (0, 0x14))}
    assert len(slots) == 1
    # kernel-checked anchor: in a sandbox namespace cls_bpf put this connection's packets
    # in class 1:111 (slot 17), with 40002 -> 1:13d (61) and 40003 -> 1:118 (24)
    assert slots == {17}
    assert flow_slot("10.0.1.1", "10.0.2.1", 40002, 5001) == 61
    assert flow_slot("10.0.2.1", "10.0.1.1", 5001, 40003) == 24


def test_flow_hash_program_and_its_python_mirror_agree():
    import random

    rng = random.Random(13)
    code = flow_hash_bytecode()
    for _ in range(2000):
        src = f"10.0.{rng.randint(1, 99)}.{rng.randint(1, 99)}"
        dst = f"10.0.{rng.randint(1, 99)}.{rng.randint(1, 99)}"
        sport, dport = rng.randint(1, 65535), rng.randint(1, 65535)
        proto = rng.choice([6, 17])
        ihl = rng.choice([5, 5, 6, 15])  # IP options move the ports
        got = _slot(_run_bpf(code, _frame(src, dst, sport, dport, proto=proto, ihl=ihl)))
        assert got == flow_slot(src, dst, sport, dport, proto), (src, dst, sport, dport)
    # ICMP and later fragments: no ports to read, the addresses alone
    icmp = _frame("10.0.1.1", "10.0.1.2", 0x0800, 0x1234, proto=1)
    assert _slot(_run_bpf(code, icmp)) == flow_slot("10.0.1.1", "10.0.1.2", proto=1)
    frag = _frame("10.0.1.1", "10.0.1.2", 7, 9, proto=17, frag=0x00B9)
    assert _slot(_run_bpf(code, frag)) == flow_slot("10.0.1.1", "10.0.1.2", proto=1)
    # a first fragment (MF set, offset 0) still has its ports
    first = _frame("10.0.1.1", "10.0.1.2", 7, 9, proto=17, frag=0x2000)
    assert _slot(_run_bpf(code, first)) == flow_slot("10.0.1.1", "10.0.1.2", 7, 9, 17)
    # ARP: no match -> HTB's default class (slot 0)
    assert _run_bpf(code, bytes(12) + b"\x08\x06" + bytes(28)) == 0
    assert _run_bpf(flow_hash_bytecode(4), _frame("10.0.1.1", "10.0.2.1", 1, 2)) >> 16 == 1


def test_flow_hash_spreads_a_hosts_connections():
    """Two connections of one host share a FIFO with probability ~1/FLOW_CLASSES (random
    ephemeral ports); a ring rank's connections to its two neighbours are the case that
    matters. Binomial: 20,000 pairs at p = 1/64 -> 312 +- 18 (1 sigma)."""
    import random

    rng = random.Random(7)
    n, same = 20_000, 0
    for _ in range(n):
        me = f"10.0.{rng.randint(1, 4)}.{rng.randint(1, 4)}"
        left = (f"10.0.{rng.randint(1, 4)}.{rng.randint(1, 4)}", rng.randint(32768, 60999))
        right = (f"10.0.{rng.randint(1, 4)}.{rng.randint(1, 4)}", rng.randint(32768, 60999))
        same += flow_slot(me, left[0], rng.randint(32768, 60999), left[1]) == \
            flow_slot(me, right[0], rng.randint(32768, 60999), right[1])
    assert abs(same - n / FLOW_CLASSES) < 5 * (n / FLOW_CLASSES) ** 0.5, same
    # and every slot is used about equally by one host's connections to one peer
    counts = [0] * FLOW_CLASSES
    for port in range(32768, 32768 + 64 * 300):
        counts[flow_slot("10.0.1.1", "10.0.1.2", port, 29500)] += 1
    assert min(counts) > 300 - 5 * 300 ** 0.5 and max(counts) < 300 + 5 * 300 ** 0.5, counts


def test_flow_hash_program_refuses_impossible_class_counts():
    with pytest.raises(ValueError):
        flow_hash_bytecode(0)
    with pytest.raises(ValueError):
        flow_hash_bytecode(0x10000)


def test_stock_mininet_can_load_the_custom_file():
    """`mn --custom topologies/leafspine.py --topo leafspine,2,4,2` execs the file
    without incastlab on the path; emulate exactly that with the system Python."""
    code = ("customs = {}\n"
            f"path = {str(REPO / 'topologies' / 'leafspine.py')!r}\n"
            "exec(compile(open(path).read(), path, 'exec'), customs, customs)\n"
            "t = customs['topos']['leafspine'](2, 4, 2)\n"
            "print(len(t.switches()), len(t.hosts()), len(t.links()))\n"
            "print(len(t.fabric_map().to_dict()['links']))\n")
    out = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                         cwd="/", check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["6", "8", "16", "16"]


def test_gso_segments_are_a_millisecond_of_the_link():
    from incastlab.topologies.links import gso_segments

    # 1 ms at 20 Mbit/s = 2,500 bytes = 1.7 segments -> the floor of 2 (what Linux's TSO
    # autosizing also keeps); 50 Mbit/s: 6,250 B = 4; 200 Mbit/s: 25,000 B = 17
    assert [gso_segments(b) for b in (1, 20, 50, 200, 1000)] == [2, 2, 4, 17, 86]
