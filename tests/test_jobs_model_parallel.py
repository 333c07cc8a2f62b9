"""The pipeline and tensor job plugins without root: their cost models against
hand-computed values, their spec tables and launch plans, and synthetic run directories
(hand-placed spans) through the analysis: bubble, bound, attribution, sections, metrics.

Rates: 20 Mbit/s moves 2,500,000 bytes/s, 10 Mbit/s 1,250,000. F = 1514/1448 (a bulk
flow's frames), FA = (2·1514 + 66)/(2·1448) (plus the ACKs of a flow the other way)."""
from __future__ import annotations

import json

import pytest

from incastlab.jobs.pipeline_bound import bubble_fraction, pipeline_bound
from incastlab.jobs.tensor_bound import tensor_bound
from incastlab.commands.common import analyse, build_report
from incastlab.analysis.synthetic import demo_fabric, make_run_dir
from incastlab.apps import pipeline as pp
from incastlab.apps import tensor as tp
from incastlab.jobs import JOBS
from incastlab.spec import SpecError, load_spec

F = 1514 / 1448
FA = (2 * 1514 + 66) / (2 * 1448)
T0 = 1_700_000_000.0


# ----------------------------------------------------------------------------- cost model

def test_bubble_fraction_by_hand():
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert bubble_fraction(4, 1) == pytest.approx(0.75)
    assert bubble_fraction(2, 1) == pytest.approx(0.5)
    assert bubble_fraction(8, 16) == pytest.approx(7 / 23)
    assert bubble_fraction(1, 5) == 0  # one stage: nothing to wait for
    with pytest.raises(ValueError, match="micro_batches"):
        bubble_fraction(4, 0)


def test_pipeline_bound_on_one_leaf_by_hand():
    """S = 4, M = 8, 14,480 B per message at 20 Mbit/s: 14,480·F = 15,140 wire bytes,
    6.056 ms; 3 boundaries, one message each way on the critical path: 36.336 ms. The
    bubble (S−1)(t_f+t_b) = 3 × 60 ms; the step 11 × 60 ms + 36.336 ms."""
    b = pipeline_bound(4, 8, 14_480, 20.0, fwd_s=0.02, bwd_s=0.04)
    assert b.terms["per_message"] == pytest.approx(0.006056)
    assert b.seconds == pytest.approx(0.036336)
    assert b.terms["schedule"] == pytest.approx(0.18)
    assert b.terms["compute"] == pytest.approx(0.48)
    assert b.terms["step"] == pytest.approx(0.696336)
    assert "0.2727" in b.formula  # (S−1)/(M+S−1) = 3/11


def test_pipeline_bound_across_leaves_and_with_latency():
    """Stages on lf1, lf2, lf2, lf3 with 10 Mbit/s uplinks: boundaries 0 and 2 cross a
    spine at 10 Mbit/s (12.112 ms), boundary 1 stays in lf2 at 20 (6.056 ms); α = 1 ms
    per message adds 2 × 3 ms."""
    leaves = ["lf1", "lf2", "lf2", "lf3"]
    b = pipeline_bound(4, 8, 14_480, 20.0, fwd_s=0.02, bwd_s=0.04, leaves=leaves,
                          fabric_mbps=10.0)
    assert b.seconds == pytest.approx(2 * (0.012112 + 0.006056 + 0.012112))
    assert b.terms["per_message"] == pytest.approx(0.012112)
    lat = pipeline_bound(4, 8, 14_480, 20.0, leaves=leaves, fabric_mbps=10.0,
                            alpha_s=0.001)
    assert lat.seconds == pytest.approx(b.seconds + 0.006)
    assert lat.terms["schedule"] == 0  # no compute given: no bubble
    with pytest.raises(ValueError, match="fabric_mbps"):
        pipeline_bound(2, 1, 1000, 20.0, leaves=["lf1", "lf2"])
    with pytest.raises(ValueError, match="host_mbps"):
        pipeline_bound(3, 1, 1000, [20.0, 20.0])


