"""The ECN sampler's readiness (incastlab/capture/ecn_sampler.py): the run waits for its
first sample before the workload starts, so a short run still has ecn.csv. Unit tier:
a sampler that cannot read its map is refused with why; root tier: a real pinned array
map in a private bpffs, the sampler stopped as soon as it is ready."""
from __future__ import annotations

import os
import signal
import subprocess

import pandas as pd
import pytest

from incastlab.bpffs import unmount
from incastlab.capture import ecn_sampler
from incastlab.ecn import STAT_FIELDS, STATS_SIZE
from incastlab.topologies.runformat import ECN_COUNTERS

SLOTS = {0: "lf1-eth1", 1: "lf1-eth3"}


def _stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)


def test_a_sampler_without_its_map_is_refused_naming_the_file(tmp_path):
    out = tmp_path / "ecn.csv"
    proc = ecn_sampler.start(tmp_path / "no-such-map", SLOTS, out, 200)
    try:
        with pytest.raises(ecn_sampler.SamplerNotReady, match="exited.*ecn.csv"):
            ecn_sampler.wait_first_sample(proc, out, 30)
    finally:
        if proc.poll() is None:
            _stop(proc)


@pytest.mark.root
def test_a_run_stopped_as_soon_as_the_sampler_is_ready_has_its_counters(tmp_path):
    """The race of a 2 s run: the stop comes right after the start. Without the wait the
    SIGTERM lands while Python is still importing, and there is no ecn.csv at all."""
    fs = tmp_path / "bpffs"
    fs.mkdir()
    subprocess.run(["mount", "-t", "bpf", "bpf", str(fs)], check=True)
    try:
        stats = fs / "stats"
        subprocess.run(["bpftool", "map", "create", str(stats), "type", "array", "key", "4",
                        "value", str(STATS_SIZE), "entries", "2", "name", "ecn_ready_t"],
                       check=True)
        out = tmp_path / "ecn.csv"
        proc = ecn_sampler.start(stats, SLOTS, out, 200)
        try:
            ecn_sampler.wait_first_sample(proc, out, 60)
        finally:
            _stop(proc)
        df = pd.read_csv(out)
        assert list(df.columns) == ECN_COUNTERS.fields
        assert set(df["iface"]) == set(SLOTS.values())
        assert (df[list(STAT_FIELDS)] == 0).all().all()
    finally:
        unmount(fs)
