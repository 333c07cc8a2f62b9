"""``python -m incastlab.spec``: see :mod:`incastlab.spec.cli`."""
import sys

from incastlab.spec.cli import main

sys.exit(main())
