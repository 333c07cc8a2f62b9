"""The ``incastlab`` command: one sub-command per job, one registry dict."""
from __future__ import annotations

import argparse
import os
import signal
import sys

from incastlab import commands
from incastlab.commands import check

COMMANDS = {
    "demo": commands.demo,
    "run": commands.run,
    "sweep": commands.sweep,
    "check": check,
    "report": commands.report,
    "compare": commands.compare,
    "preflight": commands.preflight,
    "clean": commands.clean,
    "cli": commands.mininet_cli,
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show a default only where there is one worth showing (not None/False/[])."""

    def _get_help_string(self, action):
        if action.default in (None, False, []) or "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def version() -> str:
    """The installed distribution's version (setup.py); "unknown" when not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("incastlab")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="incastlab",
        description="Packet-level emulation of distributed deep-learning traffic on a "
                    "Mininet leaf–spine fabric (run as root).")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more output (Mininet's own log at info level)")
    parser.add_argument("-q", "--quiet", action="store_true", help="errors only")
    parser.add_argument("--version", action="version", version=f"incastlab {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.HELP, description=command.__doc__,
                           formatter_class=HelpFormatter)
        command.add_arguments(p)
        p.set_defaults(handler=command.run)
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed command line. The words after the first ``--`` are not parsed: they are
    ``args.rest`` (None without ``--``), for a command that ``takes_rest`` (a script's
    own arguments: ``incastlab run --script train.py -- --epochs 2``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = None
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    if rest is not None and not getattr(args, "takes_rest", False):
        parser.error(f"incastlab {args.command} takes no arguments after --")
    args.rest = rest
    return args


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C must stop a run (and tear it down) even when a shell without job control
    # started us in the background, which sets SIGINT to "ignore".
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args = parse(argv)
    if args.verbose:
        os.environ["INCASTLAB_MININET_LOG"] = "info"
    try:
        return args.handler(args) or 0
    except KeyboardInterrupt:
        print("incastlab: interrupted; everything it started was torn down.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
