"""Benchmark: pcap -> per-packet table with the project parser, Scapy, dpkt and tshark.

    sudo .venv/bin/python benchmarks/parse_pcap.py [--pcap FILE] [--packets 600000]
         [--big 5000000] [--scapy-subset 30000] [--workdir /tmp/incastlab-bench]
         [--memory-packets 20000000] [--memory-small-packets 3000000] [--memory-only]

What it does
  1. Unless --pcap is given, makes a REAL capture: `tcpdump -i lo -s 128 -c N` while
     iperf3 (or, without iperf3, a Python socket pair) sends TCP over 127.0.0.1 only.
     Bounded: tcpdump stops after N packets, everything is stopped after --max-seconds.
     Needs root for tcpdump; only the processes this script started are stopped.
  2. Parses that capture with each parser in its own subprocess, extracting the same
     fields (time, addresses, ports, seq, ack, flags, payload length) into a pandas
     DataFrame, and reports packets/s and the subprocess's peak RSS (ru_maxrss).
       project  incastlab.analysis.pcap.read_pcap(cache=False), all packets
       dpkt     dpkt.pcap.Reader + dpkt.ethernet.Ethernet, all packets
       tshark   `tshark -T fields` (TCP sequence analysis off) into pandas.read_csv,
                all packets; time and memory of tshark and the reader together
       scapy    PcapReader on the first --scapy-subset packets only; its rate is
                extrapolated to the whole file (stated in the output)
  3. Builds a --big packet capture by concatenating the real capture's records over and
     over with timestamps shifted by the capture's span (so the bytes are real traffic,
     but repeated), and parses it with the project parser alone.
  4. Memory of the analysis (--memory-packets, 0 skips it): builds a run directory of
     at least that many captured packets from the real capture -- R copies of it, each
     copy's connections moved to their own addresses (127.r.r.1) and written as two
     captures, a sender side and a receiver side 50 us later, as a host pair's
     interfaces would see them -- and runs `incastlab report RUN_DIR` on it in a child
     process, measuring its peak RSS (os.wait4's ru_maxrss). The same is done on a
     small run (--memory-small-packets) together with the former all-in-memory TCP
     analysis (every capture parsed, tcp.combine, tcp.py's tables: what report.py did
     before analysis/chunked.py), whose bytes per packet give its extrapolation to the
     big run. The run directories are deleted afterwards unless --keep.
  --memory-only: step 4 alone (with --pcap, or after making the capture of step 1).
  Prints a table with each parser's rate relative to the project parser and ends with
  one JSON line of all figures (also to --results FILE). Timings are measured, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from parse_pcap_parsers import PARSERS  # the same folder (benchmarks/)

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _socket_pair_traffic(port: int, stop: threading.Event) -> None:
    """Fallback traffic without iperf3: small writes with Nagle off over 127.0.0.1."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    cli = socket.create_connection(("127.0.0.1", port))
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn, _ = srv.accept()

    def drain():
        while not stop.is_set():
            if not conn.recv(1 << 16):
                break
    th = threading.Thread(target=drain, daemon=True)
    th.start()
    block = b"x" * 1400
    try:
        while not stop.is_set():
            cli.sendall(block)
    finally:
        for s in (cli, conn, srv):
            s.close()