def test_tensor_bound_bandwidth_dominated_by_hand():
    """T = 2, 1 MB all-reduces at 20 Mbit/s, α = 1 ms, 4 of them: each ring sends
    2(T−1)/T·n = 1 MB per rank: 0.4 s·FA, plus 2(T−1)α = 2 ms."""
    b = tensor_bound(2, 1_000_000, 20.0, collectives=4, alpha_s=0.001)
    one = 0.4 * FA + 0.002
    assert b.terms["per_collective"] == pytest.approx(one)
    assert b.seconds == pytest.approx(4 * one)
    assert b.terms["latency"] == pytest.approx(0.008)
    assert b.terms["bandwidth"] == pytest.approx(4 * 0.4 * FA)
    assert b.bottleneck == "host link"


def test_tensor_bound_latency_dominated_by_hand():
    """T = 4, 8,000 B at 200 Mbit/s (25 MB/s), α = 0.5 ms: bytes 2·3/4·8,000·FA/25e6 =
    0.5128 ms, latency 2·3·0.5 = 3 ms per all-reduce: the latency term sets it."""
    b = tensor_bound(4, 8_000, 200.0, collectives=2, alpha_s=0.0005)
    assert b.terms["per_collective"] == pytest.approx(12_000 * FA / 25e6 + 0.003)
    assert b.bottleneck == "latency"
    assert b.terms["latency"] == pytest.approx(0.006)


# ----------------------------------------------------------------------------- spec, plan

def _spec(*overrides):
    return load_spec(None, list(overrides))


PIPE = ("workload.kind=pipeline", "topology.leaves=4", "topology.hosts_per_leaf=1")
TENSOR = ("workload.kind=tensor", "workload.tensor_ranks=3", "topology.leaves=2",
          "topology.hosts_per_leaf=2")


def test_pipeline_plan_one_stage_per_host_and_the_apps_accept_it():
    spec = _spec(*PIPE, 'workload.schedule="1f1b"', "workload.micro_batches=8",
                 "workload.stragglers=[{rank = 2, factor = 2}]")
    plan = JOBS["pipeline"].launches(spec, {f"h{i}": f"10.0.0.{i}" for i in range(1, 5)},
                                     "/o")
    assert [(p.host, p.rank, p.role) for p in plan] == [
        ("h1", 0, "stage"), ("h2", 1, "stage"), ("h3", 2, "stage"), ("h4", 3, "stage")]
    args = [pp.parse_args(p.argv[3:]) for p in plan]
    assert all(a.schedule == "1f1b" and a.micro_batches == 8 and a.world_size == 4
               for a in args)
    assert args[0].slowdown == [(2, 2.0)] and args[3].master == ("10.0.0.1", 29500)
    assert args[1].iface == "h2-eth0" and args[1].fwd_ms == 20 and args[1].bwd_ms == 40


def test_tensor_plan_and_the_apps_accept_it():
    spec = _spec(*TENSOR, 'workload.impl="gloo"', "workload.layers=3")
    plan = JOBS["tensor"].launches(spec, {f"h{i}": f"10.0.0.{i}" for i in range(1, 5)}, "/o")
    assert [p.host for p in plan] == ["h1", "h3", "h2"]  # spread: leaves alternate
    args = [tp.parse_args(p.argv[3:]) for p in plan]
    assert all(a.impl == "gloo" and a.layers == 3 and a.world_size == 3 for a in args)


@pytest.mark.parametrize("overrides,message", [
    (("workload.stages=4", "workload.layers=3"), "workload.layers: 3 layers cannot fill"),
    (("workload.micro_batches=40", "workload.batch_size=32"),
     "workload.micro_batches: 40 is more than workload.batch_size = 32"),
    (("workload.stragglers=[{rank = 4, factor = 2}]",),
     "workload.stragglers[0].rank: 4 is not a worker rank from 0 to 3"),
    (('workload.schedule="zigzag"',), "workload.schedule: 'zigzag' is not one of gpipe"),
])
def test_pipeline_spec_problems_name_their_field(overrides, message):
    with pytest.raises(SpecError) as info:
        _spec(*PIPE, *overrides)
    assert any(e.startswith(message) for e in info.value.errors), info.value.errors


def test_tensor_needs_hosts_that_exist():
    with pytest.raises(SpecError) as info:
        _spec(*TENSOR, "workload.tensor_ranks=5")
    assert any(e.startswith("workload.tensor_ranks: 5 tensor-parallel ranks need 5 hosts")
               for e in info.value.errors), info.value.errors


