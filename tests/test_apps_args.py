"""In-process tests of the apps' arguments, model sizing and shard layout (no networking)."""
from __future__ import annotations

import pytest

from incastlab.apps import incast, ps, ring
from incastlab.apps.model import build_model, hidden_width, param_count

PS_BASE = ["--rank", "1", "--world-size", "4", "--master", "127.0.0.1:29500",
           "--out", "/tmp/unused", "--role", "worker"]
RING_BASE = ["--rank", "0", "--world-size", "3", "--master", "127.0.0.1:29500",
             "--out", "/tmp/unused"]


def error_of(parse, argv: list[str], capsys: pytest.CaptureFixture) -> str:
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, option", [
    (PS_BASE + ["--slowdown", "2"], "--slowdown"),
    (PS_BASE + ["--slowdown", "2:0.5"], "--slowdown"),
    (PS_BASE + ["--slowdown", "9:2"], "--slowdown"),
    (PS_BASE + ["--slowdown", "0:2"], "--slowdown"),  # rank 0 is the server
    (PS_BASE + ["--mode", "ssp"], "--staleness"),
    (PS_BASE + ["--staleness", "2"], "--staleness"),
    (PS_BASE + ["--mode", "backup"], "--backup-workers"),
    (PS_BASE + ["--mode", "backup", "--backup-workers", "3"], "--backup-workers"),
    (PS_BASE + ["--shards", "0"], "--shards"),
    (PS_BASE + ["--mode", "turbo"], "--mode"),
    (PS_BASE + ["--shards", "4"], "--shards"),
    (PS_BASE + ["--timeout", "0"], "--timeout"),
    (PS_BASE + ["--timeout", "nan"], "--timeout"),
    (PS_BASE + ["--model-size", "100"], "--model-size"),
    (PS_BASE + ["--iterations", "0"], "--iterations"),
    (PS_BASE + ["--master", "nohostport"], "--master"),
    (PS_BASE + ["--master", "h:99999"], "--master"),
    (PS_BASE + ["--rank", "4"], "--rank"),
    (["--role", "server"] + PS_BASE[:-2], "--role"),  # rank 1 is a worker with 1 shard
])
def test_ps_bad_arguments_name_the_option(argv, option, capsys) -> None:
    assert f"argument {option}" in error_of(ps.parse_args, argv, capsys)


@pytest.mark.parametrize("argv, option", [
    (RING_BASE + ["--world-size", "1"], "--world-size"),
    (RING_BASE + ["--impl", "nccl"], "--impl"),
    (RING_BASE + ["--batch-size", "-3"], "--batch-size"),
    (RING_BASE + ["--lr", "abc"], "--lr"),
])
def test_ring_bad_arguments_name_the_option(argv, option, capsys) -> None:
    assert f"argument {option}" in error_of(ring.parse_args, argv, capsys)


@pytest.mark.parametrize("argv, option", [
    (["--role", "client", "--rank", "0", "--out", "x"], "--servers"),
    (["--role", "server", "--rank", "0", "--out", "x"], "--listen"),
    (["--role", "client", "--rank", "0", "--out", "x", "--servers", "a:1,b"], "--servers"),
    (["--role", "client", "--rank", "0", "--out", "x", "--servers", "a:1",
      "--block-size", "0"], "--block-size"),
    (["--role", "server", "--rank", "0", "--out", "x", "--listen", "a:1",
      "--servers", "a:2"], "--servers"),
])
def test_incast_bad_arguments_name_the_option(argv, option, capsys) -> None:
    assert f"argument {option}" in error_of(incast.parse_args, argv, capsys)


@pytest.mark.parametrize("module", [ps, ring, incast])
def test_help_states_units(module, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        module.parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "seconds" in text and "--timeout" in text and "bytes" in text


def test_valid_ps_arguments_parse() -> None:
    args = ps.parse_args(PS_BASE + ["--mode", "ssp", "--staleness", "0",
                                    "--slowdown", "3:2.5", "--slowdown", "2:4"])
    assert args.master == ("127.0.0.1", 29500)
    assert args.slowdown == [(3, 2.5), (2, 4.0)]


@pytest.mark.parametrize("size_m", [0.005, 0.1, 1.0, 10.0])
def test_model_size_controls_parameter_count(size_m: float) -> None:
    h = hidden_width(size_m)
    count = h * h + 76 * h + 10
    assert abs(count - size_m * 1e6) <= 2 * h + 77  # the nearest width, within one step
    if size_m <= 1.0:  # building the 10 M model is fine but slow-ish; count is the formula
        assert param_count(build_model(size_m, seed=0)) == count


def test_shard_bounds_cover_the_vector_once() -> None:
    bounds = ps.shard_bounds(1001, 3)
    assert bounds == [(0, 334), (334, 668), (668, 1001)]


def test_log_lines_stay_strict_json_when_training_diverges(tmp_path) -> None:
    import json

    from incastlab.apps.common import JsonLog

    log = JsonLog(str(tmp_path), 5)
    log.write("iteration", loss=float("nan"), staleness=[1, float("inf")], t=1.5)
    log.close()
    line = (tmp_path / "5.jsonl").read_text()
    assert json.loads(line) == {"event": "iteration", "loss": None, "staleness": [1, None],
                                "t": 1.5}
    assert "NaN" not in line and "Infinity" not in line


def test_an_error_cut_at_300_characters_keeps_no_trailing_space():
    # the stderr line is printed, read and stripped; the logged message must be the same
    # text (tests/test_apps_ps.py compares them), whichever character the cut falls on
    from incastlab.apps.common import first_line
    exc = RuntimeError("x" * 299 + " tail that goes past the cut\nsecond line")
    assert first_line(exc) == "x" * 299
    assert first_line(RuntimeError("short \n more")) == "short"
    assert first_line(RuntimeError("")) == "RuntimeError"
