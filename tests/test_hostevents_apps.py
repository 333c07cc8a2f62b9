"""The PS app without a worker (issue 15 item 3), on loopback: real processes, real gloo.

A worker is SIGKILLed mid-run (as `worker_kill` does). Async and SSP go on without it
(SSP releases the workers it held back for the lost one), backup goes on while N - B
workers are left and fails with the reason below that. (Sync fails with the reason:
tests/test_apps_ps.py and tests/test_hostevents_root.py.) Each job is a
few seconds; the timeout is far above that, so a hang fails the test rather than passes.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.jobs.ps import ps_argv

TIMEOUT = 20.0
COMMON = ["--model-size", "0.02", "--timeout", f"{TIMEOUT:g}", "--compute-ms", "20"]
# A victim is killed once it logged 3 iterations; the kill must come before the job ends,
# i.e. within the (ITERATIONS - 3) iterations of >= 20 ms (--compute-ms) the others still
# do: 740 ms for the test's 50 ms poll and a busy machine's scheduling (15 left 240 ms)
ITERATIONS = 40


def wait_for_iterations(out: Path, rank: int, n: int, deadline: float) -> None:
    """Until `rank` logged `n` iterations (fails the test past `deadline`, monotonic)."""
    log = out / f"{rank}.jsonl"
    while not (log.exists() and len(events(read_jsonl(log), "iteration")) >= n):
        assert time.monotonic() < deadline, f"rank {rank} never iterated"
        time.sleep(0.05)


def run_with_kills(out: Path, mode_args: list[str], victims: list[int],
                   iterations: int = ITERATIONS
                   ) -> tuple[dict, dict]:
    """A PS (rank 0) and 3 workers (ranks 1-3); each victim killed once it logged 3
    iterations. Returns (exit codes, stderr) of every rank."""
    argv = ps_argv(3, out, free_port(), 1, COMMON + ["--iterations", str(iterations)]
                   + mode_args)
    with LocalJob(out) as job:
        for rank, a in enumerate(argv):
            job.start(rank, a)
        deadline = time.monotonic() + 60
        for victim in victims:
            wait_for_iterations(out, victim, 3, deadline)
            os.killpg(job.procs[victim].pid, signal.SIGKILL)
        codes = job.wait(TIMEOUT + 30)
        return codes, {r: job.stderr(r) for r in codes}


def server_log(out: Path) -> list[dict]:
    return read_jsonl(out / "0.jsonl")


@pytest.mark.parametrize("mode_args", [["--mode", "async"],
                                       # the victim is a straggler: the others are held
                                       # back for it when it dies, and must be released
                                       ["--mode", "ssp", "--staleness", "1",
                                        "--slowdown", "2:4"],
                                       ["--mode", "backup", "--backup-workers", "1"]],
                         ids=["async", "ssp", "backup"])
def test_the_others_go_on_without_a_killed_worker(tmp_path, mode_args):
    codes, err = run_with_kills(tmp_path, mode_args, [2])
    assert codes == {0: 0, 1: 0, 2: -signal.SIGKILL, 3: 0}, err
    log = server_log(tmp_path)
    (lost,) = events(log, "lost")
    assert (lost["rank"], lost["workers_left"]) == (2, 2)
    assert "receive gradient from rank 2" in lost["message"]
    (final,) = events(log, "final")
    assert list(final["lost"]) == ["2"]
    survivors = [len(events(read_jsonl(tmp_path / f"{r}.jsonl"), "iteration")) for r in (1, 3)]
    if mode_args[1] == "backup":
        assert final["iterations"] == ITERATIONS  # every update done by the two left
    else:
        assert survivors == [ITERATIONS] * 2  # async/SSP: each worker does all its own


def test_backup_below_its_quorum_fails_with_the_reason(tmp_path):
    codes, err = run_with_kills(tmp_path, ["--mode", "backup", "--backup-workers", "1"],
                                [2, 3], iterations=100000)
    assert codes[0] == 1, err[0]
    assert "worker rank 3 lost; 1 workers left, fewer than the 2 a backup step needs " \
           "(workers - backup workers)" in err[0] or \
           "worker rank 2 lost; 1 workers left" in err[0], err[0]


def test_backup_gives_up_a_silent_worker_at_its_own_deadline(tmp_path):
    # A worker that goes silent with its connections open (SIGSTOP: its kernel still
    # answers, so the server's TCP keepalive, which gives up a worker whose packets are
    # lost, test_ps_keepalive_root.py, does not) is noticed only by the deadline. gloo's
    # own timeout would close every connection of the server (ending backup too), so the
    # server applies --timeout itself: the worker is lost once its receive is that old,
    # and the others go on. The job outlasts the deadline (ITER x >= 20 ms >> HUNG_TIMEOUT)
    # so that nobody else waits on the server meanwhile.
    hung_timeout, iterations = 5.0, 400
    argv = ps_argv(3, tmp_path, free_port(), 1,
                   ["--model-size", "0.02", "--timeout", f"{hung_timeout:g}",
                    "--compute-ms", "20", "--iterations", str(iterations),
                    "--mode", "backup", "--backup-workers", "1"])
    with LocalJob(tmp_path) as job:
        for rank, a in enumerate(argv):
            job.start(rank, a)
        wait_for_iterations(tmp_path, 2, 3, time.monotonic() + 60)
        os.killpg(job.procs[2].pid, signal.SIGSTOP)
        t_stop = time.time()
        codes = {r: job.procs[r].wait(TIMEOUT + 60) for r in (0, 1, 3)}
        err = {r: job.stderr(r) for r in codes}
        os.killpg(job.procs[2].pid, signal.SIGKILL)
    assert codes == {0: 0, 1: 0, 3: 0}, err
    log = server_log(tmp_path)
    (lost,) = events(log, "lost")
    assert lost["rank"] == 2 and "silent past the deadline" in lost["message"], lost
    # given up no earlier than the deadline after its last receive was posted (before the
    # stop) and not much later than the deadline after the stop (a 10 ms poll)
    assert lost["t"] - t_stop <= hung_timeout + 2.0, (lost["t"] - t_stop)
    (final,) = events(log, "final")
    assert final["iterations"] == iterations and list(final["lost"]) == ["2"]