def test_shipped_specs_load_and_place():
    for path, kind, runs in (("specs/pipeline-bubbles.toml", "pipeline", 6),
                             ("specs/tensor-placement.toml", "tensor", 2)):
        from incastlab.spec import expand_sweep
        points = expand_sweep(load_spec(path, [], allow_sweep=True))
        assert len(points) == runs
        for _label, spec in points:
            assert spec.workload.kind == kind
            spec.placement()


# ----------------------------------------------------------------------------- analysis

def _place(run, workers):
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["placement"] = {"servers": [], "workers": workers}
    path.write_text(json.dumps(manifest))


def _pipeline_logs(hosts, comm_s, iterations=3, m=2, fwd=0.1, bwd=0.2):
    """Stages' logs whose spans are the GPipe schedule run with message latency comm_s,
    one step a second apart."""
    sim = pp.simulate("gpipe", len(hosts), m, fwd, bwd, comm_s)
    logs = {}
    for s, h in enumerate(hosts):
        ev = [{"event": "start", "role": "stage", "rank": s, "world_size": len(hosts),
               "mode": "gpipe", "gradient_bytes": 4000, "activation_bytes": 14_480,
               "iface": f"{h}-eth0", "t": T0}]
        busy = sum(e - b for _, b, e in sim["spans"][s])
        for i in range(iterations):
            t = T0 + 2 * i
            ev += [{"event": "span", "name": f"{op.kind}{op.mb}", "t": t + b, "dur_s": e - b,
                    "cat": "forward" if op.kind == "F" else "backward", "iteration": i,
                    "micro_batch": op.mb} for op, b, e in sim["spans"][s]]
            ev.append({"event": "iteration", "iteration": i, "t_start": t,
                       "t_end": t + sim["step_s"], "compute_s": busy,
                       "comm_s": sim["step_s"] - busy, "wait_s": None, "busy_s": busy,
                       "idle_s": sim["step_s"] - busy,
                       "loss": 2.0 - 0.1 * i if s == len(hosts) - 1 else None})
        logs[s] = ev
    return logs


