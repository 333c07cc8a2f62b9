"""The tree all-reduce's credit window (apps/tree_allreduce.py).

A parent posts its receive for a child's slice j + window only once slice j has arrived
from every child, and gloo's send waits for its receiver's post: so while one child is
silent, the other can complete exactly `window` sends and no more. Without the credit
(every receive posted at the start) it completes all of them, and the nearer child takes
the parent's link (1.14-1.21 x the bound on the fabric).

Loopback, N = 3 (root 0, children 1 and 2), 8 slices of MIN_SLICE_BYTES. Child 1 posts
all 8 sends at once and counts the completed ones (a thread waits them in order: gloo's
Work.is_completed() stays False until wait() is called; no timed-out wait either, it
would close the process's connections) while child 2 holds back; then child 2 sends, and
all three end with the exact sum.
"""
from __future__ import annotations

import json
import sys

import pytest

from incastlab.apps.local import LocalJob, free_port
from incastlab.apps.tree_allreduce import (
    STANDARD_MTU,
    TREE_WINDOW,
    TREE_WINDOW_JUMBO,
    link_mtu,
    tree_slices,
    tree_window,
)

WORLD = 3
NUMEL = 8 * 16384 // 4  # 8 slices of MIN_SLICE_BYTES (16 KiB)
TIMEOUT_S = 30.0
SETTLE_S = 1.0  # after the count reached the window: time for a send past it to finish

RANK = r"""
import datetime, json, os, sys, threading, time
import torch, torch.distributed as dist
from incastlab.apps.tree_allreduce import default_tree_window, tree_allreduce, tree_slices
rank, port, out, numel, window, timeout, settle = (int(sys.argv[1]), sys.argv[2],
    sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7]))
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=3, timeout=datetime.timedelta(seconds=60))
deadline = datetime.timedelta(seconds=timeout)
x = (torch.arange(numel, dtype=torch.float32) % 1000) * (rank + 1)
flag = os.path.join(out, "counted")
result = {"rank": rank}
if rank == 0:  # window 0: the default (default_tree_window)
    tree_allreduce(x, 0, 3, timeout, window=window or None)
else:
    per = tree_slices(numel * 4)
    parts = list(torch.tensor_split(x, per))
    downs = [torch.empty_like(p) for p in parts]
    recvs = [dist.irecv(b, src=0, tag=per + j) for j, b in enumerate(downs)]
    if rank == 1:  # every send at once; count those the root let through
        sends = [dist.isend(p, dst=0, tag=j) for j, p in enumerate(parts)]
        done = []  # a thread waits them in order (gloo marks a send done in its wait)

        def waiter():
            for s in sends:
                s.wait(deadline)
                done.append(time.monotonic())

        th = threading.Thread(target=waiter, daemon=True)
        th.start()
        end = time.monotonic() + timeout / 3
        expect = window or default_tree_window()
        while len(done) < expect and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(settle)
        result["completed_while_sibling_silent"] = len(done)
        open(flag, "w").close()
        th.join()
        sends = []  # the waiter thread has waited for every send already
    else:  # rank 2 holds back until rank 1 has counted
        end = time.monotonic() + timeout
        while not os.path.exists(flag) and time.monotonic() < end:
            time.sleep(0.01)
        sends = [dist.isend(p, dst=0, tag=j) for j, p in enumerate(parts)]
    for s in sends:
        s.wait(deadline)
    for j, r in enumerate(recvs):
        r.wait(deadline)
        parts[j].copy_(downs[j])
want = (torch.arange(numel, dtype=torch.float32) % 1000) * 6
result["exact"] = bool(torch.equal(x, want))
json.dump(result, open(os.path.join(out, f"rank{rank}.json"), "w"))
sys.stdout.flush()
os._exit(0)
"""


def _completed_while_sibling_silent(tmp_path, window: int) -> int:
    """Run the three ranks (`window` 0: the root's default); child 1's completed sends."""
    port = free_port()
    with LocalJob(tmp_path) as job:
        for r in range(WORLD):
            job.start(r, [sys.executable, "-c", RANK, str(r), str(port), str(tmp_path),
                          str(NUMEL), str(window), str(TIMEOUT_S), str(SETTLE_S)])
        codes = job.wait(3 * TIMEOUT_S + 60)
    assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert all(g["exact"] for g in got)
    return got[1]["completed_while_sibling_silent"]


@pytest.mark.parametrize("window", [1, 3])
def test_a_child_runs_exactly_window_slices_ahead_of_its_silent_sibling(tmp_path, window):
    assert tree_slices(NUMEL * 4) == 8 > window  # the credit is what stops the sends
    assert _completed_while_sibling_silent(tmp_path, window) == window


@pytest.mark.parametrize("iface, want", [(None, TREE_WINDOW), ("lo", TREE_WINDOW_JUMBO)])
def test_the_default_window_follows_gloos_interface(tmp_path, monkeypatch, iface, want):
    """Without a window, the root's credit is that of GLOO_SOCKET_IFNAME's MTU (lo's is
    above 1500: the jumbo window); the child processes inherit the variable."""
    if iface is None:
        monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    else:
        assert link_mtu(iface) > STANDARD_MTU
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", iface)
    assert _completed_while_sibling_silent(tmp_path, 0) == want


def test_window_follows_the_mtu():
    assert tree_window(None) == tree_window(1500) == TREE_WINDOW == 4
    assert tree_window(9000) == tree_window(1501) == TREE_WINDOW_JUMBO == 2


def test_link_mtu_reads_the_interface():
    import subprocess
    shown = json.loads(subprocess.run(["ip", "-j", "link", "show", "lo"], check=True,
                                      capture_output=True, text=True).stdout)
    assert link_mtu("lo") == shown[0]["mtu"]  # what iproute2 reports
    assert link_mtu("no-such-if0,lo") is None  # one of a list unreadable
    assert link_mtu(None) is None
    assert link_mtu("no-such-if0") is None
