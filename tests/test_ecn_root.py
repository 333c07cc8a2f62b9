"""Root tier: ECN marks at a switch queue with the BPF marker (docs/ecn.md).

Two senders with cubic push 5 MB blocks each (3 rounds) into one receiver on a star, at
100 Mbit/s through the receiver's 100-packet port queue: twice what the port drains, so
without ECN cubic fills the queue and drops. With topology.ecn_threshold_packets = 20 the
hosts negotiate ECN (tcp_ecn = 1), the port marks CE above 20 packets, and the senders
back off before the queue fills: its busy mean stays far below the plain run's, no drop.
The marker's count must equal the CE packets captured arriving at the receiver, short
by at most what tcpdump said it lost. After each run, and after SIGINT mid-run, nothing
of the marker remains: no program, no bpffs, no tc attachment."""
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

from incastlab import ecn
from incastlab.commands.common import build_report
from tests.rootnet import kept_up, run_complete

pytestmark = pytest.mark.root
K, QUEUE = 20, 100
PORT = "lf1-eth3"  # the star's port towards the receiver h3 (2 senders h1, h2)
BASE = ["topology.kind=star", "topology.host_bw_mbps=100", f"topology.queue_packets={QUEUE}",
        "routing.policy=single", "workload.kind=incast", "workload.senders=2",
        "workload.block_bytes=5000000", "workload.rounds=3"]


def _ours_left() -> list[str]:
    """Programs, bpffs mounts and tc attachments of the marker still on the machine."""
    progs = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                           check=True).stdout
    left = [f"program {p['name']}" for p in json.loads(progs) if p.get("name") in ecn.PROGRAMS]
    root = ecn.BPF_ROOT
    if root.is_dir():
        left += [f"bpffs {p}" for p in root.iterdir()]
    net = subprocess.run(["bpftool", "net", "show"], capture_output=True, text=True).stdout
    left += [f"attachment {line.strip()}" for line in net.splitlines()
             if any(name in line for name in ecn.PROGRAMS)]
    return left


def _busy_queue(run_dir: Path) -> tuple[float, int]:
    """(mean backlog in packets over the samples in which the port sent, its drops)."""
    q = pd.read_csv(run_dir / "queues.csv")
    q = q[q.iface == PORT].sort_values("t")
    busy = q[q.sent_pkts.diff() > 0]
    return float(busy.backlog_pkts.mean()), int(q.drops.max() - q.drops.min())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for name, extra in (("ecn", [f"topology.ecn_threshold_packets={K}"]), ("plain", [])):
        run_dir = tmp_path_factory.mktemp(f"ecn-{name}")
        manifest = run_complete(run_dir, BASE + extra)
        assert _ours_left() == [], f"after the {name} run"
        build_report(run_dir, plots=False)
        out[name] = (run_dir, manifest)
    return out


def test_marks_hold_the_queue_low_without_drops(runs):
    """With marks the senders back off above K: the port never fills (no drop) and its
    busy mean stays at or below K; cubic alone fills it (the 2:1 overload) and drops.
    Claims on a run's queue and drops hold only when that run kept up (fidelity)."""
    (ecn_dir, _), (plain_dir, _) = runs["ecn"], runs["plain"]
    ecn_mean, ecn_drops = _busy_queue(ecn_dir)
    plain_mean, plain_drops = _busy_queue(plain_dir)
    print(f"busy queue mean: ECN {ecn_mean:.1f}, plain {plain_mean:.1f} packets; "
          f"drops {ecn_drops} vs {plain_drops}")
    ecn_kept, plain_kept = kept_up(ecn_dir), kept_up(plain_dir)
    if ecn_kept:
        assert ecn_drops == 0
        assert ecn_mean <= K
    if plain_kept:
        assert plain_drops > 0 and plain_mean > K
    if ecn_kept and plain_kept:
        assert ecn_mean < plain_mean / 2


def test_captures_show_ce_and_the_echoes(runs):
    run_dir, manifest = runs["ecn"]
    assert manifest["ecn"]["threshold"] == K and manifest["ecn"]["unit"] == "packets"
    check = json.loads((run_dir / "metrics.json").read_text())["ecn"]["check"]
    row = next(r for r in check if r["iface"] == PORT)
    print(f"{PORT}: {row}")
    assert row["ce_captured"] > 0 and row["ece_captured"] > 0
    plain = json.loads((runs["plain"][0] / "metrics.json").read_text())
    assert plain.get("ecn") is None  # no marker, no table


def test_mark_count_equals_captured_ce(runs):
    """Tolerance: a CE packet the capture lost is one tcpdump counted as dropped; the
    marker counts every mark, so captured <= marks + ce_arrived <= captured + lost."""
    run_dir, _ = runs["ecn"]
    check = json.loads((run_dir / "metrics.json").read_text())["ecn"]["check"]
    assert {r["iface"] for r in check} == {"lf1-eth1", "lf1-eth2", "lf1-eth3"}
    for r in check:
        expected = r["marks"] + r["ce_arrived"]
        assert r["ce_captured"] <= expected <= r["ce_captured"] + r["capture_lost"], r
    assert next(r for r in check if r["iface"] == PORT)["marks"] > 0


def test_mark_table_sums_to_the_totals(runs):
    run_dir, _ = runs["ecn"]
    table = pd.read_csv(run_dir / "tables" / "ecn_marks.csv")
    totals = pd.read_csv(run_dir / "ecn.csv").groupby("iface").marks.max()
    assert (table.groupby("iface").marks.sum() == totals[totals > 0]).all()
    assert table[table.iface == PORT].marks.sum() > 0


def test_sigint_mid_run_leaves_nothing(tmp_path):
    run_dir = tmp_path / "sigint"
    argv = [str(Path(sys.executable).with_name("incastlab")), "run", "--no-report",
            "--out", str(run_dir)]
    for o in BASE[:-1] + ["workload.rounds=200", f"topology.ecn_threshold_packets={K}"]:
        key, value = o.split("=", 1)
        argv += ["--set", f"{key}={json.dumps(value) if not value.isdigit() else value}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (run_dir / "ecn.csv").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.2)
        assert (run_dir / "ecn.csv").exists(), "the marker never started"
        time.sleep(1.0)  # traffic flowing, marks being counted
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "aborted", manifest.get("reason")
    assert _ours_left() == []


def test_marks_captures_and_kernel_counters_agree(runs):
    """The ECN run's marks from three sources (analysis/ecnreconcile.py): the port, the
    receiver's kernel (IpExtInCEPkts) and capture, and the senders' TCPDeliveredCE
    against what the captured ECE ACKs delivered (FINs included); with cubic's classic
    echo DeliveredCE only bounds the CE packets from above. Held on every run."""
    rec = json.loads((runs["ecn"][0] / "metrics.json").read_text())["ecn"]["reconcile"]
    print(f"reconciliation: {rec}")
    assert rec["port_marks"] > 0 and rec["exact_echo"] is False
    assert all(rec["agrees"].values()), rec
