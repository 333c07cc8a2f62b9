"""Parameter-server training on loopback: real processes, real gloo, real digits data.

Each test starts one server and a few workers as separate processes (own process
groups, killed in `LocalJob.__exit__` whatever happens) and checks their JSON-lines logs.
Models are tiny and runs short so that the whole file takes about a minute on 2 cores.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.jobs.ps import ps_argv

SMALL = ["--model-size", "0.02", "--timeout", "30"]
JOB_TIMEOUT = 120  # seconds for a whole job, far above the ~10 s it takes


def run_ps(out: Path, workers: int, extra: list[str], shards: int = 1
           ) -> dict[int, list[dict]]:
    """Run a PS job to completion; return every rank's log records."""
    with LocalJob(out) as job:
        for rank, argv in enumerate(ps_argv(workers, out, free_port(), shards, SMALL + extra)):
            job.start(rank, argv)
        codes = job.wait(JOB_TIMEOUT)
        bad = {r: c for r, c in codes.items() if c != 0}
        assert not bad, f"exit codes {bad}; stderr: {[job.stderr(r) for r in bad]}"
    return {r: read_jsonl(out / f"{r}.jsonl") for r in range(shards + workers)}


def only(records: list[dict], kind: str) -> dict:
    found = events(records, kind)
    assert len(found) == 1, f"expected one {kind} event, got {len(found)}"
    return found[0]


def test_sync_lowers_loss_and_reaches_accuracy(tmp_path: Path) -> None:
    logs = run_ps(tmp_path, 3, ["--mode", "sync", "--iterations", "60", "--lr", "0.5"])
    server = logs[0]
    start = only(server, "start")
    assert start["mode"] == "sync" and start["gradient_bytes"] == 4 * start["param_count"]
    assert [u["version"] for u in events(server, "update")] == list(range(1, 61))
    assert all(u["from_ranks"] == [1, 2, 3] for u in events(server, "update"))
    for rank in (1, 2, 3):
        its = events(logs[rank], "iteration")
        assert [i["iteration"] for i in its] == list(range(60))
        assert [i["model_version"] for i in its] == list(range(60))
        first = sum(i["loss"] for i in its[:5]) / 5
        last = sum(i["loss"] for i in its[-5:]) / 5
        assert last < first - 0.5, (first, last)
        # bytes: the gradient plus a 2-float trailer out, parameters plus 5 floats back
        assert all(i["bytes_sent"] == start["gradient_bytes"] + 8 for i in its)
        assert all(i["bytes_recv"] == start["gradient_bytes"] + 20 for i in its)
    finals = [only(logs[r], "final") for r in range(4)]
    assert len({f["params_sha256"] for f in finals}) == 1  # workers hold the server's model
    assert finals[0]["applied"] == 180 and finals[0]["discarded"] == 0
    # Stated accuracy: 60 BSP steps of 3 x 32 samples reach >= 85 % on held-out digits
    # (about 90 % is typical; chance is 10 %).
    assert finals[0]["accuracy"] >= 0.85, finals[0]


def test_async_straggler_staleness_is_version_arithmetic(tmp_path: Path) -> None:
    logs = run_ps(tmp_path, 3, ["--mode", "async", "--iterations", "12", "--lr", "0.2",
                                "--slowdown", "3:6"])
    updates = events(logs[0], "update")
    assert [u["version"] for u in updates] == list(range(1, 37))
    worker_its = {r: {i["iteration"]: i for i in events(logs[r], "iteration")} for r in (1, 2, 3)}
    for u in updates:
        (rank,), (stale,), (it,) = u["from_ranks"], u["staleness"], u["iterations"]
        record = worker_its[rank][it]
        # staleness = server version before this update - version the gradient used
        assert stale == (u["version"] - 1) - record["model_version"]
        assert record["staleness"] == stale  # the worker was told the same number
        assert record["new_version"] == u["version"]
    straggler = [s for u in updates if u["from_ranks"] == [3] for s in u["staleness"]]
    assert max(straggler) > 0
    assert only(logs[0], "final")["applied"] == 36


def test_ssp_never_exceeds_staleness_bound(tmp_path: Path) -> None:
    bound = 1
    logs = run_ps(tmp_path, 3, ["--mode", "ssp", "--staleness", str(bound),
                                "--iterations", "10", "--lr", "0.2", "--slowdown", "3:8"])
    updates = events(logs[0], "update")
    gaps = [g for u in updates for g in u["gaps"] if g is not None]
    assert gaps and max(gaps) <= bound
    # The bound really held somebody back: a reply released by another worker's gradient.
    assert any(set(u["released"]) - set(u["from_ranks"]) for u in updates)
    # Independent check from the workers' clocks: iteration i of any worker started only
    # after every worker had pushed iteration i - bound - 1.
    its = {r: events(logs[r], "iteration") for r in (1, 2, 3)}
    for w in its:
        for rec in its[w]:
            i = rec["iteration"]
            if i - bound - 1 < 0:
                continue
            for u in its:
                assert rec["t_start"] > its[u][i - bound - 1]["t_push"], (w, i, u)


