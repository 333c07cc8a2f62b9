"""compare_runs: grouping by spec differences, t-based confidence intervals."""
import json
import math

import pandas as pd
import pytest

from incastlab.commands.common import compare_runs
from incastlab.analysis.compare import differing_keys, group_label, mean_ci, t975
from incastlab.analysis.synthetic import make_run_dir

T0 = 1_700_000_000.0


def _incast_run(path, policy, seed, goodputs, status="complete"):
    ev = [{"event": "start", "role": "client", "rank": 0, "mode": "incast", "t": T0}]
    ev += [{"event": "round", "round": r, "t_start": T0 + r, "t_end": T0 + r + 0.5,
            "senders": 4, "block_bytes": 1000, "bytes": 4000, "goodput_mbps": g}
           for r, g in enumerate(goodputs)]
    spec = (f'[routing]\npolicy = "{policy}"\n[run]\nseed = {seed}\nname = "{path.name}"\n'
            '[workload]\nkind = "incast"\n')
    return make_run_dir(path, status=status, workers={0: ev}, spec_text=spec, t0=T0)


def test_t_quantiles_and_ci():
    assert t975(1) == pytest.approx(12.706, abs=1e-3)
    assert t975(4) == pytest.approx(2.776, abs=1e-3)
    s = mean_ci([1.0, 2.0, 3.0])
    assert s["n"] == 3 and s["mean"] == 2.0 and s["sd"] == 1.0
    assert s["ci95"] == pytest.approx(4.303 / math.sqrt(3), rel=1e-3)
    assert math.isnan(mean_ci([5.0])["ci95"]) and mean_ci([None])["n"] == 0


def test_grouping_keys_ignore_seeds():
    a = {"routing": {"policy": "ecmp"}, "run": {"seed": 1, "name": "x"}}
    b = {"routing": {"policy": "single"}, "run": {"seed": 2, "name": "y"}}
    assert differing_keys([a, b]) == ["routing.policy"]
    assert group_label(a, ["routing.policy"]) == "policy=ecmp"
    assert differing_keys([a, a]) == [] and group_label(a, []) == "all runs"


def test_compare_runs(tmp_path):
    runs = [_incast_run(tmp_path / "e1", "ecmp", 1, [10, 10]),
            _incast_run(tmp_path / "e2", "ecmp", 2, [20, 20]),
            _incast_run(tmp_path / "e3", "ecmp", 3, [30, 30]),
            _incast_run(tmp_path / "s1", "single", 1, [5, 5]),
            _incast_run(tmp_path / "s2", "single", 2, [7, 7]),
            _incast_run(tmp_path / "bad", "single", 3, [99], status="aborted")]
    out = compare_runs(runs, tmp_path / "cmp")
    table = pd.read_csv(out["table"])
    g = table[table["metric"] == "goodput_mbps"].set_index("group")
    assert g.loc["policy=ecmp", "mean"] == 20 and g.loc["policy=ecmp", "n"] == 3
    assert g.loc["policy=ecmp", "ci95"] == pytest.approx(4.303 * 10 / math.sqrt(3), rel=1e-3)
    assert g.loc["policy=single", "mean"] == 6 and g.loc["policy=single", "n"] == 2  # aborted out
    page = out["report"].read_text()
    assert "did not complete" in page and "bad (aborted)" in page
    assert out["plots"] and all(p.read_bytes()[:4] == b"\x89PNG" for p in out["plots"])
    data = json.loads(out["metrics"].read_text())
    assert data["groups_differ_in"] == ["routing.policy"]


def test_sweep_axis_gets_a_line_plot(tmp_path):
    runs = []
    for senders in (2, 4, 8):
        for rto in (200, 1):
            for rep in (1, 2):
                g = 18.0 if rto == 1 else 20.0 / senders
                ev = [{"event": "start", "role": "client", "rank": 0, "mode": "incast",
                       "t": T0}]
                ev += [{"event": "round", "round": r, "t_start": T0 + r, "t_end": T0 + r + 0.5,
                        "senders": senders, "block_bytes": 1000, "bytes": 4000,
                        "goodput_mbps": g + 0.1 * rep} for r in range(3)]
                spec = (f'[workload]\nkind = "incast"\nsenders = {senders}\n'
                        f'rto_min_ms = {rto}\n[run]\nseed = {rep}\n')
                runs.append(make_run_dir(tmp_path / f"s{senders}-r{rto}-{rep}",
                                         workers={0: ev}, spec_text=spec, t0=T0))
    out = compare_runs(runs, tmp_path / "cmp")
    names = {p.name for p in out["plots"]}
    assert "compare_goodput_mbps_vs_senders.png" in names
    table = pd.read_csv(out["table"])
    g = table[table["metric"] == "goodput_mbps"].set_index("group")
    assert g.loc["rto_min_ms=200,senders=8", "mean"] == pytest.approx(2.5 + 0.15)
    assert g.loc["rto_min_ms=200,senders=8", "n"] == 2


