"""The script job (``kind = "script"``): its fields and checks, its launch plan, its
teardown with the runner's own stop, its bound by hand and its tables from a run."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from incastlab.analysis.alphabeta import ack_framing, framing_factor
from incastlab.apps.local import free_port
from incastlab.jobs import JOBS
from incastlab.jobs.script_bound import collective_bound, exposed_buckets_s, step_bounds
from incastlab.jobs.script_launch import boot_dir, loopback_torchrun
from incastlab.spec import SpecError, load_spec

IPS = {f"h{n}": f"10.0.{(n - 1) // 3 + 1}.{(n - 1) % 3 + 1}" for n in range(1, 7)}
BASE = ["topology.leaves=2", "topology.hosts_per_leaf=3", "workload.kind='script'"]


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("import torch\nprint('hi')\n")
    return path


def spec_of(*sets):
    return load_spec(None, BASE + list(sets))


def test_launch_runs_torchrun_on_each_host_with_the_fabric_interface(script):
    spec = spec_of(f"workload.script='{script}'", "workload.workers=4",
                   "workload.args=['--epochs', '2']")
    plan = JOBS["script"].launches(spec, IPS, "/run/workers")
    hosts = spec.placement().workers
    assert [la.host for la in plan] == list(hosts) and [la.rank for la in plan] == [0, 1, 2, 3]
    master = IPS[hosts[0]]
    for i, la in enumerate(plan):
        argv = la.argv
        assert argv[0] == "/usr/bin/env" and la.role == "script" and la.counts_iterations
        env = dict(a.split("=", 1) for a in argv[1:argv.index("-m") - 1])
        assert env["GLOO_SOCKET_IFNAME"] == f"{la.host}-eth0"
        assert env["INCASTLAB_OBSERVE_OUT"] == "/run/workers"
        assert env["PYTHONPATH"].split(os.pathsep)[0] == boot_dir()
        assert "INCASTLAB_MAP_NCCL" not in env
        rest = argv[argv.index("-m"):]
        assert rest == ["-m", "torch.distributed.run", "--nnodes", "4", "--node-rank", str(i),
                        "--nproc-per-node", "1", "--master-addr", master, "--master-port",
                        "29500", str(script), "--epochs", "2"]
    assert (Path(boot_dir()) / "sitecustomize.py").is_file()


def test_options_module_observe_and_mapping(script):
    spec = spec_of("workload.module='json.tool'", "workload.workers=2",
                   "workload.observe=false", "workload.map_nccl_to_gloo=true")
    argv = JOBS["script"].launches(spec, IPS, "/w")[1].argv
    assert argv[-2:] == ["--module", "json.tool"]
    assert "INCASTLAB_MAP_NCCL=1" in argv and not any(
        a.startswith("INCASTLAB_OBSERVE_OUT=") for a in argv)


@pytest.mark.parametrize("sets, message", [
    (["workload.script='nope.py'"], "workload.script: 'nope.py' does not exist"),
    (["workload.script='BINARY'"], "is not a Python script"),
    (["workload.script='SYNTAX'"], "is not a Python script (line 1: "),
    ([], "workload.script: set either workload.script"),
    (["workload.script='OK'", "workload.module='json'"], "not both"),
    (["workload.module='no_such_module_here'"], "workload.module: 'no_such_module_here' is "
                                                "not a module"),
    (["workload.script='OK'", "workload.args=[1]"], "workload.args[0]: 1 is not a string"),
    (["workload.script='OK'", "workload.args='--x'"], "workload.args: '--x' is not a list"),
    (["workload.script='OK'", "workload.observe=1"], "workload.observe: 1 is not true or false"),
    (["workload.script='OK'", "workload.map_nccl_to_gloo='yes'"],
     "workload.map_nccl_to_gloo: 'yes' is not true or false"),
])
def test_bad_fields_are_refused_naming_the_field(tmp_path, sets, message):
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01\x02 not text")
    (tmp_path / "bad.py").write_text("def x(:\n")
    (tmp_path / "ok.py").write_text("pass\n")
    names = {"BINARY": tmp_path / "bin.dat", "SYNTAX": tmp_path / "bad.py",
             "OK": tmp_path / "ok.py"}
    for k, v in names.items():
        sets = [s.replace(k, str(v)) for s in sets]
    with pytest.raises(SpecError) as info:
        load_spec(None, BASE + sets)
    assert any(message in e for e in info.value.errors), info.value.errors


def test_a_wrong_type_in_a_spec_file_is_a_spec_error(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[workload]\nkind = "script"\nscript = 5\nargs = ["--a", 2]\n')
    with pytest.raises(SpecError) as info:
        load_spec(str(spec), [])
    assert "workload.script: 5 is not a string" in info.value.errors
    assert any(e.startswith("workload.args[1]: 2 is not a string") for e in info.value.errors)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_runners_stop_leaves_no_rank_behind(tmp_path, monkeypatch):
    """torch's elastic agent starts each rank in a session of its own, which the
    runner's killpg of torchrun's group does not reach; a rank that ignores SIGTERM
    outlives torchrun's own shutdown, and the runner's SIGKILL does not forward. The
    bootstrap's PDEATHSIG ends it with torchrun."""
    from incastlab.runner import _stop_all

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "stubborn.py"
    path.write_text("import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                    "open('PID' + os.environ['RANK'], 'w').write(str(os.getpid()))\n"
                    "time.sleep(600)\n")
    procs, pids = [], []
    try:
        for i, argv in enumerate(loopback_torchrun(2, tmp_path / "w", free_port(), str(path),
                                                   observe=False)):
            procs.append(subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL,
                                          stderr=open(tmp_path / f"{i}.err", "w")))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(
                (tmp_path / f"PID{r}").exists() for r in (0, 1)):
            time.sleep(0.2)
        pids = [int((tmp_path / f"PID{r}").read_text()) for r in (0, 1)]
        assert all(_alive(p) for p in pids)
        assert all(os.getpgid(p) != pr.pid for p, pr in zip(pids, procs, strict=True))
        _stop_all(procs)
        assert all(pr.poll() is not None for pr in procs)
        end = time.monotonic() + 5
        while time.monotonic() < end and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert not [p for p in pids if _alive(p)]
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        for pr in procs:
            if pr.poll() is None:
                os.killpg(pr.pid, signal.SIGKILL)


