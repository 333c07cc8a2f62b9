"""Open a report in headless Chromium (offline) and say what a reader would see: the
page's width against the window's, the interactive figures drawn, the fabric picture,
and every resource the page asked for. Used by tests/test_report_browser.py and
scripts/screenshot.sh's users; needs Debian's `chromium` package.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# runs after the page loaded and plotly drew: measures, then writes the answer into the
# DOM, which --dump-dom prints
PROBE = """<script>window.addEventListener('load', () => setTimeout(() => {
  const vw = window.innerWidth;
  const wide = [...document.querySelectorAll('body *')].filter(e => {
      const r = e.getBoundingClientRect(); return r.width > 0 && r.right > vw + 1; })
    .filter(e => !e.closest('.wide')).slice(0, 5)
    .map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));
  const scrolled = [...document.querySelectorAll('.wide')]
    .filter(e => e.scrollWidth > e.clientWidth + 1).length;
  const r = {scrollWidth: document.documentElement.scrollWidth, innerWidth: vw, wide: wide,
    scrolled: scrolled,
    plots: document.querySelectorAll('.js-plotly-plot').length,
    drawn: document.querySelectorAll('.js-plotly-plot .main-svg').length,
    traces: document.querySelectorAll('.js-plotly-plot g.trace').length,
    fabric_links: document.querySelectorAll('svg.fabric line').length,
    images: [...document.images].filter(i => i.complete && i.naturalWidth > 0).length,
    resources: performance.getEntriesByType('resource').map(e => e.name)
      .filter(n => !n.startsWith('data:'))};
  const pre = document.createElement('pre'); pre.id = 'incastlab-probe';
  pre.textContent = JSON.stringify(r); document.body.appendChild(pre);
}, 1000));</script>"""


def chromium() -> str | None:
    """The Chromium binary, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def probe(report: Path, width: int = 1400, height: int = 1000, timeout: float = 120) -> dict:
    """Load `report` (a copy with the probe added, beside the original so relative links
    hold) at `width` x `height` px with every host name unresolvable; return the probe's
    measurements: scrollWidth, innerWidth, wide (elements past the right edge outside a
    scrolling table box), scrolled (table boxes that must scroll sideways), plots and
    drawn (plotly figures and their drawn SVGs), traces, fabric_links, images (loaded)
    and resources (every non-data URL the page requested)."""
    browser = chromium()
    if browser is None:
        raise FileNotFoundError("chromium not found (apt-get install -y chromium)")
    report = Path(report).resolve()
    text = report.read_text()
    copy = report.with_name(f".probe-{report.name}")
    copy.write_text(text.replace("</body>", PROBE + "</body>", 1))
    try:
        with tempfile.TemporaryDirectory() as profile:
            out = subprocess.run(
                [browser, "--headless", "--no-sandbox", "--disable-gpu",
                 "--hide-scrollbars", f"--user-data-dir={profile}",
                 "--host-resolver-rules=MAP * ~NOTFOUND", f"--window-size={width},{height}",
                 "--virtual-time-budget=15000", "--dump-dom", copy.as_uri()],
                capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        copy.unlink(missing_ok=True)
    m = re.search(r'<pre id="incastlab-probe">(.*?)</pre>', out.stdout, re.S)
    if not m:
        raise RuntimeError(f"the probe did not report (chromium exit {out.returncode}): "
                           f"{out.stderr[-500:]}")
    import html

    return json.loads(html.unescape(m.group(1)))


EXTERNAL = re.compile(r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//"""
                      r"""|url\(\s*["']?\s*(?:https?:)?//|@import""", re.I)


def external_references(page: str) -> list[str]:
    """Places where HTML would load something from another host (src/href to http(s)
    or protocol-relative URLs, CSS url() or @import), outside the inlined scripts'
    code. The inlined plotly.js holds URL strings of its map tiles and the like, which
    a page without maps never requests: scripts are left out of this search (the
    browser probe's `resources` is the check that nothing is requested)."""
    outside = re.sub(r"<script\b[^>]*>.*?</script>", "", page, flags=re.S | re.I)
    return [outside[max(0, m.start() - 40):m.end() + 40] for m in EXTERNAL.finditer(outside)]
