"""Synthetic run directories for the tests of a job kind's ``Job.bound`` (the hook that
gathers a bound's inputs from a finished run): a leaf-spine map with the host rates,
fabric rate and MTU a test chose, the job's placement in the manifest, the worker logs
it needs, read back by the real analysis (``analyse``)."""
import dataclasses
import json

from incastlab.analysis.synthetic import demo_fabric, make_run_dir
from incastlab.commands.common import analyse

T0 = 1_700_000_000.0


def fabric(host_mbps: dict[str, float] | None = None, *, spines: int = 2, leaves: int = 2,
           hosts_per_leaf: int = 3, rate_mbps: float = 10.0,
           fabric_mbps: float | None = None, mtu: int = 1500):
    """demo_fabric's map with some hosts' own links at other rates (Mbit/s) and the
    leaf-spine links at ``fabric_mbps`` (default ``rate_mbps``); ``spines=0``: one leaf
    and no fabric rate, as the star topology's map."""
    base = demo_fabric(spines, leaves, hosts_per_leaf, rate_mbps)
    rates = host_mbps or {}
    hosts = {h.name for h in base.hosts}
    up = rate_mbps if fabric_mbps is None else fabric_mbps
    links = tuple(dataclasses.replace(lk, bw_mbps=float(rates.get(lk.node1, lk.bw_mbps)))
                  if lk.node1 in hosts else dataclasses.replace(lk, bw_mbps=float(up))
                  for lk in base.links)
    # a map without spines (the star topology's one leaf) has no fabric rate
    return dataclasses.replace(base, links=links, fabric_bw_mbps=float(up) if spines else None,
                               mtu=mtu)


def run(path, spec_text: str, fabric_map, servers=(), workers=(), logs=None,
        placement: bool = True):
    """Write the run directory and analyse it (the Analysis the job's hooks get);
    ``placement=False`` leaves the manifest without one, as an older run's."""
    run_dir = make_run_dir(path, workers=logs, fabric=fabric_map, t0=T0, spec_text=spec_text)
    if placement:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        manifest["placement"] = {"servers": list(servers), "workers": list(workers)}
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return analyse(run_dir)
