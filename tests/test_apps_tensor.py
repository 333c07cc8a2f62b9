"""Tensor (Megatron) parallelism: the slices of every block add up to the whole block,
one rank is the unpartitioned model, and real gloo ranks on loopback train to the
unpartitioned model's losses with 2 collectives per block per step of the logged size."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from incastlab.apps import tensor as tp
from incastlab.apps.commands import Endpoint
from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.apps.model import Digits, param_count
from incastlab.jobs.tensor import tensor_commands


def test_width_matches_the_requested_size():
    for size, layers in ((0.1, 2), (0.25, 4), (1.0, 8)):
        model = tp.tensor_model(size, layers, seed=0)
        assert param_count(model) == pytest.approx(size * 1e6, rel=0.02)
        h = tp.tensor_width(size, layers)
        assert model["blocks"][0]["a"].out_features == tp.EXPANSION * h


@pytest.mark.parametrize("world", [2, 4])
def test_column_then_row_slices_add_up_to_the_block(world):
    full = tp.tensor_model(0.05, 1, seed=1)
    blk = full["blocks"][0]
    x = torch.randn(7, blk["a"].in_features)
    partial = []
    for r in range(world):
        # a ShardedModel's slices, taken without a process group: only the slicing
        shard = tp.ShardedModel(full, r, world, coll=None)
        h = torch.relu(x @ shard.a_w[0].t() + shard.a_b[0])
        partial.append(h @ shard.b_w[0].t())
    # the all-reduce (sum) of the partial outputs is the whole block's output
    want = blk["b"](torch.relu(blk["a"](x)))
    assert torch.allclose(sum(partial) + blk["b"].bias, want, rtol=1e-5, atol=1e-6)
    # every column of A and every row of B's input belongs to exactly one rank
    assert sum(tp.ShardedModel(full, r, world, None).a_w[0].shape[0]
               for r in range(world)) == blk["a"].out_features


def test_one_rank_is_the_unpartitioned_model():
    full = tp.tensor_model(0.05, 3, seed=2)
    coll = tp.Collectives(0, 1, "ring", 10.0)
    model = tp.ShardedModel(full, 0, 1, coll)
    x = torch.randn(5, 64)
    assert torch.allclose(model(x), tp.reference_forward(full, x), rtol=1e-6, atol=1e-6)
    assert [r["direction"] for r in coll.records] == ["fwd"] * 3  # one per block forward
    model(x).sum().backward()
    assert [r["direction"] for r in coll.records] == ["fwd"] * 6 + ["bwd"] * 3


def reference_losses(size, layers, seed, batch, lr, iterations):
    model = tp.tensor_model(size, layers, seed)
    data = Digits(0, 1, batch, seed)
    loss_fn = nn.CrossEntropyLoss()
    out = []
    for _ in range(iterations):
        x, y = data.next_batch()
        model.zero_grad()
        loss = loss_fn(tp.reference_forward(model, x), y)
        loss.backward()
        out.append(float(loss.item()))
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return out


@pytest.mark.parametrize("world,impl", [(2, "ring"), (3, "gloo")])
def test_tensor_parallel_training_matches_the_unpartitioned_model(tmp_path: Path, world,
                                                                   impl):
    layers, batch, iters = 2, 16, 4
    options = {"impl": impl, "iterations": iters, "model_size": 0.05, "batch_size": batch,
               "lr": 0.1, "layers": layers, "seed": 4, "timeout": 60}
    argvs = tensor_commands([Endpoint("127.0.0.1", "lo")] * world, str(tmp_path),
                            free_port(), options, python=sys.executable)
    with LocalJob(tmp_path) as job:
        for r, argv in enumerate(argvs):
            job.start(r, argv)
        codes = job.wait(120)
        assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    logs = {r: read_jsonl(tmp_path / f"{r}.jsonl") for r in range(world)}
    ref = reference_losses(0.05, layers, 4, batch, 0.1, iters)
    h = tp.tensor_width(0.05, layers)
    for r in range(world):
        its = events(logs[r], "iteration")
        # every rank computes the same loss as the whole model (split sums: float32)
        assert [i["loss"] for i in its] == pytest.approx(ref, rel=1e-5, abs=1e-6)
        spans = events(logs[r], "span")
        for it in range(iters):
            mine = [e for e in spans if e["iteration"] == it]
            # blocks forward in order, then backward in reverse order
            assert [(e["layer"], e["direction"]) for e in mine] == \
                [(0, "fwd"), (1, "fwd"), (1, "bwd"), (0, "bwd")]
            assert all(e["bytes"] == batch * h * 4 for e in mine)
        if impl == "ring":  # the ring sends 2(T-1)/T of each all-reduce's bytes
            assert all(i["bytes_sent"] == 2 * layers * 2 * (world - 1) * batch * h * 4
                       // world for i in its)
    assert ref[-1] < ref[0]
    lat = events(logs[0], "latency")
    assert len(lat) == 1 and 0 < lat[0]["alpha_s"] < 0.5
