"""Whole-run analysis on synthetic run directories whose truth is known."""
import json

import pandas as pd
import pytest
from PIL import Image

from incastlab.commands.common import build_report
from incastlab.commands.common import analyse
from incastlab.analysis.synthetic import make_demo_run, make_run_dir

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "complete"
    truth = make_demo_run(run)
    return run, truth, build_report(run)


@pytest.fixture(scope="module")
def analysed(demo):
    run, truth, _ = demo
    return analyse(run), truth


def _valid_png(path):
    assert path.read_bytes()[:8] == PNG_MAGIC
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.size[0] > 100 and im.size[1] > 100


def test_outputs_exist_and_plots_are_png(demo):
    run, _, paths = demo
    for key in ("metrics", "summary", "report"):
        assert paths[key].exists() and paths[key].parent == run
    names = {p.name for p in paths["plots"]}
    assert {"queues.png", "throughput.png", "retransmissions.png", "iterations.png",
            "timeline.png", "staleness.png", "loss.png", "balance.png",
            "reconciliation.png"} <= names
    for p in paths["plots"]:
        _valid_png(p)
    import matplotlib.image as mpimg
    assert mpimg.imread(paths["plots"][0]).ndim == 3
    page = paths["report"].read_text()
    assert "data:image/png;base64," in page
    assert "http://" not in page and "https://" not in page  # nothing fetched
    assert "status-banner" not in page


def test_reconciliation_numbers(demo):
    _, truth, paths = demo
    m = json.loads(paths["metrics"].read_text())
    h = m["headline"]
    assert h["tc_drops"] == truth["tc_drops"]
    assert h["capture_losses"] == truth["losses"]
    assert h["retransmissions"] == truth["retrans"]
    assert h["rtos"] == truth["rto_events"]
    assert h["kernel_retrans_segs"] == truth["kernel_retrans"]
    assert h["kernel_timeouts"] == truth["kernel_timeouts"]
    r = m["reconciliation"]
    assert r["capture_spurious"] == truth["spurious"] and r["capture_tlp"] == truth["tlp"]
    assert m["run"]["complete"] is True and m["flows"] == truth["flows"]
    # 34,000 unique bytes from the first SYN (t=0) to the last data packet (t=0.7)
    assert h["throughput_mbps"] == pytest.approx(34_000 * 8 / 0.7 / 1e6, rel=1e-3)
    summary = paths["summary"].read_text()
    assert "twice" in summary  # the OVS-userspace tc double count is explained


def test_losses_attributed_to_the_dropping_port(analysed):
    a, truth = analysed
    lost = a.tables["losses"]
    assert len(lost) == truth["losses"]
    assert set(lost["port"]) == {truth["lost_port"]}
    assert set(lost["attributed_by"]) == {"queue-drops"}
    ports = a.tables["recon"]["ports"].set_index("iface")
    assert ports.loc["lf2-eth1", "tc_drops"] == 6 and ports.loc["lf2-eth1", "capture_losses"] == 3
    assert ports.loc["lf2-eth1", "at_tc_drop"] == 3 and ports.loc["lf2-eth1", "unmatched"] == 0
    hosts = a.tables["recon"]["hosts"].set_index("host")
    assert hosts.loc["h1", "kernel_retrans_segs"] == 5 and hosts.loc["h1", "capture_retrans"] == 4


def test_incast_episodes(analysed):
    a, truth = analysed
    e = a.tables["episodes"]
    assert len(e) == truth["episodes"]
    assert int(e["incast"].sum()) == truth["incast_episodes"]
    first = e.iloc[0]
    assert first["iface"] == "lf2-eth1" and first["n_senders"] == 2
    assert first["senders"] == "h1,h2" and first["drops"] == 2
    assert list(e["rtos"]) == [0, 1, 0]  # the RTO whose silence began in episode 2


