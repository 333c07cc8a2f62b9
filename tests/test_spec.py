"""Specs: every shipped spec loads and validates, every invalid case gives its exact
message, overrides, sweeps, round trips. Rootless and fast."""
from pathlib import Path

import pytest

from incastlab.events import actions
from incastlab.jobs import JOBS
from incastlab.spec import (
    SWEEPABLE,
    Placement,
    Spec,
    SpecError,
    Straggler,
    expand_sweep,
    load_spec,
    loads_spec,
    validate,
)

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.toml"))
SHIPPED = {"demo", "ps-incast", "ring-vs-ps", "routing-compare", "straggler-async",
           "classic-incast", "dctcp-queue", "dctcp-incast", "spray-vs-ecmp"}


def errors_of(text: str = "", overrides=(), **kwargs) -> list[str]:
    with pytest.raises(SpecError) as info:
        loads_spec(text, overrides, **kwargs)
    return info.value.errors


def the_error(text: str = "", overrides=(), **kwargs) -> str:
    errors = errors_of(text, overrides, **kwargs)
    assert len(errors) == 1, errors
    return errors[0]


# --- shipped specs ---------------------------------------------------------------------

def test_every_shipped_spec_is_there():
    assert {p.stem for p in SPECS} >= SHIPPED


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_shipped_spec_loads_validates_and_expands(path):
    spec = load_spec(path, allow_sweep=True, capabilities={"netem": False})
    assert spec.run.name == path.stem
    assert spec.run.description, "say what question the spec answers"
    runs = expand_sweep(spec)
    assert runs
    for label, single in runs:
        assert not single.is_sweep
        validate(single, {"netem": False})
        single.make_topology()
        placed = single.placement()
        assert placed.workers
        assert single.capture_interfaces()
        assert "rep=" in label


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_shipped_spec_is_commented(path):
    assert path.read_text().startswith("# "), "open with what the spec asks"


def test_shipped_sweeps_expand_to_the_expected_runs():
    def labels(name):
        spec = load_spec(ROOT / "specs" / f"{name}.toml", allow_sweep=True)
        return [label for label, _ in expand_sweep(spec)]

    assert labels("demo") == ["kind=ps,rep=1", "kind=ring,rep=1", "kind=ps,rep=2",
                              "kind=ring,rep=2"]
    assert labels("ring-vs-ps") == ["kind=ps,rep=1", "kind=ring,rep=1",
                                    "kind=ps,rep=2", "kind=ring,rep=2"]
    assert labels("routing-compare") == [f"policy={p},rep=1" for p in
                                         ("single", "ecmp", "spread", "adaptive")]
    assert labels("straggler-async") == [f"mode={m},rep=1" for m in
                                         ("sync", "async", "ssp", "backup")]
    assert labels("classic-incast") == [
        f"senders={n},rto_min_ms={r},rep=1" for n in (4, 8, 16) for r in (200, 1)]
    assert labels("ps-incast") == ["rep=1"]
    assert labels("dctcp-queue") == [
        f"congestion_control={cc},ecn_threshold_packets={k},rep=1"
        for cc in ("cubic", "dctcp") for k in (20, "off")]
    assert labels("spray-vs-ecmp") == [
        f"spines={n},policy={p},kind={kind},rep=1" for n in (2, 4)
        for p in ("ecmp", "adaptive", "flowlet", "spray") for kind in ("ring", "ps")]
    assert labels("dctcp-incast") == [
        f"congestion_control={cc},ecn_threshold_packets={k},kind={kind},rep=1"
        for cc in ("cubic", "dctcp") for k in (4, "off") for kind in ("incast", "ps")]


def test_ps_incast_spec_places_the_ps_alone_on_leaf_1():
    spec = load_spec(ROOT / "specs/ps-incast.toml")
    placed = spec.placement()
    assert placed == Placement(servers=("h1",), workers=("h3", "h5", "h4", "h6"))
    assert spec.topology.queue_packets == 20
    assert spec.capture_interfaces() == ["h1-eth0", "h3-eth0", "h5-eth0", "h4-eth0",
                                         "h6-eth0", "sp1-eth1", "sp2-eth1"]


def test_shipped_single_run_spec_is_refused_by_plain_run_when_it_sweeps():
    with pytest.raises(SpecError) as info:
        load_spec(ROOT / "specs/routing-compare.toml")
    assert info.value.errors == [
        "this spec is a sweep of 4 runs over routing.policy (4 values): `incastlab run` "
        "does one run; use `incastlab sweep` instead"]
    assert "routing-compare.toml" in str(info.value)


