"""Open vSwitch's send buffer (incastlab.ovs_buffer): the kernel's charge per queued
frame, what a fabric's queues need, reading ovs-vswitchd's socket from ``ss``, and the
refusal by spec validation and by the fabric before anything is touched. The root tier
(tests/test_ovs_buffer_root.py) shows a queue filling past the default buffer's budget."""
from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from incastlab import ovs_buffer
from incastlab.fabric import Fabric
from incastlab.preflight import Capabilities, PreflightError
from incastlab.spec import SpecError, load_spec, loads_spec
from incastlab.spec import sweep_points as _points
from incastlab.topologies.leafspine import LeafSpineTopo, StarTopo

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WMEM = 212_992  # the kernel's net.core.wmem_default

# `ss -0 -m -p -n` with a fabric up (2026-12-02): the send socket is unbound ("[0]:*"),
# each port's receive socket is bound to its interface
def _ss_line(local: str, fd: int, tb: int, process: str = "ovs-vswitchd") -> str:
    return (f"p_raw 0      0      {local:>20}            *     "
            f'users:(("{process}",pid=24844,fd={fd})) '
            f"skmem:(r0,rb212992,t0,tb{tb},f0,w0,o0,bl0,d0)")


SS_OUTPUT = "\n".join([
    "Netid Recv-Q Send-Q Local Address:Port     Peer Address:PortProcess",
    _ss_line("[0]:*", 69, 16_777_216),
    _ss_line("*:lf1-eth2", 39, 134_217_728),
    _ss_line("*:lf1-eth4", 40, 134_217_728)]) + "\n"


def test_a_queued_frame_is_charged_its_kmalloc_class_and_sk_buff():
    # 1514 + 16 reserved -> 1536 + 320 shared info = 1856 -> 2048-byte class, + 256
    assert ovs_buffer.packet_charge(1514) == 2304
    # 66 + 16 -> 128 + 320 = 448 -> 512, + 256
    assert ovs_buffer.packet_charge(66) == 768
    # 9014 + 16 -> 9088 + 320 = 9408 -> 16 KiB, + 256
    assert ovs_buffer.packet_charge(9014) == 16640
    # the default buffer holds 92 full-size frames: a queue peaked at 93 with it (root tier)
    assert DEFAULT_WMEM // ovs_buffer.packet_charge(1514) == 92


def test_a_byte_limited_queue_is_charged_for_its_worst_fill():
    # 15,140 bytes: 10 full frames (23,040) or 229 ACKs (175,872): the ACKs are worse
    assert ovs_buffer.queue_charge(1514, None, 15_140) == 229 * 768
    # a packet limit: that many full frames
    assert ovs_buffer.queue_charge(1514, 100, None) == 100 * 2304


def test_a_fabric_needs_every_switch_queue_full_at_once():
    # 2 spines, 2 leaves, 2 hosts each: 4 ports per leaf + 2 per spine = 12 switch queues;
    # the hosts' own qdiscs are charged to their own sockets and do not count
    topo = LeafSpineTopo(2, 2, 2, queue_packets=100)
    assert ovs_buffer.topology_required_bytes(topo) == 12 * 100 * 2304
    star = StarTopo(4, queue_packets=50)  # 4 senders and the receiver: 5 switch ports
    assert ovs_buffer.topology_required_bytes(star) == 5 * 50 * 2304
    jumbo = LeafSpineTopo(2, 2, 2, queue_packets=100, mtu=9000)
    assert ovs_buffer.topology_required_bytes(jumbo) == 12 * 100 * 16640


def test_the_send_socket_is_read_from_ss_and_not_a_receive_socket():
    assert ovs_buffer.parse_send_buffer(SS_OUTPUT) == 16_777_216
    receive_only = "\n".join(line for line in SS_OUTPUT.splitlines() if "[0]:*" not in line)
    assert ovs_buffer.parse_send_buffer(receive_only) is None
    other = SS_OUTPUT.replace("ovs-vswitchd", "tcpdump")
    assert ovs_buffer.parse_send_buffer(other) is None


def test_a_shortfall_names_the_buffer_the_need_and_the_fix():
    assert ovs_buffer.shortfall(2_764_800, "x", 2_764_800, "queues") is None
    text = ovs_buffer.shortfall(DEFAULT_WMEM, "net.core.wmem_default", 2_764_800, "queues")
    assert "2,764,800" in text and "212,992" in text and "about 92 full-size frames" in text
    assert "scripts/install.sh" in text and "net.core.wmem_default >= 2,764,800" in text


