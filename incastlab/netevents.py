"""Network events: a link or a whole switch fails and comes back.

``link_down`` / ``link_up`` (``link = "lf1-eth3"`` or ``link = ["lf1", "sp2"]``): the
switch ends of the link are set administratively down (``ip link set dev X down``),
as Mininet's ``configLinkStatus`` does, except that a host's own interface is left
alone. The host's veth then loses its carrier, exactly what a pulled cable looks like
to it, while its addresses and routes (the per-route ``rto_min`` among them) survive:
setting a host interface down makes the kernel flush its routes, which a real cable
cut never does. Each switch port that goes down (and the far end of a leaf-spine link,
whose carrier drops) makes Open vSwitch send the controller an OFPPortStatus.

``switch_down`` / ``switch_up`` (``switch = "sp1"``): a dead switch forwards nothing
and talks to nobody, so every port it has is set down (its neighbours lose carrier and
report port-status down, which is how the controller learns what to route around) and
then its OpenFlow connection is removed (``ovs-vsctl del-controller``: the controller
sees the switch disconnect). The bridge itself stays, so ``switch_up``
brings the same switch back: ports up, the controller targets it had put back; it
reconnects and the controller installs its routes afresh.

Every undo is idempotent and restores the fabric's normal state: links up, the
controller targets the switch had before.
"""
from __future__ import annotations

import subprocess

from incastlab.events import Event, EventContext, Scene, register_action

TIMEOUT_S = 10.0


def _run(argv: list[str]) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}): "
                           f"{(out.stderr or out.stdout).strip()[:300]}")


def set_iface(iface: str, state: str) -> None:
    """Switch ports live in the root namespace (Mininet's OVS switches)."""
    _run(["ip", "link", "set", "dev", iface, state])


# --- link_down / link_up -----------------------------------------------------------------

def _link_fields(ev: Event, scene: Scene) -> list[str]:
    if "link" not in ev.params:
        return ["link: missing; give an interface like lf1-eth3 or two linked nodes like "
                "[\"lf1\", \"sp2\"]"]
    _pair, problem = scene.link_of(ev["link"])
    return [f"link: {problem}"] if problem else []


def _link_target(role: str):
    def target(ev: Event, scene: Scene):
        pair, _ = scene.link_of(ev["link"])
        return (("link", "-".join(pair)), role) if pair else None
    return target


def link_ends(ctx: EventContext, value) -> list[str]:
    """The switch-side interfaces of a link (``value`` as the spec gives it)."""
    fmap = ctx.fmap
    if isinstance(value, str):
        egress = fmap.link_of_iface(value)
        if egress is None:
            raise ValueError(f"{value!r} is not an interface of this fabric")
        nodes = (egress.node, egress.peer)
    else:
        nodes = tuple(value)
    ifaces = []
    for node, peer in (nodes, nodes[::-1]):
        if fmap.switch_named(node) is not None:
            iface = fmap.egress_iface(node, peer)
            if iface is None:
                raise ValueError(f"{node} and {peer} are not linked")
            ifaces.append(iface)
    return ifaces


def link_down(ctx: EventContext, ev: Event) -> dict:
    ifaces = link_ends(ctx, ev["link"])
    for iface in ifaces:
        set_iface(iface, "down")
    return {"down": ifaces}


def link_up(ctx: EventContext, ev: Event) -> dict:
    ifaces = link_ends(ctx, ev["link"])
    for iface in ifaces:
        set_iface(iface, "up")
    return {"up": ifaces}


register_action(
    "link_down", _link_fields, link_down, link_up,
    fields={"link": "the link: an interface (either end) or its two nodes"},
    doc="the link fails: its switch ports go down (a host keeps its own interface, "
        "which loses carrier)", target=_link_target("start"))
register_action(
    "link_up", _link_fields, link_up, None,
    fields={"link": "the link: an interface (either end) or its two nodes"},
    doc="the link comes back", target=_link_target("end"))


# --- switch_down / switch_up -------------------------------------------------------------

def _switch_fields(ev: Event, scene: Scene) -> list[str]:
    name = ev.get("switch")
    if name is None:
        return ["switch: missing; give a switch name like sp1 or lf2"]
    if not isinstance(name, str) or name not in scene.switches:
        names = ", ".join(scene.switches)
        return [f"switch: {name!r} is not a switch of this fabric ({names})"]
    return []


def _switch_target(role: str):
    def target(ev: Event, scene: Scene):
        return (("switch", ev["switch"]), role)
    return target


def switch_ports(ctx: EventContext, name: str) -> list[str]:
    return sorted(e.iface for e in ctx.fmap.egresses() if e.node == name)


def controller_targets(bridge: str) -> list[str]:
    out = subprocess.run(["ovs-vsctl", "get-controller", bridge], capture_output=True,
                         text=True, timeout=TIMEOUT_S)
    if out.returncode != 0:
        raise RuntimeError(f"ovs-vsctl get-controller {bridge}: {out.stderr.strip()}")
    return out.stdout.split()


def switch_down(ctx: EventContext, ev: Event) -> dict:
    name = ev["switch"]
    store = ctx.store_for(ev)
    # Remember the targets before removing them: undo puts these back.
    store["switch"] = name
    store["controllers"] = controller_targets(name)
    # The data plane first: the neighbours lose carrier at once, as they would; the
    # control connection after (ovs-vsctl takes ~0.2 s here, which would otherwise
    # delay what the neighbours see and the controller reacts to).
    ports = switch_ports(ctx, name)
    store["ports"] = ports
    for iface in ports:
        set_iface(iface, "down")
    _run(["ovs-vsctl", "del-controller", name])
    return {"controllers_removed": store["controllers"], "down": ports}


def switch_up(ctx: EventContext, ev: Event) -> dict:
    name = ev["switch"]
    ports = switch_ports(ctx, name)
    for iface in ports:
        set_iface(iface, "up")
    # switch_up as an event of its own: the targets of its switch_down's store
    targets = next((s["controllers"] for s in ctx.store.values()
                    if s.get("switch") == name and s.get("controllers")), None)
    store = ctx.store.get(ev.index, {})
    targets = store.get("controllers") or targets or _default_targets(ctx)
    if targets and set(controller_targets(name)) != set(targets):
        _run(["ovs-vsctl", "set-controller", name, *targets])
    return {"up": ports, "controllers": targets}


def _default_targets(ctx: EventContext) -> list[str]:
    """The fabric's own controller targets (Mininet's RemoteController: tcp:IP:PORT)."""
    from incastlab.fabric import LOCALHOST

    fab = ctx.fabric
    targets = [f"tcp:{LOCALHOST}:{fab.controller_port}"]
    if getattr(fab, "external", None):
        host, port = fab.external
        targets.append(f"tcp:{host}:{port}")
    return targets


register_action(
    "switch_down", _switch_fields, switch_down, switch_up,
    fields={"switch": "the switch, e.g. sp1 or lf2"},
    doc="the switch dies: its controller connection is cut and every port goes down",
    target=_switch_target("start"))
register_action(
    "switch_up", _switch_fields, switch_up, None,
    fields={"switch": "the switch, e.g. sp1 or lf2"},
    doc="the switch comes back and reconnects to the controller",
    target=_switch_target("end"))