def test_training_impact(demo, analysed):
    _, _, paths = demo
    a, truth = analysed
    it = a.tables["iterations"]
    assert len(it) == 12
    hit = it[it["rtos"] > 0]
    assert len(hit) == truth["iterations_with_rto"]
    assert set(hit["rank"]) == {1} and set(hit["iteration"]) == {1, 3}
    imp = json.loads(paths["metrics"].read_text())["training"]
    assert imp["with_rto"]["n"] == 2 and imp["with_rto"]["extra_s_vs_clean"] > 0
    assert imp["without_rto"]["n"] == 10 and imp["with_rto"]["extra_s_vs_no_rto"] > 0.1
    steps = a.tables["steps"]
    assert len(steps) == 6 and (steps["straggler"] == 1).all()
    pw = a.tables["per_worker"].set_index("rank")
    assert pw.loc[1, "straggler_steps"] == 6 and pw.loc[2, "straggler_steps"] == 0
    assert a.metrics["headline"]["staleness_mean"] == 0.0


def test_fabric_balance(analysed):
    a, _ = analysed
    b = a.metrics["balance"]
    # 810 kB on sp1 links, 270 kB on sp2 links, nothing elsewhere: max/mean = 810/270
    assert b["max_mean_all"] == pytest.approx(3.0)
    assert b["per_spine_bytes"] == {"sp1": 1_620_000.0, "sp2": 540_000.0}


@pytest.mark.parametrize("status,reason,word", [("aborted", "Ctrl-C by user", "ABORTED"),
                                                ("failed", "worker h2 exited 1", "FAILED"),
                                                ("running", "", "INCOMPLETE")])
def test_incomplete_run_has_banner_at_top(tmp_path, status, reason, word):
    run = tmp_path / status
    make_run_dir(run, status=status, reason=reason)
    paths = build_report(run, plots=False)
    page = paths["report"].read_text()
    body = page.split("<body>", 1)[1]
    assert body.startswith("<div class='banner' id='status-banner'>RUN " + word)
    assert reason in body.split("</div>", 1)[0]
    assert paths["summary"].read_text().startswith(f"> **RUN {word}")
    m = json.loads(paths["metrics"].read_text())
    assert m["run"]["complete"] is False and m["run"]["status"] == status


def test_missing_inputs_are_reported_not_fatal(tmp_path):
    run = make_run_dir(tmp_path / "bare", status="aborted", reason="preflight failed")
    paths = build_report(run)
    page = paths["report"].read_text()
    assert "no readable captures" in page and "no queues.csv" in page
    assert "not a parameter-server run" in page or "no staleness" in page
    assert paths["plots"] == []
    m = json.loads(paths["metrics"].read_text())
    assert m["headline"]["retransmissions"] is None and m["headline"]["tc_drops"] is None


def test_incast_benchmark_run_without_pcaps(tmp_path):
    t0 = 1_700_000_000.0
    rounds = [{"event": "start", "role": "client", "rank": 0, "mode": "incast", "t": t0,
               "senders": 4}]
    rounds += [{"event": "round", "round": r, "t_start": t0 + r, "t_end": t0 + r + 0.5,
                "senders": 4, "block_bytes": 256_000, "bytes": 1_024_000,
                "goodput_mbps": 1_024_000 * 8 / 0.5 / 1e6} for r in range(5)]
    run = make_run_dir(tmp_path / "incast", workers={0: rounds},
                       queues=[{"t": t0 + k, "switch": "lf1", "port": 5, "iface": "lf1-eth5",
                                "backlog_bytes": 0, "backlog_pkts": 0, "drops": k,
                                "overlimits": 0, "sent_bytes": k * 1000, "sent_pkts": k,
                                "requeues": 0} for k in range(6)], t0=t0)
    paths = build_report(run)
    m = json.loads(paths["metrics"].read_text())
    assert m["headline"]["goodput_mbps"] == pytest.approx(16.384)
    assert m["headline"]["rounds_with_rto"] is None  # no captures, so unknown
    assert m["headline"]["tc_drops"] == 5
    assert "incast.png" in {p.name for p in paths["plots"]}
    summary = paths["summary"].read_text()
    assert "no iteration events" in summary
    assert "Never report a queue counter alone" in summary


