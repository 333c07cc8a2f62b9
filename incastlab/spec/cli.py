"""``python -m incastlab.spec``: check a spec and print it resolved, or print the schema
(every field, its default, what is allowed and what it means)."""
from __future__ import annotations

import sys

from incastlab.spec.errors import SpecError
from incastlab.spec.loading import load_spec
from incastlab.spec.schema import schema_rows
from incastlab.spec.sweeps import expand_sweep

__all__ = ["main"]

def main(argv: list[str] | None = None) -> int:
    """``python -m incastlab.spec [SPEC [table.field=value ...]]``: check a spec and print
    it resolved; without arguments print the schema; ``--help`` says so."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m incastlab.spec",
        description="Check an incastlab spec and print it resolved (defaults and "
                    "overrides applied; a sweep's runs listed), or, without a spec, print "
                    "the schema: every field, its default, what is allowed and what it "
                    "means. Exit status 2 lists every problem by field. "
                    "`incastlab check SPEC` also prints the host placement.")
    parser.add_argument("spec", nargs="?", default=None, help="spec file (TOML)")
    parser.add_argument("overrides", nargs="*", metavar="table.field=value",
                        help="overrides, as --set takes them (value in TOML syntax)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.spec is None:
        for key, default, allowed, doc in schema_rows():
            print(f"{key:32} {default:12} {allowed}\n{'':32} {doc}")
        return 0
    try:
        spec = load_spec(args.spec, args.overrides, allow_sweep=True)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(spec.to_toml(), end="")
    if spec.is_sweep:
        print("\n# runs: " + " ".join(label for label, _ in expand_sweep(spec)))
    return 0
