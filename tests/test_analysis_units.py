"""Small pure functions of the analysis: counters, fabric maps, paths, episodes."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import episodes, queues, reconcile, rundir
from incastlab.analysis.synthetic import demo_fabric
from incastlab.topologies.fabricmap import FabricError

T0 = 1_700_000_000.0


def _fabric(tmp_path, fabric):
    fabric.save(tmp_path / "fabric.json")
    return rundir.load_fabric(tmp_path)


def test_counter_increase_handles_resets_and_gaps():
    assert queues.counter_increase([5, 7, 10]) == 5
    assert queues.counter_increase([5, 7, 2, 4]) == 2 + 2 + 2  # reset to 0 then 2, 4
    assert queues.counter_increase([np.nan, 3, 4]) == 1
    assert queues.counter_increase([4]) == 0


def test_fabric_roles_and_paths(tmp_path):
    f = _fabric(tmp_path, demo_fabric())
    assert f == demo_fabric()
    assert f.spine_names == ["sp1", "sp2"] and f.leaf_names == ["lf1", "lf2"]
    assert (f.host("h3").ip, f.leaf_of("h3"), f.link_of_iface("h3-eth0").bw_mbps) == (
        "10.0.2.1", "lf2", 10.0)
    e = f.link_of_iface("lf2-eth1")
    assert (e.kind, e.peer) == ("host-downlink", "h3")
    assert f.link_of_iface("lf1-eth3").kind == "uplink"
    assert f.link_of_iface("sp2-eth1").kind == "spine-downlink"
    assert f.link_of_iface("lf1-eth3").queue_packets == 20
    assert queues.path_ports(f, "h1", "h3", "sp2") == ["lf1-eth4", "sp2-eth2", "lf2-eth1"]
    assert queues.path_ports(f, "h1", "h3") == ["lf1-eth3", "sp1-eth2", "lf1-eth4",
                                                "sp2-eth2", "lf2-eth1"]
    assert queues.path_ports(f, "h1", "h2") == ["lf1-eth2"]
    assert queues.path_ports(f, "h1", "h99") == []


def test_fabric_spellings_the_old_lenient_reader_took_are_refused(tmp_path):
    """One reader, the writer's format only: no alternative keys, no roles from names."""
    (tmp_path / "fabric.json").write_text(json.dumps(
        {"hosts": {"a": {"ip": "10.1.0.1/24"}, "b": "10.1.0.2"},
         "links": [{"a": "a", "b": "leaf1", "a_iface": "a-eth0", "b_iface": 1,
                    "rate_mbps": 50}]}))
    with pytest.raises(FabricError, match="format_version is missing"):
        rundir.load_fabric(tmp_path)


def test_missing_files_give_empty_tables(tmp_path):
    assert rundir.load_queues(tmp_path).empty and rundir.load_counters(tmp_path).empty
    assert rundir.load_workers(tmp_path).empty and rundir.load_manifest(tmp_path) == {}
    assert rundir.load_fabric(tmp_path) is None
    assert queues.path_ports(None, "h1", "h2") == [] and rundir.host_by_ip(None) == {}
    assert rundir.counter_delta(rundir.load_counters(tmp_path), "TcpRetransSegs") is None


def test_capture_drop_total():
    assert reconcile.capture_drop_total({}) is None
    m = {"capture_drops": {"a": {"dropped_by_kernel": 2, "dropped_by_interface": None},
                           "b": {"dropped_by_kernel": 0, "dropped_by_interface": 3}, "c": 4}}
    assert reconcile.capture_drop_total(m) == 9


def _q(iface, backlog, drops, dt=0.01):
    return [{"t": T0 + k * dt, "switch": iface.split("-")[0], "port": 1, "iface": iface,
             "backlog_bytes": b * 1500, "backlog_pkts": b, "drops": d, "overlimits": 0,
             "sent_bytes": k * 1000, "sent_pkts": k, "requeues": 0}
            for k, (b, d) in enumerate(zip(backlog, drops, strict=True))]


