"""compare_runs: grouping by spec differences, t-based confidence intervals."""
import json
import math

import pandas as pd
import pytest

from incastlab.analysis import compare_runs
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
