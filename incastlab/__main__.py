"""`python -m incastlab …`: the same command line as the `incastlab` console script."""
import sys

from incastlab.cli import main

sys.exit(main())