def test_backup_discards_exactly_the_stragglers_late_gradients(tmp_path: Path) -> None:
    logs = run_ps(tmp_path, 3, ["--mode", "backup", "--backup-workers", "1",
                                "--iterations", "12", "--slowdown", "3:40",
                                "--model-size", "0.1", "--batch-size", "64"])
    updates = events(logs[0], "update")
    assert [u["version"] for u in updates] == list(range(1, 13))
    assert all(u["from_ranks"] == [1, 2] for u in updates)
    final = only(logs[0], "final")
    straggler_its = events(logs[3], "iteration")
    assert 0 < len(straggler_its) < 12  # it ran slower and was stopped with the others
    assert not any(i["accepted"] for i in straggler_its)
    assert all(i["accepted"] for r in (1, 2) for i in events(logs[r], "iteration"))
    assert final["discarded_by_rank"] == {"1": 0, "2": 0, "3": len(straggler_its)}
    assert final["discarded"] == len(straggler_its) and final["applied"] == 24
    # every discard is listed once, by the first update after it arrived, or after the end
    listed = [r for u in updates for r in u["discarded"]]
    assert set(listed) <= {3} and len(listed) <= len(straggler_its)


def test_backup_with_two_shards_discards_at_each_shard(tmp_path: Path) -> None:
    """Ranks 0,1 servers; 2,3 fast workers; 4 the straggler. Each shard decides alone."""
    logs = run_ps(tmp_path, 3, ["--mode", "backup", "--backup-workers", "1",
                                "--iterations", "8", "--slowdown", "4:40",
                                "--model-size", "0.1", "--batch-size", "64"], shards=2)
    straggler_its = events(logs[4], "iteration")
    for server in (0, 1):
        updates = events(logs[server], "update")
        assert [u["version"] for u in updates] == list(range(1, 9))
        assert all(u["from_ranks"] == [2, 3] for u in updates)
        final = only(logs[server], "final")
        assert final["discarded_by_rank"] == {"2": 0, "3": 0, "4": len(straggler_its)}
    digests = {only(logs[r], "final")["params_sha256"] for r in (2, 3, 4)}
    assert len(digests) == 1  # everyone ends with both shards' final slices


def test_sharded_ps_equals_unsharded_bit_for_bit(tmp_path: Path) -> None:
    extra = ["--mode", "sync", "--iterations", "8", "--seed", "7"]
    one = run_ps(tmp_path / "one", 2, extra, shards=1)
    two = run_ps(tmp_path / "two", 2, extra, shards=2)
    digest = only(one[1], "final")["params_sha256"]
    assert only(one[2], "final")["params_sha256"] == digest
    assert only(two[2], "final")["params_sha256"] == digest
    assert only(two[3], "final")["params_sha256"] == digest
    lo0, hi0 = only(two[0], "start")["shard"]
    lo1, hi1 = only(two[1], "start")["shard"]
    assert lo0 == 0 and hi0 == lo1 and hi1 == only(one[0], "start")["param_count"]
    assert [i["loss"] for i in events(one[1], "iteration")] == \
        [i["loss"] for i in events(two[2], "iteration")]


