"""The report's core sections, each a declared stage (stages.py) of its own.

Their tables come from the common pass over the run (reading.py), so these stages only
render: ``STAGES`` lists them in page order, with the common figures first
(render.plot_all). Latency, failover and multi-job add their stages after these
(stages.declared)."""
from __future__ import annotations

import html
import json

from . import fabricpic, network_cost, metrics
from . import labels as words
from . import flowroles as fr
from . import render
from .render import figure, fmt, img, md_img, none, rel, table
from .stages import Section, Stage

__all__ = ["STAGES", "fabric_section", "headline_section"]


def headline_section(a) -> Section:
    """The headline table: every declared metric this run's job measures (metrics.py),
    with its value, unit and meaning; n/a rows say why."""
    jobs = getattr(a, "jobs", None)
    readings = metrics.shown(metrics.from_json(a.metrics, jobs), a.metrics["run"].get("kind"),
                             jobs)
    rows, md = [], ["| metric | value | meaning |", "|---|---|---|"]
    for r in readings:
        m = r.metric
        why = f" n/a: {r.reason}" if r.value is None and r.reason else ""
        rows.append(
            f"<tr><th class='l'>{html.escape(m.label)}<br><code title='computed from "
            f"{html.escape(m.input_files())}'>{html.escape(m.name)}</code>"
            f"</th><td class='v'>{html.escape(r.text)}</td><td class='l'>"
            f"{html.escape(m.unit)}</td><td class='l'>{html.escape(m.meaning)}"
            + (f"<br><span class='none'>{html.escape(why.strip())}</span>" if why else "")
            + "</td></tr>")
        md.append(f"| {m.label} (`{m.name}`) | {m.text_with_unit(r.value)} | "
                  f"{m.meaning}{' _' + why.strip() + '_' if why else ''} |")
    head = ("<table class='tbl head'><tr><th class='l'>metric (metrics.json key)</th><th>value</th>"
            "<th class='l'>unit</th><th class='l'>what it means</th></tr>" + "".join(rows)
            + "</table>")
    return Section("Headline numbers", head, "\n".join(md) + "\n")


def fabric_section(a) -> Section:
    """The fabric picture (fabricpic.py): switches, hosts with their roles, each link
    direction coloured by its queue's peak and marked with its drops."""
    if a.fabric is None:
        return Section("The fabric", *none(a.missing.get("fabric", "no fabric.json")))
    roles = fr.host_roles(a.manifest)
    try:
        svg = fabricpic.fabric_svg(a.fabric, a.tables.get("queue_summary"), roles)
    except Exception as exc:  # noqa: BLE001 - a drawing bug must not cost the report
        a.problems.append(f"the fabric picture failed ({type(exc).__name__}: {exc})")
        svg = "<p class='none'>(the picture could not be drawn)</p>"
    policy = (a.spec.get("routing") or {}).get("policy")
    text = (f"{a.fabric.spines} spine(s), {a.fabric.leaves} leaf switch(es), "
            f"{len(a.fabric.hosts)} hosts; links {a.fabric.host_bw_mbps:g} Mbit/s to hosts"
            + (f", {a.fabric.fabric_bw_mbps:g} Mbit/s leaf-spine"
               if a.fabric.fabric_bw_mbps else "")
            + f"; switch queues of {a.fabric.queue_limit_text()}"
            + (f"; MTU {a.fabric.mtu} bytes" if a.fabric.mtu != 1500 else "")
            + (f"; routing policy {policy}" if policy else "") + ".")
    md = text + "\n\n" + "".join(f"- {h}: {r}\n" for h, r in roles.items())
    return Section("The fabric", f"<p>{html.escape(text)}</p>{svg}", md)


