"""The classic incast benchmark (``kind = "incast"``): one receiver (the client, on
``ps_leaf``) requests a block from every sender at once, round after round, the way a
storage client reads a striped block (Phanishayee et al., FAST'08). The program is
``incastlab.apps.incast``; this module owns its spec fields, placement, launch plan and
cost model."""
from __future__ import annotations

import functools
import html
import sys
from dataclasses import dataclass

from incastlab.analysis.trace_events import LoggedSpan

from incastlab.apps.commands import Endpoint, iface_args, option_args
from incastlab.fields import int_check, num_check, spec_field
from incastlab.jobs.base import Job, Launch, Roles, Section, endpoints
from incastlab.topologies import naming

INCAST_PORT = 5001
KERNEL_RTO_MIN_MS = 200.0  # Linux's TCP_RTO_MIN, where the spec sets none
COLLAPSE_RATIO = 2.0  # RTO_min at least this many rounds long: "RTO_min >> N*block/B"


def collapse_condition(senders: int, block_bytes: float, link_mbps: float,
                       rto_min_ms: float | None, goodputs_mbps=(), rto_rounds: int = 0
                       ) -> dict:
    """The incast collapse condition of this run, with its numbers (pure).

    A round moves N·block bytes through the receiver's link of B Mbit/s, so at line rate
    it lasts N·block/B. A round that loses a block's tail cannot recover it by fast
    retransmit (no later segments to return duplicate ACKs) and waits for a timeout of at
    least RTO_min; when RTO_min ≫ N·block/B that wait dwarfs the round and goodput
    collapses to at most N·block/(N·block/B + RTO_min) (Phanishayee et al., FAST'08;
    Vasudevan et al., SIGCOMM'09, whose fix is RTO_min ≈ 1 ms; Chen et al., WREN'09).
    Returns round_ms, rto_min_ms, ratio, expected ("collapse"/"no collapse"),
    worst_mbps (one RTO in every round), measured mean goodput and the rounds with an
    RTO, and the sentence the report prints."""
    rto = KERNEL_RTO_MIN_MS if rto_min_ms is None else float(rto_min_ms)
    bits = senders * block_bytes * 8
    round_ms = bits / (link_mbps * 1e6) * 1e3
    ratio = rto / round_ms
    worst = bits / ((round_ms + rto) / 1e3) / 1e6
    goodputs = [float(g) for g in goodputs_mbps if g == g]  # NaN-free
    mean = sum(goodputs) / len(goodputs) if goodputs else None
    collapse = ratio >= COLLAPSE_RATIO
    text = (f"Incast collapse condition: RTO_min ≫ N·block/B. Here a round moves "
            f"N·block = {senders} × {block_bytes / 1024:g} KiB through the receiver's "
            f"{link_mbps:g} Mbit/s link: N·block/B = {round_ms:.1f} ms at line rate; "
            f"RTO_min = {rto:g} ms{'' if rto_min_ms is not None else ' (the kernel default)'}"
            f", {ratio:.2g}× a round. ")
    if collapse:
        text += (f"So collapse is expected: a round that loses a block's tail waits for a "
                 f"timeout longer than the round itself, and with one in every round "
                 f"goodput falls to N·block/(N·block/B + RTO_min) = {worst:.1f} Mbit/s "
                 f"(ideal {link_mbps:g}). ")
    else:
        text += (f"So no collapse is expected: a timeout costs less than "
                 f"{COLLAPSE_RATIO:g} rounds, and even with one in every round goodput "
                 f"stays at {worst:.1f} Mbit/s or more (ideal {link_mbps:g})"
                 + (" — the fix of Vasudevan et al. (SIGCOMM'09), with the kernel's timer "
                    "tick rounding a 1 ms timeout up to a few ms" if rto <= 10 else "")
                 + ". ")
    if mean is not None:
        text += (f"Measured: mean goodput {mean:.1f} Mbit/s over {len(goodputs)} rounds "
                 f"({mean / link_mbps:.0%} of the link), {rto_rounds} of them with an RTO.")
    return {"round_ms": round_ms, "rto_min_ms": rto, "ratio": ratio,
            "expected": "collapse" if collapse else "no collapse", "worst_mbps": worst,
            "mean_goodput_mbps": mean, "rto_rounds": rto_rounds, "text": text}


