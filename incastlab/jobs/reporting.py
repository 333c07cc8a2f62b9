"""The analysis modules a job's report hooks use, imported on first use.

``reporting.render.df_html(...)`` inside a hook imports ``incastlab.analysis.render``
then, not when the job registry is imported: the spec and the CLI stay quick to load
(matplotlib is not needed to validate a spec)."""
from __future__ import annotations

import importlib

_MODULES = {"plotting": "incastlab.analysis.plots", "render": "incastlab.analysis.render",
            "training": "incastlab.analysis.training",
            "costmodel": "incastlab.analysis.costmodel"}


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(_MODULES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
