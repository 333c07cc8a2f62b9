"""The routing policies by name (one registry dict) and the validated settings.

No os-ken import: the launcher validates every option here before os-ken is
imported or a socket is opened, and unit tests check the refusals.
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass

from incastlab.topologies.fabricmap import FabricError, FabricMap
from incastlab.controller.ovs_ext import DEFAULT_HASH_FIELDS, HASH_FIELDS


@dataclass(frozen=True)
class PolicySpec:
    module: str            # os-ken app module, given to AppManager.run_apps
    summary: str
    options: frozenset     # policy-specific options it accepts (argparse dest names)
    poll_range: tuple[float, float] = (0.01, 60.0)  # allowed --poll-interval, seconds
    # The user's own apps (--app, Ryu-style ``ryu.*`` imports allowed) run beside
    # ``module``, which then only observes (readiness, port statistics): see observer.py.
    user_apps: bool = False
    # The switches connect to the user's --controller; ``module`` only observes, from a
    # second connection in the slave role (no packet-ins, no table changes).
    external: bool = False
    # The hosts label their packets' paths (DSCP) with incastlab/bpf/path_label.bpf.c in
    # this mode ("spray" or "flowlet"), installed by the runner; None: no labeller.
    host_labels: str | None = None


POLICIES = {
    "single": PolicySpec("incastlab.controller.single",
                         "every inter-leaf flow crosses one fixed spine (baseline)",
                         frozenset({"spine"})),
    "ecmp": PolicySpec("incastlab.controller.ecmp",
                       "leaves hash flows over all uplinks with an OpenFlow select group",
                       frozenset({"hash_fields"})),
    "spread": PolicySpec("incastlab.controller.spread",
                         "new flows go round-robin over the spines",
                         frozenset({"idle_timeout"})),
    "adaptive": PolicySpec("incastlab.controller.adaptive",
                           "each new flow takes the least-loaded spine of the last window",
                           frozenset({"idle_timeout"}), poll_range=(0.1, 0.5)),
    "spray": PolicySpec("incastlab.controller.spray",
                        "every packet takes the next spine in turn (hosts label packets, "
                        "leaves route the label)",
                        frozenset(), host_labels="spray"),
    "flowlet": PolicySpec("incastlab.controller.flowlet",
                          "a flow moves to the next spine after a gap of "
                          "routing.flowlet_gap_us (flowlet switching)",
                          frozenset(), host_labels="flowlet"),
    "app": PolicySpec("incastlab.controller.observer",
                      "your own os-ken or Ryu app(s) (--app FILE.py or MODULE, repeatable)",
                      frozenset({"apps"}), user_apps=True),
    "external": PolicySpec("incastlab.controller.observer",
                           "a controller you run yourself on --controller 127.0.0.1:PORT "
                           "(ours only observes, as an OpenFlow slave)",
                           frozenset({"controller"}), external=True),
}

DEFAULT_POLL_INTERVAL = 0.5  # seconds
DEFAULT_IDLE_TIMEOUT = 10    # seconds an exact-match flow entry lives without packets
POLICY_OPTIONS = {"spine": "--spine", "idle_timeout": "--idle-timeout",
                  "hash_fields": "--hash-fields", "apps": "--app", "controller": "--controller"}
DEFAULT_EXTERNAL = "127.0.0.1:6653"
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def parse_controller(text) -> tuple[str, int]:
    """``"127.0.0.1:6653"`` -> ("127.0.0.1", 6653). Only loopback addresses (127.0.0.0/8)
    are accepted: packet-ins carry the emulated hosts' packets, which must not leave
    the machine. Raises OptionError naming what is wrong."""
    what = f"must be 127.x.y.z:PORT (a controller on this machine's loopback), got {text!r}"
    if not isinstance(text, str) or text.count(":") != 1:
        raise OptionError(f"--controller {what}")
    host, _, port = text.partition(":")
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        raise OptionError(f"--controller {what}") from None
    if not address.is_loopback or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise OptionError(f"--controller {what}")
    return host, int(port)


def check_apps(value) -> str | None:
    """Field check of ``routing.app``: a list of apps (see check_app); None when fine."""
    if not isinstance(value, list):
        return f"{value!r} is not a list of .py files or module names"
    problems = [p for p in (check_app(a) for a in value) if p]
    return "; ".join(problems) or None


def check_controller(value) -> str | None:
    """Field check of ``routing.controller`` (see parse_controller); None when fine."""
    try:
        parse_controller(value)
    except OptionError:
        return f"{value!r} is not 127.x.y.z:PORT (a controller on this machine's loopback)"
    return None


def check_app(app) -> str | None:
    """None when ``app`` names an app os-ken can load: an existing ``.py`` file
    (relative to the working directory) or a dotted module name; else the problem."""
    if not isinstance(app, str) or not app.strip():
        return f"{app!r} is not a .py file or a dotted module name"
    if app.endswith(".py"):
        return None if os.path.isfile(app) else f"{app!r}: no such file"
    if _MODULE_NAME.fullmatch(app):
        return None
    return f"{app!r} is not a .py file or a dotted module name"


class OptionError(ValueError):
    """A controller option is refused; the message names it and the allowed values."""


@dataclass(frozen=True)
class Settings:
    policy: str
    port: int
    fabric_path: str
    fabric: FabricMap
    out_dir: str
    poll_interval: float = DEFAULT_POLL_INTERVAL  # seconds
    spine: int = 1                                # single: the spine every flow crosses
    idle_timeout: int = DEFAULT_IDLE_TIMEOUT      # reactive policies, seconds
    hash_fields: tuple = DEFAULT_HASH_FIELDS      # ecmp: fields OVS hashes (OpenFlow 1.5)
    apps: tuple = ()                              # app: files (absolute) or module names


def build_settings(policy: str, port: int, fabric_path: str, out_dir: str,
                   poll_interval: float | None = None, spine: int | None = None,
                   idle_timeout: int | None = None, hash_fields: str | None = None,
                   fabric: FabricMap | None = None, apps: list[str] | None = None,
                   controller: str | None = None) -> Settings:
    """Validate everything and return Settings, or raise OptionError.

    ``fabric`` may be given directly (tests); otherwise ``fabric_path`` is read.
    Options that do not belong to the policy are refused, not ignored.
    ``hash_fields`` is a comma-separated list of field names (ovs_ext.HASH_FIELDS).
    ``apps`` (policy app): .py files or module names, files made absolute.
    ``controller`` (policy external): the user's controller, 127.x.y.z:PORT.
    """
    if policy not in POLICIES:
        raise OptionError(f"--policy {policy!r} is unknown; allowed: {', '.join(POLICIES)}")
    spec = POLICIES[policy]
    given = {"spine": spine, "idle_timeout": idle_timeout, "hash_fields": hash_fields,
             "apps": apps or None, "controller": controller}
    for name, value in given.items():
        if value is not None and name not in spec.options:
            users = [p for p, s in POLICIES.items() if name in s.options]
            raise OptionError(f"{POLICY_OPTIONS[name]} applies only to policy "
                              f"{' or '.join(users)}, not {policy!r}")
    if spec.external:
        user_host, user_port = parse_controller(controller or DEFAULT_EXTERNAL)
        if user_port == port:
            raise OptionError(f"--controller {controller or DEFAULT_EXTERNAL} is on our own "
                              f"--port {port}: give ours another port")
    if spec.user_apps:
        if not apps:
            raise OptionError(f"--policy {policy} needs at least one --app (a .py file or "
                              "a module name)")
        for app in apps:
            problem = check_app(app)
            if problem:
                raise OptionError(f"--app {problem}")
        apps = [os.path.abspath(a) if a.endswith(".py") else a for a in apps]
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise OptionError(f"--port must be an integer from 1 to 65535, got {port!r}")
    low, high = spec.poll_range
    if poll_interval is None:
        poll_interval = min(max(DEFAULT_POLL_INTERVAL, low), high)
    if not isinstance(poll_interval, (int, float)) or not low <= poll_interval <= high:
        raise OptionError(f"--poll-interval must be from {low} to {high} seconds for "
                          f"policy {policy!r}, got {poll_interval!r}")
    if fabric is None:
        try:
            fabric = FabricMap.load(fabric_path)
        except FabricError as e:
            raise OptionError(f"--fabric: {e}") from None
    if spine is None:
        spine = 1
    if policy == "single" and spine not in fabric.spine_indices:
        allowed = fabric.spine_indices or "none (the fabric has no spine)"
        if fabric.spines or spine != 1:
            raise OptionError(f"--spine must be one of {allowed}, got {spine!r}")
    if idle_timeout is None:
        idle_timeout = DEFAULT_IDLE_TIMEOUT
    if isinstance(idle_timeout, bool) or not isinstance(idle_timeout, int) \
            or not 1 <= idle_timeout <= 65535:
        raise OptionError(f"--idle-timeout must be an integer from 1 to 65535 seconds, "
                          f"got {idle_timeout!r}")
    fields = DEFAULT_HASH_FIELDS
    if hash_fields is not None:
        fields = tuple(f.strip() for f in str(hash_fields).split(",") if f.strip())
        unknown = [f for f in fields if f not in HASH_FIELDS]
        if unknown or not fields or len(set(fields)) != len(fields):
            raise OptionError(f"--hash-fields must be distinct names from "
                              f"{', '.join(HASH_FIELDS)}; got {hash_fields!r}")
    if not os.path.isdir(out_dir):
        raise OptionError(f"--out {out_dir!r} must be an existing directory")
    return Settings(policy, port, fabric_path, fabric, out_dir, float(poll_interval),
                    spine, idle_timeout, fields, tuple(apps or ()))