@dataclass
class IncastFields:
    senders: int = spec_field(4, int_check(1, naming.MAX_HOSTS_PER_LEAF - 1),
                              "incast: hosts sending to the receiver at once", sweep=True)
    block_bytes: int = spec_field(131_072, int_check(1, 1 << 30, unit="bytes"),
                                  "incast: bytes each sender sends per round")
    rounds: int = spec_field(20, int_check(1, 100_000), "incast: synchronized rounds")
    interval_s: float = spec_field(0.0, num_check(0, 60, unit="s"),
                                   "incast: the receiver's pause between rounds (each "
                                   "sender's flow idles at least this long between blocks)")


class IncastJob(Job):
    kind = "incast"
    summary = "incast benchmark: the receiver reads a block from every sender at once"
    host_count_fields = ("senders",)
    logged_modes = ("incast",)
    Fields = IncastFields
    progress_event = "round"
    role_nouns = {"client": "the incast receiver", "incast-server": "an incast sender"}
    trace_spans = (
        LoggedSpan("round", lambda r: f"round {int(r.round)}", "round", "t_start", "t_end",
                   ("round", "senders", "block_bytes", "bytes", "goodput_mbps")),
        LoggedSpan("served", lambda r: f"serve round {int(r.round)}", "comm", "t_request",
                   "t_sent", ("round", "bytes")),
    )

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
                   "interval": f"{w.interval_s:g}" if w.interval_s else None,
                   "timeout": f"{w.timeout_s:g}",
                   "rto_min_ms": f"{w.rto_min_ms:g}" if w.rto_min_ms is not None else None}
        argvs = incast_commands(endpoints(ips, hosts), out_dir, INCAST_PORT, options)
        client = Launch(hosts[0], argvs[0], 0, "client", True)
        servers = [Launch(host, argv, rank, "incast-server", False)
                   for rank, (host, argv) in enumerate(zip(hosts[1:], argvs[1:], strict=True),
                                                       start=1)]
        return servers + [client]

    # -- analysis --------------------------------------------------------------------
    def bound(self, analysis):
        """One round: N blocks through the receiver's port (the incast queue), each
        sender's own link and the uplinks (jobs/incast_bound.py)."""
        from incastlab.analysis import runview
        from incastlab.jobs.incast_bound import incast_bound

        w, p = runview.workload(analysis, self.Fields), runview.placed(analysis)
        if p is None or analysis.fabric is None or not p.servers or not p.workers:
            return None
        receiver = p.servers[0]
        rates = [runview.host_mbps(analysis, h) for h in p.workers]
        b_r = runview.host_mbps(analysis, receiver)
        if b_r is None or None in rates:
            return None
        spines = runview.usable_spines(analysis)
        fabric = {"sender_leaves": [runview.leaf_of(analysis, h) for h in p.workers],
                  "receiver_leaf": runview.leaf_of(analysis, receiver), "spines": spines,
                  "fabric_mbps": analysis.fabric.fabric_bw_mbps} \
            if spines and analysis.fabric.fabric_bw_mbps else {}
        return incast_bound(len(p.workers), float(w.block_bytes), b_r, sender_mbps=rates,
                            mtu=runview.mtu(analysis), **fabric)

    def attribution_rows(self, analysis):
        """Each round, at the receiver: every block's flow ends at its host."""
        from incastlab.analysis import runview
        rounds = analysis.tables["rounds"].copy()
        p = runview.placed(analysis)
        rounds["host"] = p.servers[0] if p and p.servers else None
        return rounds, []

    def tables(self, analysis) -> dict:
        from incastlab.jobs.incast_tables import incast_rounds

        return {"rounds": incast_rounds(analysis.tables["workers_raw"])}

    def plots(self, analysis) -> dict:
        from incastlab.jobs.incast_figures import incast_goodput

        r = analysis.tables["retrans"]
        rto = r.loc[r["event"].astype(bool) & (r["kind"] == "rto"), "t"] if len(r) else []
        return {"incast": lambda path: incast_goodput(analysis.tables["rounds"], path, rto)}

    def sections(self, analysis, figs) -> list[Section]:
        from incastlab.analysis import render
        if analysis.tables["rounds"].empty:
            return [Section("Incast benchmark goodput", *render.none(
                "no round events in the client's log"))]
        rounds = render.rel(analysis.tables["rounds"], analysis.t0)
        cond = self.condition(analysis)
        note = f"<p>{html.escape(cond['text'])}</p>" if cond else ""
        note_md = f"{cond['text']}\n\n" if cond else ""
        return [Section("Incast benchmark goodput (s since run start)",
                        note + render.img(figs.get("incast"), "incast")
                        + render.df_html(rounds), note_md + render.df_md(rounds))]

    def metrics(self) -> list:
        return list(_metrics())

    def cost_clause(self, analysis) -> str | None:
        """'the incast client received 41 Mbit/s on average over 20 rounds; 7 of them had
        an RTO'."""
        import pandas as pd

        rounds = analysis.tables.get("rounds")
        if rounds is None or not len(rounds):
            return None
        g = pd.to_numeric(rounds["goodput_mbps"], errors="coerce").mean()
        with_rto = (analysis.metrics.get("headline") or {}).get("rounds_with_rto")
        n = len(rounds)
        text = (f"the incast client received {g:.3g} Mbit/s on average over {n:,.0f} "
                f"round{'' if n == 1 else 's'}")
        return text + (f"; {with_rto:,.0f} of them had an RTO" if with_rto is not None
                       else "; without captures, RTOs per round are unknown")

    def condition(self, analysis) -> dict | None:
        """`collapse_condition` with this run's senders, block, receiver link, RTO_min,
        rounds and RTOs; None where the fabric map or placement is missing."""
        from incastlab.analysis import runview
        w, p = runview.workload(analysis, self.Fields), runview.placed(analysis)
        if p is None or not p.servers or not p.workers:
            return None
        link = runview.host_mbps(analysis, p.servers[0])
        if link is None:
            return None
        r = analysis.tables["rounds"]
        t = analysis.tables["retrans"]
        rto = t.loc[t["event"].astype(bool) & (t["kind"] == "rto"), "t"].to_numpy() \
            if len(t) else []
        hit = sum(bool(((rto >= t0) & (rto <= t1)).any())
                  for t0, t1 in zip(r["t_start"].astype(float), r["t_end"].astype(float),
                                    strict=True)) if len(rto) else 0
        rto_min_ms = runview.common_field(analysis, "rto_min_ms")
        return collapse_condition(len(p.workers), float(w.block_bytes), link, rto_min_ms,
                                  r["goodput_mbps"].astype(float).tolist(), hit)