def _reconciliation(a, figs) -> list[Section]:
    recon = a.tables["recon"]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in recon["notes"])
    tot_h, tot_m = table(a, recon["totals"], "reconciliation", md_cols=["measure", "source",
                                                                       "value"], md_rows=40)
    port_h, port_m = table(a, recon["ports"], "reconciliation_ports")
    host_h, _ = table(a, recon["hosts"], "reconciliation_hosts")
    hx = (tot_h + "<h3>Per port (tc drops vs losses seen in captures)</h3>" + port_h
          + "<h3>Per host (kernel vs captures)</h3>" + host_h + f"<ul>{notes}</ul>"
          + img(figs.get("reconciliation"), "reconciliation"))
    mx = (tot_m + "\nPer port:\n\n" + port_m + "\n" + md_img(figs, "reconciliation")
          + "".join(f"- {n}\n" for n in recon["notes"]))
    return [Section("Reconciliation: queue counters, captures, kernel counters", hx, mx)]


def _queues(a, figs) -> list[Section]:
    t = a.tables
    if t["queue_summary"].empty:
        return [Section("Queues", *none(a.missing.get("queues", "no queue samples")))]
    qs = rel(t["queue_summary"], a.t0)
    busy = qs[(qs["drops"] > 0) | (qs["sent_bytes"] > 0) | (qs["max_backlog_pkts"] > 0)]
    idle = len(qs) - len(busy)
    note = f"<p class='none'>{idle} idle port(s) not listed.</p>" if idle else ""
    qh, qm = table(a, busy, "queues", full=qs, md_cols=[
        "iface", "kind", "drops", "max_backlog_pkts", "sent_bytes"], md_rows=12)
    return [Section("Queues (times in s since run start)",
                    figure(figs, "queues", "queue occupancy") + qh + note,
                    md_img(figs, "queues") + qm)]


def _episodes(a, figs) -> list[Section]:
    t = a.tables
    e = t["episodes"]
    if t["queue_summary"].empty:
        return [Section("Incast episodes", *none("no queue samples: episodes need queues.csv"))]
    if e.empty:
        return [Section("Incast episodes", *none("no queue reached its limit or dropped"))]
    shifted = e.assign(start=e["start"] - a.t0, end=e["end"] - a.t0)
    eh, em = table(a, shifted, "incast_episodes", max_rows=25)
    pk = t.get("episode_packets")
    ph, pm = ("", "")
    if pk is not None and len(pk):
        ph, pm = table(a, pk.assign(start=pk["start"] - a.t0, end=pk["end"] - a.t0),
                       "incast_episode_packets", keys=1, max_rows=25)
        ph = ("<h3>The packets of each episode (open the capture in Wireshark, paste "
              "the filter)</h3>" + ph)
        pm = "\nThe packets of each episode (capture, Wireshark display filter):\n\n" + pm
    return [Section("Incast episodes (times since run start, s)", eh + ph, em + pm)]


def _flows(a, figs) -> list[Section]:
    t = a.tables
    if t["flows"].empty:
        return [Section("Flows", *none(a.missing.get("pcap") or a.missing.get("flows")
                                       or "no flows"))]
    labels = t.get("flow_labels") or {}
    full = rel(t["flows"], a.t0)
    full = full.assign(tuple=full["flow"], flow=full["flow"].map(lambda f: labels.get(f, f)))
    fl = full.drop(columns=["src", "dst", "sport", "dport", "tuple"])
    fh, fm = table(a, fl, "flows", full=full, md_cols=[
        "flow", "bytes", "retrans_packets", "fct_s", "goodput_mbps"])
    worst = ""
    if figs.get("sequence"):
        worst = ("<h3>The worst flow, packet by packet (time-sequence graph)</h3>"
                 + img(figs.get("sequence"), "time-sequence graph of the worst flow"))
    return [Section("Flows (times in s since run start)",
                    figure(figs, "throughput", "throughput") + fh + worst,
                    md_img(figs, "throughput") + fm + md_img(figs, "sequence"))]


