"""The classic incast benchmark (``kind = "incast"``): one receiver (the client, on
``ps_leaf``) requests a block from every sender at once, round after round, the way a
storage client reads a striped block (Phanishayee et al., FAST'08). The program is
``incastlab.apps.incast``; this module owns its spec fields, placement, launch plan and
cost model."""
from __future__ import annotations

from dataclasses import dataclass

from incastlab.apps.commands import WORKLOADS as APP_COMMANDS
from incastlab.fields import int_check, spec_field
from incastlab.jobs import reporting as rep
from incastlab.jobs import runview
from incastlab.jobs.base import Job, Launch, Roles, Section, endpoints
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
    logged_modes = ("incast",)
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

    # -- analysis --------------------------------------------------------------------
    def bound(self, a):
        """One round: N blocks through the receiver's port (the incast queue), each
        sender's own link and the uplinks (analysis.costmodel.incast_bound)."""
        w, p = runview.workload(a), runview.placed(a)
        if p is None or a.fabric is None or not p.servers or not p.workers:
            return None
        receiver = p.servers[0]
        rates = [runview.host_mbps(a, h) for h in p.workers]
        b_r = runview.host_mbps(a, receiver)
        if b_r is None or None in rates:
            return None
        spines = runview.usable_spines(a)
        fabric = {"sender_leaves": [runview.leaf_of(a, h) for h in p.workers],
                  "receiver_leaf": runview.leaf_of(a, receiver), "spines": spines,
                  "fabric_mbps": a.fabric.fabric_bw_mbps} \
            if spines and a.fabric.fabric_bw_mbps else {}
        return rep.costmodel.incast_bound(len(p.workers), float(w.block_bytes), b_r,
                                          sender_mbps=rates, **fabric)

    def attribution_rows(self, a):
        """Each round, at the receiver: every block's flow ends at its host."""
        rounds = a.tables["rounds"].copy()
        p = runview.placed(a)
        rounds["host"] = p.servers[0] if p and p.servers else None
        return rounds, []

    def tables(self, a) -> dict:
        return {"rounds": rep.training.incast_rounds(a.tables["workers_raw"])}

    def plots(self, a) -> dict:
        r = a.tables["retrans"]
        rto = r.loc[r["event"].astype(bool) & (r["kind"] == "rto"), "t"] if len(r) else []
        return {"incast": lambda path: rep.plotting.incast_goodput(a.tables["rounds"], path,
                                                                   rto)}

    def sections(self, a, figs) -> list[Section]:
        if a.tables["rounds"].empty:
            return [Section("Incast benchmark goodput", *rep.render.none(
                "no round events in the client's log"))]
        rounds = rep.render.rel(a.tables["rounds"], a.t0)
        return [Section("Incast benchmark goodput (s since run start)",
                        rep.render.img(figs.get("incast"), "incast")
                        + rep.render.df_html(rounds), rep.render.df_md(rounds))]
