"""`incastlab check` and `python -m incastlab.spec`: a spec validated and explained
without running anything (rootless)."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from incastlab import cli, spec as spec_mod
from incastlab.spec import load_spec

REPO = Path(__file__).resolve().parents[1]


def test_check_prints_the_resolved_spec_its_runs_and_the_hosts(capsys):
    path = REPO / "specs" / "ring-vs-ps.toml"
    assert cli.main(["check", str(path), "--set", "workload.workers=4"]) == 0
    out = capsys.readouterr().out
    toml_text, _, tail = out.partition("\n# ")
    resolved = tomllib.loads(toml_text)
    assert resolved["workload"]["workers"] == 4  # --set applied
    assert resolved["workload"]["kind"] == ["ps", "ring"]  # still the sweep
    assert resolved["topology"]["queue_packets"] == 50  # from the file
    assert resolved["run"]["seed"] == load_spec(None).run.seed  # a default filled in
    assert tail.startswith("4 runs")
    labels = [ln[4:] for ln in tail.splitlines()
              if ln.startswith("#   ") and not ln.startswith("#    ")]  # points, not hosts
    assert labels == ["kind=ps,rep=1", "kind=ring,rep=1", "kind=ps,rep=2", "kind=ring,rep=2"]
    # the placement printed is the runner's (Spec.placement) for that point
    ps = load_spec(path, ["workload.workers=4", "workload.kind=ps", "run.repetitions=1"])
    ring = load_spec(path, ["workload.workers=4", "workload.kind=ring", "run.repetitions=1"])
    # ranks as the job launches them (servers first): tests/test_one_numbering.py
    servers, workers = ps.placement().servers, ps.placement().workers
    ranks = " ".join(f"{i}:{h}" for i, h in enumerate(workers, start=len(servers)))
    assert f"parameter servers (rank:host): 0:{servers[0]}" in tail
    assert f"workers (rank:host): {ranks}" in tail
    ranks = " ".join(f"{i}:{h}" for i, h in enumerate(ring.placement().workers))
    assert f"servers: none\n#     workers (rank:host): {ranks}" in tail
    assert tail.count("hosts as in kind=ps,rep=1") == 1  # repetition 2: same hosts


def test_check_of_a_single_run_says_so(capsys):
    assert cli.main(["check", "--set", "workload.kind=incast", "--set", "workload.senders=3"]) == 0
    out = capsys.readouterr().out
    assert "# 1 run (incastlab run)" in out and "receiver (rank:host): 0:" in out


@pytest.mark.parametrize("overrides,field", [
    (["topology.spines=0"], "topology.spines"),
    (["workload.workers=0"], "workload.workers"),
    (["routing.policy=nosuch"], "routing.policy"),
    (["topology.nosuch=1"], "topology.nosuch"),
])
def test_check_refuses_an_invalid_spec_naming_the_field(capsys, overrides, field):
    argv = ["check"] + [w for o in overrides for w in ("--set", o)]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert field in captured.err and captured.out == ""


def test_check_refuses_a_placement_the_fabric_cannot_hold(capsys):
    # 4 hosts, 9 workers: an error about where the workers go, before anything runs
    assert cli.main(["check", "--set", "topology.leaves=2", "--set",
                     "topology.hosts_per_leaf=2", "--set", "workload.workers=9"]) == 2
    assert "workload.workers" in capsys.readouterr().err


def test_check_of_an_unreadable_file(capsys, tmp_path):
    assert cli.main(["check", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read the spec" in capsys.readouterr().err


def test_spec_module_has_help_and_checks():
    run = [sys.executable, "-m", "incastlab.spec"]
    helped = subprocess.run(run + ["--help"], capture_output=True, text=True, cwd=REPO)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m incastlab.spec")
    assert "schema" in helped.stdout
    bad = subprocess.run(run + [str(REPO / "specs" / "demo.toml"), "topology.spines=0"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "topology.spines" in bad.stderr


def test_spec_module_prints_the_schema_and_a_resolved_spec(capsys):
    assert spec_mod.main([]) == 0
    assert "topology.spines" in capsys.readouterr().out
    assert spec_mod.main([str(REPO / "specs" / "demo.toml"), "workload.iterations=3"]) == 0
    toml_text = capsys.readouterr().out.partition("\n# runs:")[0]
    assert tomllib.loads(toml_text)["workload"]["iterations"] == 3



def test_check_prints_each_jobs_hosts_for_several_jobs(capsys):
    # [[jobs]]: one placement per job (the runner's), not the [workload] default's
    from incastlab import multijob
    path = REPO / "specs" / "two-jobs.toml"
    assert cli.main(["check", str(path)]) == 0
    tail = capsys.readouterr().out.partition("\n# ")[2]
    assert tail.startswith("3 runs (a sweep: incastlab sweep)")
    spec = load_spec(path)
    for i, (entry, placed) in enumerate(zip(spec.jobs, multijob.placements(spec),
                                            strict=True)):
        ranks = " ".join(f"{r}:{h}" for r, h in enumerate(placed.workers,
                                                          start=len(placed.servers)))
        block = tail.split(f"#   jobs[{i}] ({entry.workload.kind}):\n", 1)[1]
        assert block.splitlines()[1] == f"#     workers (rank:host): {ranks}"
