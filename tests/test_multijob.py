"""[[jobs]]: several jobs on one fabric (incastlab/multijob.py, analysis/multijob.py).

The spec's validation and placement, the launch plan's ports, and the per-job
attribution of flows and of a port's bytes and losses, on hand-built packet tables
whose answer is known. The real run is tests/test_multijob_root.py.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import multijob as mja
from analysis import pcap as pc
from analysis import synthetic
from incastlab import multijob
from incastlab.spec import SpecError, load_spec, loads_spec

FABRIC = """
[topology]
spines = 2
leaves = 2
hosts_per_leaf = 4
"""


def two(placement="interleaved", ring=4, ps=3, offset=0, extra=""):
    return (FABRIC + f"""
[[jobs]]
kind = "ring"
workers = {ring}
placement = "{placement}"
{extra}
[[jobs]]
kind = "ps"
workers = {ps}
placement = "{placement}"
start_offset_s = {offset}
""")


def problems(text) -> list[str]:
    with pytest.raises(SpecError) as exc:
        loads_spec(text)
    return exc.value.errors


# --- spec ----------------------------------------------------------------------------------

def test_interleaved_deals_hosts_round_robin_across_leaves():
    spec = loads_spec(two("interleaved"))
    ring, ps = multijob.placements(spec)
    # leaf 1 = h1..h4, leaf 2 = h5..h8: dealt lf1, lf2, lf1, lf2, ...; the PS's server first
    assert ring.workers == ("h1", "h5", "h2", "h6") and ring.servers == ()
    assert ps.servers == ("h3",) and ps.workers == ("h7", "h4", "h8")


def test_packed_puts_each_job_on_its_own_leaves():
    spec = loads_spec(two("packed"))
    ring, ps = multijob.placements(spec)
    assert ring.workers == ("h1", "h2", "h3", "h4")
    assert ps.servers == ("h5",) and ps.workers == ("h6", "h7", "h8")
    # a 3-host ring still takes a whole leaf: the PS starts on leaf 2
    ring, ps = multijob.placements(loads_spec(two("packed", ring=3)))
    assert ring.workers == ("h1", "h2", "h3") and ps.servers == ("h5",)


def test_hosts_by_job_and_the_shared_captures():
    spec = loads_spec(two("interleaved"))
    assert multijob.host_jobs(spec) == {"h1": 0, "h5": 0, "h2": 0, "h6": 0,
                                        "h3": 1, "h7": 1, "h4": 1, "h8": 1}
    ifaces = spec.capture_interfaces()
    assert {"sp1-eth1", "sp1-eth2", "sp2-eth1", "sp2-eth2"} <= set(ifaces)
    assert {f"h{n}-eth0" for n in range(1, 9)} <= set(ifaces)


def test_a_jobs_table_is_validated_as_workload_is_naming_the_job():
    errs = problems(two(extra="lr = -1\nwrkers = 2\nworker_leaves = [1]"))
    assert any(e.startswith("jobs[0].lr: -1") for e in errs), errs
    assert any(e.startswith("jobs[0].wrkers: unknown field (did you mean jobs[0].workers?)")
               for e in errs), errs
    assert any(e.startswith("jobs[0].worker_leaves: [[jobs]] places every job") for e in errs)
    # a cross-field rule of the job's own plugin, renamed too
    errs = problems(two().replace('kind = "ps"', 'kind = "ps"\nstragglers = [{rank = 7, '
                                                 'factor = 2}]'))
    assert any(e.startswith("jobs[1].stragglers[0].rank: 7 is not a worker rank") for e in errs)
    assert not any("workload." in e for e in errs), errs


def test_workload_and_jobs_together_are_refused():
    errs = problems(two() + '\n[workload]\nkind = "ring"\n')
    assert any(e.startswith("workload, jobs: both [workload] and [[jobs]]") for e in errs)


def test_job_counts_outside_two_to_three_are_refused_naming_the_limit():
    one = FABRIC + '[[jobs]]\nkind = "ring"\n'
    assert any("needs 2 to 3 jobs" in e for e in problems(one))
    four = FABRIC + '[[jobs]]\nkind = "ring"\nworkers = 2\n' * 4
    assert any(e == "jobs: 4 jobs; at most 3 jobs share a fabric" for e in problems(four))


def test_too_few_hosts_names_what_each_job_needs():
    errs = problems(two("interleaved", ring=5, ps=3))  # 5 + 4 = 9 hosts on 8
    assert any(e.startswith("jobs: the jobs need 9 hosts (jobs[0] (ring) needs 5, jobs[1] "
                            "(ps) needs 4), but the fabric has 8") for e in errs), errs
    # packed: 4 + 4 fit, but a 5-host ring takes two leaves and leaves the PS none
    errs = problems(two("packed", ring=5, ps=2))
    assert any("packed jobs need 3 leaves" in e for e in errs), errs


def test_placements_must_agree_and_offsets_are_checked():
    errs = problems(two().replace('placement = "interleaved"\nstart_offset_s',
                                  'placement = "packed"\nstart_offset_s'))
    assert any(e.startswith("jobs: the jobs give different placements") for e in errs)
    assert any(e.startswith("jobs[1].start_offset_s: -1")
               for e in problems(two(offset=-1))), problems(two(offset=-1))


def test_the_resolved_spec_loads_back_equal():
    spec = loads_spec(two(offset=2.5), name="x")
    assert spec.jobs[1].start_offset_s == 2.5
    again = loads_spec(spec.to_toml(), name="x")
    assert again == spec
    assert "workload" not in spec.to_dict()


def test_the_shipped_spec_is_two_interleaved_jobs():
    spec = load_spec("specs/two-jobs.toml")
    assert [j.kind for j in spec.jobs] == ["ring", "ps"]
    assert {j.placement for j in spec.jobs} == {"interleaved"}


# --- launch plan ---------------------------------------------------------------------------

def test_each_job_launches_its_own_plan_on_its_hosts_with_its_own_ports(tmp_path):
    spec = loads_spec(two("interleaved"))
    ips = synthetic.demo_fabric(leaves=2, hosts_per_leaf=4).ip_by_host()
    ring, ps = multijob.plan(spec, ips, tmp_path)
    assert [la.host for la in ring.launches] == ["h1", "h5", "h2", "h6"]
    assert [la.host for la in ps.launches] == ["h3", "h7", "h4", "h8"]
    assert ring.log_dir == tmp_path / "jobs" / "job-0" / "workers"
    assert str(ps.log_dir) in " ".join(ps.launches[0].argv)
    ring_ports = {a.split(":")[1] for la in ring.launches for a in la.argv
                  if a.startswith("10.0.") and ":" in a}
    ps_ports = {a.split(":")[1] for la in ps.launches for a in la.argv
                if a.startswith("10.0.") and ":" in a}
    assert ring_ports == {"29500"} and ps_ports == {str(29500 + multijob.PORT_STEP)}


def test_shift_ports_moves_every_address_port_and_nothing_else():
    argv = ["--master", "10.0.1.1:29500", "--servers", "10.0.1.2:5001,10.0.1.3:5001",
            "--iterations", "29500"]
    assert multijob.shift_ports(argv, 100) == [
        "--master", "10.0.1.1:29600", "--servers", "10.0.1.2:5101,10.0.1.3:5101",
        "--iterations", "29500"]


# --- attribution ---------------------------------------------------------------------------

IPJ = {"10.0.1.1": 0, "10.0.2.1": 0, "10.0.1.2": 1, "10.0.2.2": 1}


def packets(rows) -> pd.DataFrame:
    """(src, dst, frame_len) rows as a capture's table (addresses as uint32)."""
    return pd.DataFrame({"src": np.array([pc.ip_to_int(s) for s, _, _ in rows], np.uint32),
                         "dst": np.array([pc.ip_to_int(d) for _, d, _ in rows], np.uint32),
                         "frame_len": [n for _, _, n in rows]})