# --- defaults --------------------------------------------------------------------------

def test_defaults_alone_validate():
    spec = load_spec()
    assert spec == Spec(run=spec.run)
    assert spec.run.name == "default"
    assert spec.topology.kind == "leafspine" and spec.topology.host_bw_mbps == 20.0
    assert spec.topology.congestion_control == "cubic"
    assert spec.topology.slow_start_after_idle is True  # the kernel's default
    assert spec.capture.snaplen == 128 and spec.capture.ports == "default"
    assert spec.capture.queue_sample_ms <= 20
    validate(spec, {"netem": False})
    assert spec.placement() == Placement(servers=("h1",), workers=("h3", "h2", "h4"))


def test_empty_tables_are_defaults():
    assert loads_spec("[topology]\n[routing]\n[workload]\n[capture]\n[run]\n") == load_spec()


def test_topology_kwargs_leafspine_and_make_topology():
    spec = loads_spec("[topology]\nspines = 3\nleaves = 4\nhosts_per_leaf = 2\n"
                      "oversubscription = 2\nqueue_packets = 30\n")
    assert spec.topology_kwargs() == {
        "spines": 3, "leaves": 4, "hosts_per_leaf": 2, "host_bw": 20.0, "fabric_bw": None,
        "oversubscription": 2.0, "queue_packets": 30, "delay": None}
    topo = spec.make_topology()
    assert len(topo.switches()) == 7 and len(topo.hosts()) == 8


def test_star_is_sized_from_the_workload_unless_given():
    spec = loads_spec('[topology]\nkind = "star"\n[workload]\nkind = "incast"\nsenders = 6\n')
    assert spec.topology_kwargs() == {"senders": 6, "host_bw": 20.0, "queue_packets": 100,
                                      "delay": None}
    assert spec.placement() == Placement(servers=("h7",),
                                         workers=tuple(f"h{n}" for n in range(1, 7)))
    assert spec.make_topology().receiver == "h7"
    given = loads_spec('[topology]\nkind = "star"\nsenders = 8\n'
                       '[workload]\nkind = "incast"\nsenders = 6\n')
    assert given.topology_kwargs()["senders"] == 8
    assert given.placement().servers == ("h9",)


def test_ring_placement_spreads_from_leaf_1_and_incast_on_leafspine():
    ring = loads_spec('[topology]\nleaves = 3\n[workload]\nkind = "ring"\nworkers = 4\n')
    assert ring.placement() == Placement(servers=(), workers=("h1", "h3", "h5", "h2"))
    incast = loads_spec('[topology]\nleaves = 3\n[workload]\nkind = "incast"\nsenders = 3\n'
                        'ps_leaf = 2\n')
    assert incast.placement() == Placement(servers=("h3",), workers=("h5", "h1", "h4"))


def test_sharded_ps_and_worker_leaves():
    spec = loads_spec("[topology]\nleaves = 3\nhosts_per_leaf = 3\n"
                      "[workload]\nshards = 2\nworkers = 5\nworker_leaves = [3, 2]\n")
    assert spec.placement() == Placement(servers=("h1", "h2"),
                                         workers=("h7", "h4", "h8", "h5", "h9"))


# --- every invalid case, with its exact message ----------------------------------------

