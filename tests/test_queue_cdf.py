"""The queue-occupancy CDF per port (analysis/queuecdf.py, tables/queue_cdf.csv): over the
sampler's busy samples of the ports the queue figure shows, quantiles that are sampled
values (the smallest x with F(x) >= p), worked out by hand here."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis import queuecdf
from analysis.queues import queue_deltas
from analysis.synthetic_ecn import make_ecn_run
from incastlab.commands.common import build_report


def _queues(backlogs: list[int], sent: list[int], iface: str = "s1-eth1") -> pd.DataFrame:
    n = len(backlogs)
    return queue_deltas(pd.DataFrame({
        "t": 0.01 * np.arange(n), "iface": iface, "backlog_pkts": backlogs,
        "drops": 0, "sent_bytes": np.cumsum(sent) * 1000, "sent_pkts": np.cumsum(sent)}))


def test_quantiles_of_the_busy_samples_by_hand():
    # busy: 10 samples with backlogs 1..10 (sending); idle: 5 samples, nothing sent, empty
    backlogs = [0, 0] + list(range(1, 11)) + [0, 0, 0]
    sent = [0, 0] + [5] * 10 + [0, 0, 0]
    row = queuecdf.quantile_table(_queues(backlogs, sent), ["s1-eth1"], {"s1-eth1": 8}).iloc[0]
    # sorted 1..10: p50 is the 5th (F = 0.5), p90 the 9th, p99 the 10th (ceil(9.9))
    assert (row.samples, row.busy_samples) == (15, 10)
    assert (row.p50_pkts, row.p90_pkts, row.p99_pkts, row.max_pkts) == (5, 9, 10, 10)
    assert row.mean_pkts == pytest.approx(5.5) and row.limit_pkts == 8


def test_a_sample_that_sent_from_an_empty_queue_is_busy_and_a_stalled_full_one_too():
    # sample 1 sent but was empty (busy, 0); sample 3 held 8 packets and sent nothing
    # (stalled: busy); sample 4 empty and silent (idle)
    q = _queues([0, 0, 4, 8, 0], [0, 3, 3, 0, 0])
    assert sorted(queuecdf.busy_backlog(q, "s1-eth1")) == [0, 4, 8]
    row = queuecdf.quantile_table(q, ["s1-eth1"]).iloc[0]
    assert (row.p50_pkts, row.max_pkts) == (4, 8)   # sorted 0, 4, 8: the 2nd is p50


def test_a_port_without_a_busy_sample_has_no_quantiles():
    row = queuecdf.quantile_table(_queues([0, 0, 0], [0, 0, 0]), ["s1-eth1"]).iloc[0]
    assert row.busy_samples == 0 and np.isnan(row.p50_pkts) and np.isnan(row.max_pkts)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    run = tmp_path_factory.mktemp("queue-cdf") / "run"
    make_ecn_run(run)
    return run, build_report(run)


def test_the_synthetic_run_table_figure_section_and_metrics(built):
    # analysis/synthetic_ecn.py: lf2-eth1 sampled 13 times, every 5 ms; the first sample
    # sent nothing and was empty (idle), the second sent from an empty queue, then
    # 22 23 24 25 20 21 22 23 24 25 20: busy sorted 0 20 20 21 22 22 23 23 24 24 25 25,
    # p50 = the 6th = 22, p90 = the 11th (ceil 10.8) = 25, mean 249/12; sp1-eth2 held 2
    # packets in every sample (busy all 13)
    run, _ = built
    t = pd.read_csv(run / "tables" / "queue_cdf.csv").set_index("iface")
    assert list(t.index) == ["lf2-eth1", "sp1-eth2"]   # the queue figure's ports, its order
    lf = t.loc["lf2-eth1"]
    assert (lf.samples, lf.busy_samples) == (13, 12)
    assert (lf.p50_pkts, lf.p90_pkts, lf.p99_pkts, lf.max_pkts) == (22, 25, 25, 25)
    assert lf.mean_pkts == pytest.approx(249 / 12)
    sp = t.loc["sp1-eth2"]
    assert (sp.busy_samples, sp.p50_pkts, sp.max_pkts) == (13, 2, 2)
    m = json.loads((run / "metrics.json").read_text())["queue_cdf"]
    assert m["lf2-eth1"]["p50_pkts"] == 22 and m["sp1-eth2"]["busy_samples"] == 13
    page = (run / "report.html").read_text()
    section = page[page.index("Queue occupancy CDF per port"):]
    assert "over busy time, not all time" in section and "every 5 ms" in section
    assert "tables/queue_cdf.csv" in section
    assert (run / "plots" / "queue_cdf.png").stat().st_size > 0
    assert "plots/queue_cdf.png" in (run / "summary.md").read_text()


def test_the_figure_skips_ports_without_busy_samples_and_none_without_any(tmp_path):
    q = pd.concat([_queues([1, 2, 3], [1, 1, 1], "a"), _queues([0, 0, 0], [0, 0, 0], "idle")])
    path = queuecdf.cdf_figure(q, ["a", "idle"], tmp_path / "c.png", threshold=4)
    assert path is not None and path.stat().st_size > 0
    assert queuecdf.cdf_figure(q, ["idle"], tmp_path / "d.png") is None