def wait_for_iterations(path: Path, count: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        if path.exists() and len(events(read_jsonl(path), "iteration")) >= count:
            return
        time.sleep(0.05)
    pytest.fail(f"{path} never reached {count} iterations")


SIGNALS = {"kill": signal.SIGKILL, "hang": signal.SIGSTOP, "term": signal.SIGTERM}


@pytest.mark.parametrize("how", sorted(SIGNALS))
def test_dead_or_hung_worker_makes_others_fail_within_timeout(tmp_path: Path, how: str
                                                              ) -> None:
    timeout = 4.0
    argv = ps_argv(3, tmp_path, free_port(), 1,
                   ["--model-size", "0.02", "--iterations", "100000",
                    "--timeout", str(timeout)])
    with LocalJob(tmp_path) as job:
        for rank, a in enumerate(argv):
            job.start(rank, a)
        wait_for_iterations(tmp_path / "2.jsonl", 3, time.monotonic() + 60)
        victim = job.procs[2]
        t_fault = time.monotonic()
        os.killpg(victim.pid, SIGNALS[how])
        if how == "term":  # the victim itself leaves at once, logging why, even mid-wait
            assert victim.wait(5) == 128 + signal.SIGTERM
            assert job.stderr(2).strip() == \
                "incastlab.apps.ps: error: rank 2: terminated by signal SIGTERM"
            assert events(read_jsonl(tmp_path / "2.jsonl"), "error")[0]["message"] == \
                "terminated by signal SIGTERM"
        others = [0, 1, 3]
        for r in others:
            job.procs[r].wait(timeout + 10)  # raises TimeoutExpired on a hang
        elapsed = time.monotonic() - t_fault
        assert elapsed <= timeout + 5, elapsed
        for r in others:
            assert job.procs[r].returncode == 1, (r, job.stderr(r))
            lines = job.stderr(r).strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(
                f"incastlab.apps.ps: error: rank {r}: "), lines
            err = events(read_jsonl(tmp_path / f"{r}.jsonl"), "error")
            assert len(err) == 1 and err[0]["message"] in lines[0]
        if how == "hang":  # the others noticed the hang by the deadline, not by a reset
            assert elapsed >= timeout - 0.5


def test_sigterm_acts_while_blocked_in_a_gloo_wait(tmp_path: Path) -> None:
    """With the server frozen, a worker sits in a 30 s receive; SIGTERM still ends it now."""
    argv = ps_argv(2, tmp_path, free_port(), 1,
                   ["--model-size", "0.02", "--iterations", "100000", "--timeout", "30"])
    with LocalJob(tmp_path) as job:
        for rank, a in enumerate(argv):
            job.start(rank, a)
        wait_for_iterations(tmp_path / "1.jsonl", 3, time.monotonic() + 60)
        os.killpg(job.procs[0].pid, signal.SIGSTOP)
        time.sleep(0.5)  # let worker 1 reach its blocking receive
        t0 = time.monotonic()
        os.killpg(job.procs[1].pid, signal.SIGTERM)
        assert job.procs[1].wait(10) == 128 + signal.SIGTERM
        assert time.monotonic() - t0 < 3
        assert "terminated by signal SIGTERM" in job.stderr(1)


def test_async_rule_evaluations_and_emulated_compute(tmp_path: Path) -> None:
    """Issue 19: the default rule of async is lr / workers per gradient; the server
    evaluates every --eval-every gradients and at the end; --compute-ms pads every
    compute and the straggler's factor multiplies the padded time."""
    floor, factor = 0.03, 4.0
    logs = run_ps(tmp_path, 3, ["--mode", "async", "--iterations", "4", "--lr", "0.3",
                                "--eval-every", "3", "--compute-ms", str(floor * 1000),
                                "--slowdown", f"3:{factor:g}"])
    start = only(logs[0], "start")
    assert (start["lr_rule"], start["lr_rule_default"], start["workers"]) == \
        ("per_worker", True, 3)
    rates = [x for u in events(logs[0], "update") for x in u["rates"]]
    assert len(rates) == 12 and all(r == pytest.approx(0.1, rel=1e-12) for r in rates)
    evals = events(logs[0], "eval")
    assert [e["applied"] for e in evals] == [0, 3, 6, 9, 12]
    final = only(logs[0], "final")  # the same parameters, evaluated once more
    assert (evals[-1]["accuracy"], evals[-1]["loss"]) == (final["accuracy"], final["loss"])
    assert evals[-1]["version"] == 12
    for rank in (1, 2):
        for it in events(logs[rank], "iteration"):
            assert it["compute_s"] >= floor and it["slowdown_s"] == 0
            assert 0 <= it["emulated_s"] <= floor  # the real pass took the rest
    for it in events(logs[3], "iteration"):  # the straggler: factor x the padded time
        if it["emulated_s"] > 0:  # padded: exactly the floor (unless the real pass was
            # slower than the floor on a busy machine; then factor x the real time)
            assert it["slowdown_s"] == pytest.approx((factor - 1) * floor, rel=1e-6)
        assert it["slowdown_s"] >= (factor - 1) * floor * (1 - 1e-6)
        assert it["compute_s"] >= factor * floor


def test_staleness_rule_is_the_mean_where_nothing_is_stale(tmp_path: Path) -> None:
    extra = ["--mode", "sync", "--iterations", "4", "--seed", "3"]
    mean = run_ps(tmp_path / "mean", 2, extra)
    stale = run_ps(tmp_path / "stale", 2, extra + ["--lr-rule", "staleness"])
    assert only(stale[0], "start")["lr_rule_default"] is False
    assert only(mean[0], "final")["params_sha256"] == only(stale[0], "final")["params_sha256"]
