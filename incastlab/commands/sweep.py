"""Run every point of a sweep spec (the cross product of its list-valued fields ×
run.repetitions), each into its own run directory under one sweep directory, then build
a comparison report. --resume skips points whose run is already complete; an
incomplete earlier attempt is kept, renamed, never overwritten."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from incastlab.commands import common

HELP = "run the cross product of a spec's list-valued fields, then compare"


def add_arguments(p):
    p.add_argument("spec", help="spec file (TOML) with list-valued fields and/or repetitions")
    common.add_spec_options(p)
    p.add_argument("--out", default=None,
                   help="sweep directory (default: <run.out_dir>/<name>-sweep-<time>)")
    p.add_argument("--resume", action="store_true",
                   help="reuse --out and skip the points whose run completed")
    p.add_argument("--no-report", action="store_true", help="skip per-run reports")


def run_status(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "manifest.json").read_text()).get("status")
    except (OSError, ValueError):
        return None


def run(args) -> int:
    return sweep(args)


def sweep(args, spec=None) -> int:
    from incastlab.spec import SpecError, expand_sweep

    spec = spec or common.load(args, allow_sweep=True)
    if spec is None:
        return 2
    try:
        points = expand_sweep(spec)
    except SpecError as exc:
        print(f"incastlab sweep: invalid spec\n{exc}", file=sys.stderr)
        return 2
    for _label, point in points:  # every point is checked before the first run starts
        if common.ready(point, args) is None:
            return 1
    if args.resume and not args.out:
        print("incastlab sweep: --resume needs --out DIR (the sweep directory to resume)",
              file=sys.stderr)
        return 2
    base = Path(args.out) if args.out else \
        Path(spec.run.out_dir) / f"{spec.run.name}-sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    if base.exists() and any(base.iterdir()) and not args.resume:
        print(f"incastlab sweep: {base} exists; use --resume to continue it", file=sys.stderr)
        return 2
    base.mkdir(parents=True, exist_ok=True)
    print(f"sweep: {len(points)} runs into {base}")
    run_dirs, statuses = [], {}
    for n, (label, point) in enumerate(points, start=1):
        run_dir = base / label
        if run_dir.exists():
            if run_status(run_dir) == "complete" and args.resume:
                print(f"[{n}/{len(points)}] {label}: complete, skipped")
                run_dirs.append(run_dir)
                statuses[label] = "complete (resumed)"
                continue
            kept = run_dir.with_name(f"{label}.incomplete-{time.strftime('%H%M%S')}")
            run_dir.rename(kept)
            print(f"[{n}/{len(points)}] {label}: earlier incomplete attempt kept as {kept.name}")
        caps = common.ready(point, args)  # the machine may have changed since the start
        if caps is None:  # already said why; keep what the sweep has so far
            statuses[label] = "not started (preflight failed)"
            print(f"sweep stopped before {label}; continue it with --resume --out {base}")
            break
        run_dir.mkdir()
        print(f"[{n}/{len(points)}] {label}: running")
        status = common.execute(point, run_dir, args, caps)
        statuses[label] = status
        common.report_and_summarise(run_dir, args)
        run_dirs.append(run_dir)
        print(f"[{n}/{len(points)}] {label}: {status}")
        if status == "aborted":  # Ctrl-C or SIGTERM: stop the sweep, not just this run
            print(f"sweep stopped after {label}; continue it with --resume --out {base}")
            break
    (base / "sweep.json").write_text(json.dumps(
        {"spec": spec.source, "runs": statuses}, indent=1))
    out = common.compare_runs([d for d in run_dirs if run_status(d) == "complete"],
                              base / "compare")
    summary = common.compare_summary(out["table"]) if not args.quiet else ""
    if summary:
        print(summary)
    for c in out["confounds"]:  # what besides the spec differs between the groups
        if c.differs:
            print(f"  careful ({c.check}): {c.text}")
    print(f"comparison report: {out['report']}")
    return 0 if all(s.startswith("complete") for s in statuses.values()) else 1
