"""Root tier for [[jobs]] (issue 15 item 4): specs/two-jobs.toml on a real fabric, a ring
and a PS interleaved on a 2x2x4 leaf-spine at 20 Mbit/s.

Both jobs complete; the report has each job's own sections and "Shared queues by job";
each spine port's bytes per job (metrics.json ``jobs``) equal what the captures on that
port hold of that job's packets going down to its leaf, counted here by a rule of our
own (the destination's leaf from its address), and every captured egress byte is some
job's or between jobs. One run, about 35 s with its report (no figures).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.rootnet import free_port

pytestmark = pytest.mark.root


def test_two_jobs_on_one_fabric_complete_with_per_job_report(tmp_path):
    from analysis import pcap as pc
    from incastlab.commands.common import build_report
    from incastlab.runner import check_ready, run_experiment
    from incastlab.spec import load_spec

    # tests/rootnet.run_complete takes overrides on the defaults; [[jobs]] is a file's
    spec = load_spec("specs/two-jobs.toml", ["run.duration_limit_s=120"])
    port = free_port()
    status = run_experiment(spec, tmp_path, controller_port=port, caps=check_ready(spec, port))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert status == "complete", manifest.get("reason")
    jobs = manifest["jobs"]
    assert [j["kind"] for j in jobs] == ["ring", "ps"]
    assert jobs[0]["hosts"] == ["h1", "h5", "h2", "h6"]
    assert jobs[1]["hosts"] == ["h3", "h7", "h4", "h8"]
    for j in jobs:  # both ran: started, ended, their own logs
        assert j["ended_at"] > j["started_at"]
        assert len(list((tmp_path / j["dir"] / "workers").glob("*.jsonl"))) == 4

    build_report(tmp_path, plots=False)
    html = (tmp_path / "report.html").read_text()
    for title in ("Jobs on the fabric", "Shared queues by job", "Job 0 (ring): ",
                  "Job 1 (ps): "):
        assert title in html, title
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    by_job = {m["job"]: m for m in metrics["jobs"]}
    assert by_job[0]["iterations"] == 4 and by_job[1]["iterations"] == 4
    for m in by_job.values():  # each its own bound, from its plugin
        assert m["bound_s"] > 0 and m["iteration_mean_s"] >= m["bound_s"] * 0.9

    # spine j's port down to leaf L (sp{j}-eth{L}): its egress packets go to leaf L's
    # hosts, 10.0.L.x; by job: both ends that job's hosts
    ips = {h: f"10.0.{(int(h[1:]) - 1) // 4 + 1}.{(int(h[1:]) - 1) % 4 + 1}"
           for j in jobs for h in j["hosts"]}
    job_ips = [{ips[h] for h in j["hosts"]} for j in jobs]
    checked = 0
    for j in (1, 2):
        for leaf in (1, 2):
            iface = f"sp{j}-eth{leaf}"
            df = pc.read_pcap(tmp_path / "pcap" / f"{iface}.pcap", cache=False)
            src = np.asarray(pc.ip_to_str(df["src"].to_numpy()), dtype=object)
            dst = np.asarray(pc.ip_to_str(df["dst"].to_numpy()), dtype=object)
            down = np.array([d.startswith(f"10.0.{leaf}.") for d in dst])
            egress = int(df["frame_len"][down].sum())
            ours = []
            for i, hosts in enumerate(job_ips):
                mine = down & np.array([s in hosts and d in hosts
                                        for s, d in zip(src, dst, strict=True)])
                reported = next((p["bytes"] for p in by_job[i]["ports"]
                                 if p["port"] == iface), 0)
                assert reported == int(df["frame_len"][mine].sum()), (iface, i)
                ours.append(reported)
            # what no job owns is only between jobs' hosts (there is none in this run but
            # ARP-sized control): the jobs' bytes are nearly all of the port's
            assert sum(ours) <= egress
            assert sum(ours) >= 0.99 * egress, (iface, ours, egress)
            checked += egress > 0
    assert checked >= 2  # interleaved: both jobs cross the spines
