"""The fidelity verdict (analysis/fidelity.py) and its run-time collector
(incastlab/capture/datapath.py), without root: the parsers on output captured from this
machine's Open vSwitch 3.1, each check of the verdict on synthetic run directories whose
answer is placed by hand, and the rule that metrics.json never contradicts a manifest's
``kept_up: false``."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import fidelity as fid
from incastlab.analysis import queues as qmod
from incastlab.analysis.report import analyse, build_report
from incastlab.analysis.synthetic import demo_fabric, make_demo_run
from incastlab.capture import datapath as dp

# `ss -0 -m -p -n`, `ovs-appctl dpctl/show -s` and `coverage/show` during a star run here
SS = """Netid Recv-Q Send-Q Local Address:Port     Peer Address:PortProcess
p_raw 0      0                [0]:*                    *     users:(("ovs-vswitchd",pid=3150,fd=67)) skmem:(r0,rb4194304,t0,tb67108864,f0,w0,o0,bl0,d{send})
p_raw 0      0                  *:lf1-eth2             *     users:(("ovs-vswitchd",pid=3150,fd=37)) skmem:(r0,rb4194304,t0,tb67108864,f0,w0,o176,bl0,d{eth2})
p_raw 2280   0                  *:lf1-eth1             *     users:(("ovs-vswitchd",pid=3150,fd=40)) skmem:(r2280,rb4194304,t0,tb67108864,f0,w0,o176,bl0,d0)
p_raw 0      0                  *:eth9                 *     users:(("dhclient",pid=77,fd=3)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d50)
"""  # noqa: E501
DPCTL = """netdev@ovs-netdev:
  lookups: hit:20703 missed:25 lost:{lost}
  flows: 25
  port 0: ovs-netdev (tap)
    RX packets:0 errors:0 dropped:0 overruns:0 frame:0
    TX packets:0 errors:0 dropped:0 aborted:0 carrier:0
    collisions:0
    RX bytes:0  TX bytes:0
  port 1: lf1-eth2
    RX packets:3495 errors:0 dropped:{rx} overruns:0 frame:0
    TX packets:1612 errors:{txe} dropped:0 aborted:0 carrier:0
    collisions:0
    RX bytes:5244822 (5.0 MiB)  TX bytes:110084 (107.5 KiB)
