"""What `incastlab run`, `sweep` and the demo print per run (issue 10: "measured vs bound
and the network's cost"): common.report_and_summarise on a synthetic ring run whose bound
is computed by hand, as in tests/test_network_cost.py, without root."""
import json
from types import SimpleNamespace

import pytest

from incastlab.analysis.synthetic import demo_fabric, make_run_dir
from incastlab.commands import common

T0 = 1_700_000_000.0
B = 10e6 / 8                           # demo_fabric links: 10 Mbit/s, in bytes/s
F_ACK = (2 * 1514 + 66) / (2 * 1448)   # two full frames and one ACK per 2 x 1448 bytes
M = 1_000_000                          # gradient bytes
DURATION, COMPUTE = 1.6, 0.1           # every iteration: 1.6 s measured, 0.1 s computing


def _ring_run(path):
    hosts = ["h1", "h2", "h3", "h4"]
    logs = {}
    for rank, h in enumerate(hosts):
        ev = [{"event": "start", "role": "ring", "rank": rank, "world_size": 4,
               "mode": "ring", "gradient_bytes": M, "iface": f"{h}-eth0", "t": T0}]
        ev += [{"event": "iteration", "iteration": i, "t_start": T0 + 2 * i,
                "t_end": T0 + 2 * i + DURATION, "compute_s": COMPUTE, "wait_s": None,
                "allreduce_s": DURATION - COMPUTE, "loss": 1.0} for i in range(4)]
        logs[rank] = ev
    run = make_run_dir(path, workers=logs, fabric=demo_fabric(), t0=T0,
                       spec_text='[workload]\nkind = "ring"\nworkers = 4\n')
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["placement"] = {"servers": [], "workers": hosts}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_the_printout_carries_measured_bound_ratio_and_cost(tmp_path, capsys):
    run = _ring_run(tmp_path / "ring")
    # ring all-reduce on the host links: 2(N-1)/N * M * framing / B = 1.5 MB * 1.0684 /
    # 1.25 MB/s = 1.282 s; ratio (1.6 - 0.1) / 1.282 = 1.170; the network's cost over the
    # bound 1.6 - 0.1 - 1.282 = 0.218 s (13.6 % of 1.6 s): no captures, all unexplained
    bound = 2 * 3 / 4 * M * F_ACK / B
    assert bound == pytest.approx(1.2820, abs=1e-4)
    assert (DURATION - COMPUTE) / bound == pytest.approx(1.1700, abs=1e-4)
    assert DURATION - COMPUTE - bound == pytest.approx(0.2180, abs=1e-4)
    common.report_and_summarise(run, SimpleNamespace(no_report=False, quiet=False))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "ring: complete"
    # the measured time, the bound, their ratio and the cost, each with its value and unit
    assert "  mean iteration time: 1.6 s" in lines
    assert "  bound of one iteration: 1.28 s" in lines
    assert "  communication over its bound: 1.17" in lines
    assert "  network's cost over the bound: 0.218 s" in lines
    # ... in that order, before the findings, which say the same in a sentence
    at = [lines.index(s) for s in ("  mean iteration time: 1.6 s",
                                   "  bound of one iteration: 1.28 s",
                                   "  communication over its bound: 1.17",
                                   "  network's cost over the bound: 0.218 s")]
    assert at == sorted(at) and all(not lines[i].startswith("  - ") for i in range(at[-1]))
    findings = " ".join(line.strip() for line in lines if line.startswith(("  - ", "    ")))
    assert "0.218 s" in findings and "14 %" in findings
    assert lines[-1] == f"report: {run / 'report.html'}"


def test_a_run_without_a_cost_prints_no_cost_lines(tmp_path, capsys):
    """The same run without its placement has no bound: no line claims one."""
    run = _ring_run(tmp_path / "ring")
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["placement"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    common.report_and_summarise(run, SimpleNamespace(no_report=False, quiet=False))
    out = capsys.readouterr().out
    assert "  mean iteration time: 1.6 s" in out.splitlines()
    assert "bound of one iteration" not in out and "network's cost over" not in out
