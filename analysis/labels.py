"""What the report's prose and table headers call the analysis's internal names: the
retransmission triggers of analysis/tcp.py (its docstring says how each is decided) and
the tables' columns. The CSV files (tables/*.csv) keep the column names; only what the
page shows changes, each header with its column name under it."""
from __future__ import annotations

import html

# trigger (tcp.py `kind`) -> (reader's name, plural, one line of meaning), in the
# order the sentence gives them. fast and other are both loss recovery without a timer:
# the findings' "in fast/SACK recovery" counts the two together.
TRIGGERS = {
    "fast": ("fast retransmit", "fast retransmits",
             "after 3 or more duplicate ACKs or 3 SACKed segments above the hole"),
    "other": ("early retransmit (RACK)", "early retransmits (RACK)",
              "fewer than 3 segments reported missing: Linux's time-based RACK loss "
              "detection, or anything else that is neither a timeout nor a probe"),
    "rto": ("retransmission after a timeout", "retransmissions after a timeout",
            "RTO: the flow sat silent until its retransmission timer fired"),
    "tlp": ("tail-loss probe", "tail-loss probes",
            "the highest segment sent so far, resent after about 2 RTTs without ACKs"),
}
RECOVERY = ("fast", "other")  # the findings' "in fast/SACK recovery"


def trigger_name(kind: str, n: int = 1) -> str:
    """The reader's name of trigger ``kind`` (plural unless n == 1)."""
    names = TRIGGERS.get(kind)
    return (names[0] if n == 1 else names[1]) if names else str(kind)


def trigger_text(by_kind: dict) -> str:
    """'211 in fast/SACK recovery: 34 fast retransmits (after 3 or more ...) and 177 early
    retransmits (RACK) (fewer than 3 ...); 2 retransmissions after a timeout (RTO: ...)' from
    tcp.retrans_summary's ``by_kind``; every trigger named and defined, none left as a
    key."""
    counts = {k: int(v) for k, v in (by_kind or {}).items() if v}
    if not counts:
        return "none"

    def one(k):
        return f"{counts[k]} {trigger_name(k, counts[k])}" + (
            f" ({TRIGGERS[k][2]})" if k in TRIGGERS else "")
    parts = []
    rec = [k for k in RECOVERY if k in counts]
    if rec:
        total = sum(counts[k] for k in rec)
        parts.append(f"{total} in fast/SACK recovery: " + " and ".join(one(k) for k in rec))
    parts += [one(k) for k in TRIGGERS if k not in RECOVERY and k in counts]
    parts += [one(k) for k in counts if k not in TRIGGERS]
    return "; ".join(parts)


# Columns whose name alone does not say what they hold (the rest: words from the name,
# see header()). Times in the report's tables are seconds since the run started.
COLUMNS = {
    "at_tc_drop": "lost where tc counted a drop",
    "attributed_by": "port found by",
    "by_captures": "seen in captures",
    "captured_losses": "losses seen in captures",
    "capture_losses": "losses seen in captures",
    "capture_retrans": "retransmissions in captures",
    "capture_rto": "RTOs in captures",
    "capture_tlp": "tail-loss probes in captures",
    "fct_s": "flow completion time (s)",
    "goodput_mbps": "goodput (Mbit/s)",
    "iface": "interface",
    "sender_iface": "sender's interface",
    "receiver_iface": "receiver's interface",
    "seen_at": "last seen at",
    "ip_id": "IP id",
    "len": "payload (bytes)",
    "seq": "sequence number",
    "gap_s": "silence before it (s)",
    "fan_in": "senders at once",
    "kernel_retrans_segs": "kernel: retransmitted segments",
    "kernel_timeouts": "kernel: RTO firings",
    "kernel_loss_probes": "kernel: tail-loss probes",
    "rtos": "RTO firings",
    "n_rto": "RTO firings",
    "n_retrans": "retransmissions",
    "retrans_packets": "retransmitted packets",
    "tc_drops": "tc drops",
    "uncounted": "losses tc did not count",
    "unmatched": "unmatched",
    "wire_bytes": "bytes on the wire",
    "limit_pkts": "queue limit (packets)",
    "limit_unit": "limit unit",
    "p50_ms": "median (ms)",
    "stall_start": "silent since (s)",
    "last_data": "last data (s)",
    "t": "time (s)",
    "t_start": "start (s)",
    "t_end": "end (s)",
    "t_first": "first packet (s)",
    "t_last": "last packet (s)",
    "start": "start (s)",
    "end": "end (s)",
    "model_version": "model version",
    "via": "via",
    "rto_stall_s": "RTO stall (s)",
    "transfer_at_bound_s": "transfer at the bound (s)",
    "schedule_s": "the job's schedule (s)",
    "straggler_wait_s": "waiting for stragglers (s)",
    "loss_recovery_s": "loss recovery (s)",
    "unexplained_s": "unexplained (s)",
    "below_rate_ports": "ports below their rate",
    "shortfall_bytes": "shortfall (bytes)",
}
_UNITS = {"s": "s", "ms": "ms", "pkts": "packets", "bytes": "bytes", "mbps": "Mbit/s",
          "pct": "%"}


def header(col) -> str:
    """What a table's header shows for column ``col``: COLUMNS, else the name's words with
    its unit suffix in brackets ('max_backlog_pkts' -> 'max backlog (packets)'; a leading
    'n' is 'number of')."""
    c = str(col)
    if c in COLUMNS:
        return COLUMNS[c]
    words = c.split("_")
    unit = _UNITS.get(words[-1]) if len(words) > 1 else None
    if unit:
        words = words[:-1]
    if len(words) > 1 and words[0] == "n":
        words = ["number of", *words[1:]]
    return " ".join(words) + (f" ({unit})" if unit else "")


def header_html(col) -> str:
    """A <th>'s content: the reader's header, and the CSV column's name under it when the
    two differ (tables/*.csv and pandas use the name)."""
    text, name = header(col), str(col)
    if text == name:
        return html.escape(text)
    return f"{html.escape(text)}<br><code class='col'>{html.escape(name)}</code>"