def test_a_flow_belongs_to_the_job_whose_hosts_are_both_its_ends():
    flows = pd.DataFrame({"src": ["10.0.1.1", "10.0.2.2", "10.0.1.1", "10.0.9.9"],
                          "dst": ["10.0.2.1", "10.0.1.2", "10.0.1.2", "10.0.1.1"]})
    assert list(mja.flow_jobs(flows, IPJ)) == [0, 1, "other", "other"]


def test_a_ports_bytes_per_job_add_up_to_its_egress_bytes():
    fabric = synthetic.demo_fabric(leaves=2, hosts_per_leaf=2)  # h1 h2 | h3 h4
    ipj = {"10.0.1.1": 0, "10.0.2.1": 0, "10.0.1.2": 1, "10.0.2.2": 1}
    # sp1-eth2: spine 1's port down to leaf 2; only packets to leaf 2's hosts leave there
    caps = packets([("10.0.1.1", "10.0.2.1", 1514), ("10.0.1.1", "10.0.2.1", 1514),  # job 0
                    ("10.0.1.2", "10.0.2.2", 1000),                                  # job 1
                    ("10.0.1.1", "10.0.2.2", 66),                                    # 0 -> 1
                    ("10.0.2.1", "10.0.1.1", 66),    # toward leaf 1: not this queue
                    ("10.0.2.2", "10.0.1.2", 1514)])  # ditto
    t = mja.port_bytes_by_job(caps, "sp1-eth2", ipj, fabric).set_index("job")
    assert t.loc[0, "bytes"] == 3028 and t.loc[0, "packets"] == 2
    assert t.loc[1, "bytes"] == 1000 and t.loc["other", "bytes"] == 66
    assert t["bytes"].sum() == 3028 + 1000 + 66  # = the port's egress bytes
    # a host's own capture: every packet is its
    h = mja.port_bytes_by_job(caps, "h1-eth0", ipj, fabric).set_index("job")
    assert h["bytes"].sum() == int(caps["frame_len"].sum())


