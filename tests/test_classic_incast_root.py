"""Root tier: the classic incast collapse and its fix, a reduced specs/classic-incast.toml.

16 senders on one switch each send a 64 KiB block per round to one receiver through an
8-packet port queue at 200 Mbit/s: a round takes N·block/B = 42 ms at line rate, so a
200 ms RTO_min costs ~5 rounds (collapse) and a 1 ms one almost nothing (recovery), as
in Phanishayee et al. (FAST'08) and Vasudevan et al. (SIGCOMM'09). (With 8 senders no
round timed out here, and with a 20-packet queue only 4-7 of 20: Linux's tail-loss probe
and RACK recovered most tails.)"""
from __future__ import annotations

import pytest

from incastlab.commands.common import analyse, build_report
from tests.rootnet import run_complete

pytestmark = pytest.mark.root
SENDERS, RATE_MBPS, ROUNDS, QUEUE = 16, 200, 20, 8
ROUND_MBIT = SENDERS * 65536 * 8 / 1e6   # one round's blocks: 8.39 Mbit
RTO_FLOOR_S = 0.18   # Linux's 200 ms minimum RTO less timer granularity (analysis.tcp)


def _run(tmp_path_factory, rto_ms):
    run_dir = tmp_path_factory.mktemp(f"incast-rto{rto_ms}")
    manifest = run_complete(run_dir, [
        "topology.kind=star", f"topology.host_bw_mbps={RATE_MBPS}",
        f"topology.queue_packets={QUEUE}", "routing.policy=single", "workload.kind=incast",
        f"workload.senders={SENDERS}", "workload.block_bytes=65536", f"workload.rounds={ROUNDS}",
        f"workload.rto_min_ms={rto_ms}"])
    build_report(run_dir, plots=False)  # no figures: no test here reads them
    a = analyse(run_dir)
    rounds, retrans = a.tables["rounds"], a.tables["retrans"]
    fired = retrans[retrans["event"].astype(bool) & (retrans["kind"] == "rto")] \
        if len(retrans) else retrans
    rto = fired["t"].to_numpy() if len(fired) else []
    hit = [bool(((rto >= t0) & (rto <= t1)).any()) if len(rto) else False
           for t0, t1 in zip(rounds["t_start"].astype(float), rounds["t_end"].astype(float),
                             strict=True)]
    goodputs = rounds["goodput_mbps"].astype(float).tolist()
    # the run's goodput: its rounds' bits over their time (a mean of the rounds' rates
    # would weigh a 40 ms round as much as a 240 ms one)
    secs = (rounds["t_end"].astype(float) - rounds["t_start"].astype(float)).sum()
    run_mbps = float(rounds["bytes"].astype(float).sum()) * 8 / 1e6 / secs
    return {"dir": run_dir, "manifest": manifest, "goodputs": goodputs, "rto_round": hit,
            "run_mbps": run_mbps,
            "silences": fired["gap_s"].astype(float).tolist() if len(fired) else [],
            "summary": (run_dir / "summary.md").read_text()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {rto: _run(tmp_path_factory, rto) for rto in (200, 1)}


def test_collapse_with_200ms_and_recovery_with_1ms(runs):
    slow, fast = runs[200], runs[1]
    for r in (slow, fast):
        assert len(r["goodputs"]) == ROUNDS, r["goodputs"]
    g_slow, g_fast = slow["run_mbps"], fast["run_mbps"]
    timed_out = [g for g, hit in zip(slow["goodputs"], slow["rto_round"], strict=True) if hit]
    print(f"incast goodput over {ROUNDS} rounds, {SENDERS} senders: RTO_min 200 ms "
          f"{g_slow:.1f} Mbit/s ({len(timed_out)} rounds with an RTO: {timed_out}), 1 ms "
          f"{g_fast:.1f} Mbit/s ({sum(fast['rto_round'])} rounds with an RTO)")
    # The mechanism, round by round. A retransmission timeout fires no earlier than
    # RTO_min after the flow fell silent (every silence of the 200 ms run 0.195-0.216 s,
    # of the 1 ms run 1-40 ms: Linux's RTO is srtt + max(4 mdev, RTO_min), and mdev is
    # the machine's jitter, tens of ms on a busy one). Data sent in a round cannot time
    # out before the round started, so a round with a 200 ms timeout lasts at least that
    # silence: at most ROUND_MBIT / RTO_FLOOR_S = 46.6 Mbit/s (31-37 seen, in rounds of
    # 42 ms at line rate + the silence); with RTO_min 1 ms the route's floor is gone
    # (every silence well under it) and no round lasts as long as one 200 ms timeout
    # (its slowest rounds 139 Mbit/s quiet, 79 with one core held half busy).
    # How many rounds lose a tail that only a timeout recovers is the machine's timing
    # (19-20 of 20 seen on some days, 4-17 on others, the original code alike: Linux's
    # tail-loss probe and RACK recover the rest), not the mechanism: at least one must.
    assert timed_out, slow
    assert max(timed_out) <= ROUND_MBIT / RTO_FLOOR_S, timed_out
    assert min(slow["silences"]) >= RTO_FLOOR_S, sorted(slow["silences"])[:3]
    assert sum(fast["rto_round"]) > 0, "RTO_min 1 ms: timeouts still fire, shortly"
    assert max(fast["silences"]) < RTO_FLOOR_S, sorted(fast["silences"])[-3:]
    assert min(fast["goodputs"]) > ROUND_MBIT / RTO_FLOOR_S, fast["goodputs"]
    # So the run's goodput collapses with 200 ms and recovers with 1 ms: most rounds of the
    # first wait out a 200 ms timeout, none of the second does. (Seen: 34.6 against
    # 164.7 Mbit/s quiet; 34.4 against 145.2 with one core held half busy; 39.7 against
    # 111.0, 16 rounds of 20 timed out, with it 70 % busy.)
    # The run-level collapse follows from the rounds that timed out: each lasted at least
    # RTO_FLOOR_S, while every 1 ms round moved its bits faster than that.
    assert g_slow < g_fast, (slow["goodputs"], fast["goodputs"])
    if len(timed_out) >= ROUNDS // 2:
        assert g_slow < 0.5 * g_fast, (slow["goodputs"], fast["goodputs"])
    # How near the line rate the 1 ms run gets is the datapath's CPU (a CI run not
    # flagged by the CPU rule carried 119.8 Mbit/s): asserted again once the run's own
    # fidelity verdict exists (the trust-and-CI issue), not on a fitted fraction.


def test_the_report_states_the_condition_with_the_runs_numbers(runs):
    slow, fast = runs[200]["summary"], runs[1]["summary"]
    assert "RTO_min ≫ N·block/B" in slow
    assert f"{SENDERS} × 64 KiB" in slow and "N·block/B = 41.9 ms" in slow
    assert "RTO_min = 200 ms" in slow and "collapse is expected" in slow
    assert "RTO_min = 1 ms" in fast and "no collapse is expected" in fast
