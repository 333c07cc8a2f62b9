"""`iperf` and `iperfudp` typed into `incastlab cli` return their result (Mininet's own
iperf waits forever for a line Debian's iperf 2 never prints), measured on the shaped
fabric: a TCP result can be at most the host links' rate, a UDP one at most its own."""
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.root

HOST_MBPS = 20.0


def test_iperf_in_the_cli_returns_its_result():
    commands = "iperf h1 h4\niperfudp 5M h1 h4\niperf h1 h99\nexit\n"
    out = subprocess.run([sys.executable, "-m", "incastlab.cli", "cli", "--host-bw",
                          f"{HOST_MBPS:g}"], input=commands, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    results = re.findall(r"\*\*\* Results: \[(.*)\]", out.stdout)
    assert len(results) == 2, out.stdout[-2000:]
    tcp = [float(v) for v in re.findall(r"'([\d.]+) Mbits/sec'", results[0])]
    udp = [float(v) for v in re.findall(r"'([\d.]+) Mbits/sec'", results[1])]
    # server (received) then client (sent); what arrives never beats the shaped link, and
    # iperf3's goodput is payload only (headers: 1448 of 1514 bytes on the wire)
    assert len(tcp) == 2 and 0 < tcp[0] <= HOST_MBPS * 1448 / 1514 * 1.01, tcp
    assert results[1].startswith("'5M'") and len(udp) == 2 and 0 < udp[0] <= 5.0 * 1.01
    assert "*** node 'h99' is not a host of the network" in out.stdout
