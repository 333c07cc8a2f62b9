"""Root tier: while a fabric is up the root namespace cannot reach the emulated subnet
(an unreachable route, incastlab/subnet_guard.py); teardown and `incastlab clean` take
the route away again, and the hosts never notice it."""
from __future__ import annotations

import subprocess

import pytest

from incastlab import subnet_guard
from incastlab.clean import clean
from incastlab.fabric import Fabric
from incastlab.topologies.leafspine import LeafSpineTopo
from tests.rootnet import free_port

pytestmark = pytest.mark.root


def _route_get(addr: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "route", "get", addr], capture_output=True, text=True)


def test_root_namespace_cannot_reach_the_subnet_while_a_run_is_up(tmp_path):
    before = _route_get("10.0.1.1")
    assert not subnet_guard.present()
    with Fabric(LeafSpineTopo(2, 2, 1), run_dir=tmp_path, controller_port=free_port()) as fab:
        assert subnet_guard.present()
        during = _route_get("10.0.1.1")  # what the kernel would do with such a packet
        assert during.returncode != 0 and "no route to host" in during.stderr.lower(), during
        # the hosts route in their own namespaces: untouched
        assert fab.net.ping([fab.net["h1"], fab.net["h2"]], timeout="2") == 0
    assert not subnet_guard.present()
    assert _route_get("10.0.1.1").stdout == before.stdout  # as it was


def test_clean_removes_a_crashed_runs_guard_route():
    assert subnet_guard.install() is None and subnet_guard.present()
    removed, skipped = clean()
    assert not skipped and f"route unreachable {subnet_guard.SUBNET}" in removed
    assert not subnet_guard.present()
    assert clean()[0] == []  # idempotent
