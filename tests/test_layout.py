"""The import direction of the layout (DESIGN.md "Dependency direction"), kept true by
walking every module's AST: top-level imports, deferred ones inside functions and
``TYPE_CHECKING`` blocks, and ``importlib.import_module("...")`` string literals.

- ``analysis`` reads run directories only: it never imports the orchestrator
  (``incastlab.jobs``, ``spec``, ``runner``, ``fabric``, ``commands``, ...), nor Mininet
  or os-ken. It may import the topologies (the fabric map, naming), the apps' pure
  modules and the controller's policy registry (``controller/registry.py``, which has
  no os-ken import), which tells whose controller a run used.
- ``apps`` are programs started inside emulated hosts: nothing outside
  ``incastlab.apps`` but the run-directory contract (``incastlab.topologies.runformat``).
- ``controller`` apps know ``incastlab.controller`` and ``incastlab.topologies`` only.
- ``topologies`` imports nothing else of incastlab (stock Mininet loads leafspine.py).

The orchestrator (``incastlab/``) may import all of them. The walk is a pure function
of a directory tree, so the checker is tested on a synthetic tree that breaks each rule.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# folder -> the package it is installed as (setup.py's package_dir)
PACKAGES = {"incastlab": "incastlab", "analysis": "incastlab.analysis",
            "apps": "incastlab.apps", "controller": "incastlab.controller",
            "topologies": "incastlab.topologies"}

# package -> (incastlab modules it may import, by prefix; third-party names it must not)
RULES = {
    "incastlab.analysis": (("incastlab.analysis", "incastlab.topologies", "incastlab.apps",
                            "incastlab.controller.registry"),
                           ("mininet", "os_ken", "ryu")),
    "incastlab.apps": (("incastlab.apps", "incastlab.topologies.runformat"), ("mininet",)),
    "incastlab.controller": (("incastlab.controller", "incastlab.topologies"), ("mininet",)),
    "incastlab.topologies": (("incastlab.topologies",), ()),
}


@dataclass(frozen=True)
class Violation:
    path: str      # relative to the walked root
    line: int
    importer: str  # dotted module name
    imported: str  # dotted name the statement reaches

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported}"


def module_name(root: Path, path: Path, packages=PACKAGES) -> str | None:
    """The dotted name ``path`` is imported as (``analysis/report.py`` ->
    ``incastlab.analysis.report``), None outside the mapped folders."""
    rel = path.relative_to(root)
    pkg = packages.get(rel.parts[0])
    if pkg is None:
        return None
    parts = list(rel.with_suffix("").parts[1:])
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([pkg, *parts])


def _resolve(importer: str, is_package: bool, module: str | None, level: int) -> str:
    """The absolute name of a (possibly relative) ``from ... import``."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(tree: ast.AST, importer: str, is_package: bool):
    """(line, dotted name) of every import the module's AST holds, anywhere in it. A
    ``from m import n`` reaches ``m.n`` (n may be a submodule); a string given to
    ``importlib.import_module`` / ``__import__`` counts as an import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(importer, is_package, node.module, node.level)
            for alias in node.names:
                yield node.lineno, base if alias.name == "*" else f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            arg = node.args[0]
            if name in ("import_module", "__import__") and isinstance(arg, ast.Constant) \
                    and isinstance(arg.value, str):
                target = arg.value
                if target.startswith("."):
                    level = len(target) - len(target.lstrip("."))
                    target = _resolve(importer, is_package, target.lstrip(".") or None,
                                      level)
                yield node.lineno, target


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def allowed(importer: str, imported: str, rules=RULES) -> bool:
    """Whether module ``importer`` may import ``imported`` under ``rules``."""
    rule = next((r for pkg, r in rules.items() if _within(importer, pkg)), None)
    if rule is None:  # the orchestrator: anything
        return True
    inside, banned = rule
    if _within(imported, "incastlab"):
        # `from incastlab import x` reaches incastlab.x; a bare `import incastlab`
        # is the orchestrator's package itself
        return any(_within(imported, p) for p in inside)
    return not any(_within(imported, b) for b in banned)


def violations(root: Path, packages=PACKAGES, rules=RULES) -> list[Violation]:
    """Every import under ``root``'s mapped folders that its package's rule forbids."""
    out = []
    for folder in packages:
        for path in sorted((root / folder).rglob("*.py")):
            importer = module_name(root, path, packages)
            if importer is None:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for line, name in imports_of(tree, importer, path.name == "__init__.py"):
                if not allowed(importer, name, rules):
                    out.append(Violation(str(path.relative_to(root)), line, importer, name))
    return out


def test_the_import_direction_holds():
    found = violations(ROOT)
    assert not found, "imports against the layout (tests/test_layout.py):\n" + "\n".join(
        map(str, found))


def test_every_mapped_folder_is_walked():
    """The walk sees the modules it should (a renamed folder must not pass silently)."""
    for folder in PACKAGES:
        assert len(list((ROOT / folder).rglob("*.py"))) >= 3, folder


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for folder in PACKAGES:
        (tmp_path / folder).mkdir(exist_ok=True)
    return tmp_path


def test_the_checker_finds_each_kind_of_violation(tmp_path):
    root = _tree(tmp_path, {
        "analysis/__init__.py": "",
        "analysis/ok.py": "from . import other\nfrom incastlab.topologies import naming\n"
                          "import pandas\nfrom incastlab.controller.registry import P\n",
        # deferred, inside a function: still found
        "analysis/report.py": "def f():\n    from incastlab.jobs import JOBS\n",
        # relative, climbing out of the package: resolved to incastlab.spec
        "analysis/sub/deep.py": "from ...spec import TABLES\n",
        "analysis/lazy.py": "import importlib\n"
                            "def g():\n    return importlib.import_module('incastlab.runner')\n",
        "analysis/mn.py": "from mininet.net import Mininet\n",
        "analysis/bare.py": "from incastlab import fields\n",
        "analysis/ctl.py": "from incastlab.controller import base\n",
        "apps/__init__.py": "",
        "apps/ok.py": "import torch\nfrom incastlab.apps import common\n"
                      "from incastlab.topologies.runformat import WORKERS\n",
        "apps/bad.py": "from incastlab.topologies import naming\n",
        "controller/__init__.py": "",
        "controller/ok.py": "from incastlab.topologies.fabricmap import FabricMap\n"
                            "from . import paths\n",
        "controller/bad.py": "class A:\n    def m(self):\n"
                             "        from incastlab.analysis import report\n",
        "topologies/__init__.py": "",
        "topologies/bad.py": "import incastlab.spec\n",
        "incastlab/__init__.py": "",
        "incastlab/runner.py": "from incastlab.analysis import report\nimport mininet\n",
    })
    found = {(v.path, v.imported) for v in violations(root)}
    assert found == {
        ("analysis/report.py", "incastlab.jobs.JOBS"),
        ("analysis/sub/deep.py", "incastlab.spec.TABLES"),
        ("analysis/lazy.py", "incastlab.runner"),
        ("analysis/mn.py", "mininet.net.Mininet"),
        ("analysis/bare.py", "incastlab.fields"),
        ("analysis/ctl.py", "incastlab.controller.base"),
        ("apps/bad.py", "incastlab.topologies.naming"),
        ("controller/bad.py", "incastlab.analysis.report"),
        ("topologies/bad.py", "incastlab.spec"),
    }
    text = str(next(v for v in violations(root) if v.path == "analysis/report.py"))
    assert text == "analysis/report.py:2: incastlab.analysis.report imports incastlab.jobs.JOBS"


@pytest.mark.parametrize("importer,module,level,is_package,want", [
    ("incastlab.analysis.report", "render", 1, False, "incastlab.analysis.render"),
    ("incastlab.analysis", None, 1, True, "incastlab.analysis"),
    ("incastlab.analysis.report", "jobs", 2, False, "incastlab.jobs"),
    ("incastlab.jobs", "base", 1, True, "incastlab.jobs.base"),
    ("incastlab.analysis.x", "incastlab.spec", 0, False, "incastlab.spec"),
])
def test_relative_imports_resolve(importer, module, level, is_package, want):
    assert _resolve(importer, is_package, module, level) == want


# The analysis reads any job through the hooks it is handed: no string in it is a job
# kind's name. One exception: the episodes table's `incast` column, the phenomenon (two or
# more senders into one full queue), which every kind's run can show.
PHENOMENA = {("episodes.py", "incast"), ("findings.py", "incast"), ("metrics.py", "incast")}


def kind_names_in(folder: Path, kinds: set[str]) -> list[tuple[str, int, str]]:
    """(file, line, kind) for every string constant, docstrings aside, that is a kind."""
    found = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                  ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)
                and isinstance(n.body[0].value, ast.Constant)}
        found += [(path.name, n.lineno, n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and n.value in kinds and id(n) not in docs]
    return found


def test_no_analysis_module_names_a_job_kind():
    from incastlab.jobs import JOBS

    named = [f for f in kind_names_in(ROOT / "analysis", set(JOBS))
             if (f[0], f[2]) not in PHENOMENA]
    assert named == []


def test_the_kind_name_check_finds_one(tmp_path):
    (tmp_path / "a.py").write_text('"""ps in a docstring is fine."""\n'
                                   'def f(k):\n    return k == "ring"\n')
    assert kind_names_in(tmp_path, {"ps", "ring"}) == [("a.py", 3, "ring")]
