"""Helpers for root tests on real fabrics (imported by tests/test_*_root.py)."""
from __future__ import annotations

import subprocess

from incastlab import iperf
from incastlab.apps.local import free_port

__all__ = ["free_port", "iperf3_pair", "iperf3_result", "ovs_bridges"]

iperf3_pair = iperf.pair
iperf3_result = iperf.result


def ovs_bridges() -> set[str]:
    out = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())