def _retransmissions(a, figs) -> list[Section]:
    t, m = a.tables, a.metrics
    if t["flows"].empty:
        return [Section("Retransmissions and RTOs", *none("no captures with TCP payload"))]
    rs = m["retransmissions"]
    txt = (f"{rs['retrans_packets']} retransmitted packets ({rs['retrans_bytes']} bytes), "
           f"by what triggered them: {words.trigger_text(rs['by_kind'])}. "
           f"{rs['rto_events']} RTO firing(s); a retransmission counts as after a timeout "
           f"when the flow was silent for >= {m['run']['rto_threshold_s']} s before it.")
    labels = t.get("flow_labels") or {}
    eps = t["recovery_episodes"]
    eps = eps.assign(stall_start=eps["stall_start"] - a.t0, start=eps["start"] - a.t0,
                     end=eps["end"] - a.t0)
    eps_h, eps_m = table(a, fr.relabel(eps, labels), "recovery_episodes", keys=2)
    rto = t.get("rto_packets")
    rto_h, rto_m = "", ""
    if rto is not None and len(rto):
        rto_h, rto_m = table(a, rto.assign(t=rto["t"] - a.t0), "rto_packets")
        rto_h = ("<h3>Each RTO in the captures (open the capture in Wireshark, paste "
                 "the filter: the silence before the timer fired, then the resend)</h3>"
                 + rto_h)
        rto_m = "\nEach RTO (capture, Wireshark display filter):\n\n" + rto_m
    if "losses" in a.missing:
        loss_h = none(a.missing["losses"])[0]
    else:
        loss_h = table(a, fr.relabel(rel(t["losses"], a.t0).drop(
            columns=["src", "dst", "sport", "dport"]), labels), "losses")[0]
    return [Section("Retransmissions and RTOs", f"<p>{html.escape(txt)}</p>"
                    + img(figs.get("retransmissions"), "retransmissions") + rto_h
                    + "<h3>Recovery episodes (s since run start)</h3>" + eps_h
                    + "<h3>Losses between capture points (s since run start)</h3>" + loss_h,
                    txt + "\n" + md_img(figs, "retransmissions") + rto_m
                    + "\n\nRecovery episodes:\n\n" + eps_m)]


def _signed(v):
    return "n/a" if v is None else f"{v:+.3g} s"


def _training(a, figs) -> list[Section]:
    t, m = a.tables, a.metrics
    it = t["iterations"]
    if it.empty:
        msg = "no iteration events (an incast benchmark run, or no worker logs)"
        return [Section("Training: iteration time", *none(msg))]
    imp = m["training"]
    w, wo = imp["with_rto"], imp["without_rto"]
    txt = (f"{imp['iterations']} worker iterations; mean {fmt(imp['mean_s'])} s, median "
           f"{fmt(imp['median_s'])} s, p95 {fmt(imp['p95_s'])} s. With an RTO of the "
           f"worker's host: {w['n']} (mean {fmt(w['mean_s'])} s, "
           f"{_signed(w.get('extra_s_vs_no_rto'))} vs the {wo['n']} without). With a "
           f"loss but no RTO: {imp['with_loss']['n']} (mean "
           f"{fmt(imp['with_loss']['mean_s'])} s); clean: {imp['clean']['n']} (mean "
           f"{fmt(imp['clean']['mean_s'])} s). A loss is a capture loss of the worker's "
           "host or a tc drop on any port during the iteration.")
    hit = it[(it["rtos"] > 0) | (it["losses"] > 0) | (it["tc_drops"] > 0)]
    pw_h, pw_m = table(a, t["per_worker"], "per_worker")
    hit_h, _ = table(a, rel(hit, a.t0).drop(columns=["file"]), "iterations_with_events",
                     keys=2, full=rel(it, a.t0))
    return [Section("Training: iteration time", f"<p>{html.escape(txt)}</p>"
                    + figure(figs, "timeline", "timeline")
                    + img(figs.get("iterations"), "iterations")
                    + "<h3>Per worker (straggler = last to finish a synchronous "
                    "step)</h3>" + pw_h
                    + "<h3>Iterations with network events (s since run start)</h3>" + hit_h,
                    txt + "\n" + md_img(figs, "timeline") + md_img(figs, "iterations")
                    + "\nPer worker:\n\n" + pw_m)]


