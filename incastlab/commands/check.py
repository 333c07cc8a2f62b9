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


RANKS_NOTE = ("ranks are torch.distributed's as the job launches them, servers first: "
              "workload.stragglers[].rank and an event's rank name them")


def placement_lines(placement, kind: str) -> list[str]:
    """Human-readable host roles of one run (pure), each host with its rank
    (``Placement.ranks``: the one numbering of logs, report and trace)."""
    role = {"ps": "parameter servers", "incast": "receiver"}.get(kind, "servers")
    ranked = [f"{rank}:{host}" for rank, host in enumerate(placement.ranks)]
    k = len(placement.servers)
    servers = f"{role} (rank:host): {' '.join(ranked[:k])}" if k else f"{role}: none"
    return [servers, f"workers (rank:host): {' '.join(ranked[k:])}"]


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
    how = " (a sweep: incastlab sweep)" if spec.is_sweep or spec.jobs else " (incastlab run)"
    print(f"\n# {len(points)} run{'s' if len(points) != 1 else ''}{how}")
    if spec.jobs:
        return _jobs(spec, points)
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
    print(f"# {RANKS_NOTE}")
    return 0


def _jobs(spec, points) -> int:
    """Several jobs (incastlab.multijob): each job's hosts; the sweep also runs each job
    alone on the same hosts, `incastlab run` runs them together."""
    from incastlab import multijob

    print(f"#   {', '.join(label for label, _ in points)}: `incastlab sweep` runs them "
          "all; `incastlab run` the jobs together")
    for i, (entry, placement) in enumerate(zip(spec.jobs, multijob.placements(spec),
                                               strict=True)):
        kind = entry.workload.kind
        offset = f", starting {entry.start_offset_s:g} s in" if entry.start_offset_s else ""
        print(f"#   jobs[{i}] ({kind}{offset}):")
        for line in placement_lines(placement, kind):
            print(f"#     {line}")
    print(f"# {RANKS_NOTE}")
    return 0
