"""Is the measured pipeline bubble the textbook (S−1)/(M+S−1), and what does 1F1B change?

    python benchmarks/pipeline_bubbles.py [--stages 4] [--micro-batches 1,4,8,16]
        [--fwd-ms 20] [--bwd-ms 40] [--iterations 6]

Runs `incastlab.apps.pipeline` on loopback (no root: the network costs next to
nothing, which is the point) with S stages, for every M and both schedules, and
measures, over the steps after the first (the same definition as the report's,
`incastlab.jobs.pipeline.bubble_table`): the bubble fraction 1 − Σ busy / (S × step),
step = first forward to last backward.

Baseline, measured in the same run: the mean forward and backward times t_f, t_b of
the very runs (the emulated compute plus whatever the 2 shared cores add), and the
mean message latency c (how long after stage s−1 finished a micro-batch's first
forward stage s started it, while it was waiting for it). From them:
- ideal step (M+S−1)(t_f+t_b): the step with free messages; `step/ideal` is the ratio;
- the formula (S−1)/(M+S−1): `bubble/formula` is the ratio the issue asks about
  ("within a few percent" for GPipe at negligible network cost);
- the simulated step with message latency c (`apps.pipeline.simulate`, the same
  schedules as the app): what the messages alone should add, per schedule. 1F1B's
  bubble is the formula's too with free messages; with latency, each steady-state
  backward of 1F1B waits for a gradient from downstream, so c reaches its critical
  path more often than GPipe's, whose forwards stream.

`--runs DIR` measures the same on finished runs of the lab instead (every run directory
under DIR with pipeline stage logs, e.g. the sweep of specs/pipeline-bubbles.toml on a
real fabric), where the messages cross real links.

Prints one line per run, then one JSON line with everything (also to --results FILE).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from incastlab.apps import pipeline as pp
from incastlab.apps.commands import Endpoint
from incastlab.apps.local import LocalJob, free_port, read_jsonl
from incastlab.jobs.pipeline import bubble_table, pipeline_commands, spans, steady
from incastlab.jobs.pipeline_bound import bubble_fraction


def run_once(out: Path, stages: int, m: int, kind: str, args) -> pd.DataFrame:
    """One loopback pipeline job; its span events as the report reads them."""
    options = {"schedule": kind, "micro_batches": m, "iterations": args.iterations,
               "model_size": 0.02, "layers": stages, "batch_size": max(16, m),
               "fwd_ms": args.fwd_ms, "bwd_ms": args.bwd_ms, "lr": 0.05, "timeout": 60}
    argvs = pipeline_commands([Endpoint("127.0.0.1", "lo")] * stages, str(out), free_port(),
                              options, python=sys.executable)
    with LocalJob(out) as job:
        for r, argv in enumerate(argvs):
            job.start(r, argv)
        codes = job.wait(300)
        if any(c != 0 for c in codes.values()):
            raise RuntimeError(f"{kind} M={m} failed: {[job.stderr(r) for r in codes]}")
    rows = [dict(rec, file=str(r)) for r in range(stages)
            for rec in read_jsonl(out / f"{r}.jsonl")]
    return spans(pd.DataFrame(rows), ("forward", "backward"))


def load_run(run_dir: Path) -> pd.DataFrame | None:
    """The span events of a lab run directory (None when it has no pipeline stages)."""
    rows = [dict(rec, file=p.stem) for p in sorted((run_dir / "workers").glob("*.jsonl"))
            for rec in read_jsonl(p)]
    sp = spans(pd.DataFrame(rows), ("forward", "backward")) if rows else None
    return sp if sp is not None and len(sp) else None


def message_latency(sp: pd.DataFrame) -> float:
    """Mean time from stage s−1's end of F0 to stage s's start of F0 (s ≥ 1, steady
    steps): stage s has nothing else to do then, so this is one message's latency."""
    gaps = []
    for _it, g in steady(sp).groupby("iteration"):
        f0 = g[g["name"] == "F0"].set_index("rank")
        for s in f0.index:
            if s - 1 in f0.index:
                gaps.append(float(f0.loc[s, "t"] - (f0.loc[s - 1, "t"]
                                                    + f0.loc[s - 1, "dur_s"])))
    return statistics.mean(gaps) if gaps else 0.0


