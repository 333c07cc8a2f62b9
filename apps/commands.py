"""Command lines of the apps' processes, one per rank, for whoever starts them.

The orchestrator (inside Mininet hosts) and `apps.local` (on loopback) both build their
argument lists here, so rank layout and options are decided in one place. Options are
data, e.g. straight from a spec table: {"mode": "ssp", "staleness": 2,
"slowdown": ["3:4"]} becomes `--mode ssp --staleness 2 --slowdown 3:4`; a list repeats
the option, True is a bare flag, None/False leave it out. Values are validated by the
app itself (argparse, exit status 2, message naming the option); the argument lists
never pass through a shell.

    argvs = WORKLOADS["ps"](hosts, out="/run/workers", port=29500,
                            options={"mode": "sync", "shards": 1, "iterations": 100})

`hosts[i]` is an `Endpoint(addr, iface)`: for "ps" and "ring" rank i runs on hosts[i] and
hosts[0] hosts the rendezvous (a PS job has shards + workers ranks, servers first); for
"incast" hosts[0] is the client and hosts[1:] the servers, listening on `port`.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, NamedTuple


class Endpoint(NamedTuple):
    addr: str
    iface: str | None = None


def option_args(options: dict[str, Any]) -> list[str]:
    """{"backup_workers": 1} -> ["--backup-workers", "1"] (see the module docstring)."""
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if v is None or v is False:
                continue
            out += [flag] if v is True else [flag, str(v)]
    return out


def _iface(host: Endpoint) -> list[str]:
    return ["--iface", host.iface] if host.iface else []


def ps_commands(hosts: list[Endpoint], out: str, port: int, options: dict[str, Any],
                python: str = sys.executable) -> list[list[str]]:
    """One argv per host: ranks 0..shards-1 servers, the rest workers."""
    shards = int(options.get("shards", 1))
    world = len(hosts)
    rest = option_args({k: v for k, v in options.items() if k != "shards"})
    return [[python, "-m", "incastlab.apps.ps",
             "--role", "server" if rank < shards else "worker", "--rank", str(rank),
             "--world-size", str(world), "--master", f"{hosts[0].addr}:{port}",
             *_iface(host), "--out", str(out), "--shards", str(shards), *rest]
            for rank, host in enumerate(hosts)]


def ring_commands(hosts: list[Endpoint], out: str, port: int, options: dict[str, Any],
                  python: str = sys.executable) -> list[list[str]]:
    """One argv per host: ranks 0..N-1 of the ring."""
    rest = option_args(options)
    return [[python, "-m", "incastlab.apps.ring", "--rank", str(rank),
             "--world-size", str(len(hosts)), "--master", f"{hosts[0].addr}:{port}",
             *_iface(host), "--out", str(out), *rest]
            for rank, host in enumerate(hosts)]


def incast_commands(hosts: list[Endpoint], out: str, port: int, options: dict[str, Any],
                    python: str = sys.executable) -> list[list[str]]:
    """argv of the client (rank 0, on hosts[0]) then of the servers (ranks 1..N).

    Server options (the client's block size, rounds, ... are client-only) are limited to
    `timeout`; everything else goes to the client.
    """
    servers = hosts[1:]
    client_opts = option_args(options)
    server_opts = option_args({k: v for k, v in options.items() if k == "timeout"})
    app = [python, "-m", "incastlab.apps.incast"]
    argvs = [app + ["--role", "client", "--rank", "0", *_iface(hosts[0]), "--out", str(out),
                    "--servers", ",".join(f"{h.addr}:{port}" for h in servers), *client_opts]]
    for rank, host in enumerate(servers, start=1):
        argvs.append(app + ["--role", "server", "--rank", str(rank), *_iface(host),
                            "--out", str(out), "--listen", f"{host.addr}:{port}",
                            *server_opts])
    return argvs



def _one_rank_per_host(module: str, hosts: list[Endpoint], out: str, port: int,
                       options: dict[str, Any], python: str) -> list[list[str]]:
    rest = option_args(options)
    return [[python, "-m", module, "--rank", str(rank), "--world-size", str(len(hosts)),
             "--master", f"{hosts[0].addr}:{port}", *_iface(host), "--out", str(out), *rest]
            for rank, host in enumerate(hosts)]


def pipeline_commands(hosts: list[Endpoint], out: str, port: int, options: dict[str, Any],
                      python: str = sys.executable) -> list[list[str]]:
    """One argv per host: rank i is pipeline stage i (hosts[0] holds the first layers)."""
    return _one_rank_per_host("incastlab.apps.pipeline", hosts, out, port, options, python)


def tensor_commands(hosts: list[Endpoint], out: str, port: int, options: dict[str, Any],
                    python: str = sys.executable) -> list[list[str]]:
    """One argv per host: rank i holds slice i of every tensor-parallel layer."""
    return _one_rank_per_host("incastlab.apps.tensor", hosts, out, port, options, python)


def moe_commands(hosts: list[Endpoint], out: str, port: int, options: dict[str, Any],
                 python: str = sys.executable) -> list[list[str]]:
    """One argv per host: rank e holds expert e (hosts[0] hosts the rendezvous)."""
    return _one_rank_per_host("incastlab.apps.moe", hosts, out, port, options, python)

Builder = Callable[..., list[list[str]]]
WORKLOADS: dict[str, Builder] = {
    "ps": ps_commands,
    "ring": ring_commands,
    "incast": incast_commands,
    "pipeline": pipeline_commands,
    "tensor": tensor_commands,
    "moe": moe_commands,
}
