"""Root tier for the cost model and the attribution on real fabrics (issue: every job
explained against its bound).

- A synchronous PS behind a very shallow queue loses whole windows and waits for its
  retransmission timer: the attribution must show RTO-stall time, and every iteration it
  charges with a stall must hold an RTO that the captures show (and the other way round).
- A ring at 50 Mbit/s runs at its bound: measured communication over the framed bound
  near 1 once the loss events the attribution names are taken off (on a machine whose CPU
  kept up; a saturated one is said so in the report), and each of its loss recoveries is
  a fast one lasting about a round trip.
- trace.json of a real run loads as JSON and its iteration events match the worker logs
  in count and order.
"""
from __future__ import annotations

import json
from html import escape as html_escape

import pandas as pd
import pytest

from incastlab.analysis.attribution import recovery_intervals
from incastlab.commands.common import analyse, build_report
from tests.rootnet import kept_up, run_complete

pytestmark = pytest.mark.root
RTO_FLOOR_S = 0.18   # Linux's 200 ms minimum RTO less timer granularity (analysis.tcp)


def _run(tmp_path_factory, name, overrides, plots=True):
    run_dir = tmp_path_factory.mktemp(name)
    run_complete(run_dir, overrides)
    build_report(run_dir, plots=plots)
    return run_dir


@pytest.fixture(scope="module")
def shallow_ps_run(tmp_path_factory):
    # 4 workers on two other leaves push 1 MB each into the PS through a 3-packet queue:
    # each step's burst overflows it, whole tails are lost and RTOs fire.
    return _run(tmp_path_factory, "shallow-ps", [
        "topology.spines=2", "topology.leaves=3", "topology.hosts_per_leaf=2",
        "topology.queue_packets=3", "workload.kind=ps", "workload.mode=sync",
        "workload.workers=4", "workload.worker_leaves=[2, 3]", "workload.iterations=6",
        "routing.policy=ecmp"])


@pytest.fixture(scope="module")
def ring_run(tmp_path_factory):
    # uplinks at 3x the host rate, so the host link is the bound whatever ECMP does
    return _run(tmp_path_factory, "ring-50", [
        "topology.spines=2", "topology.leaves=2", "topology.hosts_per_leaf=2",
        "topology.host_bw_mbps=50", "topology.fabric_bw_mbps=150",
        "workload.kind=ring", "workload.workers=4", "workload.model_size=1000000",
        "workload.iterations=5", "routing.policy=ecmp"],
        plots=False)  # no test reads its figures (the shallow PS's report has them)


def test_rto_stalls_are_charged_where_the_captures_show_rtos(shallow_ps_run):
    a = analyse(shallow_ps_run)
    cost = a.metrics["cost"]
    assert cost["available"], cost
    attr = a.tables["attribution"]
    r = a.tables["retrans"]
    rtos = r[r["event"].astype(bool) & (r["kind"] == "rto")]
    assert len(rtos) > 0, "a 3-packet queue under a 4:1 incast must make RTOs fire"
    assert attr["rto_stall_s"].sum() > 0 and cost["rto_stall_s"] > 0, cost
    # Every sync worker waits on the PS's flows, so an RTO's silence (from gap_s before
    # its retransmission to it) stalls the iterations whose communication it overlaps:
    # each charged iteration overlaps one, and each silence that overlaps an iteration's
    # communication with time to spare above the bound is charged there.
    t1 = rtos["t"].to_numpy()
    t0 = t1 - rtos["gap_s"].to_numpy()
    charged = attr[attr["rto_stall_s"] > 0]
    for row in charged.itertuples():
        comm_start = row.t_start + row.compute_s
        assert ((t0 < row.t_end) & (t1 > comm_start)).any(), row
    excess = attr["duration_s"] - attr["compute_s"] - attr["transfer_at_bound_s"]
    for a0, a1 in zip(t0, t1, strict=True):
        hit = (a0 < attr["t_end"]) & (a1 > attr["t_start"] + attr["compute_s"]) \
            & (excess > 1e-3)
        assert not hit.any() or (attr.loc[hit, "rto_stall_s"] > 0).all(), (a0, a1)
    # a stall is a silence of at least the RTO floor, so where the excess allows it an
    # iteration is charged at least that much
    excess = charged["duration_s"] - charged["compute_s"] - charged["transfer_at_bound_s"] \
        - charged["schedule_s"]
    assert (charged["rto_stall_s"] >= excess.clip(upper=RTO_FLOOR_S) - 1e-3).all()
    parts = ["compute_s", "transfer_at_bound_s", "schedule_s", "rto_stall_s",
             "loss_recovery_s", "straggler_wait_s", "unexplained_s"]
    assert (attr[parts].sum(axis=1) - attr["duration_s"]).abs().max() < 1e-6


