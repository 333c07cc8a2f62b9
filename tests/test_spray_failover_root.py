"""Root tier: a spine link fails under spray and flowlet (controller/spray.py,
paths.label_spines).

h2 on leaf 2 sends 40 blocks of 200 KB to h1 on leaf 1 (the incast job with one sender,
2 spines, one host a leaf). At round 10 the cable lf2 <-> sp1 is cut and stays cut
until teardown. Before it, the flow's packets cross both spines; the controller, told
by the port-status, maps every label to sp2 on both leaves (sp1 reaches leaf 2 no
more). From its repair (the last barrier reply, failover.csv) + 0.5 s (the datapath
revalidates its cached flows after the barrier; what sp1's queues held drains in
milliseconds) until the link is restored at teardown, nothing crosses sp1 in either
direction (captures of sp1 -> lf1 and lf1 -> sp1; the cut link itself cannot be
captured: tcpdump ends when its interface goes down), while the transfer goes on over
sp2 and the run completes."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from incastlab.analysis.pcap import read_pcaps
from tests.rootnet import free_port

pytestmark = pytest.mark.root
SPEC = """
[topology]
spines = 2
leaves = 2
hosts_per_leaf = 1
[routing]
policy = "{policy}"
[workload]
kind = "incast"
senders = 1
block_bytes = 200_000
rounds = 40
[capture]
ports = ["h1-eth0", "h2-eth0", "lf1-eth2", "lf1-eth3", "sp1-eth1", "sp2-eth1"]
[[events]]
at_iteration = 10
action = "link_down"
link = ["lf2", "sp1"]
"""
SP1 = ("sp1-eth1", "lf1-eth2")  # sp1 -> lf1 (the data), lf1 -> sp1 (the ACKs)
SP2 = ("sp2-eth1", "lf1-eth3")
SETTLE_S = 0.5


def run(run_dir: Path, policy: str) -> dict:
    from incastlab.runner import check_ready, run_experiment
    from incastlab.spec import loads_spec

    spec = loads_spec(SPEC.format(policy=policy), name=f"{policy}-failover")
    port = free_port()
    status = run_experiment(spec, run_dir, controller_port=port, caps=check_ready(spec, port))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert status == "complete", manifest.get("reason")
    return manifest


def window(run_dir: Path) -> tuple[float, float, float]:
    """(the cut, the controller's repair, the link's restoration at teardown): epoch s."""
    rows = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    cut = next(r for r in rows if r["kind"] == "apply")
    assert cut["ok"] and cut["result"] == {"down": ["lf2-eth2", "sp1-eth2"]}, cut
    undo = next(r for r in rows if r["kind"] == "undo")
    failover = pd.read_csv(run_dir / "failover.csv")
    repairs = failover[(failover.state == "down") & (failover.t_seen >= cut["t"] - 0.01)
                       & (failover.t_seen < undo["t"])]
    assert not repairs.empty, f"no port-status down seen after the cut:\n{failover}"
    return cut["t"], float(repairs.t_installed.max()), undo["t"]


@pytest.mark.parametrize("policy", ["spray", "flowlet"])
def test_no_packet_on_the_dead_spine_after_the_repair(tmp_path, policy):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run(run_dir, policy)
    t_cut, t_repaired, t_restored = window(run_dir)
    pcaps = read_pcaps(run_dir / "pcap", cache=False)

    def count(ifaces, start, end, data_only=False):
        n = 0
        for iface in ifaces:
            df = pcaps[iface]
            df = df[(df.ethertype == 0x0800) & (df.t > start) & (df.t < end)]
            n += int((df.payload_len > 0).sum()) if data_only else len(df)
        return n

    settled = t_repaired + SETTLE_S
    before = count(SP1, 0, t_cut, data_only=True)
    after_sp1 = count(SP1, settled, t_restored)
    after_sp2 = count(SP2, settled, t_restored, data_only=True)
    print(f"{policy}: repaired {t_repaired - t_cut:.3f} s after the cut; data packets on "
          f"sp1 before the cut {before}; from the repair + {SETTLE_S} s to the "
          f"restoration ({t_restored - settled:.2f} s): sp1 {after_sp1} packets, sp2 "
          f"{after_sp2} data packets")
    assert before > 100, "the flow did not use sp1 before the cut: nothing to test"
    assert t_restored - settled > 0.5, "the run ended before the repair had settled"
    assert after_sp2 > 100
    assert after_sp1 == 0
