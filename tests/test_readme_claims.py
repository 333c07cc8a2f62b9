"""The README's numbers that follow from the code, checked against the README's own text.

Each test reads the claim out of README.md as written and recomputes it from the code
(the cost model, the spec defaults, the link and controller constants), so a change to
either side that breaks the claim fails here. Numbers a run measures are held by root
tests and benchmarks instead: tests/README.md lists every claim and its test.
A figure "agrees" when the computed value rounds to it at the precision the README prints
(one unit of its last digit).
"""
import re
import tomllib
from pathlib import Path

import pytest

from incastlab.analysis import costmodel as cm
from incastlab.jobs import ps_bound as ps_bounds
from incastlab.jobs import ring_bound as ring_bounds
from incastlab.fabric import storm_limit_pps
from incastlab.spec import loads_spec

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _agrees(computed: float, stated: str) -> bool:
    """`stated` (e.g. '0.569') is `computed` written to its digits (truncated or rounded)."""
    digits = len(stated.split(".")[1]) if "." in stated else 0
    return abs(computed - float(stated)) < 10 ** -digits


def _demo_row(name: str) -> list[str]:
    m = re.search(rf"^\| {re.escape(name)} \|(.*)\|$", README, re.M)
    assert m, f"README has no demo table row {name!r}"
    return [c.strip() for c in m.group(1).split("|")]


def _demo():
    spec = tomllib.loads((ROOT / "specs" / "demo.toml").read_text())
    return spec["workload"]["workers"], spec["workload"]["model_size"] * 4, \
        spec["topology"]["host_bw_mbps"]


def test_demo_table_states_its_configuration():
    workers, model_bytes, rate = _demo()
    m = re.search(r"The demo, measured [\d-]+ \(\d+ repetitions each; (\d+) workers, "
                  r"M = (\d+) MB, (\d+) Mbit/s[;)]", README)
    assert m, "the demo table's caption"
    assert (int(m.group(1)), int(m.group(2)) * 1_000_000, float(m.group(3))) == (
        workers, model_bytes, rate)


def test_demo_bounds_are_the_cost_models():
    workers, model_bytes, rate = _demo()
    ps, ring = _demo_row("sync PS"), _demo_row("ring")
    ps_bound = ps_bounds.ps_bound(workers, 1, model_bytes, rate)
    ring_bound = ring_bounds.ring_bound(workers, model_bytes, rate)
    assert _agrees(ps_bound.seconds, ps[1].removesuffix(" s")), (ps_bound.seconds, ps[1])
    assert _agrees(ring_bound.seconds, ring[1].removesuffix(" s")), (ring_bound.seconds, ring)


def _range(cell: str) -> tuple[str, str]:
    """'2.34–2.47 s' -> ('2.34', '2.47'); '1.67 s' -> ('1.67', '1.67')."""
    text = cell.split()[0]
    low, _, high = text.partition("–")
    return low, high or low


def test_demo_ps_row_adds_up():
    """iteration = bound + the job's schedule, and comm / bound = iteration / bound, at
    each end of the measured ranges (the sync PS computes 3 ms: nothing at this
    precision); the sentence below the table repeats the bound and the schedule."""
    it, bound, ratio, schedule = (_range(c) for c in _demo_row("sync PS")[:4])
    b = float(bound[0])
    for end in (0, 1):
        assert float(it[end]) == pytest.approx(b + float(schedule[end]), abs=0.011), end
        assert _agrees(float(it[end]) / b, ratio[end]), (it[end], ratio[end])
    text = _flat(README)
    assert f"through the PS port ({bound[0]} s) plus its push-then-pull schedule " \
           f"({schedule[0] if schedule[0] == schedule[1] else '–'.join(schedule)} s)" in text


def test_framing_factors_stated_are_the_models():
    text = _flat(README)
    m = re.search(r"which makes (1\.\d+) for the PS push", text)
    assert m and _agrees(cm.framing_factor(), m.group(1))
    m = re.search(r"which makes about (1\.\d+) for the ring", text)
    assert m and _agrees(cm.ack_framing(), m.group(1))
    m = re.search(r"\(f′ = (1\.\d+)\)", text)
    assert m and _agrees(cm.ack_framing(), m.group(1))


def test_ring_benchmark_sentence_matches_its_table():
    """'91–93 % of the bound (the target is 90 %, ratio ≤ 1.11), within 0.5 % (N = 4) and
    3 % (N = 8) of what its framing allows' against the table's ring row."""
    text = _flat(README)
    m = re.search(r"the ring runs at (\d+)–(\d+) % of the bound\*\* \(the target is (\d+) %, "
                  r"ratio ≤ (1\.\d+)[;)]", text)
    assert m, "the ring benchmark's headline"
    low, high, target, ratio_max = (float(x) for x in m.groups())
    assert 1 / ratio_max >= target / 100 > 1 / (ratio_max + 0.01)  # 1.11 is 90 %
    row = re.search(r"^\| our ring \(send/recv, pipelined slices\) \| ([\d.]+)–([\d.]+) \| "
                    r"([\d.]+)–([\d.]+) \|$", README, re.M)
    assert row, "the ring row of the allreduce table"
    n4_lo, n4_hi, n8_lo, n8_hi = (float(x) for x in row.groups())
    efficiencies = [100 / r for r in (n4_lo, n4_hi, n8_lo, n8_hi)]
    assert round(min(efficiencies)) >= low and round(max(efficiencies)) <= high
    assert max(n4_hi, n8_hi) <= ratio_max
    m = re.search(r"within ([\d.]+) % \(N = 4\) and ([\d.]+) % \(N = 8\) of what its "
                  r"framing allows", text)
    assert m
    f = cm.ack_framing()
    assert (n4_hi / f - 1) * 100 <= float(m.group(1))
    assert (n8_hi / f - 1) * 100 <= float(m.group(2))


def test_defaults_the_readme_states():
    spec = loads_spec("")
    text = _flat(README)
    assert re.search(r"`queues.csv` \(every switch egress queue every (\d+) ms\)", text) \
        .group(1) == f"{spec.capture.queue_sample_ms:g}"
    assert "(CUBIC by default;" in text and spec.topology.congestion_control == "cubic"
    from incastlab.topologies.links import FLOW_CLASSES
    m = re.search(r"qdisc \(fq_codel, fq; not in this kernel\): (\d+) FIFOs", text)
    assert m and m.group(1) == str(FLOW_CLASSES)


def test_controller_listens_on_loopback_only():
    assert "listens on 127.0.0.1 only" in _flat(README)
    import incastlab.controller.__main__ as launcher
    assert launcher.LISTEN_HOST == "127.0.0.1"


def test_storm_limit_sits_between_pings_and_a_storm():
    """'a learning switch made 2,500–7,000 packets/s, against at most about 100 for the
    readiness pings' on 2 spines x 2 leaves x 2 hosts: the limit must part the two."""
    m = re.search(r"made ([\d,]+)–([\d,]+) packets/s, against at most about (\d+) for the "
                  r"readiness pings", _flat(README))
    assert m
    storm_low, pings = int(m.group(1).replace(",", "")), int(m.group(3))
    assert pings < storm_limit_pps(4) < storm_low