def make_capture(path: Path, packets: int, max_seconds: float) -> dict:
    """Capture `packets` TCP packets of loopback traffic (tcpdump -s 128) into `path`."""
    if os.geteuid() != 0:
        sys.exit("making a capture needs root (tcpdump); pass --pcap FILE to use one")
    if not shutil.which("tcpdump"):
        sys.exit("tcpdump not found")
    port = _free_port()
    started: list[subprocess.Popen] = []
    stop = threading.Event()
    try:
        dump = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "128", "-B", "65536", "-U",
                                 "-c", str(packets), "-w", str(path), f"tcp port {port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started.append(dump)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not path.exists():  # tcpdump is listening
            time.sleep(0.05)
        time.sleep(0.3)
        tool = "iperf3" if shutil.which("iperf3") else "python-socket-pair"
        if tool == "iperf3":
            started.append(subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p",
                                             str(port)], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))
            time.sleep(0.5)
            started.append(subprocess.Popen(
                ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-N", "-l", "1400", "-b", "600M",
                 "-P", "2", "-t", str(int(max_seconds))],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        else:
            threading.Thread(target=_socket_pair_traffic, args=(port, stop), daemon=True).start()
        try:
            _, err = dump.communicate(timeout=max_seconds + 5)
        except subprocess.TimeoutExpired:
            dump.terminate()
            _, err = dump.communicate(timeout=10)
        return {"tool": tool, "tcpdump": err.decode(errors="replace").strip().splitlines()[-3:]}
    finally:
        stop.set()
        for p in started:  # only what this function started, by its own handle
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()


def make_big(src: Path, dst: Path, packets: int) -> dict:
    """`packets` records made by repeating src's records, timestamps shifted by its span."""
    data = src.read_bytes()
    header, body = data[:24], memoryview(data)[24:]
    endian = "<" if struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    offs, off = [], 0
    while off + 16 <= len(body):
        cap = struct.unpack_from(endian + "I", body, off + 8)[0]
        if off + 16 + cap > len(body):
            break
        offs.append(off)
        off += 16 + cap
    n = len(offs)
    first = struct.unpack_from(endian + "I", body, offs[0])[0]
    last = struct.unpack_from(endian + "I", body, offs[-1])[0]
    span = last - first + 1
    import numpy as np
    chunk = bytearray(body[:off])
    ts_pos = np.asarray(offs, np.int64)
    base = np.frombuffer(bytes(chunk), np.uint8)
    written = 0
    copies = 0
    with open(dst, "wb") as fh:
        fh.write(header)
        while written < packets:
            take = min(n, packets - written)
            arr = base.copy()
            secs = np.ndarray((len(arr) - 3,), dtype=endian + "u4", buffer=arr, strides=(1,))
            secs[ts_pos[:take]] += copies * span
            end = offs[take] if take < n else off
            fh.write(arr[:end].tobytes())
            written += take
            copies += 1
    return {"packets": written, "copies": copies, "source_packets": n}


ALL_IN_MEMORY = """
    import sys, time, json, resource
    from pathlib import Path
    from incastlab.analysis import flowstats, tcp
    from incastlab.analysis.pcap import read_pcaps
    t = time.perf_counter()
    d = tcp.combine(read_pcaps(Path(sys.argv[1]) / "pcap"))
    flows = tcp.data_flows(d)
    retrans, eps = tcp.retransmissions(d, flows)
    lost = tcp.losses(d, flows)
    spurious = tcp.spurious_retransmissions(d, retrans, flows)
    fsum = flowstats.flow_summary(d, flows, retrans)
    tput = flowstats.throughput_series(d, flows)
    print(json.dumps({"packets": len(d), "seconds": time.perf_counter() - t,
                      "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "hwm_kb": int(next(x.split()[1] for x in open("/proc/self/status")
                                         if x.startswith("VmHWM")))}))
"""
# the same imports and nothing else: the interpreter's own share of a peak RSS
IMPORTS_ONLY = """
    import json, resource
    from incastlab.analysis import flowstats, report, tcp
    print(json.dumps({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "hwm_kb": int(next(x.split()[1] for x in open("/proc/self/status")
                                         if x.startswith("VmHWM")))}))
"""


def make_run(src: Path, run_dir: Path, packets: int) -> dict:
    """A run directory of >= `packets` captured packets from the records of `src` (see
    step 4 of the module text): pcap/r{i}a-eth0.pcap and pcap/r{i}b-eth0.pcap per copy."""
    import numpy as np
    from incastlab.analysis.pcap import LINKTYPE_ETHERNET, record_offsets
    data = src.read_bytes()
    offs, info = record_offsets(data)
    if info["linktype"] != LINKTYPE_ETHERNET:
        sys.exit("the memory benchmark needs an Ethernet capture (tcpdump -i lo gives one)")
    endian = info["endian"] + "u4"
    body = np.frombuffer(data, np.uint8).copy()
    h4 = np.ndarray((len(body) - 3,), dtype=endian, buffer=body, strides=(1,))
    b2 = np.ndarray((len(body) - 1,), dtype=">u2", buffer=body, strides=(1,))
    cap = h4[offs + 8]
    ip = offs[(cap >= 34) & (b2[np.minimum(offs + 28, len(b2) - 1)] == 0x0800)] + 30
    n = len(offs)
    copies = -(-packets // (2 * n))
    (run_dir / "pcap").mkdir(parents=True, exist_ok=True)
    end = int(offs[-1] + 16 + cap[-1])
    for r in range(copies):
        for addr in (ip + 12, ip + 16):  # src, dst: second and third octet = copy + 1
            body[addr + 1], body[addr + 2] = (r + 1) >> 8, (r + 1) & 255
        (run_dir / "pcap" / f"r{r}a-eth0.pcap").write_bytes(body[:end].tobytes())
        shifted = body[:end].copy()
        s4 = np.ndarray((len(shifted) - 3,), dtype=endian, buffer=shifted, strides=(1,))
        frac = s4[offs + 4].astype(np.int64) + (50_000 if info["nano"] else 50)
        unit = 10**9 if info["nano"] else 10**6
        s4[offs] += (frac >= unit).astype(np.uint32)
        s4[offs + 4] = frac % unit
        (run_dir / "pcap" / f"r{r}b-eth0.pcap").write_bytes(shifted.tobytes())
    (run_dir / "manifest.json").write_text(json.dumps({"format_version": 1,
                                                       "status": "complete"}))
    return {"packets": 2 * n * copies, "captures": 2 * copies,
            "bytes": sum(p.stat().st_size for p in (run_dir / "pcap").glob("*.pcap"))}


# `incastlab ARGS` in-process, then its own peak RSS (VmHWM: this process image's
# high-water mark) as the last line. ru_maxrss is not enough: Linux carries the parent's
# high-water mark over exec (a child spawned by vfork reads the parent's mm), so a child
# of this script, which held the source capture and its copies (~440 MB), could not
# show less than that (the imports alone "took" 440 MB).
CLI_PEAK = """
    import atexit, json, sys
    from incastlab.cli import main
    def hwm():
        with open("/proc/self/status") as f:
            kb = next(int(x.split()[1]) for x in f if x.startswith("VmHWM"))
        print(json.dumps({"hwm_kb": kb}), flush=True)
    atexit.register(hwm)
    sys.argv = ["incastlab", *sys.argv[1:]]
    sys.exit(main())
"""


def _peak(cmd: list[str]) -> dict:
    """Run `cmd`; its wall time and peak RSS (its own rusage, os.wait4; `hwm_kb` too when
    it prints its own VmHWM as its last line, the figure to use)."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(p.pid, 0)  # this child's own peak, not the others'
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    r = {"seconds": time.perf_counter() - t, "returncode": p.returncode,
         "maxrss_kb": usage.ru_maxrss}
    if r["returncode"] != 0:
        r["error"] = (err.decode(errors="replace").strip().splitlines() or ["failed"])[-1]
    lines = out.decode(errors="replace").strip().splitlines()
    if lines and lines[-1].startswith("{"):
        r.update(json.loads(lines[-1]))
    return r


def memory_benchmark(src: Path, workdir: Path, packets: int, small: int, keep: bool) -> dict:
    """Peak RSS of `incastlab report` on a run of >= `packets` packets, and of the new
    and the former all-in-memory analysis on one of >= `small` packets (step 4)."""
    cli = [sys.executable, "-c", textwrap.dedent(CLI_PEAK)]
    out = {}
    for name, n in (("small", small), ("big", packets)):
        run_dir = workdir / f"memory-{name}"
        shutil.rmtree(run_dir, ignore_errors=True)
        try:
            out[name] = {"run": make_run(src, run_dir, n)}
            out[name]["report"] = _peak([*cli, "report", str(run_dir)])
            if name == "small":  # after the report: the captures' Parquet caches exist
                code = textwrap.dedent(ALL_IN_MEMORY)
                out[name]["all_in_memory_tcp"] = _peak([sys.executable, "-c", code,
                                                        str(run_dir)])
        finally:
            if not keep:
                shutil.rmtree(run_dir, ignore_errors=True)
    old = out["small"].get("all_in_memory_tcp", {})
    base = _peak([sys.executable, "-c", textwrap.dedent(IMPORTS_ONLY)])
    out["imports_only_maxrss_kb"] = _kb(base)
    if "maxrss_kb" in old:
        per_packet = (_kb(old) - _kb(base)) * 1024 / out["small"]["run"][
            "packets"]
        out["all_in_memory_bytes_per_packet"] = per_packet
        out["all_in_memory_big_extrapolated_gb"] = (
            per_packet * out["big"]["run"]["packets"] + _kb(base) * 1024) / 1e9
    return out


def _kb(r: dict) -> int:
    """A child's own peak RSS (kB): its VmHWM when it said it, else ru_maxrss."""
    return r.get("hwm_kb", r["maxrss_kb"])


def run_parser(name: str, pcap: Path, limit: int, repeat: int = 1) -> dict:
    """Best of `repeat` fresh subprocesses (by CPU time); each prints one JSON line."""
    code = textwrap.dedent(PARSERS[name])
    best = None
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", code, str(pcap), str(limit)],
                             capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None or r["cpu_seconds"] < best["cpu_seconds"]:
            best = r
    best["runs"] = repeat
    best["rate_pps"] = best["packets"] / best["seconds"]
    best["cpu_rate_pps"] = best["packets"] / best["cpu_seconds"]
    return best


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcap", type=Path, help="use this capture instead of making one")
    ap.add_argument("--packets", type=int, default=600_000, help="packets to capture")
    ap.add_argument("--big", type=int, default=5_000_000, help="packets in the big capture")
    ap.add_argument("--scapy-subset", type=int, default=30_000)
    ap.add_argument("--max-seconds", type=float, default=60.0, help="capture time bound")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir())
                    / "incastlab-bench")
    ap.add_argument("--keep", action="store_true", help="keep the captures")
    ap.add_argument("--repeat", type=int, default=3,
                    help="fresh runs of the project parser (best by CPU time is kept)")
    ap.add_argument("--memory-packets", type=int, default=20_000_000,
                    help="packets in the run whose report's peak memory is measured (0: skip)")
    ap.add_argument("--memory-small-packets", type=int, default=3_000_000,
                    help="packets in the run on which the all-in-memory analysis is measured")
    ap.add_argument("--memory-only", action="store_true",
                    help="only the memory of the analysis (step 4), not the parsers' rates")
    ap.add_argument("--results", default=None, metavar="FILE",
                    help="also write the JSON there (benchmarks/results/parse_pcap.json)")
    return ap.parse_args(argv)