@functools.cache
def _metrics() -> tuple:
    """The incast benchmark's headline metrics (declared once), in the headline where
    they always were."""
    from incastlab.analysis.metrics import Metric, mean_of
    from incastlab.jobs.incast_tables import rounds_with_rto

    def with_rto(a):
        captured = (a.metrics.get("reconciliation") or {}).get("capture_retrans") is not None
        return rounds_with_rto(a.tables.get("rounds"),
                               a.tables.get("retrans") if captured else None)

    return (
        Metric("goodput_mbps", "incast goodput", "Mbit/s",
               "Incast benchmark: bytes the client received per round over the round's "
               "duration, mean over rounds.",
               mean_of("rounds", "goodput_mbps"), ("workers",),
               "no incast rounds in the worker logs", cli=True, plot=True,
               after="kernel_timeouts"),
        Metric("rounds_with_rto", "incast rounds with an RTO", "rounds",
               "Incast rounds during which at least one retransmission timeout fired.",
               with_rto, ("workers", "pcap", "flows"), "no incast rounds in the worker logs",
               after="kernel_timeouts"),
    )


def incast_commands(hosts: list[Endpoint], out: str, port: int, options: dict,
                    python: str = sys.executable) -> list[list[str]]:
    """argv of incastlab.apps.incast's client (rank 0, on hosts[0]) then of the servers
    (ranks 1..N, listening on `port`).

    Server options (the client's block size, rounds, ... are client-only) are limited to
    `timeout`; everything else goes to the client.
    """
    servers = hosts[1:]
    client_opts = option_args(options)
    server_opts = option_args({k: v for k, v in options.items() if k == "timeout"})
    app = [python, "-m", "incastlab.apps.incast"]
    argvs = [app + ["--role", "client", "--rank", "0", *iface_args(hosts[0]),
                    "--out", str(out),
                    "--servers", ",".join(f"{h.addr}:{port}" for h in servers), *client_opts]]
    for rank, host in enumerate(servers, start=1):
        argvs.append(app + ["--role", "server", "--rank", str(rank), *iface_args(host),
                            "--out", str(out), "--listen", f"{host.addr}:{port}",
                            *server_opts])
    return argvs
