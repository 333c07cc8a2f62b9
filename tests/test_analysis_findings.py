"""The findings at the top of a report: each sentence's numbers against runs whose truth
is known (analysis/synthetic.py) or hand-made Analysis objects."""
import json
from pathlib import Path

import pandas as pd
import pytest

from incastlab.analysis import findings as fnd
from incastlab.analysis.report import Analysis
from incastlab.commands.common import analyse, build_report
from incastlab.jobs import JOBS
from incastlab.analysis.synthetic import make_demo_run, make_run_dir

T0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "demo"
    truth = make_demo_run(run)
    return run, truth, analyse(run)


def _by_topic(a):
    return {f.topic: f.text for f in fnd.findings(a)}


def test_demo_run_sentences_carry_its_numbers(demo):
    _, truth, a = demo
    f = _by_topic(a)
    assert list(f) == ["queue", "losses", "cost", "trust", "counters"]
    # lf2-eth1 (leaf 2 -> h3, where the PS listens) is full (20 of 20) in the samples at
    # 10, 20, 50, 60, 300 and 310 ms and its drop counter rises in the samples after the
    # losses at 13, 51 and 300 ms (2 each): first at the 20 ms sample
    q = f["queue"]
    assert q.startswith("The worst queue was lf2-eth1 (lf2 → h3, the parameter server's link)")
    assert "its peak, 20 packets (its limit), 10 ms after the start" in q
    assert f"tc counted {truth['tc_drops']} drops there (the first by 20 ms)" in q
    assert (f"full in {truth['episodes']} episodes, {truth['incast_episodes']} of them incast "
            "(up to 2 senders at once)") in q
    assert f"the captures place {truth['losses']} lost packets there" in q
    assert f["losses"] == (
        f"The network lost {truth['losses']} packets (seen in the captures; tc counted "
        f"{truth['tc_drops']} queue drops), and TCP retransmitted {truth['retrans']} packets: "
        f"{truth['fast']} in fast/SACK recovery, {truth['rto']} after {truth['rto_events']} "
        f"timeouts (RTO), {truth['tlp']} tail-loss probe.")
    # 12 iterations (ranks 1 and 2, bounds 0, .03, .27, .33, .66, .75, .85 s; rank 2 ends
    # each 5 ms early): mean 1.67 s / 12 = 0.139 s; rank 1's iterations 1 and 3 (0.24 and
    # 0.33 s) hold the RTOs: 0.285 s against (1.67 - 0.57) / 10 = 0.110 s without;
    # p95 of the 12 sorted durations = 0.325 + 0.45 * 0.005 = 0.327 s
    assert f["cost"] == ("An iteration took 0.139 s on average (95th percentile 0.327 s); "
                         "the 2 iterations with an RTO on the worker's host took 0.175 s "
                         "longer on average than the 10 without.")
    assert f["trust"] == ("Trust: the run completed, the datapath kept up and every input is "
                          "present; tcpdump's drop counts were not recorded.")
    # h1's kernel counted 15 - 10 = 5 retransmitted segments, the captures 4
    assert f["counters"].startswith(f"The captures' retransmissions ({truth['retrans']}) and "
                                    f"the kernels' TcpRetransSegs ({truth['kernel_retrans']}) "
                                    "differ by 1 (the kernel also counts SYN and FIN")


