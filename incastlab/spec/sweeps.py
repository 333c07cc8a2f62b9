"""Sweeps: a list at a sweepable field asks for one run per value. The cross product of
the lists, times ``run.repetitions``, expands into labelled single-run specs
(``policy=ecmp,workers=4,rep=1``)."""
from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from incastlab.fields import is_int
from incastlab.spec.schema import set_field

if TYPE_CHECKING:
    from incastlab.spec.document import Spec

__all__ = ["count_runs", "expand_sweep", "label_value", "sweep_points"]


def count_runs(spec: Spec) -> int:
    """Runs the spec asks for: its sweep points times its repetitions."""
    runs = spec.run.repetitions if is_int(spec.run.repetitions) else 1
    for values in spec.swept().values():
        runs *= max(len(values), 1)
    return runs


def sweep_points(spec: Spec, skip: Iterable[str] = ()):
    """(label, single-valued spec) for each combination of sweep values, no repetitions;
    axes in ``skip`` are left unexpanded."""
    axes = {key: values for key, values in spec.swept().items() if key not in skip}
    for combo in itertools.product(*axes.values()):
        point = copy.deepcopy(spec)
        for key, value in zip(axes, combo, strict=True):
            set_field(point, key, value)
        label = ",".join(f"{key.split('.')[1]}={label_value(value)}"
                         for key, value in zip(axes, combo, strict=True))
        yield label, point


def label_value(v) -> str:
    """A sweep value as it appears in a run's label: filesystem-safe, floats that are
    whole numbers without ``.0``."""
    if isinstance(v, bool):
        text = "true" if v else "false"
    elif isinstance(v, float):
        text = str(int(v)) if v.is_integer() else repr(v)  # 200.0 -> 200; exact otherwise
    else:
        text = str(v)
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def expand_sweep(spec: Spec) -> list[tuple[str, Spec]]:
    """Every run a (sweep) spec asks for: the cross product of its sweep lists, in schema
    order, times ``run.repetitions`` (outermost, so each repetition completes the whole
    comparison before the next starts). Each run is a single-valued spec with
    ``repetitions = 1`` and ``seed = seed + rep - 1``, labelled deterministically and
    filesystem-safely, e.g. ``policy=ecmp,workers=4,rep=1``. A spec that is no sweep gives
    one run labelled ``rep=1``."""
    from incastlab.spec.validation import validate  # validation expands sweeps itself

    validate(spec)
    points = list(sweep_points(spec))
    runs = []
    for rep in range(1, spec.run.repetitions + 1):
        for label, point in points:
            single = copy.deepcopy(point)
            single.run.repetitions = 1
            single.run.seed = spec.run.seed + rep - 1
            runs.append((f"{label},rep={rep}" if label else f"rep={rep}", single))
    if spec.jobs:  # and each job alone on its hosts (jobs=together / alone-<i>)
        from incastlab import multijob

        runs = multijob.with_alone(runs)
    return runs
