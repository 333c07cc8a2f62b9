"""What the network cost the job, end to end without root: a synthetic run directory
(worker logs, the typed fabric map, the manifest's placement) through the analysis,
which asks the run's job plugin for its bound and splits every iteration. Expected
values are computed by hand below from the framing and the link rates."""
import json

import pytest

from incastlab import jobs
from incastlab.analysis import metrics
from incastlab.commands.common import analyse, build_report
from incastlab.analysis.synthetic import demo_fabric, make_run_dir
from incastlab.jobs.base import Job, Roles

T0 = 1_700_000_000.0
B = 10e6 / 8                       # demo_fabric links: 10 Mbit/s, in bytes/s
F = 1514 / 1448                    # a full-size frame per 1448 payload bytes
F_ACK = (2 * 1514 + 66) / (2 * 1448)   # ... plus one 66-byte ACK frame per two segments


def _place(run, servers, workers):
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["placement"] = {"servers": servers, "workers": workers}
    path.write_text(json.dumps(manifest))


def _ring_logs(hosts, duration, compute, m_bytes=1_000_000, iterations=4):
    logs = {}
    for rank, h in enumerate(hosts):
        ev = [{"event": "start", "role": "ring", "rank": rank, "world_size": len(hosts),
               "mode": "ring", "gradient_bytes": m_bytes, "iface": f"{h}-eth0", "t": T0}]
        ev += [{"event": "iteration", "iteration": i, "t_start": T0 + 2 * i,
                "t_end": T0 + 2 * i + duration, "compute_s": compute, "wait_s": None,
                "allreduce_s": duration - compute, "loss": 1.0} for i in range(iterations)]
        logs[rank] = ev
    return logs