def test_findings_come_first_in_every_output(tmp_path):
    run = tmp_path / "demo"
    make_demo_run(run, status="aborted", reason="Ctrl-C by user")
    paths = build_report(run, plots=False)
    m = json.loads(paths["metrics"].read_text())
    assert 3 <= len(m["findings"]) <= 5
    assert m["findings"][3].startswith("Read this run with care: the run did not complete "
                                       "(aborted: Ctrl-C by user), so its numbers cover only")
    body = paths["report"].read_text().split("<body>", 1)[1]
    # the banner, the title and status line, then the findings, before any warning,
    # the contents and the headline table
    assert body.startswith("<div class='banner' id='status-banner'>RUN ABORTED")
    box = body.index("<div class='findings' id='findings'>")
    assert box < body.index("<ul><li><a href='#s0'>") < body.index("Headline numbers")
    assert body.index("</h1>") < box
    for text in m["findings"]:
        assert text.replace("'", "&#x27;") in body[box:body.index("</div>", box)]
    md = paths["summary"].read_text()
    assert md.startswith("> **RUN ABORTED")
    top = md.index("## Findings")
    assert top < md.index("## Headline numbers")
    assert all(f"- {t}\n" in md[top:md.index("## Headline numbers")] for t in m["findings"])


def test_the_fidelity_verdict_and_capture_drops_are_named_cpu_only_supports(tmp_path):
    run = tmp_path / "shaky"
    make_demo_run(run)
    m = json.loads((run / "manifest.json").read_text())
    m["capture_drops"] = {"h1-eth0": {"dropped_by_kernel": 0, "dropped_by_interface": 0},
                          "h3-eth0": {"dropped_by_kernel": 3, "dropped_by_interface": 0}}
    m["capture_lossy"] = ["h3-eth0"]
    m["cpu"] = {"saturated": True, "rule": "busy >= 95 % in 20 % of samples"}
    # the datapath's own counters: 7 packets its receive socket on lf2-eth1 dropped
    m["fidelity"] = {"counters": {"socket_drops": {"lf2-eth1": 7}}}
    (run / "manifest.json").write_text(json.dumps(m))
    a = analyse(run)
    trust = _by_topic(a)["trust"]
    assert trust.startswith("Read this run with care: the emulation did not keep up (the "
                            "datapath's own counters show 7 drops no queue counted")
    assert "tcpdump dropped 3 packets on h3-eth0, so the captures' losses may be overstated" \
        in trust
    assert "CPU" not in trust  # supporting evidence: in the verdict, not the trust line
    assert a.metrics["fidelity"]["supporting"]["cpu"]["saturated"] is True
    # the problems at the top: tcpdump's (the manifest's) and the verdict's
    assert trust.endswith(f"; the report lists {len(a.problems)} warnings.")
    assert len(a.problems) == 2 and a.problems[1].startswith("The emulation did not keep up")
    # a saturated CPU alone does not make the run untrusted
    m["capture_drops"]["h3-eth0"]["dropped_by_kernel"] = 0
    m["capture_lossy"] = []
    m["fidelity"] = {"counters": {"socket_drops": {}}}
    (run / "manifest.json").write_text(json.dumps(m))
    assert _by_topic(analyse(run))["trust"] == (
        "Trust: the run completed, the datapath kept up (though the CPU was saturated: "
        "supporting evidence only), tcpdump dropped no packet and every input is present.")


def test_bare_run_says_what_is_unknown(tmp_path):
    run = make_run_dir(tmp_path / "bare", status="failed", reason="worker h2 exited 1")
    f = _by_topic(analyse(run))
    assert list(f) == ["queue", "losses", "cost", "trust"]  # no counters: no agreement line
    assert f["queue"] == "Where queues built up is unknown: no queues.csv (or it is empty)."
    assert f["losses"] == ("Packet losses and retransmissions are not known from captures (no "
                           "readable captures in pcap/).")
    assert f["cost"] == "What the network cost the training is unknown: no workers/*.jsonl."
    assert "(failed: worker h2 exited 1)" in f["trust"]
    assert "inputs are missing or damaged: fabric.json, queues.csv, counters/*.json (nstat " \
           "before/after), workers/*.jsonl, pcap/*.pcap (why: below)" in f["trust"]


