"""Fabric fidelity: configured versus achieved TCP rate, and bring-up/teardown time.

    sudo .venv/bin/python benchmarks/fabric_fidelity.py [--seconds 5] [--quick]
        [--only rates|mtu|bringup] [--mtus 1500,9000] [--load-rates 100,200,300]

Rates: on a 2×2×4 leaf–spine (fabric links 4× the host rate, policy ``spread`` so no two
flows are hashed onto one uplink by chance), 1, 2 and 4 concurrent iperf3 flows from
leaf-1 hosts to leaf-2 hosts at host rates 10, 50 and 100 Mbit/s. Each flow's receiver
goodput is divided by the configured host rate. The ideal ratio is not 1: HTB shapes
whole Ethernet frames, so TCP goodput tops out at 1448/1514 = 0.956 of the rate (MSS over
frame size with timestamps); both ratios are printed.

MTU 1500 against 9000 (``--only mtu``): the userspace datapath's cost is per packet, so
the same fabric carries more bytes with jumbo frames before ovs-vswitchd runs out of CPU.
At each MTU and per-host rate (100, 200, 300 Mbit/s), 4 concurrent flows h1..h4 -> h5..h8
cross lf1 -> spine -> lf2 (3 bridges each): achieved/configured and the same over the
MTU's own ceiling ((mtu - 52)/(mtu + 14): 0.956 at 1500, 0.993 at 9000), the aggregate
goodput, and ovs-vswitchd's CPU (share of one core, mean and max of 1 s samples from
/proc, all its threads) with the machine's busy share: where the ratio falls while
ovs-vswitchd sits near a full core, the datapath is the ceiling. Two figures that hold
even on a loaded machine (where other processes starve ovs-vswitchd): its cost, core-
seconds per Gbit of aggregate goodput (each bit crossing three bridges), and the
aggregate it would carry with a whole core at that cost (goodput / mean core share; an
estimate of where it saturates, valid while the flows, not the CPU, set the rate).

Bring-up/teardown: a 2×4×4 fabric brought up and torn down by incastlab (queues on every
port, offloads off, controller, readiness including an all-pairs ping) against the
baseline measured in the same run: stock Mininet with plain links and no controller.

Ends with one JSON line of the figures (also to --results FILE).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import OVSSwitch

from incastlab import iperf
from incastlab.apps.local import free_port
from incastlab.capture.cpu import CpuMonitor
from incastlab.fabric import Fabric
from incastlab.preflight import run_preflight
from incastlab.topologies.fabricmap import frame_bytes, mss_bytes
from incastlab.topologies.leafspine import LeafSpineTopo


def goodput_ceiling(mtu: int = 1500) -> float:
    """TCP goodput over the configured rate at best: HTB shapes whole frames, each
    carrying one full segment (1448/1514 = 0.956 at MTU 1500, 8948/9014 = 0.993 at 9000)."""
    return mss_bytes(mtu) / frame_bytes(mtu)


GOODPUT_CEILING = goodput_ceiling(1500)


def measure_rates(rate: float, flows: int, seconds: float, tmp: Path, mtu: int = 1500,
                  cpu: bool = False) -> list[float] | tuple[list[float], dict]:
    """Receiver goodput (Mbit/s) of ``flows`` concurrent iperf3 flows h{i} -> h{4+i} at
    host rate ``rate`` and MTU ``mtu``; with ``cpu``, also the CpuMonitor summary of the
    transfer (not of the bring-up)."""
    topo = LeafSpineTopo(2, 2, 4, host_bw=rate, fabric_bw=4 * rate, queue_packets=100,
                         mtu=mtu)
    with Fabric(topo, policy="spread", run_dir=tmp / f"rate-{rate:g}-{flows}-{mtu}",
                controller_port=free_port()) as fab, CpuMonitor() as mon:
        mon.restart()
        pairs = [iperf.pair(fab, f"h{i}", f"h{4 + i}", seconds, port=5201 + i)
                 for i in range(1, flows + 1)]
        results = [iperf.result(cli, timeout=seconds + 30) for _srv, cli in pairs]
        usage = mon.summary()
    got = [r["end"]["sum_received"]["bits_per_second"] / 1e6 for r in results]
    return (got, usage) if cpu else got


def compare_mtus(mtus: list[int], rates: list[float], flows: int, seconds: float,
                 tmp: Path) -> list[dict]:
    """Achieved/configured at rising load for each MTU, with ovs-vswitchd's CPU."""
    rows = []
    print(f"\n{'mtu':>5} {'rate':>5} {'flows':>5} {'aggregate':>9} {'min':>7} {'ratio':>6} "
          f"{'/ceiling':>8} {'ovs mean':>8} {'ovs max':>7} {'busy':>5} {'core-s/Gbit':>11} "
          f"{'at 1 core':>9}")
    for mtu in mtus:
        for rate in rates:
            got, usage = measure_rates(rate, flows, seconds, tmp, mtu=mtu, cpu=True)
            mean = statistics.mean(got)
            row = {"mtu": mtu, "rate_mbps": rate, "flows": flows, "achieved_mbps": got,
                   "aggregate_mbps": sum(got), "configured_aggregate_mbps": rate * flows,
                   "ratio": mean / rate, "min_ratio": min(got) / rate,
                   "ratio_to_ceiling": mean / rate / goodput_ceiling(mtu),
                   "vswitchd_mean_core_share": usage["vswitchd_mean_core_share"],
                   "vswitchd_max_core_share": usage["vswitchd_max_core_share"],
                   "vswitchd_core_s_per_gbit": _per(usage["vswitchd_mean_core_share"],
                                                    sum(got) / 1e3),
                   "aggregate_at_one_core_mbps": _per(sum(got),
                                                      usage["vswitchd_mean_core_share"]),
                   "machine_mean_busy": usage["mean_busy"], "saturated": usage["saturated"]}
            rows.append(row)
            print(f"{mtu:5d} {rate:5g} {flows:5d} {sum(got):9.1f} {min(got):7.2f} "
                  f"{row['ratio']:6.3f} {row['ratio_to_ceiling']:8.3f} "
                  f"{_pct(usage['vswitchd_mean_core_share']):>8} "
                  f"{_pct(usage['vswitchd_max_core_share']):>7} "
                  f"{_pct(usage['mean_busy']):>5} "
                  f"{_fmt(row['vswitchd_core_s_per_gbit'], '.2f'):>11} "
                  f"{_fmt(row['aggregate_at_one_core_mbps'], '.0f'):>9}", flush=True)
    return rows


