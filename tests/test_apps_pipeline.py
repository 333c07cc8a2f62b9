"""Pipeline parallelism: partitioning, the schedules' order, deadlock freedom and the
bubble (pure Python over the full S = 2..8, M = 1..16 matrix); every schedule's messages
over real gloo on loopback for the whole matrix (no deadlock, each message the one its
receiver expects); then the real app on loopback (a few small cases): the pipelined
model reaches the unpartitioned model's loss with the same seed and batch, and each
stage ran the documented order."""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from incastlab.apps import pipeline as pp
from incastlab.apps.commands import Endpoint
from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.apps.model import Digits, mlp_stack, partition, stage_module
from incastlab.jobs.pipeline import pipeline_commands

MATRIX = list(itertools.product(range(2, 9), range(1, 17)))  # S = 2..8, M = 1..16


# ----------------------------------------------------------------------------- partition

@pytest.mark.parametrize("layers", range(2, 17))
def test_partition_covers_every_layer_exactly_once(layers):
    for stages in range(1, layers + 1):
        parts = partition(layers, stages)
        flat = [i for p in parts for i in p]
        assert flat == list(range(layers))  # each once, in order, contiguous
        sizes = [len(p) for p in parts]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)  # the first stages take the extra


def test_partition_refuses_more_stages_than_layers():
    with pytest.raises(ValueError, match="stages"):
        partition(3, 4)
    with pytest.raises(ValueError, match="stages"):
        partition(3, 0)


@pytest.mark.parametrize("layers,stages", [(4, 2), (5, 3), (8, 8), (4, 1)])
def test_stage_modules_are_the_model_cut_in_order(layers, stages):
    model = mlp_stack(0.02, layers, seed=3)
    mods = [stage_module(model, r) for r in partition(layers, stages)]
    # the stages' modules, concatenated, are the model's modules: same objects, in order
    assert [id(m) for s in mods for m in s] == [id(m) for m in model]
    # so running them one after the other is running the model
    x = torch.randn(5, 64)
    y = x
    for s in mods:
        y = s(y)
    assert torch.equal(y, model(x))
    assert sum(isinstance(m, nn.Linear) for m in mods[-1]) == len(partition(layers,
                                                                            stages)[-1])


# ----------------------------------------------------------------------------- schedules

def test_gpipe_order_by_hand():
    assert pp.schedule("gpipe", 3, 3, 1) == [("F", 0), ("F", 1), ("F", 2),
                                              ("B", 0), ("B", 1), ("B", 2)]


def test_1f1b_order_by_hand():
    # S = 4, M = 6: stage 0 warms up with 3 forwards, alternates, cools down with 3 B
    f, b = (lambda i: ("F", i)), (lambda i: ("B", i))
    assert pp.schedule("1f1b", 4, 6, 0) == [f(0), f(1), f(2), f(3), b(0), f(4), b(1),
                                             f(5), b(2), b(3), b(4), b(5)]
    # the last stage has no warm-up: F, B, F, B, ...
    assert pp.schedule("1f1b", 4, 3, 3) == [f(0), b(0), f(1), b(1), f(2), b(2)]
    # fewer micro-batches than the warm-up: all forwards, then all backwards
    assert pp.schedule("1f1b", 4, 2, 0) == [f(0), f(1), b(0), b(1)]


def test_messages_of_one_stage_by_hand():
    ops = list(pp.stage_ops("gpipe", 3, 2, 1))
    assert [(op, before, after) for op, before, after in ops] == [
        (("F", 0), [("recv", "act", 0, 0)], [("send", "act", 2, 0)]),
        (("F", 1), [("recv", "act", 0, 1)], [("send", "act", 2, 1)]),
        (("B", 0), [("recv", "grad", 2, 0)], [("send", "grad", 0, 0)]),
        (("B", 1), [("recv", "grad", 2, 1)], [("send", "grad", 0, 1)])]
    first = list(pp.stage_ops("1f1b", 3, 2, 0))
    assert all(not before or before[0].payload == "grad" for _, before, _ in first)
    assert all(not after or after[0].payload == "act" for _, _, after in first)


