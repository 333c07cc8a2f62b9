"""One module per ``incastlab`` sub-command: HELP, add_arguments(parser), run(args)."""
from incastlab.commands import clean, compare, demo, mininet_cli, preflight, report, run, sweep

__all__ = ["clean", "compare", "demo", "mininet_cli", "preflight", "report", "run", "sweep"]
