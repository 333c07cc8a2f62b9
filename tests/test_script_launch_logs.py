"""torchrun keeps its folders in the run: a loopback launch with the script job's own
command lines (jobs/script_launch.py) leaves no ``torchelastic_*`` folder in the temp
directory, and its log folder is under the workers' output."""
from __future__ import annotations

from incastlab.apps.local import LocalJob, free_port
from incastlab.jobs.script_launch import TORCHRUN_LOGS, loopback_torchrun

SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(10))
dist.destroy_process_group()
"""


def test_a_loopback_launch_leaves_no_torchelastic_folder_in_tmp(tmp_path, monkeypatch):
    """The ranks' TMPDIR is a folder of this test's own, so the listing before and after
    sees only this launch (other torchruns on the machine write to /tmp); torchrun's
    mkdtemp honours TMPDIR as it would /tmp. Red without PET_LOG_DIR: one
    torchelastic_* folder per node."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    before = sorted(p.name for p in tmp.glob("torchelastic_*"))
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    out = tmp_path / "workers"
    with LocalJob(tmp_path / "procs") as job:
        for i, argv in enumerate(loopback_torchrun(2, out, free_port(), str(path))):
            job.start(i, argv)
        codes = job.wait(180)
    assert codes == {0: 0, 1: 0}, [job.stderr(i) for i in (0, 1)]
    assert before == [] and sorted(p.name for p in tmp.glob("torchelastic_*")) == []
    # each node's run folder (rdzv id "none"), with its attempt's rank folder
    runs = sorted((out / TORCHRUN_LOGS).glob("none_*"))
    assert len(runs) == 2 and all((r / "attempt_0" / "0").is_dir() for r in runs)
