"""Modules stay small and functions readable: no source file (tests aside) over 500
lines, no function over 80 (STYLE §14: god-files and 300-line scripts are what made each
next change dear)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("incastlab", "topologies", "controller", "apps", "analysis", "benchmarks",
           "scripts")
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def sources(root: Path = REPO) -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (root / folder).rglob("*.py")
                  if "__pycache__" not in p.parts)


def oversized(paths: list[Path], root: Path = REPO) -> list[str]:
    """One line per file over MAX_FILE_LINES and per function over MAX_FUNCTION_LINES."""
    out = []
    for path in paths:
        text = path.read_text()
        rel = path.relative_to(root)
        if (n := len(text.splitlines())) > MAX_FILE_LINES:
            out.append(f"{rel}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"{rel}:{node.lineno} {node.name}(): {length} lines")
    return out


def test_no_source_file_or_function_is_oversized():
    found = oversized(sources())
    assert not found, "over the limits:\n" + "\n".join(found)


def test_the_check_sees_a_long_function_and_a_long_file(tmp_path):
    (tmp_path / "incastlab").mkdir()
    lines = [f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES)]
    (tmp_path / "incastlab" / "long.py").write_text("def f():\n" + "".join(lines))
    (tmp_path / "incastlab" / "ok.py").write_text("def g():\n" + "".join(lines[1:]))
    (tmp_path / "incastlab" / "big.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    found = oversized(sources(tmp_path), tmp_path)
    assert found == [f"incastlab/big.py: {MAX_FILE_LINES + 1} lines",
                     f"incastlab/long.py:1 f(): {MAX_FUNCTION_LINES + 1} lines"]
