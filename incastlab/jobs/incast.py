"""The classic incast benchmark (``kind = "incast"``): one receiver (the client, on
``ps_leaf``) requests a block from every sender at once, round after round, the way a
storage client reads a striped block (Phanishayee et al., FAST'08). The program is
``incastlab.apps.incast``; this module owns its spec fields, placement, launch plan and
cost model."""
from __future__ import annotations

from dataclasses import dataclass

from incastlab.apps.commands import WORKLOADS as APP_COMMANDS
from incastlab.fields import int_check, spec_field
from incastlab.jobs.base import Job, Launch, Roles, endpoints
from incastlab.topologies import naming

INCAST_PORT = 5001


@dataclass
class IncastFields:
    senders: int = spec_field(4, int_check(1, naming.MAX_HOSTS_PER_LEAF - 1),
                              "incast: hosts sending to the receiver at once", sweep=True)
    block_bytes: int = spec_field(131_072, int_check(1, 1 << 30, unit="bytes"),
                                  "incast: bytes each sender sends per round")
    rounds: int = spec_field(20, int_check(1, 100_000), "incast: synchronized rounds")


class IncastJob(Job):
    kind = "incast"
    summary = "incast benchmark: the receiver reads a block from every sender at once"
    host_count_fields = ("senders",)
    Fields = IncastFields
    progress_event = "round"

    def roles(self, w) -> Roles:
        return Roles(1, w.senders, "senders", "receiver", "workload.senders")

    def expected_progress(self, w) -> int:
        return int(w.rounds)

    def launches(self, spec, ips, out_dir) -> list[Launch]:
        """The receiver is the client (rank 0) that reads from every sender at once; the
        senders serve blocks (ranks 1..N). Servers start first so the client finds them."""
        w = spec.workload
        placed = spec.placement()
        hosts = (placed.servers[0],) + placed.workers
        options = {"block_size": w.block_bytes, "rounds": w.rounds,
                   "timeout": f"{w.timeout_s:g}",
                   "rto_min_ms": f"{w.rto_min_ms:g}" if w.rto_min_ms is not None else None}
        argvs = APP_COMMANDS["incast"](endpoints(ips, hosts), out_dir, INCAST_PORT, options)
        client = Launch(hosts[0], argvs[0], 0, "client", True)
        servers = [Launch(host, argv, rank, "incast-server", False)
                   for rank, (host, argv) in enumerate(zip(hosts[1:], argvs[1:], strict=True),
                                                       start=1)]
        return servers + [client]