# ---- few runs, counts, duplicates, links, confounds (issue 14) ------------------------

from incastlab.analysis.compare import (  # noqa: E402
    MIN_N_FOR_CI, DuplicateRunError, cell_text, confounds, group_stats)


def _queues(drops):
    """Two samples of one leaf port; `drops` cumulative at the second."""
    return [{"t": T0 + k, "switch": "lf1", "port": 1, "iface": "lf1-eth1", "backlog_bytes": 0,
             "backlog_pkts": 0, "drops": drops * k, "overlimits": 0, "sent_bytes": 1000 * k,
             "sent_pkts": k, "requeues": 0} for k in (0, 1)]


def test_fewer_than_three_runs_get_no_interval():
    one, two = group_stats([7.0]), group_stats([3.0, 5.0])
    assert MIN_N_FOR_CI == 3
    assert (one["n"], one["mean"], one["values"]) == (1, 7.0, [7.0])
    assert math.isnan(one["ci95"]) and math.isnan(one["lo"])
    # n = 2: t(0.975, 1) = 12.7 would give 4 ± 12.7; each value is shown instead
    assert two["n"] == 2 and two["mean"] == 4.0 and math.isnan(two["ci95"])
    assert cell_text(one) == "7" and cell_text(two) == "3, 5"
    three = group_stats([1.0, 2.0, 3.0])
    assert three["ci95"] == pytest.approx(4.303 / math.sqrt(3), rel=1e-3)
    assert three["lo"] == pytest.approx(2 - three["ci95"])  # signed: not clipped
    assert cell_text(three) == "2 ± 2.5"


def test_count_intervals_stop_at_zero():
    # retransmissions 0, 0, 100: mean 33.3, sd 57.7, CI half-width 4.303*57.7/1.732 = 143
    s = group_stats([0, 0, 100], nonneg=True)
    assert s["ci95"] == pytest.approx(143.4, abs=0.1)
    assert s["lo"] == 0.0 and s["hi"] == pytest.approx(33.33 + 143.4, abs=0.1)
    assert cell_text(s, lambda v: f"{v:,.0f}") == "33 [0, 177]"
    assert group_stats([0, 0, 100])["lo"] < 0  # the same numbers as a signed quantity
    assert cell_text(group_stats([4, 4, 4], nonneg=True)) == "4 ± 0"
    assert group_stats([None, float("nan")])["n"] == 0
    assert cell_text(group_stats([])) == "n/a"


def test_compare_with_one_two_and_three_runs(tmp_path):
    runs = [_incast_run(tmp_path / "a1", "ecmp", 1, [10, 10]),
            _incast_run(tmp_path / "b1", "single", 1, [4, 4]),
            _incast_run(tmp_path / "b2", "single", 2, [8, 8]),
            _incast_run(tmp_path / "c1", "spread", 1, [1, 1]),
            _incast_run(tmp_path / "c2", "spread", 2, [2, 2]),
            _incast_run(tmp_path / "c3", "spread", 3, [3, 3])]
    out = compare_runs(runs, tmp_path / "cmp")
    t = pd.read_csv(out["table"])
    g = t[t["metric"] == "goodput_mbps"].set_index("group")
    assert g.loc["policy=ecmp", "n"] == 1 and math.isnan(g.loc["policy=ecmp", "ci95"])
    assert math.isnan(g.loc["policy=single", "ci95"]) and g.loc["policy=single", "values"] == "4;8"
    assert g.loc["policy=spread", "ci95"] == pytest.approx(4.303 / math.sqrt(3), rel=1e-3)
    assert g.loc["policy=spread", "lo"] == 0  # 2 - 2.48 < 0: goodput cannot be negative
    page = out["report"].read_text()
    assert ">4, 8<" in page and ">10<" in page and "2 [0, 4.48]" in page
    assert "n = 2" in page and "Can these be compared?" in page
    # every run linked to its report (relative to compare.html); none built here
    assert "(no report.html)" in page
    (tmp_path / "a1" / "report.html").write_text("x")
    page = compare_runs(runs, tmp_path / "cmp")["report"].read_text()
    assert "<a href='../a1/report.html'>a1</a>" in page
    assert (tmp_path / "cmp" / "runs.csv").exists() and "href='runs.csv'" in page