def test_the_report_says_what_the_network_cost(shallow_ps_run):
    metrics = json.loads((shallow_ps_run / "metrics.json").read_text())
    cost = metrics["cost"]
    assert cost["bound_s"] > 0 and "sync PS" in cost["formula"]
    assert "over the bound" in cost["sentence"]
    html = (shallow_ps_run / "report.html").read_text()
    assert "What the network cost the job" in html
    assert html_escape(cost["sentence"]) in html
    assert "attribution.png" in metrics["plots"]


def test_ring_runs_at_its_bound_apart_from_fast_recoveries(ring_run):
    cost = json.loads((ring_run / "metrics.json").read_text())["cost"]
    assert cost["available"], cost
    assert "ring all-reduce" in cost["formula"] and cost["bottleneck"] == "host link"
    # The bound carries the framing (1514-byte frames for 1448 payload bytes, plus the
    # ACKs of the incoming flow: f' = 1.068); benchmarks/allreduce_efficiency.py measures
    # this ring at 1.070-1.096 of the unframed bound, i.e. 1.00-1.03 of this one. The
    # communication also holds the iteration's bookkeeping around the all-reduce.
    # What the attribution names as network events (RTO stalls, loss recovery) comes off
    # first: a CI run once lost one packet to a busy datapath and its 200 ms RTO made the
    # ratio 1.21. Whatever is left is the ring at its bound: within the target's 11 %.
    events = (cost["rto_stall_s"] + cost["loss_recovery_s"]) / cost["bound_s"]
    # the attribution charges an iteration at most its excess over the bound, so what is
    # left cannot fall below the bound (3 % for an iteration that beat it by its timers)
    assert 0.97 <= cost["ratio"] - events, cost
    # The upper limit needs a machine that keeps up: the userspace datapath forwards every
    # packet on the CPU, so a saturated machine slows the ring with no loss at all (seen
    # with one core held half busy: every iteration 1.4-1.6 s against 1.03 s, ovs-vswitchd
    # given 44 % of a core where it takes 79 % on a quiet run, recovery 0.08 of the bound,
    # the rest unexplained: ratio 1.53). The run records that (manifest cpu.saturated);
    # then the limit is not the ring's to meet, and what the product owes is to say so.
    cpu = json.loads((ring_run / "manifest.json").read_text())["cpu"]
    # This job (4 ranks, their captures, ovs-vswitchd at ~0.74 of a core) keeps a quiet
    # 2-core machine 0.80-0.82 busy. Busier means other load (or the hypervisor's steal, which
    # counts as busy) took CPU the datapath needed,
    # which the product's saturation rule (>= 95 %) does not flag: a CI run at 0.876 busy
    # measured 1.64 with 140 losses and 0.54 s a step unexplained. The target is then the
    # machine's, not the ring's: the report must say so where its rule flags it.
    # The datapath's own signal, beside the CPU samples: a ring's host downlink carries one
    # flow at its sender's link rate, so its queue can fill only with a burst the datapath
    # held back and then forwarded at once, i.e. after ovs-vswitchd fell behind by the
    # queue's drain time (100 packets: 24 ms at 50 Mbit/s). Since the switch ports' socket
    # buffers hold such bursts (incastlab/ovs_buffer.py) the overflow is counted there: a
    # CI run 0.847 busy, not flagged, had 110 drops at three host downlinks and measured
    # 1.39 (1.23 after twice its recovery).
    # (from the queue summary: tables/reconciliation_ports.csv is not written for a run
    # with no drop and no loss, the very run that should meet the target)
    tables = analyse(ring_run).tables
    queues = tables["queue_summary"]
    downlink_drops = queues.loc[queues["kind"] == "host-downlink", "drops"].sum()
    metrics = json.loads((ring_run / "metrics.json").read_text())
    # the run's own fidelity verdict (analysis/fidelity.py), not a CPU threshold; tc
    # counts the downlink's drops, so the verdict does not see those: kept apart
    kept = kept_up(ring_run)
    headroom = kept and downlink_drops == 0
    if not headroom:
        problems = metrics["problems"]
        assert kept or any(p.startswith("The emulation did not keep up")
                           for p in problems), (cpu, problems)
        # what the datapath lost is charged to the network, not left unexplained
        if metrics["reconciliation"]["capture_losses"]:
            assert cost["loss_recovery_s"] + cost["rto_stall_s"] > 0, cost
    else:
        # A hole stalls its flow for the recovery episode, and the ring's pipeline behind
        # it as long again: every downstream rank waits for the held-up slices, which then
        # arrive no faster than the link. So each charged recovery may cost up to twice its
        # time; a CI run whose datapath lost 244 packets uncounted (122 on a quiet run)
        # with the CPU not flagged measured 1.225 with 8 % recovery and 14 % unexplained.
        # A ring slower than its target by itself, with no loss, still fails.
        assert cost["ratio"] - 2 * events <= 1.11, (cost, cpu)
        # "Almost no loss-recovery time" (issue 10): recovery alone never takes the ring
        # past its target's slack. Seen: 3.0-4.3 % of the bound on a quiet machine, 5.5 %
        # on a CI machine; 8 % only with the CPU saturated (the branch above).
        assert cost["loss_recovery_s"] <= 0.11 * cost["bound_s"], (cost, cpu)
    # Loss recovery. This emulator loses a few packets where no queue counts them (OVS's
    # userspace datapath under CPU load: 20-30 recoveries per 5 iterations on a quiet
    # machine, more on a busy one), so how many recoveries a run has is the machine's. What
    # is the ring's: each is a fast/SACK recovery that ends within a round trip or two (SACK
    # resends every hole at once), not a timer's silence; and the attribution charges an
    # iteration no more recovery than the episodes lasted (every ring flow holds every rank,
    # so per rank the charge is at most the time they covered, over the iterations).
    episodes = pd.read_csv(ring_run / "tables" / "recovery_episodes.csv")
    rtt_max_s = max(g["max_ms"] for g in json.loads((ring_run / "metrics.json").read_text())
                    ["latency"]["groups"] if g["measure"] == "RTT") / 1e3
    fast = episodes[episodes["kind"] == "fast"]
    # A saturated machine's datapath discards whole batches of packets (up to 32, counted
    # nowhere), so one episode may hold tens of holes (49 seen), and PRR resends them at
    # about half the ACK clock: over up to two round trips, the last one's ACK a third
    # (seen with both cores busy: 0.163 s at an RTT of at most 0.083 s; quiet: 0.028 s at
    # 0.046 s). An RTO's silence is an episode of its own kind, not one of these.
    trips = 2 if kept_up(ring_run) else 3
    assert (fast["duration_s"].dropna() <= trips * rtt_max_s + 0.005).all(), (rtt_max_s, fast)
    # an episode the capture never saw end runs to its last retransmission (as charged)
    spans = recovery_intervals(tables["recovery_episodes"], tables["retrans"])
    spans = spans.sort_values("start")[["start", "end"]].to_numpy(dtype=float)
    covered, reach = 0.0, float("-inf")       # length of the union of the episodes
    for start, end in spans:
        covered += max(end - max(start, reach), 0.0)
        reach = max(reach, end)
    iterations = 5
    assert cost["loss_recovery_s"] <= covered / iterations + 1e-9, (cost, covered)


def test_trace_matches_the_worker_logs(ring_run):
    trace = json.loads((ring_run / "trace.json").read_text())
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    for log in sorted((ring_run / "workers").glob("*.jsonl")):
        rank = int(log.stem)
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        logged = [x for x in lines if x["event"] == "iteration"]
        pid = next(p for p, n in names.items() if n.endswith(f"rank {rank}"))
        its = [e for e in events if e.get("pid") == pid and e.get("ph") == "X"
               and e.get("cat") == "iteration"]
        assert [e["name"] for e in its] == [f"iteration {x['iteration']}" for x in logged]
        t0 = trace["otherData"]["t0_epoch_s"]
        starts = [(x["t_start"] - t0) * 1e6 for x in logged]
        assert [e["ts"] for e in its] == pytest.approx(starts, abs=1.0)
    counters = [e for e in events if e.get("ph") == "C"]
    assert counters, "no queue counter tracks"
    ts = [e["ts"] for e in events if "ts" in e]
    assert ts == sorted(ts)
    assert pd.Series(ts).min() >= 0