@pytest.mark.parametrize("kind", pp.SCHEDULES)
def test_every_schedule_is_complete_ordered_and_matched(kind):
    for stages, m in MATRIX:
        plans = {s: list(pp.stage_ops(kind, stages, m, s)) for s in range(stages)}
        for s, plan in plans.items():
            ops = [op for op, _, _ in plan]
            # every micro-batch's F and B once, F before its B
            assert sorted(ops) == sorted([("F", i) for i in range(m)]
                                         + [("B", i) for i in range(m)])
            assert all(ops.index(("F", i)) < ops.index(("B", i)) for i in range(m))
            # forwards in micro-batch order, backwards in micro-batch order
            assert [o.mb for o in ops if o.kind == "F"] == list(range(m))
            assert [o.mb for o in ops if o.kind == "B"] == list(range(m))
            peak = pp.max_in_flight(ops)
            assert peak == (m if kind == "gpipe" else min(stages - s, m)), (stages, m, s)
        # every send has its receive on the peer, in the same order (FIFO per direction)
        for s in range(stages - 1):
            sent = [a.mb for _, _, after in plans[s] for a in after if a.payload == "act"]
            got = [b.mb for _, before, _ in plans[s + 1] for b in before
                   if b.payload == "act"]
            assert sent == got == list(range(m))
            sent = [a.mb for _, _, after in plans[s + 1] for a in after
                    if a.payload == "grad"]
            got = [b.mb for _, before, _ in plans[s] for b in before if b.payload == "grad"]
            assert sent == got == list(range(m))


@pytest.mark.parametrize("kind", pp.SCHEDULES)
def test_no_deadlock_and_the_textbook_bubble_for_the_whole_matrix(kind):
    """Simulated with free messages and equal stages, both schedules finish and idle
    exactly (S-1)/(M+S-1) of the step, with t_b = 2 t_f as well as t_b = t_f."""
    for stages, m in MATRIX:
        for fwd, bwd in ((1.0, 1.0), (1.0, 2.0)):
            sim = pp.simulate(kind, stages, m, fwd, bwd)
            assert sim["step_s"] == pytest.approx((m + stages - 1) * (fwd + bwd))
            assert sim["bubble"] == pytest.approx((stages - 1) / (m + stages - 1))


def test_message_cost_adds_two_transfers_per_boundary_to_gpipe():
    # S = 4, M = 8, t_f = t_b = 1, c = 0.1: (M+S-1)(t_f+t_b) + 2(S-1)c = 22.6
    sim = pp.simulate("gpipe", 4, 8, 1.0, 1.0, comm_s=0.1)
    assert sim["step_s"] == pytest.approx(22 + 0.6)
    one = pp.simulate("1f1b", 4, 8, 1.0, 1.0, comm_s=0.1)
    assert one["step_s"] >= sim["step_s"] - 1e-9  # 1F1B waits on messages at least as often


def test_a_broken_schedule_is_caught_as_a_deadlock(monkeypatch):
    # a stage that does its backwards before its forwards can never get a gradient
    real = pp.schedule

    def broken(kind, stages, m, stage):
        ops = real(kind, stages, m, stage)
        return ops[::-1] if stage == 1 else ops
    monkeypatch.setattr(pp, "schedule", broken)
    with pytest.raises(RuntimeError, match="deadlock"):
        pp.simulate("gpipe", 3, 2)


def test_parse_args_refuses_impossible_pipelines():
    base = ["--world-size", "4", "--master", "127.0.0.1:1", "--out", "/tmp/x"]
    with pytest.raises(SystemExit):
        pp.parse_args(["--rank", "0", "--layers", "3", *base])
    with pytest.raises(SystemExit):
        pp.parse_args(["--rank", "0", "--micro-batches", "9", "--batch-size", "8", *base])
    with pytest.raises(SystemExit):
        pp.parse_args(["--rank", "0", "--fwd-ms", "-1", *base])
    ok = pp.parse_args(["--rank", "3", "--schedule", "1f1b", *base])
    assert ok.schedule == "1f1b" and ok.layers == 4


# ----------------------------------------------------------------------------- gloo

def reference_losses(model_size: float, layers: int, seed: int, batch: int, lr: float,
                     iterations: int) -> list[float]:
    """The unpartitioned model, full batch, plain SGD: what the pipeline must match."""
    model = mlp_stack(model_size, layers, seed)
    data = Digits(0, 1, batch, seed)
    loss_fn = nn.CrossEntropyLoss()
    out = []
    for _ in range(iterations):
        x, y = data.next_batch()
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        out.append(float(loss.item()))
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return out


def run_pipeline(tmp: Path, stages: int, kind: str, m: int, iterations: int = 4,
                 **opts) -> dict[int, list[dict]]:
    options = {"schedule": kind, "micro_batches": m, "iterations": iterations,
               "model_size": 0.02, "batch_size": 12, "lr": 0.1, "layers": max(4, stages),
               "seed": 5, "timeout": 60, **opts}
    argvs = pipeline_commands([Endpoint("127.0.0.1", "lo")] * stages, str(tmp),
                              free_port(), options, python=sys.executable)
    with LocalJob(tmp) as job:
        for r, argv in enumerate(argvs):
            job.start(r, argv)
        codes = job.wait(120)
        assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    return {r: read_jsonl(tmp / f"{r}.jsonl") for r in range(stages)}


