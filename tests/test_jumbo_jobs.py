"""The jobs' bounds use the MTU the run had (fabric.json's ``mtu``), without root: the
same synthetic ring run on a map of MTU 1500 and of 9000 differs in its bound exactly by
the ratio of the framings (issue 16 item 1)."""
import dataclasses
import json

import pytest

from incastlab.commands.common import analyse
from incastlab.analysis.synthetic import demo_fabric, make_run_dir

T0 = 1_700_000_000.0
B = 10e6 / 8  # demo_fabric links: 10 Mbit/s, in bytes/s


def _ring_run(path, fabric):
    hosts = ["h1", "h2", "h3", "h4"]
    logs = {rank: [{"event": "start", "role": "ring", "rank": rank, "world_size": 4,
                    "mode": "ring", "gradient_bytes": 1_000_000, "iface": f"{h}-eth0",
                    "t": T0}]
            + [{"event": "iteration", "iteration": i, "t_start": T0 + 2 * i,
                "t_end": T0 + 2 * i + 1.6, "compute_s": 0.1, "wait_s": None,
                "allreduce_s": 1.5, "loss": 1.0} for i in range(3)]
            for rank, h in enumerate(hosts)}
    run = make_run_dir(path, workers=logs, fabric=fabric, t0=T0,
                       spec_text='[workload]\nkind = "ring"\nworkers = 4\n')
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["placement"] = {"servers": [], "workers": hosts}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return analyse(run).metrics["cost"]["bound_s"]


@pytest.mark.parametrize("mtu", [1500, 9000])
def test_the_ring_bound_uses_the_runs_mtu(tmp_path, mtu):
    fabric = dataclasses.replace(demo_fabric(), mtu=mtu)
    # 2(N-1)/N * M * f' / B with f' = (2 (mtu + 14) + 66) / (2 (mtu - 52)): data plus one
    # 66-byte ACK per two segments on a ring host's link
    f_ack = (2 * (mtu + 14) + 66) / (2 * (mtu - 52))
    assert _ring_run(tmp_path / "r", fabric) == pytest.approx(1.5e6 * f_ack / B, rel=1e-9)