@pytest.mark.parametrize("text, message", [
    ('[routing]\npolicy = "ecmpp"\n',
     "routing.policy: 'ecmpp' is not one of single, ecmp, spread, adaptive, spray, "
        "flowlet, app, external"),
    ('[workload]\nmode = "bsp"\n',
     "workload.mode: 'bsp' is not one of sync, async, ssp, backup"),
    ('[workload]\nkind = "allreduce"\n',
     f"workload.kind: 'allreduce' is not one of {', '.join(JOBS)}"),
    ('[topology]\nkind = "fattree"\n', "topology.kind: 'fattree' is not one of leafspine, star"),
    ('[topology]\ncongestion_control = "vegas"\n',
     "topology.congestion_control: 'vegas' is not one of cubic, reno, bbr, dctcp"),
    ('[topology]\nslow_start_after_idle = "no"\n',
     "topology.slow_start_after_idle: 'no' is not true or false"),
    ('[workload]\nimpl = "nccl"\n', "workload.impl: 'nccl' is not one of ring, gloo"),
    ('[workload]\nworkers = "eight"\n',
     "workload.workers: 'eight' is not an integer from 1 to 1000"),
    ("[workload]\nworkers = 2.5\n", "workload.workers: 2.5 is not an integer from 1 to 1000"),
    ("[topology]\nspines = true\n", "topology.spines: True is not an integer from 1 to 99"),
    ("[topology]\nhost_bw_mbps = 0\n",
     "topology.host_bw_mbps: 0 is not a number > 0 and <= 10000 (Mbit/s)"),
    ("[topology]\nhost_bw_mbps = -5.0\n",
     "topology.host_bw_mbps: -5.0 is not a number > 0 and <= 10000 (Mbit/s)"),
    ("[topology]\nfabric_bw_mbps = 0\n",
     "topology.fabric_bw_mbps: 0 is not a number > 0 and <= 10000 (Mbit/s)"),
    ("[topology]\noversubscription = 0.5\n",
     "topology.oversubscription: 0.5 is not a number from 1 to 1000"),
    ("[topology]\nqueue_packets = 0\n",
     "topology.queue_packets: 0 is not an integer from 1 to 100000 (packets)"),
    ('[topology]\ndelay = "2 ms"\n',
     "topology.delay: '2 ms' is not a delay like '2ms', '500us' or '0.1s'"),
    ("[routing]\npoll_interval_s = 0\n",
     "routing.poll_interval_s: 0 is not a number from 0.01 to 60.0 (s)"),
    ('[routing]\npolicy = "adaptive"\npoll_interval_s = 1.0\n',
     "routing.poll_interval_s: 1.0 is not from 0.1 to 0.5 (s), as policy adaptive needs"),
    ("[routing]\nidle_timeout_s = 0\n",
     "routing.idle_timeout_s: 0 is not an integer from 1 to 65535 (s)"),
    ('[routing]\npolicy = "single"\nspine = 3\n',
     "routing.spine: 3 is not a spine of this fabric (1 to 2)"),
    ("[workload]\nlr = 0\n", "workload.lr: 0 is not a number > 0 and <= 10"),
    ("[workload]\nmodel_size = 50\n",
     "workload.model_size: 50 is not an integer from 10000 to 10000000 (parameters)"),
    ("[workload]\nrto_min_ms = 0\n",
     "workload.rto_min_ms: 0 is not a number > 0 and <= 60000 (ms)"),
    ("[capture]\nqueue_sample_ms = 50\n",
     "capture.queue_sample_ms: 50 is not a number > 0 and <= 20 (ms)"),
    ('[capture]\nenabled = "yes"\n', "capture.enabled: 'yes' is not true or false"),
    ("[capture]\nsnaplen = 10\n",
     "capture.snaplen: 10 is not an integer from 64 to 65535 (bytes)"),
    ('[capture]\nports = ["h1-eth0", "eth0; rm -rf /"]\n',
     "capture.ports: ['h1-eth0', 'eth0; rm -rf /'] is not \"default\" or a non-empty list of "
     "distinct interface names like h1-eth0, lf1-eth3, sp2-eth1"),
    ('[capture]\nports = ["h9-eth0"]\n',
     "capture.ports: 'h9-eth0' is not an interface of this fabric "
     "(hosts h1-eth0..h4-eth0; see fabric.json)"),
    ("[run]\nrepetitions = 0\n", "run.repetitions: 0 is not an integer from 1 to 100"),
    ('[run]\nname = "../x"\n',
     "run.name: '../x' is not a name of letters, digits, '.', '_', '-'"),
    ("[run]\nduration_limit_s = -1\n",
     "run.duration_limit_s: -1 is not a number > 0 and <= 86400 (s)"),
    # more workers (+ PS hosts) than hosts
    ("[workload]\nworkers = 4\n",
     "workload.workers: 4 workers + 1 PS host need 5 hosts, but the fabric has 4 "
     "(2 leaves x 2 hosts)"),
    ('[workload]\nkind = "ring"\nworkers = 5\n',
     "workload.workers: 5 ring ranks need 5 hosts, but the fabric has 4 (2 leaves x 2 hosts)"),
    ('[workload]\nkind = "incast"\nsenders = 4\n',
     "workload.senders: 4 senders + 1 receiver need 5 hosts, but the fabric has 4 "
     "(2 leaves x 2 hosts)"),
    ("[workload]\nworkers = 2\nworker_leaves = [1]\n",
     "workload.worker_leaves: 2 workers do not fit on leaves 1, which have 1 free hosts"),
    ('[topology]\nkind = "star"\nsenders = 3\n[workload]\nkind = "incast"\nsenders = 4\n',
     "workload.senders: 4 senders + 1 receiver need 5 hosts, but topology.senders = 3 gives 4"),
    # a PS placed on a missing leaf
    ("[workload]\nps_leaf = 3\n", "workload.ps_leaf: 3 is not a leaf of this fabric (1 to 2)"),
    ('[topology]\nkind = "star"\n[workload]\nps_leaf = 2\n',
     "workload.ps_leaf: 2 is not a leaf of this fabric (a star has leaf 1 only)"),
    ("[workload]\nworker_leaves = [2, 5]\n",
     "workload.worker_leaves: 5 is not a leaf of this fabric (1 to 2)"),
    ("[workload]\nworker_leaves = [2, 2]\n",
     'workload.worker_leaves: [2, 2] is not "spread" or a list of distinct leaf indices >= 1'),
    ("[workload]\nshards = 3\nworkers = 1\n",
     "workload.shards: 3 PS hosts do not fit on leaf 1, which has 2 hosts"),
    # ssp / backup
    ('[workload]\nmode = "ssp"\n',
     "workload.staleness: missing; mode ssp needs an integer >= 0 (steps the fastest worker "
     "may run ahead of the slowest)"),
    ('[workload]\nmode = "ssp"\nstaleness = -1\n',
     "workload.staleness: -1 is not an integer from 0 to 1000 (steps)"),
    ('[workload]\nmode = "backup"\n',
     "workload.backup_workers: missing; mode backup needs an integer from 0 to "
     "workload.workers - 1"),
    ('[workload]\nmode = "backup"\nbackup_workers = 3\n',
     "workload.backup_workers: 3 is not from 0 to 2 (fewer than workload.workers = 3)"),
    ('[workload]\nkind = "ring"\nworkers = 1\n',
     "workload.workers: 1 is not an integer >= 2, as a ring needs"),
    # stragglers
    ("[workload]\nstragglers = [{rank = 4, factor = 2}]\n",
     "workload.stragglers[0].rank: 4 is not a worker rank from 1 to 3 (rank 0 is the PS host)"),
    ("[workload]\nstragglers = [{rank = 0, factor = 2}]\n",  # ranks as check lists them
     "workload.stragglers[0].rank: 0 is not a worker rank from 1 to 3 (rank 0 is the PS host)"),
    ("[workload]\nstragglers = [{rank = 0, factor = 0.5}]\n",
     "workload.stragglers[0].factor: 0.5 is not a number >= 1 (compute-time multiplier)"),
    ("[workload]\nstragglers = [{rank = 0}]\n",
     "workload.stragglers[0].factor: missing; a number >= 1 (compute-time multiplier)"),
    ("[workload]\nstragglers = [{rank = 0, factor = 2}, {rank = 0, factor = 3}]\n",
     "workload.stragglers: rank 0 is listed more than once"),
    ("[workload]\nstragglers = [{rank = 0, factr = 2}]\n", None),  # checked below
    # fabric_bw and oversubscription together
    ("[topology]\nfabric_bw_mbps = 10\noversubscription = 2\n",
     "topology.oversubscription: 2 given together with topology.fabric_bw_mbps = 10; give "
     "one, not both"),
    # the topology's own validation, translated to the field
    ("[topology]\nhosts_per_leaf = 90\nspines = 10\n",
     "topology.hosts_per_leaf: hosts_per_leaf + spines must be at most 99 "
     "(leaf port numbers), got 100"),
    # unknown tables and fields, with suggestions
    ('[routng]\npolicy = "ecmp"\n',
     "routng: unknown table (did you mean 'routing'?); tables are topology, routing, "
     "workload, capture, run"),
    ('[routing]\npolcy = "ecmp"\n',
     "routing.polcy: unknown field (did you mean routing.policy?); [routing] has policy, "
     "poll_interval_s, idle_timeout_s, spine, flowlet_gap_us, app, controller"),
    ('[topology]\npolicy = "ecmp"\n',
     "topology.policy: unknown field (it belongs in [routing]: routing.policy); [topology] "
     "has kind, spines, leaves, hosts_per_leaf, senders, host_bw_mbps, fabric_bw_mbps, "
     "oversubscription, queue_packets, delay, congestion_control, mtu, queue_bytes, "
     "slow_start_after_idle, ecn_threshold_packets, ecn_threshold_bytes"),
    ('policy = "ecmp"\n', "policy: a field outside its table; write it under [routing]"),
    ("routing = 3\n", "routing: 3 is not a table"),
    # a list where no sweep is allowed
    ("[topology]\nleaves = [2, 4]\n",
     "topology.leaves: [2, 4] is a list, but topology.leaves cannot be swept; sweepable fields "
     "are " + ", ".join(SWEEPABLE)),
])
def test_invalid_case_gives_its_exact_message(text, message):
    if message is None:
        errors = errors_of(text)
        assert errors == [
            "workload.stragglers[0].factr: unknown key (did you mean 'factor'?)",
            "workload.stragglers[0].factor: missing; a number >= 1 (compute-time multiplier)"]
        return
    assert the_error(text) == message


