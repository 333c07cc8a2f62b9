"""Bring a fabric to life and always take it down again.

    with Fabric(LeafSpineTopo(2, 2, 2), policy="single", run_dir=path) as fab:
        fab.net["h1"].cmd("ping -c1 10.0.2.1")

``__enter__`` runs preflight, takes the one-run lock, records every name it is about
to create (incastlab.state), starts the controller (its own process group, 127.0.0.1
only), builds and starts Mininet, sets each host's TCP congestion control, and then
waits — polling with a deadline — until every switch is connected, the controller says
its rules are installed, and every host pair answers a ping. ``__exit__`` tears it all
down on normal exit, exceptions, SIGINT and SIGTERM; teardown is safe to call twice.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import RemoteController

from incastlab.clean import clean, clean_state
from incastlab.lock import RunLock
from incastlab.preflight import Capabilities, run_preflight
from incastlab.state import RunState
from incastlab.topologies.fabricmap import FabricMap
from incastlab.topologies.leafspine import fabric_map
from incastlab.topologies.links import QueuedLink, QueuedOVSSwitch

DEFAULT_CONTROLLER_PORT = 6653
ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


class FabricError(RuntimeError):
    """Bring-up failed; the message says which step and why."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception so that every ``finally`` runs."""


class QuietRemoteController(RemoteController):
    """Mininet's RemoteController probes the port with telnet; we wait for readiness
    ourselves (controller_ready.json), so skip that probe."""

    def checkListening(self):
        return True


def _raise_terminated(signum, _frame):
    raise Terminated(f"signal {signum}")


