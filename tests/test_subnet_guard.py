"""The guard route's command lines (rootless; the root tier is test_subnet_guard_root.py)."""
import pytest


def test_subnet_guard_route_is_marked_as_ours():
    from incastlab import subnet_guard

    add = subnet_guard.route_argv("add")
    assert add == ["ip", "route", "add", "unreachable", "10.0.0.0/16", "proto", "222"]
    assert subnet_guard.route_argv("del")[2] == "del"
    with pytest.raises(ValueError):
        subnet_guard.route_argv("replace")