def test_delay_needs_netem_only_where_capabilities_say_so():
    text = '[topology]\ndelay = "2ms"\n'
    assert loads_spec(text).topology.delay == "2ms"  # unknown capabilities: not checked
    assert loads_spec(text, capabilities={"netem": True}).topology.delay == "2ms"
    assert the_error(text, capabilities={"netem": False}) == (
        "topology.delay: '2ms' needs netem (sch_netem), which this kernel does not have; "
        "leave topology.delay out here")


def test_capabilities_object_with_as_dict_is_accepted():
    class Caps:
        def as_dict(self):
            return {"netem": False, "datapath": "user"}

    spec = loads_spec('[topology]\ndelay = "1ms"\n')
    with pytest.raises(SpecError):
        validate(spec, Caps())


def test_staleness_given_for_a_non_ssp_mode_is_fine():
    assert loads_spec('[workload]\nmode = "async"\nstaleness = 3\n').workload.staleness == 3


def test_every_problem_is_collected_one_per_line():
    text = ('[topology]\nhost_bw_mbps = 0\n[routing]\npolicy = "ecmpp"\n'
            '[workload]\nworkers = "x"\nmode = "ssp"\n[capture]\nsnaplen = 1\n[colour]\n')
    with pytest.raises(SpecError) as info:
        loads_spec(text, source="bad.toml")
    errors = info.value.errors
    assert errors == [
        "colour: unknown table; tables are topology, routing, workload, capture, run",
        "topology.host_bw_mbps: 0 is not a number > 0 and <= 10000 (Mbit/s)",
        "routing.policy: 'ecmpp' is not one of single, ecmp, spread, adaptive, spray, "
        "flowlet, app, external",
        "workload.workers: 'x' is not an integer from 1 to 1000",
        "capture.snaplen: 1 is not an integer from 64 to 65535 (bytes)",
        "workload.staleness: missing; mode ssp needs an integer >= 0 (steps the fastest "
        "worker may run ahead of the slowest)",
    ]
    assert isinstance(info.value, ValueError)
    assert str(info.value).splitlines() == ["invalid spec (bad.toml):"] + [
        f"  {e}" for e in errors]


