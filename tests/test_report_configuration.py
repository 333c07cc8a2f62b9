"""The report's configuration section: the spec as the run's job uses it (a resolved
spec.toml holds every job kind's fields at their defaults), spec and manifest folded."""
import html
import re

from incastlab.analysis.synthetic import make_run_dir
from incastlab.commands.common import build_report

SPEC = ('name = "t"\n[workload]\nkind = "ps"\nmode = "sync"\nworkers = 2\n'
        'impl = "ring"\nexperts = 4\nalgorithm = "ring"\nps_leaf = 1\n[topology]\nspines = 2\n')


def test_the_spec_shows_only_the_fields_its_job_uses(tmp_path):
    run = make_run_dir(tmp_path / "run", spec_text=SPEC)
    build_report(run, plots=False)
    page = (run / "report.html").read_text()
    section = page[page.index("Configuration and environment"):]
    spec = re.search(r"<details><summary>spec\.toml.*?<pre>(.*?)</pre>", section, re.S)
    assert spec is not None and "<details><summary>manifest.json" in section
    shown = html.unescape(spec.group(1))
    # the PS's own and the common fields stay; the ring's and the MoE's go
    for kept in ('kind = "ps"', 'mode = "sync"', "workers = 2", "ps_leaf = 1", "spines = 2"):
        assert kept in shown, kept
    for gone in ("impl", "experts", "algorithm"):
        assert gone not in shown, gone
    assert "experts = 4" in (run / "spec.toml").read_text()  # the file itself is untouched
