"""Time to accuracy: a training run's held-out evaluations, when (in wall-clock seconds
and in gradients applied) it first reached a target accuracy, the learning-rate rule it
trained with, and the comparison of several runs (modes) by these.

Inputs are worker-log events (docs/run-directory.md): ``eval`` events (a single
parameter server logs one at version 0, then every ``eval_every`` gradients applied, and
one at the end: ``t``, ``version``, ``applied``, ``accuracy``, ``loss``), the server's
``start`` event (``lr``, ``lr_rule``, ``lr_rule_default``, ``workers``) and ``update``
events (``rates``: the rate each gradient was applied with; ``staleness``).

Time counts from the first evaluation (version 0, just before the server hands out the
initial parameters): set-up before training does not count. A target is *reached* at the
first evaluation whose accuracy is at or above it; as evaluations are discrete, the time
is an upper bound, late by at most one evaluation interval. Nothing here knows a job
kind: any job whose apps log ``eval`` events gets these tables.
"""
from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

CURVE_COLUMNS = ["t_s", "applied", "version", "accuracy", "loss", "t"]
CHANCE = 0.1  # ten digit classes


def curve(workers: pd.DataFrame) -> pd.DataFrame:
    """Held-out accuracy over training: one row per ``eval`` event (columns
    CURVE_COLUMNS; ``t_s`` = seconds since the first evaluation, ``applied`` = gradients
    applied so far), in time order. With several evaluating processes, the one with the
    most evaluations (empty when no process logged any)."""
    if workers is None or workers.empty or "event" not in workers \
            or not (workers["event"] == "eval").any():
        return pd.DataFrame(columns=CURVE_COLUMNS)
    ev = workers[workers["event"] == "eval"]
    if "file" in ev and ev["file"].nunique() > 1:
        ev = ev[ev["file"] == ev["file"].value_counts().idxmax()]
    out = pd.DataFrame({c: pd.to_numeric(ev[c], errors="coerce") if c in ev else math.nan
                        for c in ("t", "applied", "version", "accuracy", "loss")})
    out = out.dropna(subset=["t"]).sort_values("t", kind="stable").reset_index(drop=True)
    out["t_s"] = out["t"] - out["t"].iloc[0] if len(out) else []
    return out[CURVE_COLUMNS]


def reach(c: pd.DataFrame, target: float | None) -> dict:
    """When curve ``c`` first reached ``target`` (fraction): ``reached`` (bool, None
    without a target or evaluations), ``t_s`` (s since training started), ``applied``
    (gradients), ``version``, ``accuracy`` at that evaluation; always the ``best``
    accuracy and when it came (``best_t_s``), the ``start`` and ``end`` accuracy and loss,
    and ``evaluations``."""
    out: dict = {"target": target, "reached": None, "t_s": None, "applied": None,
                 "version": None, "accuracy": None, "evaluations": int(len(c))}
    acc = pd.to_numeric(c["accuracy"], errors="coerce") if len(c) else pd.Series(dtype=float)
    if not acc.notna().any():
        return out
    best = int(acc.idxmax())
    out.update(best=float(acc[best]), best_t_s=float(c["t_s"].iloc[best]),
               start_accuracy=_num(acc.iloc[0]), start_loss=_num(c["loss"].iloc[0]),
               end_accuracy=_num(acc.iloc[-1]), end_loss=_num(c["loss"].iloc[-1]),
               end_t_s=float(c["t_s"].iloc[-1]), end_applied=_num(c["applied"].iloc[-1]))
    if target is None:
        return out
    hit = acc[acc >= target]
    out["reached"] = bool(len(hit))
    if len(hit):
        i = int(hit.index[0])
        out.update(t_s=float(c["t_s"].iloc[i]), applied=_num(c["applied"].iloc[i]),
                   version=_num(c["version"].iloc[i]), accuracy=float(acc[i]))
    return out


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# ------------------------------------------------------------------ learning-rate rule

RULE_FORMULAS = {
    "mean": "lr × the average of the update's gradients",
    "per_worker": "lr / N for every gradient (N workers)",
    "staleness": "lr / (1 + staleness) for every gradient, averaged over the update's",
}


