"""The script observer on loopback: real torchrun, real gloo, unmodified scripts.

Each test starts two torchrun nodes on 127.0.0.1 with the script job's own command
lines (jobs/script_launch.py), so the bootstrap, the environment and the observer are the
ones a run on the fabric gets; the scripts below know nothing of the observer."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from incastlab.apps import script_steps
from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.jobs.script_launch import loopback_torchrun

WORLD = 2

COLLECTIVES = r'''
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
dist.all_reduce(torch.ones(1000))                                   # 4000 B
dist.broadcast(torch.ones(250, dtype=torch.float64), src=1)         # 2000 B
dist.all_gather([torch.zeros(10) for _ in range(n)], torch.ones(10))    # n x 40 B
dist.all_gather_into_tensor(torch.zeros(10 * n), torch.ones(10))    # n x 40 B
dist.reduce_scatter(torch.zeros(7), [torch.ones(7) for _ in range(n)])  # n x 28 B
dist.barrier()
if r == 0:
    dist.send(torch.ones(300), dst=1)                               # 1200 B
    time.sleep(0.6)                                                 # the irecv waits
    dist.isend(torch.ones(50), dst=1).wait()                        # 200 B
else:
    dist.recv(torch.zeros(300), src=0)
    w = dist.irecv(torch.zeros(50), src=0)
    t = time.time(); open("IRECV_RETURNED", "w").write(repr(t)); w.wait()
w = dist.all_reduce(torch.ones(5000), async_op=True)                # 20000 B
w.wait()
w = dist.all_reduce(torch.ones(10), async_op=True)                  # 40 B, never waited
from incastlab.apps import script_observer                         # (the test peeks)
deadline = time.time() + 30
while script_observer._OBSERVER.pending and time.time() < deadline:
    time.sleep(0.01)
open(f"PENDING{r}", "w").write(str(len(script_observer._OBSERVER.pending)))
dist.destroy_process_group()
'''

DDP = r'''
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)),
            bucket_cap_mb=0.5)
side = nn.Linear(3, 1)                        # a second optimizer: not an iteration
opt, opt2 = torch.optim.SGD(model.parameters(), lr=0.01), torch.optim.SGD(side.parameters())
open(f"PARAMS{dist.get_rank()}", "w").write(str(sum(p.numel() for p in model.parameters())))
for step in range(STEPS):
    opt.zero_grad()
    model(torch.randn(16, 256)).pow(2).mean().backward()
    opt.step()
    opt2.step()
dist.destroy_process_group()
'''


def run(tmp_path: Path, script: str, args=(), timeout: float = 240, until=None, **kw):
    """Run `script` on WORLD torchrun nodes; wait for them all (or for node `until`,
    then kill the rest); return exit codes, the observer's logs and the LocalJob."""
    path = tmp_path / "script.py"
    path.write_text(script)
    out = tmp_path / "workers"
    with LocalJob(tmp_path / "procs") as job:
        for i, argv in enumerate(loopback_torchrun(WORLD, out, free_port(), str(path),
                                                   list(args), **kw)):
            job.start(i, argv)
        if until is not None:
            job.procs[until].wait(timeout)
        codes = job.wait(0 if until is not None else timeout)
    logs = {r: read_jsonl(out / f"{r}.jsonl") for r in range(WORLD)
            if (out / f"{r}.jsonl").exists()}
    return codes, logs, job


