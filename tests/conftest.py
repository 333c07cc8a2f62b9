"""Shared test fixtures. Root tests (marker ``root``) need real OVS and Mininet; they
are skipped, with the reason shown, when not run as root."""
import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root (real Open vSwitch and Mininet)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