def test_spec_validation_refuses_queues_the_buffer_cannot_hold():
    text = "[topology]\nkind = 'leafspine'\nspines = 2\nleaves = 2\nhosts_per_leaf = 2\n"
    small = {"datapath": "user", "ovs_send_buffer": DEFAULT_WMEM,
             "ovs_send_buffer_source": "net.core.wmem_default"}
    with pytest.raises(SpecError) as err:
        loads_spec(text, capabilities=small)
    (problem,) = err.value.errors
    assert problem.startswith("topology.queue_packets = 100: this fabric's switch queues can "
                              "hold 2,764,800 bytes"), problem
    big = dict(small, ovs_send_buffer=2_764_800)
    assert loads_spec(text, capabilities=big).topology.queue_packets == 100
    # the kernel datapath has no such socket: preflight leaves the figure out
    assert loads_spec(text, capabilities={"datapath": "kernel"}).topology.queue_packets == 100
    # a byte limit is named as such
    with pytest.raises(SpecError) as err:
        loads_spec(text + "queue_bytes = 150000\n", capabilities=small)
    assert err.value.errors[0].startswith("topology.queue_bytes = 150000: ")


def test_the_fabric_refuses_before_it_takes_the_lock(monkeypatch):
    caps = Capabilities(datapath="user", netem=True, congestion_controls=["cubic"],
                        ovs_version="3.1.0", notices=[], ovs_send_buffer=DEFAULT_WMEM,
                        ovs_send_buffer_source="net.core.wmem_default")
    fabric = Fabric(LeafSpineTopo(2, 2, 2), capabilities=caps)
    taken = []

    def acquire(*a):  # and stop there: a start that got this far must not build anything
        taken.append(a)
        raise RuntimeError("the lock was taken before the check")

    monkeypatch.setattr(fabric.lock, "acquire", acquire)
    with pytest.raises(PreflightError, match="2,764,800 bytes of packets"):
        fabric.start()
    assert taken == [], "the lock (and with it the system) was touched before the check"
    caps.ovs_send_buffer = 2_764_800
    fabric._check_send_buffer()  # enough: no error


def test_a_spec_whose_fabric_cannot_be_built_gets_its_own_errors_not_a_crash():
    small = {"datapath": "user", "ovs_send_buffer": DEFAULT_WMEM}
    cases = {"[topology]\nkind = 'bogus'\n": "topology.kind: 'bogus' is not one of",
             "[topology]\nkind = 'star'\n[workload]\nkind = 'bogus'\n":
                 "workload.kind: 'bogus' is not one of",
             "[topology]\nkind = 'star'\n[workload]\nkind = 'incast'\nsenders = 'x'\n":
                 "workload.senders: 'x' is not an integer"}
    for text, start in cases.items():
        with pytest.raises(SpecError) as err:
            loads_spec(text, capabilities=small)
        assert err.value.errors[0].startswith(start), err.value.errors


def test_the_fix_named_is_one_that_suffices():
    small = ovs_buffer.shortfall(DEFAULT_WMEM, "s", ovs_buffer.INSTALL_BYTES, "queues")
    assert "Run scripts/install.sh" in small
    huge = ovs_buffer.shortfall(DEFAULT_WMEM, "s", ovs_buffer.INSTALL_BYTES + 1, "queues")
    assert "install.sh" not in huge and huge.endswith(
        f"Set net.core.wmem_default >= {ovs_buffer.INSTALL_BYTES + 1:,} and restart Open "
        "vSwitch.")


def test_an_unreadable_socket_list_is_unknown_not_the_default(monkeypatch):
    import subprocess

    def failing(*a, **k):
        return subprocess.CompletedProcess(a, 1, "", "ss: permission denied")

    monkeypatch.setattr(ovs_buffer.subprocess, "run", failing)
    have, why = ovs_buffer.send_buffer()
    assert have is None and "exit 1" in why
    monkeypatch.setattr(ovs_buffer.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, SS_OUTPUT, ""))
    assert ovs_buffer.send_buffer() == (16_777_216, "ovs-vswitchd's packet socket")


def test_every_shipped_spec_fits_the_buffer_install_sets():
    for path in sorted(glob.glob(str(ROOT / "specs" / "*.toml"))):
        spec = load_spec(path, allow_sweep=True)
        for label, point in _points(spec):
            need = ovs_buffer.topology_required_bytes(point.make_topology())
            assert need <= ovs_buffer.INSTALL_BYTES, (path, label, need)


def test_install_sets_the_buffer_this_module_names():
    script = (ROOT / "scripts" / "install.sh").read_text()
    (value,) = re.findall(r"^SEND_BUFFER=(\d+)", script, flags=re.M)
    assert int(value) == ovs_buffer.INSTALL_BYTES
    assert "net.core.wmem_default = $SEND_BUFFER" in script
    (value,) = re.findall(r"^RECEIVE_BUFFER=(\d+)", script, flags=re.M)
    assert int(value) == ovs_buffer.INSTALL_RECEIVE_BYTES
    assert '"net.core.rmem_default = $RECEIVE_BUFFER"' in script