def test_incast_rounds_and_quiet_queues(tmp_path):
    ev = [{"event": "start", "role": "client", "rank": 0, "mode": "incast", "t": T0}]
    ev += [{"event": "round", "round": r, "t_start": T0 + r, "t_end": T0 + r + 0.5,
            "senders": 4, "block_bytes": 1000, "bytes": 4000, "goodput_mbps": g}
           for r, g in enumerate([10.0, 20.0, 30.0])]
    quiet = [{"t": T0 + k, "switch": "lf1", "port": p, "iface": f"lf1-eth{p}",
              "backlog_bytes": 0, "backlog_pkts": 0, "drops": 0, "overlimits": 0,
              "sent_bytes": k * 1000, "sent_pkts": k, "requeues": 0}
             for k in range(4) for p in (1, 2)]
    run = make_run_dir(tmp_path / "incast", workers={0: ev}, queues=quiet, t0=T0,
                       spec_text='[workload]\nkind = "incast"\n')
    f = _by_topic(analyse(run))
    assert f["queue"] == ("No switch queue held a packet in any sample and none dropped one "
                          "(2 egress ports sampled).")
    assert f["cost"] == ("The incast client received 20 Mbit/s on average over 3 rounds; "
                         "without captures, RTOs per round are unknown.")


def _analysis(**metrics) -> Analysis:
    """A hand-made Analysis holding only what the cost and trust sentences read."""
    a = Analysis(Path("/nonexistent"), {"cpu": {"saturated": False}}, {}, None, "complete",
                 "", T0, T0 + 10, jobs=JOBS)
    a.metrics = {"reconciliation": {"capture_drops": 0}, **metrics}
    return a


def test_cost_sentence_uses_the_attribution_when_there_is_one():
    # attribution.run_summary's shape: per-iteration means (s)
    summary = {"iterations": 10, "measured_s": 2.4, "bound_s": 2.3, "compute_s": 0.05,
               "transfer_at_bound_s": 2.3, "rto_stall_s": 0.0, "loss_recovery_s": 0.03,
               "straggler_wait_s": 0.0, "unexplained_s": 0.02, "network_cost_s": 0.05,
               "network_cost_pct": 100 * 0.05 / 2.4, "below_bound_iterations": 0}
    # communication 2.4 - 0.05 = 2.35 s = 1.02 x the bound
    assert fnd.cost(_analysis(cost=summary)).text == (
        "An iteration took 2.4 s on average: 50 ms of compute and 2.35 s of communication, "
        "1.02× its bound of 2.3 s; the network cost 50 ms (2.1 %) over the bound: RTO "
        "stalls 0 s, loss recovery 30 ms, unexplained 20 ms.")
    summary.update(measured_s=1.0, compute_s=0.1, bound_s=1.0, transfer_at_bound_s=1.0,
                   loss_recovery_s=0, unexplained_s=-0.1, network_cost_s=-0.1,
                   network_cost_pct=-10.0, below_bound_iterations=10, schedule_s=0.2)
    assert fnd.cost(_analysis(cost=summary)).text == (
        "An iteration took 1 s on average: 0.1 s of compute and 0.9 s of communication, "
        "0.9× its bound of 1 s; it ran 0.1 s (10 %) faster than the bound allows, so the "
        "bound's assumptions did not hold; the job's own schedule added 0.2 s.")
    # a run without a cost model: the plain sentence
    a = _analysis(cost={"available": False, "reason": "no bound"}, training={
        "iterations": 2, "mean_s": 1.0, "p95_s": 1.0, "with_rto": {"n": 0},
        "with_loss": {"n": 0}})
    assert fnd.cost(a).text.startswith("An iteration took 1 s on average (95th percentile")