def measure(sp: pd.DataFrame, kind: str, s: int, m: int) -> dict:
    """Bubble, ideal step and the simulation with the measured latency, for one run."""
    st = steady(sp)
    t_f = float(st.loc[st["cat"] == "forward", "dur_s"].mean())
    t_b = float(st.loc[st["cat"] == "backward", "dur_s"].mean())
    c = message_latency(sp)
    b = steady(bubble_table(sp, s))
    measured = float(b["bubble"].mean())
    step = float(b["window_s"].mean())
    ideal = (m + s - 1) * (t_f + t_b)
    formula = bubble_fraction(s, m)
    sim = pp.simulate(kind, s, m, t_f, t_b, c)
    print(f"{kind:5s} S={s} M={m:<2d}: bubble {measured:.3f} vs (S-1)/(M+S-1) "
          f"{formula:.3f} (x{measured / formula:.3f}); with the measured "
          f"message latency {c * 1e3:.2f} ms simulated {sim['bubble']:.3f}; "
          f"step {step * 1e3:.0f} ms vs ideal {ideal * 1e3:.0f} ms "
          f"(x{step / ideal:.3f}); t_f {t_f * 1e3:.1f} ms, t_b {t_b * 1e3:.1f} ms",
          flush=True)
    return {"schedule": kind, "stages": s, "micro_batches": m, "bubble": measured,
            "formula": formula, "bubble_over_formula": measured / formula,
            "simulated_bubble_with_latency": sim["bubble"], "step_s": step,
            "ideal_step_s": ideal, "step_over_ideal": step / ideal,
            "simulated_step_s": sim["step_s"], "fwd_s": t_f, "bwd_s": t_b,
            "message_latency_s": c}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", type=int, default=4)
    p.add_argument("--micro-batches", default="1,4,8,16")
    p.add_argument("--fwd-ms", type=float, default=20.0)
    p.add_argument("--bwd-ms", type=float, default=40.0)
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--runs", type=Path, default=None, metavar="DIR",
                   help="measure the pipeline runs under DIR instead of running any")
    p.add_argument("--results", default=None, metavar="FILE",
                   help="also write the JSON there (benchmarks/results/NAME.json)")
    args = p.parse_args(argv)
    s = args.stages
    results = []
    if args.runs is not None:
        for run_dir in sorted(d for d in args.runs.iterdir() if d.is_dir()):
            sp = load_run(run_dir)
            if sp is None:
                continue
            start = next(r for r in read_jsonl(run_dir / "workers" / "0.jsonl")
                         if r.get("event") == "start")
            results.append({"run": run_dir.name, **measure(
                sp, start["mode"], int(start["stages"]), int(start["micro_batches"]))})
        return _emit({"benchmark": "pipeline_bubbles", "runs": str(args.runs),
                      "results": results}, args.results, argv)
    with tempfile.TemporaryDirectory(prefix="pipeline-bubbles-") as tmp:
        for m in [int(x) for x in args.micro_batches.split(",")]:
            for kind in pp.SCHEDULES:
                t0 = time.time()
                sp = run_once(Path(tmp) / f"{kind}-{m}", s, m, kind, args)
                results.append({**measure(sp, kind, s, m), "wall_s": time.time() - t0})
    return _emit({"benchmark": "pipeline_bubbles", "stages": s, "fwd_ms": args.fwd_ms,
                  "bwd_ms": args.bwd_ms, "iterations": args.iterations,
                  "results": results}, args.results, argv)


def _emit(figures: dict, results_file: str | None, argv: list[str] | None) -> int:
    """Print the JSON line; with --results also write it (benchmarks/render_results.py)."""
    print(json.dumps(figures))
    from render_results import write_results  # benchmarks/, the script's own folder
    write_results(results_file, figures, [sys.argv[0], *(argv or sys.argv[1:])])
    return 0


if __name__ == "__main__":
    sys.exit(main())
