"""What report.html shows a reader (issue 14): flows named by host and role, the way
from an RTO or an incast episode to its packets (capture file + Wireshark filter,
checked with tshark where it is installed), tables that fit (times since start, split,
whole tables as CSV and linked) and the fabric picture."""
import json
import re
import shutil
import subprocess

import pandas as pd
import pytest

from incastlab.analysis import fabricpic
from incastlab.commands.common import build_report
from incastlab.analysis import flowroles as fr
from incastlab.analysis import render
from incastlab.commands.common import analyse
from incastlab.analysis.synthetic import demo_fabric, make_demo_run

T0 = 1_700_000_000.0
# the demo run's PS job: h3 serves, h1 and h2 work (synthetic.make_demo_run)
PROCESSES = [{"rank": 0, "host": "h3", "role": "server"},
             {"rank": 1, "host": "h1", "role": "worker"},
             {"rank": 2, "host": "h2", "role": "worker"}]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("views") / "demo"
    truth = make_demo_run(d, t0=T0)
    man = json.loads((d / "manifest.json").read_text())
    man["processes"] = PROCESSES
    (d / "manifest.json").write_text(json.dumps(man))
    return d, truth, build_report(d)


def test_flows_are_named_by_host_and_role(run):
    d, _, paths = run
    assert fr.host_roles({"processes": PROCESSES + [{"rank": 3, "host": "h3",
                                                     "role": "worker"}]}) == {
        "h3": "server 0, worker 3", "h1": "worker 1", "h2": "worker 2"}
    a = analyse(d)
    labels = a.tables["flow_labels"]
    # 10.0.1.1 is h1 (leaf 1, host 1), 10.0.2.1 is h3 (leaf 2, host 1)
    assert labels["10.0.1.1:40000>10.0.2.1:29500"] == "h1 worker 1 → h3 server 0 (40000→29500)"
    assert labels["10.0.1.2:40001>10.0.2.1:29500"] == "h2 worker 2 → h3 server 0 (40001→29500)"
    page = paths["report"].read_text()
    assert "h1 worker 1 → h3 server 0 (40000→29500)" in page
    flows = pd.read_csv(d / "tables" / "flows.csv")  # the CSV keeps the address tuple
    assert set(flows["tuple"]) == set(labels) and set(flows["flow"]) == set(labels.values())
    # without processes: host names only; without a fabric: the addresses
    assert fr.host_label("10.0.1.1", demo_fabric()) == "h1"
    assert fr.host_label("10.9.9.9", demo_fabric()) == "10.9.9.9"


