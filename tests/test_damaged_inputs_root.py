"""Issue 13 item 2 on a real run: a small synchronous PS through the real runner, then
copies of its directory with inputs damaged, re-analysed. A damaged input gives n/a and
a problem, never a number from nothing; a bad line costs only itself. (Each damaged
state on its own: tests/test_damaged_inputs.py.)"""
import json
import shutil

import pytest

from incastlab.commands.common import analyse, build_report
from tests.rootnet import run_complete

pytestmark = pytest.mark.root
CAPTURE_METRICS = ("retransmissions", "capture_losses", "rtos")


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """3 workers push 1 MB gradients through 10-packet switch queues to one PS: the
    PS's downlink overflows, so tc drops, captured losses and retransmissions are > 0."""
    run = tmp_path_factory.mktemp("real")
    manifest = run_complete(run, [
        "topology.spines=2", "topology.leaves=2", "topology.hosts_per_leaf=2",
        "topology.host_bw_mbps=20", "topology.queue_packets=10", "routing.policy=ecmp",
        "workload.kind=ps", "workload.mode=sync", "workload.workers=3",
        "workload.model_size=250000", "workload.iterations=3", "run.phase_timeout_s=30",
        "workload.timeout_s=60"])
    return run, manifest, analyse(run).metrics


def _copy(real_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(real_run[0], copy)  # mtimes kept: the parsed-capture caches stay valid
    return copy


def _server_pcap(run, manifest):
    return run / "pcap" / f"{manifest['placement']['servers'][0]}-eth0.pcap"


def test_the_real_run_is_whole(real_run):
    _, _, m = real_run
    assert m["analysis"]["complete"] is True, m["analysis"]
    h = m["headline"]
    assert h["tc_drops"] > 0 and h["retransmissions"] > 0 and h["capture_losses"] > 0


def test_a_deleted_server_capture_and_worker_log(real_run, tmp_path):
    run, manifest, whole = real_run
    copy = _copy(real_run, tmp_path)
    _server_pcap(copy, manifest).unlink()
    (copy / "workers" / "2.jsonl").unlink()
    paths = build_report(copy, plots=False)
    m = json.loads(paths["metrics"].read_text())
    name = f"pcap/{_server_pcap(run, manifest).name}"
    assert m["analysis"]["complete"] is False
    assert m["analysis"]["inputs"][name]["state"] == "missing"
    assert m["analysis"]["inputs"]["workers/2.jsonl"]["state"] == "missing"
    for k in CAPTURE_METRICS:
        assert m["headline"][k] is None and name in m["headline_na"][k], k
    assert m["headline"]["iteration_time_mean_s"] is None
    assert m["reconciliation"]["capture_retrans"] is None   # not stated in the findings
    for k in ("kernel_retrans_segs", "tc_drops"):            # their inputs are whole
        assert m["headline"][k] == whole["headline"][k], k
    assert any(name in p for p in m["problems"])
    assert "id='partial-banner'" in paths["report"].read_text()


def test_a_garbage_capture_and_a_truncated_queue_file(real_run, tmp_path):
    run, manifest, whole = real_run
    copy = _copy(real_run, tmp_path)
    _server_pcap(copy, manifest).write_bytes(b"\x00garbage, not a capture\n" * 1000)
    raw = (copy / "queues.csv").read_bytes()
    (copy / "queues.csv").write_bytes(raw[:len(raw) // 2])   # mid-line, mid-run
    m = analyse(copy).metrics
    ins = m["analysis"]["inputs"]
    assert ins[f"pcap/{_server_pcap(run, manifest).name}"]["state"] == "unreadable"
    assert ins["queues.csv"]["state"] == "truncated"
    for k in CAPTURE_METRICS + ("tc_drops",):
        assert m["headline"][k] is None, k
    floor = m["headline_na"]["tc_drops"].split("at least ")[1].split()[0]
    assert 0 <= int(floor.replace(",", "")) <= whole["headline"]["tc_drops"]
    assert m["headline"]["kernel_retrans_segs"] == whole["headline"]["kernel_retrans_segs"]


def test_bad_lines_cost_only_themselves(real_run, tmp_path):
    _, _, whole = real_run
    copy = _copy(real_run, tmp_path)
    lines = (copy / "queues.csv").read_bytes().split(b"\n")
    lines.insert(len(lines) // 2, b"1.0,lf1,1,lf1-eth1,\xff,0,x")
    (copy / "queues.csv").write_bytes(b"\n".join(lines))
    w = copy / "workers" / "1.jsonl"
    wl = w.read_bytes().split(b"\n")
    wl[1] = wl[1][:5] + b"\xff" + wl[1][6:]                  # one non-UTF-8 byte
    w.write_bytes(b"\n".join(wl))
    m = analyse(copy).metrics
    ins = m["analysis"]["inputs"]
    assert ins["queues.csv"]["bad_lines"] == 1 and ins["workers/1.jsonl"]["bad_lines"] == 1
    assert m["analysis"]["complete"] is True
    for k in ("tc_drops", "retransmissions", "iteration_time_mean_s"):
        assert m["headline"][k] == whole["headline"][k], k
