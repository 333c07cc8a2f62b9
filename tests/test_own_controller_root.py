"""Root tier for "bring your own controller" (routing.policy app and external).

- the Ryu-style example app (controller/examples/learning_switch.py, `from ryu...`
  imports, unmodified) routes a star and a one-spine leaf-spine: every host pair pings
  (Mininet's pingAll), and a whole run — PS job, captures, report — completes;
- an os-ken controller the test starts itself on another 127.0.0.1 port serves a run
  with policy external (ours only observes, as an OpenFlow slave, for port
  statistics); one that is not running is refused, and one that dies mid-run fails
  the run;
- the same learning switch on two spines (loops) is stopped at bring-up with the
  message that says why, and nothing of the run is left behind.

Fabrics stay small (2 cores). Run as root under the shared lock:
    flock /tmp/incastlab-root.lock .venv/bin/python -m pytest -q -m root \\
        tests/test_own_controller_root.py
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from incastlab.state import STATE_DIR
from tests.rootnet import free_port, ovs_bridges

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "controller" / "examples" / "learning_switch.py"
SPEC = REPO / "specs" / "own-controller.toml"
INCASTLAB = [sys.executable, "-m", "incastlab.cli"]
SMALL_JOB = ["--set", "workload.iterations=3", "--set", "workload.model_size=50_000",
             "--set", "workload.timeout_s=30", "--set", "run.phase_timeout_s=40",
             "--set", "run.duration_limit_s=240"]
FABRICS = {
    "star": [],  # the spec's own topology: one switch, 3 senders + the PS
    "one-spine": ["--set", "topology.kind=leafspine", "--set", "topology.spines=1",
                  "--set", "topology.leaves=2", "--set", "topology.hosts_per_leaf=2"],
}
TWO_SPINES = ["--set", "topology.kind=leafspine", "--set", "topology.spines=2",
              "--set", "topology.leaves=2", "--set", "topology.hosts_per_leaf=2"]


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _processes_naming(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (e.g. a run directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _nothing_left(run_dir: Path) -> None:
    assert not (ovs_bridges() & {"sp1", "sp2", "lf1", "lf2"})
    assert not list(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else True
    assert not [n for n in os.listdir("/sys/class/net") if "-eth" in n]
    assert _processes_naming(str(run_dir)) == []  # the controller and every worker ended


def _run(run_dir: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    # from the repository: the spec names its app relative to where incastlab runs
    return subprocess.run(INCASTLAB + ["run", str(SPEC), "--out", str(run_dir),
                                       "--controller-port", str(free_port()), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _assert_complete_with_report(run_dir: Path, out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 0, out.stderr + out.stdout
    manifest = _manifest(run_dir)
    assert manifest["status"] == "complete", manifest.get("reason")
    for name in ("fabric.json", "queues.csv", "metrics.json", "summary.md", "report.html"):
        assert (run_dir / name).is_file(), f"{name} missing:\n{out.stdout}\n{out.stderr}"
    assert list((run_dir / "pcap").glob("*.pcap"))
    for rank in range(4):  # PS + 3 workers, each to its final line
        lines = [json.loads(x) for x in (run_dir / "workers" / f"{rank}.jsonl").open()]
        assert lines[-1]["event"] == "final", rank


@pytest.mark.parametrize("fabric", FABRICS)
def test_ryu_style_example_app_pingall(fabric):
    from incastlab.fabric import Fabric
    from incastlab.spec import load_spec

    spec = load_spec(str(SPEC), [a for a in FABRICS[fabric] if a != "--set"])
    with tempfile.TemporaryDirectory(prefix="own-controller-") as tmp:
        run_dir = Path(tmp) / "fabric"
        with Fabric(spec.make_topology(), policy="app", run_dir=run_dir,
                    controller_port=free_port(), policy_args=["--app", str(EXAMPLE)],
                    ready_timeout=40) as fab:
            assert fab.net.pingAll(timeout=2) == 0.0  # percent lost, every ordered pair
            # OVSDB's is_connected follows the connection within its status refresh
            # (seconds): what policy external's readiness reads
            end = time.monotonic() + 15
            while fab.unconnected_switches() and time.monotonic() < end:
                time.sleep(0.5)
            assert fab.unconnected_switches() == []
        log = (run_dir / "controller.log").read_text()
        assert "instantiating app learning_switch of LearningSwitch13" in log
        assert "ready: all" in log and "Traceback" not in log
        _nothing_left(run_dir)


@pytest.mark.parametrize("fabric", FABRICS)
def test_ryu_style_example_app_runs_a_ps_job_with_report(tmp_path, fabric):
    run_dir = tmp_path / "run"
    out = _run(run_dir, *SMALL_JOB, *FABRICS[fabric])
    _assert_complete_with_report(run_dir, out)
    log = (run_dir / "controller.log").read_text()
    assert "learning_switch.py loaded as module learning_switch" in log
    assert "Traceback" not in log
    # port statistics from the observer; which path a flow took is not known
    assert len((run_dir / "port_stats.csv").read_text().splitlines()) > 1
    assert not (run_dir / "flow_paths.csv").exists()
    _nothing_left(run_dir)


# The test's own controller: plain os-ken, the example app (through the ryu alias) and
# a witness app that logs each switch that connects to it.
EXTERNAL_CONTROLLER = """
import logging, sys
from os_ken import cfg
from os_ken.base import app_manager
from os_ken.controller import controller, ofp_handler  # noqa: F401 (register options)
from incastlab.controller import ryu_compat

