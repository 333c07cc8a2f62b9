"""`iperf` and `iperfudp` for the Mininet CLI of `incastlab cli`, measured with iperf3.

Mininet's own `iperf` waits for two "/sec" lines from an iperf 2 server, one of them for
its telnet readiness probe; Debian 12's iperf 2.1.8 prints none for the probe, so the
command never returns. These run a one-shot iperf3 server and client through the
Fabric (recorded processes, torn down with it) and print Mininet's result line:
``*** Results: ['<server> Mbits/sec', '<client> Mbits/sec']`` (server first, as Mininet).
"""
from __future__ import annotations

from mininet.cli import CLI

from incastlab import iperf

__all__ = ["FabricCLI", "iperf_line"]

TEST_S = 5.0  # Mininet's iperf default: a 5 s test


def iperf_line(fabric, client: str, server: str, udp_bw: str | None = None) -> str:
    """Run iperf3 from ``client`` to ``server`` (UDP at ``udp_bw``, e.g. "10M", when
    given) and return Mininet's result line."""
    extra = ["-u", "-b", udp_bw] if udp_bw else []
    srv, cli = iperf.pair(fabric, client, server, TEST_S, extra=extra)
    try:
        report = iperf.result(cli, timeout=TEST_S + 15)
    finally:
        srv.wait(timeout=TEST_S + 15)
    end = report["end"]
    if udp_bw:
        summary = end["sum"]
        sent, got = summary["bits_per_second"], summary["bits_per_second"] * (
            1 - summary.get("lost_percent", 0.0) / 100)
        return (f"*** Results: ['{udp_bw}', '{got / 1e6:.3g} Mbits/sec', "
                f"'{sent / 1e6:.3g} Mbits/sec']")
    got, sent = end["sum_received"]["bits_per_second"], end["sum_sent"]["bits_per_second"]
    return f"*** Results: ['{got / 1e6:.3g} Mbits/sec', '{sent / 1e6:.3g} Mbits/sec']"


class FabricCLI(CLI):
    """Mininet's CLI with `iperf` / `iperfudp` that return (see the module docstring)."""

    def __init__(self, fabric, **kwargs):
        self.fabric = fabric  # before CLI.__init__, which runs the command loop
        super().__init__(fabric.net, **kwargs)

    def _hosts(self, names: list[str]) -> list[str] | None:
        hosts = [h.name for h in self.mn.hosts]
        if not names:
            return [hosts[0], hosts[-1]]
        missing = [n for n in names if n not in hosts]
        if missing:
            print(f"*** node '{missing[0]}' is not a host of the network")
            return None
        return names

    def _run(self, names: list[str], udp_bw: str | None) -> None:
        hosts = self._hosts(names)
        if hosts is None:
            return
        print(f"*** Iperf: testing {'UDP' if udp_bw else 'TCP'} bandwidth between "
              f"{hosts[0]} and {hosts[1]}", flush=True)
        try:
            print(iperf_line(self.fabric, hosts[0], hosts[1], udp_bw), flush=True)
        except (RuntimeError, ValueError, KeyError, OSError) as exc:
            print(f"*** iperf failed: {exc}", flush=True)

    def do_iperf(self, line):
        """TCP throughput between two hosts (default: the first and the last).
           Usage: iperf [src dst]"""
        args = line.split()
        if len(args) not in (0, 2):
            print("*** invalid number of args: iperf src dst")
            return
        self._run(args, None)

    def do_iperfudp(self, line):
        """UDP throughput at a rate between two hosts (default: the first and the last).
           Usage: iperfudp bw [src dst]   (bw e.g. 10M)"""
        args = line.split()
        if len(args) not in (1, 3):
            print("*** invalid number of args: iperfudp bw src dst (bw e.g. 10M)")
            return
        self._run(args[1:], args[0])
