"""Root tier for the script job: the example DDP script on 4 hosts of a real fabric
through torchrun, and a crashing script that leaves nothing behind."""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from incastlab.apps.local import events, read_jsonl
from incastlab.state import STATE_DIR
from tests.rootnet import free_port, ovs_bridges, run_complete

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[1]
FABRIC = ["topology.spines=2", "topology.leaves=2", "topology.hosts_per_leaf=2",
          "topology.host_bw_mbps=50.0", "workload.kind='script'", "workload.workers=4",
          "run.duration_limit_s=600", "run.phase_timeout_s=60"]
EPOCHS, STEPS, HIDDEN = 2, 3, 128
BUCKET_CAP_MB = 0.05  # below the 128-wide MLP's gradient (104 kB): several buckets a step


def _params() -> int:
    spec = importlib.util.spec_from_file_location("ddp_mlp", ROOT / "examples" / "ddp_mlp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return sum(p.numel() for p in mod.build_model(64, HIDDEN, 10).parameters())


def _ours_left(run_dir: Path) -> list[int]:
    """Processes whose environment names this run's directory (torchrun and its ranks)."""
    mark = str(run_dir).encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def _nothing_left(run_dir: Path) -> None:
    assert not _ours_left(run_dir)
    assert not (ovs_bridges() & {"sp1", "sp2", "lf1", "lf2"})
    assert not list(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else True
    assert not [n for n in os.listdir("/sys/class/net") if "-eth" in n]


def test_the_example_ddp_script_runs_through_torchrun_and_is_observed(tmp_path):
    """Also the nccl mapping: the example is device-agnostic but told --backend nccl."""
    from incastlab.commands.common import build_report

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.chdir(ROOT)
    manifest = run_complete(run_dir, FABRIC + [
        "workload.script='examples/ddp_mlp.py'", "workload.map_nccl_to_gloo=true",
        f"workload.args=['--epochs', '{EPOCHS}', '--steps-per-epoch', '{STEPS}', "
        f"'--hidden', '{HIDDEN}', '--backend', 'nccl', '--bucket-cap-mb', '{BUCKET_CAP_MB}']"])
    hosts = manifest["placement"]["workers"]
    gradient = 4 * _params()
    for rank, host in enumerate(hosts):
        log = read_jsonl(run_dir / "workers" / f"{rank}.jsonl")
        start = events(log, "start")[0]
        assert (start["rank"], start["world_size"], start["iface"]) == (rank, 4, f"{host}-eth0")
        assert "mapped to 'gloo'" in events(log, "notice")[0]["message"]
        its = events(log, "iteration")
        assert [e["iteration"] for e in its] == list(range(EPOCHS * STEPS))
        assert events(log, "end")[0]["steps"] == EPOCHS * STEPS
        buckets = [e for e in events(log, "collective") if e["call"] == "ddp_bucket"]
        for k in range(EPOCHS * STEPS):
            assert sum(e["bytes"] for e in buckets if e["step"] == k) == gradient
        # DDP caps its first bucket at 1 MiB until it rebuilds the buckets after step 0;
        # from then on the 0.05 MB cap splits this model's 104 kB in two (71 + 33 kB,
        # whole parameters each): the sum above is over several bucket all-reduces
        assert all(sum(e["step"] == k for e in buckets) >= 2 for k in range(1, EPOCHS * STEPS))
    paths = build_report(run_dir)
    assert (run_dir / "report.html").is_file() and (run_dir / "trace.json").is_file()
    coll = pd.read_csv(run_dir / "tables" / "collectives.csv")
    assert (coll.groupby(["rank", "step"])["bytes"].sum() >= gradient).all()
    block = json.loads(paths["metrics"].read_text())["script"]
    assert block["steps"] == EPOCHS * STEPS and block["bound_total_s_mean"] > 0
    _nothing_left(run_dir)


CRASH = '''
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
model = DDP(nn.Linear(32, 32))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def train_step(i):
    opt.zero_grad(); model(torch.randn(4, 32)).sum().backward(); opt.step()
    if i == 2 and dist.get_rank() == 1:
        raise ValueError("boom at step 2")
for i in range(1000):
    train_step(i)
'''


def test_a_crashing_script_fails_the_run_with_its_traceback_and_leaves_nothing(tmp_path):
    from incastlab.runner import check_ready, run_experiment
    from incastlab.spec import load_spec

    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = load_spec(None, FABRIC + [f"workload.script='{script}'"])
    port = free_port()
    status = run_experiment(spec, run_dir, controller_port=port, caps=check_ready(spec, port))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert status == "failed", manifest
    assert "rank 1" in manifest["reason"] and "ValueError: boom at step 2" in manifest["reason"]
    assert "in train_step" in manifest["reason"]
    err = events(read_jsonl(run_dir / "workers" / "1.jsonl"), "error")[0]
    assert err["traceback_tail"][-1] == "ValueError: boom at step 2"
    _nothing_left(run_dir)


COLLECTIVE_STEPS = 3


def _sent_payload(pcap: Path, ip: str, t0: float, t1: float, store_port: int) -> int:
    """TCP payload bytes `ip` sent on gloo's connections (not the rendezvous store's)
    from t0 to t1, seen at its own link: each flow's span of sequence numbers, so a
    retransmission counts once; less the sequence number a connection's opener sends
    first (gloo_bytes.CONNECT_BYTES) where that byte is in the window (a slow rank can
    still be connecting its full mesh when another starts the first collective)."""
    from incastlab.analysis.alphabeta import ACK_FRAME
    from incastlab.analysis.pcap import ACK, SYN, ip_to_int, read_pcap
    from tests.gloo_bytes import CONNECT_BYTES
    from tests.rootnet import relative_seq

    every = read_pcap(pcap, cache=False)
    mine = every[(every.src == ip_to_int(ip)) & (every.sport != store_port)
                 & (every.dport != store_port)]
    flags = mine["flags"]  # (mine.flags is the DataFrame's own attribute)
    opened = mine[(flags & SYN).astype(bool) & ~(flags & ACK).astype(bool)]
    isn = {(r.dst, r.sport, r.dport): int(r.seq) for r in opened.itertuples()}
    seg = mine[(mine.payload_len > 0) & (mine.t >= t0) & (mine.t <= t1)]
    # the TCP/IP framing of each frame: Ethernet 14 + IPv4 20 + TCP 20 + timestamps 12
    # (a SACK block adds 8 per block: left out; SYNs carry no data)
    assert ((seg.frame_len - seg.payload_len)[seg.sack == 0] == ACK_FRAME).all()
    total = 0
    for key, flow in seg.groupby(["dst", "sport", "dport"]):
        base = isn.get(key, int(flow.seq.iloc[0]))
        start = relative_seq(flow.seq.values, base)
        total += int((start + flow.payload_len.to_numpy()).max() - start.min())
        if key in isn and start.min() == 1:  # the opener's first byte is in the window
            total -= CONNECT_BYTES
    return total


def test_the_run_shortcut_runs_collectives_and_the_host_links_carry_what_was_logged(
        tmp_path):
    """`incastlab run --script examples/collectives.py --workers 4 -- --steps 3` end to end
    to a report; then every host's uplink carried, on gloo's connections while the
    collectives ran, the bytes gloo's algorithms send for the logged collectives
    (tests/gloo_bytes.py) plus gloo's own framing, within its bounds."""
    from incastlab import cli
    from incastlab.analysis.rundir import load_fabric
    from incastlab.jobs.base import RENDEZVOUS_PORT
    from incastlab.spec import loads_spec
    from tests.gloo_bytes import expected

    os.chdir(ROOT)
    run_dir = tmp_path / "run"
    assert cli.main(["-q", "run", "--script", "examples/collectives.py", "--workers", "4",
                     "--out", str(run_dir), "--controller-port", str(free_port()), "--",
                     "--steps", str(COLLECTIVE_STEPS)]) == 0
    spec = loads_spec((run_dir / "spec.toml").read_text())
    assert (spec.workload.kind, spec.workload.script, spec.workload.workers,
            spec.workload.args) == ("script", "examples/collectives.py", 4,
                                    ["--steps", str(COLLECTIVE_STEPS)])
    assert spec.topology == loads_spec("").topology and spec.run.name == "collectives"
    assert (run_dir / "report.html").is_file()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"

    coll = pd.read_csv(run_dir / "tables" / "collectives.csv")
    params = 4  # examples/collectives.py: 2 Linear layers, weight and bias each
    assert (coll[coll["rank"] == 0]["op"].value_counts().to_dict()
            == {"all_reduce": params * COLLECTIVE_STEPS, "broadcast": params, "barrier": 1})
    traffic = expected(coll[coll["rank"] == 0].sort_values("seq").to_dict("records"), 4)
    t0, t1 = coll["t_start"].min(), coll["t_end"].max()
    ips = load_fabric(run_dir).ip_by_host()
    for rank, host in enumerate(manifest["placement"]["workers"]):
        got = _sent_payload(run_dir / "pcap" / f"{host}-eth0.pcap", ips[host], t0, t1,
                            RENDEZVOUS_PORT)
        least, most = traffic[rank].payload_range()
        assert least <= got <= most, (rank, host, got, least, most, traffic[rank])
    _nothing_left(run_dir)
