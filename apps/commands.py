"""The shared parts of the apps' command lines, for whoever starts their processes.

Each job kind builds its own argv (incastlab/jobs/<kind>.py) from these helpers, so rank
layout and the mapping of options are decided once. Options are data, e.g. straight
from a spec table: {"mode": "ssp", "staleness": 2, "slowdown": ["3:4"]} becomes
`--mode ssp --staleness 2 --slowdown 3:4`; a list repeats the option, True is a bare
flag, None/False leave it out. Values are validated by the app itself (argparse, exit
status 2, message naming the option); the argument lists never pass through a shell.

    argvs = one_rank_per_host("incastlab.apps.tensor", hosts, out="/run/workers",
                              port=29500, options={"iterations": 100})

`hosts[i]` is an `Endpoint(addr, iface)`: rank i runs on hosts[i] and hosts[0] hosts the
rendezvous at `port`.
"""
from __future__ import annotations

import sys
from typing import Any, NamedTuple

__all__ = ["Endpoint", "iface_args", "one_rank_per_host", "option_args", "rank_args"]


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


def iface_args(host: Endpoint) -> list[str]:
    """`--iface NAME` when the host names the interface gloo must use, else nothing."""
    return ["--iface", host.iface] if host.iface else []


def rank_args(rank: int, hosts: list[Endpoint], port: int) -> list[str]:
    """`--rank R --world-size N --master ADDR:PORT --iface ...` of rank R of a job whose
    rendezvous is on hosts[0]."""
    return ["--rank", str(rank), "--world-size", str(len(hosts)),
            "--master", f"{hosts[0].addr}:{port}", *iface_args(hosts[rank])]


def one_rank_per_host(module: str, hosts: list[Endpoint], out: str, port: int,
                      options: dict[str, Any], python: str = sys.executable
                      ) -> list[list[str]]:
    """One argv per host, `python -m module`: rank i on hosts[i], every rank with the
    same options."""
    rest = option_args(options)
    return [[python, "-m", module, *rank_args(rank, hosts, port), "--out", str(out), *rest]
            for rank in range(len(hosts))]
