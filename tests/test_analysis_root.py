"""Root tier for measurement and analysis: a real incast run, then the report.

Four workers push gradients into one parameter server through a 20-packet queue. The
queue's own drop counter (tc), the losses inferred from the captures, the kernel's
TcpRetransSegs and the retransmissions seen in the captures are independent views of the
same events: they must agree within a stated tolerance."""
from __future__ import annotations

import json

import pytest

from incastlab.analysis.pcap import ip_to_int, read_pcap
from incastlab.commands.common import build_report
from incastlab.runner import check_ready, run_experiment
from incastlab.spec import load_spec
from incastlab.topologies.fabricmap import FabricMap
from tests.rootnet import free_port, kept_up, overtaken_segments

pytestmark = pytest.mark.root
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# How far tc's drop counter may stray from the losses the captures prove, from how the
# OVS userspace datapath hands a batch of packets to an egress port (sendmmsg on an
# AF_PACKET socket, analysis/reconcile.py): the packet the full queue refuses is counted,
# OVS retries it once (counted again if refused again) and then discards the rest of the
# batch uncounted. So a lost packet counts at most twice (a refused one that the retry
# delivered, once: rare, the retry comes within microseconds while a frame drains in
# 0.1-0.6 ms here; SLACK), and every counted refusal loses at most one batch, at most
# NETDEV_MAX_BURST = 32 packets. Where a run falls between lost / 32 and 2 x lost is the
# datapath's: the more of a burst reaches a full queue in one send call (the longer OVS
# takes to come back to a port: a busy CPU), the more tail goes uncounted. Runs here
# gave 0.44-1.56 (this incast 1.49; tests/test_queue_bytes_root.py's 0.62, each of its
# 8 senders' windows reaching the port as one batch): a band of 1/2-2 fails on a busier
# machine without anything being wrong. The report must state the ratio; the kernel's
# own retransmission count against the captures' is the tight, exact cross-check.
TC_PER_LOSS_MAX = 2
OVS_BATCH_MAX = 32
SLACK = 10


@pytest.fixture(scope="module")
def incast_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("incast-run")
    spec = load_spec(None, ["topology.spines=2", "topology.leaves=3",
                            "topology.hosts_per_leaf=2", "topology.queue_packets=20",
                            "workload.kind=ps", "workload.mode=sync", "workload.workers=4",
                            "workload.worker_leaves=[2, 3]", "workload.model_size=250000",
                            "workload.iterations=6", "routing.policy=ecmp"])
    port = free_port()
    caps = check_ready(spec, port)
    status = run_experiment(spec, run_dir, controller_port=port, caps=caps)
    assert status == "complete", json.loads((run_dir / "manifest.json").read_text())["reason"]
    build_report(run_dir)
    return run_dir


def test_queue_drops_and_capture_losses_agree(incast_run):
    metrics = json.loads((incast_run / "metrics.json").read_text())
    rec = metrics["reconciliation"]
    tc, lost = rec["tc_drops"], rec["capture_losses"]
    assert tc > 20, "a 20-packet queue under a 4:1 incast must overflow"
    assert tc <= TC_PER_LOSS_MAX * lost + SLACK, rec
    # from below only where the datapath kept up (the run's fidelity verdict): a busy
    # ovs-vswitchd also loses packets before any queue, which no tc counter sees
    if kept_up(incast_run):
        assert tc >= lost / OVS_BATCH_MAX, rec
    summary = (incast_run / "summary.md").read_text()
    assert f"tc counted {int(tc)} drops" in summary and "ratio" in summary, \
        "the report must put the two counts and their ratio side by side"
    # the kernel's own count of retransmitted segments against the captures' count
    # docs/emulation.md's "within 1 %": with offloads off one retransmitted segment is one packet
    # and tcpdump lost none, so they differ only by the kernel's SYN retransmissions (and
    # a FIN's, no payload in the captures' count); measured equal in every run so far
    kernel = rec["kernel"]["TcpRetransSegs"] - (rec["kernel"].get("TcpExtTCPSynRetrans") or 0)
    assert abs(kernel - rec["capture_retrans"]) <= 0.01 * kernel + 2, rec
    assert rec["capture_drops"] == 0, "tcpdump itself lost packets: captures untrustworthy"