def test_all_zero_metrics_are_not_drawn(tmp_path):
    from incastlab.analysis import metrics

    # a plotted metric of the queues' drops (tc_drops itself is not plotted: compare
    # draws losses from the captures), registered for this test
    drops = metrics.Metric("queue_drops_plotted", "queue drops", "packets",
                           "Drops the queues counted.",
                           lambda a: (a.metrics.get("reconciliation") or {}).get("tc_drops"),
                           ("queues",), plot=True)
    metrics.register(drops)
    try:
        runs = [make_run_dir(tmp_path / f"r{i}", workers={0: [
            {"event": "start", "role": "client", "rank": 0, "mode": "incast", "t": T0},
            {"event": "round", "round": 0, "t_start": T0, "t_end": T0 + 0.5, "senders": 4,
             "block_bytes": 1000, "bytes": 4000, "goodput_mbps": 5.0 + i}]},
            spec_text=f'[workload]\nkind = "incast"\nsenders = {2 + i}\n', t0=T0,
            queues=_queues(0)) for i in range(2)]
        out = compare_runs(runs, tmp_path / "cmp")
        names = {p.name for p in out["plots"]}
        assert "compare_queue_drops_plotted.png" not in names
        assert "compare_goodput_mbps.png" in names
        # in the metric's words, its key beside them (issue 27 item 4)
        page = out["report"].read_text()
        said = page.split("id='not-drawn'>", 1)[1].split("</p>", 1)[0]
        assert said.startswith("Not drawn, being 0 in every run: ")
        assert "queue drops (queue_drops_plotted)" in said and ": 0 in every" not in said
        # one run with a drop: drawn
        runs.append(make_run_dir(tmp_path / "r9", workers={0: [
            {"event": "start", "role": "client", "rank": 0, "mode": "incast", "t": T0}]},
            spec_text='[workload]\nkind = "incast"\nsenders = 9\n', t0=T0,
            queues=_queues(3)))
        assert "compare_queue_drops_plotted.png" in {p.name for p in compare_runs(
            runs, tmp_path / "cmp2")["plots"]}
    finally:
        metrics.unregister("queue_drops_plotted")


def test_the_same_run_twice_is_refused(tmp_path):
    import shutil

    a = _incast_run(tmp_path / "a", "ecmp", 1, [10])
    b = _incast_run(tmp_path / "b", "ecmp", 2, [12])
    with pytest.raises(DuplicateRunError, match="same run"):
        compare_runs([a, b, tmp_path / "x" / ".." / "a"], tmp_path / "cmp")
    shutil.copytree(a, tmp_path / "a-copy")
    with pytest.raises(DuplicateRunError, match="a copy"):
        compare_runs([a, b, tmp_path / "a-copy"], tmp_path / "cmp")
    (tmp_path / "x").mkdir()
    assert compare_runs([a, b], tmp_path / "cmp")["report"].exists()  # distinct: fine


def _run(group, balance=None, saturated=False, lossy=(), git="abc", host="vm", kept_up=True):
    return {"group": group, "headline": {"spine_max_mean": balance},
            "fidelity": {"kept_up": kept_up, "text": "The datapath kept up." if kept_up else
                         "The emulation did not keep up: 9 packets uncounted."},
            "manifest": {"host": host, "datapath": "user", "capture_lossy": list(lossy),
                         "cpu": {"saturated": saturated, "cores": 2},
                         "versions": {"incastlab": "0.1.0", "git": git, "kernel": "6.1",
                                      "openvswitch": "3.1.0"}}}


def _flags(runs):
    return {c.check: c for c in confounds(runs)}


def test_confound_flags_stay_quiet_for_like_runs():
    f = _flags([_run("kind=ps", 1.05), _run("kind=ps", 1.1), _run("kind=ring", 1.0)])
    assert [c.differs for c in f.values()] == [False] * 5
    assert "every run: incastlab 0.1.0 git abc" in f["code version"].text


def test_confound_flags_routing_balance():
    # the demo: PS on one spine (2.09, 2.0), ring spread (1.04, 1.04)
    f = _flags([_run("kind=ps", 2.09), _run("kind=ps", 2.0), _run("kind=ring", 1.04),
                _run("kind=ring", 1.04)])["routing balance"]
    assert f.differs and "factor 1.97" in f.text and "kind=ps: 2.09, 2.00" in f.text
    # equal medians, but one group mixes a balanced and an unbalanced run
    f = _flags([_run("a", 1.0), _run("a", 2.0), _run("b", 1.5)])["routing balance"]
    assert f.differs and "within a" in f.text and "factor" not in f.text
    assert _flags([_run("a"), _run("b")])["routing balance"].differs is None