def test_every_collective_kind_is_logged_with_its_bytes_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    codes, logs, job = run(tmp_path, COLLECTIVES)
    assert codes == {0: 0, 1: 0}, [job.stderr(i) for i in codes]
    n = WORLD
    expect = [("all_reduce", "all_reduce", 4000), ("broadcast", "broadcast", 2000),
              ("all_gather", "all_gather", n * 40),
              ("all_gather", "all_gather_into_tensor", n * 40),
              ("reduce_scatter", "reduce_scatter", n * 28), ("barrier", "barrier", 0)]
    for rank, log in logs.items():
        start = events(log, "start")[0]
        assert (start["role"], start["mode"], start["rank"], start["world_size"],
                start["iface"]) == ("script", "script", rank, n, "lo")
        recs = sorted(events(log, "collective"), key=lambda e: e["seq"])
        p2p = [("send", "send", 1200), ("send", "isend", 200)] if rank == 0 else \
            [("recv", "recv", 1200), ("recv", "irecv", 200)]
        tail = [("all_reduce", "all_reduce", 20000), ("all_reduce", "all_reduce", 40)]
        assert [(e["op"], e["call"], e["bytes"]) for e in recs] == expect + p2p + tail
        assert [e["seq"] for e in recs] == list(range(len(recs)))
        assert all(e["group_size"] == (2 if e["op"] in ("send", "recv") else n) for e in recs)
        starts = [e["t_start"] for e in recs]
        assert starts == sorted(starts)  # called in order, on one thread
        assert all(e["t_end"] >= e["t_start"] for e in recs)
        assert [e["async_op"] for e in recs][-4:] == [False, True, True, True]
        # a completed Work is released by the observer, not kept until the exit (its
        # future's callback holding it kept the process group alive past destroy)
        assert (tmp_path / f"PENDING{rank}").read_text() == "0"
        assert events(log, "end")[0]["collectives"] == len(recs)
        assert events(log, "end")[0]["steps"] == 0 and not events(log, "iteration")
    # the irecv returned at once but completed only when the sender sent, 0.6 s later
    irecv = [e for e in events(logs[1], "collective") if e["call"] == "irecv"][0]
    returned = float((tmp_path / "IRECV_RETURNED").read_text())
    assert irecv["t_start"] <= returned < irecv["t_start"] + 0.5
    assert irecv["t_end"] - irecv["t_start"] >= 0.5
    assert [e["peer"] for e in events(logs[1], "collective") if e["op"] == "recv"] == [0, 0]


