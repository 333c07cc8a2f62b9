"""The "can these be compared?" box of a comparison: what differs between groups of runs
besides their spec - routing balance, whether the emulation kept up (the runs' fidelity
verdicts, the CPU as supporting evidence), capture drops, code version and machine.
Used by compare.py (its re-exports keep the old import paths).
"""
from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from .groupstats import finite_values

__all__ = ["BALANCE_RATIO", "Confound", "confounds", "confounds_html"]

BALANCE_RATIO = 1.2  # spine max/mean medians further apart than this: routing differed


@dataclass(frozen=True)
class Confound:
    """One check of the "can these be compared?" box. `differs`: True when the runs
    differ in it (a confound), False when they agree, None when it was not recorded."""
    check: str
    differs: bool | None
    text: str


def _by_group(runs, value) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in runs:
        out.setdefault(r["group"], []).append(value(r))
    return out


def _manifest(r) -> dict:
    m = r.get("manifest")
    return m if isinstance(m, dict) else {}


def _versions(r) -> dict:
    v = _manifest(r).get("versions")
    return v if isinstance(v, dict) else {}


def _balance_check(runs) -> Confound:
    groups = {g: finite_values(v) for g, v in _by_group(
        runs, lambda r: (r.get("headline") or {}).get("spine_max_mean")).items()}
    measured = {g: v for g, v in groups.items() if v}
    if not measured:
        return Confound("routing balance", None, "no run measured its spine balance "
                        "(spine_max_mean: no fabric.json or no leaf-spine links)")
    detail = "; ".join(f"{g}: " + ", ".join(f"{x:.2f}" for x in v)
                       for g, v in measured.items())
    medians = {g: float(np.median(v)) for g, v in measured.items()}
    between = max(medians.values()) / max(min(medians.values()), 1e-9)
    within = [g for g, v in measured.items() if max(v) / max(min(v), 1e-9) > BALANCE_RATIO]
    notes = []
    if len(measured) > 1 and between > BALANCE_RATIO:
        notes.append(f"the groups' medians differ by a factor {between:.2f}: the routing put "
                     "their flows on the spines differently, so the comparison also compares "
                     "balanced with unbalanced routing")
    if within:
        notes.append(f"runs within {', '.join(within)} differ by more than "
                     f"{BALANCE_RATIO:g}x: the spread there is partly routing luck")
    return Confound("routing balance", bool(notes),
                    f"spine max/mean bytes (1.0 = even; 2 = all on one spine) per run: "
                    f"{detail}" + (". " + "; ".join(notes) + "." if notes else
                                   f". Within a factor {BALANCE_RATIO:g}."))


def _count_check(name, runs, per_run, what) -> Confound:
    """A yes/no per run (None: not recorded): flagged when any run says yes."""
    groups = _by_group(runs, per_run)
    known = {g: [x for x in v if x is not None] for g, v in groups.items()}
    if not any(known.values()):
        return Confound(name, None, f"not recorded in the manifests ({what})")
    parts = [f"{g}: {sum(map(bool, v))} of {len(v)} runs" for g, v in known.items()]
    hit = any(any(v) for v in known.values())
    return Confound(name, hit, f"{what}: " + "; ".join(parts) + "."
                    + (" Those runs' numbers are not trustworthy." if hit else ""))


def _verdict(r) -> dict | None:
    """The run's fidelity verdict: metrics.json's (authoritative), else the manifest's
    run-time one (analysis/fidelity.py)."""
    for v in (r.get("fidelity"), _manifest(r).get("fidelity")):
        if isinstance(v, dict) and isinstance(v.get("kept_up"), bool):
            return v
    return None


def _not_kept_up(r):
    v = _verdict(r)
    return None if v is None else not v["kept_up"]


def _cpu_saturated(r):
    cpu = _manifest(r).get("cpu")
    return bool(cpu.get("saturated")) if isinstance(cpu, dict) and "saturated" in cpu \
        else None


