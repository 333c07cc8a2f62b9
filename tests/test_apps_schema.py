"""Every app's log follows docs/run-directory.md (the fields the analysis relies on)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.jobs.ps import ps_argv
from incastlab.jobs.ring import ring_argv

REQUIRED = {  # docs/run-directory.md, `workers/<rank>.jsonl`
    "start": {"role", "rank", "world_size", "mode", "param_count", "gradient_bytes", "host",
              "iface", "t", "options"},
    "iteration": {"iteration", "t_start", "t_end", "compute_s", "comm_s", "wait_s",
                  "bytes_sent", "bytes_recv", "model_version", "staleness", "loss"},
    "update": {"version", "t", "from_ranks", "staleness", "discarded"},
    "round": {"round", "t_start", "t_end", "senders", "block_bytes", "bytes",
              "goodput_mbps"},
    "final": {"t", "accuracy", "loss", "iterations"},
    "ready": {"t", "init_s"},
    "served": {"round", "t_request", "t_sent", "bytes"},
    "connected": {"t", "peer"},
    "eval": {"version", "applied", "t", "accuracy", "loss"},   # PS: held-out evaluation
}
PS_ITERATION = {"push_s", "pull_s", "t_push", "slowdown_s", "accepted", "shard_versions"}
RING_ITERATION = {"allreduce_s", "slowdown_s"}


def run(out: Path, argvs: list[list[str]]) -> list[list[dict]]:
    with LocalJob(out) as job:
        for rank, argv in enumerate(argvs):
            job.start(rank, argv)
        codes = job.wait(120)
        assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    return [read_jsonl(out / f"{r}.jsonl") for r in range(len(argvs))]


def check(records: list[dict], extra_iteration: set[str] = frozenset()) -> None:
    assert records[0]["event"] == "start" and records[-1]["event"] == "final"
    for rec in records:
        need = REQUIRED[rec["event"]] | (extra_iteration if rec["event"] == "iteration"
                                         else set())
        assert need <= rec.keys(), (rec["event"], need - rec.keys())
        for key, value in rec.items():
            if isinstance(value, float):
                assert math.isfinite(value), (rec["event"], key)
    its = events(records, "iteration")
    for a, b in zip(its, its[1:], strict=False):
        assert a["t_end"] <= b["t_start"] and a["iteration"] + 1 == b["iteration"]
    for it in its:
        assert it["t_start"] <= it["t_end"] and it["compute_s"] >= it["slowdown_s"] >= 0


def test_ps_logs_follow_the_schema_and_show_the_straggler(tmp_path: Path) -> None:
    logs = run(tmp_path, ps_argv(3, tmp_path, free_port(), 1,
                                 ["--model-size", "0.02", "--iterations", "15",
                                  "--slowdown", "2:6", "--timeout", "30"]))
    assert events(logs[0], "start")[0]["role"] == "server"
    check(logs[0])
    assert {"applied", "discarded", "params_sha256"} <= events(logs[0], "final")[0].keys()
    for rank in (1, 2, 3):
        check(logs[rank], PS_ITERATION)
        for it in events(logs[rank], "iteration"):
            assert abs(it["comm_s"] - (it["push_s"] + it["pull_s"])) < 1e-6
    # BSP waits for the straggler: the fast workers' barrier wait is about its extra time
    slow = [i["slowdown_s"] for i in events(logs[2], "iteration")][1:]
    assert min(slow) > 0
    for rank in (1, 3):
        waits = [i["wait_s"] for i in events(logs[rank], "iteration")][1:]
        assert sum(waits) > 0.5 * sum(slow), (rank, sum(waits), sum(slow))


def test_ring_logs_follow_the_schema(tmp_path: Path) -> None:
    for impl in ("ring", "gloo"):
        out = tmp_path / impl
        logs = run(out, ring_argv(2, out, free_port(),
                                  ["--model-size", "0.02", "--iterations", "5",
                                   "--impl", impl, "--timeout", "30"]))
        for records in logs:
            check(records, RING_ITERATION)
            assert events(records, "start")[0]["mode"] == impl
            sent = {i["bytes_sent"] for i in events(records, "iteration")}
            assert (sent == {None}) if impl == "gloo" else (None not in sent)


def test_incast_logs_follow_the_schema(tmp_path: Path) -> None:
    port = free_port()
    app = [sys.executable, "-m", "incastlab.apps.incast"]
    logs = run(tmp_path, [
        app + ["--role", "client", "--rank", "0", "--out", str(tmp_path), "--servers",
               f"127.0.0.1:{port}", "--rounds", "3", "--block-size", "1000"],
        app + ["--role", "server", "--rank", "1", "--out", str(tmp_path), "--listen",
               f"127.0.0.1:{port}"],
    ])
    for records in logs:
        check(records)
    assert len(events(logs[0], "round")) == 3 and len(events(logs[1], "served")) == 3