def test_collective_bounds_by_hand():
    f, fa = framing_factor(1500), ack_framing(1500)
    mb = 1e6  # 8 Mbit/s = 1 MB/s
    assert collective_bound("all_reduce", mb, 4, 8.0).seconds == pytest.approx(1.5 * fa)
    assert collective_bound("all_gather", mb, 4, 8.0).seconds == pytest.approx(0.75 * f)
    assert collective_bound("reduce_scatter", mb, 4, 8.0).seconds == pytest.approx(0.75 * f)
    assert collective_bound("broadcast", mb, 4, 8.0).seconds == pytest.approx(f)
    assert collective_bound("send", mb, 2, 8.0).seconds == pytest.approx(f)
    assert collective_bound("all_to_all", mb, 2, 8.0).seconds == pytest.approx(0.5 * fa)
    assert collective_bound("barrier", 0, 4, 8.0).seconds == 0
    # buckets of 1, 1, 2 MB ready over 0.5 s: the last alone needs 3.0·fa·... vs all 6·...
    b = [collective_bound("all_reduce", m, 4, 8.0).seconds for m in (mb, mb, 2 * mb)]
    assert exposed_buckets_s(b, [0.0, 0.2, 0.5]) == pytest.approx(6 * fa - 0.5)
    assert exposed_buckets_s(b, [0.0, 0.2, 20.0]) == pytest.approx(3 * fa)  # long backward


def test_a_recorded_step_bound_by_hand():
    """One rank's step of a 4-rank job on 8 Mbit/s links: a blocking 1 MB broadcast, an
    async all_gather of 0.4 MB never waited on, and two DDP buckets of 1 MB ready 0.5 s
    apart: total = f + 0.3·f + 2·1.5·f'; exposed = f + max(1.5 f', 3 f' − 0.5)."""
    f, fa = framing_factor(1500), ack_framing(1500)
    rows = [{"op": "broadcast", "bytes": 1e6, "group_size": 4, "call": "broadcast",
             "async_op": False, "t_start": 1.0},
            {"op": "all_gather", "bytes": 4e5, "group_size": 4, "call": "all_gather",
             "async_op": True, "t_start": 2.0},
            {"op": "all_reduce", "bytes": 1e6, "group_size": 4, "call": "ddp_bucket",
             "async_op": True, "t_start": 3.0},
            {"op": "all_reduce", "bytes": 1e6, "group_size": 4, "call": "ddp_bucket",
             "async_op": True, "t_start": 3.5}]
    ctx = {"rates": [8.0] * 4, "world": 4, "mtu": 1500, "ring_fabric": {}}
    total, exposed = step_bounds(rows, ctx)
    assert total == pytest.approx(f + 0.3 * f + 3 * fa)
    assert exposed == pytest.approx(f + max(1.5 * fa, 3 * fa - 0.5))


def test_tables_and_section_from_a_run_dir(tmp_path):
    from incastlab.analysis.synthetic import make_run_dir
    from incastlab.commands.common import build_report

    def log(rank):
        t = 100.0
        out = [{"event": "start", "role": "script", "rank": rank, "world_size": 2,
                "mode": "script", "iface": f"h{rank + 1}-eth0", "t": t}]
        for k in range(3):
            s = t + k
            out += [{"event": "collective", "seq": k, "op": "all_reduce", "call": "ddp_bucket",
                     "bytes": 4000, "group_size": 2, "peer": None, "async_op": True,
                     "step": k, "t_start": s + 0.5, "t_end": s + 0.7},
                    {"event": "iteration", "rank": rank, "iteration": k, "t_start": s,
                     "t_end": s + 1, "compute_s": 0.8, "comm_s": 0.2, "exposed_comm_s": 0.2,
                     "wait_s": None}]
        return out + [{"event": "end", "t": t + 3, "steps": 3}]

    run = make_run_dir(tmp_path / "run", workers={0: log(0), 1: log(1)},
                       spec_text='name = "s"\n[workload]\nkind = "script"\n')
    build_report(run)
    coll = pd.read_csv(run / "tables" / "collectives.csv")
    assert list(coll.columns[:6]) == ["rank", "step", "op", "bytes", "t_start", "t_end"]
    assert len(coll) == 6 and set(coll["step"]) == {0, 1, 2} and set(coll["rank"]) == {0, 1}
    text = (run / "summary.md").read_text()
    assert "Your script's collectives, per step" in text and "3 step(s) on 2 rank(s)" in text
