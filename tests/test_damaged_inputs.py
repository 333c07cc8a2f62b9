"""Issue 13 item 2: a missing, empty, truncated or unreadable input makes the metrics
that need it n/a with the reason, and the run's analysis partial; a bad CSV line costs
only itself. Each case starts from the synthetic PS run whose truth is known
(analysis/synthetic.make_demo_run) with a manifest shaped as the runner writes it, and
damages one input."""
import json
import shutil

import pandas as pd
import pytest

from incastlab.analysis import inputs as inp
from incastlab.analysis.pcap import read_pcap
from incastlab.commands.common import analyse, build_report
from incastlab.analysis.rundir import load_queues, read_csv_lines
from incastlab.analysis.synthetic import make_demo_run

T0 = 1_700_000_000.0
CAPTURE_METRICS = ("retransmissions", "capture_losses", "rtos", "throughput_mbps")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """The demo run with the manifest the runner writes: every capture with tcpdump's
    packet count, every rank, the queue sampler's sample count."""
    run = tmp_path_factory.mktemp("pristine") / "run"
    truth = make_demo_run(run, t0=T0)
    m = json.loads((run / "manifest.json").read_text())
    m["capture_drops"] = {p.stem: {"captured": len(read_pcap(p, cache=False)),
                                   "dropped_by_kernel": 0, "file": p.name}
                          for p in sorted((run / "pcap").glob("*.pcap"))}
    m["processes"] = [{"rank": r, "host": h, "role": role}
                      for r, h, role in ((0, "h3", "server"), (1, "h1", "worker"),
                                         (2, "h2", "worker"))]
    m["placement"] = {"servers": ["h3"], "workers": ["h1", "h2"]}  # for the job's bound
    q = pd.read_csv(run / "queues.csv")
    m["queue_sampler"] = {"samples": int(q["t"].nunique()), "target_interval_ms": 10.0,
                          "bad_samples": 0}
    (run / "manifest.json").write_text(json.dumps(m))
    return run, truth


@pytest.fixture
def run(pristine, tmp_path):
    """A fresh copy of the pristine run to damage."""
    dst = tmp_path / "run"
    shutil.copytree(pristine[0], dst)
    return dst


def _states(a) -> dict:
    """The states of the inputs the run should have written."""
    return {k: v["state"] for k, v in a.metrics["analysis"]["inputs"].items()
            if v["expected"]}


def test_the_undamaged_run_is_complete_and_measured(pristine):
    run, truth = pristine
    a = analyse(run, cache=False)
    assert a.metrics["analysis"]["complete"] is True
    assert set(_states(a).values()) == {"ok"}, _states(a)
    h = a.metrics["headline"]
    assert h["retransmissions"] == truth["retrans"] and h["tc_drops"] == truth["tc_drops"]
    assert h["capture_losses"] == truth["losses"]
    assert not any("ANALYSIS PARTIAL" in p or "are n/a" in p for p in a.problems)
    assert a.metrics["cost"]["available"] and a.metrics["cost"]["captures"] is True


@pytest.mark.parametrize("damage,state", [
    (lambda p: p.unlink(), "missing"),
    (lambda p: p.write_bytes(b""), "empty"),
    (lambda p: p.write_bytes(b"this is no capture at all, just some text\n" * 20),
     "unreadable"),
    (lambda p: p.write_bytes(p.read_bytes()[:-7]), "truncated"),       # cut in a record
    (lambda p: p.write_bytes(p.read_bytes()[:24]), "empty"),           # header only
])
def test_a_damaged_receiver_capture_makes_capture_metrics_na(run, damage, state):
    """The PS's capture (h3, the receiver of both flows) deleted, empty, garbage, cut:
    no capture-derived number is inferred; kernel and queue numbers stay."""
    damage(run / "pcap" / "h3-eth0.pcap")
    paths = build_report(run, plots=False)
    m = json.loads(paths["metrics"].read_text())
    assert m["analysis"]["complete"] is False
    entry = m["analysis"]["inputs"]["pcap/h3-eth0.pcap"]
    assert entry["state"] == state and entry["reason"]
    for name in CAPTURE_METRICS:
        assert m["headline"][name] is None, name
        assert "pcap/h3-eth0.pcap " + state in m["headline_na"][name]
    assert m["headline"]["kernel_retrans_segs"] == 5 and m["headline"]["tc_drops"] == 6
    assert any("pcap/h3-eth0.pcap" in p and "n/a" in p for p in m["problems"])
    # the cost split does not quote RTO stalls or loss recovery from what is left
    assert m["cost"]["captures"] is False and m["cost"]["rto_stall_s"] is None
    assert "losses and RTOs cannot be told apart" in m["cost"]["sentence"]
    body = paths["report"].read_text().split("<body>", 1)[1]
    assert body.startswith("<div class='banner' id='partial-banner'>ANALYSIS PARTIAL")
    summary = paths["summary"].read_text()
    assert summary.startswith("> **ANALYSIS PARTIAL") and "pcap/h3-eth0.pcap" in summary