def test_bad_toml_and_missing_file(tmp_path):
    assert the_error("[topology\n").startswith("not valid TOML: ")
    with pytest.raises(SpecError, match="cannot read the spec"):
        load_spec(tmp_path / "nope.toml")


# --- overrides --------------------------------------------------------------------------

def test_overrides_apply_and_are_parsed_as_toml_values(tmp_path):
    path = tmp_path / "my spec.toml"
    path.write_text('[topology]\nhosts_per_leaf = 4\n[routing]\npolicy = "single"\n')
    spec = load_spec(path, ["routing.policy=ecmp", "workload.workers=6",
                            "topology.delay=2ms", "capture.enabled=false",
                            "topology.host_bw_mbps=50", "run.description=a b c",
                            "workload.stragglers=[{rank = 1, factor = 3}]"])
    assert spec.routing.policy == "ecmp"
    assert spec.workload.workers == 6
    assert spec.topology.delay == "2ms"
    assert spec.capture.enabled is False
    assert spec.topology.host_bw_mbps == 50.0 and isinstance(spec.topology.host_bw_mbps, float)
    assert spec.run.description == "a b c"
    assert spec.workload.stragglers == [Straggler(rank=1, factor=3.0)]
    assert spec.run.name == "my_spec"


def test_override_of_a_text_field_keeps_the_text():
    spec = load_spec(None, ["run.name=2024", "run.description=true", "run.out_dir=1.5"])
    assert (spec.run.name, spec.run.description, spec.run.out_dir) == ("2024", "true", "1.5")