def _per(a, b) -> float | None:
    return a / b if a is not None and b else None


def _fmt(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def time_incastlab(tmp: Path) -> tuple[float, float]:
    t0 = time.monotonic()
    fab = Fabric(LeafSpineTopo(2, 4, 4), policy="single", run_dir=tmp / "bringup",
                 controller_port=free_port())
    fab.__enter__()
    t1 = time.monotonic()
    fab.__exit__(None, None, None)
    return t1 - t0, time.monotonic() - t1


def time_stock_mininet() -> tuple[float, float]:
    caps = run_preflight(controller_port=None)
    setLogLevel("warning")
    t0 = time.monotonic()
    net = Mininet(topo=LeafSpineTopo(2, 4, 4), controller=None,
                  switch=partial(OVSSwitch, datapath=caps.datapath, failMode="secure"))
    try:
        net.start()
        t1 = time.monotonic()
    finally:
        net.stop()
    return t1 - t0, time.monotonic() - t1


def _emit(figures: dict, results_file: str | None) -> int:
    """Print the JSON line; with --results also write it (benchmarks/render_results.py)."""
    print(json.dumps(figures))
    from render_results import write_results  # benchmarks/, the script's own folder
    write_results(results_file, figures)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0, help="iperf3 duration per test, s")
    p.add_argument("--quick", action="store_true", help="one rate (50 Mbit/s) only")
    p.add_argument("--repeats", type=int, default=3, help="bring-up/teardown repetitions")
    p.add_argument("--only", choices=("rates", "mtu", "bringup"),
                   help="one part only (default: all three)")
    p.add_argument("--mtus", default="1500,9000", help="MTUs compared (bytes)")
    p.add_argument("--load-rates", default="100,200,300",
                   help="per-host rates of the MTU comparison, Mbit/s")
    p.add_argument("--flows", type=int, default=4, help="concurrent flows (MTU comparison)")
    p.add_argument("--results", default=None, metavar="FILE",
                   help="also write the JSON there (benchmarks/results/NAME.json)")
    args = p.parse_args()
    tmp = Path(subprocess.run(["mktemp", "-d", "/tmp/incastlab-bench-XXXXXX"],
                              capture_output=True, text=True, check=True).stdout.strip())
    figures = {"rates": [], "bringup": {}, "mtu": []}
    if args.only in (None, "mtu"):
        figures["mtu"] = compare_mtus([int(m) for m in args.mtus.split(",")],
                                      [float(r) for r in args.load_rates.split(",")],
                                      args.flows, args.seconds, tmp)
    if args.only == "mtu":
        return _emit(figures, args.results)
    print(f"{'rate Mbit/s':>11} {'flows':>5} {'mean Mbit/s':>11} {'min':>7} "
          f"{'ratio':>6} {'ratio/ceiling':>13}")
    for rate in ([] if args.only == "bringup" else [50.0] if args.quick
                 else [10.0, 50.0, 100.0]):
        for flows in (1, 2, 4):
            got = measure_rates(rate, flows, args.seconds, tmp)
            mean = statistics.mean(got)
            row = {"rate_mbps": rate, "flows": flows, "achieved_mbps": got,
                   "ratio": mean / rate, "ratio_to_ceiling": mean / rate / GOODPUT_CEILING}
            figures["rates"].append(row)
            print(f"{rate:11g} {flows:5d} {mean:11.2f} {min(got):7.2f} {row['ratio']:6.3f} "
                  f"{row['ratio_to_ceiling']:13.3f}", flush=True)
    if args.only == "rates":
        return _emit(figures, args.results)
    ours = [time_incastlab(tmp) for _ in range(args.repeats)]
    stock = [time_stock_mininet() for _ in range(args.repeats)]
    up, down = statistics.median(o[0] for o in ours), statistics.median(o[1] for o in ours)
    sup, sdown = statistics.median(s[0] for s in stock), statistics.median(s[1] for s in stock)
    figures["bringup"] = {"fabric": "2x4x4", "incastlab_up_s": up, "incastlab_down_s": down,
                          "stock_up_s": sup, "stock_down_s": sdown,
                          "up_ratio": up / sup, "down_ratio": down / sdown}
    print(f"\nbring-up 2x4x4 (median of {args.repeats}): incastlab {up:.2f} s, stock Mininet "
          f"{sup:.2f} s, ratio {up / sup:.2f}")
    print(f"teardown: incastlab {down:.2f} s, stock Mininet {sdown:.2f} s, "
          f"ratio {down / sdown:.2f}")
    return _emit(figures, args.results)


if __name__ == "__main__":
    sys.exit(main())