def measure_all(args: argparse.Namespace, pcap: Path) -> dict:
    """Steps 2-4 on `pcap`: every parser's rate, the big capture's, the analysis's memory."""
    results = {}
    for name in () if args.memory_only else ("project", "dpkt", "tshark", "scapy"):
        if name == "tshark" and not shutil.which("tshark"):
            results[name] = {"error": "tshark not installed"}
            continue
        limit = args.scapy_subset if name == "scapy" else 0
        results[name] = run_parser(name, pcap, limit, args.repeat if name == "project" else 1)
    total = results.get("project", {}).get("packets")
    if "rate_pps" in results.get("scapy", {}):
        results["scapy"]["extrapolated_seconds_full_file"] = total / results["scapy"]["rate_pps"]
    big = args.workdir / "big.pcap"
    if not args.memory_only:
        info = make_big(pcap, big, args.big)
        results["project_big"] = run_parser("project", big, 0, args.repeat)
    if "seconds" in results.get("project_big", {}):
        r = results["project_big"]
        r["file_bytes"] = big.stat().st_size
        r.update(info)
    if args.memory_packets:
        results["memory"] = memory_benchmark(pcap, args.workdir, args.memory_packets,
                                             args.memory_small_packets, args.keep)
    if not args.keep:
        big.unlink(missing_ok=True)
    return results


