"""iperf3 between emulated hosts of a running Fabric: the reference TCP traffic of the
fabric benchmarks and root tests (a server, then a client that prints JSON).

Every process is started with ``Fabric.popen`` (recorded, its own process group), so a
run that fails midway still tears it down.
"""
from __future__ import annotations

import json
import subprocess
import time


def start_server(fabric, host: str, port: int = 5201, wait_s: float = 5.0):
    """A one-shot iperf3 server in ``host``; returns once it listens (or after wait_s)."""
    srv = fabric.popen(host, ["iperf3", "-s", "-1", "-p", str(port)], f"iperf3 -s {host}",
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if str(port) in fabric.net[host].cmd(f"ss -ltnH 'sport = :{port}'"):
            break
        time.sleep(0.05)
    return srv


def start_client(fabric, client: str, server: str, seconds: float, port: int = 5201,
                 extra: list[str] | None = None):
    """An iperf3 client in ``client`` sending to ``server`` for ``seconds``; JSON on stdout
    (read it with `result`)."""
    return fabric.popen(client, ["iperf3", "-c", fabric.net[server].IP(), "-p", str(port),
                                 "-t", f"{seconds:g}", "-J", *(extra or [])],
                        f"iperf3 -c {client}", stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def pair(fabric, client: str, server: str, seconds: float, port: int = 5201,
         extra: list[str] | None = None):
    """Start a server in ``server`` and a client in ``client``; return (server, client)."""
    srv = start_server(fabric, server, port)
    return srv, start_client(fabric, client, server, seconds, port, extra)


def result(cli, timeout: float) -> dict:
    """The client's JSON report; RuntimeError if it failed or reported an error."""
    out, err = cli.communicate(timeout=timeout)
    if cli.returncode != 0:
        raise RuntimeError(f"iperf3 exited with {cli.returncode}: "
                           f"{err.decode()}{out.decode()[-2000:]}")
    report = json.loads(out)
    if "error" in report:
        raise RuntimeError(f"iperf3: {report['error']}")
    return report