def test_ddp_buckets_and_optimizer_steps(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = 4
    codes, logs, job = run(tmp_path, DDP.replace("STEPS", str(steps)))
    assert codes == {0: 0, 1: 0}, [job.stderr(i) for i in codes]
    params = int((tmp_path / "PARAMS0").read_text())
    for log in logs.values():
        its = events(log, "iteration")
        assert [e["iteration"] for e in its] == list(range(steps))  # opt2 does not count
        assert events(log, "end")[0]["steps"] == steps
        buckets = [e for e in events(log, "collective") if e["call"] == "ddp_bucket"]
        for k in range(steps):
            mine = [e for e in buckets if e["step"] == k]
            assert sum(e["bytes"] for e in mine) == 4 * params  # float32 gradients
            assert all(e["op"] == "all_reduce" and e["group_size"] == WORLD for e in mine)
            it = its[k]
            # each bucket's all-reduce completed inside its step, before the step ended
            assert all(it["t_start"] <= e["t_start"] <= e["t_end"] <= it["t_end"]
                       for e in mine)
            assert it["buckets"] == len(mine) and it["bytes"] == 4 * params
            assert it["compute_s"] + it["exposed_comm_s"] == pytest.approx(
                it["t_end"] - it["t_start"])
        # 1.05 M parameters in 0.5 MB buckets: several after DDP's first iteration
        assert max(len([e for e in buckets if e["step"] == k]) for k in range(steps)) > 1


SCRIPT_HOOK_AND_CRASH = r'''
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
dist.init_process_group("nccl")        # mapped to gloo (map_nccl)
model = DDP(nn.Linear(64, 64))
calls = []
def my_hook(state, bucket):
    calls.append(bucket.index())
    return default_hooks.allreduce_hook(state, bucket)
model.register_comm_hook(None, my_hook)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad(); model(torch.randn(4, 64)).sum().backward(); opt.step()
assert len(calls) == 2, calls
def deep():
    raise ValueError("boom in rank %d" % dist.get_rank())
if dist.get_rank() == 1:
    deep()
'''


def test_a_scripts_own_hook_is_kept_nccl_maps_and_a_crash_is_logged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # node 0's torchrun then waits in its exit barrier for node 1 (torch's 300 s; on the
    # fabric the runner fails the run at node 1's exit and stops it): not waited for here
    codes, logs, job = run(tmp_path, SCRIPT_HOOK_AND_CRASH, until=1, map_nccl=True)
    assert codes[1] not in (0, None), [job.stderr(i) for i in codes]
    assert events(logs[0], "end") and not events(logs[0], "error")
    for log in logs.values():
        buckets = [e for e in events(log, "collective") if e["call"] == "ddp_bucket"]
        assert [e["bytes"] for e in buckets] == [4 * (64 * 64 + 64)] * 2
        # the hook's inner all_reduce is the bucket's, not logged twice
        assert not [e for e in events(log, "collective") if e["call"] == "all_reduce"]
        assert "mapped to 'gloo'" in events(log, "notice")[0]["message"]
    err = events(logs[1], "error")[0]
    assert err["message"].startswith("ValueError: boom in rank 1 (at File ")
    assert "in deep" in err["message"]
    assert err["traceback_tail"][-1] == "ValueError: boom in rank 1"
    assert "script: error: rank 1: ValueError: boom in rank 1" in job.stderr(1)


def test_nccl_without_the_mapping_stops_at_once_with_the_field_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t0 = time.monotonic()
    codes, logs, job = run(tmp_path, 'import torch.distributed as d\n'
                                     'd.init_process_group(backend="nccl")\n', timeout=120)
    assert all(c not in (0, None) for c in codes.values()), codes
    for i in codes:
        assert "set workload.map_nccl_to_gloo = true" in job.stderr(i)
    assert time.monotonic() - t0 < 120  # ended by itself, not by the wait's timeout


def test_observe_off_leaves_no_log_and_the_script_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    codes, logs, job = run(tmp_path, DDP.replace("STEPS", "1"), observe=False)
    assert codes == {0: 0, 1: 0}, [job.stderr(i) for i in codes]
    assert logs == {}


def test_the_collectives_example_is_observed_step_by_step(tmp_path, monkeypatch):
    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    codes, logs, job = run(tmp_path, (root / "examples" / "collectives.py").read_text(),
                           ["--steps", "3", "--width", "16"])
    assert codes == {0: 0, 1: 0}, [job.stderr(i) for i in codes]
    sizes = [4 * 16 * 32, 4 * 16, 4 * 16, 4 * 1]  # the two Linear layers' tensors
    for log in logs.values():
        recs = sorted(events(log, "collective"), key=lambda e: e["seq"])
        assert [(e["op"], e["bytes"], e["step"]) for e in recs] == \
            [("broadcast", b, 0) for b in sizes] \
            + [("all_reduce", b, k) for k in range(3) for b in sizes] + [("barrier", 0, 3)]
        assert [e["bytes"] for e in events(log, "iteration")] == \
            [2 * sum(sizes), sum(sizes), sum(sizes)]


def test_iteration_parts_by_hand():
    # step 10..20 s: a blocking call 11..12, an async op 12..15 waited on 14..15, DDP
    # buckets ready at 16 and 17, done at 17.5 and 18.5: the tail is 17..18.5
    ev = script_steps.iteration_event(
        3, 10.0, 20.0, comm=[(11, 12), (12, 15), (16, 17.5), (17, 18.5)],
        blocking=[(11, 12), (14, 15)], buckets=[(16, 17.5), (17, 18.5)], nbytes=9, count=4)
    assert ev["comm_s"] == pytest.approx(1 + 3 + 2.5)          # 11..15 and 16..18.5
    assert ev["exposed_comm_s"] == pytest.approx(1 + 1 + 1.5)
    assert ev["compute_s"] == pytest.approx(10 - 3.5)
    assert ev["comm_total_s"] == pytest.approx(1.5 + 1.5)
    assert (ev["iteration"], ev["buckets"], ev["bytes"], ev["collectives"]) == (3, 2, 9, 4)
    assert script_steps.union_s([(0, 5), (1, 2), (4, 9)], 2, 8) == pytest.approx(6)
    assert script_steps.ddp_tail([(1, 2)]) == (1, 2) and script_steps.ddp_tail([]) is None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
