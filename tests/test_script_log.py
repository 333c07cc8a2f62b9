"""The script observer's log (apps/script_log.py): the template's lines are the JSON
encoder's to the byte, and a line is in the file once written, even when the process is
SIGKILLed right after (no user-space buffer to lose)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from incastlab.apps import script_log
from incastlab.apps.local import read_jsonl

RECORDS = [
    {"seq": 0, "op": "all_reduce", "call": "all_reduce", "bytes": 4000, "group_size": 2,
     "peer": None, "async_op": False, "step": 3, "t_start": 1796482946.6183634,
     "t_end": 1796482946.6183639},
    {"seq": 7, "op": "recv", "call": "irecv", "bytes": 200, "group_size": 1, "peer": 0,
     "async_op": True, "step": 0, "t_start": 1.5, "t_end": 2.25},
    {"seq": 9, "op": "all_reduce", "call": "ddp_bucket", "bytes": 1 << 33,
     "group_size": None, "peer": None, "async_op": True, "step": 12, "t_start": 1e-7,
     "t_end": 3.0, "bucket": 4},
]


def test_template_lines_are_the_encoders_lines(tmp_path):
    fast, slow = script_log.RecordLog(str(tmp_path / "a"), 0), \
        script_log.RecordLog(str(tmp_path / "b"), 0)
    for rec in RECORDS:
        assert script_log._collective_line(rec) is not None  # the template was used
        fast.collective(rec)
        slow.write("collective", **rec)
    fast.close()
    slow.close()
    assert open(fast.path, "rb").read() == open(slow.path, "rb").read()
    assert read_jsonl(fast.path) == [{"event": "collective", **r} for r in RECORDS]


def test_unusual_fields_fall_back_to_the_encoder(tmp_path):
    log = script_log.RecordLog(str(tmp_path), 1)
    odd = [dict(RECORDS[0], peer=True), dict(RECORDS[0], op='all"reduce'),
           dict(RECORDS[0], t_end=float("nan")), dict(RECORDS[0], extra=1),
           dict(RECORDS[0], group_size=1.0)]
    for rec in odd:
        assert script_log._collective_line(rec) is None
        log.collective(rec)
    log.close()
    lines = open(log.path).read().splitlines()
    assert [json.loads(ln) for ln in lines][2]["t_end"] is None  # NaN -> null
    assert json.loads(lines[1])["op"] == 'all"reduce' and json.loads(lines[0])["peer"] is True


def test_a_line_written_survives_sigkill_at_once(tmp_path):
    code = ("import os, signal\nfrom incastlab.apps import script_log\n"
            f"log = script_log.RecordLog({str(tmp_path)!r}, 2)\n"
            f"for r in {RECORDS!r}:\n    log.collective(r)\n"
            "log.write('iteration', iteration=0)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=os.environ, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert [e["event"] for e in read_jsonl(tmp_path / "2.jsonl")] == \
        ["collective"] * len(RECORDS) + ["iteration"]