def test_confound_flags_fidelity_captures_code_machine():
    f = _flags([_run("a", kept_up=False), _run("b")])
    assert f["fidelity"].differs and "a: 1 of 1 runs; b: 0 of 1 runs" in f["fidelity"].text
    assert "9 packets uncounted" in f["fidelity"].text  # the verdict's own words
    # the CPU rule is supporting evidence: shown, never the flag
    f = _flags([_run("a", saturated=True), _run("b")])
    assert not f["fidelity"].differs and "called saturated: a: 1 of 1; b: 0 of 1" in \
        f["fidelity"].text
    # without metrics.json's verdict, the manifest's run-time one
    r = _run("a")
    del r["fidelity"]
    r["manifest"]["fidelity"] = {"kept_up": False, "text": "socket drops"}
    assert _flags([r, _run("b")])["fidelity"].differs
    f = _flags([_run("a", lossy=["h1-eth0"]), _run("b")])
    assert f["capture drops"].differs and not f["fidelity"].differs
    f = _flags([_run("a", git="abc"), _run("b", git="def-dirty")])
    assert f["code version"].differs and "def-dirty" in f["code version"].text
    f = _flags([_run("a", host="vm"), _run("b", host="laptop")])
    assert f["machine"].differs and not f["code version"].differs
    # capture drops counted by tcpdump (capture_drops), not only capture_lossy
    r = _run("a")
    r["manifest"]["capture_drops"] = {"h1-eth0": {"dropped_by_kernel": 3}}
    assert _flags([r, _run("b")])["capture drops"].differs
    none = _flags([{"group": "a", "headline": {}, "manifest": {}}])
    assert all(c.differs is None for c in none.values())


# ---- the interactive figure's data (interactive_compare.py, issue 14) ------------------

from incastlab.analysis import interactive_compare as ic  # noqa: E402
from incastlab.analysis import metrics as _metrics  # noqa: E402
from incastlab.jobs import JOBS  # noqa: E402


def _r(group, name, value):
    return {"group": group, "name": name, "dir": f"/runs/{name}",
            "headline": {"retransmissions": value, "zeros": 0}}


# one run in a, two in b, three in c (retransmissions 0, 0, 100: the count whose signed
# interval would reach -110); c4 measured nothing and d1 a NaN: neither is a point
IRUNS = [_r("a", "a1", 7), _r("b", "b1", 0), _r("b", "b2", 4), _r("c", "c1", 0),
         _r("c", "c2", 0), _r("c", "c3", 100), _r("c", "c4", None), _r("c", "c5", float("nan"))]


def _itable(runs, metric="retransmissions"):
    groups = dict.fromkeys(r["group"] for r in runs)
    return pd.DataFrame([{"group": g, "metric": metric, "unit": "packets", **group_stats(
        [r["headline"][metric] for r in runs if r["group"] == g], nonneg=True)}
        for g in groups])


def test_interactive_points_are_every_run_with_its_link():
    pts = ic.run_points(IRUNS, ["retransmissions"], {"/runs/a1": "../a1/report.html"})
    assert list(pts["run"]) == ["a1", "b1", "b2", "c1", "c2", "c3"]
    assert list(pts["value"]) == [7, 0, 4, 0, 0, 100]
    assert list(pts["group"]) == ["a", "b", "b", "c", "c", "c"]
    assert list(pts["link"]) == ["../a1/report.html"] + [""] * 5


def test_interactive_traces_follow_compares_rules():
    pts = ic.run_points(IRUNS, ["retransmissions"], {"/runs/a1": "../a1/report.html"})
    points, mean = ic.metric_traces(pts, _itable(IRUNS), "retransmissions", ["a", "b", "c"],
                                    "packets", lambda s: cell_text(s, lambda v: f"{v:,.0f}"))
    # every run a point in its group's slot (0, 1, 2), spread by at most JITTER
    assert [round(x) for x in points["x"]] == [0, 1, 1, 2, 2, 2]
    assert max(abs(x - round(x)) for x in points["x"]) == pytest.approx(ic.JITTER)
    assert points["y"] == [7, 0, 4, 0, 0, 100]
    assert points["customdata"][0][:3] == ["a1", "../a1/report.html", "a"]
    assert "click" in points["customdata"][0][3] and points["customdata"][1][3] == \
        "no report.html"
    # the means beside the points; an interval only for c (n = 3)
    assert mean["x"] == [ic.MEAN_OFFSET, 1 + ic.MEAN_OFFSET, 2 + ic.MEAN_OFFSET]
    assert mean["y"][:2] == [7, 2] and mean["y"][2] == pytest.approx(100 / 3)
    err = mean["error_y"]
    assert err["array"][:2] == [None, None] and err["arrayminus"][:2] == [None, None]
    # c: up by the half-width 4.303 * 57.7 / sqrt(3) = 143.4, down only to 0 (a count)
    assert err["array"][2] == pytest.approx(143.4, abs=0.1)
    assert err["arrayminus"][2] == pytest.approx(100 / 3)
    assert "fewer than 3 runs: no interval" in mean["hovertext"][1]
    assert "0, 4" in mean["hovertext"][1] and "33 [0, 177]" in mean["hovertext"][2]


