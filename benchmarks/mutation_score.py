"""Mutation score of the analysis and spec code: would the unit tests notice a bug?

mutmut 3 plants one small bug at a time (an operator flipped, a constant changed, a
call's argument dropped, ...) into a module and runs the unit tests that exercise it;
a mutant the tests do not fail on "survived". Not part of CI: it takes minutes per
module on 2 cores. Run it before and after changing one of these modules or its tests:

    .venv/bin/python benchmarks/mutation_score.py                    # every module listed
    .venv/bin/python benchmarks/mutation_score.py analysis/tcp.py    # one
    .venv/bin/python benchmarks/mutation_score.py --diffs            # survivors' diffs too
    .venv/bin/python benchmarks/mutation_score.py analysis/pcap.py --only '*ip_to_str*'
                                           # a few mutants only (a quick check of the set-up)

It never touches the working tree: each module is mutated in a scratch copy
(default /tmp/incastlab-mutation/<module>/), laid out as the installed package
(incastlab/analysis/tcp.py, not analysis/tcp.py) so the tests import the mutated copy
and not the editable install's folders. Modules run one after another, with one
mutmut worker by default (the machine is shared), each bounded by --timeout-s.
Prints per module: mutants, killed, survived, others (timeouts, no tests), score
(killed / all), the survivors' names; ends with one JSON line (also to --results FILE).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the spec's newer tables are tested beside their features: [[events]], [[jobs]],
# `incastlab check`, mtu and queue_bytes
SPEC_TESTS = ["tests/test_spec.py", "tests/test_spec_mutants.py", "tests/test_placement.py",
              "tests/test_check_command.py", "tests/test_events.py", "tests/test_hostevents.py",
              "tests/test_multijob.py", "tests/test_queue_bytes.py", "tests/test_jumbo.py"]
# the capture parser, split in three (framing, dissection, the DataFrame and its cache),
# is tested as one: every file reads real and corrupted captures end to end
PCAP_TESTS = ["tests/test_analysis_pcap.py", "tests/test_analysis_pcap_mutants.py",
              "tests/test_pcap_mutants.py"]
# the cost models (the headline's "fraction of the bound"): the alpha-beta primitives and
# every job's bound, against the tests that derive a bound's number from its formula
BOUND_TESTS = ["tests/test_analysis_alphabeta.py", "tests/test_allreduce_bounds.py",
               "tests/test_network_cost.py", "tests/test_jobs.py",
               "tests/test_jobs_allreduce.py", "tests/test_jobs_model_parallel.py",
               "tests/test_jobs_moe.py", "tests/test_jobs_ps_modes.py",
               "tests/test_jumbo_jobs.py", "tests/test_alphabeta_mutants.py",
               "tests/test_bound_mutants.py", "tests/test_incast_condition.py",
               "tests/test_incast_job_bound.py", "tests/test_moe_job_bound.py"]
# the bound's pieces still in a job kind's module (Job.bound, which gathers the bound's
# inputs from the run, schedule_s and the helpers only they use): scored by mutant name,
# "<file> (bound)" in MODULES; the rest of those modules (commands, tables, figures) is not
SCOPES: dict[str, list[str]] = {
    "incastlab/jobs/incast.py": ["*.x_collapse_condition__mutmut_*", "*ǁbound__mutmut_*"],
    "incastlab/jobs/moe.py": ["*ǁbound__mutmut_*"],
    "incastlab/jobs/pipeline.py": ["*ǁbound__mutmut_*", "*ǁschedule_s__mutmut_*"],
    "incastlab/jobs/ps.py": ["*ǁbound__mutmut_*", "*ǁschedule_s__mutmut_*"],
    "incastlab/jobs/ring.py": ["*ǁbound__mutmut_*", "*.x_exposed_bound__mutmut_*"],
    "incastlab/jobs/tensor.py": ["*ǁbound__mutmut_*", "*.x_alpha_s__mutmut_*"],
}
# module -> the unit-test files that exercise it (only these run against its mutants)
MODULES: dict[str, list[str]] = {
    "analysis/tcp.py": ["tests/test_analysis_tcp.py", "tests/test_analysis_tcp_mutants.py"],
    "analysis/reconcile.py": ["tests/test_analysis_units.py",
                              "tests/test_analysis_reconcile_mutants.py"],
    **{module: PCAP_TESTS for module in (
        "analysis/pcap.py", "analysis/pcaprecords.py", "analysis/pcapdissect.py")},
    "analysis/attribution.py": ["tests/test_analysis_attribution.py",
                                "tests/test_attribution_mutants.py"],
    "analysis/training.py": ["tests/test_analysis_training.py", "tests/test_jobs_ps_modes.py"],
    "analysis/alphabeta.py": BOUND_TESTS,
    **{f"incastlab/jobs/{kind}_bound.py": BOUND_TESTS
       for kind in ("incast", "moe", "pipeline", "ps", "ring", "tensor")},
    **{f"{path} (bound)": BOUND_TESTS for path in SCOPES},
    # the spec package's modules and the placement it uses, each against the spec tests
    **{module: SPEC_TESTS for module in (
        "incastlab/spec/schema.py", "incastlab/spec/loading.py",
        "incastlab/spec/validation.py", "incastlab/spec/sweeps.py",
        "incastlab/spec/layout.py", "topologies/placement.py")},
}
EQUIVALENT = ROOT / "benchmarks" / "mutation_equivalent.json"
# repository folders mapped into the incastlab namespace by setup.py
MAPPED = ["analysis", "apps", "controller", "topologies"]
# data the tests read relative to the repository root: specs/ (test_spec), and the
# mapped folders as plain files too (specs name controller/examples/*.py by path)
ALSO_COPY = ["specs", *MAPPED]
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "mutants", ".venv", "runs")
# mutmut's exit codes -> status (mutmut/stats.py); 1 and 3 are test failures = killed
KILLED = {1, 3}
SURVIVED = {0}


def source_file(module: str) -> str:
    """The file a MODULES entry mutates: 'incastlab/jobs/ps.py (bound)' -> its path."""
    return module.removesuffix(" (bound)")


def scope(module: str) -> list[str]:
    """The mutant-name patterns an entry scores (empty: all of its file's mutants)."""
    return SCOPES[source_file(module)] if module.endswith(" (bound)") else []


def equivalent_survivors() -> dict[str, dict[str, str]]:
    """{module: {mutant: why it changes no result}}: the survivors reviewed and kept
    (benchmarks/mutation_equivalent.json); every other survivor wants a test."""
    data = json.loads(EQUIVALENT.read_text()) if EQUIVALENT.exists() else {}
    return {k: v for k, v in data.items() if not k.startswith("_")}


def installed_path(module: str) -> str:
    """'analysis/tcp.py' -> 'incastlab/analysis/tcp.py' (the namespace setup.py builds)."""
    module = source_file(module)
    top = module.split("/", 1)[0]
    return f"incastlab/{module}" if top in MAPPED else module


def build_scratch(src: Path, scratch: Path, module: str, tests: list[str]) -> None:
    """A copy of the repository in the installed package's layout, with mutmut's
    configuration for one module and its tests."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    shutil.copytree(src / "incastlab", scratch / "incastlab", ignore=IGNORE)
    for name in MAPPED:
        shutil.copytree(src / name, scratch / "incastlab" / name, ignore=IGNORE)
    shutil.copytree(src / "tests", scratch / "tests", ignore=IGNORE)
    for name in ALSO_COPY:
        shutil.copytree(src / name, scratch / name, ignore=IGNORE)
    build_config(scratch, module, tests)


_FAILING = """
import json, sys
import pytest
class Failed:
    ids = []
    def pytest_runtest_logreport(self, report):
        if report.failed and report.nodeid not in self.ids:
            self.ids.append(report.nodeid)
f = Failed()
pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not root", "--tb=line", *sys.argv[2:]],
            plugins=[f])
