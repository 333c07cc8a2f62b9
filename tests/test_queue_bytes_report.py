"""The report states a byte-limited queue in bytes (issue 16 item 2), without root: a
synthetic run directory whose fabric map has queue_bytes and whose queue samples fill a
port to its limit."""
import dataclasses

from incastlab.commands.common import analyse
from incastlab.analysis.synthetic import demo_fabric, make_run_dir
from incastlab.topologies.fabricmap import Link

T0 = 1_700_000_000.0


def _bytes_fabric(limit: int, mtu: int = 1500):
    fmap = demo_fabric()
    links = tuple(dataclasses.replace(lk, queue_packets=None, queue_bytes=limit)
                  for lk in fmap.links)
    assert all(isinstance(lk, Link) for lk in links)
    return dataclasses.replace(fmap, links=links, queue_packets=None, queue_bytes=limit,
                               mtu=mtu)


def test_the_worst_queue_and_the_fabric_are_stated_in_bytes(tmp_path):
    rows = [{"t": T0 + t, "switch": "lf1", "port": 1, "iface": "lf1-eth1",
             "backlog_bytes": b, "backlog_pkts": p, "drops": d, "overlimits": 0,
             "sent_bytes": 0, "sent_pkts": 0, "requeues": 0}
            for t, b, p, d in [(0.0, 0, 0, 0), (0.01, 27_042, 3, 4), (0.02, 9_014, 1, 4)]]
    run = make_run_dir(tmp_path / "r", queues=rows, fabric=_bytes_fabric(30_000, 9000),
                       t0=T0)
    a = analyse(run)
    from incastlab.analysis import findings, sections

    worst = findings.worst_queue(a).text
    assert "27,042 bytes (3 packets) of a 30,000-byte limit" in worst, worst
    _title, _html, md = sections.fabric_section(a)
    assert "switch queues of 30,000 bytes; MTU 9000 bytes" in md, md