def test_ring_cost_against_a_hand_computed_bound(tmp_path):
    hosts = ["h1", "h2", "h3", "h4"]          # packed: two ring edges cross the spines
    run = make_run_dir(tmp_path / "ring", workers=_ring_logs(hosts, 1.6, 0.1),
                       fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "ring"\nworkers = 4\n')
    _place(run, [], hosts)
    a = analyse(run)
    c = a.metrics["cost"]
    # host link: 2(N-1)/N * M * f' / B; the uplinks carry one edge's bytes per leaf over
    # two spines, half of that, so the host link is the bottleneck
    bound = 2 * 3 / 4 * 1_000_000 * F_ACK / B
    assert c["available"] and c["kind"] == "ring" and c["bottleneck"] == "host link"
    assert c["bound_s"] == pytest.approx(bound, rel=1e-9)
    assert c["ratio"] == pytest.approx((1.6 - 0.1) / bound)
    assert c["compute_s"] == pytest.approx(0.1)
    # no captures: nothing can be called an RTO or a recovery (not known, so null, not
    # 0), the rest is unexplained
    assert c["rto_stall_s"] is None and c["loss_recovery_s"] is None and not c["captures"]
    assert "RTO stalls" not in c["sentence"] and "cannot be told apart" in c["sentence"]
    assert c["unexplained_s"] == pytest.approx(1.6 - 0.1 - bound)
    assert c["network_cost_s"] == pytest.approx(1.6 - 0.1 - bound)
    attr = a.tables["attribution"]
    assert len(attr) == 16
    parts = ["compute_s", "transfer_at_bound_s", "schedule_s", "rto_stall_s",
             "loss_recovery_s", "straggler_wait_s", "unexplained_s"]
    assert (attr[parts].sum(axis=1) - attr["duration_s"]).abs().max() < 1e-9
    head = a.metrics["headline"]
    assert head["bound_s"] == pytest.approx(bound) and head["comm_over_bound"] == c["ratio"]


def test_sync_ps_cost_and_its_schedule(tmp_path):
    # PS h1 on leaf 1, workers h3 and h4 on leaf 2; M = 1 MB; every link 10 Mbit/s
    m = 1_000_000
    logs = {0: [{"event": "start", "role": "server", "rank": 0, "world_size": 3,
                 "mode": "sync", "gradient_bytes": m, "iface": "h1-eth0", "t": T0}]}
    for rank, h in ((1, "h3"), (2, "h4")):
        logs[rank] = [{"event": "start", "role": "worker", "rank": rank, "world_size": 3,
                       "mode": "sync", "gradient_bytes": m, "iface": f"{h}-eth0", "t": T0}]
        logs[rank] += [{"event": "iteration", "iteration": i, "t_start": T0 + 4 * i,
                        "t_end": T0 + 4 * i + 3.5, "compute_s": 0.05, "wait_s": 0.0,
                        "push_s": 1.7, "pull_s": 1.75, "comm_s": 3.45, "loss": 1.0}
                       for i in range(3)]
    run = make_run_dir(tmp_path / "ps", workers=logs, fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "ps"\nmode = "sync"\nworkers = 2\n')
    _place(run, ["h1"], ["h3", "h4"])
    c = analyse(run).metrics["cost"]
    # the chain: N pulls of M/k out of the PS port, then one slice back in
    chain = 2 * m * F / B + m * F / B
    # the app's schedule: a push phase (N*M through the PS port), then a pull phase
    push_then_pull = 2 * (2 * m * F / B)
    assert c["bound_s"] == pytest.approx(chain) and c["bottleneck"] == "shard port"
    assert c["schedule_s"] == pytest.approx(push_then_pull - chain)
    assert c["unexplained_s"] == pytest.approx(3.5 - 0.05 - push_then_pull)
    assert c["network_cost_s"] == pytest.approx(3.5 - 0.05 - push_then_pull)
    assert "schedule adds" in c["sentence"]


def test_a_run_without_placement_says_why_it_has_no_cost(tmp_path):
    run = make_run_dir(tmp_path / "ring", workers=_ring_logs(["h1", "h2"], 1.0, 0.1),
                       fabric=demo_fabric(), t0=T0)
    c = analyse(run).metrics["cost"]
    assert c == {"available": False, "kind": "ring",
                 "reason": "no bound: the run lacks its placement or fabric.json (or the job "
                           "has no cost model)"}


class FlatJob(Job):
    """A toy job whose every iteration has a bound of exactly 1 s."""

    kind = "flat"
    summary = "toy"
    Fields = type("FlatFields", (), {"__dataclass_fields__": {}})
    logged_modes = ("flat",)

    def roles(self, w):
        return Roles(0, w.workers, "ranks")

    def bound(self, a):
        from incastlab.analysis.alphabeta import Bound
        return Bound(1.0, "one second, by decree", {"decree": 1.0}, "decree")

    def attribution_rows(self, a):
        return a.tables["iterations"], []

    def metrics(self):
        return [metrics.Metric("flat_iterations", "flat iterations", "iterations",
                               "Iterations of the toy job.",
                               lambda a: len(a.tables["iterations"]), ("workers",))]


@pytest.fixture
def flat_job():
    from dataclasses import dataclass

    @dataclass
    class FlatFields:
        pass

    FlatJob.Fields = FlatFields
    jobs.register(FlatJob())
    yield
    jobs.unregister("flat")


def test_a_job_defined_outside_gets_its_cost_and_metric_from_the_analysis(tmp_path, flat_job):
    logs = _ring_logs(["h1", "h2"], 1.5, 0.25)
    for ev in logs.values():
        ev[0]["mode"] = "flat"
    run = make_run_dir(tmp_path / "flat", workers=logs, fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "flat"\n')
    _place(run, [], ["h1", "h2"])
    paths = build_report(run, plots=False)
    m = json.loads(paths["metrics"].read_text())
    assert m["cost"]["kind"] == "flat" and m["cost"]["bound_s"] == 1.0
    assert m["cost"]["unexplained_s"] == pytest.approx(1.5 - 0.25 - 1.0)
    assert m["headline"]["flat_iterations"] == 8
    assert "one second, by decree" in paths["report"].read_text()
