"""A backup-mode PS gives up a worker that vanished without a word (its packets dropped:
no reset or FIN reaches the server) within its TCP keepalive's bound, not after --timeout.

On the fabric this is a killed worker whose reset the datapath lost; here the worker runs
in a network namespace of its own, joined to the others' by a veth pair, and its end of
the pair is taken down. Nothing else is needed (no Open vSwitch, no Mininet, no run
lock), but namespaces need root. A stopped (SIGSTOP) worker would not do: its kernel
still answers, which is why a hung worker stays --timeout's
(test_apps_ps.py::test_dead_or_hung_worker_makes_others_fail_within_timeout).
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from incastlab.apps.commands import Endpoint
from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.apps.ps_common import KEEPALIVE_BOUND_S
from incastlab.jobs.ps import ps_commands

pytestmark = pytest.mark.root

TIMEOUT = 30.0  # --timeout: what the server would wait without the keepalive
# the server's loop and helper threads on a loaded 2-core machine, after the kernel gave
# the connection up (the probes' timers are the kernel's, to the jiffy)
SCHEDULING_S = 2.0


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def namespaces():
    """Two namespaces of this test's own, `a` (server, two workers) and `b` (the worker
    that vanishes), a veth pair between them on a documentation subnet."""
    a, b = f"ilka-{os.getpid()}-a", f"ilka-{os.getpid()}-b"
    try:
        for ns in (a, b):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", a, "link", "add", "kaA", "type", "veth", "peer", "name", "kaB", "netns", b)
        for ns, dev, addr in ((a, "kaA", "192.0.2.1/24"), (b, "kaB", "192.0.2.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def _wait_for(path: Path, kind: str, count: int, until: float) -> list[dict]:
    while time.time() < until:
        found = events(read_jsonl(path), kind) if path.exists() else []
        if len(found) >= count:
            return found
        time.sleep(0.05)
    return []


def test_backup_gives_up_a_vanished_worker_within_the_keepalive_bound(
        tmp_path: Path, namespaces: tuple[str, str]) -> None:
    a, b = namespaces
    hosts = [Endpoint("192.0.2.1", "kaA")] * 3 + [Endpoint("192.0.2.2", "kaB")]
    # rank 3 a straggler (40 x 50 ms a step), so that after it logs an iteration the
    # server has nothing unacknowledged to it for about 2 s: keepalive's case
    extra = ["--model-size", "0.02", "--mode", "backup", "--backup-workers", "1",
             "--iterations", "150", "--compute-ms", "50", "--slowdown", "3:40",
             "--timeout", f"{TIMEOUT:g}"]
    argv = ps_commands(hosts, str(tmp_path), free_port(), {"shards": 1})
    with LocalJob(tmp_path) as job:
        for rank, cmd in enumerate(argv):
            job.start(rank, ["ip", "netns", "exec", a if rank < 3 else b, *cmd, *extra])
        assert _wait_for(tmp_path / "3.jsonl", "iteration", 1, time.time() + 90), \
            [job.stderr(r) for r in range(4)]
        time.sleep(0.2)  # its ACK of the parameters (delayed ACK: 40 ms at most) is out
        _ip("-n", b, "link", "set", "kaB", "down")  # from now on nothing of it arrives
        t_fault = time.time()
        lost = _wait_for(tmp_path / "0.jsonl", "lost", 1, t_fault + TIMEOUT + 5)
        assert lost, "the server never gave the vanished worker up"
        elapsed = lost[0]["t"] - t_fault
        assert elapsed <= KEEPALIVE_BOUND_S + SCHEDULING_S, elapsed
        assert lost[0]["rank"] == 3 and lost[0]["workers_left"] == 2
        job.kill(3)  # it waits on its own --timeout otherwise
        codes = job.wait(120)
        assert {r: codes[r] for r in range(3)} == {0: 0, 1: 0, 2: 0}, \
            [job.stderr(r) for r in range(3)]
    server = read_jsonl(tmp_path / "0.jsonl")
    ready = events(server, "ready")[0]
    assert ready["keepalive"]["sockets"] >= 3  # one per worker at least
    final = events(server, "final")[0]
    assert list(final["lost"]) == ["3"] and final["lost"]["3"] == lost[0]["message"]
    assert final["iterations"] == 150  # backup went on with the two workers left
