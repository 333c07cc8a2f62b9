"""The script job's command lines: torchrun itself on every worker host, its environment
set through ``/usr/bin/env`` (a Launch is an argv, never a shell, and has no env field:
env(1) sets the variables and execs Python in place, so the runner's process is
torchrun's own and its killpg reaches it).

    /usr/bin/env PYTHONPATH=<apps/script_boot>:... INCASTLAB_SCRIPT_RUN=1
        INCASTLAB_OBSERVE_OUT=<run>/workers GLOO_SOCKET_IFNAME=h3-eth0
        PET_LOG_DIR=<run>/workers/torchrun
        <python> -m torch.distributed.run --nnodes N --node-rank i --nproc-per-node 1
        --master-addr <rank 0's address> --master-port 29500 train.py --epochs 2

``--nproc-per-node 1``: one rank per emulated host, so RANK = the node rank = the host's
index in the placement, as for the built-in jobs.

``PET_LOG_DIR`` is torchrun's ``--log-dir`` (its arguments read ``PET_<NAME>`` from the
environment): without it every torchrun makes a ``torchelastic_*`` folder in /tmp that
nothing removes; with it, its per-rank folders and error files stay in the run.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from incastlab.apps.commands import Endpoint

ENV = "/usr/bin/env"
TORCHRUN_LOGS = "torchrun"  # under the workers' folder: <run>/workers/torchrun/


def boot_dir() -> str:
    """The folder whose sitecustomize.py bootstraps a rank (apps/script_boot)."""
    from incastlab.apps import script_boot

    return os.path.dirname(os.path.abspath(script_boot.__file__))


def rank_env(out: str, iface: str | None, observe: bool, map_nccl: bool) -> dict[str, str]:
    """The variables torchrun and its rank inherit (on top of the host's environment):
    the bootstrap on PYTHONPATH (in front of any PYTHONPATH already set), the observer's
    output folder unless ``observe`` is off, the nccl mapping, gloo's interface, and
    torchrun's log folder inside ``out`` (nothing of torchrun's left in /tmp)."""
    path = [boot_dir()] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = {"PYTHONPATH": os.pathsep.join(path), "INCASTLAB_SCRIPT_RUN": "1",
           "PET_LOG_DIR": os.path.join(str(out), TORCHRUN_LOGS)}
    if observe:
        env["INCASTLAB_OBSERVE_OUT"] = str(out)
    if map_nccl:
        env["INCASTLAB_MAP_NCCL"] = "1"
    if iface:
        env["GLOO_SOCKET_IFNAME"] = iface
    return env


def torchrun_commands(hosts: Sequence[Endpoint], out: str, port: int, target: str,
                      args: Sequence[str], *, module: bool = False, observe: bool = True,
                      map_nccl: bool = False, python: str = sys.executable
                      ) -> list[list[str]]:
    """One argv per host: torchrun node i of len(hosts), rank 0's host the master.
    ``target`` is the script's path, or with ``module`` a module name (torchrun -m)."""
    n = len(hosts)
    argvs = []
    for i, host in enumerate(hosts):
        env = rank_env(out, host.iface, observe, map_nccl)
        argvs.append([ENV, *(f"{k}={v}" for k, v in env.items()), python, "-m",
                      "torch.distributed.run", "--nnodes", str(n), "--node-rank", str(i),
                      "--nproc-per-node", "1", "--master-addr", hosts[0].addr,
                      "--master-port", str(port), *(["--module"] if module else []),
                      target, *args])
    return argvs


def loopback_torchrun(ranks: int, out, port: int, target: str, args: Sequence[str] = (),
                      **kw) -> list[list[str]]:
    """The same on 127.0.0.1 (tests, benchmarks): `ranks` torchrun nodes on loopback."""
    from incastlab.apps.local import LOOPBACK

    return torchrun_commands([Endpoint(LOOPBACK, "lo")] * ranks, str(out), port, target,
                             args, **kw)
