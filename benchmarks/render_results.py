"""Benchmark figures: written as JSON to benchmarks/results/, rendered into docs/benchmarks.md.

    .venv/bin/python benchmarks/render_results.py           # rewrite docs/benchmarks.md
    .venv/bin/python benchmarks/render_results.py --check   # exit 1 if it is out of date

Every benchmark takes ``--results FILE`` and writes its JSON line there as well
(:func:`write_results`: the figures plus the command that made them). A file whose
``source`` says "transcribed" holds figures of an earlier run of that benchmark, copied
from the lab notebook the README once was, in the fields the benchmark writes (a pair
[low, high] where only a range across runs was kept). Files of ``"benchmark": "runs"``
hold what lab runs measured (a spec's sweep, a root test's run) as tables.
The page is a pure function of the files (``render``), so a test compares it.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"


def write_results(path: str | Path | None, figures: dict, argv: list[str] | None = None
                  ) -> None:
    """Write a benchmark's figures to ``path`` (nothing when it is None or empty)."""
    if not path:
        return
    argv = sys.argv if argv is None else argv
    data = {**figures, "source": "measured by this command",
            "command": ".venv/bin/python " + shlex.join(
                [os.path.relpath(Path(argv[0]).resolve(), ROOT), *argv[1:]])}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


# ----------------------------------------------------------------------------- formatting


