"""report.html and compare.html as a reader's browser shows them: headless Chromium
(Debian's `chromium`), every host name unresolvable, a 1400 px window. The interactive
figures (report: queues, throughput, timeline; compare: each metric per group) and the
fabric picture must be drawn, nothing may stick out to the right, and
the page may ask for nothing over the network (analysis/browsercheck.py)."""
import json

import pytest

from incastlab.analysis import browsercheck

from incastlab.commands.common import build_report, compare_runs
from incastlab.analysis.synthetic import make_demo_run

pytestmark = pytest.mark.skipif(browsercheck.chromium() is None,
                                reason="chromium not installed (apt-get install -y chromium)")
T0 = 1_700_000_000.0


def _demo(path, t0=T0, kind="ps"):
    make_demo_run(path, t0=t0)
    man = json.loads((path / "manifest.json").read_text())
    man["processes"] = [{"rank": 0, "host": "h3", "role": "server"},
                        {"rank": 1, "host": "h1", "role": "worker"},
                        {"rank": 2, "host": "h2", "role": "worker"}]
    (path / "manifest.json").write_text(json.dumps(man))
    spec = (path / "spec.toml").read_text()
    (path / "spec.toml").write_text(spec.replace('kind = "ps"', f'kind = "{kind}"'))
    return path


def test_report_renders_offline_and_fits(tmp_path):
    run = _demo(tmp_path / "demo")
    page = build_report(run)["report"]
    assert browsercheck.external_references(page.read_text()) == []
    seen = browsercheck.probe(page, width=1400)
    assert seen["resources"] == []  # nothing requested: the page is whole offline
    assert seen["scrollWidth"] <= seen["innerWidth"] == 1400, seen["wide"]
    assert seen["scrolled"] == 0  # no table needs to scroll sideways either
    # queues, per-flow throughput and the iteration timeline, each drawn with traces
    assert seen["plots"] == 3 and seen["drawn"] >= 3 and seen["traces"] >= 3
    assert seen["fabric_links"] == 16  # 8 cables of the 2x2 fabric, both directions
    assert seen["images"] >= 5         # the PNG figures decoded
    # a narrow window: still no page-wide overflow (wide tables scroll in their box)
    assert browsercheck.probe(page, width=900)["wide"] == []


def test_compare_renders_offline_and_fits(tmp_path):
    runs = [_demo(tmp_path / "ps1", T0), _demo(tmp_path / "ps2", T0 + 100),
            _demo(tmp_path / "other", T0 + 200, kind="ring")]
    for r in runs:
        build_report(r)
    page = compare_runs(runs, tmp_path / "cmp")["report"]
    assert browsercheck.external_references(page.read_text()) == []
    seen = browsercheck.probe(page, width=1400)
    assert seen["resources"] == []
    assert seen["scrollWidth"] <= 1400, seen["wide"]
    assert seen["scrolled"] == 0
    assert seen["fabric_links"] == 2 * 16  # one picture per group
    # the per-group figure (interactive_compare.py) drawn, one metric shown: its runs'
    # points and its groups' means, two traces (the other metrics' are not drawn yet)
    assert seen["plots"] == 1 and seen["drawn"] >= 1 and seen["traces"] == 2
    assert seen["images"] >= 1  # the PNGs kept (in a closed box)
    assert page.read_text().count("Plotly.newPlot") == 1


def test_probe_sees_overflow_and_requests(tmp_path):
    """The probe itself: a page wider than the window and one that fetches are caught."""
    page = tmp_path / "bad.html"
    page.write_text("<html><body><div style='width:2000px'>x</div>"
                    "<img src='http://example.invalid/x.png'></body></html>")
    seen = browsercheck.probe(page, width=1400)
    assert seen["scrollWidth"] > 1400 and seen["wide"]
    assert seen["resources"] == ["http://example.invalid/x.png"]
    assert browsercheck.external_references(page.read_text())
