"""Dissection of pcap records into columns, vectorised over records.

`parse_records(buf, offsets, info, fast)` reads the link, IPv4 and TCP/UDP headers of
the records at `offsets` (from `pcaprecords.record_offsets`) into one NumPy array per
column of `OUT_DTYPES`; pcap.py's docstring gives the columns, units and rules.
Plain Ethernet/IPv4/TCP frames are read at fixed offsets (the fast path); every other
frame (other link types, VLAN tags, IP options, UDP, non-IP) takes the general path,
one gather per field. Both give the same answer.
"""
from __future__ import annotations

import numpy as np

from .pcaprecords import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, byte_views

__all__ = ["OUT_DTYPES", "parse_records"]


def _gather(view, idx):
    return view[np.minimum(idx, len(view) - 1)]


_COL_DTYPES = (
    ("src", np.uint32), ("dst", np.uint32), ("proto", np.uint8), ("ip_len", np.uint16),
    ("ip_id", np.uint16), ("ecn", np.uint8), ("sport", np.uint16), ("dport", np.uint16),
    ("seq", np.uint32),
    ("ack", np.uint32), ("flags", np.uint8), ("win", np.uint16), ("payload_len", np.int32),
    ("sack", bool), ("sack_hi", np.uint32), ("sack_ok", bool), ("has_ts", bool),
    ("tsval", np.uint32),
    ("tsecr", np.uint32), ("hdr_ok", bool))

OUT_DTYPES = (("t", np.float64), ("frame_len", np.uint32), ("caplen", np.uint32),
               ("ethertype", np.uint16), ("vlan", np.int32)) + _COL_DTYPES

# Fast path: Ethernet + IPv4 without options + TCP, at fixed offsets from the record
# start (16-byte record header, 14-byte Ethernet header). 82 bytes reach the end of a
# leading NOP,NOP,timestamp option.
_FAST_W = 82
_FAST_IP = np.dtype({"names": ["et", "vihl", "tos", "ip_len", "ip_id", "frag", "proto"],
                     "formats": [">u2", "u1", "u1", ">u2", ">u2", ">u2", "u1"],
                     "offsets": [0, 2, 3, 4, 6, 8, 11], "itemsize": 12})   # bytes 28..40
_FAST_TCP = np.dtype({"names": ["src", "dst", "sport", "dport", "seq", "ack", "doff",
                                "flags", "win"],
                      "formats": [">u4", ">u4", ">u2", ">u2", ">u4", ">u4", "u1", "u1", ">u2"],
                      "offsets": [0, 4, 8, 10, 12, 16, 20, 21, 22], "itemsize": 24})  # 42..66
_FAST_OPT = np.dtype({"names": ["opt", "tsval", "tsecr"], "formats": [">u4", ">u4", ">u4"],
                      "offsets": [0, 4, 8], "itemsize": 12})               # bytes 70..82


def _native(struct_arr, name):
    col = struct_arr[name]
    return col.astype(col.dtype.newbyteorder("="))


