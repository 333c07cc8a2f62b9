"""Live progress: plain lines when the output is not a terminal, rich bars when it is,
nothing with --quiet."""
import io

from incastlab import progress as prog
from incastlab.progress import Progress


def test_plain_lines_when_not_a_terminal(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(prog.time, "monotonic", lambda: now[0])
    out = io.StringIO()  # not a terminal
    p = Progress(stream=out)
    assert not p.live

    def at(t, call, *args):
        now[0] = t
        call(*args)

    at(1, p.phase, "fabric ready")
    at(2, p.iterations, {"h2": 1, "h3": 0}, 10)    # shown (the first), no estimate yet
    at(3, p.iterations, {"h2": 2, "h3": 1}, 10)    # < 10 s since the last line: not shown
    at(20, p.iterations, {"h2": 5, "h3": 4}, 10)   # shown; slowest 4 of 10 in 20 s: 30 left
    at(21, p.iterations, {"h2": 5, "h3": 4}, 10)   # nothing new: not shown
    at(30, p.iterations, {"h2": 10, "h3": 10}, 10)  # finished: shown at once
    at(31, p.phase, "tearing down")
    assert out.getvalue().splitlines() == [
        "[   1.0s] fabric ready",
        "[   2.0s] iterations: h2 1/10 h3 0/10",
        "[  20.0s] iterations: h2 5/10 h3 4/10 (about 30 s left)",
        "[  30.0s] iterations: h2 10/10 h3 10/10",
        "[  31.0s] tearing down"]


def test_quiet_writes_nothing():
    out = io.StringIO()
    p = Progress(enabled=False, stream=out, live=True)
    p.phase("x")
    p.iterations({"h1": 1}, 2)
    p.close()
    assert out.getvalue() == ""


def test_live_bars_per_worker():
    out = io.StringIO()
    p = Progress(stream=out, live=True)  # as on a terminal
    assert p.live
    p.phase("workload ps starting")
    p.iterations({"h2": 3, "h3": 7}, 10)
    p.iterations({"h2": 10, "h3": 10}, 10)
    p.phase("tearing down")  # ends the bars, which stay as they were
    text = out.getvalue()
    assert "workload ps starting" in text and "tearing down" in text
    assert text.index("workload ps starting") < text.index("h2") < text.index("tearing down")
    assert "10/10" in text and "h3" in text


def test_remaining_time_at_the_slowest_pace():
    assert prog._remaining({"a": 4, "b": 8}, 10, 20.0) == 30.0  # 5 s per step, 6 left
    assert prog._remaining({"a": 0}, 10, 5.0) is None
    assert prog._remaining({"a": 10}, 10, 5.0) is None
