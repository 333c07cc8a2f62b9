"""incastlab/spec.py: the boundary values of every field check, and the paths the first
spec tests left unchecked (benchmarks/mutation_score.py found them by planting bugs):
the messages and sources of SpecError, the name a spec file gives its run, the
capabilities and sweep flag of `load_spec(None)`, sweep labels, the [workload] table
composed from the job registry, interfaces a capture may name, the schema and
`python -m incastlab.spec`. Lists that other work extends (policies, job kinds) are
read from their registries, not copied here."""
import dataclasses
from dataclasses import dataclass

import pytest

from incastlab import jobs
from incastlab.controller import registry as controller_registry
from incastlab.fields import int_check, spec_field
from incastlab.jobs.base import Job, Roles, Straggler
from incastlab.spec import (
    TABLES,
    SpecError,
    expand_sweep,
    load_spec,
    loads_spec,
    main,
    schema_rows,
)
from incastlab.spec import label_value as _label_value
from incastlab.spec import topology_error as _topology_error
from incastlab.topologies import naming


def errors(*overrides, **kw) -> list[str]:
    with pytest.raises(SpecError) as info:
        loads_spec("", list(overrides), **kw)
    return info.value.errors


# ------------------------------------------------------------------ boundaries

# (field, lowest allowed, highest allowed, just below, just above); the docs and
# `python -m incastlab.spec` state these ranges. The fabric's size limits are checked
# with the other sizes set so that the fabric still holds the default workload.
BOUNDS = [
    ("topology.spines", 1, naming.MAX_SPINES - 1, 0, naming.MAX_SPINES + 1),
    ("topology.leaves", 1, naming.MAX_LEAVES, 0, naming.MAX_LEAVES + 1),
    ("topology.hosts_per_leaf", 1, naming.MAX_HOSTS_PER_LEAF - 2, 0, naming.MAX_HOSTS_PER_LEAF),
    ("topology.host_bw_mbps", 1e-6, 10_000, 0, 10_000.001),
    ("topology.fabric_bw_mbps", 1e-6, 10_000, 0, 10_000.001),
    ("topology.oversubscription", 1, 1000, 0.999, 1000.001),
    ("topology.queue_packets", 1, 100_000, 0, 100_001),
    ("routing.poll_interval_s", 0.01, 60, 0.0099, 60.001),
    ("routing.idle_timeout_s", 1, 65_535, 0, 65_536),
    ("routing.spine", 1, 2, 0, naming.MAX_SPINES + 1),
    ("workload.timeout_s", 1e-6, 86_400, 0, 86_400.001),
    ("workload.ps_leaf", 1, 2, 0, naming.MAX_LEAVES + 1),
    ("workload.rto_min_ms", 1e-6, 60_000, 0, 60_000.001),
    ("capture.snaplen", 64, 65_535, 63, 65_536),
    ("capture.queue_sample_ms", 1e-6, 20, 0, 20.001),
    ("run.duration_limit_s", 1e-6, 86_400, 0, 86_400.001),
    ("run.phase_timeout_s", 1e-6, 3600, 0, 3600.001),
    ("run.repetitions", 1, 1, 0, 101),
    ("run.seed", 0, 2**31 - 1, -1, 2**31),
]


@pytest.mark.parametrize("key, low, high, below, above", BOUNDS, ids=[b[0] for b in BOUNDS])
def test_every_range_holds_at_both_ends(key, low, high, below, above):
    extra = {"routing.spine": ["routing.policy=single"],
             "topology.spines": ["topology.hosts_per_leaf=1", "workload.workers=1"],
             "topology.leaves": ["topology.hosts_per_leaf=4"],
             "topology.hosts_per_leaf": ["topology.leaves=4", "topology.spines=1"],
             }.get(key, [])
    for ok in (low, high):
        spec = loads_spec("", [*extra, f"{key}={ok!r}"])
        table, name = key.split(".")
        assert getattr(getattr(spec, table), name) == ok
    for bad in (below, above):
        found = errors(*extra, f"{key}={bad!r}")
        assert any(e.startswith(f"{key}: {bad!r} is not") for e in found), found