def test_corrupt_capture_is_flagged(tmp_path):
    run = tmp_path / "corrupt"
    make_demo_run(run)
    p = run / "pcap" / "h2-eth0.pcap"
    p.write_bytes(p.read_bytes()[:-7])
    (run / "pcap" / "junk.pcap").write_bytes(b"not a pcap at all, definitely not")
    paths = build_report(run, plots=False)
    m = json.loads(paths["metrics"].read_text())
    text = " ".join(m["problems"])
    # each damaged input's reason once, in the sentence naming what it made n/a
    assert "h2-eth0.pcap truncated at t = " in text and "(partial: last record" in text
    assert "junk.pcap unreadable" in text


def test_report_rebuild_is_idempotent_and_raw_files_untouched(demo, tmp_path):
    run, _, _ = demo
    before = {p: p.stat().st_mtime_ns for p in (run / "pcap").glob("*.pcap")}
    q = pd.read_csv(run / "queues.csv")
    build_report(run, plots=False)
    assert before == {p: p.stat().st_mtime_ns for p in (run / "pcap").glob("*.pcap")}
    assert q.equals(pd.read_csv(run / "queues.csv"))


def test_runner_shaped_manifest_and_controller_files(tmp_path):
    """flow_paths.csv with spine numbers and no ports, tcpdump stats per capture and a
    CPU summary in the manifest, as the runner and controller write them."""
    run = tmp_path / "shaped"
    make_demo_run(run)
    (run / "flow_paths.csv").write_text(
        "t,src_ip,dst_ip,proto,src_port,dst_port,spine,policy\n"
        "1700000000.0,10.0.1.1,10.0.2.1,,,,1,single\n"
        "1700000000.0,10.0.1.2,10.0.2.1,,,,2,single\n")
    m = json.loads((run / "manifest.json").read_text())
    m["capture_drops"] = {"h1-eth0": {"captured": 40, "received": 40, "dropped_by_kernel": 0,
                                      "dropped_by_interface": 0, "exit_status": 0},
                          "h3-eth0": {"captured": 40, "received": 43, "dropped_by_kernel": 3,
                                      "dropped_by_interface": 0, "exit_status": 0}}
    m["capture_lossy"] = ["h3-eth0"]
    m["cpu"] = {"saturated": True, "rule": "test rule"}
    m["start"] = 1.0  # a clock that does not match the data: times fall back to the data
    (run / "manifest.json").write_text(json.dumps(m))
    a = analyse(run)
    assert a.t0 == pytest.approx(1_700_000_000.0) and "does not match" in " ".join(a.problems)
    assert set(a.tables["losses"]["port"]) == {"lf2-eth1"}
    assert a.metrics["reconciliation"]["capture_drops"] == 3
    text = " ".join(a.problems)
    assert "tcpdump dropped packets on h3-eth0" in text
    # tcpdump lost packets: the captures did not keep up; the CPU is only beside it
    assert "The emulation did not keep up: tcpdump lost 3 packets" in text
    assert "CPU" not in text and a.metrics["fidelity"]["supporting"]["cpu"]["saturated"]
    assert a.tables["episodes"].iloc[0]["n_senders"] == 2


def test_spine_lookup_and_rto_threshold_from_spec():
    from incastlab.analysis.report import rto_threshold_from_spec
    from incastlab.analysis.rundir import spine_lookup
    fp = pd.DataFrame({"t": [1.0, 2.0, 3.0], "src_ip": ["a", "a", "b"], "dst_ip": ["c", "c", "c"],
                       "proto": [6, 6, None], "src_port": [1, 1, None],
                       "dst_port": [2, 2, None], "spine": ["sp1", 2, "1"], "policy": "x"})
    look = spine_lookup(fp)
    assert look("a", "c", 1, 2) == "sp2"     # the last placement wins
    assert look("b", "c", 9, 9) == "sp1"     # address-pair placement, spine by number
    assert look("z", "c", 1, 2) is None
    assert rto_threshold_from_spec({}) == pytest.approx(0.18)
    assert rto_threshold_from_spec({"workload": {"rto_min_ms": 1}}) == pytest.approx(0.0009)


