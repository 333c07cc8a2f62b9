"""The MoE expert-parallel app (apps/moe.py): routing, capacity and the split-size
bookkeeping by hand, and a loopback job where every token-expert assignment is accounted
for (routed = sent + dropped, what each expert received = what the ranks sent it) and
every row that comes back is its expert's output."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from incastlab.apps.commands import Endpoint, moe_commands
from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.apps.moe import capacity, dispatch_plan, parse_args, route, zipf_probs


def test_zipf_probabilities():
    assert zipf_probs(4, 0).tolist() == [0.25] * 4
    p = zipf_probs(3, 1).tolist()  # 1, 1/2, 1/3 over 11/6
    assert p == pytest.approx([6 / 11, 3 / 11, 2 / 11])


def test_routing_picks_distinct_experts_and_follows_the_skew():
    g = torch.Generator().manual_seed(0)
    choice = route(20_000, 4, 2, 2.0, g)
    assert choice.shape == (20_000, 2)
    assert (choice[:, 0] != choice[:, 1]).all()  # top-k without replacement
    counts = torch.bincount(choice.reshape(-1), minlength=4).tolist()
    assert counts == sorted(counts, reverse=True)  # expert 0 the hottest
    uniform = torch.bincount(route(20_000, 4, 1, 0.0, g).reshape(-1), minlength=4)
    assert (uniform - 5000).abs().max() < 300  # 0.25 each, ~4 standard deviations


def test_capacity_and_dispatch_bookkeeping():
    assert capacity(8, 4, 2, 1.0) == 4 and capacity(8, 4, 2, 1.25) == 5
    # 4 tokens, top-2 over 3 experts; expert 0 wanted by all four, cap 2
    choice = torch.tensor([[0, 1], [0, 2], [0, 1], [0, 2]])
    plan = dispatch_plan(choice, 3, 2)
    assert plan["sent"] == [[0, 1], [0, 2], [1, 3]]  # first come, first served
    assert plan["routed"] == [4, 2, 2] and plan["sent_counts"] == [2, 2, 2]
    assert plan["dropped"] == [2, 0, 0]


def test_bad_options_name_the_option(capsys):
    base = ["--rank", "0", "--world-size", "2", "--master", "127.0.0.1:1", "--out", "/tmp/x"]
    with pytest.raises(SystemExit):
        parse_args(base + ["--top-k", "3"])
    assert "--top-k" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(base + ["--zipf-alpha", "-1"])
    assert "--zipf-alpha" in capsys.readouterr().err


def test_every_token_is_accounted_for_on_loopback(tmp_path: Path):
    world, tokens, k = 4, 300, 2
    argvs = moe_commands([Endpoint("127.0.0.1", "lo")] * world, str(tmp_path), free_port(),
                         {"steps": 3, "tokens": tokens, "hidden": 32, "top_k": k,
                          "zipf_alpha": 2.0, "capacity_factor": 1.5, "timeout": 30},
                         python=sys.executable)
    with LocalJob(tmp_path) as job:
        for r, argv in enumerate(argvs):
            job.start(r, argv)
        codes = job.wait(120)
        assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    logs = [events(read_jsonl(tmp_path / f"{r}.jsonl"), "iteration") for r in range(world)]
    cap = capacity(tokens, world, k, 1.5)  # 225
    for step in range(3):
        rows = [log[step] for log in logs]
        for r in rows:
            assert r["tokens_routed"] == tokens * k
            assert r["tokens_routed"] == r["tokens_sent"] + r["tokens_dropped"]
            assert all(c <= cap for c in r["sent_counts"])
            assert r["mismatched"] == 0  # every returned row is x @ W_e
        for e in range(world):  # expert e received exactly what the ranks sent it
            assert rows[e]["recv_counts"] == [rows[s]["sent_counts"][e] for s in range(world)]
        received = [sum(rows[e]["recv_counts"]) for e in range(world)]
        assert received[0] == max(received)  # the hot expert gets the most
        assert sum(received) == sum(r["tokens_sent"] for r in rows)
    # alpha = 2: expert 0 is wanted by ~ 0.64 of tokens among 4 experts: some drops
    assert sum(r["tokens_dropped"] for log in logs for r in log) > 0