def print_rates(results: dict) -> None:
    """The parsers' table: packets, times, rates, peak RSS, CPU speed against ours."""
    base = results.get("project", {}).get("cpu_rate_pps")
    print(f"{'parser':<12}{'packets':>10}{'wall s':>9}{'CPU s':>9}{'pkt/s wall':>13}"
          f"{'pkt/s CPU':>13}{'peak RSS MB':>13}{'CPU speed vs project':>22}")
    for name, r in results.items():
        if name == "memory":
            continue
        if "error" in r:
            print(f"{name:<12} error: {r['error']}")
            continue
        ratio = r["cpu_rate_pps"] / base if base else float("nan")
        note = " (subset, rate extrapolated)" if name == "scapy" else ""
        note += " (repeated real records)" if name == "project_big" else ""
        print(f"{name:<12}{r['packets']:>10}{r['seconds']:>9.2f}{r['cpu_seconds']:>9.2f}"
              f"{r['rate_pps']:>13,.0f}{r['cpu_rate_pps']:>13,.0f}"
              f"{r['maxrss_kb'] / 1024:>13.0f}{ratio:>21.4f}x{note}")


def print_memory(mem: dict) -> None:
    """The analysis's memory: each run's peak RSS, and the all-in-memory extrapolation."""
    print(f"{'analysis memory':<28}{'packets':>12}{'captures':>10}{'wall s':>9}"
          f"{'peak RSS MB':>13}")
    for name in ("small", "big"):
        run = mem[name]["run"]
        for what in ("report", "all_in_memory_tcp"):
            r = mem[name].get(what)
            if r is None:
                continue
            label = ("incastlab report" if what == "report" else "all-in-memory TCP")
            print(f"{label + ' (' + name + ')':<28}{run['packets']:>12}{run['captures']:>10}"
                  f"{r['seconds']:>9.1f}{_kb(r) / 1024:>13.0f}"
                  + (f"  error: {r['error']}" if "error" in r else ""))
    if "all_in_memory_big_extrapolated_gb" in mem:
        print(f"all-in-memory: {mem['all_in_memory_bytes_per_packet']:.0f} bytes/packet "
              f"above the imports' {mem['imports_only_maxrss_kb'] / 1024:.0f} MB -> "
              f"{mem['all_in_memory_big_extrapolated_gb']:.1f} GB for the big run "
              "(extrapolated)")