def fmt(value, spec: str = "") -> str:
    """A cell: a [low, high] pair as 'low–high', None as '', a number by ``spec``."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "–".join(fmt(v, spec) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if spec and isinstance(value, int | float):
        return format(value, spec)
    return str(value)


def table(headers: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return out + [""]


def columns(records: list[dict], spec: list[tuple[str, str, str]]) -> list[str]:
    """A table of ``records`` with (header, key, format) columns."""
    return table([h for h, _, _ in spec],
                 [[fmt(r.get(k), f) for _, k, f in spec] for r in records])


def _notes(data: dict) -> list[str]:
    return [f"- {n}" for n in data.get("notes", [])] + ([""] if data.get("notes") else [])


# ----------------------------------------------------------------------------- per benchmark


def _allreduce(data: dict) -> list[str]:
    keys = ("bandwidth_mbps", "size_bytes", "reps", "mtu", "slow_start_after_idle")
    out = ["Settings: " + ", ".join(f"{k} {fmt(data.get(k))}" for k in keys
                                    if data.get(k) is not None) + ".", ""]
    records = [dict(r, saturated=r.get("datapath_saturated")) for r in data["results"]]
    spec = [("algo", "algo", ""), ("phase", "phase", ""), ("N", "n", "")]
    spec += [(k, k, "") for k in ("mtu", "slow_start_after_idle", "ratio", "framed_ratio")
             if any(k in r for r in records)]
    spec += [("datapath at its CPU ceiling", "saturated", "")]
    out += columns(records, spec)
    if data.get("summary"):
        s = data["summary"]
        out += [f"The ring at {fmt(s['efficiency_percent'])} % of its bound (the target: "
                f"{data['target_efficiency']:.0%}), within "
                + " and ".join(f"{v} % (N = {n})" for n, v in s["within_framing_percent"]
                               .items()) + " of what its framing allows.", ""]
    return out


def _pipeline(data: dict) -> list[str]:
    out = [f"S = {data['stages']} stages, forward {data['fwd_ms']:g} ms, backward "
           f"{data['bwd_ms']:g} ms" + (f", {data['iterations']} iterations" if
                                        data.get("iterations") else "") + ".", ""]
    records = [dict(r, latency_ms=_ms(r.get("message_latency_s"))) for r in data["results"]]
    return out + columns(records, [
        ("schedule", "schedule", ""), ("M", "micro_batches", ""),
        ("(S−1)/(M+S−1)", "formula", ".3f"), ("measured bubble", "bubble", ".3f"),
        ("/ formula", "bubble_over_formula", ".3f"), ("message latency, ms", "latency_ms", ".1f"),
        ("simulated with that latency", "simulated_bubble_with_latency", ".3f")])


def _ms(seconds):
    if seconds is None:
        return None
    return [s * 1e3 for s in seconds] if isinstance(seconds, list) else seconds * 1e3


def _routing(data: dict) -> list[str]:
    out = [f"{data['spines']} spines × {data['leaves']} leaves × {data['hosts_per_leaf']} "
           f"hosts, {data['host_bw_mbps']:g} Mbit/s hosts, bisection "
           f"{data['bisection_mbps']:g} Mbit/s, {data['repeats']} repetitions × "
           f"{data['seconds']:g} s.", ""]
    return out + columns(data["summary"], [
        ("policy", "policy", ""), ("flows", "flows", ""),
        ("load ratio mean", "load_ratio_mean", ".2f"), ("worst", "load_ratio_max", ".2f"),
        ("throughput / bisection", "throughput_fraction_mean", ".2f")])


def _fabric(data: dict) -> list[str]:
    out = []
    if data.get("rates"):
        out += ["Rates (2×2×4, policy spread):", ""] + columns(data["rates"], [
            ("host rate, Mbit/s", "rate_mbps", "g"), ("flows", "flows", ""),
            ("achieved / configured", "ratio", ".3f"),
            ("/ goodput ceiling", "ratio_to_ceiling", ".2f")])
    if data.get("bringup"):
        b = data["bringup"]
        out += [f"Bring-up of a {b['fabric']} fabric: {b['incastlab_up_s']} s against stock "
                f"Mininet's {b['stock_up_s']} s (ratio {b['up_ratio']}); teardown "
                f"{b['incastlab_down_s']} s against {b['stock_down_s']} s (ratio "
                f"{b['down_ratio']}).", ""]
    if data.get("mtu"):
        out += ["MTU 1500 against 9000 (4 flows through leaf, spine, leaf):", ""]
        out += columns([dict(r, ovs=_pct(r.get("vswitchd_mean_core_share")))
                        for r in data["mtu"]], [
            ("MTU", "mtu", ""), ("per host", "rate_mbps", "g"),
            ("configured", "configured_aggregate_mbps", ",.0f"),
            ("achieved", "aggregate_mbps", ",.0f"), ("ratio", "ratio", ".3f"),
            ("/ ceiling", "ratio_to_ceiling", ".3f"), ("ovs-vswitchd", "ovs", ""),
            ("core-s per Gbit", "vswitchd_core_s_per_gbit", ".2f")])
    return out


def _pct(share):
    return None if share is None else f"{share:.0%}"


def _parse(data: dict) -> list[str]:
    r = data["results"]
    base = r["project"]["cpu_rate_pps"]
    rows = [[name, f"{v['cpu_rate_pps']:,.0f}", _relative(v["cpu_rate_pps"] / base),
             fmt(_mb(v), ",.0f") + " MB"]
            for name, v in r.items() if "cpu_rate_pps" in v and name != "project_big"]
    out = ["Packets/s by CPU time:", ""] + table(
        ["parser", "packets/s", "relative to incastlab", "peak memory"], rows)
    big = r.get("project_big")
    if big:
        out += [f"A {big['packets']:,}-packet capture (real records repeated): "
                f"{fmt(big['cpu_rate_pps'], ',.0f')} packets/s, "
                f"{fmt(_mb(big), ',.0f')} MB peak.", ""]
    if r.get("memory_table"):
        out += ["Memory of the analysis:", ""] + table(*r["memory_table"])
    return out


def _memory(data: dict) -> list[str]:
    rows = [r for r in data["results"] if "hwm_kb" in r]
    if not rows:
        return []
    base = rows[0]
    out = [f"Peak RSS of `incastlab report` (its own VmHWM) on synthetic runs "
           f"(`analysis.synthetic.make_bulk_run`), against the smallest run's peak, "
           f"measured in the same run; the target is at most {data['target_peak_gb']:g} GB "
           f"at any size. The imports alone: {data['imports_only_kb'] / 1024:,.0f} MB.", ""]
    table_rows = []
    for r in rows:
        extra = r["run"]["packets"] - base["run"]["packets"]
        above = (r["hwm_kb"] - base["hwm_kb"]) * 1024 / extra if extra else None
        table_rows.append([f"{r['run']['packets']:,}", "exact" if r["exact_samples"]
                           else "sketch", f"{r['rtt_samples']:,}", f"{r['sojourns']:,}",
                           f"{r['hwm_kb'] / 1024:,.0f} MB", f"{r['hwm_kb'] / base['hwm_kb']:.2f}",
                           fmt(above, ".1f"), f"{r['seconds'] / 60:.0f}"])
    return out + table(["packets", "latency samples", "RTT samples", "sojourns",
                        "peak RSS", "/ smallest", "bytes a packet above the smallest",
                        "report, min"], table_rows)


def _observer(data: dict) -> list[str]:
    # a row per workload and clock: wall-clock ("" prefix), and the rank's CPU time when
    # the file has it ("cpu_")
    rows = [[r["workload"], clock, f"{r[x + 'plain_step_ms']:.2f}",
             f"{r[x + 'observed_step_ms']:.2f}", f"{r[x + 'ratio']:.3f}",
             f"{min(r[x + 'pair_ratios']):.3f}–{max(r[x + 'pair_ratios']):.3f}"]
            for r in data["results"]
            for clock, x in (("wall-clock", ""), ("CPU", "cpu_")) if x + "ratio" in r]
    return [f"A script's median optimizer step with the observer against the same script "
            f"without it, measured in the same run ({data['ranks']} torchrun nodes on "
            f"loopback, {data['repetitions']} launches a condition in ABBA order, "
            f"{data['steps']} timed steps after {data['warmup']}); the target ratio is at "
            f"most {data['target_ratio']:g}. The machine's 1-minute load average, before "
            f"and after: {fmt(data.get('load_average_1min'), '.1f')} on {data.get('cpus')} "
            f"cores.", ""] + table(
        ["script", "clock", "step without, ms", "step with, ms", "ratio",
         "ABBA pairs' ratios"], rows)


def _relative(x: float) -> str:
    """A rate relative to ours: '1', '1/23' when slower, '×1.06' when faster."""
    return "1" if abs(x - 1) < 1e-9 else f"1/{1 / x:.0f}" if x < 1 else f"×{x:.2f}"


def _mb(r: dict):
    """Peak memory in MB as the benchmark prints it (maxrss_kb / 1024)."""
    return r["maxrss_mb"] if "maxrss_mb" in r else r["maxrss_kb"] / 1024


def _mutation(data: dict) -> list[str]:
    rows = [[m, f"{v['mutants']:,}", f"{v['killed']:,}", f"{v['score']:.1%}",
             fmt(v.get("score_before"), ".1%"), fmt(v.get("equivalent"))]
            for m, v in data["modules"].items()]
    return table(["module", "mutants", "killed", "score", "before the mutation tests",
                  "survivors reviewed as equivalent"], rows)


def _runs(data: dict) -> list[str]:
    out = []
    for t in data.get("tables", []):
        out += ([t["title"], ""] if t.get("title") else []) + table(t["columns"], t["rows"])
    return out


RENDERERS = {"allreduce_efficiency": _allreduce, "pipeline_bubbles": _pipeline,
             "routing_balance": _routing, "fabric_fidelity": _fabric, "parse_pcap": _parse,
             "mutation_score": _mutation, "runs": _runs, "analysis_memory": _memory,
             "observer_overhead": _observer}


# ----------------------------------------------------------------------------- the page

HEADER = """# Benchmark and run figures