def test_overrides_are_type_checked():
    assert the_error(overrides=["workload.workers=eight"]) == (
        "workload.workers: 'eight' is not an integer from 1 to 1000")
    assert the_error(overrides=["capture.enabled=yes"]) == (
        "capture.enabled: 'yes' is not true or false")
    assert the_error(overrides=["routing.policy=ecmpp"]) == (
        "routing.policy: 'ecmpp' is not one of single, ecmp, spread, adaptive, spray, "
        "flowlet, app, external")


def test_override_syntax_errors_and_suggestions():
    assert the_error(overrides=["policy=ecmp"]) == (
        "override 'policy=ecmp': expected table.field=value (did you mean 'routing.policy'?)")
    assert the_error(overrides=["routing.policy"]) == (
        "override 'routing.policy': expected table.field=value")
    assert the_error(overrides=["routing.polcy=ecmp"]) == (
        "routing.polcy: unknown field (did you mean routing.policy?); [routing] has policy, "
        "poll_interval_s, idle_timeout_s, spine, flowlet_gap_us, app, controller")


def test_override_list_makes_a_sweep():
    spec = loads_spec("", ['routing.policy=["single","ecmp"]', "workload.workers=[2, 3]"],
                      allow_sweep=True)
    assert spec.swept() == {"routing.policy": ["single", "ecmp"], "workload.workers": [2, 3]}
    with pytest.raises(SpecError, match="use `incastlab sweep`"):
        loads_spec("", ['routing.policy=["single","ecmp"]'])


# --- sweeps -----------------------------------------------------------------------------

def test_sweep_expansion_count_labels_and_seeds():
    spec = loads_spec('[topology]\nhosts_per_leaf = 3\n[routing]\npolicy = ["single", "ecmp"]\n'
                      "[workload]\nworkers = [2, 4]\n[run]\nrepetitions = 2\nseed = 7\n",
                      allow_sweep=True)
    assert spec.is_sweep
    runs = expand_sweep(spec)
    assert [label for label, _ in runs] == [
        "policy=single,workers=2,rep=1", "policy=single,workers=4,rep=1",
        "policy=ecmp,workers=2,rep=1", "policy=ecmp,workers=4,rep=1",
        "policy=single,workers=2,rep=2", "policy=single,workers=4,rep=2",
        "policy=ecmp,workers=2,rep=2", "policy=ecmp,workers=4,rep=2"]
    for label, single in runs:
        assert f"policy={single.routing.policy}," in label
        assert f"workers={single.workload.workers}," in label
        assert single.run.repetitions == 1
        assert single.run.seed == 7 + int(label[-1]) - 1
        assert not single.is_sweep
        single.require_single()
        assert all(c.isalnum() or c in "=,._-" for c in label)
    assert expand_sweep(spec) == runs  # deterministic
    assert spec.routing.policy == ["single", "ecmp"]  # the sweep spec is left alone


def test_sweep_labels_follow_schema_order_not_file_order():
    spec = loads_spec('[workload]\nmode = ["sync", "async"]\n[topology]\n'
                      "queue_packets = [10, 100]\n", allow_sweep=True)
    assert [label for label, _ in expand_sweep(spec)][:2] == [
        "queue_packets=10,mode=sync,rep=1", "queue_packets=10,mode=async,rep=1"]


def test_a_spec_without_lists_expands_to_one_run_and_repetitions_count():
    assert [label for label, _ in expand_sweep(load_spec())] == ["rep=1"]
    spec = loads_spec("[run]\nrepetitions = 3\n", allow_sweep=True)
    assert [label for label, _ in expand_sweep(spec)] == ["rep=1", "rep=2", "rep=3"]
    with pytest.raises(SpecError) as info:
        spec.require_single()
    assert info.value.errors == [
        "this spec is a sweep of 3 runs over run.repetitions = 3: `incastlab run` does one "
        "run; use `incastlab sweep` instead"]


def test_sweep_point_errors_name_the_point():
    errors = errors_of("[workload]\nworkers = [2, 3, 8]\n", allow_sweep=True)
    assert errors == [
        "workload.workers: 8 workers + 1 PS host need 9 hosts, but the fabric has 4 "
        "(2 leaves x 2 hosts) (sweep point workers=8)"]


