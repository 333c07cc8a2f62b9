"""Benchmark figures live in benchmarks/results/*.json and docs/benchmarks.md is rendered
from them (benchmarks/render_results.py): the page matches the files, every file says
where its figures came from and with which command, and every benchmark can write its
file (--results)."""
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
FILES = sorted((BENCH / "results").glob("*.json"))
HELPERS = {"render_results.py", "parse_pcap_parsers.py"}


def _render_module():
    spec = importlib.util.spec_from_file_location("render_results", BENCH / "render_results.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("render_results", mod)
    spec.loader.exec_module(mod)
    return mod


def test_the_page_is_rendered_from_the_files():
    assert (ROOT / "docs" / "benchmarks.md").read_text() == _render_module().render(), \
        "run .venv/bin/python benchmarks/render_results.py"


def test_every_file_names_its_source_and_command():
    benchmarks = {p.stem for p in BENCH.glob("*.py")} - {h[:-3] for h in HELPERS}
    assert FILES
    for path in FILES:
        data = json.loads(path.read_text())
        assert data["benchmark"] in benchmarks | {"runs"}, path.name
        assert data["source"] and data["command"], path.name
        if data["benchmark"] != "runs":  # its file is named after it, its command runs it
            assert path.name.split(".")[0] == data["benchmark"], path.name
            assert f"benchmarks/{data['benchmark']}.py" in data["command"], path.name


def test_every_benchmark_takes_results():
    for path in BENCH.glob("*.py"):
        if path.name not in HELPERS:
            assert '"--results"' in path.read_text(), path.name


def test_write_results_then_render(tmp_path: Path):
    mod = _render_module()
    figures = {"benchmark": "routing_balance", "bisection_mbps": 80, "spines": 2, "leaves": 2,
               "hosts_per_leaf": 4, "host_bw_mbps": 20, "seconds": 4, "repeats": 1,
               "summary": [{"policy": "ecmp", "flows": 8, "load_ratio_mean": 1.08,
                            "load_ratio_max": 1.38, "throughput_fraction_mean": 0.89}]}
    out = tmp_path / "routing_balance.json"
    mod.write_results(out, figures, [str(BENCH / "routing_balance.py"), "--repeats", "1"])
    data = json.loads(out.read_text())
    assert data["command"] == ".venv/bin/python benchmarks/routing_balance.py --repeats 1"
    page = mod.render(tmp_path)
    assert "| ecmp | 8 | 1.08 | 1.38 | 0.89 |" in page
    mod.write_results(None, figures)  # no file asked for: nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["routing_balance.json"]