Rendered by `benchmarks/render_results.py` from `benchmarks/results/*.json`; do not edit
by hand (`tests/test_benchmark_results.py` fails when this page and the files disagree).
Each benchmark prints a table of ratios against a baseline measured in the same run and
ends with one JSON line; re-measure with the command under each heading, adding
`--results benchmarks/results/NAME.json` to write its file, then run the render script.
Timings are measured, never asserted by tests. Figures are from a 2-core machine with
the userspace datapath; "flagged" runs had a saturated CPU or datapath
([emulation.md](emulation.md), "Fidelity").
"""


def slug(title: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def render(results_dir: Path = RESULTS) -> str:
    files = [(path, json.loads(path.read_text()))
             for path in sorted(results_dir.glob("*.json"))]
    out = [HEADER]
    for kind, label in (("bench", "Benchmarks"), ("runs", "Lab runs")):
        titles = [d.get("title", p.stem) for p, d in files
                  if (d["benchmark"] == "runs") == (kind == "runs")]
        if titles:
            out += [f"{label}:", ""] + [f"- [{t}](#{slug(t)})" for t in titles] + [""]
    for path, data in files:
        out += [f"## {data.get('title', path.stem)}", "",
                f"`benchmarks/results/{path.name}`: {data['source']}.", "",
                "```sh", data["command"], "```", ""]
        if data.get("conditions"):
            out += [data["conditions"], ""]
        out += RENDERERS[data["benchmark"]](data) + _notes(data)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    args = p.parse_args(argv)
    page = render()
    if args.check:
        return 0 if PAGE.exists() and PAGE.read_text() == page else 1
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
