"""One module per ``incastlab`` sub-command: HELP, add_arguments(parser), run(args)."""
from incastlab.commands import clean, mininet_cli, preflight

__all__ = ["clean", "mininet_cli", "preflight"]
