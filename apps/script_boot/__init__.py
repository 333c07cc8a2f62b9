"""The bootstrap of the script job's ranks: this folder goes on their PYTHONPATH (the
script job's launch plan), so Python imports its ``sitecustomize`` at start-up, before
the user's script runs (see sitecustomize.py)."""
