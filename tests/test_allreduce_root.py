"""Root tier for the all-reduce algorithms (issue 12) on a real fabric: the fabric of
specs/allreduce-algorithms.toml (six ranks on three leaves, host links at 50 Mbit/s,
one 20 Mbit/s link from each leaf to the one spine: 5:1 oversubscribed), one run per
algorithm.

- Every algorithm completes and leaves all ranks with bit-identical parameters.
- Each one's all-reduce takes at least its bound and not far above it (the bound is the
  framed lower bound, analysis.alphabeta; nothing may beat it by more than the timer
  noise).
- The hierarchical one is faster than the flat ring, as the bounds say (0.90 s vs
  1.42 s per all-reduce of 1 MB): only its leaders' ring crosses the spine.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from incastlab.commands.common import build_report
from incastlab.apps.local import events, read_jsonl
from tests.rootnet import run_complete

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")
# measured / bound allowed (the mean over ranks and iterations of each rank's all-reduce
# time, as the report has it). For ring, tree and hierarchical, three parts:
# - TARGET: each algorithm within 10 % of its bound (benchmarks/allreduce_efficiency.py's
#   target; on this fabric on a quiet machine: ring and hierarchical 1.02).
# - START_SKEW: a rank's clock starts when its previous all-reduce ended, and ranks end
#   it at different times, so the early ones count their wait for the late ones. Mean
#   over ranks, measured (2026-12-01): ring 0.07-0.12 of the bound, hierarchical
#   0.06-0.11, tree 0.01-0.04.
# - CPU: the all-reduce itself (last rank in to last rank out) measured up to 1.19 of
#   the bound at load average 11-13 (other sessions' tests on the 2 cores): 0.09 above
#   TARGET, allowed 0.10; CI runs one test at a time, so less.
# Measured with these (2026-12-01, load average 8-13, three runs): ring 1.08, 1.07, 1.06;
# tree 1.11, 1.10, 1.13; hierarchical 1.12, 1.16, 1.06; halving-doubling 1.39, 1.67,
# 1.38. (Before the tree ran its two directions independently: tree 1.40-1.52.)
# Halving-doubling's six phases run one after the other, each a new burst from idle
# connections at 50 Mbit/s into a 20 Mbit/s uplink, which overflows and recovers before
# the next phase may start, so it does not reach the target here: 1.39-1.69 measured
# (quiet and loaded alike). Its allowance: the highest measured plus one more loss
# recovered by a retransmission timeout per all-reduce (the kernel's 200 ms minimum RTO,
# over its 1.706 s bound).
TARGET, START_SKEW, CPU = 1.10, 0.12, 0.10
LIMIT = {"ring": TARGET + START_SKEW + CPU, "tree": TARGET + START_SKEW + CPU,
         "hierarchical": TARGET + START_SKEW + CPU, "halving-doubling": 1.69 + 0.200 / 1.706}
# On top of LIMIT, the retransmission timeouts the hosts' kernels counted in the run
# (nstat TcpExtTCPTimeouts, after - before; these runs have no captures to place them).
# A timeout stalls the all-reduce it falls in, for every rank, by its silence: Linux's
# RTO is srtt + max(4 mdev, 200 ms), srtt at most the path's full queues (100 packets of
# 1514 B at 50, 20, 20 and 50 Mbit/s: 0.17 s) and 4 mdev under the 200 ms floor unless
# the RTT swings by 50 ms on average: RTO0 = 0.37 s. A host's k firings cost at most
# (2^k - 1) RTO0 (one chain, each firing doubling the last), so the mean over ranks and
# the COUNTED iterations rises by at most the sum of that over hosts / COUNTED. (A CPU
# saturated by a second job on the 2 cores made 3 firings on three hosts in one all-
# reduce of halving-doubling: that iteration 2.31 of its bound, the others 1.64-1.68,
# the mean 1.875 against 1.807; the quiet runs have none.)
QUEUE_S = 100 * 1514 * 8 * (2 / 50e6 + 2 / 20e6)
RTO0_S = QUEUE_S + 0.200
COUNTED = 3  # iterations 1-3 of 4 (_allreduce_s)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for algo in ALGORITHMS:
        run_dir = tmp_path_factory.mktemp(algo)
        run_complete(run_dir, [
            "topology.spines=1", "topology.leaves=3", "topology.hosts_per_leaf=2",
            "topology.host_bw_mbps=50", "topology.fabric_bw_mbps=20", "routing.policy=ecmp",
            "workload.kind=ring", f"workload.algorithm={algo}", "workload.workers=6",
            "workload.model_size=250000", "workload.iterations=4", "capture.enabled=false"])
        build_report(run_dir, plots=False)  # no figures: no test here reads them
        out[algo] = run_dir
    return out


def _rto_stall_s(run_dir: Path) -> float:
    """The longest the RTOs the hosts' kernels counted in the run can have stalled it, added
    up over the all-reduces they fell in (see RTO0_S)."""
    def timeouts(path: Path) -> int:
        return json.loads(path.read_text())["kernel"]["TcpExtTCPTimeouts"]

    firings = [timeouts(p) - timeouts(p.with_name(p.name.replace(".after.", ".before.")))
               for p in sorted((run_dir / "counters").glob("*.after.json"))]
    assert firings, "no kernel counters"
    return sum(2 ** k - 1 for k in firings) * RTO0_S


def _allreduce_s(run_dir: Path) -> list[float]:
    """Every rank's all-reduce times but the first iteration's (connections warm up)."""
    return [i["allreduce_s"] for log in sorted((run_dir / "workers").glob("*.jsonl"))
            for i in events(read_jsonl(log), "iteration")[1:]]


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_each_algorithm_runs_at_or_above_its_bound(runs, algo):
    run_dir = runs[algo]
    logs = [read_jsonl(p) for p in sorted((run_dir / "workers").glob("*.jsonl"))]
    assert len(logs) == 6
    assert {events(log, "start")[0]["algorithm"] for log in logs} == {algo}
    assert len({events(log, "final")[0]["params_sha256"] for log in logs}) == 1
    cost = json.loads((run_dir / "metrics.json").read_text())["cost"]
    assert cost["available"], cost
    assert f"{algo} all-reduce" in cost["formula"] or algo == "ring"
    mean = sum(_allreduce_s(run_dir)) / len(_allreduce_s(run_dir))
    # a lower bound: the mean may not beat it (2 % for timer and rate-shaping slack);
    # and the schedule gets within LIMIT of it on this fabric, plus what the counted RTOs
    # can have stalled it
    rto_s = _rto_stall_s(run_dir)
    assert 0.98 * cost["bound_s"] <= mean <= LIMIT[algo] * cost["bound_s"] + rto_s / COUNTED, \
        (mean / cost["bound_s"], rto_s, cost["formula"])


def test_hierarchical_beats_the_flat_ring_on_oversubscribed_spines(runs):
    ring = sorted(_allreduce_s(runs["ring"]))
    hier = sorted(_allreduce_s(runs["hierarchical"]))
    median = lambda v: v[len(v) // 2]  # noqa: E731
    assert median(hier) < 0.85 * median(ring), (median(hier), median(ring))