def test_switch_port_capture_narrows_where_packets_were_lost(tmp_path):
    """A capture on the spine->leaf port between sender and receiver: lost packets it saw
    were dropped after it (the receiver's leaf port, where tc counted drops); the one it
    did not see was dropped at or before it."""
    from scapy.layers.inet import IP
    from scapy.utils import rdpcap

    from incastlab.analysis.synthetic import write_pcap
    run = tmp_path / "spine"
    truth = make_demo_run(run)
    t0 = 1_700_000_000.0
    pkts = []
    for p in rdpcap(str(run / "pcap" / "h1-eth0.pcap")):
        ip = p[IP]
        if ip.src == "10.0.1.1" and len(ip.payload.payload) and ip.id == 115:
            continue  # the lost original of seq 11000 never reached the spine port
        pkts.append((float(p.time) - t0 + 0.0002, ip))
    write_pcap(run / "pcap" / "sp1-eth2.pcap", pkts, t0)
    a = analyse(run)
    lost = a.tables["losses"].set_index("seq")
    assert len(lost) == truth["losses"]
    assert lost.loc[3000, "seen_at"] == "sp1-eth2" and lost.loc[11000, "seen_at"] == ""
    assert lost.loc[3000, "port"] == "lf2-eth1" and lost.loc[10000, "port"] == "lf2-eth1"
    assert (lost.loc[11000, "port"], lost.loc[11000, "attributed_by"]) == ("sp1-eth2", "captures")
    flows = a.tables["flows"].set_index("flow")
    assert flows.loc["10.0.1.1:40000>10.0.2.1:29500", "sender_iface"] == "h1-eth0"


def test_ring_allreduce_against_bound(tmp_path):
    from incastlab.analysis.synthetic import demo_fabric
    t0 = 1_700_000_000.0
    workers = {}
    for rank in range(4):
        ev = [{"event": "start", "role": "ring", "rank": rank, "world_size": 4, "mode": "ring",
               "param_count": 250_000, "gradient_bytes": 1_000_000, "iface": f"h{rank + 1}-eth0",
               "host": "box", "t": t0}]
        ev += [{"event": "iteration", "iteration": i, "t_start": t0 + 2 * i,
                "t_end": t0 + 2 * i + 1.6, "compute_s": 0.1, "comm_s": 1.5, "wait_s": None,
                "allreduce_s": 1.5, "bytes_sent": 1_500_000, "bytes_recv": 1_500_000,
                "model_version": i, "staleness": 0, "loss": 1.0 / (i + 1)} for i in range(5)]
        workers[rank] = ev
    run = make_run_dir(tmp_path / "ring", workers=workers, fabric=demo_fabric(), t0=t0,
                       spec_text='[workload]\nkind = "ring"\nworkers = 4\n')
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["placement"] = {"servers": [], "workers": ["h1", "h2", "h3", "h4"]}
    (run / "manifest.json").write_text(json.dumps(manifest))
    paths = build_report(run)
    m = json.loads(paths["metrics"].read_text())
    # 2 (N-1)/N * M / B = 2 * 3/4 * 1e6 B / (10 Mbit/s = 1.25e6 B/s) = 1.2 s of payload;
    # the bound counts each 1448-byte segment's 1514-byte frame and the incoming flow's
    # ACKs (one 66-byte frame per two segments) on the same link: f' = ack_framing.
    # One bound: the ring block's is the headline's (issue 27: 0.569 s vs 0.532 s)
    framed = 1.2 * (2 * 1514 + 66) / (2 * 1448)
    assert m["ring"]["bound_s"] == pytest.approx(framed)
    assert m["headline"]["bound_s"] == pytest.approx(m["ring"]["bound_s"], rel=1e-12)
    assert m["ring"]["ratio_mean"] == pytest.approx(1.5 / framed)
    assert m["headline"]["iteration_time_mean_s"] == pytest.approx(1.6)
    section = paths["report"].read_text().split("Ring all-reduce vs bound", 2)[2]
    assert f"vs its bound {framed:.3g} s (bound_s in the headline" in section.split("</p>")[0]
    names = {p.name for p in paths["plots"]}
    assert {"ring.png", "iterations.png", "loss.png"} <= names
    assert "staleness.png" not in names  # no parameter server, no staleness
    for p in paths["plots"]:
        _valid_png(p)


