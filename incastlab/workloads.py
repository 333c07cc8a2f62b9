"""Which programs a workload starts in which hosts: one planner per workload kind,
looked up in ``WORKLOADS``. Planners are pure (spec + fabric map in, launches out), so
the command lines are unit-tested without root."""
from __future__ import annotations

import sys
from dataclasses import dataclass

RENDEZVOUS_PORT = 29500
INCAST_PORT = 5001


@dataclass(frozen=True)
class Launch:
    host: str
    argv: list[str]
    rank: int
    role: str          # server / worker / ring / client / incast-server
    counts_iterations: bool


def _ips(fabric_map: dict) -> dict[str, str]:
    return {h["name"]: h["ip"] for h in fabric_map["hosts"]}


def _app(name: str) -> list[str]:
    return [sys.executable, "-m", f"incastlab.apps.{name}"]


def _common(spec, out_dir: str, iface: str) -> list[str]:
    w = spec.workload
    return ["--out", out_dir, "--iface", iface, "--timeout", f"{w.timeout_s:g}"]


def _training(spec) -> list[str]:
    w = spec.workload
    return ["--iterations", str(w.iterations), "--model-size", f"{w.model_size / 1e6:.6g}",
            "--batch-size", str(w.batch_size), "--lr", f"{w.lr:g}",
            "--seed", str(spec.run.seed)]


def plan_ps(spec, fabric_map: dict, out_dir: str) -> list[Launch]:
    w = spec.workload
    placed = spec.placement()
    ips = _ips(fabric_map)
    shards = len(placed.servers)
    world = shards + len(placed.workers)
    master = f"{ips[placed.servers[0]]}:{RENDEZVOUS_PORT}"
    mode = ["--mode", w.mode, "--shards", str(shards)]
    if w.mode == "ssp":
        mode += ["--staleness", str(w.staleness)]
    if w.mode == "backup":
        mode += ["--backup-workers", str(w.backup_workers)]
    slow = [a for s in w.stragglers for a in ("--slowdown", f"{shards + s.rank}:{s.factor:g}")]
    launches = []
    for rank, host in enumerate(placed.servers + placed.workers):
        role = "server" if rank < shards else "worker"
        argv = _app("ps") + ["--role", role, "--rank", str(rank), "--world-size", str(world),
                             "--master", master, *_common(spec, out_dir, f"{host}-eth0"),
                             *_training(spec), *mode, *slow]
        launches.append(Launch(host, argv, rank, role, role == "worker"))
    return launches


def plan_ring(spec, fabric_map: dict, out_dir: str) -> list[Launch]:
    w = spec.workload
    placed = spec.placement()
    ips = _ips(fabric_map)
    world = len(placed.workers)
    master = f"{ips[placed.workers[0]]}:{RENDEZVOUS_PORT}"
    slow = [a for s in w.stragglers for a in ("--slowdown", f"{s.rank}:{s.factor:g}")]
    return [Launch(host, _app("ring") + ["--rank", str(rank), "--world-size", str(world),
                                         "--master", master,
                                         *_common(spec, out_dir, f"{host}-eth0"),
                                         *_training(spec), "--impl", w.impl, *slow],
                   rank, "ring", True)
            for rank, host in enumerate(placed.workers)]


def plan_incast(spec, fabric_map: dict, out_dir: str) -> list[Launch]:
    """Senders serve blocks (ranks 1..N); the receiver is the client (rank 0) that reads
    from all of them at once. Servers come first so the client finds them listening."""
    w = spec.workload
    placed = spec.placement()
    ips = _ips(fabric_map)
    receiver = placed.servers[0]
    launches = []
    for n, host in enumerate(placed.workers, start=1):
        argv = _app("incast") + ["--role", "server", "--rank", str(n), "--listen",
                                 f"{ips[host]}:{INCAST_PORT}", "--out", out_dir,
                                 "--timeout", f"{w.timeout_s:g}", "--iface", f"{host}-eth0"]
        launches.append(Launch(host, argv, n, "incast-server", False))
    servers = ",".join(f"{ips[h]}:{INCAST_PORT}" for h in placed.workers)
    argv = _app("incast") + ["--role", "client", "--rank", "0", "--servers", servers,
                             "--block-size", str(w.block_bytes), "--rounds", str(w.rounds),
                             "--out", out_dir, "--timeout", f"{w.timeout_s:g}",
                             "--iface", f"{receiver}-eth0"]
    if w.rto_min_ms is not None:
        argv += ["--rto-min-ms", f"{w.rto_min_ms:g}"]
    launches.append(Launch(receiver, argv, 0, "client", True))
    return launches


WORKLOADS = {"ps": plan_ps, "ring": plan_ring, "incast": plan_incast}


def expected_iterations(spec, launch: Launch) -> int:
    """Iteration (or round) lines a launch should log when it completes."""
    return spec.workload.rounds if spec.workload.kind == "incast" else spec.workload.iterations