@pytest.mark.parametrize("stages,kind,m", [(2, "gpipe", 4), (3, "1f1b", 5), (4, "1f1b", 2)])
def test_pipelined_model_reaches_the_unpartitioned_loss(tmp_path, stages, kind, m):
    logs = run_pipeline(tmp_path, stages, kind, m)
    last = [e["loss"] for e in events(logs[stages - 1], "iteration")]
    ref = reference_losses(0.02, max(4, stages), 5, 12, 0.1, 4)
    # float32: the micro-batch losses and gradients are summed in another order
    assert last == pytest.approx(ref, rel=1e-5, abs=1e-6)
    assert ref[-1] < ref[0]  # and it learns
    for s in range(stages):
        # each stage ran the documented order, step after step
        expect = [f"{op.kind}{op.mb}" for op in pp.schedule(kind, stages, m, s)]
        spans = events(logs[s], "span")
        for it in range(4):
            assert [e["name"] for e in spans if e["iteration"] == it] == expect
        start = events(logs[s], "start")[0]
        assert start["mode"] == kind and start["max_in_flight"] == pp.max_in_flight(
            pp.schedule(kind, stages, m, s))
        its = events(logs[s], "iteration")
        assert all(i["idle_s"] == pytest.approx(i["t_end"] - i["t_start"] - i["busy_s"])
                   for i in its)
    final = events(logs[stages - 1], "final")[0]
    assert 0 <= final["accuracy"] <= 1 and final["loss"] > 0


def test_emulated_compute_and_padding_are_what_the_log_says(tmp_path):
    logs = run_pipeline(tmp_path, 2, "gpipe", 2, iterations=2, fwd_ms=30, bwd_ms=60,
                        activation_bytes=40_000)
    spans = events(logs[0], "span")
    # every F lasts at least 30 ms and every B at least 60 ms (sleep-until, never less)
    assert all(e["dur_s"] >= (0.03 if e["cat"] == "forward" else 0.06) for e in spans)
    # padded: 2 micro-batches of 10,000 floats forward per step from stage 0
    it = events(logs[0], "iteration")
    assert [i["bytes_sent"] for i in it] == [2 * 40_000] * 2
    assert events(logs[0], "start")[0]["activation_bytes"] == 40_000


# ------------------------------------------------- the schedules' messages over real gloo

def _code(stage: int, payload: str, mb: int) -> float:
    """What a message carries: who sent it, what and which micro-batch (exact in float)."""
    return stage * 1000 + (500 if payload == "grad" else 0) + mb


def _run_the_matrix_of_one_pipeline(rank: int, stages: int, port: int, results) -> None:
    """One stage (rank) of an S-stage group: every schedule and M = 1..16 in turn, with
    the app's discipline (every receive of the step posted first, tags mb / M + mb, each
    wait where `stage_ops` puts it, the sends waited at the end); a barrier between."""
    import datetime
    import os

    import torch.distributed as dist

    from incastlab.apps import common
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=stages,
                            timeout=datetime.timedelta(seconds=60))
    done = []
    for kind in pp.SCHEDULES:
        for m in range(1, 17):
            posted = {}
            for mb in range(m):
                if rank > 0:
                    buf = torch.zeros(1)
                    posted[("act", mb)] = (dist.irecv(buf, src=rank - 1, tag=mb), buf)
                if rank < stages - 1:
                    buf = torch.zeros(1)
                    posted[("grad", mb)] = (dist.irecv(buf, src=rank + 1, tag=m + mb), buf)
            sends = []
            for op, before, after in pp.stage_ops(kind, stages, m, rank):
                for msg in before:
                    work, buf = posted.pop((msg.payload, msg.mb))
                    common.wait(work, 30, f"{kind} S={stages} M={m} stage {rank} {op}")
                    assert buf.item() == _code(msg.peer, msg.payload, msg.mb), (kind, m, op)
                for msg in after:
                    tag = msg.mb if msg.payload == "act" else m + msg.mb
                    sends.append(dist.isend(torch.tensor([float(_code(rank, msg.payload, msg.mb))]),
                                            dst=msg.peer, tag=tag))
            for work in sends:
                common.wait(work, 30, f"{kind} S={stages} M={m} stage {rank}: sends")
            assert not posted, (kind, m, sorted(posted))
            common.wait(dist.barrier(async_op=True), 30, "barrier")
            done.append((kind, m))
    results.put((rank, done))


@pytest.mark.parametrize("stages", range(2, 9))
def test_every_schedule_runs_over_gloo_without_deadlock(stages):
    """Done-when of issue 11: no deadlock for S = 2..8, M = 1..16 on loopback, both
    schedules, each message the one its receiver expects (sender, payload, micro-batch)."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")  # the children run only this module's function
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_run_the_matrix_of_one_pipeline,
                         args=(r, stages, port, results)) for r in range(stages)]
    for p in procs:
        p.start()
    try:
        got = dict(results.get(timeout=240) for _ in range(stages))
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    want = [(k, m) for k in pp.SCHEDULES for m in range(1, 17)]
    assert got == {r: want for r in range(stages)}
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