def _plotly_figure(page, div_id=ic.DIV_ID):
    """(data, layout) of the figure plotly draws into `div_id`: the JSON arguments of its
    Plotly.newPlot call, as the browser gets them."""
    at = page.index(f'"{div_id}"', page.index("Plotly.newPlot")) + len(div_id) + 2
    dec = json.JSONDecoder()
    rest = page[at:].lstrip(" \n,")
    data, end = dec.raw_decode(rest)
    layout, _ = dec.raw_decode(rest[end:].lstrip(" \n,"))
    return data, layout


def _imetric(name, plot):
    return _metrics.Metric(name, name.replace("_", " "), "packets", "test", lambda a: None,
                           plot=plot)


def test_interactive_figure_leaves_out_all_zero_and_fetches_nothing():
    pts = ic.run_points(IRUNS, ["retransmissions", "zeros"], {"/runs/a1": "../a1/report.html"})
    table = pd.concat([_itable(IRUNS), _itable(IRUNS, "zeros")])
    declared = [_imetric("zeros", True), _imetric("retransmissions", False)]
    page, zero = ic.figure(table, pts, declared, cell_text)
    assert zero == ["zeros"]
    assert page.count(f'id="{ic.DIV_ID}"') == 1 and page.count("Plotly.newPlot") == 1
    data, layout = _plotly_figure(page)
    # one metric drawn (retransmissions): its points and its means, shown at first
    assert [(t["name"], t["visible"]) for t in data] == [
        ("each run", True), ("group mean (95 % CI where n ≥ 3)", True)]
    assert data[0]["customdata"][0][:2] == ["a1", "../a1/report.html"]
    assert data[0]["y"] == [7, 0, 4, 0, 0, 100] and "plotly_click" in page
    assert [b["label"] for b in layout["updatemenus"][0]["buttons"]] == [
        "retransmissions (packets)"]
    assert layout["yaxis"]["rangemode"] == "tozero"
    assert [t.split("<br>")[0] for t in layout["xaxis"]["ticktext"]] == ["a", "b", "c"]
    assert "://" not in page and "<script src" not in page  # nothing from another host
    # nothing but zeros: no figure at all
    assert ic.figure(_itable(IRUNS, "zeros"), pts[pts["metric"] == "zeros"],
                     declared, cell_text) == (None, ["zeros"])


def test_compare_page_inlines_plotly_once_and_links_points(tmp_path):
    from incastlab.analysis import interactive

    runs = [_incast_run(tmp_path / "a1", "ecmp", 1, [10, 10]),
            _incast_run(tmp_path / "b1", "single", 1, [4, 4]),
            _incast_run(tmp_path / "b2", "single", 2, [8, 8])]
    (tmp_path / "a1" / "report.html").write_text("x")
    page = compare_runs(runs, tmp_path / "cmp")["report"].read_text()
    assert page.count(interactive.script()) == 1 and page.count("Plotly.newPlot") == 1
    data, layout = _plotly_figure(page)
    menu = [b["label"] for b in layout["updatemenus"][0]["buttons"]]
    m = next(m for m in _metrics.compared(JOBS) if m.name == "goodput_mbps")
    goodput = menu.index(f"{m.label} ({m.unit})")
    pts = data[2 * goodput]  # two traces a metric: its runs, then its groups' means
    assert pts["name"] == "each run" and pts["y"] == [10, 4, 8]
    # each run's link, relative to compare.html ("" where no report.html was built)
    assert [c[:2] for c in pts["customdata"]] == [["a1", "../a1/report.html"], ["b1", ""],
                                                   ["b2", ""]]
    assert data[2 * goodput + 1]["error_y"]["array"] == [None, None]  # n = 1, 2: no CI
    assert sum(t["visible"] is True for t in data) == 2  # one metric shown at a time
    assert "://" not in page
    # the per-group PNGs stay (files, and on the page in a box)
    assert "<details><summary>The same per-group plots" in page
    assert (tmp_path / "cmp" / "plots" / "compare_goodput_mbps.png").exists()
