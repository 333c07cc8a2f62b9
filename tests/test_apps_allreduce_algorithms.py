"""The all-reduce algorithms of apps/collectives.py on loopback, for N = 2..8.

One job of 8 processes runs every algorithm for every N (ranks >= N sit the case out:
the algorithms only talk to the ranks they are given) on the same tensors as
`dist.all_reduce` over a group of the first N ranks, and checks, per case:
- integer-valued float32 tensors (|sum| < 2^24 is exact in any order): the result equals
  dist.all_reduce's bit for bit;
- general floats: bit-identical on every rank (each element's sum is formed once and
  copied) and equal to dist.all_reduce within float32 rounding;
- the bytes each rank says it sent and received, against the schedule's count.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.jobs.ring import ring_argv
from incastlab.apps.collectives import leaf_groups, tree_height, tree_slices
from incastlab.apps.ring import parse_args

WORLD = 8
NUMELS = (1001, 4096, 100003)  # uneven splits; 100003 gives the tree and ring many slices
LAYOUTS = {  # hierarchical: the leaf of rank r
    "alternating": lambda r: f"lf{r % 2 + 1}",   # two leaves, ranks interleaved
    "threes": lambda r: f"lf{r // 3 + 1}",       # leaves of three, the last one short
}

CHECK = r"""
import datetime, hashlib, json, os, sys
import torch, torch.distributed as dist
from incastlab.apps.collectives import allreduce
rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
layouts = json.loads(sys.argv[5])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world, timeout=datetime.timedelta(seconds=60))
result = {}
for n in range(2, world + 1):
    group = dist.new_group(list(range(n)))  # collective: every rank calls it
    runs = [("ring", None), ("halving-doubling", None), ("tree", None)] + [
        ("hierarchical", name) for name in layouts]
    for algo, layout in runs:
        for kind in ("int", "float"):
            for numel in NUMELS:
                if rank >= n:
                    continue
                g = torch.Generator().manual_seed(1000 * rank + numel)
                if kind == "int":
                    x = torch.randint(-1000, 1000, (numel,), generator=g).to(torch.float32)
                else:
                    x = torch.randn(numel, generator=g) * 10 ** torch.randint(
                        -3, 4, (numel,), generator=g).to(torch.float32)
                mine, ref = x.clone(), x.clone()
                leaves = layouts[layout][:n] if layout else None
                sent, recv = allreduce(algo, mine, rank, n, 30.0, leaves)
                dist.all_reduce(ref, group=group)
                result[f"{algo}/{layout}/{n}/{kind}/{numel}"] = {
                    "sent": sent, "recv": recv,
                    "digest": hashlib.sha256(mine.numpy().tobytes()).hexdigest(),
                    "equal": bool(torch.equal(mine, ref)),
                    "close": bool(torch.allclose(mine, ref, rtol=1e-5, atol=1e-3))}