def test_adaptive_polling_range_is_its_own():
    low, high = controller_registry.POLICIES["adaptive"].poll_range
    assert (low, high) == (0.1, 0.5)
    for ok in (low, high):
        loads_spec("", ["routing.policy=adaptive", f"routing.poll_interval_s={ok}"])
    for bad in (0.0999, 0.5001):
        assert errors("routing.policy=adaptive", f"routing.poll_interval_s={bad}") == [
            f"routing.poll_interval_s: {bad!r} is not from 0.1 to 0.5 (s), as policy "
            "adaptive needs"]


def test_repetitions_up_to_100_in_a_sweep_and_500_runs_at_most():
    spec = loads_spec("", ["run.repetitions=100"], allow_sweep=True)
    assert len(expand_sweep(spec)) == 100
    assert loads_spec("", ["run.repetitions=100", "topology.queue_packets=[1,2,3,4,5]"],
                      allow_sweep=True).run.repetitions == 100
    assert errors("run.repetitions=100", "topology.queue_packets=[1,2,3,4,5,6]",
                  allow_sweep=True) == [
        "run.repetitions: the sweep expands to 600 runs, more than 500"]


def test_leaf_ports_hold_hosts_and_spines():
    # a leaf's ports are hosts_per_leaf + spines: at most 99 (two-digit port names)
    loads_spec("", ["topology.hosts_per_leaf=97", "topology.spines=2"])
    assert errors("topology.hosts_per_leaf=98", "topology.spines=2") == [
        "topology.hosts_per_leaf: hosts_per_leaf + spines must be at most 99 (leaf port "
        "numbers), got 100"]


def test_single_spine_must_exist():
    assert errors("routing.policy=single", "routing.spine=3") == [
        "routing.spine: 3 is not a spine of this fabric (1 to 2)"]
    # a star has no spines to choose: the field is not checked against it
    loads_spec("", ["routing.policy=single", "routing.spine=3", "topology.kind=star"])


# ------------------------------------------------------------------ errors and sources

def test_spec_error_message_and_source():
    e = SpecError(["a: 1", "b: 2"], "x.toml")
    assert str(e) == "invalid spec (x.toml):\n  a: 1\n  b: 2"
    assert e.errors == ["a: 1", "b: 2"] and e.source == "x.toml"
    assert str(SpecError(["a"])) == "invalid spec:\n  a" and SpecError(["a"]).source is None


