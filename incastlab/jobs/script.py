"""Your own training script (``kind = "script"``): an unmodified torchrun / DDP script,
run under torchrun itself on ``workers`` hosts (one rank each), observed per collective
and per optimizer step by apps/script_observer.py (docs/own-script.md).

This module owns the job's spec fields, their checks (the script exists and is Python,
or the module is importable), its placement and launch plan (jobs/script_launch.py);
its analysis — the collectives table, the bound of each step, the report section — is
in jobs/script_tables.py and jobs/script_bound.py.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass

from incastlab.fields import boolean, int_check, spec_field
from incastlab.jobs.base import (
    RENDEZVOUS_PORT,
    Job,
    Launch,
    Roles,
    RunFlag,
    TrainingFields,
    endpoints,
)
from incastlab.jobs.script_launch import torchrun_commands


def _text(v) -> str | None:
    return None if isinstance(v, str) else f"{v!r} is not a string"


def _strings(v) -> str | None:
    if not isinstance(v, list):
        return f"{v!r} is not a list of strings"
    bad = [i for i, x in enumerate(v) if not isinstance(x, str)]
    return f"[{bad[0]}]: {v[bad[0]]!r} is not a string (quote numbers: \"2\")" if bad else None


# `workers` is the training jobs' own declaration (one field, one check, for every kind)
_WORKERS_CHECK = {f.name: f for f in dataclasses.fields(TrainingFields)}["workers"] \
    .metadata["check"]


@dataclass
class ScriptFields:
    workers: int = spec_field(3, _WORKERS_CHECK, "training workers (ps) or ring ranks (ring)",
                              sweep=True)
    script: str = spec_field("", _text, "script: the training script's path (a .py file, "
                             "relative to where incastlab runs), run under torchrun")
    module: str = spec_field("", _text, "script: or a module to run (torchrun -m), "
                             "importable by this Python")
    args: list[str] = spec_field([], _strings, "script: the script's own arguments, as "
                                 "strings", list_valued=True)
    map_nccl_to_gloo: bool = spec_field(False, boolean, "script: run a script's "
                                        "init_process_group(\"nccl\") on gloo (hosts have "
                                        "no GPUs)")
    observe: bool = spec_field(True, boolean, "script: record every collective, DDP "
                               "bucket and optimizer step (apps/script_observer.py)")
    steps: int = spec_field(0, int_check(0, 10_000_000), "script: optimizer steps the "
                            "script makes, for the progress display only (0: unknown)")


def script_problems(w, ok) -> list[str]:
    """Exactly one of script and module; the script a Python file, the module found."""
    if not ok("workload.script", "workload.module"):
        return []
    if bool(w.script) == bool(w.module):
        return ["workload.script: set either workload.script (a .py file) or "
                "workload.module (a module name)" + (", not both" if w.script else "")]
    if w.module:
        try:
            found = importlib.util.find_spec(w.module)
        except (ImportError, ValueError) as exc:
            found, why = None, f" ({type(exc).__name__}: {exc})"
        else:
            why = ""
        return [] if found is not None else \
            [f"workload.module: {w.module!r} is not a module this Python can import{why}"]
    path = w.script
    if not os.path.isfile(path):
        return [f"workload.script: {path!r} does not exist (or is not a file), seen from "
                f"{os.getcwd()}"]
    try:
        with open(path, "rb") as f:
            source = f.read()
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
        where = f" (line {exc.lineno}: {exc.msg})" if isinstance(exc, SyntaxError) else ""
        return [f"workload.script: {path!r} is not a Python script{where}"]
    except OSError as exc:
        return [f"workload.script: {path!r} cannot be read: {exc.strerror}"]
    return []


class ScriptJob(Job):
    kind = "script"
    summary = "your own torchrun / DDP training script, unmodified, one rank per host"
    Fields = ScriptFields
    logged_modes = ("script",)
    role_nouns = {"script": "a rank of the script"}
    run_flags = (
        RunFlag("--script", "script", "your training script (a .py file), run under "
                "torchrun on each worker host", "FILE.py", selects=True),
        RunFlag("--module", "module", "or a module to run (torchrun -m)", "PKG.MOD",
                selects=True),
        RunFlag("--workers", "workers", "hosts, one rank each",
                "N", int))
    rest_field = "args"

    def roles(self, w) -> Roles:
        return Roles(0, w.workers, "script ranks")

    def check(self, w, ok) -> list[str]:
        return script_problems(w, ok)

    def expected_progress(self, w) -> int:
        return int(w.steps)

    def launches(self, spec, ips, out_dir) -> list[Launch]:
        w = spec.workload
        hosts = spec.placement().workers
        target = w.module or os.path.abspath(w.script)
        argvs = torchrun_commands(endpoints(ips, hosts), out_dir, RENDEZVOUS_PORT, target,
                                  list(w.args), module=bool(w.module), observe=w.observe,
                                  map_nccl=w.map_nccl_to_gloo)
        return [Launch(host, argv, rank, "script", True)
                for rank, (host, argv) in enumerate(zip(hosts, argvs, strict=True))]

    # -- analysis (jobs/script_tables.py, jobs/script_bound.py) -----------------------
    def bound(self, analysis):
        from incastlab.jobs.script_bound import run_bound

        return run_bound(analysis)

    def attribution_rows(self, analysis):
        """Every rank's steps; the collectives of a step may involve every rank."""
        from incastlab.analysis import runview
        p = runview.placed(analysis)
        return analysis.tables["iterations"], list(p.workers) if p else []

    def tables(self, analysis) -> dict:
        from incastlab.jobs.script_tables import tables

        return tables(analysis)

    def sections(self, analysis, figs) -> list:
        from incastlab.jobs.script_tables import sections

        return sections(analysis)

    def summary_blocks(self, analysis) -> dict:
        from incastlab.jobs.script_tables import summary_block

        return {"script": summary_block(analysis)}

    def cost_clause(self, analysis) -> str | None:
        from incastlab.jobs.script_tables import cost_clause

        return cost_clause(analysis)