def test_pipeline_run_bubble_bound_and_attribution_by_hand(tmp_path):
    """2 stages on h1 (lf1) and h3 (lf2), M = 2, t_f = 0.1 s, t_b = 0.2 s, messages
    0.05 s: the step is (M+S−1)(t_f+t_b) + 2·0.05 = 1.0 s, each stage busy 0.6 s, so the
    bubble is 1 − 1.2/2.0 = 0.4 against (S−1)/(M+S−1) = 1/3. The bound: 14,480 B·F over
    10 Mbit/s each way, 2 × 12.112 ms; the schedule's share the bubble (S−1)(t_f+t_b) =
    0.3 s; the rest of the 0.4 s idle, 0.1 − 0.024224 s, is unexplained."""
    hosts = ["h1", "h3"]
    run = make_run_dir(tmp_path / "pp", workers=_pipeline_logs(hosts, 0.05),
                       fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "pipeline"\nstages = 2\n'
                                 'micro_batches = 2\nfwd_ms = 100.0\nbwd_ms = 200.0\n')
    _place(run, hosts)
    a = analyse(run)
    b = a.tables["pipeline_bubbles"]
    assert list(b["bubble"]) == pytest.approx([0.4] * 3)
    assert list(b["window_s"]) == pytest.approx([1.0] * 3)
    stages = a.tables["pipeline_stages"]
    assert list(stages["bubble"]) == pytest.approx([0.4, 0.4])
    c = a.metrics["cost"]
    assert c["available"] and c["kind"] == "pipeline", c
    assert c["bound_s"] == pytest.approx(2 * 14_480 * F / 1.25e6)
    assert c["schedule_s"] == pytest.approx(0.3)
    assert c["compute_s"] == pytest.approx(0.6)
    assert c["unexplained_s"] == pytest.approx(1.0 - 0.6 - 0.3 - 2 * 14_480 * F / 1.25e6)
    paths = build_report(run)
    m = json.loads(paths["metrics"].read_text())
    assert m["headline"]["pipeline_bubble"] == pytest.approx(0.4)
    assert m["headline"]["pipeline_bubble_model"] == pytest.approx(1 / 3)
    page = paths["report"].read_text()
    assert "Pipeline: per-stage timeline and bubbles" in page
    assert "measured bubble fraction 0.4 " in page
    trace = json.loads((run / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e.get("cat") in ("forward", "backward")]
    assert len(spans) == 2 * 3 * 4 and all(e["tid"] == 3 for e in spans)


def test_pipeline_run_at_the_textbook_bubble(tmp_path):
    """Free messages: the measured bubble is exactly (S−1)/(M+S−1) = 3/7 (S = 4, M = 4)."""
    hosts = ["h1", "h2", "h3", "h4"]
    run = make_run_dir(tmp_path / "pp0", workers=_pipeline_logs(hosts, 0.0, m=4),
                       fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "pipeline"\nstages = 4\n'
                                 'micro_batches = 4\n')
    _place(run, hosts)
    a = analyse(run)
    assert list(a.tables["pipeline_bubbles"]["bubble"]) == pytest.approx([3 / 7] * 3)


def _tensor_logs(hosts, dur, iterations=3, layers=2):
    logs = {}
    for r, h in enumerate(hosts):
        ev = [{"event": "start", "role": "tensor", "rank": r, "world_size": len(hosts),
               "mode": "tensor", "message_bytes": 8_000, "iface": f"{h}-eth0", "t": T0}]
        if r == 0:
            ev.append({"event": "latency", "t": T0, "alpha_s": 0.001})
        for i in range(iterations):
            t = T0 + i
            order = [(k, "fwd") for k in range(layers)] + \
                [(k, "bwd") for k in reversed(range(layers))]
            ev += [{"event": "span", "name": f"all-reduce L{k} {d}", "cat": "allreduce",
                    "t": t + 0.05 * j, "dur_s": dur, "iteration": i, "layer": k,
                    "direction": d, "bytes": 8_000} for j, (k, d) in enumerate(order)]
            ev.append({"event": "iteration", "iteration": i, "t_start": t,
                       "t_end": t + 0.5, "compute_s": 0.5 - 2 * layers * dur,
                       "comm_s": 2 * layers * dur, "wait_s": None, "loss": 2.0 - 0.1 * i})
        logs[r] = ev
    return logs


def test_tensor_run_collectives_against_their_bound_by_hand(tmp_path):
    """T = 2 on h1 (lf1) and h3 (lf2), 8,000 B all-reduces at 10 Mbit/s, α = 1 ms: one
    all-reduce's bound is 8,000·FA/1.25e6 (the host link: the uplinks share 2 spines) +
    2 ms; each measured all-reduce takes 10 ms."""
    hosts = ["h1", "h3"]
    run = make_run_dir(tmp_path / "tp", workers=_tensor_logs(hosts, 0.010),
                       fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "tensor"\ntensor_ranks = 2\n'
                                 'layers = 2\n')
    _place(run, hosts)
    a = analyse(run)
    one = 8_000 * FA / 1.25e6 + 0.002
    t = a.tables["tensor_layers"]
    assert list(zip(t["layer"], t["direction"], strict=True)) == [
        (0, "bwd"), (0, "fwd"), (1, "bwd"), (1, "fwd")]
    assert list(t["bound_s"]) == pytest.approx([one] * 4)
    assert list(t["latency_s"]) == pytest.approx([0.002] * 4)  # 2(T−1)α
    assert list(t["over_bound"]) == pytest.approx([0.010 / one] * 4)
    c = a.metrics["cost"]
    assert c["available"] and c["bound_s"] == pytest.approx(4 * one)
    paths = build_report(run)
    m = json.loads(paths["metrics"].read_text())
    assert m["headline"]["alpha_ms"] == pytest.approx(1.0)
    assert m["headline"]["collective_over_bound"] == pytest.approx(0.010 / one)
    assert "Tensor parallel: per-block collective time vs its α–β bound" in \
        paths["report"].read_text()


def test_a_tensor_run_has_no_pipeline_metrics(tmp_path):
    run = make_run_dir(tmp_path / "ps", workers=_tensor_logs(["h1", "h3"], 0.01),
                       fabric=demo_fabric(), t0=T0)
    m = json.loads(build_report(run, plots=False)["metrics"].read_text())
    assert m["headline"]["pipeline_bubble"] is None
    assert m["headline"]["pipeline_bubble_model"] is None