json.dump(result, open(f"{out}/check{rank}.json", "w"))
dist.barrier()
sys.stdout.flush()
os._exit(0)
""".replace("NUMELS", repr(NUMELS))


def expected_bytes(algo: str, layout: str | None, n: int, rank: int, numel: int
                   ) -> tuple[int, int] | None:
    """(sent, received) bytes of `rank` by the schedule, when they follow from it simply."""
    m = 4 * numel
    if algo == "tree":
        children = [c for c in (2 * rank + 1, 2 * rank + 2) if c < n]
        up = 0 if rank == 0 else m
        return up + len(children) * m, len(children) * m + up
    if algo == "halving-doubling":
        p = 1 << (n.bit_length() - 1)
        r = n - p
        if rank < 2 * r and rank % 2 == 0:
            return m, m
        if numel % p:
            return None  # uneven blocks: the butterfly's ranges differ by an element
        share = 2 * (p - 1) * m // p
        return (share + m, share + m) if rank < 2 * r else (share, share)
    if algo == "hierarchical":
        leaves = [LAYOUTS[layout](r) for r in range(n)]
        mine = next(g for g in leaf_groups(leaves) if rank in g)
        if rank != mine[0]:
            return m, m
        leaders = [g[0] for g in leaf_groups(leaves)]
        sent, recv = ring_bytes(len(leaders), leaders.index(rank), numel)
        return sent + (len(mine) - 1) * m, recv + (len(mine) - 1) * m
    return ring_bytes(n, rank, numel)


def ring_bytes(n: int, i: int, numel: int) -> tuple[int, int]:
    """(sent, received) bytes of ring position i of n: it sends every chunk twice but the
    one it completes in the reduce-scatter (i+1) and the one it gets last (i+2)
    (tests/test_apps_ring.py), and receives every chunk twice but its own (i) and the one
    it completes (i+1)."""
    if n == 1:
        return 0, 0
    chunks = [numel // n + (1 if c < numel % n else 0) for c in range(n)]
    return (4 * (2 * sum(chunks) - chunks[(i + 1) % n] - chunks[(i + 2) % n]),
            4 * (2 * sum(chunks) - chunks[i] - chunks[(i + 1) % n]))


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("algos")
    layouts = {name: [f(r) for r in range(WORLD)] for name, f in LAYOUTS.items()}
    port = free_port()
    with LocalJob(out) as job:
        for r in range(WORLD):
            job.start(r, [sys.executable, "-c", CHECK, str(r), str(WORLD), str(port), str(out),
                          json.dumps(layouts)])
        codes = job.wait(300)
        assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    return [json.loads((out / f"check{r}.json").read_text()) for r in range(WORLD)]


@pytest.mark.parametrize("algo", ["ring", "halving-doubling", "tree", "hierarchical"])
def test_algorithm_equals_dist_all_reduce_for_every_n(results, algo):
    cases = [c for c in results[0] if c.startswith(algo + "/")]
    ns = {int(c.split("/")[2]) for c in cases}
    assert ns == set(range(2, WORLD + 1))  # every N, powers of two or not
    checked_bytes = 0
    for case in cases:
        _, layout, n, kind, numel = case.split("/")
        n, numel = int(n), int(numel)
        per_rank = [res[case] for res in results[:n]]
        assert all(case not in res for res in results[n:])
        assert len({p["digest"] for p in per_rank}) == 1, case  # identical on every rank
        assert all(p["close"] for p in per_rank), case
        if kind == "int":
            assert all(p["equal"] for p in per_rank), case  # bit-exact vs dist.all_reduce
        for rank, p in enumerate(per_rank):
            want = expected_bytes(algo, None if layout == "None" else layout, n, rank, numel)
            if numel == 4096 and n in (2, 4, 8):  # even splits: the count is exact
                assert want is not None, case
            if want is not None:
                assert (p["sent"], p["recv"]) == want, (case, rank)
                checked_bytes += 1
        # what goes out comes in: the job's bytes balance
        assert sum(p["sent"] for p in per_rank) == sum(p["recv"] for p in per_rank), case
    assert checked_bytes > 0


def test_tree_shape_and_slices():
    # heap tree: 1 rank -> height 0; 2-3 -> 1; 4-7 -> 2; 8 -> 3
    assert [tree_height(n) for n in range(1, 9)] == [0, 1, 1, 2, 2, 2, 2, 3]
    assert tree_slices(1000) == 1  # below one 16 KiB slice
    assert tree_slices(64 * 1024) == 4
    assert tree_slices(4 << 20) == 64  # capped (TREE_SLICES)


def test_leaf_groups_put_leaders_first():
    assert leaf_groups(["b", "a", "b", "c", "a"]) == [[0, 2], [1, 4], [3]]


@pytest.mark.parametrize("argv, message", [
    (["--impl", "gloo", "--algorithm", "tree"], "--algorithm"),
    (["--algorithm", "hierarchical"], "--leaves: required"),
    (["--algorithm", "hierarchical", "--leaves", "lf1,lf2"], "--leaves: 2 leaves"),
    (["--leaves", "lf1,,lf2,lf2"], "--leaves"),
    (["--algorithm", "butterfly"], "--algorithm"),
])
def test_bad_algorithm_options_are_refused_naming_the_option(argv, message, capsys):
    base = ["--rank", "0", "--world-size", "4", "--master", "127.0.0.1:1", "--out", "/tmp/x"]
    with pytest.raises(SystemExit) as e:
        parse_args(base + argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("algo", ["halving-doubling", "tree", "hierarchical"])
def test_training_with_each_algorithm_keeps_ranks_identical(tmp_path: Path, algo: str):
    world = 3  # not a power of two; two leaves for the hierarchical one
    extra = ["--model-size", "0.02", "--iterations", "6", "--timeout", "30",
             "--algorithm", algo, "--leaves", "lf1,lf2,lf1"]
    with LocalJob(tmp_path) as job:
        for r, argv in enumerate(ring_argv(world, tmp_path, free_port(), extra)):
            job.start(r, argv)
        codes = job.wait(120)
        assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    logs = [read_jsonl(tmp_path / f"{r}.jsonl") for r in range(world)]
    assert all(events(log, "start")[0]["algorithm"] == algo for log in logs)
    finals = [events(log, "final")[0] for log in logs]
    assert len({f["params_sha256"] for f in finals}) == 1
    its = events(logs[0], "iteration")
    assert len(its) == 6 and its[-1]["loss"] < its[0]["loss"]
    assert all(i["bytes_sent"] > 0 for i in its)
