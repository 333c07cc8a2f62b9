"""A picture of the fabric as inline SVG, drawn from the typed fabric map.

Spines on top, leaves below them, each leaf's hosts under it (labelled with the roles
the run's processes had there). Every cable is two thin lines, one per direction, each
coloured by the peak backlog of that direction's egress queue as a share of its limit
(grey: no samples) and drawn thicker with its drop count where the queue dropped.
Hovering a line names the port, its peak and its drops (an SVG <title>).

No plotting library: the SVG is text in the page, so report.html stays one file that
opens offline, and the picture is exact at any zoom.
"""
from __future__ import annotations

import html
import math

import pandas as pd

W = 1000           # SVG user units across; the page scales it to its width
ROW_Y = (50, 190, 330)  # spines, leaves, hosts
NODE_W, NODE_H = 70, 30
ROLE_COLOURS = ("#f4c542", "#8fd18f", "#9cc3e6", "#e6a0c4", "#c6b3e6", "#f2a65a")


def colour(share: float | None) -> str:
    """Green (empty) through yellow (half full) to red (full) for a peak backlog share of
    the queue limit; grey when unknown."""
    if share is None or (isinstance(share, float) and math.isnan(share)):
        return "#bbbbbb"
    s = min(max(float(share), 0.0), 1.0)
    if s < 0.5:  # green -> yellow
        r, g = int(60 + (230 - 60) * s / 0.5), 170
    else:        # yellow -> red
        r, g = 230 - int(30 * (s - 0.5) / 0.5), int(170 * (1 - (s - 0.5) / 0.5))
    return f"#{r:02x}{g:02x}30"


def _positions(fabric) -> dict[str, tuple[float, float]]:
    pos: dict[str, tuple[float, float]] = {}
    spines, leaves = list(fabric.spine_names), list(fabric.leaf_names)
    for i, name in enumerate(spines):
        pos[name] = ((i + 1) * W / (len(spines) + 1), ROW_Y[0])
    n_hosts = max(1, len(fabric.hosts))
    slot = W / n_hosts
    k = 0
    for name in leaves:
        hosts = fabric.hosts_on(name)
        first = k
        for h in hosts:
            pos[h.name] = ((k + 0.5) * slot, ROW_Y[2])
            k += 1
        # a leaf sits above the middle of its hosts (or spread evenly without hosts)
        pos[name] = (((first + k) / 2) * slot if hosts else
                     (leaves.index(name) + 1) * W / (len(leaves) + 1), ROW_Y[1])
    for h in fabric.hosts:  # hosts of a star's single switch etc.
        if h.name not in pos:
            pos[h.name] = ((k + 0.5) * slot, ROW_Y[2])
            k += 1
    for s in fabric.switches:  # switches of other topologies: the middle row
        if s.name not in pos:
            pos[s.name] = (W / 2, ROW_Y[1])
    if not spines:  # a star: no spine row to leave room for
        pos = {n: (x, y - _spine_row(fabric)) for n, (x, y) in pos.items()}
    return pos


def _spine_row(fabric) -> float:
    """How far everything moves up when the fabric has no spines (0 when it has)."""
    return float(ROW_Y[1] - ROW_Y[0]) if not fabric.spine_names else 0.0


def _stats(queue_summary: pd.DataFrame | None) -> dict[str, dict]:
    if queue_summary is None or queue_summary.empty:
        return {}
    out = {}
    for r in queue_summary.itertuples(index=False):
        lim = r.limit_pkts if r.limit_pkts and not pd.isna(r.limit_pkts) else None
        peak = None if pd.isna(r.max_backlog_pkts) else float(r.max_backlog_pkts)
        out[r.iface] = {"peak": peak, "limit": lim,
                        "share": peak / lim if lim and peak is not None else None,
                        "drops": 0 if pd.isna(r.drops) else int(r.drops)}
    return out


