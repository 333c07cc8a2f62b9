"""Rootless tests of the launch plans: the spec's placement, ranks and options reach the
apps' command lines, and the apps accept them (argparse runs for real)."""
import subprocess

import pytest

from incastlab.spec import load_spec
from incastlab.workloads import WORKLOADS

FABRIC = {"hosts": [{"name": f"h{n}", "ip": f"10.0.{(n - 1) // 3 + 1}.{(n - 1) % 3 + 1}"}
                    for n in range(1, 10)]}
BASE = ["topology.leaves=3", "topology.hosts_per_leaf=3"]


def _plan(*overrides):
    spec = load_spec(None, BASE + list(overrides))
    return spec, WORKLOADS[spec.workload.kind](spec, FABRIC, "/tmp/w")


def _opt(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_ps_plan_ranks_hosts_and_stragglers():
    spec, plan = _plan("workload.workers=4", "workload.shards=2", "workload.mode=ssp",
                       "workload.staleness=2", "workload.stragglers=[{rank=1, factor=4}]")
    assert [la.role for la in plan] == ["server", "server"] + ["worker"] * 4
    assert [la.host for la in plan] == list(spec.placement().servers + spec.placement().workers)
    first = plan[0].argv
    assert _opt(first, "--master") == ["10.0.1.1:29500"]
    assert _opt(first, "--staleness") == ["2"] and _opt(first, "--shards") == ["2"]
    assert _opt(first, "--slowdown") == ["3:4"], "worker 1 is app rank shards + 1"
    assert _opt(first, "--model-size") == ["0.25"]
    assert all(_opt(la.argv, "--iface") == [f"{la.host}-eth0"] for la in plan)


def test_incast_plan_client_reads_from_every_sender():
    spec, plan = _plan("workload.kind=incast", "workload.senders=3",
                       "workload.rto_min_ms=1")
    client = plan[-1]
    assert client.role == "client" and client.rank == 0
    servers = _opt(client.argv, "--servers")[0].split(",")
    assert len(servers) == 3 and all(s.endswith(":5001") for s in servers)
    assert _opt(client.argv, "--rto-min-ms") == ["1"]


@pytest.mark.parametrize("overrides", [
    ["workload.kind=ps", "workload.mode=backup", "workload.backup_workers=1"],
    ["workload.kind=ps", "workload.mode=async"],
    ["workload.kind=ring", "workload.impl=gloo"],
    ["workload.kind=incast"],
])
def test_apps_accept_the_planned_command_lines(overrides):
    """Each planned argv parses in its app (``--help`` appended stops after parsing
    every option before it)."""
    _spec, plan = _plan(*overrides)
    for launch in plan:
        out = subprocess.run(launch.argv + ["--help"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