def test_damaged_files_are_reported_not_fatal(tmp_path):
    run = tmp_path / "damaged"
    make_demo_run(run)
    (run / "counters" / "h1.after.json").write_text('{"kernel": {"TcpRetr')  # cut short
    (run / "fabric.json").write_text("{not json")
    with open(run / "queues.csv", "a") as fh:
        fh.write("1700000001.0,lf2,1,lf2-e")                                 # torn last line
    with open(run / "workers" / "1.jsonl", "a") as fh:
        fh.write('{"event": "iteration", "itera')
    (run / "manifest.json").write_text("garbage")
    paths = build_report(run, plots=False)
    m = json.loads(paths["metrics"].read_text())
    text = " ".join(m["problems"])
    for name in ("counters", "fabric", "manifest"):
        assert f"{name}: unreadable" in text
    assert "1 unreadable line(s) in workers" in text
    assert m["headline"]["retransmissions"] == 4 and m["headline"]["tc_drops"] == 6
    assert paths["report"].read_text().split("<body>", 1)[1].startswith(
        "<div class='banner' id='status-banner'>RUN STATUS UNKNOWN")


def test_backup_workers_discarded_gradients(tmp_path):
    t0 = 1_700_000_000.0
    server = [{"event": "start", "role": "server", "rank": 0, "mode": "backup", "t": t0}]
    server += [{"event": "update", "version": v + 1, "t": t0 + v, "from_ranks": [1, 2],
                "staleness": [0, 0], "discarded": [3] if v % 2 else []} for v in range(6)]
    run = make_run_dir(tmp_path / "backup", workers={0: server}, t0=t0)
    a = analyse(run)
    assert a.tables["discarded"].to_dict(orient="records") == [{"rank": 3, "discarded": 3}]
    assert a.metrics["discarded_gradients"] == 3
    assert "Late gradients discarded" in build_report(run, plots=False)["report"].read_text()


def test_a_failing_part_is_reported_and_the_rest_still_built(tmp_path, monkeypatch):
    from incastlab.analysis import episodes
    run = tmp_path / "bug"
    make_demo_run(run)

    def boom(*args, **kwargs):
        raise RuntimeError("injected")
    monkeypatch.setattr(episodes, "incast_episodes", boom)
    paths = build_report(run, plots=False)
    m = json.loads(paths["metrics"].read_text())
    assert any("incast episodes could not be computed (RuntimeError: injected)" in p
               for p in m["problems"])
    assert m["headline"]["retransmissions"] == 4 and m["headline"]["incast_episodes"] == 0


def test_a_run_under_the_users_controller_says_its_paths_are_unknown(tmp_path):
    run = make_run_dir(tmp_path / "app", spec_text='[routing]\npolicy = "app"\n'
                       'app = ["controller/examples/learning_switch.py"]\n')
    problems = json.loads(build_report(run, plots=False)["metrics"].read_text())["problems"]
    assert any(p.startswith("Flow paths: n/a — the run's controller (routing.policy = app)")
               for p in problems)
    ours = make_run_dir(tmp_path / "ecmp", spec_text='[routing]\npolicy = "ecmp"\n')
    problems = json.loads(build_report(ours, plots=False)["metrics"].read_text())["problems"]
    assert not any(p.startswith("Flow paths") for p in problems)


def test_spurious_is_judged_only_at_the_destination_host(tmp_path):
    """Without the receiver host's capture, a capture point upstream of a drop must not
    decide that a retransmission was spurious (issue 13: a deleted receiver pcap made
    136 retransmissions "spurious" while the kernel saw no D-SACK)."""
    from incastlab.commands.common import analyse
    run = tmp_path / "demo"
    truth = make_demo_run(run)
    spurious = analyse(run, cache=False).tables["retrans"]["spurious"]
    assert int((spurious == True).sum()) == truth["spurious"] == 1  # noqa: E712
    # the receiver's capture now stands at an upstream switch port instead (sp1 -> lf2)
    (run / "pcap" / "h3-eth0.pcap").rename(run / "pcap" / "sp1-eth2.pcap")
    a = analyse(run, cache=False)
    assert a.tables["retrans"]["spurious"].isna().all()
    assert any("no capture at their destination host" in p for p in a.problems)
