"""A job kind defined entirely here — its Job subclass, its program, its bound and its
trace events — plugs into the lab through the registry alone: the spec validates its own
[workload] field, places it and plans its launches, its argv is built from the shared
option helpers (apps/commands.py), its program runs on loopback through apps/local.py
like the built-in apps, and its bound is written with the cost model's primitives. No
other source file names it (the point of a job kind being one vertical slice)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from incastlab import jobs
from incastlab.analysis import alphabeta
from incastlab.analysis import trace as tr
from incastlab.apps.commands import Endpoint, option_args, rank_args
from incastlab.analysis.synthetic import make_run_dir
from incastlab.apps.local import LocalJob, events, free_port, loopback_argv, read_jsonl
from incastlab.commands.common import build_report
from incastlab.fields import int_check, spec_field
from incastlab.jobs.base import RENDEZVOUS_PORT, Job, Launch, Roles, endpoints
from incastlab.spec import SpecError, load_spec, schema_rows

KIND = "toyping"
BASE = ["topology.leaves=2", "topology.hosts_per_leaf=3"]
IPS = {f"h{n}": f"10.0.{(n - 1) // 3 + 1}.{(n - 1) % 3 + 1}" for n in range(1, 7)}

# The toy's program: rank 0 listens on the rendezvous port; every other rank sends it
# `--pings` messages of `--bytes` bytes and logs a `ping` event per message (JSONL, as the
# lab's apps do, through the shared logger).
PROGRAM = '''
import argparse, socket, time
from incastlab.apps import common

p = argparse.ArgumentParser(prog="toyping")
common.add_dist_args(p)
p.add_argument("--pings", type=int, required=True)
p.add_argument("--bytes", type=int, required=True)
args = p.parse_args()
log = common.JsonLog(args.out, args.rank)


def body():
    log.write("start", role="toy-server" if args.rank == 0 else "toy-client",
              rank=args.rank, world_size=args.world_size, mode="toyping", t=time.time())
    host, port = args.master
    if args.rank == 0:
        with socket.create_server((host, port)) as srv:
            srv.settimeout(args.timeout)
            for _ in range(args.world_size - 1):
                conn, _ = srv.accept()
                with conn:
                    want, got = args.pings * args.bytes, 0
                    while got < want:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        got += len(chunk)
                    log.write("received", bytes=got)
        return
    deadline = time.time() + args.timeout
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=args.timeout)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    with conn:
        for i in range(args.pings):
            t = time.time()
            conn.sendall(b"x" * args.bytes)
            log.write("ping", ping=i, t_start=t, t_end=time.time(), bytes=args.bytes)


common.run_main("toyping", log, args.rank, body)
'''


@dataclass
class ToyFields:
    pings: int = spec_field(3, int_check(1, 1000), "toyping: messages each client sends",
                            sweep=True)
    ping_bytes: int = spec_field(1000, int_check(1, 1 << 20, unit="bytes"),
                                 "toyping: bytes of one message")


class ToyJob(Job):
    """One server (rank 0, on ps_leaf) and `workers` clients that each send it pings."""

    kind = KIND
    summary = "toy job of tests/test_toy_job.py"
    Fields = ToyFields
    progress_event = "ping"
    logged_modes = (KIND,)
    # its own logged event for the Perfetto trace
    trace_spans = (tr.LoggedSpan("ping", lambda r: f"ping {int(r.ping)}", "comm",
                                 "t_start", "t_end", ("ping", "bytes")),)

    def __init__(self, program: str = "toyping.py") -> None:
        self.program = program

    def roles(self, w):
        return Roles(1, w.workers, "clients", "toy server")

    def check(self, w, ok):
        if ok("workload.pings", "workload.ping_bytes") and w.pings * w.ping_bytes > 1 << 24:
            return [f"workload.pings: {w.pings} × workload.ping_bytes = "
                    f"{w.pings * w.ping_bytes} bytes, more than 16 MiB per client"]
        return []

    def expected_progress(self, w):
        return w.pings

    def commands(self, hosts: list[Endpoint], out: str, port: int, options: dict,
                 python: str = sys.executable) -> list[list[str]]:
        """One argv per host, built from the shared helpers: rank i on hosts[i]."""
        return [[python, self.program, *rank_args(rank, hosts, port), "--out", str(out),
                 *option_args(options)] for rank in range(len(hosts))]

    def launches(self, spec, ips, out_dir):
        w, placed = spec.workload, spec.placement()
        hosts = placed.servers + placed.workers
        argvs = self.commands(endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT,
                              {"pings": w.pings, "bytes": w.ping_bytes,
                               "timeout": f"{w.timeout_s:g}"})
        return [Launch(h, argv, rank, "toy-server" if rank == 0 else "toy-client", rank > 0)
                for rank, (h, argv) in enumerate(zip(hosts, argvs, strict=True))]

    def summary_blocks(self, analysis):
        """Its own metrics.json block: pings the clients logged."""
        w = analysis.tables.get("workers_raw")
        return {"toy_pings": int((w["event"] == self.progress_event).sum())
                if w is not None and len(w) else None}

    def cost_clause(self, analysis):
        n = analysis.metrics.get("toy_pings")
        return f"the toy clients sent {n} pings" if n else None

    def bound(self, analysis):
        """All clients' pings into the server's one link at once: N·P·S·f/B."""
        w, rate = analysis["workload"], analysis["server_mbps"]
        n = w.workers * w.pings * w.ping_bytes
        secs = n * alphabeta.framing_factor() / alphabeta.bytes_per_s(rate)
        return alphabeta.Bound(secs, f"{alphabeta.fmt(n)} B·f/{rate:g} Mbit/s", {"port": secs},
                               "server port")


@pytest.fixture
def toy(tmp_path):
    program = tmp_path / "toyping.py"
    program.write_text(PROGRAM)
    job = ToyJob(str(program))
    jobs.register(job)
    try:
        yield job
    finally:
        jobs.unregister(KIND)
    assert KIND not in jobs.JOBS


def test_the_toy_job_validates_places_and_plans(toy):
    spec = load_spec(None, BASE + [f"workload.kind={KIND}", "workload.workers=3",
                                   "workload.pings=4", "workload.ping_bytes=2000"])
    assert (spec.workload.pings, spec.workload.ping_bytes) == (4, 2000)
    assert {"workload.pings", "workload.ping_bytes"} <= {row[0] for row in schema_rows()}
    plan = toy.launches(spec, IPS, "/tmp/w")
    assert [la.role for la in plan] == ["toy-server"] + ["toy-client"] * 3
    assert [la.rank for la in plan] == [0, 1, 2, 3]
    server_ip = IPS[plan[0].host]
    for la in plan:
        argv = la.argv
        assert argv[1] == toy.program
        assert argv[argv.index("--master") + 1] == f"{server_ip}:{RENDEZVOUS_PORT}"
        assert argv[argv.index("--iface") + 1] == f"{la.host}-eth0"
        assert argv[argv.index("--pings") + 1] == "4"
        assert argv[argv.index("--bytes") + 1] == "2000"
    # its own field checks and its own cross-field rule, naming the field
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + [f"workload.kind={KIND}", "workload.pings=0"])
    assert info.value.errors == ["workload.pings: 0 is not an integer from 1 to 1000"]
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + [f"workload.kind={KIND}", "workload.pings=1000",
                                "workload.ping_bytes=1048576"])
    assert info.value.errors[0].startswith("workload.pings: 1000 × workload.ping_bytes")


def test_the_toy_job_runs_on_loopback_and_its_logs_feed_the_trace(toy, tmp_path):
    out = tmp_path / "workers"
    argvs = loopback_argv(toy.commands, 3, out, free_port(),
                          {"pings": 5, "bytes": 3000, "timeout": 20})
    with LocalJob(tmp_path / "procs") as job:
        for rank, argv in enumerate(argvs):
            job.start(rank, argv)
        codes = job.wait(60)
    assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    logs = {r: read_jsonl(out / f"{r}.jsonl") for r in range(3)}
    assert [e["bytes"] for e in events(logs[0], "received")] == [15_000, 15_000]
    for r in (1, 2):
        assert [e["ping"] for e in events(logs[r], toy.progress_event)] == list(range(5))
    # its trace events come from its own declaration, beside the built-in ones
    workers = pd.DataFrame([{**e, "file": str(r)} for r, log in logs.items() for e in log])
    trace = tr.build_trace(workers, spans=toy.trace_spans)
    pings = [e for e in trace["traceEvents"] if e.get("cat") == "comm"
             and e["name"].startswith("ping ")]
    assert len(pings) == 10 and all(e["args"]["bytes"] == 3000 for e in pings)
    assert not [e for e in tr.build_trace(workers)["traceEvents"]
                if e["name"].startswith("ping ")]
    # and the report's trace.json draws them for a run of this kind, through the registry
    run = make_run_dir(tmp_path / "run", workers={r: logs[r] for r in logs},
                       spec_text=f'name = "toy"\n[workload]\nkind = "{KIND}"\n')
    paths = build_report(run)
    drawn = json.loads((run / "trace.json").read_text())["traceEvents"]
    assert len([e for e in drawn if e["name"].startswith("ping ")]) == 10
    # its metrics.json block and its sentence in the findings (no bound here: no fabric)
    assert json.loads(paths["metrics"].read_text())["toy_pings"] == 10
    assert "The toy clients sent 10 pings." in (run / "summary.md").read_text()


def test_the_toy_jobs_bound_is_written_with_the_cost_model(toy):
    spec = load_spec(None, BASE + [f"workload.kind={KIND}", "workload.workers=2",
                                   "workload.pings=10", "workload.ping_bytes=1448"])
    b = toy.bound({"workload": spec.workload, "server_mbps": 8.0})
    # 2 × 10 × 1448 B payload in 1514-byte frames at 1 MB/s
    assert b.seconds == pytest.approx(20 * 1514 / 1e6)
    assert b.bottleneck == "server port"


def test_nothing_outside_this_file_names_the_toy():
    root = Path(__file__).resolve().parents[1]
    named = [p for d in ("incastlab", "apps", "analysis", "controller", "topologies")
             for p in (root / d).rglob("*.py") if KIND in p.read_text()]
    assert named == []
