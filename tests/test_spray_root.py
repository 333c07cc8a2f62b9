"""Root tier: policy spray (controller/spray.py, incastlab/pathlabel.py).

One long flow (the incast job with one sender: h2 on leaf 2 sends 3 blocks of 2 MB to
h1 on leaf 1, 2 spines, one host a leaf) under spray: every host labels each packet of a
flow with the next DSCP label, round robin, and the leaves send label k to spine k.
So each leaf's uplinks carry the same number of packets of each flow, give or take
one, and the leaf's few other flows (the job's connection set-up, the readiness
pings) are sprayed too: each uplink's share of a leaf's uplink packets (port
statistics) is 1/2 within the issue's 5 % of that share. After the run, and after
SIGINT mid-run, nothing of the labeller is left: no program, no bpffs, no attachment;
a crashed run's bpffs goes with ``clean_state``."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from incastlab import bpffs, pathlabel
from incastlab.topologies.fabricmap import FabricMap
from tests.rootnet import fidelity, kept_up, run_complete

pytestmark = pytest.mark.root
SPINES = 2
BASE = [f"topology.spines={SPINES}", "topology.leaves=2", "topology.hosts_per_leaf=1",
        "routing.policy=spray", "workload.kind=incast", "workload.senders=1",
        "workload.block_bytes=2000000", "workload.rounds=3"]
EVEN_SHARE_TOLERANCE = 0.05  # of the even share (the figure)


def labeller_left() -> list[str]:
    """Programs, bpffs mounts and tc attachments of the labeller still on the machine."""
    progs = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                           check=True).stdout
    left = [f"program {p['name']}" for p in json.loads(progs)
            if p.get("name") in pathlabel.PROGRAMS]
    if bpffs.BPF_ROOT.is_dir():
        left += [f"bpffs {p}" for p in bpffs.BPF_ROOT.iterdir() if p.name.endswith("-labels")]
    return left


def uplink_packets(run_dir: Path) -> dict[str, dict[int, int]]:
    """leaf name -> {spine index: packets its uplink to that spine sent during the run}
    (the controller's port statistics, last sample minus first)."""
    fmap = FabricMap.load(run_dir / "fabric.json")
    # (the last poll, during teardown, once read 2**64 - 1 for ports being deleted: the
    # controller now writes no row for them, records.port_stats_rows)
    stats = pd.read_csv(run_dir / "port_stats.csv", dtype={"tx_packets": "uint64"})
    out = {}
    for leaf in fmap.leaf_indices:
        name = fmap.leaf(leaf).name
        out[name] = {}
        for spine in fmap.spine_indices:
            rows = stats[(stats.switch == name)
                         & (stats.port == fmap.uplink(leaf, spine).leaf_port)].sort_values("t")
            out[name][spine] = int(rows.tx_packets.iloc[-1] - rows.tx_packets.iloc[0])
    return out


@pytest.fixture(scope="module")
def spray_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("spray")
    manifest = run_complete(run_dir, BASE)
    left = labeller_left()
    return run_dir, manifest, left


def test_one_flow_crosses_every_spine_evenly(spray_run):
    run_dir, manifest, _ = spray_run
    assert manifest["path_labels"]["mode"] == "spray"
    assert manifest["path_labels"]["labels"] == SPINES
    packets = uplink_packets(run_dir)
    print(f"uplink packets per spine: {packets}")
    sender_leaf = packets["lf2"]  # h2's data
    assert sum(sender_leaf.values()) > 3 * 2_000_000 / 1448  # the blocks crossed
    if not kept_up(run_dir):
        return  # the datapath fell behind: port counts are not held to the share
    for leaf, per_spine in packets.items():
        total = sum(per_spine.values())
        for spine, n in per_spine.items():
            share = n / total
            assert abs(share - 1 / SPINES) <= EVEN_SHARE_TOLERANCE / SPINES, \
                (leaf, spine, share, per_spine)


def test_reordering_is_measured_and_the_dsacks_agree(spray_run):
    """analysis/reorder.py on the sprayed flow at the receiver's capture, beside the
    kernel's counters: every duplicate h1 received is answered by one D-SACK (its
    TcpExtTCPDSACKOldSent + OfoSent), held when no capture lost a packet."""
    from incastlab.analysis.pcap import read_pcaps
    from incastlab.analysis.reconcile import capture_drop_total
    from incastlab.analysis.reorder import run_reordering
    from incastlab.analysis.rundir import load_counters
    from incastlab.analysis.tcp import combine

    run_dir, manifest, _ = spray_run
    fmap = FabricMap.load(run_dir / "fabric.json")
    tcp = combine(read_pcaps(run_dir / "pcap", cache=False))
    per_flow, table = run_reordering(tcp, load_counters(run_dir), fmap)
    print(per_flow.to_string(), table.to_string(), sep="\n")
    data = per_flow[(per_flow.sender == "h2") & (per_flow.receiver == "h1")]
    assert len(data) == 1 and data.receiver_iface.iloc[0] == "h1-eth0", per_flow
    assert data.data_packets.iloc[0] > 3 * 2_000_000 / 1448
    h1 = table.set_index("host").loc["h1"]
    if capture_drop_total(manifest) == 0:
        assert h1.dsack_sent == h1.received_duplicates, h1
    # the report's stage (the one pass over the captures, a group of connections at a
    # time) says the same
    fidelity(run_dir)  # builds metrics.json if no test has yet
    m = json.loads((run_dir / "metrics.json").read_text())["reorder"]
    assert (m["data_packets"], m["reordered"], m["duplicates"]) == (
        int(per_flow.data_packets.sum()), int(per_flow.reordered.sum()),
        int(per_flow.duplicates.sum())), m


def test_nothing_of_the_labeller_is_left_after_the_run(spray_run):
    assert spray_run[2] == []


def test_clean_state_unmounts_a_crashed_runs_labeller():
    """A run killed before its teardown leaves its bpffs (and programs) mounted: the
    state's clean-up, as ``incastlab clean`` runs it, takes it away."""
    from incastlab.clean import clean_state
    from incastlab.state import RunState

    state = RunState.create(None)
    labeller = pathlabel.PathLabeller(pathlabel.PathLabelling("spray", 2), state)
    try:
        labeller.pinned.load(state)
        assert labeller.pinned.program("label_egress").exists()
        assert "program label_egress" in labeller_left()
        removed = clean_state(state)
        assert f"bpffs {labeller.pinned.pin_dir}" in removed
        assert labeller_left() == []
    finally:
        labeller.detach()
        state.remove()


def test_sigint_mid_run_leaves_nothing(tmp_path):
    run_dir = tmp_path / "sigint"
    argv = [str(Path(sys.executable).with_name("incastlab")), "run", "--no-report",
            "--out", str(run_dir)]
    for o in BASE[:-1] + ["workload.rounds=200"]:
        key, value = o.split("=", 1)
        argv += ["--set", f"{key}={json.dumps(value) if not value.isdigit() else value}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (run_dir / "manifest.json").exists() \
                or "program label_egress" not in labeller_left():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the labeller never started"
            time.sleep(0.2)
        time.sleep(1.0)  # traffic flowing through the labeller
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "aborted", manifest.get("reason")
    assert labeller_left() == []
