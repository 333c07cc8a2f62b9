"""The distribution as a user installs it: a wheel built from the tree, not the editable
install the suite runs in. A package missing from setup.py's list is missing from the
wheel, and the CLI then fails at its first import."""
from __future__ import annotations

import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAPPED = {"incastlab": "incastlab", "topologies": "incastlab/topologies",
          "controller": "incastlab/controller", "apps": "incastlab/apps",
          "analysis": "incastlab/analysis"}
SKIP = shutil.ignore_patterns(".git", ".venv", "runs", "build", "*.egg-info", "__pycache__",
                              ".pytest_cache", ".ruff_cache", "mutants")


def _run(argv, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    assert res.returncode == 0, f"{argv} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the tree (the build writes build/ and egg-info)."""
    src = tmp_path_factory.mktemp("src") / "incastlab"
    shutil.copytree(REPO, src, ignore=SKIP)
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--disable-pip-version-check", "-q", "-w", str(out), str(src)])
    (built,) = out.glob("incastlab-*.whl")
    return built


def _source_packages() -> set[str]:
    """Every package of the tree, as its path inside the wheel."""
    out = set()
    for folder, dest in MAPPED.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            out.add(str(Path(dest) / rel) if str(rel) != "." else dest)
    return out


def test_wheel_holds_every_package_of_the_tree(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    packaged = {str(Path(n).parent) for n in names if n.endswith("/__init__.py")}
    missing = _source_packages() - packaged
    assert not missing, f"packages of the tree missing from the wheel: {sorted(missing)}"
    assert "incastlab/jobs" in packaged  # the one the explicit list once left out


def test_cli_starts_from_the_installed_wheel(wheel, tmp_path):
    """A fresh venv (--system-site-packages, as scripts/install.sh makes it) with the wheel
    installed; the dependencies come from the suite's own environment through a .pth
    line, so nothing is downloaded and the editable install is not on the path."""
    venv = tmp_path / "venv"
    _run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip",
          str(venv)])
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
          "--no-deps", "--no-index", "--disable-pip-version-check", "-q", str(wheel)])
    fresh_site = next((venv / "lib").glob("python3*/site-packages"))
    (fresh_site / "suite-deps.pth").write_text(
        "\n".join(p for p in site.getsitepackages() if "site-packages" in p) + "\n")
    where = _run([str(venv / "bin" / "python"), "-c",
                  "import incastlab.jobs, incastlab.analysis; print(incastlab.__file__)"],
                 cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(fresh_site), where.stdout
    cli = venv / "bin" / "incastlab"
    assert "usage: incastlab" in _run([str(cli), "--help"], cwd=tmp_path).stdout
    check = _run([str(cli), "check", str(REPO / "specs" / "demo.toml")], cwd=tmp_path)
    assert "[topology]" in check.stdout and "kind=ring,rep=2" in check.stdout, check.stdout
