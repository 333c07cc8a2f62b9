"""Rootless tests of what the runner measures: tcpdump's exit counters, the CPU
saturation rule, the short CLI summary and the run lock."""
import json
import os
import subprocess
import sys
import textwrap

from incastlab.capture.cpu import CpuMonitor
from incastlab.capture.pcap import parse_tcpdump_stats
from incastlab.commands.common import short_summary
from incastlab.lock import LockHeld, RunLock


def test_tcpdump_exit_counters():
    text = ("tcpdump: listening on h1-eth0, link-type EN10MB (Ethernet), snapshot length 128 "
            "bytes\n1234 packets captured\n1240 packets received by filter\n"
            "6 packets dropped by kernel\n")
    assert parse_tcpdump_stats(text) == {"captured": 1234, "received": 1240,
                                         "dropped_by_kernel": 6, "dropped_by_interface": None}
    assert parse_tcpdump_stats("")["captured"] is None


def test_cpu_saturation_rule_covers_machine_and_datapath():
    mon = CpuMonitor()
    mon.busy, mon.vswitchd = [0.5] * 10, [0.95] * 3 + [0.3] * 7
    s = mon.summary()
    assert s["datapath_saturated"] and not s["machine_saturated"] and s["saturated"]
    mon.busy, mon.vswitchd = [0.99] * 1 + [0.4] * 9, [0.2] * 10
    assert not mon.summary()["saturated"]
    mon.busy = [0.99] * 2 + [0.4] * 8
    assert mon.summary()["machine_saturated"]


def test_short_summary_reads_metrics(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({
        "run": {"status": "aborted", "reason": "interrupted"},
        "headline": {"tc_drops": 12.0, "rtos": 3, "goodput_mbps": None},
        "problems": ["CPU saturated"]}))
    text = short_summary(tmp_path)
    assert "aborted (interrupted)" in text and "queue drops (tc): 12 packets" in text
    assert "retransmission timeouts: 3" in text and "goodput" not in text
    assert "warning: CPU saturated" in text


def test_second_lock_holder_is_refused_with_the_first_named(tmp_path):
    path = tmp_path / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from incastlab.lock import RunLock
        RunLock(Path({str(path)!r})).acquire("/runs/first")
        print("held", flush=True)
        time.sleep(30)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = RunLock(path)
        assert f"pid {holder.pid}" in lock.holder() and "/runs/first" in lock.holder()
        try:
            lock.acquire("/runs/second")
            raise AssertionError("a second run took the lock")
        except LockHeld as exc:
            assert "/runs/first" in str(exc)
    finally:
        holder.kill()
        holder.wait()
    lock = RunLock(path)
    assert lock.holder() is None  # a dead holder's lock is free again
    lock.acquire("/runs/third")
    lock.release()
    assert os.path.exists(path)


def test_asking_who_holds_the_lock_never_makes_a_run_refuse(tmp_path):
    """Issue 28: holder() (asked by `incastlab clean` and preflight) took the lock for an
    instant to test it, so a run acquiring at that instant refused with LockHeld. Here a
    reader process asks holder() in a loop while this process takes and drops the lock
    over and over: no acquire may be refused. (Red with the flock test: 14-51 of about
    1,100-1,400 acquires refused in each of four runs.) What holder() says of a live or
    dead holder, and of a free lock: test_second_lock_holder_is_refused_with_the_first_named."""
    path = tmp_path / "run.lock"
    calls = 3000
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from pathlib import Path
        from incastlab.lock import RunLock
        lock = RunLock(Path({str(path)!r}))
        print("ready", flush=True)
        said = [lock.holder() for _ in range({calls})]
        print(sum(s is None for s in said), sum(s is not None for s in said), flush=True)
    """)], stdout=subprocess.PIPE, text=True)
    refused = acquired = 0
    try:
        assert reader.stdout.readline().strip() == "ready"
        lock = RunLock(path)
        while reader.poll() is None:
            try:
                lock.acquire("/runs/busy")
            except LockHeld:
                refused += 1
                continue
            acquired += 1
            lock.release()
        free, held = map(int, reader.stdout.readline().split())
    finally:
        reader.kill()
        reader.wait()
    assert free + held == calls  # the reader's every question was answered
    assert acquired > 0 and refused == 0, (acquired, refused)


def test_queue_sampler_survives_a_malformed_tc_sample(tmp_path, monkeypatch):
    """A tc output that is not JSON (seen once in a demo run) is skipped and counted;
    the sampler goes on and queues.csv keeps the good samples."""
    import json as _json
    import signal

    from incastlab.capture import queues

    good = _json.dumps([{"dev": "lf1-eth1", "handle": "10:", "backlog": 0, "qlen": 3,
                         "drops": 1, "bytes": 10, "packets": 1}])
    counter = tmp_path / "n"
    fake = tmp_path / "bin" / "tc"
    fake.parent.mkdir()
    # the third call prints broken JSON; the fourth, good again, then stops the sampler
    # with SIGTERM as the runner does: four samples whatever the machine's speed (a
    # deadline of 0.3 s needed >= 3 tc calls in it, each a fork of sh and cat)
    fake.write_text("#!/bin/sh\nn=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); "
                    "echo $n > %s\nif [ $n -eq 3 ]; then echo '[{\"dev\" \"x\"}]'; "
                    "else echo '%s'; fi\nif [ $n -eq 4 ]; then kill -TERM $PPID; fi\n"
                    % (counter, counter, good))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    out = tmp_path / "queues.csv"
    # the sampler installs its SIGTERM/SIGINT handlers in this (pytest's) process
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        # the deadline only ends a sampler that missed the SIGTERM (then samples > 4)
        stats = queues.sample_forever({"lf1-eth1"}, 0.01, str(out), duration_s=30)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    rows = out.read_text().splitlines()[1:]
    assert stats["samples"] == 4 and stats["bad_samples"] == 1
    assert "Expecting" in stats["first_bad_sample"]
    assert len(rows) == 3
    assert _json.loads((tmp_path / "queues.csv.meta.json").read_text()) == stats
