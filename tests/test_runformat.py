"""The run directory's contract (incastlab.topologies.runformat): what a writer writes
through it, the analysis reads back through it, column for column."""
from __future__ import annotations

import ast
import csv
import json
import sys
from pathlib import Path

import pytest

from incastlab.analysis import rundir
from incastlab.apps.common import JsonLog
from incastlab.capture import queues
from incastlab.controller.records import CsvLog
from incastlab.topologies import runformat as rf

TC_JSON = json.dumps([
    {"kind": "htb", "handle": "1:", "dev": "lf1-eth3", "bytes": 9, "packets": 1},
    {"kind": "pfifo", "handle": "10:", "dev": "lf1-eth3", "backlog": 4542, "qlen": 3,
     "drops": 7, "overlimits": 0, "bytes": 151400, "packets": 100, "requeues": 1},
])


def test_the_contract_imports_only_the_standard_library():
    tree = ast.parse(Path(rf.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m.split(".")[0] for m in names} <= set(sys.stdlib_module_names) | {"__future__"}


def test_names_are_unique_and_numeric_columns_declared():
    for f in rf.CSV_FILES:
        assert len(set(f.fields)) == len(f.fields), f.name
        assert set(f.numeric) <= set(f.fields)
    assert len({f.name for f in rf.CSV_FILES}) == len(rf.CSV_FILES)


def test_queue_sampler_rows_read_back_by_the_analysis(tmp_path):
    rows = queues.parse_tc_json(TC_JSON, {"lf1-eth3"}, 1_700_000_000.25)
    assert len(rows) == 1 and len(rows[0]) == len(rf.QUEUES.fields)
    with open(tmp_path / rf.QUEUES.name, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(queues.COLUMNS)
        w.writerows(rows)
    df = rundir.load_queues(tmp_path)
    assert list(df.columns) == rf.QUEUES.fields
    r = df.iloc[0]
    assert (r["switch"], r["port"], r["iface"]) == ("lf1", 3, "lf1-eth3")
    assert (r["backlog_bytes"], r["backlog_pkts"], r["drops"], r["sent_pkts"]) == (
        4542, 3, 7, 100)
    assert r["t"] == pytest.approx(1_700_000_000.25)


def test_controller_records_read_back_by_the_analysis(tmp_path):
    log = CsvLog.in_run(str(tmp_path), rf.PORT_STATS)
    log.write({"t": 12.5, "switch": "lf1", "port": 2, "peer": "sp1", "tx_bytes": 1000,
               "rx_bytes": 2000, "tx_packets": 10, "rx_packets": 20, "tx_dropped": ""})
    log.close()
    paths = CsvLog.in_run(str(tmp_path), rf.FLOW_PATHS)
    paths.write({"t": 13.0, "src_ip": "10.0.0.1", "dst_ip": "10.0.0.3", "proto": 6,
                 "src_port": 5000, "dst_port": 29500, "spine": 2, "policy": "spread"})
    paths.close()
    stats = rundir.load_port_stats(tmp_path)
    assert list(stats.columns) == rf.PORT_STATS.fields
    assert stats.iloc[0][["port", "tx_bytes", "rx_packets"]].tolist() == [2, 1000, 20]
    flows = rundir.load_flow_paths(tmp_path)
    lookup = rundir.spine_lookup(flows)
    assert lookup("10.0.0.1", "10.0.0.3", 5000, 29500) == "sp2"


def test_apps_log_where_the_analysis_looks(tmp_path):
    log = JsonLog(str(tmp_path / rf.WORKERS_DIR), 3)
    log.write("start", role="worker", rank=3)
    log.close()
    df = rundir.load_workers(tmp_path)
    assert df["rank"].tolist() == [3] and df["file"].tolist() == ["3"]


def test_counters_file_names_and_phases(tmp_path):
    assert rf.counters_file("h2", "after") == "h2.after.json"
    with pytest.raises(ValueError, match="before, after"):
        rf.counters_file("h2", "during")
    (tmp_path / rf.COUNTERS_DIR).mkdir()
    for phase, n in zip(rf.COUNTER_PHASES, (5, 9), strict=True):
        (tmp_path / rf.COUNTERS_DIR / rf.counters_file("h2", phase)).write_text(
            json.dumps({"kernel": {"TcpRetransSegs": n}}))
    assert rundir.counter_delta(rundir.load_counters(tmp_path), "TcpRetransSegs") == 4
