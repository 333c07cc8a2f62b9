"""Validate a spec without running anything (no root, nothing touched): print it
resolved (defaults and --set applied, as a run directory's spec.toml would hold it), the
runs it asks for (a sweep's points × repetitions) and, for each distinct point, which
hosts are servers and which are workers in rank order. An invalid spec exits 2 with every
problem, each naming its field. Checks that need the machine (netem for a delay, free
ports, Open vSwitch) are preflight's: `incastlab preflight`."""
from __future__ import annotations

import sys

HELP = "validate a spec: print it resolved, its runs and its host placement"


def add_arguments(p):
    p.add_argument("spec", nargs="?", default=None,
                   help="spec file (TOML); default: all defaults (see specs/)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="TABLE.FIELD=VALUE",
                   help="override a spec field, e.g. --set routing.policy=ecmp "
                        "(value in TOML syntax; repeatable)")


def placement_lines(placement, kind: str) -> list[str]:
    """Human-readable host roles of one run (pure)."""
    servers = " ".join(placement.servers) or "none"
    role = {"ps": "parameter servers", "incast": "receiver"}.get(kind, "servers")
    workers = " ".join(f"{rank}:{host}" for rank, host in enumerate(placement.workers))
    return [f"{role}: {servers}", f"workers (rank:host): {workers}"]


def run(args) -> int:
    from incastlab.spec import SpecError, expand_sweep, load_spec

    try:
        spec = load_spec(args.spec, args.overrides, allow_sweep=True)
        points = expand_sweep(spec)
        placed = [(label, point, point.placement()) for label, point in points]
    except SpecError as exc:
        print(f"incastlab check: {exc}", file=sys.stderr)
        return 2
    print(spec.to_toml(), end="")
    print(f"\n# {len(points)} run{'s' if len(points) != 1 else ''}"
          f"{' (a sweep: incastlab sweep)' if spec.is_sweep else ' (incastlab run)'}")
    seen: dict[tuple, str] = {}
    for label, point, placement in placed:
        key = (point.workload.kind, placement)
        print(f"#   {label}")
        if key in seen:
            print(f"#     hosts as in {seen[key]}")
            continue
        seen[key] = label
        for line in placement_lines(placement, point.workload.kind):
            print(f"#     {line}")
    return 0