def lr_rule(workers: pd.DataFrame) -> dict:
    """The learning-rate rule the server trained with: ``rule``, ``default`` (whether it
    was the mode's default), ``lr``, ``workers``, ``mode``, and the rates it applied per
    gradient (``rate_mean``, ``rate_min``, ``rate_max``, ``gradients``) from the
    ``update`` events' ``rates``. Empty when no server logged a rule."""
    if workers is None or workers.empty or "lr_rule" not in workers:
        return {}
    st = workers[(workers["event"] == "start") & workers["lr_rule"].notna()]
    if st.empty:
        return {}
    s = st.iloc[0]
    out = {"rule": str(s["lr_rule"]), "default": bool(s.get("lr_rule_default")),
           "lr": _num(s.get("lr")), "workers": _num(s.get("workers")),
           "mode": s.get("mode") if isinstance(s.get("mode"), str) else None}
    up = workers[(workers["event"] == "update") & (workers["file"] == s["file"])] \
        if "file" in workers else workers[workers["event"] == "update"]
    rates = [float(x) for v in up.get("rates", pd.Series(dtype=object)).dropna()
             for x in (v if isinstance(v, list) else [v])]
    if rates:
        out.update(rate_mean=sum(rates) / len(rates), rate_min=min(rates),
                   rate_max=max(rates), gradients=len(rates))
    return out


def rule_sentence(r: dict) -> str:
    """'Learning-rate rule per_worker (the default for async): lr / N for every gradient
    (N workers) = 0.2 / 4 = 0.05 per gradient.' ('' without a rule)."""
    if not r:
        return ""
    why = f"the default for {r['mode']}" if r.get("default") and r.get("mode") \
        else "set in the spec"
    text = f"Learning-rate rule {r['rule']} ({why}): {RULE_FORMULAS.get(r['rule'], '?')}"
    lr, n = r.get("lr"), r.get("workers")
    if r["rule"] == "per_worker" and lr and n:
        text += f" = {lr:g} / {n:g} = {lr / n:.3g} per gradient"
    elif lr is not None:
        text += f", lr = {lr:g}"
    if r.get("gradients"):
        lo, hi = r["rate_min"], r["rate_max"]
        spread = f"{lo:.3g}" if math.isclose(lo, hi, rel_tol=1e-9) else \
            f"mean {r['rate_mean']:.3g}, from {lo:.3g} to {hi:.3g}"
        text += f". Rate applied to each of the {r['gradients']:,} gradients: {spread}"
    return text + "."


# ------------------------------------------------------------------ one run

def run_sentence(c: pd.DataFrame, r: dict, source: str | None,
                 staleness: pd.Series | None = None) -> str:
    """What one run's evaluations say: start and end accuracy and loss, and the time and
    gradients to the target (``r`` from :func:`reach`) with its source."""
    if not r.get("evaluations"):
        return ""
    text = (f"Held-out accuracy, evaluated {r['evaluations']} times, went from "
            f"{_pct(r.get('start_accuracy'))} (loss {_f(r.get('start_loss'))}) to "
            f"{_pct(r.get('end_accuracy'))} (loss {_f(r.get('end_loss'))}) in "
            f"{_f(r.get('end_t_s'))} s and {_count(r.get('end_applied'))} gradients applied "
            f"(best {_pct(r.get('best'))})")
    if r.get("target") is not None:
        text += (f". Target {_pct(r['target'])} ({target_source_text(source)}): "
                 + (f"reached after {_f(r['t_s'])} s and {_count(r['applied'])} gradients "
                    f"applied" if r.get("reached") else "not reached"))
    if staleness is not None and len(staleness):
        text += (f"; gradient staleness mean {float(staleness.mean()):.3g}, max "
                 f"{float(staleness.max()):.0f} versions")
    return text + "."


def target_source_text(source: str | None) -> str:
    return f"source: {source}" if source else "its source is not stated in the spec"


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _f(v) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def _count(v) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


# ------------------------------------------------------------------ comparing runs

COMPARE_COLUMNS = ["group", "runs", "reached", "time_to_target_s", "gradients_to_target",
                   "best_accuracy", "end_accuracy", "end_loss", "start_loss",
                   "staleness_mean", "staleness_max", "iteration_s", "lr_rule",
                   "rate_per_gradient"]