logging.basicConfig(filename=sys.argv[2], level=logging.INFO)
cfg.CONF(args=[], project="os_ken")
cfg.CONF.set_override("ofp_listen_host", "127.0.0.1")
cfg.CONF.set_override("ofp_tcp_listen_port", int(sys.argv[1]))
app = ryu_compat.load_app(sys.argv[3])
app_manager.AppManager.run_apps([app.__name__, "witness"])
"""
WITNESS = """
import logging
from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, set_ev_cls


class Witness(app_manager.OSKenApp):
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def features(self, ev):
        logging.info("witness: switch %016x connected", ev.msg.datapath.id)
"""


def _answers(port: int) -> bool:
    """Something accepts TCP connections on 127.0.0.1:``port`` (as the run checks)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


@pytest.fixture
def external(tmp_path):
    """The test's own os-ken controller on a free 127.0.0.1 port: (port, log, process)."""
    port = free_port()
    script = tmp_path / "external_controller.py"
    script.write_text(EXTERNAL_CONTROLLER)
    (tmp_path / "witness.py").write_text(WITNESS)  # found beside the script
    log = tmp_path / "external.log"
    ctl = subprocess.Popen([sys.executable, str(script), str(port), str(log), str(EXAMPLE)],
                           start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        # started = its apps instantiated and its OpenFlow port accepting (os-ken binds it
        # after the apps; the run refuses a controller that does not answer there)
        deadline = time.monotonic() + 30
        while not (log.exists() and "instantiating app witness" in log.read_text()
                   and _answers(port)):
            assert ctl.poll() is None, "the external controller died"
            assert time.monotonic() < deadline, "the external controller did not start"
            time.sleep(0.2)
        yield port, log, ctl
    finally:
        if ctl.poll() is None:
            os.killpg(ctl.pid, signal.SIGKILL)
        ctl.wait()


def test_external_os_ken_controller_is_used(tmp_path, external):
    port, log, _ctl = external
    run_dir = tmp_path / "run"
    out = _run(run_dir, *SMALL_JOB, "--set", "routing.policy=external",
               "--set", f'routing.controller="127.0.0.1:{port}"')
    _assert_complete_with_report(run_dir, out)
    # every switch connected to the test's own controller, which routed the run; ours
    # only observed, in the slave role, and wrote the port statistics
    fabric = json.loads((run_dir / "fabric.json").read_text())
    for switch in fabric["switches"]:
        assert f"witness: switch {switch['dpid']:016x} connected" in log.read_text()
    ours = (run_dir / "controller.log").read_text()
    assert "policy external on 127.0.0.1" in ours and "(slave role asked for)" in ours
    assert "OpenFlow error" not in ours and "Traceback" not in ours
    assert len((run_dir / "port_stats.csv").read_text().splitlines()) > 1
    assert not (run_dir / "flow_paths.csv").exists()
    _nothing_left(run_dir)


def test_external_controller_lost_mid_run_fails_the_run(tmp_path, external):
    _port, _log, ctl = external
    run_dir = tmp_path / "run"
    args = [*SMALL_JOB, "--set", "workload.iterations=200", "--set", "routing.policy=external",
            "--set", f'routing.controller="127.0.0.1:{_port}"', "--no-report"]
    proc = subprocess.Popen(INCASTLAB + ["run", str(SPEC), "--out", str(run_dir),
                                         "--controller-port", str(free_port()), *args],
                            cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        log1 = run_dir / "workers" / "1.jsonl"
        while not (log1.exists() and '"event":"iteration"' in log1.read_text()):
            assert proc.poll() is None, "the run ended before its workers iterated"
            assert time.monotonic() < deadline, "workers did not start iterating"
            time.sleep(0.5)
        os.killpg(ctl.pid, signal.SIGKILL)  # the user's controller dies
        ctl.wait()
        # OVSDB's is_connected follows within seconds; the run checks every 2 s
        assert proc.wait(timeout=60) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "failed"
    assert f"the controller at 127.0.0.1:{_port} (policy external) lost the switches lf1" \
        in manifest["reason"]
    _nothing_left(run_dir)


def test_external_controller_not_running_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    port = free_port()  # nothing listens there
    out = _run(run_dir, *SMALL_JOB, "--set", "routing.policy=external",
               "--set", f'routing.controller="127.0.0.1:{port}"', timeout=200)
    assert out.returncode != 0
    reason = _manifest(run_dir)["reason"]
    assert f"policy external: no controller answers on 127.0.0.1:{port}" in reason
    _nothing_left(run_dir)


def test_learning_switch_on_two_spines_is_stopped(tmp_path):
    run_dir = tmp_path / "run"
    started = time.monotonic()
    out = _run(run_dir, *SMALL_JOB, *TWO_SPINES, timeout=300)
    took = time.monotonic() - started
    assert out.returncode != 0
    manifest = _manifest(run_dir)
    assert manifest["status"] == "failed"
    reason = manifest["reason"]
    assert "on a fabric with loops (2 spines)" in reason, reason
    assert "Flooding apps suit a star or a leaf-spine with one spine" in reason
    assert "stopped" in reason or "not installed within the deadline" in reason
    assert not (run_dir / "workers").exists() or not list((run_dir / "workers").iterdir())
    print(f"stopped after {took:.1f} s: {reason}")
    _nothing_left(run_dir)
