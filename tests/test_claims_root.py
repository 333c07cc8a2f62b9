"""Root tier for documented claims no other root test held: offloads off on every emulated
interface (hosts and switch ports), and a new run removing what a crashed run of ours
left (before it starts, with a notice), while leaving what is not recorded as ours.

One small star fabric (2 senders) is brought up once."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from incastlab import state
from incastlab.fabric import Fabric
from incastlab.topologies.leafspine import StarTopo
from tests.rootnet import free_port

pytestmark = pytest.mark.root
# ethtool -k feature names of the offloads docs/emulation.md says are off (topologies/links.py
# turns off tx, tso and gso: tx-checksumming, tcp-segmentation-offload and
# generic-segmentation-offload)
OFF = ("tx-checksumming", "tcp-segmentation-offload", "generic-segmentation-offload")
LEFTOVER = "zzc9-eth0"  # a veth pair a crashed run recorded (not a name our fabrics use)


def _features(iface: str, netns_pid: int | None = None) -> dict[str, str]:
    argv = ["ethtool", "-k", iface]
    if netns_pid is not None:
        argv = ["nsenter", "-t", str(netns_pid), "-n", *argv]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    feats = {}
    for line in out.splitlines()[1:]:  # "name: on|off [fixed]"
        name, _, value = line.partition(":")
        if value.split():
            feats[name.strip()] = value.split()[0]
    return feats


@pytest.fixture
def crashed_run_leftover():
    """A state file of a dead owner recording a veth pair that exists."""
    subprocess.run(["ip", "link", "add", LEFTOVER, "type", "veth", "peer", "name",
                    "zzc9-eth1"], check=True)
    state.STATE_DIR.mkdir(parents=True, exist_ok=True)
    path = state.STATE_DIR / "1-1.json"
    # pid 1 with a start time it does not have: a run that died, its pid since reused
    path.write_text(json.dumps({"owner": {"pid": 1, "start": -1}, "run_dir": "crashed",
                                "created": 0, "bridges": [], "interfaces": [LEFTOVER],
                                "netns": [], "processes": []}))
    yield path
    path.unlink(missing_ok=True)
    if os.path.exists(f"/sys/class/net/{LEFTOVER}"):
        subprocess.run(["ip", "link", "delete", LEFTOVER], check=False)


def test_offloads_off_and_a_crashed_runs_leftovers_removed(tmp_path, crashed_run_leftover):
    with Fabric(StarTopo(senders=2), run_dir=tmp_path, controller_port=free_port()) as fab:
        # the new run removed the crashed run's leftovers first, and said so
        assert not os.path.exists(f"/sys/class/net/{LEFTOVER}")
        assert not crashed_run_leftover.exists()
        notices = " ".join(fab.capabilities.notices)
        assert f"removed leftovers of a crashed run: interface {LEFTOVER}" in notices
        checked = 0
        for host in fab.net.hosts:
            for intf in host.intfList():
                if intf.name == "lo":
                    continue
                feats = _features(intf.name, host.pid)
                assert all(feats[f] == "off" for f in OFF), (intf.name, feats)
                checked += 1
        for sw in fab.net.switches:
            for intf in sw.intfList():
                if intf.name == "lo":
                    continue
                feats = _features(intf.name)
                assert all(feats[f] == "off" for f in OFF), (intf.name, feats)
                checked += 1
        assert checked == 3 + 3  # 3 hosts' eth0 and the switch's 3 ports
