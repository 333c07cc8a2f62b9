"""Root tier for the runner and CLI: real fabric, controller, captures and training.

One complete run with every file of the run-directory layout and a report; Ctrl-C in
the middle of the workload; a second run refused while one holds the lock; a
controller killed mid-run; a 2×2 sweep with its comparison report and --resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from incastlab.state import STATE_DIR
from tests.rootnet import free_port, ovs_bridges

pytestmark = pytest.mark.root
INCASTLAB = [sys.executable, "-m", "incastlab.cli"]
SMALL = """
[topology]
spines = 2
leaves = 2
hosts_per_leaf = 2
host_bw_mbps = 20.0
queue_packets = 30
[routing]
policy = "ecmp"
[workload]
kind = "ps"
workers = 3
model_size = 50_000
iterations = {iterations}
timeout_s = 30
[run]
phase_timeout_s = 30
duration_limit_s = 240
"""


def _spec(tmp_path: Path, iterations: int = 4, extra: str = "") -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL.format(iterations=iterations) + extra)
    return path


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _nothing_left():
    assert not (ovs_bridges() & {"sp1", "sp2", "lf1", "lf2"})
    assert not list(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else True
    assert not [n for n in os.listdir("/sys/class/net") if "-eth" in n]


def _wait_for(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _stop(proc) -> None:
    """End a run started by a test however the test went: Ctrl-C first (so the run tears
    down), then SIGKILL and `incastlab clean` for what a killed run leaves."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            subprocess.run(INCASTLAB + ["clean"], timeout=120, check=False)


def _start_long_run(tmp_path: Path, run_dir: Path) -> subprocess.Popen:
    """`incastlab run` of a long workload in its own process group, returned once its
    workers iterate (so the fabric, controller and captures are all up)."""
    proc = subprocess.Popen(INCASTLAB + ["run", str(_spec(tmp_path, iterations=200)), "--out",
                                         str(run_dir), "--controller-port", str(free_port()),
                                         "--no-report"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _wait_for(lambda: _iterating(run_dir), 120, "the first iteration")
    except BaseException:
        _stop(proc)
        raise
    return proc


def _iterating(run_dir: Path) -> bool:
    return any('"iteration"' in p.read_text() for p in (run_dir / "workers").glob("*.jsonl")) \
        if (run_dir / "workers").exists() else False


def test_complete_run_writes_the_whole_layout(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run(INCASTLAB + ["run", str(_spec(tmp_path)), "--out", str(run_dir),
                                      "--controller-port", str(free_port())],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout
    manifest = _manifest(run_dir)
    assert manifest["status"] == "complete" and manifest["end"] > manifest["start"]
    for name in ("spec.toml", "manifest.json", "fabric.json", "queues.csv", "controller.log",
                 "port_stats.csv", "flow_paths.csv", "metrics.json", "summary.md",
                 "report.html"):
        assert (run_dir / name).is_file(), name
    for host in ("h1", "h2", "h3", "h4"):
        assert (run_dir / "counters" / f"{host}.before.json").is_file()
        assert (run_dir / "counters" / f"{host}.after.json").is_file()
    pcaps = sorted(p.name for p in (run_dir / "pcap").glob("*.pcap"))
    assert pcaps == ["h1-eth0.pcap", "h2-eth0.pcap", "h3-eth0.pcap", "h4-eth0.pcap",
                     "sp1-eth1.pcap", "sp2-eth1.pcap"]
    for rank in range(4):
        lines = [json.loads(x) for x in (run_dir / "workers" / f"{rank}.jsonl").open()]
        assert lines[-1]["event"] == "final"
        if rank:
            assert sum(x["event"] == "iteration" for x in lines) == 4
    assert all(s["dropped_by_kernel"] == 0 for s in manifest["capture_drops"].values())
    assert manifest["datapath"] in ("user", "kernel")
    assert manifest["versions"]["torch"].startswith("2.13.0")
    assert "report:" in out.stdout and str(run_dir / "report.html") in out.stdout
    _nothing_left()


def test_ctrl_c_aborts_and_a_second_run_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start_long_run(tmp_path, run_dir)
    try:
        second = subprocess.run(INCASTLAB + ["run", str(_spec(tmp_path)), "--out",
                                             str(tmp_path / "second")],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode != 0
        assert "another incastlab run" in second.stderr.lower()
        assert f"pid {proc.pid}" in second.stderr
        assert not (tmp_path / "second").exists(), "a refused run must not create anything"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does to the foreground group
        proc.wait(timeout=120)
    finally:
        _stop(proc)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "aborted", manifest
    assert "SIGINT" in manifest["reason"]
    assert (run_dir / "workers" / "1.jsonl").stat().st_size > 0, "records must be kept"
    _nothing_left()


def test_killed_controller_fails_the_run(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start_long_run(tmp_path, run_dir)
    try:
        states = [json.loads(p.read_text()) for p in STATE_DIR.glob("*.json")]
        controller = [p["pid"] for s in states if s["run_dir"] == str(run_dir)
                      for p in s["processes"] if p["what"] == "controller"]
        assert len(controller) == 1
        os.kill(controller[0], signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        _stop(proc)
    assert proc.returncode != 0
    manifest = _manifest(run_dir)
    assert manifest["status"] == "failed"
    assert "controller" in manifest["reason"]
    _nothing_left()


def test_sweep_compares_and_resumes(tmp_path):
    spec = _spec(tmp_path, iterations=3,
                 extra='')
    # one axis of two runs: the sweep's cross product is tested in the unit tier
    # (test_spec); here the command must run each point, compare them, skip them on --resume
    spec.write_text(spec.read_text().replace('kind = "ps"', 'kind = ["ps", "ring"]'))
    sweep_dir = tmp_path / "sweep"
    cmd = INCASTLAB + ["sweep", str(spec), "--out", str(sweep_dir), "--controller-port",
                       str(free_port())]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr + out.stdout
    runs = sorted(p.name for p in sweep_dir.iterdir() if (p / "manifest.json").exists())
    assert runs == ["kind=ps,rep=1", "kind=ring,rep=1"]
    compare = sweep_dir / "compare"
    assert (compare / "compare.html").is_file()
    again = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("complete, skipped") == 2
    _nothing_left()