json.dump(f.ids, open(sys.argv[1], "w"))
"""


def failing_tests(scratch: Path, tests: list[str]) -> list[str]:
    """Tests that fail before any mutation (in a shared tree: someone's unfinished
    change). mutmut needs a green start, so they are left out, and said so."""
    out = scratch / "failing-before.json"
    subprocess.run([sys.executable, "-c", _FAILING, str(out), *tests], cwd=scratch,
                   capture_output=True, check=False)
    return json.loads(out.read_text()) if out.exists() else []


def refresh_scratch(src: Path, scratch: Path) -> None:
    """Copy the current files over a kept scratch copy (mtimes kept: mutmut regenerates
    the mutants of a source file only when it is newer than them)."""
    shutil.copytree(src / "incastlab", scratch / "incastlab", ignore=IGNORE,
                    dirs_exist_ok=True)
    for name in MAPPED:
        shutil.copytree(src / name, scratch / "incastlab" / name, ignore=IGNORE,
                        dirs_exist_ok=True)
    for name in ["tests", *ALSO_COPY]:
        shutil.copytree(src / name, scratch / name, ignore=IGNORE, dirs_exist_ok=True)


def build_config(scratch: Path, module: str, tests: list[str],
                 deselect: list[str] = ()) -> None:
    """pyproject.toml of the scratch copy: pytest's settings and mutmut's for `module`."""
    pytest_cfg = textwrap.dedent("""\
        [tool.pytest.ini_options]
        testpaths = ["tests"]
        markers = ["root: needs root, real Open vSwitch and Mininet (skipped otherwise)"]
        addopts = "--strict-markers"
        filterwarnings = ["ignore:distutils Version classes are deprecated:DeprecationWarning"]
        """)
    mutmut_cfg = textwrap.dedent(f"""\
        [tool.mutmut]
        source_paths = ["incastlab"]
        only_mutate = [{json.dumps(installed_path(module))}]
        also_copy = {json.dumps(ALSO_COPY)}
        pytest_add_cli_args = {json.dumps(["-p", "no:cacheprovider", "-m", "not root", "-q", "-x",
                                          *(a for t in deselect for a in ("--deselect", t))])}
        pytest_add_cli_args_test_selection = {json.dumps(tests)}
        use_git_change_detection = false
        """)
    (scratch / "pyproject.toml").write_text(pytest_cfg + "\n" + mutmut_cfg)


def read_results(scratch: Path, module: str, only: list[str] = ()) -> dict[str, int | None]:
    """{mutant name: exit code} from mutmut's own record (mutants/<path>.meta); with
    `only`, just the mutants whose names match one of those patterns."""
    meta = scratch / "mutants" / (installed_path(module) + ".meta")
    if not meta.exists():
        return {}
    res = json.loads(meta.read_text())["exit_code_by_key"]
    if only:
        res = {k: v for k, v in res.items() if any(fnmatch.fnmatchcase(k, p) for p in only)}
    return res


def diffs(scratch: Path, names: list[str]) -> str:
    """The survivors' diffs, asked of mutmut in one process."""
    if not names:
        return ""
    code = ("import sys\nfrom mutmut.__main__ import show\n"
            "for n in sys.argv[1:]:\n    show.callback(n)\n")
    p = subprocess.run([sys.executable, "-c", code, *names], cwd=scratch,
                       capture_output=True, text=True, check=False)
    return p.stdout + (p.stderr if p.returncode else "")


