"""The classic incast benchmark: synchronized reads over plain TCP sockets.

    python -m incastlab.apps.incast --role server --listen ADDR:PORT --rank R --out DIR
    python -m incastlab.apps.incast --role client --servers A:P,B:P,... --rank R --out DIR
        [--block-size BYTES] [--rounds R] [--rto-min-ms MS]

As in Vasudevan et al., "Safe and effective fine-grained TCP retransmissions for
datacenter communication" (SIGCOMM 2009): the client keeps one TCP connection to each of
N servers; in every round it asks all N servers at the same moment for a block of S
bytes (an 8-byte big-endian request carrying S) and starts the next round only when all
N blocks have fully arrived. A round's completion time is set by the slowest block, so a
single retransmission timeout stalls the whole round. The client logs one `round` event
per round (completion time, bytes, goodput in Mbit/s = 8 x bytes / seconds / 1e6); each
server logs one `served` event per request.

A request for 0 bytes, or the client closing the connection, ends a server. Every
connect, accept, send and receive has the --timeout deadline: a silent peer is an error
(exit 1, one line on stderr, an `error` event), never a hang.

--rto-min-ms is NOT applied by this program (the runner sets it with
`ip route ... rto_min`); it is only recorded in the log.
"""
from __future__ import annotations

import argparse
import selectors
import socket
import struct
import sys
import time

from . import common

PROG = "incastlab.apps.incast"
REQUEST = struct.Struct("!Q")
RECV_CHUNK = 1 << 16
MAX_BLOCK = 1 << 30


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Sizes in bytes, times in seconds unless the option says ms. "
               "Log schema: docs/run-directory.md.")
    p.add_argument("--role", choices=("server", "client"), required=True,
                   help="server (answers block requests) or client (issues the reads)")
    p.add_argument("--rank", type=common.non_negative_int, required=True,
                   help="log file name DIR/<rank>.jsonl")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="directory for the JSON-lines log (created if missing)")
    p.add_argument("--listen", type=common.host_port, metavar="ADDR:PORT",
                   help="server: address to listen on (required for --role server)")
    p.add_argument("--servers", type=common.host_port_list, metavar="A:P,B:P,...",
                   help="client: the N servers to read from (required for --role client)")
    p.add_argument("--block-size", type=common.positive_int, default=256 * 1024,
                   metavar="BYTES", help="client: bytes S asked from each server per round "
                                         "(default: 262144 = 256 KiB)")
    p.add_argument("--rounds", type=common.positive_int, default=100,
                   help="client: number of synchronized reads (default: 100)")
    p.add_argument("--interval", type=float, default=0.0, metavar="SECONDS",
                   help="client: pause between rounds in seconds (default: 0)")
    p.add_argument("--rto-min-ms", type=common.positive_float, default=None, metavar="MS",
                   help="the TCP minimum RTO the runner configured, in ms; only recorded")
    p.add_argument("--timeout", type=common.positive_float, default=60.0, metavar="SECONDS",
                   help="deadline of connect, accept and every round/request, in seconds "
                        "(default: 60)")
    p.add_argument("--iface", default=None,
                   help="interface name, only recorded in the log")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.role == "server":
        if args.listen is None:
            parser.error("argument --listen: required with --role server")
        if args.servers is not None:
            parser.error("argument --servers: only valid with --role client")
    else:
        if args.servers is None:
            parser.error("argument --servers: required with --role client")
        if args.listen is not None:
            parser.error("argument --listen: only valid with --role server")
    if args.block_size > MAX_BLOCK:
        parser.error(f"argument --block-size: at most {MAX_BLOCK} bytes, got {args.block_size}")
    if not 0 <= args.interval < 3600:
        parser.error(f"argument --interval: must be within 0..3600 s, got {args.interval:g}")
    return args


# ----------------------------------------------------------------------------- server


def run_server(args: argparse.Namespace, log: common.JsonLog) -> None:
    addr, port = args.listen
    log.write("start", role="incast-server", rank=args.rank, world_size=None, mode="incast",
              param_count=None, gradient_bytes=None, t=time.time(),
              **common.host_info(args.iface), options=common.options(args))
    with socket.create_server((addr, port), reuse_port=False) as listener:
        listener.settimeout(args.timeout)
        try:
            conn, peer = listener.accept()
        except TimeoutError:
            raise common.PeerError(f"no client connected to {addr}:{port} within "
                                   f"{args.timeout:g} s") from None
    with conn:
        conn.settimeout(args.timeout)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        log.write("connected", t=time.time(), peer=f"{peer[0]}:{peer[1]}")
        payload = memoryview(bytearray(RECV_CHUNK * 4))
        requests = sent_total = 0
        while True:
            header = _recv_exactly(conn, REQUEST.size, "request", allow_eof=True)
            if header is None:
                break
            t_request = time.time()
            (size,) = REQUEST.unpack(header)
            if size == 0:
                break
            if size > MAX_BLOCK:
                raise common.PeerError(f"client asked for {size} bytes, more than {MAX_BLOCK}")
            remaining = size
            try:
                while remaining:
                    n = min(remaining, len(payload))
                    conn.sendall(payload[:n])
                    remaining -= n
            except (TimeoutError, OSError) as exc:
                raise common.PeerError(f"sending block {requests} to the client failed: "
                                       f"{exc}") from None
            log.write("served", round=requests, t_request=t_request, t_sent=time.time(),
                      bytes=size)
            requests += 1
            sent_total += size
    log.write("final", t=time.time(), requests=requests, bytes_sent=sent_total,
              accuracy=None, loss=None, iterations=requests)


