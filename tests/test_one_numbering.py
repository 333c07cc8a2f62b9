"""One rank numbering (issue 27 item 4): `incastlab check`'s listing, the spec's
straggler rank, the launch plan the apps parse, and the report's labels (fabric picture,
trace) name the same host by the same rank: torch.distributed's rank as the job launches
it, servers first (topologies.placement.Placement.ranks)."""
import json
import re

import pytest

from incastlab import cli
from incastlab.analysis.synthetic import demo_fabric, make_run_dir
from incastlab.apps import ps as ps_app
from incastlab.commands.common import build_report
from incastlab.jobs import job_for
from incastlab.spec import load_spec

T0 = 1_700_000_000.0
# the default fabric of 2 leaves x 2 hosts: PS h1, workers spread h3, h2, h4
SETS = ["workload.kind=ps", "workload.workers=3", "topology.leaves=2",
        "topology.hosts_per_leaf=2", "workload.stragglers=[{rank = 2, factor = 3}]"]


def _check_listing(capsys) -> dict[int, str]:
    """rank -> host as `incastlab check` prints them (every role's line)."""
    assert cli.main(["check", *[w for s in SETS for w in ("--set", s)]]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "(rank:host):" in ln]
    pairs = [p.split(":") for ln in lines for p in ln.split("(rank:host):")[1].split()]
    return {int(r): h for r, h in pairs}


@pytest.fixture
def plan():
    spec = load_spec(None, SETS)
    ips = {h.name: h.ip for h in demo_fabric().hosts}
    return spec, job_for("ps").launches(spec, ips, "/tmp/w")


def test_check_the_straggler_and_the_launch_plan_agree(capsys, plan):
    spec, launches = plan
    listed = _check_listing(capsys)
    assert listed == {la.rank: la.host for la in launches}
    assert listed[0] == spec.placement().servers[0]  # the PS is rank 0
    slowed = []
    for la in launches:
        args = ps_app.parse_args(la.argv[3:])
        assert args.rank == la.rank
        if ps_app.common.slowdown_factor(args, args.rank) != 1.0:
            slowed.append(la.host)
    # the spec's rank 2 slows the host check lists as rank 2, and no other
    assert slowed == [listed[2]] and listed[2] == "h2"


def _run_dir(tmp_path, launches):
    """A run directory as the runner and the apps write it for this plan: the manifest's
    processes, and each process's log under its rank."""
    logs = {}
    for la in launches:
        start = {"event": "start", "role": la.role, "rank": la.rank, "world_size": 4,
                 "mode": "sync", "gradient_bytes": 40_000, "iface": f"{la.host}-eth0",
                 "host": "box", "t": T0}
        its = [{"event": "iteration", "iteration": i, "t_start": T0 + i, "t_end": T0 + i + 0.5,
                "compute_s": 0.1, "comm_s": 0.4, "wait_s": 0.0, "push_s": 0.2,
                "pull_s": 0.2, "model_version": i, "staleness": 0, "loss": 1.0}
               for i in range(3)] if la.role == "worker" else []
        logs[la.rank] = [start] + its
    run = make_run_dir(tmp_path / "run", workers=logs, fabric=demo_fabric(), t0=T0)
    m = json.loads((run / "manifest.json").read_text())
    m["processes"] = [{"rank": la.rank, "host": la.host, "role": la.role} for la in launches]
    (run / "manifest.json").write_text(json.dumps(m))
    return run


def test_the_report_names_each_host_by_checks_rank(capsys, plan, tmp_path):
    _, launches = plan
    listed = _check_listing(capsys)
    paths = build_report(_run_dir(tmp_path, launches), plots=False)
    page = paths["report"].read_text()
    svg = page[page.index("aria-label='fabric picture'"):]
    trace = json.loads((paths["report"].parent / "trace.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    for rank, host in listed.items():
        role = "server" if rank == 0 else "worker"
        # the fabric picture's label under the host's box
        assert re.search(rf">{host}</text><text [^>]*>{role} {rank}</text>", svg), (host, rank)
        assert f"{host} {role} rank {rank}" in names, names