def test_episodes_without_fabric_or_captures():
    rows = _q("s1-eth1", [0, 5, 10, 10, 2, 0, 0, 10, 0], [0, 0, 0, 3, 3, 3, 3, 4, 4])
    e = episodes.incast_episodes(pd.DataFrame(rows))
    # limit = the port's maximum backlog (10): samples 2-3 (drops at 3), then sample 7
    assert list(np.round(e["start"] - T0, 3)) == [0.02, 0.07]
    assert list(e["drops"]) == [3, 1]
    assert math.isnan(e["n_senders"].iloc[0]) and not e["incast"].any()


@pytest.mark.parametrize("receivers, incast", [(("h3", "h3"), True), (("h3", "h4"), False)])
def test_incast_means_many_senders_to_one_receiver(tmp_path, receivers, incast):
    """Two senders fill leaf 1's uplink: incast only if both send to the same host."""
    from incastlab.analysis.pcap import ip_to_int
    from incastlab.topologies.leafspine import LeafSpineTopo, fabric_map

    fabric_map(LeafSpineTopo(2, 2, 2)).save(tmp_path / "fabric.json")
    fabric = rundir.load_fabric(tmp_path)
    uplink = fabric.egress_iface("lf1", "sp1")
    rows = _q(uplink, [0, 10, 10, 0], [0, 0, 2, 2])
    ip = {h: ip_to_int(v) for h, v in fabric.ip_by_host().items()}
    tcp = pd.DataFrame([{"t": T0 + 0.01 + k * 0.001, "src": ip[src], "dst": ip[dst],
                         "sport": 40000 + n, "dport": 5201, "payload_len": 1448}
                        for n, (src, dst) in enumerate(zip(("h1", "h2"), receivers, strict=True))
                        for k in range(5)])
    e = episodes.incast_episodes(pd.DataFrame(rows), fabric, tcp)
    assert len(e) == 1 and e.iloc[0]["n_senders"] == 2 and e.iloc[0]["senders"] == "h1,h2"
    assert e.iloc[0]["fan_in"] == (2 if incast else 1)
    assert bool(e.iloc[0]["incast"]) is incast


def test_queue_summary_and_utilisation():
    rows = _q("lf1-eth1", [0, 1, 2, 3], [0, 1, 1, 2]) + _q("lf1-eth2", [0, 0, 0, 0], [0] * 4)
    qs = queues.queue_summary(pd.DataFrame(rows))
    assert list(qs["iface"]) == ["lf1-eth1", "lf1-eth2"]  # most drops first
    assert qs.iloc[0]["drops"] == 2 and qs.iloc[0]["sent_bytes"] == 3000
    u = queues.link_utilisation(pd.DataFrame(rows), ["lf1-eth1"], {"lf1-eth1": 1.0}, bin_s=0.1)
    # 3000 bytes in one 0.1 s bin = 0.24 Mbit/s = 24 % of 1 Mbit/s
    assert u["mbps"].sum() == pytest.approx(0.24) and u["utilisation"].max() == pytest.approx(0.24)


def test_markdown_tables_say_when_they_are_cut():
    import pandas as pd

    from incastlab.analysis.render import df_md as _df_md

    assert "5 more rows not shown" in _df_md(pd.DataFrame({"a": range(25)}))
    assert "more rows" not in _df_md(pd.DataFrame({"a": range(20)}))


def test_one_damaged_byte_in_a_worker_log_costs_one_line(tmp_path):
    """A non-UTF-8 byte used to discard the whole of workers/*.jsonl (the file failed to
    decode); now that line is skipped and counted and the others are kept."""
    import json as _json

    from incastlab.analysis.rundir import load_workers

    w = tmp_path / "workers"
    w.mkdir()
    lines = [_json.dumps({"event": "iteration", "iteration": i}).encode() for i in range(4)]
    lines[2] = lines[2].replace(b"iteration", b"iter\xffation", 1)   # one damaged byte
    (w / "1.jsonl").write_bytes(b"\n".join(lines + [b"[1, 2]", b'{"event": "fin'])
                                + b"\n")
    df = load_workers(tmp_path)
    assert list(df["iteration"]) == [0, 1, 3]
    assert df.attrs["bad_lines"] == 3   # the damaged byte, a non-object, a torn last line
