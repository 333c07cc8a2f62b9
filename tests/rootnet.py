"""Helpers for root tests on real fabrics (imported by tests/test_*_root.py)."""
from __future__ import annotations

import json
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ovs_bridges() -> set[str]:
    out = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def iperf3_pair(fabric, client: str, server: str, seconds: float, port: int = 5201,
                extra: list[str] | None = None):
    """Start a one-shot iperf3 server in ``server`` and a client in ``client``;
    return (server_proc, client_proc). The client prints JSON on stdout."""
    dst_ip = fabric.net[server].IP()
    srv = fabric.popen(server, ["iperf3", "-s", "-1", "-p", str(port)], f"iperf3 -s {server}",
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # wait until the server listens
        if str(port) in fabric.net[server].cmd(f"ss -ltnH 'sport = :{port}'"):
            break
        time.sleep(0.05)
    cli = fabric.popen(client, ["iperf3", "-c", dst_ip, "-p", str(port), "-t", str(seconds),
                                "-J", *(extra or [])], f"iperf3 -c {client}",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return srv, cli


def iperf3_result(cli, timeout: float) -> dict:
    out, err = cli.communicate(timeout=timeout)
    assert cli.returncode == 0, err.decode() + out.decode()[-2000:]
    return json.loads(out)