def parse_records(buf, p, info, fast):
    """Columns (numpy arrays) for the records at byte offsets `p`."""
    a = np.frombuffer(buf, np.uint8)
    n = len(a)
    endian = info["endian"]
    m = len(p)
    hdr_dt = np.dtype([("sec", endian + "u4"), ("frac", endian + "u4"),
                       ("cap", endian + "u4"), ("orig", endian + "u4")])
    hdr = np.ndarray(shape=(max(n - 15, 0),), dtype="V16", buffer=buf, strides=(1,))[p]
    hdr = hdr.view(hdr_dt)
    cap = _native(hdr, "cap").astype(np.int64)
    t = _native(hdr, "sec").astype(np.float64) + _native(hdr, "frac").astype(np.float64) * (
        1e-9 if info["nano"] else 1e-6)
    cols = {name: np.zeros(m, dt) for name, dt in _COL_DTYPES}
    et = np.zeros(m, np.int64)
    vlan = np.full(m, -1, np.int32)
    lt = info["linktype"]

    rest = np.arange(m)
    if fast and lt == LINKTYPE_ETHERNET and m:
        cand = np.flatnonzero((p + _FAST_W <= n) & (cap >= 54))
        view = np.ndarray(shape=(n - _FAST_W + 1,), dtype=f"V{_FAST_W}", buffer=buf,
                          strides=(1,)) if n >= _FAST_W else None
        B = view[p[cand]].view(np.uint8).reshape(len(cand), _FAST_W) if len(cand) else None
        if B is not None:
            ip = np.ascontiguousarray(B[:, 28:40]).view(_FAST_IP).reshape(len(cand))
            ok = ((ip["et"] == 0x0800) & (ip["vihl"] == 0x45) & (ip["proto"] == 6)
                  & ((ip["frag"] & 0x1FFF) == 0))
            tc = np.ascontiguousarray(B[:, 42:66]).view(_FAST_TCP).reshape(len(cand))
            doff = (tc["doff"] >> 4).astype(np.int64) * 4
            ok &= doff >= 20
            all_ok = bool(ok.all())
            fi = cand if all_ok else cand[ok]
            full = len(fi) == m  # every record on the fast path: assign, don't scatter

            def put(name, values, fi=fi, full=full):
                if full:
                    cols[name] = values.astype(cols[name].dtype, copy=False)
                else:
                    cols[name][fi] = values

            if len(fi):
                ipk, tck = (ip, tc) if all_ok else (ip[ok], tc[ok])
                doff = doff if all_ok else doff[ok]
                et[fi] = 0x0800
                put("proto", np.full(len(fi), 6, np.uint8))
                ip_len = _native(ipk, "ip_len").astype(np.int64)
                put("ip_len", ip_len)
                put("ip_id", _native(ipk, "ip_id"))
                put("ecn", ipk["tos"] & 3)
                for name in ("src", "dst", "sport", "dport", "seq", "ack", "flags", "win"):
                    put(name, _native(tck, name))
                put("payload_len", np.maximum(ip_len - 20 - doff, 0))
                put("hdr_ok", np.ones(len(fi), bool))
                Bo = B if all_ok else B[ok]
                opt = np.ascontiguousarray(Bo[:, 70:82]).view(_FAST_OPT).reshape(len(fi))
                lead = (doff >= 32) & (_native(opt, "opt") == 0x0101080A) & (cap[fi] >= 82)
                put("has_ts", lead)
                put("tsval", np.where(lead, _native(opt, "tsval"), 0))
                put("tsecr", np.where(lead, _native(opt, "tsecr"), 0))
                # anything beyond a lone leading timestamp (SACK blocks, SYN options)
                more = (doff > 20) & ~(lead & (doff == 32))
                if more.any():
                    v = byte_views(buf, n, endian)
                    mi = np.flatnonzero(more)
                    _tcp_options(a, v["b4"], cols, fi, p[fi] + 16 + 34, doff,
                                 cap[fi] - 34, only=mi)
                done = np.zeros(m, bool)
                done[fi] = True
                rest = np.flatnonzero(~done)
    if len(rest):
        _parse_general(buf, a, n, endian, lt, p[rest], cap[rest], rest, cols, et, vlan)
    cols["ethertype"] = et
    cols["vlan"] = vlan
    cols["t"] = t
    cols["frame_len"] = _native(hdr, "orig")
    cols["caplen"] = cap
    return cols


def _parse_general(buf, a, n, endian, lt, p, cap, rows, cols, et_out, vlan_out):
    """Any supported link type, VLAN tags, IP options, UDP, non-IP frames: one gather per
    field, for the records at offsets `p`; results go to `rows` of the output columns."""
    v = byte_views(buf, n, endian)
    b2, b4 = v["b2"], v["b4"]
    m = len(p)
    d = p + 16
    vlan = np.full(m, -1, np.int32)
    if lt == LINKTYPE_ETHERNET:
        l3 = d + 14
        et = np.where(cap >= 14, _gather(b2, d + 12), 0).astype(np.int64)
        for _ in range(2):  # up to two stacked tags (802.1Q, 802.1ad QinQ)
            tagged = ((et == 0x8100) | (et == 0x88A8)) & (cap >= (l3 - d) + 4)
            if not tagged.any():
                break
            ti = np.flatnonzero(tagged)
            first = vlan[ti] < 0
            vlan[ti[first]] = _gather(b2, l3[ti[first]]) & 0x0FFF
            et[ti] = _gather(b2, l3[ti] + 2)
            l3[ti] += 4
    elif lt in (LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2):
        hdr, etoff = (16, 14) if lt == LINKTYPE_LINUX_SLL else (20, 0)
        l3 = d + hdr
        et = np.where(cap >= hdr, _gather(b2, d + etoff), 0).astype(np.int64)
    else:  # raw IPv4
        l3 = d.copy()
        et = np.full(m, 0x0800, np.int64)
    et_out[rows] = et
    vlan_out[rows] = vlan
    l3len = cap - (l3 - d)  # captured bytes from the IP header on
    sub = {name: np.zeros(m, dt) for name, dt in _COL_DTYPES}
    is_ip = (et == 0x0800) & (l3len >= 20)
    ii = np.flatnonzero(is_ip)
    L3 = l3[ii]
    w0 = _gather(b4, L3)                      # version/IHL, TOS, total length
    version = w0 >> 28
    ihl = ((w0 >> 24) & 15).astype(np.int64) * 4
    ip_len = (w0 & 0xFFFF).astype(np.int64)
    w1 = _gather(b4, L3 + 4)                  # id, flags/fragment offset
    proto = (_gather(b4, L3 + 8) >> 16) & 0xFF
    ok3 = (version == 4) & (ihl >= 20) & (l3len[ii] >= ihl)
    sub["src"][ii] = np.where(ok3, _gather(b4, L3 + 12), 0)
    sub["dst"][ii] = np.where(ok3, _gather(b4, L3 + 16), 0)
    sub["proto"][ii] = np.where(ok3, proto, 0)
    sub["ip_len"][ii] = np.where(ok3, ip_len, 0)
    sub["ip_id"][ii] = np.where(ok3, w1 >> 16, 0)
    sub["ecn"][ii] = np.where(ok3, (w0 >> 16) & 3, 0)  # the TOS byte's low two bits
    frag_off = w1 & 0x1FFF
    l4 = L3 + ihl
    l4len = l3len[ii] - ihl
    is_tcp = ok3 & (proto == 6) & (frag_off == 0) & (l4len >= 20)
    is_udp = ok3 & (proto == 17) & (frag_off == 0) & (l4len >= 8)
    sub["hdr_ok"][ii] = ok3 & ~(((proto == 6) | (proto == 17)) & ~(is_tcp | is_udp))
    pw = np.where(is_tcp | is_udp, _gather(b4, l4), 0)  # ports: same place in TCP and UDP
    sub["sport"][ii] = pw >> 16
    sub["dport"][ii] = pw & 0xFFFF
    sub["payload_len"][ii] = np.where(is_udp, ip_len - ihl - 8, 0)
    ti = ii[is_tcp]
    if len(ti):
        T4 = l4[is_tcp]
        sub["seq"][ti] = _gather(b4, T4 + 4)
        sub["ack"][ti] = _gather(b4, T4 + 8)
        w3 = _gather(b4, T4 + 12)
        doff = ((w3 >> 28) & 15).astype(np.int64) * 4
        sub["flags"][ti] = (w3 >> 16) & 0xFF
        sub["win"][ti] = w3 & 0xFFFF
        sub["payload_len"][ti] = np.maximum(ip_len[is_tcp] - ihl[is_tcp] - doff, 0)
        bad_doff = doff < 20
        if bad_doff.any():
            sub["hdr_ok"][ti[bad_doff]] = False
        _tcp_options(a, b4, sub, ti, T4, doff, l4len[is_tcp])
    for name, _ in _COL_DTYPES:
        cols[name][rows] = sub[name]