def source_tree(workdir: Path, ref: str | None) -> Path:
    """The files to test: the working tree, or (``--ref``) a git revision's, exported
    with ``git archive`` (others' uncommitted edits in a shared tree then do not count)."""
    if ref is None:
        return ROOT
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", ref + "^{commit}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    out = workdir / f"src-{rev[:12]}"
    if not out.exists():
        tmp = workdir / f"src-{rev[:12]}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        tmp.rename(out)
    return out


def run_module(module: str, src: Path, workdir: Path, children: int, timeout_s: float,
               show_diffs: bool, rerun: bool, only: list[str] = ()) -> dict:
    tests = [t for t in MODULES[module] if (src / t).exists()]
    only = list(only) or scope(module)  # --only narrows an entry's own scope
    scratch = workdir / (source_file(module).replace("/", "_").removesuffix(".py")
                         + ("-bound" if scope(module) else ""))
    previous = read_results(scratch, module) if rerun else {}
    if previous:
        # Keep the last run's verdicts and re-run only the mutants it did not kill,
        # against the current files. mutmut itself resets the verdicts of functions
        # whose source changed (it hashes each function), and killed mutants stay
        # killed as long as tests are only added: the score is what a fresh run gives.
        refresh_scratch(src, scratch)
        meta = scratch / "mutants" / (installed_path(module) + ".meta")
        data = json.loads(meta.read_text())
        data["exit_code_by_key"] = {k: (v if v in KILLED else None)
                                    for k, v in data["exit_code_by_key"].items()}
        meta.write_text(json.dumps(data))
        # mutmut resets every verdict when the list of test files changes (its
        # "test_selection" fingerprint), e.g. a new test file for the module. Tests were
        # only added, so what they killed stays killed: forget the fingerprint; mutmut
        # then finds the added tests as new tests and maps them to the functions they run.
        stats = scratch / "mutants" / "mutmut-stats.json"
        if stats.exists():
            saved = json.loads(stats.read_text())
            saved.pop("config_fingerprint", None)
            stats.write_text(json.dumps(saved))
        build_config(scratch, module, tests)
    else:
        build_scratch(src, scratch, module, tests)
    broken = failing_tests(scratch, tests)
    if broken:
        print(f"   {len(broken)} test(s) fail before any mutation; left out of this run:")
        for name in broken:
            print(f"     {name}")
        build_config(scratch, module, tests, broken)
    t0 = time.monotonic()
    log = scratch / "mutmut.log"
    with open(log, "w") as out:
        try:
            proc = subprocess.run([sys.executable, "-m", "mutmut", "run",
                                   "--max-children", str(children), *only],
                                  cwd=scratch, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout_s, check=False, start_new_session=True)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    elapsed = time.monotonic() - t0
    res = read_results(scratch, module, only)
    killed = sorted(k for k, v in res.items() if v in KILLED)
    survived = sorted(k for k, v in res.items() if v in SURVIVED)
    other = sorted(k for k, v in res.items() if v not in KILLED | SURVIVED)
    n = len(res)
    reviewed = equivalent_survivors().get(module, {})
    equivalent = [k for k in survived if k in reviewed]
    row = {"module": module, "tests": tests, "mutants": n, "killed": len(killed),
           "survived": len(survived), "other": len(other), "equivalent": len(equivalent),
           "score": round(len(killed) / n, 4) if n else None,
           "elapsed_s": round(elapsed, 1), "mutmut_rc": rc, "log": str(log),
           "failing_before": broken,
           "survivors": survived, "others": {k: res[k] for k in other}}
    print(f"\n== {module}  ({', '.join(tests)}; {elapsed:.0f} s, mutmut exit {rc})")
    if not n:
        print(f"   no mutants recorded: see {log}")
        return row
    print(f"   mutants {n}  killed {len(killed)}  survived {len(survived)}  "
          f"other {len(other)}  score {len(killed) / n:.1%}")
    for name in survived:
        print(f"   survived: {name}" + (f"  (equivalent: {reviewed[name]})"
                                        if name in reviewed else "  (not reviewed)"))
    for name in sorted(k for k in reviewed if k not in survived and (k in res or not only)):
        print(f"   stale review (no longer a survivor): {name}")
    for name in other:
        print(f"   not killed ({res[name]}): {name}")
    if show_diffs:
        print(diffs(scratch, survived))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", metavar="MODULE",
                    help=f"default: all of {', '.join(MODULES)}")
    ap.add_argument("--results", default=None, metavar="FILE",
                    help="also write the JSON there (benchmarks/results/NAME.json)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/incastlab-mutation"))
    ap.add_argument("--children", type=int, default=1,
                    help="parallel mutmut workers (default 1: a shared 2-core machine)")
    ap.add_argument("--timeout-s", type=float, default=1800,
                    help="bound on one module's whole run (default 1800 s)")
    ap.add_argument("--diffs", action="store_true", help="print each survivor's diff")
    ap.add_argument("--ref", metavar="REV",
                    help="test a git revision's files (e.g. HEAD) instead of the working tree")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="only the mutants whose names match (fnmatch, e.g. "
                         "'*x_ip_to_str*'; repeatable): a quick check, not a score")
    ap.add_argument("--rerun", action="store_true",
                    help="keep the last run's scratch copy and re-run only the mutants it "
                         "did not kill, against the current tests (after adding tests)")
    args = ap.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        ap.error(f"unknown module(s) {unknown}; choose from {list(MODULES)}")
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    src = source_tree(args.workdir, args.ref)
    rows = [run_module(m, src, args.workdir, args.children, args.timeout_s, args.diffs,
                       args.rerun, args.only)
            for m in (args.modules or list(MODULES))]
    print("\n| module | mutants | killed | survived | other | score |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        score = f"{r['killed'] / r['mutants']:.1%}" if r["mutants"] else "n/a"  # not re-rounded
        print(f"| {r['module']} | {r['mutants']} | {r['killed']} | {r['survived']} | "
              f"{r['other']} | {score} |")
    figures = {"benchmark": "mutation_score",
               "modules": {r["module"]: {k: r[k] for k in
                                         ("mutants", "killed", "survived", "other",
                                          "equivalent", "score", "elapsed_s")}
                           for r in rows}}
    print(json.dumps(figures))
    from render_results import write_results  # benchmarks/, the script's own folder
    write_results(args.results, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
