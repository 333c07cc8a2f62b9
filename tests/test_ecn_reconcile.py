"""ECN marks from three sources (analysis/ecnreconcile.py): the ports' marker, the
receivers' captures and the hosts' kernel counters, on synthetic run directories whose
counts are known (analysis/synthetic_ecn.py), agreeing and disagreeing."""
from __future__ import annotations

import json

import pytest

from analysis.synthetic_ecn import make_ecn_run
from incastlab.commands.common import analyse, build_report


def _rec(run_dir):
    a = analyse(run_dir)
    return a.tables["ecn"]["reconcile"], a.metrics["ecn"]["reconcile"]


def test_agreeing_sources_agree_in_the_table_and_metrics(tmp_path):
    truth = make_ecn_run(tmp_path / "run")
    rec, numbers = _rec(tmp_path / "run")
    assert numbers["port_marks"] == numbers["port_ce_to_hosts"] == truth["marks"] == 14
    assert numbers["kernel_in_ce"] == numbers["captured_ce"] == 14
    assert numbers["kernel_delivered_ce"] == numbers["captured_ce_sent"] == 14
    assert numbers["agrees"] == {"port_vs_kernel": True, "capture_vs_kernel": True,
                                 "delivered_vs_capture": True, "delivered_vs_ce": True,
                                 "marks_vs_kernel": True}
    assert numbers["captured_ece_delivered"] == 14 and numbers["mixed_acks"] == 0
    hosts = rec["hosts"].set_index("host")
    assert hosts.loc["h3", "port"] == "lf2-eth1" and hosts.loc["h3", "port_ce_out"] == 14
    assert hosts.loc["h1", "kernel_delivered_ce"] == hosts.loc["h1", "captured_ce_sent"] == 10
    assert hosts.loc["h2", "kernel_delivered_ce"] == hosts.loc["h2", "captured_ce_sent"] == 4
    assert any("the same" in n for n in rec["notes"])


def test_metrics_json_and_report_carry_the_reconciliation(tmp_path):
    make_ecn_run(tmp_path / "run")
    paths = build_report(tmp_path / "run", plots=False)
    metrics = json.loads(paths["metrics"].read_text())
    assert metrics["ecn"]["reconcile"]["agrees"]["marks_vs_kernel"] is True
    page = paths["report"].read_text()
    assert "Marks, captures and kernel counters" in page and "IpExtInCEPkts" in page
    assert (paths["report"].parent / "tables" / "ecn_reconciliation_hosts.csv").exists()


def test_a_kernel_count_off_by_one_disagrees_and_says_where(tmp_path):
    make_ecn_run(tmp_path / "run", kernel_in_ce=13)
    rec, numbers = _rec(tmp_path / "run")
    assert numbers["agrees"]["marks_vs_kernel"] is False
    assert numbers["agrees"]["port_vs_kernel"] is False
    assert numbers["agrees"]["capture_vs_kernel"] is False  # 14 captured > 13 received
    assert any(n.startswith("h3: its port lf2-eth1 sent 14") for n in rec["notes"])
    assert any("-1" in n for n in rec["notes"])


@pytest.mark.parametrize(("lost", "agrees"), [(2, True), (1, False), (0, False)])
def test_captured_ce_short_by_what_tcpdump_lost_still_agrees(tmp_path, lost, agrees):
    make_ecn_run(tmp_path / "run", drop_capture=2, capture_lost=lost)
    _, numbers = _rec(tmp_path / "run")
    assert numbers["captured_ce"] == 12 and numbers["kernel_in_ce"] == 14
    assert numbers["agrees"]["capture_vs_kernel"] is agrees
    assert numbers["agrees"]["marks_vs_kernel"] is True  # the kernel is not the capture


def test_delivered_ce_is_what_the_ece_acks_delivered(tmp_path):
    """The kernel counts packets delivered by ACKs with ECE: an ACK that covers a packet
    not CE and a CE one counts both (measured once: 1,088 delivered CE for 1,087 CE)."""
    make_ecn_run(tmp_path / "mixed", mixed_ack=True, delivered={"h1": 10, "h2": 5})
    rec, numbers = _rec(tmp_path / "mixed")
    hosts = rec["hosts"].set_index("host")
    assert hosts.loc["h2", "captured_ece_delivered"] == 5
    assert hosts.loc["h2", "captured_ce_sent"] == 4
    assert numbers["mixed_acks"] == 1
    assert numbers["agrees"]["delivered_vs_capture"] is True
    assert numbers["agrees"]["delivered_vs_ce"] is True  # DCTCP: off by the mixed ACK only
    assert any("1 ACK(s) covered packets of both states" in n for n in rec["notes"])
    make_ecn_run(tmp_path / "off", delivered={"h1": 10, "h2": 5})  # no mixed ACK
    _, numbers = _rec(tmp_path / "off")
    assert numbers["agrees"]["delivered_vs_capture"] is False
    assert numbers["agrees"]["delivered_vs_ce"] is False


def test_delivered_ce_is_only_a_lower_bound_on_ce_without_dctcp(tmp_path):
    more = {"h1": 12, "h2": 4}  # two more than the CE packets h1 sent
    make_ecn_run(tmp_path / "dctcp", delivered=more)
    rec, numbers = _rec(tmp_path / "dctcp")
    assert numbers["exact_echo"] is True and numbers["agrees"]["delivered_vs_ce"] is False
    assert any("DCTCP echoes each CE exactly" in n for n in rec["notes"])
    make_ecn_run(tmp_path / "cubic", delivered=more, congestion="cubic")
    rec, numbers = _rec(tmp_path / "cubic")
    assert numbers["exact_echo"] is False and numbers["agrees"]["delivered_vs_ce"] is True
    assert numbers["agrees"]["delivered_vs_capture"] is False  # not what the ACKs delivered
    assert any("classic ECN" in n for n in rec["notes"])
    make_ecn_run(tmp_path / "fewer", delivered={"h1": 9, "h2": 4}, congestion="cubic")
    _, numbers = _rec(tmp_path / "fewer")
    assert numbers["agrees"]["delivered_vs_ce"] is False


def test_without_kernel_counters_agreement_is_unknown(tmp_path):
    make_ecn_run(tmp_path / "run")
    for p in (tmp_path / "run" / "counters").iterdir():
        p.unlink()
    rec, numbers = _rec(tmp_path / "run")
    assert numbers["kernel_in_ce"] is None
    assert numbers["agrees"]["marks_vs_kernel"] is None
    assert numbers["agrees"]["port_vs_kernel"] is None
    assert any("No kernel counters" in n for n in rec["notes"])