def test_cost_sentence_summarises_the_attribution_table():
    # two iterations whose six parts add up to their durations (1 s and 3 s): means
    # 2 s = 0.1 compute + 0.7 transfer + 0.5 RTO + 0.1 recovery + 0.2 wait + 0.4 rest;
    # the network's cost = 2 - 0.1 - 0.7 - 0.2 = 1 s = 50 %
    a = _analysis()
    a.tables["attribution"] = pd.DataFrame({
        "rank": [1, 1], "iteration": [0, 1], "duration_s": [1.0, 3.0], "bound_s": [0.7, 0.7],
        "compute_s": [0.1, 0.1], "transfer_at_bound_s": [0.7, 0.7], "schedule_s": [0.0, 0.0],
        "rto_stall_s": [0.0, 1.0],
        "loss_recovery_s": [0.0, 0.2], "straggler_wait_s": [0.1, 0.3],
        "unexplained_s": [0.1, 0.7], "below_bound": [False, False],
        "host_ip_known": [True, True]})
    assert fnd.attribution(a)["network_cost_s"] == pytest.approx(1.0)
    # communication 2 - 0.1 = 1.9 s over a bound of 0.7 s = 2.71 x
    assert fnd.cost(a).text == (
        "An iteration took 2 s on average: 0.1 s of compute and 1.9 s of communication, "
        "2.71× its bound of 0.7 s; the network cost 1 s (50 %) over the bound: RTO stalls "
        "0.5 s, loss recovery 0.1 s, unexplained 0.4 s; waiting for stragglers took 0.2 s.")


def test_cost_sentence_without_attribution_compares_lossy_and_clean_iterations():
    training = {"iterations": 8, "mean_s": 1.5, "p95_s": 2.0,
                "with_rto": {"n": 0, "mean_s": None, "extra_s_vs_no_rto": None},
                "without_rto": {"n": 8, "mean_s": 1.5},
                "with_loss": {"n": 3, "mean_s": 1.8, "extra_s_vs_clean": 0.48},
                "clean": {"n": 5, "mean_s": 1.32}}
    assert fnd.cost(_analysis(training=training)).text == (
        "An iteration took 1.5 s on average (95th percentile 2 s); the 3 iterations with a "
        "loss but no RTO took 0.48 s longer on average than the 5 clean ones.")
    training["with_loss"] = {"n": 0, "mean_s": None, "extra_s_vs_clean": None}
    ring = {"bound_s": 1.2, "ratio_mean": 1.25}
    assert fnd.cost(_analysis(training=training, ring=ring, run={"mode": "ring"})).text == (
        "An iteration took 1.5 s on average (95th percentile 2 s); no iteration met a loss or "
        "an RTO; the all-reduce took 1.25× its bound of 1.2 s.")


def test_a_bug_in_the_findings_costs_only_the_findings(tmp_path, monkeypatch):
    run = tmp_path / "bug"
    make_demo_run(run)

    def boom(a):
        raise RuntimeError("injected")
    monkeypatch.setattr(fnd, "cost", boom)
    paths = build_report(run, plots=False)
    m = json.loads(paths["metrics"].read_text())
    assert m["findings"] == []
    assert "findings could not be written (RuntimeError: injected)" in " ".join(m["problems"])
    assert m["headline"]["retransmissions"] == 4


def test_losses_no_queue_counted_and_a_queue_below_its_limit():
    """The numbers of a real CPU-saturated ring run: no queue full or dropping, yet the
    captures saw packets lost."""
    a = _analysis(reconciliation={"tc_drops": 0.0, "capture_losses": 141,
                                  "capture_retrans": 145, "capture_recovery_retrans": 144,
                                  "capture_rto": 0, "capture_rto_retrans": 0, "capture_tlp": 1,
                                  "capture_drops": 0})
    a.tables["queue_summary"] = pd.DataFrame([
        {"iface": "lf2-eth4", "switch": "lf2", "peer": "sp2", "kind": "uplink", "drops": 0.0,
         "max_backlog_pkts": 46.0, "limit_pkts": 100},
        {"iface": "lf1-eth1", "switch": "lf1", "peer": "h1", "kind": "host-downlink",
         "drops": 0.0, "max_backlog_pkts": 12.0, "limit_pkts": 100}])
    a.tables["queues_d"] = pd.DataFrame({
        "t": T0 + pd.Series([8.66, 8.67, 8.68, 9.0]), "iface": ["lf2-eth4"] * 3 + ["lf1-eth1"],
        "backlog_pkts": [30, 46, 46, 12], "d_drops": [0, 0, 0, 0]})
    assert fnd.worst_queue(a).text == (
        "The worst queue was lf2-eth4 (lf2 → sp2): it first reached its peak, 46 packets of "
        "a 100-packet limit, 8.67 s after the start, and no switch queue dropped a packet.")
    assert fnd.losses(a).text == (
        "The network lost 141 packets (seen in the captures; no queue counted a drop, so they "
        "were lost where no counter looks), and TCP retransmitted 145 packets: 144 in "
        "fast/SACK recovery, 1 tail-loss probe.")


