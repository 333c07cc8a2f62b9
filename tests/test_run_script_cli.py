"""`incastlab run --script train.py --workers 4 -- --epochs 2` (commands/shortcut.py):
the flags make the spec a user would write, validated as any spec, every refusal naming
its flag; nothing here reaches the system (the run's preflight is replaced by a failure)."""
from __future__ import annotations

import pytest

from incastlab import cli
from incastlab.commands import common, shortcut
from incastlab.spec import loads_spec

SCRIPT = "examples/collectives.py"


@pytest.fixture(autouse=True)
def at_the_top(monkeypatch):
    monkeypatch.chdir(cli.__file__.rsplit("/incastlab/", 1)[0])

    def never(*a, **kw):
        raise AssertionError("a refused shortcut reached the run's preflight")
    monkeypatch.setattr(common, "ready", never)


def spec_of(*argv):
    return shortcut.load(cli.parse(["run", *argv]))


def test_the_flags_make_the_spec_a_user_writes():
    spec = spec_of("--script", SCRIPT, "--workers", "4", "--", "--steps", "2", "--width", "8")
    written = loads_spec('[workload]\nkind = "script"\nscript = "examples/collectives.py"\n'
                         'workers = 4\nargs = ["--steps", "2", "--width", "8"]\n',
                         name="collectives")
    assert spec == written
    assert spec.topology == loads_spec("").topology  # the default fabric
    assert spec.run.name == "collectives"
    assert loads_spec(spec.to_toml()) == spec  # what the run directory's spec.toml holds


def test_the_words_after_the_cut_reach_the_script_as_written():
    words = ["--epochs", "2", "--", "-x", 'a "quoted" \\ back', "ünï", "=", "--set"]
    spec = spec_of("--module", "json.tool", "--", *words)
    assert (spec.workload.module, spec.workload.script) == ("json.tool", "")
    assert spec.workload.args == words and spec.run.name == "tool"
    assert loads_spec(spec.to_toml()).workload.args == words


def test_no_cut_no_arguments_and_set_applies_to_the_rest():
    spec = spec_of("--script", SCRIPT, "--set", "topology.host_bw_mbps=30",
                   "--set", "workload.map_nccl_to_gloo=true")
    assert spec.workload.args == [] and spec.workload.workers == 3  # the field's default
    assert spec.topology.host_bw_mbps == 30.0 and spec.workload.map_nccl_to_gloo


@pytest.mark.parametrize("argv, message", [
    (["--script", "nope.py"], "--script (workload.script): 'nope.py' does not exist"),
    (["--script", "README.md"], "--script (workload.script): 'README.md' is not a Python "
                                "script"),
    (["--module", "no_such_module_here"], "--module (workload.module): "
                                          "'no_such_module_here' is not a module"),
    (["--script", SCRIPT, "--module", "json"], "--script (workload.script): set either "
                                               "--script (a .py file) or --module"),
    (["--script", SCRIPT, "--workers", "9"], "--workers (workload.workers): 9 script ranks "
                                             "need 9 hosts, but the fabric has 4"),
    (["--script", SCRIPT, "--workers", "0"], "--workers (workload.workers): 0 is not an "
                                             "integer from 1 to 1000"),
    (["--workers", "4"], "--workers: only with --script or --module"),
    (["--", "--epochs", "2"], "arguments after --: only with --script or --module"),
    (["specs/own-script.toml", "--script", SCRIPT], "--script: a shortcut builds its own "
                                                    "spec on the default fabric"),
    (["--script", SCRIPT, "--set", "workload.kind='ps'"],
     "--set workload.kind='ps': workload.kind is set by --script already"),
    (["--script", SCRIPT, "--set", "workload.args=[]", "--", "-x"],
     "--set workload.args=[]: workload.args is set by arguments after -- already"),
    (["--script", SCRIPT, "--set", "workload.workers=2", "--workers", "3"],
     "--set workload.workers=2: workload.workers is set by --workers already"),
    (["--script", SCRIPT, "--set", "topology.spines=0"], "topology.spines: 0 is not"),
])
def test_refusals_name_the_flag_and_touch_nothing(argv, message, capsys):
    assert cli.main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert "invalid shortcut" in err and message in err, err


def test_a_wrong_type_is_argparses_refusal_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--script", SCRIPT, "--workers", "four"])
    assert exit_.value.code == 2
    assert "argument --workers: invalid int value: 'four'" in capsys.readouterr().err


def test_only_run_takes_words_after_the_cut(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["check", "--", "x"])
    assert exit_.value.code == 2
    assert "incastlab check takes no arguments after --" in capsys.readouterr().err
    assert cli.parse(["run", "x.toml"]).rest is None  # no cut: no shortcut asked
    assert not shortcut.asked(cli.parse(["run", "x.toml"]))


def test_help_shows_the_shortcut(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps the help at the terminal width
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "incastlab run --script FILE.py | --module PKG.MOD [--workers N] [-- ARGS" in out
    for flag in ("--script FILE.py", "--module PKG.MOD", "--workers N"):
        assert flag in out