def test_a_capture_short_of_tcpdumps_count_is_truncated(run):
    """Whole records, but fewer than tcpdump said it wrote: the file lost its tail."""
    m = json.loads((run / "manifest.json").read_text())
    m["capture_drops"]["h1-eth0"]["captured"] += 3
    (run / "manifest.json").write_text(json.dumps(m))
    a = analyse(run, cache=False)
    e = a.metrics["analysis"]["inputs"]["pcap/h1-eth0.pcap"]
    assert e["state"] == "truncated" and "of the" in e["reason"]
    assert a.metrics["headline"]["retransmissions"] is None


def _cut_queues(run, keep_until_s: float) -> None:
    """queues.csv cut inside the first row after t0 + keep_until_s (a partial line)."""
    text = (run / "queues.csv").read_text()
    rows = text.splitlines(keepends=True)
    keep = [r for r in rows[1:] if float(r.split(",")[0]) <= T0 + keep_until_s + 1e-9]
    cut = rows[1 + len(keep)][:25]
    (run / "queues.csv").write_text(rows[0] + "".join(keep) + cut)


def test_a_truncated_queue_file_gives_no_drop_count_only_a_lower_bound(run):
    """The demo's port drops 2 packets at each of 0.013, 0.051 and 0.300 s (6 in all);
    cut at 0.2 s the file holds 4 of them: tc_drops is n/a with 'at least 4'."""
    _cut_queues(run, 0.2)
    paths = build_report(run, plots=False)
    m = json.loads(paths["metrics"].read_text())
    e = m["analysis"]["inputs"]["queues.csv"]
    assert e["state"] == "truncated" and m["analysis"]["complete"] is False
    assert "samples" in e["reason"]            # 21 of the sampler's 91
    assert e["truncated_at"] == pytest.approx(T0 + 0.2)
    assert m["headline"]["tc_drops"] is None
    assert "at least 4 packets" in m["headline_na"]["tc_drops"]
    assert "t = 0.2 s" in m["headline_na"]["tc_drops"]
    assert m["headline"]["incast_episodes"] is None
    assert m["headline"]["retransmissions"] == 4           # the captures are whole
    assert "queues.csv truncated" in paths["report"].read_text()


def test_a_damaged_inputs_reason_is_said_once(run):
    """Issue 27 item 3: the truncated queue file's whole reason once at the top of
    report.html and summary.md, with the metrics it made n/a in words; below, in the
    headline table, the reconciliation and fidelity notes, only its head."""
    _cut_queues(run, 0.2)
    paths = build_report(run, plots=False)
    why = json.loads(paths["metrics"].read_text())["analysis"]["inputs"]["queues.csv"]["reason"]
    for name, esc in (("report", lambda t: t.replace("'", "&#x27;")), ("summary", str)):
        page = paths[name].read_text()
        assert page.count(esc(why)) == 1, name
        top = page.index(esc(why))
        assert top < page.index("Headline numbers"), name
        sentence = page[top:].split("\n", 1)[0]
        assert "n/a for want of it: queue drops (tc), incast episodes" in sentence, name
        # the rows below point up to it
        assert page.count("queues.csv truncated at t = 0.2 s (why: at the top)") >= 4, name
    assert "Missing inputs:" not in paths["summary"].read_text()


def test_a_queue_file_that_stops_early_is_truncated_without_the_sampler_count(run):
    """No sampler count in the manifest (the sampler died before writing it): rows that
    stop before the workload's last logged moment (0.9 s) give it away."""
    m = json.loads((run / "manifest.json").read_text())
    del m["queue_sampler"]
    (run / "manifest.json").write_text(json.dumps(m))
    _cut_queues(run, 0.2)
    e = analyse(run, cache=False).metrics["analysis"]["inputs"]["queues.csv"]
    assert e["state"] == "truncated" and "before the workload" in e["reason"]


def test_a_port_the_fabric_lists_without_rows_is_truncated(run):
    q = pd.read_csv(run / "queues.csv")
    q[q["iface"] != "lf1-eth3"].to_csv(run / "queues.csv", index=False)
    a = analyse(run, cache=False)
    e = a.metrics["analysis"]["inputs"]["queues.csv"]
    assert e["state"] == "truncated" and "no rows for lf1-eth3" in e["reason"]
    assert a.metrics["headline"]["tc_drops"] is None


