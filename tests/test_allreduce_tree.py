"""The tree all-reduce's two directions are independent (apps/tree_allreduce.py).

A rank forwards the broadcast of slice j as soon as its parent sent it, whatever the
state of its own reduction. The design before interleaved both in one thread (broadcast
slice j only after slice j + 2h had gone up) and, on the fabric, paced every slice by a
round trip of the deepest path (1.3-2.4 x the bound). Its signature is what this test
provokes: a leaf that sends slice j + 1 up only after it has received slice j down
(stop-and-wait). The inner ranks above it then need slice j + 2h before they pass slice
j down: the old design deadlocks (its waits time out), the independent one completes, and
every rank, the stop-and-wait one included, ends with the exact sum.

Loopback, N = 8 (heap tree: 7 -> 3 -> 1 -> 0, height 3), 8 slices, integer-valued
float32 (every order of additions gives the same sum).
"""
from __future__ import annotations

import json
import sys

from incastlab.apps.local import LocalJob, free_port
from incastlab.apps.tree_allreduce import tree_height, tree_slices

WORLD = 8
NUMEL = 8 * 16384 // 4  # 8 slices of MIN_SLICE_BYTES (16 KiB)
STOP_AND_WAIT = 7  # the deepest leaf: its parent 3 and grandparent 1 are inner ranks
TIMEOUT_S = 15.0  # each wait's deadline: a deadlock fails within it

RANK = r"""
import datetime, json, os, sys
import torch, torch.distributed as dist
from incastlab.apps.tree_allreduce import tree_allreduce, tree_slices
rank, world, port, out, numel, special, timeout = (int(sys.argv[1]), int(sys.argv[2]),
    sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7]))
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world, timeout=datetime.timedelta(seconds=60))
x = (torch.arange(numel, dtype=torch.float32) % 1000) * (rank + 1)
status = "ok"
try:
    if rank == special:  # a leaf, by hand: slice j + 1 goes up after slice j came down
        per = tree_slices(numel * 4)
        parts = list(torch.tensor_split(x, per))
        parent = (rank - 1) // 2
        for j, part in enumerate(parts):
            dist.isend(part, dst=parent, tag=j).wait(datetime.timedelta(seconds=timeout))
            buf = torch.empty_like(part)
            dist.irecv(buf, src=parent, tag=per + j).wait(datetime.timedelta(seconds=timeout))
            part.copy_(buf)
    else:
        tree_allreduce(x, rank, world, timeout)
except Exception as exc:
    status = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
want = (torch.arange(numel, dtype=torch.float32) % 1000) * (world * (world + 1) // 2)
json.dump({"status": status, "exact": bool(torch.equal(x, want))},
          open(f"{out}/rank{rank}.json", "w"))
sys.stdout.flush()
os._exit(0)
"""


def test_broadcast_does_not_wait_for_the_reduction(tmp_path):
    assert tree_slices(NUMEL * 4) == 8 > 2 * tree_height(WORLD)  # the old lag (6) < slices
    port = free_port()
    with LocalJob(tmp_path) as job:
        for r in range(WORLD):
            job.start(r, [sys.executable, "-c", RANK, str(r), str(WORLD), str(port),
                          str(tmp_path), str(NUMEL), str(STOP_AND_WAIT), str(TIMEOUT_S)])
        codes = job.wait(4 * TIMEOUT_S + 60)
    assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert [g["status"] for g in got] == ["ok"] * WORLD
    assert all(g["exact"] for g in got)
