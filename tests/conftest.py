"""Shared test fixtures. Root tests (marker ``root``) need real OVS and Mininet; they
are skipped, with the reason shown, when not run as root, and when run by a
pytest-xdist worker: a machine has one run lock and one set of switch names, so root
tests run one at a time (the unit tier runs on every core, the root tier without -n)."""
import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        reason = "root tests run one at a time (one run lock per machine): run them without -n"
    elif os.geteuid() != 0:
        reason = "needs root (real Open vSwitch and Mininet)"
    else:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