def test_a_port_with_missing_samples_is_truncated(run):
    q = pd.read_csv(run / "queues.csv")
    gone = (q["iface"] == "sp1-eth2") & (q["t"] > T0 + 0.5)
    q[~gone].to_csv(run / "queues.csv", index=False)
    e = analyse(run, cache=False).metrics["analysis"]["inputs"]["queues.csv"]
    assert e["state"] == "truncated" and "sp1-eth2 (51)" in e["reason"]


@pytest.mark.parametrize("bad", [
    b"1700000000.455,lf2,1,lf2-eth1,0,0,garbage,0,1,1,0",  # a non-number in a counter
    b"1700000000.455,lf2,1,lf2-eth1,0,0",                  # too few fields
    b"1700000000.455,lf2,1,lf2-eth1,0,0,0,0,1,1,0,9,9",    # too many
    b"1700000000.455,lf2,1,\xff\xfe-eth1,0,0,0,0,1,1,0",    # not UTF-8
])
def test_a_bad_queue_line_is_skipped_and_counted(run, bad):
    raw = (run / "queues.csv").read_bytes().split(b"\n")
    raw.insert(40, bad)
    (run / "queues.csv").write_bytes(b"\n".join(raw))
    q = load_queues(run)
    assert q.attrs["bad_lines"] == 1 and len(q) == 91 * 12   # every good row kept
    paths = build_report(run, plots=False)
    m = json.loads(paths["metrics"].read_text())
    assert m["analysis"]["inputs"]["queues.csv"]["state"] == "ok"
    assert m["analysis"]["inputs"]["queues.csv"]["bad_lines"] == 1
    assert m["headline"]["tc_drops"] == 6           # counters are cumulative: none lost
    assert any("1 unreadable line(s) in queues.csv" in p for p in m["problems"])
    assert "1 unreadable line(s) in queues.csv" in paths["report"].read_text()


def test_bad_lines_in_the_controllers_csvs_are_skipped_and_counted(run):
    (run / "flow_paths.csv").write_text(
        "t,src_ip,dst_ip,proto,src_port,dst_port,spine,policy\n"
        "1700000000.0,10.0.1.1,10.0.2.1,6,40000,29500,sp1,ecmp\n"
        "oops,10.0.1.2\n"
        "1700000000.0,10.0.1.2,10.0.2.1,6,40001,29500,sp2,ecmp\n")
    (run / "port_stats.csv").write_text(
        "t,switch,port,peer,tx_bytes,rx_bytes,tx_packets,rx_packets,tx_dropped\n"
        "1700000000.1,lf1,3,sp1,100,0,1,0,0\n"
        "1700000000.2,lf1,3,sp1,x,0,2,0,0\n"
        "1700000000.3,lf1,3,sp1,300,0,3,0,0\n")
    a = analyse(run, cache=False)
    ins = a.metrics["analysis"]["inputs"]
    assert ins["flow_paths.csv"]["bad_lines"] == 1 and ins["port_stats.csv"]["bad_lines"] == 1
    assert a.metrics["analysis"]["complete"] is True
    assert len(read_csv_lines(run / "flow_paths.csv", [])) == 2


def test_a_missing_worker_log_makes_training_metrics_na(run):
    (run / "workers" / "2.jsonl").unlink()
    a = analyse(run, cache=False)
    assert a.metrics["analysis"]["inputs"]["workers/2.jsonl"]["state"] == "missing"
    assert a.metrics["headline"]["iteration_time_mean_s"] is None
    assert "workers/2.jsonl missing" in a.metrics["headline_na"]["iteration_time_mean_s"]
    assert a.metrics["headline"]["retransmissions"] == 4


def test_a_worker_log_with_one_damaged_byte_keeps_the_rest(run):
    p = run / "workers" / "1.jsonl"
    lines = p.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"iteration", b"iter\xffation", 1)
    p.write_bytes(b"\n".join(lines))
    a = analyse(run, cache=False)
    e = a.metrics["analysis"]["inputs"]["workers/1.jsonl"]
    assert e["state"] == "ok" and e["bad_lines"] == 1
    assert a.metrics["analysis"]["complete"] is True
    assert a.metrics["headline"]["iteration_time_mean_s"] is not None
    assert any("1 unreadable line(s) in workers/1.jsonl" in x for x in a.problems)


def test_unreadable_counters_make_kernel_metrics_na(run):
    (run / "counters" / "h1.after.json").write_text('{"kernel": {"TcpRetr')
    a = analyse(run, cache=False)
    assert a.metrics["analysis"]["inputs"]["counters/h1.after.json"]["state"] == "unreadable"
    assert a.metrics["headline"]["kernel_retrans_segs"] is None
    assert a.metrics["headline"]["retransmissions"] == 4