def compare_table(runs: list[dict]) -> pd.DataFrame:
    """One row per group of ``runs`` (dicts with ``group``, ``reach`` from
    :func:`reach`, ``staleness`` (Series), ``iteration_s`` (mean iteration time) and
    optionally ``lr_rule`` (from :func:`lr_rule`)): how many runs reached the target,
    the mean time and gradients of those that did, best and end accuracy, staleness
    (mean and max over all the group's gradients), the learning-rate rule(s) and the
    mean rate per gradient."""
    rows = []
    for group in dict.fromkeys(r["group"] for r in runs):
        members = [r for r in runs if r["group"] == group]
        hit = [r["reach"] for r in members if r["reach"].get("reached")]
        stale = pd.concat([r["staleness"] for r in members
                           if r.get("staleness") is not None and len(r["staleness"])]
                          or [pd.Series(dtype=float)])

        def mean(values):
            v = [x for x in values if x is not None]
            return sum(v) / len(v) if v else None

        rows.append({"group": group, "runs": len(members), "reached": len(hit),
                     "time_to_target_s": mean(h["t_s"] for h in hit),
                     "gradients_to_target": mean(h["applied"] for h in hit),
                     "best_accuracy": mean(r["reach"].get("best") for r in members),
                     "end_accuracy": mean(r["reach"].get("end_accuracy") for r in members),
                     "end_loss": mean(r["reach"].get("end_loss") for r in members),
                     "start_loss": mean(r["reach"].get("start_loss") for r in members),
                     "staleness_mean": float(stale.mean()) if len(stale) else None,
                     "staleness_max": float(stale.max()) if len(stale) else None,
                     "iteration_s": mean(r.get("iteration_s") for r in members),
                     "lr_rule": "/".join(dict.fromkeys(
                         (r.get("lr_rule") or {}).get("rule") or "?" for r in members)),
                     "rate_per_gradient": mean((r.get("lr_rule") or {}).get("rate_mean")
                                               for r in members)})
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


def compare_findings(table: pd.DataFrame, target: float | None,
                     source: str | None) -> list[str]:
    """Sentences: which group reached the target first, by how much before each other
    one (seconds and times as long; gradients), which never reached it, and the
    staleness each paid."""
    if table.empty:
        return []
    if target is None:
        return ["No target accuracy in the specs (workload.target_accuracy): time to "
                "accuracy is not compared; the curves still are."]
    out = []
    done = table[table["reached"] > 0].sort_values("time_to_target_s", kind="stable")
    missed = table[table["reached"] == 0]
    if done.empty:
        out.append(f"No run reached the target accuracy {target:g} "
                   f"({target_source_text(source)}); best: "
                   + ", ".join(f"{r.group} {_pct(r.best_accuracy)}"
                               for r in table.itertuples()) + ".")
    else:
        first = done.iloc[0]
        text = (f"{first['group']} reached the target accuracy {target:g} first "
                f"({target_source_text(source)}), {_f(first['time_to_target_s'])} s after "
                f"training started and after {_count(first['gradients_to_target'])} "
                f"gradients applied")
        later = []
        for _, r in done.iloc[1:].iterrows():
            dt = r["time_to_target_s"] - first["time_to_target_s"]
            ratio = r["time_to_target_s"] / first["time_to_target_s"] \
                if first["time_to_target_s"] else None
            later.append(f"{r['group']} {_f(dt)} s later ({_f(r['time_to_target_s'])} s"
                         + (f", {ratio:.2g}× as long" if ratio else "")
                         + f"; {_count(r['gradients_to_target'])} gradients)")
        if later:
            text += "; " + ", ".join(later)
        out.append(text + ".")
    for _, r in missed.iterrows():
        out.append(f"{r['group']} did not reach it in {r['runs']} run(s): best "
                   f"{_pct(r['best_accuracy'])}, ending at {_pct(r['end_accuracy'])} (loss "
                   f"{_f(r['start_loss'])} at the start, {_f(r['end_loss'])} at the end).")
    partial = table[(table["reached"] > 0) & (table["reached"] < table["runs"])]
    for _, r in partial.iterrows():
        out.append(f"{r['group']}: only {r['reached']} of its {r['runs']} runs reached the "
                   "target; its time is the mean of those.")
    paid = [f"{r['group']} mean {_f(r['staleness_mean'])}, max "
            f"{_count(r['staleness_max'])}" for _, r in table.iterrows()
            if r["staleness_mean"] is not None and not pd.isna(r["staleness_mean"])]
    if paid:
        out.append("Staleness paid (model versions a gradient was behind when applied): "
                   + "; ".join(paid) + ".")
    rules = [f"{r['group']} {r['lr_rule']}"
             + (f" ({r['rate_per_gradient']:.3g} per gradient)"
                if r.get("rate_per_gradient") is not None
                and not pd.isna(r["rate_per_gradient"]) else "")
             for _, r in table.iterrows() if r.get("lr_rule") not in (None, "?")]
    if rules:
        out.append("Learning-rate rules: " + "; ".join(rules) + ".")
    return out