def _tcp_options(a, b4, cols, ti, T4, doff, l4len, only=None):
    """Flag SACK / SACK-permitted and read timestamps, vectorised over packets.

    ti: output rows; T4: TCP header offsets; doff: TCP header lengths; l4len: captured
    bytes from the TCP header on; `only`: positions (into ti) to look at.
    """
    oi = np.flatnonzero(doff > 20) if only is None else only[doff[only] > 20]
    if len(oi) == 0:
        return
    pos = T4[oi] + 20
    end = T4[oi] + np.minimum(doff[oi], l4len[oi])  # options inside the capture only
    # Linux puts NOP,NOP,TS first on almost every segment: read it in one gather.
    w = np.where(pos + 12 <= end, _gather(b4, pos), 0)
    lead_ts = w == 0x0101080A
    if lead_ts.any():
        k = oi[lead_ts]
        cols["has_ts"][ti[k]] = True
        cols["tsval"][ti[k]] = _gather(b4, pos[lead_ts] + 4)
        cols["tsecr"][ti[k]] = _gather(b4, pos[lead_ts] + 8)
        pos = pos.copy()
        pos[lead_ts] += 12
    # Generic TLV walk for whatever remains (SACK blocks, SYN options).
    act = pos < end
    oi, pos, end = oi[act], pos[act], end[act]
    for _ in range(40):
        if len(oi) == 0:
            break
        kind = a[np.minimum(pos, len(a) - 1)]
        single = (kind == 0) | (kind == 1)
        ln = np.where(single, 1, a[np.minimum(pos + 1, len(a) - 1)]).astype(np.int64)
        valid = single | ((ln >= 2) & (pos + ln <= end))
        sel = ti[oi]
        sk = valid & (kind == 5)
        if sk.any():
            cols["sack"][sel[sk]] = True
            # highest right edge, measured from the ACK number (wrap-safe)
            ack = cols["ack"][sel[sk]].astype(np.int64)
            best = np.full(int(sk.sum()), -1, np.int64)
            p5, l5 = pos[sk], ln[sk]
            for b in range(4):
                has = (l5 >= 2 + 8 * (b + 1)) & (p5 + 2 + 8 * (b + 1) <= end[sk])
                if not has.any():
                    break
                right = _gather(b4, p5 + 2 + 8 * b + 4).astype(np.int64)
                off = (right - ack) % (1 << 32)
                best = np.where(has & (off > best), off, best)
            cols["sack_hi"][sel[sk]] = np.where(best >= 0, (ack + best) % (1 << 32), 0)
        cols["sack_ok"][sel[valid & (kind == 4)]] = True
        ts = valid & (kind == 8) & (ln == 10)
        if ts.any():
            cols["has_ts"][sel[ts]] = True
            cols["tsval"][sel[ts]] = _gather(b4, pos[ts] + 2)
            cols["tsecr"][sel[ts]] = _gather(b4, pos[ts] + 6)
        pos = pos + ln
        keep = valid & (kind != 0) & (pos < end)
        oi, pos, end = oi[keep], pos[keep], end[keep]