def _loss(a, figs) -> list[Section]:
    if not len(a.tables["loss_curve"]):
        return []
    return [Section("Training: loss", img(figs.get("loss"), "loss"),
                    f"final loss {fmt(a.metrics['headline'].get('final_loss'))}\n")]


def _balance(a, figs) -> list[Section]:
    t, m = a.tables, a.metrics
    if t["balance"].empty:
        return [Section("Fabric balance", *none(m["balance"].get("note")
                                                or "no spine links or no counters"))]
    b = m["balance"]
    txt = (f"max/mean bytes over spine links: up {fmt(b.get('max_mean_up'))}, down "
           f"{fmt(b.get('max_mean_down'))}, all {fmt(b.get('max_mean_all'))}")
    bh, bm = table(a, t["balance"], "balance")
    return [Section("Fabric balance", f"<p>{txt}</p>" + img(figs.get("balance"), "balance")
                    + bh, txt + "\n" + md_img(figs, "balance") + "\n" + bm)]


def job_spec_text(a, spec_text: str) -> str:
    """spec.toml as the run's job uses it: [workload] without the fields only other job
    kinds have (the resolved spec holds every kind's, at their defaults)."""
    import dataclasses
    import tomllib

    import tomli_w

    job = network_cost.job_of(a)
    try:
        spec = tomllib.loads(spec_text)
    except ValueError:
        return spec_text
    if job is None or not isinstance(spec.get("workload"), dict):
        return spec_text
    mine = {f.name for f in dataclasses.fields(job.Fields)}
    others = {f.name for kind, other in (a.jobs or {}).items() if other is not job
              for f in dataclasses.fields(other.Fields)} - mine
    spec["workload"] = {k: v for k, v in spec["workload"].items() if k not in others}
    return tomli_w.dumps(spec)


def _configuration(a, figs) -> list[Section]:
    path = a.run_dir / "spec.toml"
    spec_text = job_spec_text(a, path.read_text()) if path.exists() else "(no spec.toml)"
    man = json.dumps(a.manifest, indent=1, default=str) if a.manifest else "(no manifest.json)"
    return [Section("Configuration and environment",
                    "<details><summary>spec.toml: the fields this run's job uses (every "
                    "field, resolved, in the run directory's spec.toml)</summary>"
                    f"<pre>{html.escape(spec_text)}</pre></details>"
                    "<details><summary>manifest.json: what ran where, versions, the "
                    f"machine</summary><pre>{html.escape(man)}</pre></details>",
                    f"```toml\n{spec_text}\n```\n")]


STAGES: list[Stage] = [
    # every section's figures (PNG, and interactive where there is one), drawn first
    Stage("plots", ("queues_d", "queue_summary", "throughput", "flows", "retrans",
                    "iterations", "balance", "utilisation", "recon", "loss_curve"),
          figures=render.plot_all),
    Stage("headline", ("headline", "headline_na", "run"),
          render=lambda a, figs: [headline_section(a)]),
    Stage("fabric", ("fabric", "queue_summary"), render=lambda a, figs: [fabric_section(a)]),
    Stage("reconciliation", ("recon",), render=_reconciliation),
    Stage("queues", ("queue_summary",), render=_queues),
    Stage("episodes", ("episodes", "episode_packets"), render=_episodes),
    Stage("flows", ("flows", "flow_labels"), render=_flows),
    Stage("retransmissions", ("retrans", "recovery_episodes", "rto_packets", "losses"),
          render=_retransmissions),
    Stage("training", ("iterations", "per_worker", "training"), render=_training),
    Stage("loss", ("loss_curve",), render=_loss),
    # what the network cost the job, then the job's own sections (network_cost.py)
    Stage("cost", ("cost", "attribution"),
          render=lambda a, figs: [tuple(sec) for sec in network_cost.sections(a, figs)]),
    Stage("balance", ("balance", "utilisation"), render=_balance),
    Stage("configuration", ("spec.toml", "manifest.json"), render=_configuration),
]
