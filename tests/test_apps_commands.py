"""The argv builders the orchestrator uses (apps/commands.py helpers, each job's builder):
layout, option mapping, and a real run."""
from __future__ import annotations

from pathlib import Path

from incastlab.apps import incast, ps, ring
from incastlab.apps.commands import Endpoint, option_args
from incastlab.apps.local import LocalJob, events, free_port, read_jsonl
from incastlab.jobs.incast import incast_commands
from incastlab.jobs.ps import ps_commands
from incastlab.jobs.ring import ring_commands


def test_option_args_maps_data_to_flags() -> None:
    assert option_args({"backup_workers": 1, "slowdown": ["3:4", "2:2"], "verbose": True,
                        "staleness": None, "quiet": False}) == \
        ["--backup-workers", "1", "--slowdown", "3:4", "--slowdown", "2:2", "--verbose"]


def test_ps_and_ring_commands_parse_with_the_apps_own_parsers() -> None:
    hosts = [Endpoint(f"10.0.0.{i}", f"h{i}-eth0") for i in range(1, 6)]
    argvs = ps_commands(hosts, "/run/w", 29500,
                        {"shards": 2, "mode": "ssp", "staleness": 2, "slowdown": ["4:3"]})
    parsed = [ps.parse_args(a[3:]) for a in argvs]  # drop python -m module
    assert [a.role for a in parsed] == ["server"] * 2 + ["worker"] * 3
    assert [a.rank for a in parsed] == list(range(5))
    assert all(a.master == ("10.0.0.1", 29500) and a.world_size == 5 for a in parsed)
    assert [a.iface for a in parsed] == [h.iface for h in hosts]
    assert parsed[4].slowdown == [(4, 3.0)] and parsed[0].staleness == 2
    rings = [ring.parse_args(a[3:]) for a in ring_commands(hosts[:3], "/o", 1234,
                                                           {"impl": "gloo"})]
    assert [r.rank for r in rings] == [0, 1, 2] and rings[2].impl == "gloo"


def test_incast_commands_run_on_distinct_loopback_addresses(tmp_path: Path) -> None:
    # the whole of 127/8 is loopback on Linux: one address per "host", one port for all
    hosts = [Endpoint(f"127.0.0.{i}") for i in range(1, 5)]
    port = free_port()
    argvs = incast_commands(hosts, str(tmp_path), port,
                            {"block_size": 50_000, "rounds": 5, "timeout": 20})
    assert incast.parse_args(argvs[0][3:]).servers == [(h.addr, port) for h in hosts[1:]]
    assert [incast.parse_args(a[3:]).listen for a in argvs[1:]] == \
        [(h.addr, port) for h in hosts[1:]]
    with LocalJob(tmp_path) as job:
        for rank in (1, 2, 3, 0):  # servers first, though the client would retry anyway
            job.start(rank, argvs[rank])
        codes = job.wait(60)
        assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    assert [r["bytes"] for r in events(read_jsonl(tmp_path / "0.jsonl"), "round")] == \
        [150_000] * 5
