"""Helpers for root tests on real fabrics (imported by tests/test_*_root.py)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from incastlab import iperf
from incastlab.apps.local import free_port

__all__ = ["free_port", "fidelity", "iperf3_pair", "iperf3_result", "kept_up", "ovs_bridges",
           "relative_seq", "overtaken_segments", "run_complete"]

iperf3_pair = iperf.pair
iperf3_result = iperf.result


def ovs_bridges() -> set[str]:
    out = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def relative_seq(seq, base: int):
    """TCP sequence numbers relative to ``base``, correct across a 2**32 wrap for values
    within 2 GiB of base (any flow of a test run)."""
    import numpy as np

    return (seq.astype(np.int64) - base + 2**31) % 2**32 - 2**31


def overtaken_segments(segments) -> int:
    """Data segments (capture rows of one sender, any flows) that left carrying bytes
    below what their flow had already sent, where no earlier segment had carried that
    byte: originals that something overtook. (Retransmissions, also re-cut ones, start
    inside an earlier segment.) A host that reorders a flow's own data makes these."""
    import numpy as np

    count = 0
    data = segments[segments.payload_len > 0]
    for _key, flow in data.groupby(["src", "dst", "sport", "dport"]):
        start = relative_seq(flow.seq.values, int(flow.seq.iloc[0]))
        end = start + flow.payload_len.to_numpy()
        sent_before = np.concatenate([[start[0]], np.maximum.accumulate(end)[:-1]])
        for i in np.flatnonzero(start < sent_before):  # starts below what was already sent
            if not ((start[:i] <= start[i]) & (end[:i] > start[i])).any():
                count += 1
    return count


def run_complete(run_dir: Path, overrides: list[str]) -> dict:
    """Run the spec of ``overrides`` (on the defaults) into ``run_dir`` through the real
    runner, on a free controller port, and insist that it completed (the manifest's
    reason otherwise). Returns the manifest."""
    from incastlab.runner import check_ready, run_experiment
    from incastlab.spec import load_spec

    spec = load_spec(None, overrides)
    port = free_port()
    status = run_experiment(spec, run_dir, controller_port=port, caps=check_ready(spec, port))
    manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
    assert status == "complete", manifest.get("reason")
    return manifest


def fidelity(run_dir: Path) -> dict:
    """The run's fidelity verdict (analysis/fidelity.py): metrics.json's, the
    authoritative one, computed (the report's numbers, no figures) if the run has no
    metrics.json yet."""
    path = Path(run_dir) / "metrics.json"
    if not path.exists():
        from incastlab.commands.common import build_report

        build_report(run_dir, plots=False)
    verdict = json.loads(path.read_text()).get("fidelity")
    assert isinstance(verdict, dict) and isinstance(verdict.get("kept_up"), bool), \
        f"{run_dir}: metrics.json has no fidelity verdict"
    return verdict


def kept_up(run_dir: Path) -> bool:
    """Whether the emulation kept up in this run, for a rate- or loss-dependent claim
    to gate on: ``if kept_up(run): assert ratio >= floor``. When it did not, the verdict
    must say why (its evidence non-empty, or the test fails), and that is printed so the
    test's output says why the claim was not held to."""
    verdict = fidelity(run_dir)
    if not verdict["kept_up"]:
        assert verdict["evidence"], f"kept_up false without evidence: {verdict}"
        print(f"{Path(run_dir).name}: not held to rate-dependent claims: {verdict['text']}")
    return verdict["kept_up"]