def test_inventory_states_without_a_manifest_list(tmp_path):
    """A run directory with nothing in it: every input the run should have is missing."""
    inv = inp.inventory(tmp_path, manifest={}, spec={}, fabric=None, queues=None,
                        workers=None, capture_inputs=inp.read_captures(tmp_path, {}, {})[1],
                        pcaps={})
    states = {i.name: i.state for i in inv.items}
    assert states["manifest.json"] == "missing" and states["pcap/*.pcap"] == "missing"
    assert states["queues.csv"] == "missing" and states["workers/*.jsonl"] == "missing"
    assert not inv.complete and inv.banner().startswith("ANALYSIS PARTIAL")
    # captures switched off in the spec: their absence is no damage
    off = inp.read_captures(tmp_path, {}, {"capture": {"enabled": False}})[1]
    assert off[0].state == "missing" and off[0].expected is False


def test_an_edge_sample_without_rows_is_not_truncation(run):
    """The sampler counted 2 more samples than the file holds (taken while the qdiscs
    were set up or removed; a real run showed 1 of 1779): whole. 3 more: truncated."""
    m = json.loads((run / "manifest.json").read_text())
    for extra, state in ((2, "ok"), (3, "truncated")):
        m["queue_sampler"]["samples"] = 91 + extra
        (run / "manifest.json").write_text(json.dumps(m))
        e = analyse(run, cache=False).metrics["analysis"]["inputs"]["queues.csv"]
        assert e["state"] == state, (extra, e)


def test_compare_leaves_a_partial_runs_na_out_of_the_means(pristine, tmp_path):
    """Three copies of the run (tc_drops 6 each), one with queues.csv truncated (its
    file holds 4): the group's tc_drops is 6 over n = 2, not 4 over 3 (n/a as 0) or
    16/3 (the floor as a value), and the page names the partial run."""
    from incastlab.commands.common import compare_runs
    runs = []
    for k in range(3):
        dst = tmp_path / f"r{k}"
        shutil.copytree(pristine[0], dst)
        m = json.loads((dst / "manifest.json").read_text())
        m["pid"] = 1000 + k                     # three runs, not one given three times
        (dst / "manifest.json").write_text(json.dumps(m))
        runs.append(dst)
    _cut_queues(runs[2], 0.2)
    out = compare_runs(runs, tmp_path / "cmp")
    table = pd.read_csv(out["table"]).set_index("metric")
    assert table.loc["tc_drops", "n"] == 2 and table.loc["tc_drops", "mean"] == 6
    assert table.loc["retransmissions", "n"] == 3                # its captures are whole
    page = out["report"].read_text()
    assert "id='partial-runs'" in page and "r2 (queues.csv truncated)" in page
    data = json.loads(out["metrics"].read_text())
    assert [r["analysis_complete"] for r in data["runs"]] == [True, True, False]
    assert "at least 4" in data["runs"][2]["headline_na"]["tc_drops"]


def _queue_finding(a) -> str:
    return next(f for f in a.metrics["findings"] if f.startswith("The worst queue"))


def test_findings_quote_no_queue_number_the_headline_withholds(run):
    """queues.csv cut at 0.2 s: tc_drops and incast_episodes are n/a, so the worst queue's
    sentence quotes neither what remains (4 drops, 2 episodes) nor the run's; it says
    n/a once and leaves the reason to the trust sentence (issue 27 item 3)."""
    _cut_queues(run, 0.2)
    a = analyse(run, cache=False)
    assert a.metrics["headline"]["tc_drops"] is None
    assert a.metrics["headline"]["incast_episodes"] is None
    q = _queue_finding(a)
    assert "tc counted" not in q and "episodes," not in q and "incast (" not in q, q
    assert q.count("n/a") == 1 and "truncated" not in q
    assert not any("tc counted" in f for f in a.metrics["findings"])
    assert sum("queues.csv" in f for f in a.metrics["findings"]) == 1


def test_findings_quote_no_incast_count_without_the_receivers_capture(run):
    """The PS's capture deleted: incast_episodes is n/a (it needs the captures' senders),
    so no 'of them incast'; tc's drop count, from whole queue samples, stays."""
    (run / "pcap" / "h3-eth0.pcap").unlink()
    a = analyse(run, cache=False)
    assert a.metrics["headline"]["incast_episodes"] is None
    assert a.metrics["headline"]["tc_drops"] == 6
    q = _queue_finding(a)
    assert "of them incast" not in q and "episode," not in q and "tc counted 6 drops there" in q, q