class Fabric:
    """A running leaf–spine (or star) fabric with its controller.

    topo: a LeafSpineTopo/StarTopo. policy: routing policy name (controller registry).
    run_dir: where fabric.json, controller.log and the controller's CSVs go (a
    temporary directory is made if None). congestion_control: every host's TCP CC.
    ready_timeout: seconds allowed for switches, routes and reachability.
    capabilities: the result of a preflight the caller has just run (the runner's
    check_ready); without it the fabric runs its own.
    """

    def __init__(self, topo, policy: str = "single", run_dir: str | os.PathLike | None = None,
                 controller_port: int = DEFAULT_CONTROLLER_PORT,
                 congestion_control: str = "cubic", policy_args: list[str] | None = None,
                 ready_timeout: float = 60.0, check_reachability: bool = True,
                 capabilities: Capabilities | None = None):
        self.topo = topo
        self.policy = policy
        self.run_dir = Path(run_dir) if run_dir else None
        self.controller_port = controller_port
        self.congestion_control = congestion_control
        self.policy_args = list(policy_args or [])
        self.ready_timeout = ready_timeout
        self.check_reachability = check_reachability
        self.capabilities: Capabilities | None = capabilities
        self.net: Mininet | None = None
        self.controller: subprocess.Popen | None = None
        self.state: RunState | None = None
        self.lock = RunLock()
        self._old_handlers: dict = {}
        self._stopped = False
        self._saved_allowed_cc: str | None = None

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> Fabric:
        self._old_handlers = {s: signal.signal(s, _raise_terminated)
                              for s in (signal.SIGTERM,)}
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.capabilities is None:
            self.capabilities = run_preflight(
                controller_port=self.controller_port, need_netem=bool(self.topo.delay),
                congestion_control=self.congestion_control, lock=self.lock)
        self.lock.acquire(str(self.run_dir) if self.run_dir else None)
        # Holding the lock, any other recorded fabric belongs to a run that died without
        # tearing down (SIGKILL, power loss): remove its leftovers before they collide.
        removed, _live = clean()
        if removed:
            self.capabilities.notices.append(
                "removed leftovers of a crashed run: " + ", ".join(removed))
        if self.run_dir is None:
            import tempfile
            self.run_dir = Path(tempfile.mkdtemp(prefix="incastlab-fabric-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.state = RunState.create(str(self.run_dir))
        fmap = fabric_map(self.topo)
        # Record names before creating them: a crash in between still gets cleaned.
        self.state.add("bridges", self.topo.switches())
        self.state.add("interfaces", [e.iface for e in fmap.egresses()])
        fmap.save(self.run_dir / "fabric.json")
        self._start_controller()
        setLogLevel(os.environ.get("INCASTLAB_MININET_LOG", "warning"))
        # OpenFlow 1.5 beside 1.3: only 1.5 can set a select group's selection_method,
        # so the ecmp policy can make the hash explicit (see controller/ecmp.py).
        switch = partial(QueuedOVSSwitch, owner=self.state.id,
                         datapath=self.capabilities.datapath,
                         protocols="OpenFlow13,OpenFlow15", failMode="secure")
        controller = partial(QuietRemoteController, ip="127.0.0.1", port=self.controller_port)
        self.net = Mininet(topo=self.topo, switch=switch, link=QueuedLink,
                           controller=controller, autoSetMacs=False, build=False)
        try:
            self.net.build()
        finally:
            # node shells exist once build() created them, even if it failed halfway
            for node in self.net.hosts + self.net.switches:
                if getattr(node, "shell", None) is not None and node.pid:
                    self.state.add_process(node.pid, f"mininet shell {node.name}")
        self.net.start()
        self._configure_hosts()
        self._wait_ready(fmap)

    def stop(self) -> None:
        """Tear everything down; safe to call twice and from any state."""
        if self._stopped:
            return
        self._stopped = True
        # A second Ctrl-C or SIGTERM must not interrupt the teardown of the first.
        previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if self.net is not None:
                try:
                    self.net.stop()
                except Exception as exc:  # keep going: the state clean-up below finishes
                    print(f"incastlab: Mininet stop failed ({exc!r}); cleaning up by record",
                          file=sys.stderr)
            if self.controller is not None and self.controller.poll() is None:
                _end_group(self.controller)
            if self.state is not None:
                clean_state(self.state)
                self.state.remove()
        finally:
            if self._saved_allowed_cc is not None:
                ALLOWED_CC.write_text(self._saved_allowed_cc)
            self.lock.release()
            signal.signal(signal.SIGINT, previous_int)
            for sig, handler in self._old_handlers.items():
                signal.signal(sig, handler)

    # ----------------------------------------------------------------- helpers
    def _start_controller(self) -> None:
        argv = [sys.executable, "-m", "incastlab.controller", "--policy", self.policy,
                "--port", str(self.controller_port), "--fabric",
                str(self.run_dir / "fabric.json"), "--out", str(self.run_dir),
                *self.policy_args]
        (self.run_dir / "controller_ready.json").unlink(missing_ok=True)
        out = open(self.run_dir / "controller.out", "ab")
        self.controller = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        self.state.add_process(self.controller.pid, "controller")

    def _allow_congestion_control(self) -> None:
        """A namespace other than the root one may only pick an algorithm listed in
        the root's tcp_allowed_congestion_control (else EPERM). Add ours for the run;
        stop() puts the list back."""
        allowed = ALLOWED_CC.read_text().split()
        if self.congestion_control not in allowed:
            self._saved_allowed_cc = " ".join(allowed)
            ALLOWED_CC.write_text(" ".join(allowed + [self.congestion_control]))

    def _configure_hosts(self) -> None:
        self._allow_congestion_control()
        for host in self.net.hosts:
            out = host.cmd(f"sysctl -qw net.ipv4.tcp_congestion_control={self.congestion_control}"
                           " net.ipv6.conf.all.disable_ipv6=1"
                           " net.ipv6.conf.default.disable_ipv6=1; echo rc=$?")
            if "rc=0" not in out:
                raise FabricError(f"could not configure TCP on {host.name}: {out.strip()}")

    def controller_failed(self) -> str | None:
        if self.controller.poll() is None:
            return None
        tail = ""
        for name in ("controller.out", "controller.log"):
            path = self.run_dir / name
            if path.exists():
                tail += path.read_text(errors="replace")[-1500:]
        return f"the controller exited with status {self.controller.returncode}:\n{tail}"

    def _wait_ready(self, fmap: FabricMap) -> None:
        deadline = time.monotonic() + self.ready_timeout
        want = set(fmap.dpids)
        ready_file = self.run_dir / "controller_ready.json"
        step = "switches connecting to the controller"
        while True:
            failed = self.controller_failed()
            if failed:
                raise FabricError(failed)
            if step.startswith("switches"):
                if ready_file.exists():
                    try:
                        have = set(json.loads(ready_file.read_text())["switches"])
                    except (ValueError, KeyError):
                        have = set()
                    if want <= have:
                        step = "hosts reaching each other"
            if step.startswith("hosts"):
                missing = self.unreachable_pairs() if self.check_reachability else []
                if not missing:
                    return
                step = f"hosts reaching each other ({len(missing)} pairs fail, e.g. {missing[0]})"
            if time.monotonic() > deadline:
                raise FabricError(f"fabric not ready after {self.ready_timeout:g} s: waiting "
                                  f"for {step}; see {self.run_dir / 'controller.log'}")
            time.sleep(0.2)

    def unreachable_pairs(self) -> list[tuple[str, str]]:
        """Pairs (src, dst) for which one ping with a 1 s deadline fails."""
        failed = []
        for src in self.net.hosts:
            targets = " ".join(h.IP() for h in self.net.hosts if h is not src)
            out = src.cmd(f"for ip in {targets}; do ping -c1 -W1 -q $ip >/dev/null 2>&1 "
                          "|| echo FAIL $ip; done")
            for line in out.splitlines():
                if line.startswith("FAIL "):
                    failed.append((src.name, line.split()[1]))
        return failed

    def host(self, name: str):
        return self.net[name]

    def popen(self, host: str, argv: list[str], what: str, **kwargs) -> subprocess.Popen:
        """Start argv inside ``host``'s namespace in its own process group, recorded for
        clean-up. kwargs go to subprocess (stdout, stderr, env, cwd).

        Mininet starts it through ``mnexec -da PID``; ``-d`` already calls setsid(), so
        the child leads its own session and process group. (Asking subprocess for a new
        session as well makes mnexec fork and exit, and the Popen would track a corpse.)
        """
        proc = self.net[host].popen(argv, **kwargs)
        self.state.add_process(proc.pid, what)
        return proc


def _end_group(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue
