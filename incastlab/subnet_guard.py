"""A safety net for the emulated subnet: while a run is up, the root namespace routes
``naming.SUBNET`` (10.0.0.0/16) to ``unreachable``, so that no bug (a tool started in
the wrong namespace, a mistyped address) can send emulated traffic out of the machine
through its default gateway. The emulated hosts live in their own namespaces with their
own routes; the switches do not route IP; the controller talks on 127.0.0.1: nothing of
the lab uses the root namespace's route to the subnet.

The route carries protocol number ROUTE_PROTO, which marks it as ours: clean-up removes
only a route with that mark, and a route to the subnet that the machine already has
(its own LAN, say) is left alone — then no guard is installed, and the run says so.
More specific routes of the machine (a /24 inside 10.0.0.0/16) keep precedence.
"""
from __future__ import annotations

import subprocess

from incastlab.topologies.naming import SUBNET

ROUTE_PROTO = "222"  # a routing-protocol number no standard daemon uses (rt_protos)


def route_argv(action: str) -> list[str]:
    """``ip route`` argument list that adds or deletes our guard route (pure)."""
    if action not in ("add", "del"):
        raise ValueError(action)
    return ["ip", "route", action, "unreachable", SUBNET, "proto", ROUTE_PROTO]


def _ip(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)


def present() -> bool:
    """Our guard route is in the root namespace's main table."""
    out = _ip(["ip", "route", "show", "exact", SUBNET, "proto", ROUTE_PROTO]).stdout
    return "unreachable" in out


def install() -> str | None:
    """Add the guard route; None when it is in place (added now or already there),
    else why not (a notice for the manifest: the run can go on without it)."""
    if present():
        return None
    out = _ip(route_argv("add"))
    if out.returncode == 0:
        return None
    theirs = _ip(["ip", "route", "show", "exact", SUBNET]).stdout.strip()
    return (f"no unreachable route for the emulated subnet {SUBNET} in the root namespace "
            f"({out.stderr.strip() or 'ip route failed'}"
            + (f"; the machine already routes it: {theirs}" if theirs else "") + ")")


def remove() -> bool:
    """Delete our guard route if it is there (never a route without our mark); True if
    one was removed."""
    if not present():
        return False
    return _ip(route_argv("del")).returncode == 0