def test_cost_sentence_of_the_incast_benchmark_speaks_of_rounds():
    # 4 senders x 256 kB through a 20 Mbit/s port: 0.41 s at the bound; rounds took 0.5 s
    a = _analysis(cost={"available": True, "kind": "incast", "iterations": 5,
                        "measured_s": 0.5, "compute_s": 0.0, "bound_s": 0.41,
                        "network_cost_s": 0.09, "network_cost_pct": 18.0, "rto_stall_s": 0.0,
                        "loss_recovery_s": 0.05, "unexplained_s": 0.04,
                        "below_bound_iterations": 1})
    # 0.5 / 0.41 = 1.22
    assert fnd.cost(a).text == (
        "A round took 0.5 s on average, 1.22× the bound of 0.41 s; the network cost 90 ms "
        "(18 %) over the bound: RTO stalls 0 s, loss recovery 50 ms, unexplained 40 ms "
        "(1 of 5 rounds ran faster than the bound).")


def test_a_comparison_says_what_the_difference_is_made_of(tmp_path):
    """Two groups' cost parts (metrics.json's cost, as analysis/network_cost.py writes it) give
    one sentence each and one for the difference, largest part first."""
    from incastlab.analysis.findings import compare_cost

    def run(name, group, **parts):
        d = tmp_path / name
        d.mkdir()
        cost = {"available": True, "measured_s": sum(parts.values()), "rto_stall_s": 0.0,
                **parts}
        (d / "metrics.json").write_text(json.dumps({"cost": cost}))
        return {"dir": str(d), "group": group}

    ps = dict(compute_s=0.003, transfer_at_bound_s=1.67, schedule_s=0.78,
              straggler_wait_s=0.0, network_cost_s=0.002)
    ring = dict(compute_s=0.007, transfer_at_bound_s=0.57, schedule_s=0.0,
                straggler_wait_s=0.0, network_cost_s=0.04)
    runs = [run("a", "kind=ps", **ps), run("b", "kind=ring", **ring),
            run("c", "kind=ring", **{**ring, "network_cost_s": 0.06})]
    (tmp_path / "d").mkdir()   # a run without metrics.json is left out
    runs.append({"dir": str(tmp_path / "d"), "group": "kind=ring"})
    out = compare_cost(runs)
    assert out[0] == ("kind=ps: an iteration took 2.45 s = 3 ms compute + 1.67 s at the "
                      "bound + 0.78 s the job's own schedule + 0 s waiting for stragglers + "
                      "2 ms the network's cost over the bound (RTO stalls 0 s); mean of 1 "
                      "run(s).")
    assert "mean of 2 run(s)" in out[1] and "+ 50 ms the network's cost" in out[1]
    # 2.455 - 0.627 = 1.828 s: the bound +1.1 s, the schedule +0.78 s, network -48 ms
    assert out[2] == ("kind=ps took 1.83 s longer per iteration than kind=ring (3.92× as "
                      "long): the bound "
                      "+1.1 s, the job's own schedule +0.78 s, the network over the bound "
                      "−48 ms, compute −4 ms.")