def run_inputs(a) -> dict:
    """What :func:`compare_section` needs of one analysed run (report.Analysis):
    ``accuracy`` (its curve), ``staleness`` (the values, a Series) and ``iteration_s``
    (mean iteration time, s)."""
    t = a.tables
    c = t.get("accuracy")
    if not isinstance(c, pd.DataFrame):
        c = curve(t.get("workers_raw"))
    stale = t.get("staleness")
    rule = t.get("lr_rule")
    return {"accuracy": c, "staleness": stale if isinstance(stale, pd.Series) else None,
            "iteration_s": (a.metrics.get("training") or {}).get("mean_s"),
            "lr_rule": rule if isinstance(rule, dict) else lr_rule(t.get("workers_raw"))}


NO_TARGET = "time to accuracy is left out: no run set workload.target_accuracy"


def compare_section(runs: list[dict], out_dir) -> tuple[str, list[Path], dict]:
    """compare.html's time-to-accuracy section for ``runs`` (dicts with ``group``,
    ``spec``, ``accuracy`` (a :func:`curve`), ``staleness``, ``iteration_s``):
    (html, figure paths, a JSON-friendly summary). Empty html when no run logged
    evaluations, or none set a target accuracy (the summary's `left_out` says so).
    Missing values read 'n/a'."""
    runs = [r for r in runs if r.get("accuracy") is not None and len(r["accuracy"])]
    if not runs:
        return "", [], {}
    targets = {_target(r["spec"]) for r in runs}
    if targets == {None}:  # time to a target does not apply: the section is left out
        return "", [], {"left_out": NO_TARGET}
    sources = {_source(r["spec"]) for r in runs}
    target = targets.pop() if len(targets) == 1 else None
    source = sources.pop() if len(sources) == 1 else None
    for r in runs:
        r["reach"] = reach(r["accuracy"], target)
    table = compare_table(runs)
    sentences = compare_findings(table, target, source)
    if len(targets) > 1:
        sentences.insert(0, "The runs have different target accuracies: time to a target "
                            "is not compared.")
    from . import plots

    fig = plots.accuracy_curves([(r["group"], r["accuracy"]) for r in runs],
                                Path(out_dir) / "plots" / "compare_accuracy.png", target)
    from .render import df_html, img

    body = ("<h2>Time to accuracy</h2><div class='findings'><ul>"
            + "".join(f"<li>{html.escape(s)}</li>" for s in sentences) + "</ul></div>"
            + "<p class='note'>Held-out accuracy as the parameter server evaluated it, "
              "against seconds since training started (left) and gradients applied "
              "(right). A target counts as reached at the first evaluation at or above "
              "it. Staleness: model versions between the one a gradient was computed on "
              "and the one it was applied to.</p>"
            + img(fig, "accuracy vs time and gradients")
            + df_html(table.astype(object).where(table.notna(), "n/a")))
    summary = {"target": target, "source": source, "findings": sentences,
               "table": table.to_dict(orient="records")}
    return body, [fig] if fig else [], summary


def _target(spec: dict):
    return _num(((spec or {}).get("workload") or {}).get("target_accuracy"))


def _source(spec: dict):
    s = ((spec or {}).get("workload") or {}).get("target_source")
    return s if isinstance(s, str) and s else None
