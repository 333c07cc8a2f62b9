"""The README and docs/ as a newcomer meets them: the README short, its two commands in
the Makefile, its index of docs/ complete both ways, and every relative link in the
README, docs/ and the folder guides pointing at a file that exists. Prose is not
checked: facts are held by the claim tests against code and JSON."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md")),
         *(ROOT / d / "README.md" for d in ("apps", "analysis", "tests"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # not inside code
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_readme_is_short_and_undated():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)


def test_readme_commands_are_the_makefiles():
    head = "\n".join(README.read_text().splitlines()[:40])
    assert "sudo make demo" in head and "sudo make test" in head
    targets = re.findall(r"^([a-z]+):", (ROOT / "Makefile").read_text(), re.M)
    assert {"demo", "test"} <= set(targets)


def test_readme_index_names_every_docs_page_in_its_first_40_lines():
    """Every page of docs/ (and docs/decisions/) is in the index, and the index names
    nothing else of docs/."""
    head = "\n".join(README.read_text().splitlines()[:40])
    named = {(ROOT / t).resolve() for t in LINK.findall(head) if t.startswith("docs/")}
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md")}
    pages.add((ROOT / "docs" / "decisions").resolve())
    assert named == pages, sorted(str(p.relative_to(ROOT)) for p in named ^ pages)


def test_every_relative_link_resolves():
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in PAGES for target in _links(page)
              if not (page.parent / target.split("#")[0]).exists()]
    assert not broken, broken


def _headings(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {"".join(c for c in h.lower() if c.isalnum() or c in " -_").replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_anchor_names_a_heading():
    broken = []
    for page in PAGES:
        for target in _links(page):
            path, _, anchor = target.partition("#")
            dest = page.parent / path if path else page
            if anchor and dest.suffix == ".md" and anchor not in _headings(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


SPEC_COMMAND = re.compile(r"incastlab (?:run|sweep|check) (specs/[\w.-]+\.toml)((?: --set \S+)*)")


def test_every_documented_spec_command_validates(capsys, monkeypatch):
    """Each `incastlab run|sweep|check SPEC [--set ...]` of the README and docs/ names a
    shipped spec that `incastlab check` accepts with those overrides (no root), run from
    the repository as the docs say (a user's app path is relative to it)."""
    from incastlab.cli import main
    monkeypatch.chdir(ROOT)
    commands = sorted({m.groups() for page in PAGES if page.parent.name != "tests"
                       for m in SPEC_COMMAND.finditer(page.read_text())})
    assert len(commands) >= 10
    for spec, sets in commands:
        code = main(["check", spec, *sets.split()])
        out = capsys.readouterr()
        assert code == 0, (spec, sets, out.err[-2000:])
