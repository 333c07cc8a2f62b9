"""Which programs a workload starts in which hosts.

The spec decides the hosts (``spec.placement()``) and the options; the apps decide their
own rank layout and command lines (``incastlab.apps.commands``). This module only
translates one into the other, so the launch plan is unit-tested without root."""
from __future__ import annotations

from dataclasses import dataclass

from incastlab.apps.commands import WORKLOADS as APP_COMMANDS
from incastlab.apps.commands import Endpoint

RENDEZVOUS_PORT = 29500
INCAST_PORT = 5001


@dataclass(frozen=True)
class Launch:
    host: str
    argv: list[str]
    rank: int
    role: str          # server / worker / ring / client / incast-server
    counts_iterations: bool


def _training_options(spec) -> dict:
    w = spec.workload
    return {"timeout": f"{w.timeout_s:g}", "iterations": w.iterations,
            "model_size": f"{w.model_size / 1e6:.6g}",  # the apps take millions
            "batch_size": w.batch_size, "lr": f"{w.lr:g}", "seed": spec.run.seed}


def _endpoints(fabric_map: dict, hosts) -> list[Endpoint]:
    ips = {h["name"]: h["ip"] for h in fabric_map["hosts"]}
    return [Endpoint(ips[h], f"{h}-eth0") for h in hosts]


def plan_ps(spec, fabric_map: dict, out_dir: str) -> list[Launch]:
    w = spec.workload
    placed = spec.placement()
    shards = len(placed.servers)
    hosts = placed.servers + placed.workers
    options = {"mode": w.mode, "shards": shards, **_training_options(spec),
               "staleness": w.staleness if w.mode == "ssp" else None,
               "backup_workers": w.backup_workers if w.mode == "backup" else None,
               # spec ranks count workers only; the PS app numbers its servers first
               "slowdown": [f"{shards + s.rank}:{s.factor:g}" for s in w.stragglers]}
    argvs = APP_COMMANDS["ps"](_endpoints(fabric_map, hosts), out_dir, RENDEZVOUS_PORT,
                               options)
    return [Launch(host, argv, rank, "server" if rank < shards else "worker",
                   rank >= shards)
            for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]


def plan_ring(spec, fabric_map: dict, out_dir: str) -> list[Launch]:
    w = spec.workload
    hosts = spec.placement().workers
    options = {"impl": w.impl, **_training_options(spec),
               "slowdown": [f"{s.rank}:{s.factor:g}" for s in w.stragglers]}
    argvs = APP_COMMANDS["ring"](_endpoints(fabric_map, hosts), out_dir, RENDEZVOUS_PORT,
                                 options)
    return [Launch(host, argv, rank, "ring", True)
            for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]


def plan_incast(spec, fabric_map: dict, out_dir: str) -> list[Launch]:
    """The receiver is the client (rank 0) that reads from every sender at once; the
    senders serve blocks (ranks 1..N). Servers start first so the client finds them."""
    w = spec.workload
    placed = spec.placement()
    hosts = (placed.servers[0],) + placed.workers
    options = {"block_size": w.block_bytes, "rounds": w.rounds,
               "timeout": f"{w.timeout_s:g}",
               "rto_min_ms": f"{w.rto_min_ms:g}" if w.rto_min_ms is not None else None}
    argvs = APP_COMMANDS["incast"](_endpoints(fabric_map, hosts), out_dir, INCAST_PORT,
                                   options)
    client = Launch(hosts[0], argvs[0], 0, "client", True)
    servers = [Launch(host, argv, rank, "incast-server", False)
               for rank, (host, argv) in enumerate(zip(hosts[1:], argvs[1:], strict=True),
                                                   start=1)]
    return servers + [client]


WORKLOADS = {"ps": plan_ps, "ring": plan_ring, "incast": plan_incast}


def expected_iterations(spec, launch: Launch) -> int:
    """Iteration (or round) lines a launch should log when it completes (progress only:
    in backup mode a straggler logs fewer)."""
    return spec.workload.rounds if spec.workload.kind == "incast" else spec.workload.iterations