def test_incast_drops_sit_at_the_ps_port(incast_run):
    queues = incast_run / "queues.csv"
    import pandas as pd

    q = pd.read_csv(queues)
    drops = q.groupby("iface")["drops"].agg(lambda s: s.iloc[-1] - s.iloc[0])
    assert drops.idxmax() in ("lf1-eth1", "sp1-eth1", "sp2-eth1"), drops.to_dict()
    assert q.groupby("iface")["backlog_pkts"].max().max() <= 20


def test_report_and_plots_are_complete(incast_run):
    html = (incast_run / "report.html").read_text()
    assert "Reconciliation" in html and "aborted" not in html.split("<body", 1)[1][:2000]
    assert "http://" not in html and "https://" not in html, "report must be self-contained"
    metrics = json.loads((incast_run / "metrics.json").read_text())
    assert metrics["plots"], "no plots were made"
    for name in metrics["plots"]:
        data = (incast_run / "plots" / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        import matplotlib.image

        assert matplotlib.image.imread(incast_run / "plots" / name).shape[0] > 100, name


def test_ring_captures_agree_with_the_kernel(tmp_path):
    """Every ring host sends and receives at once, so its pure ACKs go ahead of its own
    data (topologies/links.py). That must not reorder any flow's data: the captures'
    retransmissions equal the kernel's, and almost none resend data that had arrived.
    (Sending every packet under 128 bytes first did reorder: a ring run then showed 58
    retransmissions in the captures against the kernel's 40, 19 of them spurious.)"""
    spec = load_spec(None, ["topology.spines=2", "topology.leaves=2",
                            "topology.hosts_per_leaf=2", "topology.queue_packets=50",
                            "workload.kind=ring", "workload.workers=3",
                            "workload.model_size=250000", "workload.iterations=6",
                            "routing.policy=ecmp"])
    port = free_port()
    status = run_experiment(spec, tmp_path, controller_port=port, caps=check_ready(spec, port))
    assert status == "complete", json.loads((tmp_path / "manifest.json").read_text())["reason"]
    build_report(tmp_path, plots=False)  # the numbers only: the figures are the incast's
    rec = json.loads((tmp_path / "metrics.json").read_text())["reconciliation"]
    assert rec["capture_drops"] == 0, "tcpdump itself lost packets: captures untrustworthy"
    # docs/emulation.md's "within 1 %": with offloads off one retransmitted segment is one packet
    # and tcpdump lost none, so they differ only by the kernel's SYN retransmissions (and
    # a FIN's, no payload in the captures' count); measured equal in every run so far
    kernel = rec["kernel"]["TcpRetransSegs"] - (rec["kernel"].get("TcpExtTCPSynRetrans") or 0)
    assert abs(kernel - rec["capture_retrans"]) <= 0.01 * kernel + 2, rec
    # Almost no retransmission resends data that had arrived, beyond those the timers
    # sent: a tail-loss probe (a few ms after the last ACK) or an RTO and the slow-start
    # retransmissions after it resend data still in flight whenever the datapath holds
    # it longer than the timer, which a busy CPU does (a run with the machine saturated
    # by other tests: 1 retransmission, a spurious probe). Reordering shows in the rest:
    # fast retransmissions on duplicate ACKs / SACKs for data that only came late.
    k = rec["kernel"]
    timers = sum(k.get(c) or 0 for c in ("TcpExtTCPLossProbes", "TcpExtTCPTimeouts",
                                         "TcpExtTCPSlowStartRetrans"))
    assert rec["capture_spurious"] <= 0.1 * rec["capture_retrans"] + 3 + timers, rec
    # at each ring host's own interface (after its qdisc) every flow's data leaves in order
    fabric = FabricMap.load(tmp_path / "fabric.json")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    ring_hosts = {p["host"] for p in manifest["processes"]}
    checked = 0
    for host in fabric.hosts:
        if host.name in ring_hosts:
            df = read_pcap(tmp_path / "pcap" / f"{host.intf}.pcap", cache=False)
            sent = df[(df.proto == 6) & df.hdr_ok & (df.src == ip_to_int(host.ip))]
            assert overtaken_segments(sent) == 0, f"{host.name} reordered a flow's data"
            checked += 1
    assert checked == 3, ring_hosts