def test_a_ports_losses_per_job_and_the_shared_queue_table():
    ipj = IPJ
    losses = pd.DataFrame({"port": ["sp1-eth2", "sp1-eth2", "sp1-eth2", "lf1-eth1"],
                           "src": ["10.0.1.1", "10.0.1.2", "10.0.1.1", "10.0.2.1"],
                           "dst": ["10.0.2.1", "10.0.2.2", "10.0.2.1", "10.0.1.1"]})
    pl = mja.port_losses_by_job(losses, ipj)
    got = {(r.port, r.job): r.lost for r in pl.itertuples()}
    assert got == {("sp1-eth2", 0): 2, ("sp1-eth2", 1): 1, ("lf1-eth1", 0): 1}
    pb = pd.DataFrame({"port": ["sp1-eth2", "sp1-eth2", "h1-eth0"], "job": [0, 1, 0],
                       "packets": [3, 1, 9], "bytes": [3000, 1000, 9000]})
    shared = mja.shared_queues(pb, pl).set_index(["port", "job"])
    assert ("h1-eth0", "0") not in shared.index  # a host's interface is no switch queue
    assert shared.loc[("sp1-eth2", "0"), "share"] == pytest.approx(0.75)
    assert shared.loc[("sp1-eth2", "0"), "lost"] == 2
    assert shared.loc[("sp1-eth2", "1"), "lost"] == 1
    assert shared.loc[("lf1-eth1", "0"), "bytes"] == 0  # lost there, not captured there


def test_host_jobs_from_the_manifest():
    manifest = {"jobs": [{"index": 0, "hosts": ["h1", "h5"]},
                         {"index": 1, "servers": ["h3"], "workers": ["h7"]}]}
    assert mja.host_jobs(manifest) == {"h1": 0, "h5": 0, "h3": 1, "h7": 1}
    assert mja.host_jobs({}) == {}


# --- together and alone ----------------------------------------------------------------------

def test_a_sweep_runs_each_point_together_and_each_job_alone_on_the_same_hosts(tmp_path):
    from incastlab.spec import expand_sweep

    spec = loads_spec(two() + '\n[run]\nrepetitions = 2\n', allow_sweep=True)
    runs = expand_sweep(spec)
    assert [label for label, _ in runs] == [
        "jobs=together,rep=1", "jobs=alone-0,rep=1", "jobs=alone-1,rep=1",
        "jobs=together,rep=2", "jobs=alone-0,rep=2", "jobs=alone-1,rep=2"]
    alone = dict(runs)["jobs=alone-1,rep=1"]
    assert [e.launch for e in alone.jobs] == [False, True]
    # the PS alone sits on the hosts it has together; nothing starts on the ring's
    ips = synthetic.demo_fabric(leaves=2, hosts_per_leaf=4).ip_by_host()
    planned = multijob.plan(alone, ips, tmp_path)
    assert [pj.index for pj in planned] == [1]
    assert [la.host for la in planned[0].launches] == ["h3", "h7", "h4", "h8"]
    records = multijob.manifest_jobs(alone, planned)
    assert [r["launched"] for r in records] == [False, True]
    assert records[0]["hosts"] == ["h1", "h5", "h2", "h6"]
    # what the run directory's spec.toml says loads back as it ran
    assert loads_spec(alone.to_toml()) == alone
    assert [e.launch for e in loads_spec(alone.to_toml()).jobs] == [False, True]
    assert any("launch at least one" in e
               for e in problems(two().replace('kind = "', 'launch = false\nkind = "')))


def _manifest(launched):
    return {"jobs": [{"index": i, "launched": flag} for i, flag in enumerate(launched)]}


