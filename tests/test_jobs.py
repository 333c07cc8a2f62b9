"""Rootless tests of the job plugins: the spec's placement, ranks and options reach the
apps' command lines, the apps' own parsers accept them, and a job defined outside the
package plugs in through the registry alone."""
import importlib
from dataclasses import dataclass

import pytest

from incastlab import jobs
from incastlab.fields import int_check, spec_field
from incastlab.jobs.base import Job, Launch, Roles
from incastlab.spec import SpecError, load_spec, schema_rows

IPS = {f"h{n}": f"10.0.{(n - 1) // 3 + 1}.{(n - 1) % 3 + 1}" for n in range(1, 10)}
BASE = ["topology.leaves=3", "topology.hosts_per_leaf=3"]


def _plan(*overrides):
    spec = load_spec(None, BASE + list(overrides))
    return spec, jobs.job_for(spec.workload.kind).launches(spec, IPS, "/tmp/w")


def _opt(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_ps_plan_ranks_hosts_and_stragglers():
    spec, plan = _plan("workload.workers=4", "workload.shards=2", "workload.mode=ssp",
                       "workload.staleness=2", "workload.stragglers=[{rank=3, factor=4}]")
    assert [la.role for la in plan] == ["server", "server"] + ["worker"] * 4
    assert [la.host for la in plan] == list(spec.placement().servers + spec.placement().workers)
    first = plan[0].argv
    assert _opt(first, "--master") == ["10.0.1.1:29500"]
    assert _opt(first, "--staleness") == ["2"] and _opt(first, "--shards") == ["2"]
    assert _opt(first, "--slowdown") == ["3:4"], "the spec's rank is the app's (servers first)"
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
    assert _opt(client.argv, "--interval") == []  # no pause between rounds by default
    assert _opt(_plan("workload.kind=incast", "workload.interval_s=0.25")[1][-1].argv,
                "--interval") == ["0.25"]
    assert jobs.job_for("incast").expected_progress(spec.workload) == 20
    assert jobs.job_for("incast").progress_event == "round"


@pytest.mark.parametrize("overrides", [
    ["workload.kind=ps", "workload.mode=backup", "workload.backup_workers=1"],
    ["workload.kind=ps", "workload.mode=ssp", "workload.staleness=1", "workload.shards=2",
     "workload.stragglers=[{rank=2, factor=2}]"],
    ["workload.kind=ps", "workload.mode=async"],
    ["workload.kind=ring", "workload.impl=gloo", "workload.stragglers=[{rank=1, factor=3}]"],
    ["workload.kind=incast", "workload.rto_min_ms=1", "workload.interval_s=0.1"],
])
def test_apps_own_parsers_accept_the_planned_command_lines(overrides):
    """Each planned argv is parsed by its app's own parse_args (argparse and the app's
    cross-option checks run for real; a bad flag exits 2 and fails the test)."""
    _spec, plan = _plan(*overrides)
    for launch in plan:
        python, dash_m, module, *args = launch.argv
        assert dash_m == "-m" and module.startswith("incastlab.apps.")
        app = importlib.import_module(module)
        app.parse_args(args)


def test_a_bad_planned_flag_would_fail_the_parser():
    """The check above can fail: the same parser rejects an unknown option."""
    _spec, plan = _plan("workload.kind=ring")
    _python, _m, module, *args = plan[0].argv
    with pytest.raises(SystemExit) as info:
        importlib.import_module(module).parse_args(args + ["--no-such-flag", "1"])
    assert info.value.code == 2


def test_registry_keys_are_the_jobs_kinds():
    assert set(jobs.JOBS) >= {"ps", "ring", "incast"}
    for kind, job in jobs.JOBS.items():
        assert job.kind == kind and isinstance(job, Job)


# --- a job defined here, outside the package ---------------------------------------------

@dataclass
class EchoFields:
    pings: int = spec_field(3, int_check(1, 50), "echo: pings each client sends",
                            sweep=True)


class EchoJob(Job):
    """A toy job: one server and N clients that each run a one-line Python program."""

    kind = "echo"
    summary = "toy job for the plugin test"
    Fields = EchoFields
    progress_event = "ping"

    def roles(self, w):
        return Roles(1, w.workers, "clients", "echo server")

    def check(self, w, ok):
        if ok("workload.pings", "workload.workers") and w.pings < w.workers:
            return [f"workload.pings: {w.pings} is fewer than workload.workers = {w.workers}"]
        return []

    def expected_progress(self, w):
        return w.pings

    def launches(self, spec, ips, out_dir):
        placed = spec.placement()
        server = Launch(placed.servers[0], ["python3", "-c", "pass"], 0, "echo-server", False)
        return [server] + [Launch(h, ["python3", "-c", f"print({ips[placed.servers[0]]!r})"],
                                  rank, "echo-client", True)
                           for rank, h in enumerate(placed.workers, start=1)]


@pytest.fixture
def echo_job():
    jobs.register(EchoJob())
    yield jobs.JOBS["echo"]
    jobs.unregister("echo")


def test_a_job_defined_outside_plugs_in_through_the_registry(echo_job):
    spec = load_spec(None, BASE + ["workload.kind=echo", "workload.pings=5",
                                   "workload.workers=4"])
    assert spec.workload.pings == 5
    placed = spec.placement()
    assert len(placed.servers) == 1 and len(placed.workers) == 4
    plan = echo_job.launches(spec, IPS, "/tmp/w")
    assert [la.role for la in plan] == ["echo-server"] + ["echo-client"] * 4
    assert "workload.pings" in {row[0] for row in schema_rows()}
    # its own cross-field rule and its own field checks, with the field named
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + ["workload.kind=echo", "workload.pings=2",
                                "workload.workers=3"])
    assert info.value.errors == ["workload.pings: 2 is fewer than workload.workers = 3"]
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + ["workload.kind=echo", "workload.pings=0"])
    assert info.value.errors == ["workload.pings: 0 is not an integer from 1 to 50"]
    # its placement errors name its nouns
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + ["workload.kind=echo", "workload.workers=9",
                                "workload.pings=9"])
    assert "9 clients + 1 echo server need 10 hosts" in info.value.errors[0]


def test_an_unregistered_job_is_no_kind_any_more():
    with pytest.raises(SpecError) as info:
        load_spec(None, ["workload.kind=echo"])
    assert info.value.errors[0].startswith(
        f"workload.kind: 'echo' is not one of {', '.join(jobs.JOBS)}")
    assert "echo" not in jobs.JOBS
