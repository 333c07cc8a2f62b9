"""The command line's own answers: --version, and what `report` and `compare` say about
paths that are not what they need (before any work is done)."""
import subprocess
import sys

import pytest

from incastlab.analysis.synthetic import make_run_dir
from incastlab.cli import main
from incastlab.commands.compare import runs_of


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    out = subprocess.run([sys.executable, "-m", "incastlab.cli", "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"incastlab {version('incastlab')}"


def test_python_dash_m_incastlab_is_the_command_line():
    out = subprocess.run([sys.executable, "-m", "incastlab", "--version"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("incastlab ")


@pytest.fixture
def sweep(tmp_path):
    for name in ("a", "b", "c", "d"):
        make_run_dir(tmp_path / "sweep" / name)
    (tmp_path / "sweep" / "compare").mkdir()  # a sweep's own comparison: not a run
    return tmp_path / "sweep"


def test_report_says_what_a_path_is_instead(sweep, tmp_path, capsys):
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"incastlab report: {tmp_path / 'nowhere'} does not exist")
    assert main(["report", str(sweep)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"incastlab report: {sweep} holds 4 run directories (a, b, c, ...), not one run: "
        f"`incastlab report {sweep}/<run>` rebuilds one report, `incastlab compare "
        f"{sweep}` compares them")
    (tmp_path / "file.txt").write_text("x")
    assert main(["report", str(tmp_path / "file.txt")]) == 2
    assert "is a file, not a run directory" in capsys.readouterr().err


def test_compare_takes_a_sweeps_directory_for_its_runs(sweep):
    assert runs_of([sweep]) == [sweep / n for n in ("a", "b", "c", "d")]
    assert runs_of([sweep / "a", sweep / "b"]) == [sweep / "a", sweep / "b"]


def test_compare_does_not_write_over_a_report_unless_forced(sweep, tmp_path, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare.html").write_text("an earlier comparison")
    assert main(["compare", str(sweep), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"incastlab compare: {out} exists and is not empty; choose another --out, or add "
        "--force to write over it")
    assert (out / "compare.html").read_text() == "an earlier comparison"  # untouched


def test_compare_with_force_writes_over_it(tmp_path):
    from incastlab.analysis.synthetic import make_demo_run

    runs = [tmp_path / "one", tmp_path / "two"]
    for i, run in enumerate(runs):
        make_demo_run(run, t0=1_700_000_000.0 + 100 * i)  # two runs, not one copied
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare.html").write_text("an earlier comparison")
    assert main(["-q", "compare", *map(str, runs), "--out", str(out), "--force"]) == 0
    assert (out / "compare.html").read_text() != "an earlier comparison"