def fabric_svg(fabric, queue_summary: pd.DataFrame | None = None,
               roles: dict[str, str] | None = None, title: str = "") -> str:
    """The fabric as an inline <svg> element (HTML text). `queue_summary`: queues.
    queue_summary's table (peak backlog, limit and drops per egress port); `roles`:
    {host: 'server 0'} (flowroles.host_roles)."""
    if fabric is None:
        return "<p class='none'>(no fabric.json: no picture of the fabric)</p>"
    roles = roles or {}
    pos = _positions(fabric)
    stats = _stats(queue_summary)
    parts, texts = [], []
    for link in fabric.links:
        (x1, y1), (x2, y2) = pos[link.node1], pos[link.node2]
        dx, dy = x2 - x1, y2 - y1
        norm = math.hypot(dx, dy) or 1.0
        ox, oy = -dy / norm * 3.5, dx / norm * 3.5  # the two directions side by side
        for sign, iface, a, b in ((1, link.intf1, link.node1, link.node2),
                                  (-1, link.intf2, link.node2, link.node1)):
            st = stats.get(iface, {})
            (ax, ay), (bx, by) = pos[a], pos[b]
            ax, ay, bx, by = ax + sign * ox, ay + sign * oy, bx + sign * ox, by + sign * oy
            c = colour(st.get("share"))
            drops = st.get("drops", 0)
            width = 5 if drops else 2.5
            tip = (f"{iface}: {a} → {b}; " + (
                f"peak {st['peak']:g} of {st['limit']:g} packets" if st.get("limit")
                and st.get("peak") is not None else "no queue samples")
                + (f"; {drops} drops" if drops else ""))
            parts.append(f"<line x1='{ax:.1f}' y1='{ay:.1f}' x2='{bx:.1f}' y2='{by:.1f}' "
                         f"stroke='{c}' stroke-width='{width}'><title>{html.escape(tip)}"
                         "</title></line>")
            # an arrowhead two thirds of the way: which way this line's packets go
            mx, my = ax + (bx - ax) * 0.66, ay + (by - ay) * 0.66
            ux, uy = (bx - ax) / norm, (by - ay) / norm
            pts = [(mx + ux * 7, my + uy * 7), (mx - ux * 4 - uy * 4, my - uy * 4 + ux * 4),
                   (mx - ux * 4 + uy * 4, my - uy * 4 - ux * 4)]
            parts.append("<polygon points='" + " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
                         + f"' fill='{c}'><title>{html.escape(tip)}</title></polygon>")
            if drops:
                # beside its line, on its own side, with a white halo over the lines
                tx, ty = ax + (bx - ax) * 0.45 + sign * ox * 7, ay + (by - ay) * 0.45 + \
                    sign * oy * 7
                texts.append(f"<text x='{tx:.1f}' y='{ty + 4:.1f}' font-size='12' "
                             f"text-anchor='{'end' if sign * ox < 0 else 'start'}' "
                             "fill='#b00020' font-weight='bold' paint-order='stroke' "
                             f"stroke='white' stroke-width='4'>{drops} drops</text>")
    palette: dict[str, str] = {}
    for s in fabric.switches:
        x, y = pos[s.name]
        fill = "#dde6f0" if s.role == "spine" else "#e8eef5"
        parts.append(f"<rect x='{x - NODE_W / 2:.1f}' y='{y - NODE_H / 2:.1f}' "
                     f"width='{NODE_W}' height='{NODE_H}' rx='5' fill='{fill}' "
                     f"stroke='#345'><title>{html.escape(s.role)} {html.escape(s.name)}, "
                     f"dpid {s.dpid}</title></rect><text x='{x:.1f}' y='{y + 5:.1f}' "
                     f"font-size='14' text-anchor='middle'>{html.escape(s.name)}</text>")
    for h in fabric.hosts:
        x, y = pos[h.name]
        role = roles.get(h.name, "")
        kind = role.split(" ")[0] if role else ""
        fill = palette.setdefault(kind, ROLE_COLOURS[len(palette) % len(ROLE_COLOURS)]) \
            if kind else "#f4f4f4"
        parts.append(f"<rect x='{x - NODE_W / 2:.1f}' y='{y - NODE_H / 2:.1f}' "
                     f"width='{NODE_W}' height='{NODE_H}' rx='12' fill='{fill}' "
                     f"stroke='#555'><title>{html.escape(h.name)} {html.escape(h.ip)}"
                     f"{' — ' + html.escape(role) if role else ''}</title></rect>"
                     f"<text x='{x:.1f}' y='{y + 5:.1f}' font-size='14' text-anchor='middle'>"
                     f"{html.escape(h.name)}</text>")
        for i, line in enumerate(_wrap_roles(role)):
            parts.append(f"<text x='{x:.1f}' y='{y + NODE_H / 2 + 15 + 13 * i:.1f}' "
                         f"font-size='12' text-anchor='middle' fill='#333'>"
                         f"{html.escape(line)}</text>")
    parts += texts  # drop counts above every line
    legend = _legend(ROW_Y[2] + 75 - _spine_row(fabric))
    height = int(ROW_Y[2] + 115 - _spine_row(fabric))
    head = f"<text x='10' y='18' font-size='14' font-weight='bold'>{html.escape(title)}" \
        "</text>" if title else ""
    return (f"<svg class='fabric' viewBox='0 0 {W} {height}' width='100%' "
            f"style='max-width:{W}px;font-family:sans-serif' role='img' "
            f"aria-label='fabric picture'>{head}{''.join(parts)}{legend}</svg>")


def _wrap_roles(role: str, per_line: int = 2) -> list[str]:
    items = [r for r in role.split(", ") if r]
    return [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]


def _legend(y: float) -> str:
    out = [f"<text x='10' y='{y:.0f}' font-size='12'>peak queue / limit:</text>"]
    for i, share in enumerate((0.0, 0.25, 0.5, 0.75, 1.0)):
        x = 130 + i * 60
        out.append(f"<rect x='{x}' y='{y - 11:.0f}' width='22' height='12' "
                   f"fill='{colour(share)}'/><text x='{x + 26}' y='{y:.0f}' "
                   f"font-size='12'>{int(share * 100)}%</text>")
    out.append(f"<rect x='440' y='{y - 11:.0f}' width='22' height='12' fill='#bbbbbb'/>"
               f"<text x='466' y='{y:.0f}' font-size='12'>no samples</text>"
               f"<text x='560' y='{y:.0f}' font-size='12'>one line per direction (arrow); "
               "thick with a count: drops; hover for the port</text>")
    return "".join(out)