"""
COVERAGE = """Event coverage, avg rate over last: 5 seconds, last minute, last hour,  hash=d7d9939c:
datapath_drop_meter       28.6/sec     2.383/sec        0.0397/sec   total: {meter}
datapath_drop_userspace_action_error   4.0/sec     0.867/sec        0.0367/sec   total: {ua}
netdev_sent              1052.8/sec   598.133/sec       35.0889/sec   total: 127379
93 events never hit
"""


def _snap(send=0, eth2=0, lost=0, rx=0, txe=0, meter=507, ua=132):
    return {"sockets": dp.parse_socket_drops(SS.format(send=send, eth2=eth2)),
            "dpctl": dp.parse_dpctl(DPCTL.format(lost=lost, rx=rx, txe=txe)),
            "coverage": dp.parse_coverage(COVERAGE.format(meter=meter, ua=ua)), "errors": []}


def test_parsers_read_ovs_vswitchds_sockets_ports_and_drop_reasons():
    s = _snap(send=2, eth2=5, lost=1, rx=3, txe=4)
    # another process's packet socket is not the datapath's
    assert s["sockets"] == {"receive": {"lf1-eth2": 5, "lf1-eth1": 0}, "send": 2}
    assert s["dpctl"]["lookups_lost"] == 1
    assert s["dpctl"]["ports"]["lf1-eth2"] == {"rx_errors": 0, "rx_dropped": 3,
                                               "tx_errors": 4, "tx_dropped": 0}
    assert s["coverage"] == {"datapath_drop_meter": 507,
                             "datapath_drop_userspace_action_error": 132}


def test_delta_is_what_the_workload_added_on_this_fabrics_ports():
    before, after = _snap(eth2=5, meter=500), _snap(send=1, eth2=9, lost=2, rx=3, meter=507,
                                                     ua=140)
    d = dp.delta(before, after, ["lf1-eth1", "lf1-eth2"])
    assert d["socket_drops"] == {"lf1-eth2": 4} and d["send_socket_drops"] == 1
    assert d["port_drops"] == {"lf1-eth2": {"rx_dropped": 3}} and d["lookups_lost"] == 2
    # a packet-out's counter is not a loss
    assert d["coverage_drops"] == {"datapath_drop_meter": 7}
    assert dp.delta(before, after, ["lf1-eth1"])["socket_drops"] == {}  # not our port
    broken = dict(after, dpctl=None, errors=["ovs-appctl dpctl/show -s: exit 1"])
    d = dp.delta(before, broken, ["lf1-eth2"])
    assert d["port_drops"] is None and d["not_read"] == ["ovs-appctl dpctl/show -s: exit 1"]


def _manifest(counters=None, capture_drops=None, cpu=None) -> dict:
    m = {"cpu": cpu or {"saturated": False, "mean_busy": 0.4}}
    if counters is not None:
        m["fidelity"] = {"counters": counters}
    if capture_drops is not None:
        m["capture_drops"] = capture_drops
    return m


def test_runtime_verdict_judges_counters_and_tcpdump_and_never_the_cpu():
    quiet = {"socket_drops": {}, "send_socket_drops": 0, "port_drops": {},
             "lookups_lost": 0, "coverage_drops": {}, "not_read": []}
    v = fid.runtime_verdict(_manifest(quiet, {"h1-eth0": {"dropped_by_kernel": 0}},
                                      cpu={"saturated": True, "mean_busy": 0.99}))
    assert v["kept_up"] is True and v["evidence"] == []
    assert v["checked"] == ["datapath_drops", "capture_drops"]
    assert "99% busy" in v["supporting"]["text"] and "supporting" in v["supporting"]["text"]
    for counters, amount in (({"socket_drops": {"lf1-eth2": 4}}, 4),
                             ({"send_socket_drops": 1}, 1),
                             ({"port_drops": {"lf1-eth2": {"tx_dropped": 2}}}, 2),
                             ({"lookups_lost": 3}, 3),
                             ({"coverage_drops": {"datapath_drop_meter": 7}}, 7)):
        v = fid.runtime_verdict(_manifest(dict(quiet, **counters)))
        assert v["kept_up"] is False, counters
        assert [e["check"] for e in v["evidence"]] == ["datapath_drops"]
        assert v["evidence"][0]["amount"] == amount
    v = fid.runtime_verdict(_manifest(quiet, {"h3-eth0": {"dropped_by_kernel": 3}}))
    assert not v["kept_up"] and v["evidence"][0]["where"] == {"h3-eth0": 3}
    v = fid.runtime_verdict(_manifest())  # an old run: nothing recorded, nothing claimed
    assert v["checked"] == [] and set(v["not_checked"]) == {"datapath_drops", "capture_drops"}


# --- shaped ports below their rate ------------------------------------------------------

FABRIC = demo_fabric(rate_mbps=10.0)  # every link 10 Mbit/s: 12,500 bytes per 10 ms
PORT, RATE = "lf2-eth1", 10e6 / 8
T0 = 1_700_000_000.0


def _queues(sent_per_interval, backlog, times=None) -> pd.DataFrame:
    """queue_deltas of one port sampled every 10 ms (or at `times`, s after T0)."""
    times = np.arange(len(sent_per_interval) + 1) * 0.01 if times is None else times
    sent = np.concatenate([[0.0], np.cumsum(sent_per_interval)])
    backlog = np.broadcast_to(backlog, len(times))
    return qmod.queue_deltas(pd.DataFrame({
        "t": T0 + times, "switch": "lf2", "port": 1, "iface": PORT, "backlog_bytes": backlog,
        "backlog_pkts": backlog // 1500, "drops": 0, "overlimits": 0, "sent_bytes": sent,
        "sent_pkts": sent // 1500, "requeues": 0}))


def _below(q, read_s=None):
    return fid.below_rate(q, FABRIC, T0, read_s)


def test_a_backlogged_port_sending_at_its_rate_keeps_up_and_one_short_of_it_does_not():
    full = 30_000  # more than an interval's 12,500 bytes: the shaper cannot run dry
    ok = _below(_queues([12_500] * 99, full))
    assert len(ok) == 1 and not ok["below"].any()
    assert ok["owed_bytes"].iloc[0] == pytest.approx(99 * 12_500)
    slow = _below(_queues([11_500] * 99, full))  # 92 % of the rate for a second
    assert slow["below"].all()
    assert slow["shortfall_bytes"].iloc[0] == pytest.approx(99 * 1_000)
    idle = _below(_queues([0] * 99, 0))  # nothing queued: nothing owed
    assert idle.empty


def test_the_tolerance_is_one_frame_and_one_read_lag_per_piece():
    # one piece of 99 intervals, read lag bound 2 ms: 1,514 + 2,500 bytes of slack
    tol = 1_514 + RATE * 0.002
    at = [12_500] * 99
    at[50] -= tol - 1
    assert not _below(_queues(at, 30_000), read_s=0.002)["below"].any()
    at[50] -= 2
    assert _below(_queues(at, 30_000), read_s=0.002)["below"].all()
    # without the sampler's read time, a read lags at most to the next sample (10 ms)
    assert not _below(_queues(at, 30_000))["below"].any()


def test_reads_that_lag_their_samples_cancel_inside_a_piece():
    # a shaper exactly at its rate, read 0-3 ms after each sample's time: the intervals
    # it shows are uneven, the piece's sum is not
    rng = np.random.default_rng(1)
    true = np.arange(100) * 0.01
    lag = rng.uniform(0, 0.003, 100)
    lag[0] = 0.003  # the worst case at the piece's start
    read = true + lag
    q = _queues(np.diff(read) * RATE, 30_000, times=true)
    assert not _below(q, read_s=0.003)["below"].any()


def test_a_queue_that_may_run_dry_owes_only_what_it_held():
    # 3,000 bytes queued at each sample, all of it sent: below the rate, but the shaper
    # had no more to send
    q = _queues([3_000] * 99, 3_000)
    below = _below(q, read_s=0.001)
    assert not below["below"].any()
    assert below["owed_bytes"].iloc[0] == pytest.approx(99 * 3_000)
    assert below["pieces"].iloc[0] == 99  # each may have run dry: a piece each
    # each piece's tolerance 1,514 + 1,250 bytes: 1,000 short is within it, 3,000 is not
    assert not _below(_queues([2_000] * 99, 3_000), read_s=0.001)["below"].any()
    assert _below(_queues([0] * 99, 3_000), read_s=0.001)["below"].all()


# --- the verdict of a run ---------------------------------------------------------------

def _edit(run, **fields):
    m = json.loads((run / "manifest.json").read_text())
    m.update(fields)
    (run / "manifest.json").write_text(json.dumps(m))


def test_a_demo_run_kept_up(tmp_path):
    make_demo_run(tmp_path / "run")
    v = analyse(tmp_path / "run").metrics["fidelity"]
    assert v["kept_up"] is True and v["evidence"] == []
    assert v["checked"] == ["uncounted_losses", "below_rate"]
    # its one second: 3 losses at lf2-eth1, where tc counted 6
    assert v["per_second"] == [{"second": 0, "captured_losses": 3, "tc_drops": 6,
                                "uncounted": 0, "below_rate_ports": "",
                                "shortfall_bytes": 0.0}]


def _without_tc_drops(run, keep_one_in: int | None = None):
    """tc's drop counters of the demo run (6 drops at lf2-eth1) zeroed, or divided."""
    q = pd.read_csv(run / "queues.csv")
    q["drops"] = q["drops"] // keep_one_in if keep_one_in else 0
    q.to_csv(run / "queues.csv", index=False)