def test_each_rto_has_its_capture_and_filter(run):
    d, truth, paths = run
    a = analyse(d)
    rto = a.tables["rto_packets"]
    assert len(rto) == truth["rto_events"] and set(rto["pcap"]) == {"pcap/h1-eth0.pcap"}
    f = rto["filter"].iloc[0]
    assert "ip.src == 10.0.1.1 && tcp.srcport == 40000" in f
    assert "frame.time_epoch >=" in f
    # the window starts before the silence: gap_s (>= 0.2 s placed) + 50 ms
    lo = float(re.search(r"time_epoch >= ([0-9.]+)", f).group(1))
    assert rto["t"].iloc[0] - lo == pytest.approx(rto["gap_s"].iloc[0] + 0.05, abs=1e-5)
    assert "pcap/h1-eth0.pcap" in paths["report"].read_text()


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_filters_select_the_packets_in_wireshark(run):
    """tshark reads the run's capture with each filter: the RTO's filter shows its flow
    only, including the retransmission after the silence; the incast episode's filter
    shows packets to the PS inside the episode's window."""
    d, _, _ = run
    a = analyse(d)
    r = a.tables["rto_packets"].iloc[0]
    out = subprocess.run(["tshark", "-r", str(d / r["pcap"]), "-Y", r["filter"], "-T",
                          "fields", "-e", "frame.time_epoch", "-e", "tcp.srcport",
                          "-e", "tcp.dstport"], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split("\n")
    rows = [x.split("\t") for x in out if x]
    assert rows and all({p, q} == {"40000", "29500"} for _, p, q in rows)
    times = [float(t) for t, _, _ in rows]
    # the retransmission itself, and the last packet before the silence (gap_s earlier)
    assert max(times) >= r["t"] - 1e-6 and min(times) <= r["t"] - r["gap_s"] + 1e-6
    e = a.tables["episode_packets"]
    assert len(e) and (e["iface"] == "lf2-eth1").all()  # the PS's port (h3)
    row = e.iloc[0]
    assert row["pcap"] == "pcap/h3-eth0.pcap" and "ip.dst == 10.0.2.1" in row["filter"]
    out = subprocess.run(["tshark", "-r", str(d / row["pcap"]), "-Y", row["filter"], "-T",
                          "fields", "-e", "frame.time_epoch", "-e", "ip.dst"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    rows = [x.split("\t") for x in out.split("\n") if x]
    assert rows and all(ip == "10.0.2.1" and row["start"] - 1e-6 <= float(t) <= row["end"]
                        + 1e-6 for t, ip in rows)


def test_times_are_seconds_since_start_and_tables_fit(run):
    d, _, paths = run
    it = pd.DataFrame({"rank": [1], "iteration": [0], "t_start": [T0 + 1.5],
                       "t_push": [T0 + 2.0], "push_s": [0.25], "t_small": [3.0]})
    rel = render.rel(it, T0)
    assert rel["t_push"].iloc[0] == 2.0 and rel["t_start"].iloc[0] == 1.5
    assert rel["t_small"].iloc[0] == 3.0  # not an epoch time: left alone
    wide = pd.DataFrame({f"c{i}": [i] for i in range(30)})
    pieces = render.split_columns(wide, keys=2)
    # 28 columns besides the 2 keys: ceil(28 / 12) = 3 pieces of ceil(28 / 3) = 10 (10, 10, 8)
    assert [len(p.columns) for p in pieces] == [12, 12, 10]
    assert all(list(p.columns[:2]) == ["c0", "c1"] for p in pieces)
    html_ = render.df_html(wide, keys=2)
    assert html_.count("<table") == 3 and html_.count("class='wide'") == 3
    # every table whole in tables/*.csv and linked from the page and summary.md
    page, summary = paths["report"].read_text(), paths["summary"].read_text()
    for name in ("flows", "queues", "recovery_episodes", "reconciliation", "per_worker",
                 "iterations_with_events"):
        assert (d / "tables" / f"{name}.csv").exists(), name
        assert f"href='tables/{name}.csv'" in page, name
    assert "tables/flows.csv" in summary and "see report.html or metrics.json" not in summary
    # summary.md shows the PNGs (report.html has the interactive versions)
    for name in ("queues", "throughput", "timeline", "sequence"):
        assert f"![{name}](plots/{name}.png)" in summary and (d / "plots" / f"{name}.png"
                                                              ).exists(), name
    it_csv = pd.read_csv(d / "tables" / "iterations_with_events.csv")
    assert it_csv["t_start"].max() < 10  # seconds since the start, not epoch


def test_fabric_picture(run):
    _, _, paths = run
    assert fabricpic.colour(0.0) == "#3caa30" and fabricpic.colour(1.0) == "#c80030"
    assert fabricpic.colour(None) == "#bbbbbb"
    f = demo_fabric()
    qs = pd.DataFrame([{"iface": "lf2-eth1", "max_backlog_pkts": 20, "limit_pkts": 20,
                        "drops": 6}, {"iface": "lf1-eth3", "max_backlog_pkts": 5,
                                      "limit_pkts": 20, "drops": 0}])
    svg = fabricpic.fabric_svg(f, qs, {"h3": "server 0", "h1": "worker 1"})
    # one line per direction of every cable: 4 host links + 4 leaf-spine links, x2
    assert svg.count("<line ") == 2 * len(f.links) == 16
    full = re.search(r"<line [^>]*stroke='([^']+)' stroke-width='5'><title>lf2-eth1: lf2 "
                     r"→ h3; peak 20 of 20 packets; 6 drops</title>", svg)
    assert full and full.group(1) == fabricpic.colour(1.0)
    assert "peak 5 of 20 packets</title>" in svg and "6 drops</text>" in svg
    assert ">server 0</text>" in svg and ">worker 1</text>" in svg
    assert "no queue samples" in svg  # hosts' own interfaces are not sampled
    assert "svg class='fabric'" in paths["report"].read_text()


def test_fabric_picture_of_a_star():
    """The classic incast bench: one switch, no spines: no empty spine row is left."""
    from incastlab.topologies.leafspine import StarTopo

    f = StarTopo(senders=4).fabric_map()
    svg = fabricpic.fabric_svg(f, None, {"h5": "client 0"})
    assert svg.count("<line ") == 2 * 5
    # rows at 190 and 330 moved up by the spine row's 140: viewBox 1000 x (330+115-140)
    assert "viewBox='0 0 1000 305'" in svg
    assert re.search(r"<rect x='[0-9.]+' y='35.0'[^>]*><title>leaf lf1", svg)
