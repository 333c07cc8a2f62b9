"""Findings: the few sentences at the top of report.html and summary.md (and
`findings` in metrics.json) that say what happened in a run, each with its numbers:

1. where the worst queue was and when (port, peak backlog, drops, time since start);
2. what the network lost and resent (captures, tc, the kinds of retransmission);
3. what it cost the training (iteration time against the bound when the run's job
   has a cost model, else iterations with and without an RTO);
4. whether to trust the run (incomplete run, the fidelity verdict, capture drops, missing
   inputs), and whether the captures and the kernel agree on retransmissions.

Only reads an `Analysis` (report.analyse). The cost sentence uses, when present,
`a.metrics["cost"]` (analysis/network_cost.py: per-iteration means in seconds of
measured_s, compute_s, bound_s, schedule_s, rto_stall_s, loss_recovery_s,
straggler_wait_s, unexplained_s; network_cost_s, network_cost_pct, ratio (communication
over the bound), iterations, below_bound_iterations; `available` False when the run
has no cost model); else it summarises `a.tables["attribution"]` (one row per
iteration) with `analysis.attribution.run_summary`; else it compares iterations with
and without an RTO.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .metrics import INPUTS

__all__ = ["BELOW_BOUND_S", "COST_PARTS", "Finding", "attribution",
           "compare_cost", "cost", "duration", "findings", "group_costs", "job_findings", "losses",
           "texts", "trust", "worst_queue"]

# a role the apps log in their start events, as a reader calls it, where no job kind
# names it otherwise (Job.role_nouns)
WORKER_NOUN = {"worker": "a worker"}
# a network cost below this (s) is "faster than the bound", as attribution.py says it
BELOW_BOUND_S = -5e-4


@dataclass(frozen=True)
class Finding:
    """One sentence; `topic` is 'queue', 'losses', 'cost', 'trust' or 'counters'."""
    topic: str
    text: str


def findings(a) -> list[Finding]:
    """3-5 sentences about run `a`, in the order above; the run's job may add its own
    after the cost (`Job.findings`, e.g. a PS's time to its target accuracy)."""
    out = [worst_queue(a), losses(a), cost(a)] + job_findings(a) + trust(a)
    return [f for f in out if f is not None]


def job_findings(a) -> list[Finding]:
    from .network_cost import job_of

    job = job_of(a)
    return [Finding("job", t) for t in (job.findings(a) if job is not None else [])]


def texts(a) -> list[str]:
    """The findings as plain sentences (metrics.json `findings`)."""
    return [f.text for f in findings(a)]


# --- formatting --------------------------------------------------------------------

def duration(v) -> str:
    """A duration, 3 significant digits: seconds, or milliseconds below 0.1 s."""
    return f"{v * 1000:.3g} ms" if v and abs(v) < 0.1 else f"{v:.3g} s"


def _longer(d) -> str:
    """'0.2 s longer' / '0.2 s less' for a difference of means (s)."""
    return f"{duration(abs(d))} {'longer' if d >= 0 else 'less'}"


def _n(v) -> str:
    return f"{v:,.0f}"


def _plural(n, word, many=None) -> str:
    return f"{_n(n)} {word if round(n) == 1 else (many or word + 's')}"


def _num(v):
    """A finite float, or None."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and abs(f) != float("inf") else None


# --- 1. the worst queue ------------------------------------------------------------

def _host_roles(a) -> dict[str, str]:
    """{emulated host: role} from the workers' start events (host from the interface)."""
    s = a.tables.get("starts")
    if s is None or not len(s) or "role" not in s or "iface" not in s:
        return {}
    return {str(i).split("-")[0]: str(r) for i, r in zip(s["iface"], s["role"], strict=True)
            if isinstance(i, str) and isinstance(r, str)}


def worst_queue(a) -> Finding:
    qs = a.tables.get("queue_summary")
    if qs is None or qs.empty:
        why = a.missing.get("queues", "no queue samples")
        return Finding("queue", f"Where queues built up is unknown: {why}.")
    top = qs.iloc[0]  # queue_summary is sorted by drops, then peak backlog
    if not top["drops"] and not top["max_backlog_pkts"]:
        return Finding("queue", f"No switch queue held a packet in any sample and none "
                                f"dropped one ({len(qs)} egress ports sampled).")
    iface = str(top["iface"])
    where = iface
    if isinstance(top.get("peer"), str) and isinstance(top.get("switch"), str):
        role = role_nouns(a).get(_host_roles(a).get(top["peer"], ""))
        where += f" ({top['switch']} → {top['peer']}" + (f", {role}'s link)" if role else ")")
    peak = float(top["max_backlog_pkts"])
    limit = _num(top.get("limit_pkts"))
    qd = a.tables.get("queues_d")
    g = qd[qd["iface"] == iface] if qd is not None and len(qd) else pd.DataFrame()
    when = ""
    if len(g):
        t_peak = float(g.loc[g["backlog_pkts"].astype(float).idxmax(), "t"]) - a.t0
        when = f" {duration(t_peak)} after the start"
    limit_bytes = _num(top.get("limit_bytes"))
    if limit_bytes:  # a byte limit (topology.queue_bytes): its unit first, packets beside
        peak_bytes = float(top["max_backlog_bytes"])
        size = (f"{_n(peak_bytes)} bytes ({_plural(peak, 'packet')}) of a "
                f"{_n(limit_bytes)}-byte limit")
    elif limit and peak >= limit:
        size = f"{_plural(peak, 'packet')} (its limit)"
    else:
        size = _plural(peak, "packet") + (f" of a {_n(limit)}-packet limit" if limit else "")
    text = f"The worst queue was {where}: it first reached its peak, {size}" + (
        f",{when}" if when else "")
    drops = float(top["drops"])
    withheld = _withheld(a, "tc_drops", "incast_episodes")
    if "tc_drops" in withheld:  # never a number the headline marks n/a
        drops = 0.0
    elif drops:
        first = g.loc[g["d_drops"] > 0, "t"] if len(g) and "d_drops" in g else pd.Series()
        text += (f", and tc counted {_plural(drops, 'drop')} there"
                 + (f" (the first by {duration(float(first.min()) - a.t0)})" if len(first) else ""))
    elif "tc_drops" not in withheld:
        text += ", and no switch queue dropped a packet"
    if withheld:  # the trust sentence names the input and says why, once
        text += ("; n/a here: " + " and ".join(_WITHHELD_WORDS[k] for k in withheld)
                 + " (an input is damaged or missing: see below)")
    eps = a.tables.get("episodes") if "incast_episodes" not in withheld else None
    mine = eps[eps["iface"] == iface] if eps is not None and len(eps) else ()
    if len(mine):
        inc = mine[mine["incast"].astype(bool)]
        text += f"; it was full in {_plural(len(mine), 'episode')}"
        if len(inc):
            senders = pd.to_numeric(inc["n_senders"], errors="coerce").max()
            text += (f", {_n(len(inc))} of them incast (up to "
                     f"{_plural(senders, 'sender')} at once)")
    ports = (a.tables.get("recon") or {}).get("ports")
    if drops and ports is not None and len(ports) and "losses" not in a.missing \
            and "pcap" not in a.missing:
        here = ports[ports["iface"] == iface]
        lost = float(here["capture_losses"].iloc[0]) if len(here) else 0.0
        text += f"; the captures place {_plural(lost, 'lost packet')} there"
    return Finding("queue", text + ".")


_WITHHELD_WORDS = {"tc_drops": "its tc drop count",
                   "incast_episodes": "its full and incast episodes"}


def _withheld(a, *names: str) -> list[str]:
    """Those of the headline metrics `names` whose inputs (metrics.py's declaration) are
    missing or damaged in run `a`: the findings must not quote them."""
    from .metrics import by_name

    jobs = getattr(a, "jobs", None)
    return [n for n in names if any(k in a.missing for k in by_name(n, jobs).inputs)]


# --- 2. losses and retransmissions --------------------------------------------------

def losses(a) -> Finding:
    n = a.metrics.get("reconciliation") or {}
    kernel = n.get("kernel") or {}
    tc, lost, resent = n.get("tc_drops"), n.get("capture_losses"), n.get("capture_retrans")
    if resent is None:
        why = a.missing.get("pcap") or a.missing.get("flows") or "no captured flows"
        known = []
        if tc is not None:
            known.append(f"tc counted {_plural(tc, 'queue drop')}")
        if kernel.get("TcpRetransSegs") is not None:
            known.append(f"the kernels {_plural(kernel['TcpRetransSegs'], 'retransmitted segment')}"
                         f" and {_plural(kernel.get('TcpExtTCPTimeouts') or 0, 'timeout')}")
        return Finding("losses", f"Packet losses and retransmissions are not known from "
                                 f"captures ({why})" + (f"; {' and '.join(known)}" if known
                                                        else "") + ".")
    if lost is None:
        head = "The captures cannot tell lost packets (no flow was captured at both ends)"
    elif lost == 0:
        head = "No packet was lost in the network"
    else:
        head = f"The network lost {_plural(lost, 'packet')} (seen in the captures"
        if tc == 0:  # see reconcile.py's notes: a busy userspace datapath, tcpdump drops
            head += "; no queue counted a drop, so they were lost where no counter looks"
        elif tc is not None:
            head += f"; tc counted {_plural(tc, 'queue drop')}"
        head += ")"
    if not resent:
        return Finding("losses", head + " and TCP retransmitted nothing.")
    parts = []
    rec, rto_pkts = n.get("capture_recovery_retrans") or 0, n.get("capture_rto_retrans") or 0
    rtos, tlp = n.get("capture_rto") or 0, n.get("capture_tlp") or 0
    if rec:
        parts.append(f"{_n(rec)} in fast/SACK recovery")
    if rto_pkts or rtos:
        parts.append(f"{_n(rto_pkts)} after {_plural(rtos, 'timeout')} (RTO)")
    if tlp:
        parts.append(f"{_plural(tlp, 'tail-loss probe')}")
    return Finding("losses", f"{head}, and TCP retransmitted {_plural(resent, 'packet')}"
                             + (f": {', '.join(parts)}" if parts else "") + ".")


# --- 3. what it cost the training ---------------------------------------------------

def attribution(a) -> dict | None:
    """The attribution's per-run summary (see the module docstring), from
    a.metrics['cost'] or summarised from a.tables['attribution']; None when neither is
    there or it has no iterations."""
    c = a.metrics.get("cost")
    if not (isinstance(c, dict) and c.get("available", True) and c.get("iterations")):
        t = a.tables.get("attribution")
        if not isinstance(t, pd.DataFrame) or t.empty:
            return None
        from .attribution import run_summary
        c = run_summary(t)
    return c if c.get("iterations") and _num(c.get("measured_s")) is not None else None


def cost(a) -> Finding:
    c = attribution(a)
    if c is not None:
        return Finding("cost", _cost_sentence(c, getattr(a, "jobs", None)))
    if a.metrics.get("jobs"):  # several jobs on one fabric: each against its own bound
        return Finding("cost", "Several jobs shared the fabric: " + "; ".join(
            _job_cost(j) for j in a.metrics["jobs"]) + ".")
    imp = a.metrics.get("training") or {}
    from .network_cost import job_of

    job = job_of(a)
    own = job.cost_clause(a) if job is not None else None
    if imp.get("iterations"):
        text = (f"An iteration took {duration(imp['mean_s'])} on average (95th percentile "
                f"{duration(imp['p95_s'])})")
        w, wo = imp.get("with_rto") or {}, imp.get("without_rto") or {}
        wl, cl = imp.get("with_loss") or {}, imp.get("clean") or {}
        if w.get("n") and w.get("extra_s_vs_no_rto") is not None:
            text += (f"; the {_plural(w['n'], 'iteration')} with an RTO on the worker's host "
                     f"took {_longer(w['extra_s_vs_no_rto'])} on average than the "
                     f"{_n(wo['n'])} without")
        elif wl.get("n") and wl.get("extra_s_vs_clean") is not None:
            text += (f"; the {_plural(wl['n'], 'iteration')} with a loss but no RTO took "
                     f"{_longer(wl['extra_s_vs_clean'])} on average than the "
                     f"{_n(cl['n'])} clean ones")
        elif "pcap" in a.missing and "queues" in a.missing:
            text += "; without captures or queue samples its losses are unknown"
        else:
            text += "; no iteration met a loss or an RTO"
        return Finding("cost", text + (f"; {own}" if own else "") + ".")
    if own:
        return Finding("cost", own[0].upper() + own[1:] + ".")
    why = a.missing.get("workers", "no iteration or round events in the worker logs")
    return Finding("cost", f"What the network cost the training is unknown: {why}.")


def role_nouns(a) -> dict[str, str]:
    """{logged role: what a reader calls it} from every job kind of the registry."""
    nouns = dict(WORKER_NOUN)
    for job in (getattr(a, "jobs", None) or {}).values():
        nouns.update(getattr(job, "role_nouns", {}))
    return nouns


def _job_cost(j: dict) -> str:
    """'job 0 (ring) 0.346 s an iteration, 1.34× its bound of 0.256 s; most losses at
    lf1-eth1 (29)' from one entry of metrics.json `jobs` (analysis/multijob.py)."""
    text = f"job {j.get('job')} ({j.get('kind')})"
    if j.get("iteration_mean_s") is None:
        return text + ": no iterations logged"
    text += f" {duration(j['iteration_mean_s'])} an iteration"
    if j.get("ratio") is not None and j.get("bound_s"):
        text += f", {j['ratio']:.3g}× its bound of {duration(j['bound_s'])}"
    worst = max(j.get("ports") or [], key=lambda p: p.get("lost") or 0, default=None)
    if worst and worst.get("lost"):
        text += f"; most of its losses at {worst['port']} ({_n(worst['lost'])})"
    return text


def _step_noun(kind, jobs) -> str:
    """What one attributed row of a job is: its progress event ('iteration', 'round'),
    from the registry handed to the analysis (`jobs`; without it: 'iteration')."""
    job = (jobs or {}).get(kind) if isinstance(kind, str) else None
    return getattr(job, "progress_event", None) or "iteration"


def _cost_sentence(c: dict, jobs=None) -> str:
    """From the attribution's run summary: where the mean iteration's time went."""
    measured, compute = _num(c.get("measured_s")), _num(c.get("compute_s")) or 0.0
    bound, per = _num(c.get("bound_s")), _step_noun(c.get("kind"), jobs)
    text = f"{'An' if per[0] in 'aeiou' else 'A'} {per} took {duration(measured)} on average"
    comm = measured - compute
    text += (f": {duration(compute)} of compute and {duration(comm)} of communication,"
             if compute else ",")
    ratio = _num(c.get("ratio")) or (comm / bound if bound else None)
    if bound and ratio is not None:
        text += f" {ratio:.3g}× {'its' if compute else 'the'} bound of {duration(bound)}"
    cost_s, pct = _num(c.get("network_cost_s")), _num(c.get("network_cost_pct"))
    if cost_s is not None:
        share = f" ({abs(pct):.2g} %)" if pct is not None else ""
        if cost_s < BELOW_BOUND_S:
            text += (f"; it ran {duration(-cost_s)}{share} faster than the bound allows, so the "
                     "bound's assumptions did not hold")
        else:
            text += f"; the network cost {duration(cost_s)}{share} over the bound"
            causes = [f"{name} {duration(c[k])}" for k, name in (
                ("rto_stall_s", "RTO stalls"), ("loss_recovery_s", "loss recovery"),
                ("unexplained_s", "unexplained")) if _num(c.get(k)) is not None]
            if causes:
                text += ": " + ", ".join(causes)
    for key, what in (("schedule_s", "the job's own schedule added"),
                      ("straggler_wait_s", "waiting for stragglers took")):
        if (_num(c.get(key)) or 0) >= -BELOW_BOUND_S:
            text += f"; {what} {duration(c[key])}"
    nb, n = c.get("below_bound_iterations") or 0, c.get("iterations")
    if nb and cost_s is not None and cost_s >= BELOW_BOUND_S:
        text += f" ({_n(nb)} of {_n(n)} {per}s ran faster than the bound)"
    return text + "."


# --- 4. whether to trust the run ----------------------------------------------------

def trust(a) -> list[Finding]:
    """The trust sentence, and one on whether captures and kernel agree."""
    concerns, fine, unknown = [], [], []
    if a.status != "complete":
        concerns.append(f"the run did not complete ({a.status}"
                        + (f": {a.reason}" if a.reason else "")
                        + "), so its numbers cover only the part that ran")
    else:
        fine.append("the run completed")
    _fidelity(a, concerns, fine, unknown)
    drops = (a.metrics.get("reconciliation") or {}).get("capture_drops")
    lossy = a.manifest.get("capture_lossy") or []
    if drops:
        concerns.append(f"tcpdump dropped {_plural(drops, 'packet')}"
                        + (f" on {', '.join(map(str, lossy))}" if lossy else "")
                        + ", so the captures' losses may be overstated by as many")
    elif drops == 0:
        fine.append("tcpdump dropped no packet")
    else:
        unknown.append("tcpdump's drop counts")
    if a.missing:
        concerns.append("inputs are missing or damaged: " + ", ".join(
            INPUTS.get(k, k) for k in a.missing) + " (why: below)")
    else:
        fine.append("every input is present")
    if concerns:
        text = "Read this run with care: " + "; ".join(concerns)
    else:
        text = "Trust: " + (", ".join(fine[:-1]) + " and " if len(fine) > 1 else "") + fine[-1]
    if unknown:
        plural = len(unknown) > 1 or unknown[0].endswith("counts")
        text += f"; {' and '.join(unknown)} {'were' if plural else 'was'} not recorded"
    if a.problems:
        text += f"; the report lists {_plural(len(a.problems), 'warning')}"
    out = [Finding("trust", text + ".")]
    n = a.metrics.get("reconciliation") or {}
    cap, ker = n.get("capture_retrans"), (n.get("kernel") or {}).get("TcpRetransSegs")
    if cap is not None and ker is not None:
        d = ker - cap
        verdict = "agree exactly" if d == 0 else f"differ by {_n(abs(d))}" + (
            " (the kernel also counts SYN and FIN retransmissions and flows not captured "
            "at the sender; see the reconciliation)" if d > 0 else " (see the reconciliation)")
        out.append(Finding("counters", f"The captures' retransmissions ({_n(cap)}) and the "
                                       f"kernels' TcpRetransSegs ({_n(ker)}) {verdict}."))
    return out


def _fidelity(a, concerns: list, fine: list, unknown: list) -> None:
    """The run's fidelity verdict (metrics.json fidelity, analysis/fidelity.py) into the
    trust sentence; tcpdump's drops have their own clause, and the CPU only supports."""
    v = a.metrics.get("fidelity") if isinstance(a.metrics.get("fidelity"), dict) else None
    cpu = a.manifest.get("cpu") if isinstance(a.manifest.get("cpu"), dict) else {}
    if v is None:
        unknown.append("the fidelity verdict")
        return
    why = [e["text"] for e in v.get("evidence") or [] if e.get("check") != "capture_drops"]
    if why:
        concerns.append("the emulation did not keep up (" + "; ".join(why) + "), so rates "
                        "and losses may be the emulator's, not the fabric's")
    elif v.get("kept_up"):
        fine.append("the datapath kept up" + (" (though the CPU was saturated: supporting "
                                              "evidence only)" if cpu.get("saturated") else ""))


# --- across runs: what the difference between groups is made of -------------------------

COST_PARTS = ("compute_s", "transfer_at_bound_s", "schedule_s", "straggler_wait_s",
              "network_cost_s")
_PART_WORDS = {"compute_s": "compute", "transfer_at_bound_s": "the bound",
               "schedule_s": "the job's own schedule", "straggler_wait_s": "straggler waits",
               "network_cost_s": "the network over the bound"}


def group_costs(runs: list[dict]) -> dict[str, dict]:
    """{group: mean over its runs of metrics.json's cost parts (s)} for runs given as
    compare.json lists them ({"dir", "group"}, and "cost" where the caller holds it);
    runs without a cost are left out."""
    import json
    from pathlib import Path

    sums: dict[str, dict] = {}
    for r in runs:
        try:  # the run's cost in hand (compare_runs), else its metrics.json's
            c = r["cost"] if "cost" in r else json.loads(
                (Path(r["dir"]) / "metrics.json").read_text()).get("cost")
        except (OSError, ValueError, KeyError):
            continue
        c = c if isinstance(c, dict) else {}
        if not c.get("available"):
            continue
        acc = sums.setdefault(r["group"], {"n": 0, **{k: 0.0 for k in
                                                      ("measured_s", "rto_stall_s",
                                                       *COST_PARTS)}})
        acc["n"] += 1
        for k in ("measured_s", "rto_stall_s", *COST_PARTS):
            if c.get(k) is None and k == "rto_stall_s":  # not known (no whole captures)
                acc[k] = None
            elif acc[k] is not None:
                acc[k] += float(c.get(k) or 0.0)
    return {g: {k: (v / acc["n"] if k != "n" and v is not None else v)
                for k, v in acc.items()} for g, acc in sums.items()}


def _rto_part(v) -> str:
    return duration(v) if v is not None else (
        "n/a: a run of the group has no whole captures, so its RTOs are not told apart "
        "from the rest of the network's cost")


def compare_cost(runs: list[dict]) -> list[str]:
    """Sentences for a comparison: per group, what an iteration is made of; for two
    groups, what their difference is made of (e.g. what a PS's incast cost against a
    ring)."""
    costs = group_costs(runs)
    out = []
    for g, c in costs.items():
        out.append(f"{g}: an iteration took {duration(c['measured_s'])} = "
                   f"{duration(c['compute_s'])} "
                   f"compute + {duration(c['transfer_at_bound_s'])} at the bound + "
                   f"{duration(c['schedule_s'])} the job's own schedule + "
                   f"{duration(c['straggler_wait_s'])} waiting for stragglers + "
                   f"{duration(c['network_cost_s'])} the network's cost over the bound "
                   f"(RTO stalls {_rto_part(c['rto_stall_s'])}); mean of {_n(c['n'])} "
                   "run(s).")
    if len(costs) == 2:
        (ga, a), (gb, b) = sorted(costs.items(), key=lambda kv: -kv[1]["measured_s"])
        diff = a["measured_s"] - b["measured_s"]
        parts = sorted(((a[k] - b[k], k) for k in COST_PARTS), key=lambda x: -abs(x[0]))
        made = ", ".join(f"{_PART_WORDS[k]} {'+' if d >= 0 else '−'}{duration(abs(d))}"
                         for d, k in parts if abs(d) >= 5e-4)
        times = (f" ({a['measured_s'] / b['measured_s']:.3g}× as long)"
                 if b["measured_s"] > 0 else "")
        if abs(diff) < 5e-4:  # below the sentences' 3 digits: no difference to split
            out.append(f"{ga} and {gb} took as long per iteration.")
        else:
            out.append(f"{ga} took {duration(diff)} longer per iteration than {gb}{times}"
                       + (f": {made}." if made else "."))
    return out