def test_losses_tc_did_not_count_make_the_run_not_kept_up(tmp_path):
    run = tmp_path / "run"
    make_demo_run(run)
    _without_tc_drops(run)
    a = analyse(run)
    v = a.metrics["fidelity"]
    assert v["kept_up"] is False
    assert v["evidence"][0]["check"] == "uncounted_losses"
    assert v["evidence"][0]["where"] == {"lf2-eth1": 3} and v["evidence"][0]["amount"] == 3
    assert v["per_second"][0]["uncounted"] == 3
    assert a.problems[-1].startswith("The emulation did not keep up: the captures saw 3 "
                                     "packets lost beyond what tc counted")
    make_demo_run(tmp_path / "run2")
    _without_tc_drops(tmp_path / "run2", keep_one_in=3)  # tc counted 2 of the 3 losses
    v = analyse(tmp_path / "run2").metrics["fidelity"]
    assert v["evidence"][0]["where"] == {"lf2-eth1": 1}


def test_losses_while_a_link_is_down_are_the_events(tmp_path):
    run = tmp_path / "run"
    make_demo_run(run)
    _without_tc_drops(run)
    events = [{"kind": "apply", "index": 0, "action": "link_down", "t": T0},
              {"kind": "undo", "index": 0, "action": "link_down", "t": T0 + 0.5}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    v = analyse(run).metrics["fidelity"]
    assert v["kept_up"] is True and v["failure_windows"] == [[T0, T0 + 1.5]]


def test_metrics_never_contradict_a_manifest_that_did_not_keep_up(tmp_path):
    run = tmp_path / "run"
    make_demo_run(run)
    counters = {"socket_drops": {"lf2-eth1": 12}}
    _edit(run, fidelity=fid.runtime_verdict({"fidelity": {"counters": counters}}))
    m = json.loads(build_report(run, plots=False)["metrics"].read_text())["fidelity"]
    assert m["manifest_kept_up"] is False and m["kept_up"] is False
    assert m["evidence"][0]["where"] == {"receive socket lf2-eth1": 12}
    html = (run / "report.html").read_text()
    assert "kept_up: false" in html and "Fidelity: did the emulation keep up?" in html


def test_checks_without_their_inputs_say_why(tmp_path):
    run = tmp_path / "run"
    make_demo_run(run)
    (run / "fabric.json").unlink()
    v = analyse(run).metrics["fidelity"]
    assert v["kept_up"] is True and v["checked"] == []
    assert "fabric.json" in v["not_checked"]["uncounted_losses"]
    assert "fabric.json" in v["not_checked"]["below_rate"]