def test_each_jobs_slowdown_is_its_iteration_time_together_over_alone():
    spec = {"topology": {"queue_packets": 50}, "run": {"seed": 1}}
    runs = [
        {"spec": spec, "manifest": _manifest([True, True]),
         "jobs": [{"job": 0, "kind": "ring", "iteration_mean_s": 0.6},
                  {"job": 1, "kind": "ps", "iteration_mean_s": 3.0}]},
        {"spec": {**spec, "run": {"seed": 2}}, "manifest": _manifest([True, True]),
         "jobs": [{"job": 0, "kind": "ring", "iteration_mean_s": 0.8},
                  {"job": 1, "kind": "ps", "iteration_mean_s": 3.0}]},
        {"spec": spec, "manifest": _manifest([True, False]),
         "jobs": [{"job": 0, "kind": "ring", "iteration_mean_s": 0.35}]},
        {"spec": spec, "manifest": _manifest([False, True]),
         "jobs": [{"job": 1, "kind": "ps", "iteration_mean_s": 2.0}]},
    ]
    t = mja.slowdown(runs).set_index("job")
    assert t.loc[0, "together_s"] == pytest.approx(0.7)  # the mean of its two runs
    assert t.loc[0, "slowdown"] == pytest.approx(0.7 / 0.35)
    assert t.loc[1, "slowdown"] == pytest.approx(1.5)
    assert (t.loc[0, "n_together"], t.loc[0, "n_alone"]) == (2, 1)
    assert mja.run_mode(_manifest([False, True])) == "alone-1"
    assert mja.run_mode({}) is None


def test_compare_groups_jobs_runs_by_together_and_alone():
    specs = [{"jobs": [{"kind": "ring", "launch": a}, {"kind": "ps", "launch": b}],
              "topology": {"queue_packets": q}}
             for q in (20, 50) for a, b in ((True, True), (True, False))]
    runs = [{"spec": s, "manifest": _manifest([j["launch"] for j in s["jobs"]])}
            for s in specs]
    assert mja.regroup(runs, ["jobs", "topology.queue_packets"]) == ["topology.queue_packets"]
    assert [r["group"] for r in runs] == [
        "queue_packets=20,jobs=together", "queue_packets=20,jobs=alone-0",
        "queue_packets=50,jobs=together", "queue_packets=50,jobs=alone-0"]


def test_each_jobs_worker_logs_are_inputs_of_the_run(tmp_path):
    # several jobs: the logs are under each job's directory, not workers/: all there is
    # a whole run; one missing is that file, named, not "no workers/*.jsonl"
    from incastlab.analysis.inputs import check_workers
    jobs = [{"index": i, "dir": f"jobs/job-{i}",
             "processes": [{"rank": r, "host": f"h{2 * i + r + 1}"} for r in range(2)]}
            for i in range(2)]
    for i in range(2):
        d = tmp_path / f"jobs/job-{i}/workers"
        d.mkdir(parents=True)
        for r in range(2):
            (d / f"{r}.jsonl").write_text('{"event": "start"}\n')
    states = {x.name: x.state for x in check_workers(tmp_path, None, None, {"jobs": jobs})}
    assert states == {f"jobs/job-{i}/workers/{r}.jsonl": "ok" for i in range(2)
                      for r in range(2)}
    (tmp_path / "jobs/job-1/workers/1.jsonl").unlink()
    states = {x.name: x.state for x in check_workers(tmp_path, None, None, {"jobs": jobs})}
    assert states["jobs/job-1/workers/1.jsonl"] == "missing"
    assert sum(v == "ok" for v in states.values()) == 3


def test_the_cost_finding_gives_each_job_against_its_bound():
    from types import SimpleNamespace

    from incastlab.analysis import findings
    jobs = [{"job": 0, "kind": "ring", "iteration_mean_s": 0.346, "bound_s": 0.256,
             "ratio": 1.35, "ports": [{"port": "lf1-eth1", "lost": 29},
                                      {"port": "sp1-eth1", "lost": 6}]},
            {"job": 1, "kind": "ps", "iteration_mean_s": None, "ports": []}]
    a = SimpleNamespace(metrics={"jobs": jobs}, tables={}, missing={})
    f = findings.cost(a)
    assert f.text == ("Several jobs shared the fabric: job 0 (ring) 0.346 s an iteration, "
                      "1.35× its bound of 0.256 s; most of its losses at lf1-eth1 (29); "
                      "job 1 (ps): no iterations logged.")
