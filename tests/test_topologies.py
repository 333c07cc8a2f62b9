"""Rootless tests of the topology descriptions: counts, names, DPIDs, ports, addresses."""
import ipaddress
import subprocess
from pathlib import Path

import pytest

from incastlab.topologies import naming
from incastlab.topologies.leafspine import LeafSpineTopo, StarTopo, TopologyError
from incastlab.topologies.links import ack_filter_bytecode, tc_commands

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


def test_tc_commands_hosts_serve_pure_acks_first():
    cmds = tc_commands("h1-eth0", 20.0, 1000, None, ack_filter="1,6 0 0 0")
    assert cmds[0][-4:] == ["1:", "htb", "default", "20"]  # unclassified = bulk
    root = next(c for c in cmds if "classid" in c and c[c.index("classid") + 1] == "1:1")
    assert root[root.index("rate") + 1] == "20mbit"  # the link rate is unchanged
    by_id = {c[c.index("classid") + 1]: c for c in cmds if "classid" in c and c[1] == "class"}
    assert by_id["1:30"][-2:] == ["prio", "0"] and by_id["1:20"][-2:] == ["prio", "1"]
    assert by_id["1:30"][by_id["1:30"].index("ceil") + 1] == "20mbit"
    assert by_id["1:20"][by_id["1:20"].index("ceil") + 1] == "20mbit"
    qdiscs = {c[c.index("handle") + 1]: c for c in cmds if c[1] == "qdisc" and "parent" in c}
    assert qdiscs["10:"][-3:] == ["pfifo", "limit", "1000"]  # bulk stays the sampled 10:
    assert qdiscs["10:"][qdiscs["10:"].index("parent") + 1] == "1:20"
    assert qdiscs["30:"][qdiscs["30:"].index("parent") + 1] == "1:30"
    (flt,) = [c for c in cmds if c[1] == "filter"]
    assert flt[flt.index("bpf"):] == ["bpf", "bytecode", "1,6 0 0 0", "classid", "1:30"]
    delayed = tc_commands("h1-eth0", 20.0, 1000, "2ms", ack_filter="1,6 0 0 0")
    netems = [c for c in delayed if "netem" in c]
    assert len(netems) == 2  # ACKs skip the bulk queue, never the delay
    assert tc_commands("lf1-eth1", 20.0, 20, None) == \
        tc_commands("lf1-eth1", 20.0, 20, None, ack_filter=None)
    assert not [c for c in tc_commands("lf1-eth1", 20.0, 20, None) if c[1] == "filter"]


def test_ack_filter_bytecode_takes_tcpdump_ddd():
    # tcpdump's match returns the snap length; cls_bpf needs -1 ("use my classid")
    assert ack_filter_bytecode("4\n40 0 0 12\n21 0 1 2048\n6 0 0 262144\n6 0 0 0\n") == \
        "4,40 0 0 12,21 0 1 2048,6 0 0 4294967295,6 0 0 0"
    with pytest.raises(ValueError):
        ack_filter_bytecode("tcpdump: lo: You don't have permission")
    with pytest.raises(ValueError):
        ack_filter_bytecode("5\n6 0 0 0\n")  # count and lines disagree


def _run_bpf(bytecode: str, frame: bytes) -> int:
    """A tiny classic-BPF interpreter for the instructions tcpdump emits for the ACK
    filter (loads, ALU, jumps, scratch memory, ret): enough to check what it matches."""
    insns = [tuple(int(x) for x in i.split()) for i in bytecode.split(",")[1:]]
    a = x = 0
    mem = [0] * 16
    pc = 0
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
                val = mem[k]
            elif mode == 0x00:  # imm
                val = k
            else:
                off = k + (x if mode == 0x40 else 0)
                val = int.from_bytes(frame[off:off + n], "big")
            if cls == 0x00:
                a = val
            else:
                x = val
        elif cls == 0x02:
            mem[k] = a
        elif cls == 0x04:  # alu
            op, b = code & 0xF0, (x if src_x else k)
            a = {0x00: a + b, 0x10: a - b, 0x50: a & b, 0x60: a << b,
                 0x70: a >> b}[op] & 0xFFFFFFFF
        elif cls == 0x05:  # jmp
            op, b = code & 0xF0, (x if src_x else k)
            hit = {0x10: a == b, 0x20: a > b, 0x30: a >= b, 0x40: bool(a & b)}[op]
            pc += jt if hit else jf
        elif cls == 0x06:
            return k
        elif cls == 0x07:
            a, x = (x, x) if code == 0x87 else (a, a)  # txa / tax
        else:
            raise AssertionError(f"unexpected BPF code {code}")


def _tcp_frame(payload: int, flags: int) -> bytes:
    ip_len = 20 + 32 + payload  # TCP with 12 bytes of options (timestamps)
    ip = bytes([0x45, 0, ip_len >> 8, ip_len & 0xFF, 0, 0, 0x40, 0, 64, 6, 0, 0,
                10, 0, 1, 1, 10, 0, 2, 1])
    tcp = bytes([0x9C, 0x40, 0x14, 0x51]) + bytes(8) + bytes([0x80, flags]) + bytes(18)
    return bytes(12) + b"\x08\x00" + ip + tcp + bytes(payload)


def test_the_ack_filter_matches_pure_acks_only():
    """The real filter, compiled by tcpdump, run on hand-made frames: pure ACKs and SYNs
    match (cls_bpf: -1 = this filter's class); data, FIN and RST do not."""
    import shutil

    from incastlab.topologies.links import pure_ack_bytecode
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed")
    code = pure_ack_bytecode()
    match = 0xFFFFFFFF
    assert _run_bpf(code, _tcp_frame(0, 0x10)) == match  # pure ACK
    assert _run_bpf(code, _tcp_frame(0, 0x02)) == match  # SYN
    assert _run_bpf(code, _tcp_frame(0, 0x12)) == match  # SYN-ACK
    assert _run_bpf(code, _tcp_frame(1, 0x18)) == 0  # one byte of data
    assert _run_bpf(code, _tcp_frame(20, 0x10)) == 0  # a short last segment
    assert _run_bpf(code, _tcp_frame(1448, 0x10)) == 0
    assert _run_bpf(code, _tcp_frame(0, 0x11)) == 0  # FIN
    assert _run_bpf(code, _tcp_frame(0, 0x14)) == 0  # RST


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