def test_sweep_refusals_name_every_axis_and_the_source(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[topology]\nqueue_packets = [10, 20]\n[routing]\npolicy = ["ecmp", '
                    '"spread"]\n[run]\nrepetitions = 2\n')
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.source == str(path)
    assert info.value.errors == [
        "this spec is a sweep of 8 runs over topology.queue_packets (2 values), "
        "routing.policy (2 values), run.repetitions = 2: `incastlab run` does one run; use "
        "`incastlab sweep` instead"]
    sweep = load_spec(path, allow_sweep=True)
    for call in (sweep.topology_kwargs, sweep.make_topology, sweep.placement):
        with pytest.raises(SpecError) as info:
            call()
        assert info.value.errors == ["topology.queue_packets, routing.policy hold sweep "
                                     "lists: expand the spec with expand_sweep() first"]
        assert info.value.source == str(path)


def test_placement_error_keeps_errors_and_source(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("")
    spec = load_spec(path)
    spec.workload.ps_leaf = 5  # changed after validation
    with pytest.raises(SpecError) as info:
        spec.placement()
    assert info.value.errors == ["workload.ps_leaf: 5 is not a leaf of this fabric (1 to 2)"]
    assert info.value.source == str(path)


def test_to_toml_says_what_it_is():
    head = loads_spec("").to_toml().splitlines()[0]
    assert head == "# incastlab spec (format 1), resolved: defaults and overrides applied"


# ------------------------------------------------------------------ load_spec

@pytest.mark.parametrize("stem, name", [
    ("._My spec!", "My_spec_"),      # odd characters become _, leading . _ - go
    ("X-ray", "X-ray"),
    ("...", "default"),
    ("a" * 70, "a" * 64),
])
def test_a_spec_file_names_its_run(tmp_path, stem, name):
    path = tmp_path / f"{stem}.toml"
    path.write_text("")
    assert load_spec(path).run.name == name
    path.write_text('[run]\nname = "mine"\n')
    assert load_spec(path).run.name == "mine"


def test_load_spec_passes_capabilities_and_the_sweep_flag(tmp_path):
    no_netem = {"netem": False}
    for source in (None, tmp_path / "d.toml"):
        if source is not None:
            source.write_text("")
        assert load_spec(source, ["topology.delay=2ms"]).topology.delay == "2ms"
        with pytest.raises(SpecError) as info:
            load_spec(source, ["topology.delay=2ms"], capabilities=no_netem)
        assert info.value.errors == [
            "topology.delay: '2ms' needs netem (sch_netem), which this kernel does not have; "
            "leave topology.delay out here"]
        swept = load_spec(source, ["routing.policy=[\"ecmp\",\"spread\"]"], allow_sweep=True)
        assert swept.routing.policy == ["ecmp", "spread"]
        with pytest.raises(SpecError):
            load_spec(source, ["routing.policy=[\"ecmp\",\"spread\"]"])


def test_unreadable_spec_files(tmp_path):
    for path, why in ((tmp_path / "missing.toml", "No such file"),
                      (tmp_path, "Is a directory")):
        with pytest.raises(SpecError) as info:
            load_spec(path)
        assert info.value.source == str(path)
        assert info.value.errors[0].startswith("cannot read the spec: ") and why in \
            info.value.errors[0]
    binary = tmp_path / "b.toml"
    binary.write_bytes(b'[run]\ndescription = "\xff"\n')
    with pytest.raises(SpecError) as info:
        load_spec(binary)
    assert "cannot read the spec" in info.value.errors[0]
    text = tmp_path / "u.toml"
    text.write_text('[run]\ndescription = "Zürich ✓"\n', encoding="utf-8")
    assert load_spec(text).run.description == "Zürich ✓"


def test_numbers_of_float_fields_become_floats_and_stragglers_objects():
    s = loads_spec("[topology]\nhost_bw_mbps = 20\n[workload]\nrto_min_ms = 5\n"
                   "stragglers = [{rank = 1, factor = 2}]\n")
    assert type(s.topology.host_bw_mbps) is float and s.topology.host_bw_mbps == 20.0
    assert type(s.workload.rto_min_ms) is float
    assert s.workload.stragglers == [Straggler(1, 2.0)]
    assert type(s.workload.stragglers[0].factor) is float
    sweep = loads_spec("", ["workload.rto_min_ms=[10, 20]"], allow_sweep=True)
    assert [type(v) for v in sweep.workload.rto_min_ms] == [float, float]
    assert type(s.topology.queue_packets) is int  # int fields stay ints


# ------------------------------------------------------------------ sweeps

def test_sweep_labels_are_exact_and_filesystem_safe():
    assert _label_value(True) == "true" and _label_value(False) == "false"
    assert _label_value(200.0) == "200" and _label_value(0.5) == "0.5"
    assert _label_value(1e-7) == "1e-07" and _label_value(7) == "7"
    assert _label_value("a/b c:d") == "a_b_c_d"
    spec = loads_spec("", ["topology.queue_packets=[10,20]", "workload.rto_min_ms=[200.0,0.5]",
                           "run.repetitions=2", "run.seed=7"], allow_sweep=True)
    runs = expand_sweep(spec)
    assert [label for label, _ in runs] == [
        f"queue_packets={q},rto_min_ms={r},rep={rep}"
        for rep in (1, 2) for q in (10, 20) for r in ("200", "0.5")]
    assert [s.run.seed for _, s in runs] == [7] * 4 + [8] * 4
    assert all(s.run.repetitions == 1 and not s.is_sweep for _, s in runs)
    assert runs[5][1].topology.queue_packets == 10 and runs[5][1].workload.rto_min_ms == 0.5


# ------------------------------------------------------------------ capture interfaces

def test_capture_interfaces_that_exist_in_the_fabric():
    base = ["capture.ports=[\"{}\"]"]
    for name in ("h4-eth0", "lf1-eth4", "lf2-eth1", "sp2-eth2", "sp1-eth1"):
        loads_spec("", [base[0].format(name)])
    for name in ("h5-eth0", "lf1-eth5", "lf3-eth1", "sp2-eth3", "sp3-eth1"):
        assert errors(base[0].format(name)) == [
            f"capture.ports: '{name}' is not an interface of this fabric "
            "(hosts h1-eth0..h4-eth0; see fabric.json)"]
    # a star: one switch, the receiver last; no spine ports exist
    star = ["topology.kind=star", "workload.kind=incast", "workload.senders=3"]
    loads_spec("", [*star, base[0].format("h4-eth0")])
    assert errors(*star, base[0].format("sp1-eth1"))[0].startswith(
        "capture.ports: 'sp1-eth1' is not an interface of this fabric (hosts h1-eth0..h4-eth0")


def test_default_capture_interfaces():
    ps = loads_spec("", ["workload.workers=3"])
    placed = ps.placement()
    assert ps.capture_interfaces() == [f"{h}-eth0" for h in placed.servers + placed.workers] \
        + ["sp1-eth1", "sp2-eth1"]  # the downlinks toward the PS leaf (leaf 1)
    ring = loads_spec("", ["workload.kind=ring", "workload.workers=4"])
    assert ring.capture_interfaces() == [f"{h}-eth0" for h in ring.placement().workers]
    star = loads_spec("", ["topology.kind=star", "workload.kind=incast", "workload.senders=3"])
    assert star.capture_interfaces() == ["h4-eth0", "h1-eth0", "h2-eth0", "h3-eth0"]
    assert loads_spec("", ["capture.enabled=false"]).capture_interfaces() == []
    assert loads_spec("", ["capture.ports=[\"h2-eth0\"]"]).capture_interfaces() == ["h2-eth0"]


def test_star_size_follows_the_workload():
    s = loads_spec("", ["topology.kind=star", "workload.kind=incast", "workload.senders=5"])
    assert s.topology_kwargs()["senders"] == 5
    s = loads_spec("", ["topology.kind=star", "workload.kind=ring", "workload.workers=2"])
    assert s.topology_kwargs()["senders"] == 1  # 2 ranks: one host sends, one receives
    s = loads_spec("", ["topology.kind=star", "topology.senders=7"])
    assert s.topology_kwargs()["senders"] == 7


def test_topology_errors_name_the_spec_field():
    assert _topology_error("host_bw must be > 0") == "topology.host_bw_mbps: host_bw must be > 0"
    assert _topology_error("fabric_bw x") == "topology.fabric_bw_mbps: fabric_bw x"
    assert _topology_error("give one of a or b") == "topology.oversubscription: give one of a or b"
    assert _topology_error("spines: 0") == "topology.spines: spines: 0"
    assert _topology_error("nonsense here") == "topology: nonsense here"
    assert _topology_error("") == "topology: "


# ------------------------------------------------------------------ the [workload] table

@dataclass
class _PingFields:
    pings: int = spec_field(3, int_check(1, 50), "pings each client sends", sweep=True)


class _PingJob(Job):
    kind = "pingtest"
    summary = "toy job: the workload table grows by its field"
    Fields = _PingFields

    def roles(self, w):
        return Roles(1, w.workers, "clients", "server")


def test_a_registered_job_extends_and_leaves_the_workload_table():
    before = [f.name for f in dataclasses.fields(TABLES["workload"])]
    jobs.register(_PingJob())
    try:
        fields = dataclasses.fields(TABLES["workload"])
        names = [f.name for f in fields]
        # the kind first, then the jobs' own fields in registry order, the rest last
        assert names[0] == "kind" and names[-4:] == ["timeout_s", "ps_leaf",
                                                     "worker_leaves", "rto_min_ms"]
        assert names.index("pings") == len(names) - 5  # the newest job's field last
        meta = {f.name: f.metadata for f in fields}
        assert meta["pings"]["jobs"] == ("pingtest",) and meta["pings"]["sweep"]
        assert meta["timeout_s"]["jobs"] == () and meta["kind"]["jobs"] == ()
        workers_jobs = meta["workers"]["jobs"]
        assert len(workers_jobs) >= 2 and "pingtest" not in workers_jobs
        s = loads_spec("", ["workload.kind=pingtest", "workload.pings=7"])
        assert s.workload.pings == 7
        assert "workload.pings" in {r[0] for r in schema_rows()}
        # every registered job's fields are there, also those after a shared one
        for job in jobs.JOBS.values():
            assert {f.name for f in dataclasses.fields(job.Fields)} <= set(names), job.kind
        # annotations as text (float fields become floats by them) and the table's doc
        cls = TABLES["workload"]
        assert cls.__name__ == "Workload" and cls.__module__ == "incastlab.spec"
        assert cls.__doc__.startswith("``[workload]``: the job and its hosts")
        assert (cls.__annotations__["kind"], cls.__annotations__["pings"],
                cls.__annotations__["rto_min_ms"]) == ("str", "int", "float | None")
        f = loads_spec("", ["workload.kind=pingtest", "workload.rto_min_ms=5"]).workload
        assert type(f.rto_min_ms) is float and f.rto_min_ms == 5.0
        labels = [label for label, _ in expand_sweep(loads_spec(
            "", ["workload.kind=pingtest", "workload.pings=[1,2]"], allow_sweep=True))]
        assert labels == ["pings=1,rep=1", "pings=2,rep=1"]
    finally:
        jobs.unregister("pingtest")
    assert [f.name for f in dataclasses.fields(TABLES["workload"])] == before


def test_a_job_may_not_redeclare_a_common_or_anothers_field():
    @dataclass
    class Clash:
        timeout_s: float = spec_field(1.0, int_check(1, 2), "clash")

    @dataclass
    class Other:
        workers: int = spec_field(3, int_check(1, 9), "another declaration of workers")

    for fields_cls, why in ((Clash, "which is common"), (Other, "which another job declares")):
        job = _PingJob()
        job.kind, job.Fields = "clashtest", fields_cls
        with pytest.raises(TypeError, match=f"job 'clashtest' declares workload.\\w+, {why}"):
            jobs.register(job)
        jobs.unregister("clashtest")  # register added it before the table refused it
    assert "clashtest" not in jobs.JOBS
    assert "timeout_s" in {f.name for f in dataclasses.fields(TABLES["workload"])}


# ------------------------------------------------------------------ schema and CLI

def test_schema_rows_say_default_allowed_and_doc():
    rows = {r[0]: r[1:] for r in schema_rows()}
    assert list(rows)[:2] == ["topology.kind", "topology.spines"]
    assert rows["topology.queue_packets"] == (
        "100", "an integer from 1 to 100000 (packets); sweepable",
        "pfifo limit of every switch egress queue")
    assert rows["topology.delay"] == ("(absent)", "a delay like '2ms', '500us' or '0.1s'",
                                      "one-way delay of every link; needs netem")
    assert rows["routing.policy"][1] == f"one of {', '.join(controller_registry.POLICIES)}" \
        "; sweepable"
    assert rows["capture.ports"][0] == "'default'"
    assert rows["run.name"][1] == "a name of letters, digits, '.', '_', '-'"
    assert rows["routing.app"][0] == "[]"  # a default factory's value
    kinds = ", ".join(k for k, j in jobs.JOBS.items()
                      if "workers" in {f.name for f in dataclasses.fields(j.Fields)})
    assert rows["workload.workers"][2].startswith(f"[{kinds}] ")
    assert not rows["workload.timeout_s"][2].startswith("[")


def test_module_cli(tmp_path, capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["topology.kind", "'leafspine'", "one", "of",
                                           "leafspine,", "star"]
    assert len(out.splitlines()) == 2 * len(schema_rows())
    path = tmp_path / "s.toml"
    path.write_text("[topology]\nqueue_packets = [5, 6]\n")
    assert main([str(path), "run.repetitions=2"]) == 0
    out = capsys.readouterr().out
    assert "queue_packets = [\n    5,\n    6,\n]" in out or "queue_packets = [5, 6]" in out
    assert out.rstrip().splitlines()[-1] == (
        "# runs: queue_packets=5,rep=1 queue_packets=6,rep=1 queue_packets=5,rep=2 "
        "queue_packets=6,rep=2")
    single = tmp_path / "one.toml"
    single.write_text("")
    assert main([str(single)]) == 0
    assert "# runs:" not in capsys.readouterr().out
    assert main([str(single), "topology.queue_packets=0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"invalid spec ({single}):\n  topology.queue_packets: 0 is not")



# ------------------------------------------------------------------ overrides and tables

def test_override_syntax_and_suggestions():
    assert errors("queue_packets=5") == [
        "override 'queue_packets=5': expected table.field=value (did you mean "
        "'topology.queue_packets'?)"]
    assert errors("spines") == [
        "override 'spines': expected table.field=value (did you mean 'topology.spines'?)"]
    assert errors("a.b.c=1") == ["override 'a.b.c=1': expected table.field=value"]
    assert errors(".spines=1") == ["override '.spines=1': expected table.field=value"]
    assert errors("zzzz=1") == ["override 'zzzz=1': expected table.field=value"]
    found = errors("topology.queue_packts=5")
    assert found[0].startswith("topology.queue_packts: unknown field (did you mean "
                               "topology.queue_packets?); [topology] has kind, spines,")
    assert errors("toplogy.spines=2") == [
        f"toplogy: unknown table (did you mean 'topology'?); tables are {', '.join(TABLES)}"]
    # every problem is collected, in the order met
    assert errors("queue_packets=5", "topology.queue_packets=0", "run.seed=-1") == [
        "override 'queue_packets=5': expected table.field=value (did you mean "
        "'topology.queue_packets'?)",
        "topology.queue_packets: 0 is not an integer from 1 to 100000 (packets)",
        "run.seed: -1 is not an integer from 0 to 2147483647"]


def test_tables_and_fields_in_the_wrong_place():
    def errs(text):
        with pytest.raises(SpecError) as info:
            loads_spec(text)
        return info.value.errors
    assert errs("queue_packets = 5\n") == [
        "queue_packets: a field outside its table; write it under [topology]"]
    assert errs("[routing]\nqueue_packets = 5\n")[0].startswith(
        "routing.queue_packets: unknown field (it belongs in [topology]: "
        "topology.queue_packets); [routing] has policy,")
    assert errs("topology = 5\n") == ["topology: 5 is not a table"]
    assert errs("[topologi]\nspines = 2\n") == [
        f"topologi: unknown table (did you mean 'topology'?); tables are {', '.join(TABLES)}"]
    assert errs("[topologi]\nspines = 2\n[routing]\npolcy = 1\n[run]\nseed = -1\n")[1:] == [
        errs("[routing]\npolcy = 1\n")[0], "run.seed: -1 is not an integer from 0 to 2147483647"]


def test_sweep_lists_are_checked_value_by_value():
    from incastlab.spec import SWEEPABLE
    sw = {"allow_sweep": True}
    assert errors("topology.queue_packets=[]", **sw) == [
        "topology.queue_packets: [] is an empty sweep; give at least one value"]
    assert errors("topology.queue_packets=[10,20,10]", **sw) == [
        "topology.queue_packets: [10, 20, 10] lists 10 more than once"]
    assert errors("topology.queue_packets=[10,0,-1]", **sw) == [
        "topology.queue_packets: 0 is not an integer from 1 to 100000 (packets)",
        "topology.queue_packets: -1 is not an integer from 1 to 100000 (packets)"]
    assert errors("topology.leaves=[1,2]", **sw) == [
        "topology.leaves: [1, 2] is a list, but topology.leaves cannot be swept; sweepable "
        f"fields are {', '.join(SWEEPABLE)}"]
    # a problem at some sweep points names them; at every point it is said once
    assert errors("workload.workers=[3,9,10]", **sw) == [
        "workload.workers: 9 workers + 1 PS host need 10 hosts, but the fabric has 4 "
        "(2 leaves x 2 hosts) (sweep point workers=9)",
        "workload.workers: 10 workers + 1 PS host need 11 hosts, but the fabric has 4 "
        "(2 leaves x 2 hosts) (sweep point workers=10)"]
    assert errors("topology.queue_packets=[10,20]", "routing.policy=single",
                  "routing.spine=3", **sw) == [
        "routing.spine: 3 is not a spine of this fabric (1 to 2)"]
    assert errors("routing.policy=[\"single\",\"ecmp\"]", "workload.workers=[2,3]",
                  "routing.spine=3", **sw) == [
        "routing.spine: 3 is not a spine of this fabric (1 to 2) (sweep point "
        "policy=single,workers=2; policy=single,workers=3)"]
    # a bad axis is not expanded: its checks do not multiply
    assert errors("workload.workers=[9,0]", "topology.queue_packets=[1,2]", **sw) == [
        "workload.workers: 0 is not an integer from 1 to 1000"]
    # a bad repetitions value counts as one run per point
    assert errors("run.repetitions=\"x\"", "topology.queue_packets=[1,2]", **sw) == [
        "run.repetitions: 'x' is not an integer from 1 to 100"]


def test_stragglers_in_a_sweep_are_checked_as_data():
    s = loads_spec("", ["workload.stragglers=[{rank=1,factor=2.0}]", "workload.workers=[2,3]"],
                   allow_sweep=True)
    assert s.workload.stragglers == [Straggler(1, 2.0)]
    assert [x.workload.stragglers for _, x in expand_sweep(s)] == [[Straggler(1, 2.0)]] * 2
    found = errors("workload.stragglers=[{rank=5,factor=2.0}]", "workload.workers=[2,3]",
                   allow_sweep=True)
    assert found == [
        "workload.stragglers[0].rank: 5 is not a worker rank from 1 to 2 (rank 0 is the PS "
        "host) (sweep point workers=2)",
        "workload.stragglers[0].rank: 5 is not a worker rank from 1 to 3 (rank 0 is the PS "
        "host) (sweep point workers=3)"]


@pytest.mark.parametrize("overrides, only", [
    (["topology.fabric_bw_mbps=-1", "topology.oversubscription=2"],
     "topology.fabric_bw_mbps: -1 is not a number > 0 and <= 10000 (Mbit/s)"),
    (["topology.fabric_bw_mbps=10", "topology.oversubscription=0"],
     "topology.oversubscription: 0 is not a number from 1 to 1000"),
    (["topology.delay=\"2 ms\""],
     "topology.delay: '2 ms' is not a delay like '2ms', '500us' or '0.1s'"),
    (["routing.policy=single", "routing.spine=0"],
     "routing.spine: 0 is not an integer from 1 to 99"),
    (["routing.policy=single", "topology.spines=0", "routing.spine=2"],
     "topology.spines: 0 is not an integer from 1 to 99"),
    (["routing.policy=app", "routing.app=[\"\"]"],
     "routing.app: '' is not a .py file or a dotted module name"),
    (["workload.ps_leaf=0", "workload.workers=99"],
     "workload.ps_leaf: 0 is not an integer from 1 to 99"),
    (["topology.kind=star", "workload.ps_leaf=0", "workload.workers=99"],
     "workload.ps_leaf: 0 is not an integer from 1 to 99"),
])
def test_a_bad_field_is_said_once_not_again_by_the_checks_that_use_it(overrides, only):
    """Cross-field checks skip fields already found bad: one mistake, one line."""
    assert errors(*overrides, capabilities={"netem": False}) == [only]


def test_a_bad_job_kind_stops_the_job_checks():
    found = errors("workload.kind=nope", "workload.workers=99")
    assert len(found) == 1 and found[0].startswith("workload.kind: 'nope' is not one of ")