def _recv_exactly(conn: socket.socket, n: int, what: str, allow_eof: bool = False
                  ) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = conn.recv(n - len(data))
        except TimeoutError:
            raise common.PeerError(f"no {what} within the timeout") from None
        if not chunk:
            if allow_eof and not data:
                return None
            raise common.PeerError(f"connection closed while reading the {what}")
        data += chunk
    return data


# ----------------------------------------------------------------------------- client


def connect_all(servers: list[tuple[str, int]], timeout: float) -> list[socket.socket]:
    """Connect to every server, retrying refused connections until `timeout` seconds."""
    deadline = time.monotonic() + timeout
    socks = []
    for addr, port in servers:
        while True:
            try:
                s = socket.create_connection((addr, port), timeout=max(0.1, deadline -
                                                                        time.monotonic()))
                break
            except (ConnectionRefusedError, TimeoutError, OSError) as exc:
                if time.monotonic() >= deadline:
                    for s in socks:
                        s.close()
                    raise common.PeerError(f"cannot connect to server {addr}:{port} within "
                                           f"{timeout:g} s: {exc}") from None
                time.sleep(0.05)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    return socks


def read_round(socks: list[socket.socket], names: list[str], block: int, timeout: float
               ) -> list[int]:
    """Request `block` bytes from every socket at once; return bytes read from each."""
    request = REQUEST.pack(block)
    for s in socks:  # back to back: the synchronized read
        s.sendall(request)
    got = [0] * len(socks)
    buf = bytearray(RECV_CHUNK)
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for i, s in enumerate(socks):
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, i)
        try:
            pending = len(socks)
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    late = [names[i] for i, g in enumerate(got) if g < block]
                    raise common.PeerError(f"round not complete within {timeout:g} s; "
                                           f"blocks missing from {', '.join(late)}")
                for key, _ in sel.select(min(left, 1.0)):
                    i = key.data
                    n = socks[i].recv_into(buf, min(RECV_CHUNK, block - got[i]))
                    if n == 0:
                        raise common.PeerError(f"server {names[i]} closed the connection "
                                               f"after {got[i]} of {block} bytes")
                    got[i] += n
                    if got[i] == block:
                        sel.unregister(socks[i])
                        pending -= 1
        finally:
            for s in socks:
                s.settimeout(timeout)  # back to blocking with a deadline
    return got


def run_client(args: argparse.Namespace, log: common.JsonLog) -> None:
    n = len(args.servers)
    names = [f"{a}:{p}" for a, p in args.servers]
    log.write("start", role="client", rank=args.rank, world_size=n + 1, mode="incast",
              param_count=None, gradient_bytes=None, t=time.time(), senders=n,
              block_bytes=args.block_size, rto_min_ms=args.rto_min_ms,
              **common.host_info(args.iface), options=common.options(args))
    t0 = time.time()
    socks = connect_all(args.servers, args.timeout)
    log.write("ready", t=time.time(), init_s=time.time() - t0, servers=names)
    total = 0
    try:
        for r in range(args.rounds):
            t_start = time.time()
            got = read_round(socks, names, args.block_size, args.timeout)
            t_end = time.time()
            nbytes = sum(got)
            total += nbytes
            log.write("round", round=r, t_start=t_start, t_end=t_end, senders=n,
                      block_bytes=args.block_size, bytes=nbytes,
                      goodput_mbps=nbytes * 8 / max(t_end - t_start, 1e-9) / 1e6)
            if args.interval:
                time.sleep(args.interval)
        for s in socks:
            s.sendall(REQUEST.pack(0))
    finally:
        for s in socks:
            s.close()
    log.write("final", t=time.time(), rounds=args.rounds, bytes_recv=total, accuracy=None,
              loss=None, iterations=args.rounds)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = common.JsonLog(args.out, args.rank)
    body = run_server if args.role == "server" else run_client
    return common.run_main(PROG, log, args.rank, lambda: body(args, log))


if __name__ == "__main__":
    sys.exit(main())