def _fidelity_check(runs) -> Confound:
    """Flagged when any run's verdict says the emulation did not keep up; the CPU rule's
    counts are shown beside it (supporting evidence, never the flag)."""
    check = _count_check("fidelity", runs, _not_kept_up,
                         "runs whose emulation did not keep up (their fidelity verdict: "
                         "losses no queue counted, datapath drops, ports below their rate "
                         "or tcpdump drops)")
    cpu = _by_group(runs, _cpu_saturated)
    known = {g: [x for x in v if x is not None] for g, v in cpu.items()}
    if any(known.values()):
        check = Confound(check.check, check.differs, check.text + " Supporting: runs the "
                         "CPU rule called saturated: " + "; ".join(
                             f"{g}: {sum(v)} of {len(v)}" for g, v in known.items()) + ".")
    if check.differs:
        why = [f"{r.get('name') or r.get('dir') or r['group']}: {_verdict(r)['text']}"
               for r in runs if _not_kept_up(r)]
        check = Confound(check.check, True, check.text + " " + " ".join(why[:3]))
    return check


def _capture_dropped(r):
    man = _manifest(r)
    drops = man.get("capture_drops")
    if man.get("capture_lossy"):
        return True
    if not isinstance(drops, dict):
        return False if "capture_lossy" in man else None
    return any(isinstance(d, dict) and any((d.get(k) or 0) > 0 for k in
                                           ("dropped_by_kernel", "dropped_by_interface"))
               for d in drops.values())


def _same_check(name, runs, per_run, what) -> Confound:
    """Flagged when the runs do not all share one value (None: not recorded)."""
    groups = _by_group(runs, per_run)
    values = {v for vs in groups.values() for v in vs if v is not None}
    if not values:
        return Confound(name, None, f"not recorded in the manifests ({what})")
    if len(values) == 1:
        return Confound(name, False, f"every run: {next(iter(values))}")
    return Confound(name, True, f"{what} differ: " + "; ".join(
        f"{g}: " + ", ".join(sorted({str(v) for v in vs})) for g, vs in groups.items()))


def confounds(runs: list[dict]) -> list[Confound]:
    """The "can these be compared?" checks over runs (dicts with 'group', 'headline' from
    metrics.json, 'fidelity' from metrics.json and 'manifest'): routing balance (headline
    spine_max_mean), fidelity (the verdict's kept_up; cpu.saturated beside it), capture
    drops (capture_lossy / capture_drops), code version (versions.incastlab and
    versions.git) and machine (host, kernel, cores, datapath, Open vSwitch)."""
    return [
        _balance_check(runs),
        _fidelity_check(runs),
        _count_check("capture drops", runs, _capture_dropped,
                     "runs whose tcpdump dropped packets (capture losses overstated)"),
        _same_check("code version", runs, lambda r: _described(
            [("incastlab {}", "incastlab", _versions(r).get("incastlab")),
             ("git {}", "git", _versions(r).get("git"))], " "), "code versions"),
        _same_check("machine", runs, lambda r: _described(
            [("{}", "host", _manifest(r).get("host")),
             ("kernel {}", "kernel", _versions(r).get("kernel") or _manifest(r).get("kernel")),
             ("{} cores", "cores", (_manifest(r).get("cpu") or {}).get("cores")),
             ("datapath {}", "datapath", _manifest(r).get("datapath")),
             ("OVS {}", "OVS", _versions(r).get("openvswitch"))]), "machines"),
    ]


def _described(parts: list[tuple[str, str, object]], sep: str = ", ") -> str | None:
    """'vm, kernel 6.1, 2 cores; not in the manifest: OVS' from (format, name, value)
    parts (None when no part is recorded): a missing value is said so, never None."""
    known = [form.format(v) for form, _, v in parts if v is not None]
    if not known:
        return None
    missing = [name for _, name, v in parts if v is None]
    return sep.join(known) + (f"; not in the manifest: {', '.join(missing)}" if missing
                              else "")


def confounds_html(checks: list[Confound]) -> str:
    """The box: one row per check, a differing one marked."""
    bad = [c for c in checks if c.differs]
    head = ("These groups differ only in their spec." if not bad else
            f"Careful: {len(bad)} thing(s) besides the spec differ — "
            + ", ".join(c.check for c in bad) + ".")
    rows = "".join(
        f"<tr class='{'bad' if c.differs else 'ok' if c.differs is False else 'unk'}'>"
        f"<th class='l'>{html.escape(c.check)}</th><td class='l'>"
        f"{'⚠ differs' if c.differs else '✓ same' if c.differs is False else '? not recorded'}"
        f"</td><td class='l'>{html.escape(c.text)}</td></tr>" for c in checks)
    return (f"<div class='confounds' id='confounds'><h2>Can these be compared?</h2>"
            f"<p><b>{html.escape(head)}</b></p><table class='tbl'>{rows}</table></div>")
