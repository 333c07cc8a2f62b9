"""render.safe_plot, the one way every figure of the report is drawn (the common ones,
and the failover, latency and queue-CDF stages'): no stale figure of an earlier build,
a plotting bug one of the run's problems."""
from __future__ import annotations

from types import SimpleNamespace

from incastlab.analysis import render


def test_a_stale_figure_goes_and_a_failed_plot_is_a_problem(tmp_path):
    a = SimpleNamespace(problems=[])
    stale = tmp_path / "queue_cdf.png"
    stale.write_bytes(b"old")
    assert render.safe_plot(a, "queue_cdf", stale, lambda p: None) is None
    assert not stale.exists() and a.problems == []  # nothing to draw: nothing left

    def broken(path):
        raise ValueError("no axes")
    assert render.safe_plot(a, "events", tmp_path / "events.png", broken) is None
    assert a.problems == ["plot events failed: ValueError('no axes')"]

    drawn = render.safe_plot(a, "latency", tmp_path / "latency.png",
                             lambda p: p.write_bytes(b"png") and p)
    assert drawn == tmp_path / "latency.png" and drawn.read_bytes() == b"png"
