"""The all-to-all exchanges of apps/alltoall.py on loopback, for N = 2..8.

One job of 8 processes runs, for every N (ranks >= N sit the case out), split matrices
drawn from a seed shared by all ranks (zeros included: a rank that sends nothing to a
peer, or receives nothing), rows of 3 values, through our pairwise exchange and through
gloo's all_to_all_single over a group of the first N ranks, and checks that every rank
received exactly its blocks, in order, bit for bit.
"""
from __future__ import annotations

import json
import sys

import pytest

from incastlab.apps.alltoall import ALGORITHMS, pairwise_steps
from incastlab.apps.local import LocalJob, free_port

WORLD = 8
MATRICES = 3  # split matrices per N

CHECK = r"""
import datetime, json, os, sys
import torch, torch.distributed as dist
from incastlab.apps.alltoall import alltoall
rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world, timeout=datetime.timedelta(seconds=60))
result = {}
for n in range(2, world + 1):
    group = dist.new_group(list(range(n)))  # collective: every rank calls it
    for m in range(MATRICES):
        if rank >= n:
            continue
        g = torch.Generator().manual_seed(100 * n + m)  # the same matrix on every rank
        sizes = torch.randint(0, 40, (n, n), generator=g)
        sizes[torch.rand((n, n), generator=g) < 0.2] = 0  # some pairs exchange nothing
        in_splits = sizes[rank].tolist()
        out_splits = sizes[:, rank].tolist()
        # row i of the block for d: (rank, d, i), so a misplaced row is visible
        inp = torch.cat([torch.tensor([[rank, d, i] for i in range(in_splits[d])],
                                      dtype=torch.float32).reshape(-1, 3)
                         for d in range(n)])
        want = torch.cat([torch.tensor([[s, rank, i] for i in range(out_splits[s])],
                                       dtype=torch.float32).reshape(-1, 3)
                          for s in range(n)])
        for algo in ("gloo", "pairwise"):
            got = torch.full((sum(out_splits), 3), -1.0)
            if algo == "gloo":
                dist.all_to_all_single(got, inp, output_split_sizes=out_splits,
                                       input_split_sizes=in_splits, group=group)
            else:
                alltoall(algo, got, inp, out_splits, in_splits, rank, n, 30.0)
            result[f"{algo}/{n}/{m}"] = bool(torch.equal(got, want))
json.dump(result, open(f"{out}/a2a{rank}.json", "w"))
dist.barrier()
sys.stdout.flush()
os._exit(0)
""".replace("MATRICES", str(MATRICES))


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("alltoall")
    port = free_port()
    with LocalJob(out) as job:
        for r in range(WORLD):
            job.start(r, [sys.executable, "-c", CHECK, str(r), str(WORLD), str(port), str(out)])
        codes = job.wait(300)
        assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    return [json.loads((out / f"a2a{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_every_rank_receives_exactly_its_blocks_for_every_n(results, algo):
    for n in range(2, WORLD + 1):
        for m in range(MATRICES):
            case = f"{algo}/{n}/{m}"
            assert all(res[case] for res in results[:n]), case
            assert all(case not in res for res in results[n:]), case


def test_pairwise_steps_pair_every_rank_once_each_way():
    for n in range(2, 9):
        steps = [pairwise_steps(r, n) for r in range(n)]
        for r in range(n):
            assert sorted(dst for dst, _ in steps[r]) == [p for p in range(n) if p != r]
            assert sorted(src for _, src in steps[r]) == [p for p in range(n) if p != r]
        for i in range(n - 1):  # in step i, r's receive is from the rank that sends to r
            for r in range(n):
                dst, _ = steps[r][i]
                assert steps[dst][i][1] == r