def test_a_problem_of_every_point_is_said_once():
    errors = errors_of('[routing]\npolicy = ["single", "ecmp"]\n[workload]\nmode = "ssp"\n',
                       allow_sweep=True)
    assert errors == ["workload.staleness: missing; mode ssp needs an integer >= 0 (steps "
                      "the fastest worker may run ahead of the slowest)"]


def test_sweep_list_values_are_checked():
    assert errors_of('[routing]\npolicy = ["single", "ecmpp"]\n', allow_sweep=True) == [
        "routing.policy: 'ecmpp' is not one of single, ecmp, spread, adaptive, spray, "
        "flowlet, app, external"]
    assert errors_of("[routing]\npolicy = []\n", allow_sweep=True) == [
        "routing.policy: [] is an empty sweep; give at least one value"]
    assert errors_of('[routing]\npolicy = ["ecmp", "ecmp"]\n', allow_sweep=True) == [
        "routing.policy: ['ecmp', 'ecmp'] lists 'ecmp' more than once"]


def test_too_big_a_sweep_is_refused():
    text = ("[workload]\nmodel_size = [" + ", ".join(str(10_000 + i) for i in range(60)) +
            "]\n[run]\nrepetitions = 10\n")
    assert errors_of(text, allow_sweep=True) == [
        "run.repetitions: the sweep expands to 600 runs, more than 500"]


def test_float_labels_are_exact():
    spec = loads_spec("[workload]\nrto_min_ms = [1, 0.5, 12345, 0.1000001]\n",
                      allow_sweep=True)
    assert [label for label, _ in expand_sweep(spec)] == [
        "rto_min_ms=1,rep=1", "rto_min_ms=0.5,rep=1", "rto_min_ms=12345,rep=1",
        "rto_min_ms=0.1000001,rep=1"]


def test_sweepable_fields():
    assert set(SWEEPABLE) >= {"routing.policy", "workload.kind", "workload.mode",
                              "workload.workers", "topology.queue_packets",
                              "workload.senders", "workload.rto_min_ms"}


def test_unexpanded_sweep_has_no_topology_or_placement():
    spec = loads_spec('[routing]\npolicy = ["single", "ecmp"]\n', allow_sweep=True)
    with pytest.raises(SpecError, match="expand_sweep"):
        spec.topology_kwargs()
    with pytest.raises(SpecError, match="expand_sweep"):
        spec.placement()


# --- round trip ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_round_trip_through_to_toml(path, tmp_path):
    spec = load_spec(path, allow_sweep=True)
    again = loads_spec(spec.to_toml(), allow_sweep=True)
    assert again == spec
    for _label, single in expand_sweep(spec):
        out = tmp_path / "spec.toml"
        out.write_text(single.to_toml())
        assert load_spec(out) == single


def test_round_trip_keeps_optional_fields_and_stragglers():
    spec = loads_spec('[topology]\ndelay = "2ms"\noversubscription = 2\n'
                      '[workload]\nmode = "ssp"\nstaleness = 0\nrto_min_ms = 1\n'
                      "stragglers = [{rank = 1, factor = 4}, {rank = 3, factor = 1.5}]\n"
                      '[capture]\nports = ["h1-eth0", "lf1-eth1", "sp2-eth1"]\n')
    text = spec.to_toml()
    assert "{ rank = 3, factor = 1.5 }" in text
    assert "fabric_bw_mbps" not in text  # absent stays absent
    assert loads_spec(text) == spec
    assert spec.capture_interfaces() == ["h1-eth0", "lf1-eth1", "sp2-eth1"]


def test_capture_disabled_captures_nothing():
    assert loads_spec("[capture]\nenabled = false\n").capture_interfaces() == []


def test_defaults_agree_with_the_topology_and_controller_modules():
    from incastlab.controller import registry
    from incastlab.topologies import leafspine

    spec = load_spec()
    assert spec.topology.host_bw_mbps == leafspine.DEFAULT_HOST_BW
    assert spec.topology.queue_packets == leafspine.DEFAULT_QUEUE_PACKETS
    assert set(leafspine.TOPOS) == {"leafspine", "star"}
    assert spec.routing.idle_timeout_s == registry.DEFAULT_IDLE_TIMEOUT
    assert errors_of('[routing]\npolicy = "nope"\n') == [
        f"routing.policy: 'nope' is not one of {', '.join(registry.POLICIES)}"]


