"""Root tier for the fidelity verdict (analysis/fidelity.py): on real fabrics, a quiet
run is judged to have kept up, and a run whose datapath loses packets that tc does not
count (an OpenFlow meter with a drop band on the star's path to its receiver,
tests/fidelity_meter_app.py) is judged not to have, with that evidence: the captures'
losses beyond tc's count at the receiver's port, and the meter's own drop counter in
the manifest's run-time counters. The meter lives in the switch: it goes with the
fabric, nothing on the machine is changed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from incastlab.topologies.fabricmap import FabricMap
from tests.rootnet import fidelity, kept_up, run_complete

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parent.parent
# two senders, 64 KiB each a round, into a 100-packet queue at 20 Mbit/s: 88 frames at
# most, so the queue never overflows and nothing is lost unless the datapath loses it
RUN = ["topology.kind=star", "topology.host_bw_mbps=20", "topology.queue_packets=100",
       "workload.kind=incast", "workload.senders=2", "workload.block_bytes=65536",
       "workload.rounds=5", "run.phase_timeout_s=60"]


def _manifest(run_dir) -> dict:
    return json.loads((Path(run_dir) / "manifest.json").read_text())


def test_a_quiet_run_kept_up(tmp_path):
    run_complete(tmp_path, RUN + ["routing.policy=single"])
    manifest = _manifest(tmp_path)
    assert manifest["fidelity"]["kept_up"] is True, manifest["fidelity"]
    assert manifest["fidelity"]["counters"]["socket_drops"] == {}  # read, and none
    v = fidelity(tmp_path)
    assert kept_up(tmp_path), v["text"]
    assert v["evidence"] == [] and v["manifest_kept_up"] is True
    if manifest["datapath"] == "user":  # the kernel datapath has no packet sockets
        assert v["checked"] == ["uncounted_losses", "datapath_drops", "below_rate",
                                "capture_drops"], v["not_checked"]


def test_a_metered_port_is_caught_losing_what_tc_does_not_count(tmp_path):
    apps = [str(ROOT / "controller/examples/learning_switch.py"),
            str(ROOT / "tests/fidelity_meter_app.py")]
    run_complete(tmp_path, RUN + ["routing.policy=app", f"routing.app={json.dumps(apps)}"])
    manifest = _manifest(tmp_path)
    # the run-time verdict already: the meter's drops, which the datapath counts itself
    assert manifest["fidelity"]["kept_up"] is False, manifest["fidelity"]
    meter = manifest["fidelity"]["counters"]["coverage_drops"].get("datapath_drop_meter", 0)
    assert meter > 0, manifest["fidelity"]["counters"]
    v = fidelity(tmp_path)
    assert not kept_up(tmp_path)  # says why, and insists on evidence
    by_check = {e["check"]: e for e in v["evidence"]}
    assert by_check["datapath_drops"]["where"]["datapath_drop_meter"] == meter
    receiver_port = FabricMap.load(tmp_path / "fabric.json").egress_iface("lf1", "h3")
    uncounted = by_check["uncounted_losses"]["where"]
    # the meter sits before the receiver's queue, which never overflows: every packet it
    # dropped is one the captures (at both ends) saw lost there and tc did not count;
    # OVS folds its coverage counters in about once a second, so they can only lag
    assert uncounted.get(receiver_port, 0) >= meter, (uncounted, v["text"])
    seconds = [s for s in v["per_second"] if s["uncounted"]]
    assert seconds, v["per_second"]  # and when
    print(f"meter dropped {meter}; the captures lost {uncounted} beyond tc; {v['text']}")