def main(argv=None) -> int:
    args = parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    made = {}
    pcap = args.pcap
    if pcap is None:
        pcap = args.workdir / "lo.pcap"
        made = make_capture(pcap, args.packets, args.max_seconds)
    load_before = os.getloadavg()
    results = measure_all(args, pcap)
    total = results.get("project", {}).get("packets")
    pcap_bytes = pcap.stat().st_size
    if not args.keep and args.pcap is None:
        pcap.unlink(missing_ok=True)
    print(f"capture: {pcap} ({total} TCP packets, {pcap_bytes} bytes)"
          f"{'; made with ' + made['tool'] + ' over 127.0.0.1' if made else ''}")
    if made and total is not None and total < args.packets:
        print(f"note: only {total} of {args.packets} packets were captured within "
              f"--max-seconds {args.max_seconds:g} (a busy machine sends less)")
    print(f"load average before/after: {load_before[0]:.2f} / {os.getloadavg()[0]:.2f} "
          "(2 cores shared; wall time suffers from other load, CPU time less so)")
    print_rates(results)
    if results.get("memory"):
        print_memory(results["memory"])
    figures = {"capture": {"path": str(pcap), "packets": total, "bytes": pcap_bytes, **made},
               "loadavg_before": load_before[0], "loadavg_after": os.getloadavg()[0],
               "results": results, "baseline_rss_note":
               "peak RSS includes the interpreter, numpy and pandas (~100 MB)"}
    print(json.dumps(figures))
    from render_results import write_results  # benchmarks/, the script's own folder
    write_results(args.results, {"benchmark": "parse_pcap", **figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