def test_loading_and_validating_make_no_system_calls(monkeypatch):
    import os
    import subprocess

    def forbidden(*args, **kwargs):
        raise AssertionError("the spec module must not touch the system")

    monkeypatch.setattr(subprocess, "Popen", forbidden)
    monkeypatch.setattr(os, "system", forbidden)
    for path in SPECS:
        spec = load_spec(path, allow_sweep=True, capabilities={"netem": True})
        for _label, single in expand_sweep(spec):
            single.capture_interfaces()


def test_host_tcp_settings_from_the_spec():
    """The spec's host TCP settings, as the runner gives them to the Fabric
    (tests/test_root_logic_units.py: that it does; tests/test_fabric_root.py: that the
    Fabric sets them in every host)."""
    from incastlab.runner import host_tcp
    spec = load_spec(overrides=["topology.slow_start_after_idle=false",
                                "topology.congestion_control=reno"])
    assert host_tcp(spec) == {"congestion_control": "reno", "slow_start_after_idle": False}
    assert host_tcp(load_spec())["slow_start_after_idle"] is True


# --- values of the wrong type never end in a traceback (issue 28) --------------------------
# Each of these raised a Python exception (TypeError, OverflowError) from a cross-field rule
# or an event check that ran on a value its own check had refused, or was accepted while
# invalid; tests/test_spec_properties.py generates such specs from the schema.

TWO_JOBS = (ROOT / "specs" / "two-jobs.toml").read_text()
LINK_FAILURE = (ROOT / "specs" / "link-failure-ecmp.toml").read_text()


@pytest.mark.parametrize("text, error", [
    # TypeError: '>' not supported between instances of 'str' and 'int' (jobs/ps.py)
    ('[workload]\nkind = "ps"\nshards = "2"\n',
     "workload.shards: '2' is not an integer from 1 to 100"),
    # TypeError: unsupported operand type(s) for +: 'dict' and 'int' (multijob.place)
    (TWO_JOBS.replace("leaves = 2\n", "") + "\n[topology.leaves]\nn = 2\n",
     "topology.leaves: {'n': 2} is not an integer from 1 to 99"),
    # TypeError: can only concatenate str (not "int") to str (multijob.place)
    (TWO_JOBS.replace("leaves = 2\n", 'leaves = "2"\n'),
     "topology.leaves: '2' is not an integer from 1 to 99"),
    # TypeError: unhashable type: 'list' (event_spec.event_problems)
    (LINK_FAILURE.replace('action = "link_down"', "action = []"),
     "events[0].action: [] is not one of " + ", ".join(actions())),
    # TypeError: unhashable type: 'list' (netevents: switch_down's switch)
    ('[[events]]\nat_s = 1\naction = "switch_down"\nswitch = ["lf2", "sp1"]\n',
     "events[0].switch: ['lf2', 'sp1'] is not a switch of this fabric (sp1, sp2, lf1, lf2)"),
    # OverflowError: cannot convert float infinity to integer (the events' scene)
    (LINK_FAILURE.replace("iterations = 20", "iterations = inf"),
     "workload.iterations: inf is not an integer from 1 to 100000"),
    # accepted: a delay in other digits than ASCII's, which netem would refuse at run time
    ('[topology]\ndelay = "\u0661ms"\n',
     "topology.delay: '\u0661ms' is not a delay like '2ms', '500us' or '0.1s'"),
    # accepted: a straggler that would never finish a step
    ("[workload]\nstragglers = [{rank = 0, factor = inf}]\n",
     "workload.stragglers[0].factor: inf is not a finite number >= 1 (compute-time "
     "multiplier)"),
], ids=["ps-shards-str", "jobs-leaves-table", "jobs-leaves-str", "event-action-list",
        "event-switch-list", "iterations-inf-with-events", "delay-non-ascii-digit",
        "straggler-factor-inf"])
def test_wrong_types_are_refused_by_name_not_by_a_traceback(text, error):
    assert the_error(text, allow_sweep=True) == error


def test_a_list_at_a_field_that_cannot_be_swept_is_said_once():
    # TypeError: '>' not supported between instances of 'list' and 'int' (jobs/ps.py)
    assert the_error('[workload]\nkind = "ps"\nshards = [1, 2]\n').startswith(
        "workload.shards: [1, 2] is a list, but workload.shards cannot be swept; ")
