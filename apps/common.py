"""Shared plumbing of the training apps: arguments, JSON-lines log, gloo set-up, timeouts.

Nothing here knows about Mininet: the apps run the same inside an emulated host and on
loopback. Every blocking communication step goes through `wait()` with a deadline, so a
dead or hung peer turns into a `PeerError` (one clear line on stderr, an `error` event in
the log, exit status 1) instead of a hang; SIGTERM/SIGINT do the same with 128+N.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import signal
import socket
import stat
import sys
import threading
import time
from typing import Any, Callable

from incastlab.topologies import runformat

EXIT_RUNTIME_ERROR = 1


class PeerError(RuntimeError):
    """A communication step failed or did not finish within --timeout seconds."""


# ----------------------------------------------------------------------------- arguments


def host_port(text: str) -> tuple[str, int]:
    """Parse 'ADDR:PORT' (argparse type). PORT must be 1..65535."""
    addr, sep, port = text.rpartition(":")
    if not sep or not addr or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected ADDR:PORT with PORT in 1..65535, got {text!r}")
    return addr, int(port)


def host_port_list(text: str) -> list[tuple[str, int]]:
    """Parse 'A:P,B:P,...' (argparse type); at least one entry."""
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list of ADDR:PORT")
    return [host_port(t.strip()) for t in items]


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def slowdown(text: str) -> tuple[int, float]:
    """Parse 'RANK:FACTOR' (argparse type); FACTOR >= 1."""
    rank, sep, factor = text.partition(":")
    try:
        r, f = int(rank), float(factor)
    except ValueError:
        r, f = -1, 0.0
    if not sep or r < 0 or not f >= 1 or f == float("inf"):
        raise argparse.ArgumentTypeError(
            f"expected RANK:FACTOR with RANK >= 0 and FACTOR >= 1, got {text!r}")
    return r, f


def add_dist_args(p: argparse.ArgumentParser) -> None:
    """Options every torch.distributed app shares."""
    p.add_argument("--rank", type=non_negative_int, required=True,
                   help="global rank of this process (0 hosts the rendezvous store)")
    p.add_argument("--world-size", type=positive_int, required=True,
                   help="total number of processes in the job")
    p.add_argument("--master", type=host_port, required=True, metavar="ADDR:PORT",
                   help="rendezvous address (rank 0's host) for init_method=tcp://ADDR:PORT")
    p.add_argument("--iface", default=None,
                   help="network interface gloo uses (sets GLOO_SOCKET_IFNAME), e.g. h1-eth0 "
                        "or lo; default: let gloo pick")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="directory for the JSON-lines log DIR/<rank>.jsonl (created if missing)")
    p.add_argument("--timeout", type=positive_float, default=60.0, metavar="SECONDS",
                   help="deadline of every rendezvous, send, receive and collective, in "
                        "seconds; a peer silent for longer is an error, so make it longer "
                        "than the slowest legitimate wait, e.g. a straggler's step "
                        "(default: 60)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch intra-op threads (default: 1, so many ranks share few cores)")


def add_training_args(p: argparse.ArgumentParser) -> None:
    """Options of the training workload (model, data, optimiser, stragglers)."""
    p.add_argument("--iterations", type=positive_int, default=50,
                   help="training iterations (see the app's description for what counts)")
    p.add_argument("--model-size", type=positive_float, default=0.1, metavar="MPARAMS",
                   help="approximate parameter count in millions (0.005..20); the MLP's hidden "
                        "width is chosen to match, the exact count and gradient bytes are "
                        "logged (default: 0.1)")
    p.add_argument("--batch-size", type=positive_int, default=32,
                   help="samples per worker per iteration (default: 32)")
    p.add_argument("--lr", type=positive_float, default=0.5,
                   help="SGD learning rate, no momentum (default: 0.5)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of model initialisation and batch order (default: 0)")
    p.add_argument("--slowdown", type=slowdown, action="append", default=[],
                   metavar="RANK:FACTOR",
                   help="make worker RANK's compute FACTOR times slower (a measured sleep of "
                        "(FACTOR-1) x its compute time); repeatable")


def check_model_size(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not 0.005 <= args.model_size <= 20:
        parser.error(f"argument --model-size: must be within 0.005..20 (million parameters), "
                     f"got {args.model_size:g}")


def check_rank(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.rank >= args.world_size:
        parser.error(f"argument --rank: must be < --world-size ({args.world_size}), "
                     f"got {args.rank}")
    for r, _ in args.slowdown:
        if r >= args.world_size:
            parser.error(f"argument --slowdown: rank {r} is not < --world-size "
                         f"({args.world_size})")


def slowdown_factor(args: argparse.Namespace, rank: int) -> float:
    """The compute slowdown factor of `rank` (1.0 when not a straggler)."""
    factor = 1.0
    for r, f in args.slowdown:
        if r == rank:
            factor = f
    return factor


def options(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed options as JSON-friendly values (for the `start` event)."""
    return {key: _option_value(value) for key, value in vars(args).items()}


def _option_value(value: Any) -> Any:
    if isinstance(value, tuple):  # ADDR:PORT and RANK:FACTOR pairs, as typed
        return ":".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    if isinstance(value, list):
        return [_option_value(v) for v in value]
    return value


# ----------------------------------------------------------------------------- log


class JsonLog:
    """`DIR/<rank>.jsonl`: one JSON object a line, written and flushed as it happens."""

    def __init__(self, out_dir: str, rank: int) -> None:
        os.makedirs(out_dir, exist_ok=True)
        self.path = os.path.join(out_dir, runformat.worker_log(rank))
        self._f = open(self.path, "w", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        """Append one event. Non-finite floats (a diverged loss) are written as null."""
        record = _finite({"event": event, **fields})
        line = json.dumps(record, separators=(",", ":"), allow_nan=False, default=_jsonable)
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()

    def close(self) -> None:
        with self._lock:
            self._f.close()


def _finite(value: Any) -> Any:
    # strict JSON has no NaN/Infinity; null keeps every line parseable (pandas: NaN)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def host_info(iface: str | None) -> dict[str, Any]:
    return {"host": socket.gethostname(), "iface": iface, "pid": os.getpid()}


# ----------------------------------------------------------------------------- gloo


def init_gloo(args: argparse.Namespace) -> None:
    """Join the gloo process group; every later gloo op defaults to --timeout too."""
    import torch
    import torch.distributed as dist

    if args.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = args.iface
    torch.set_num_threads(args.threads)
    addr, port = args.master
    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://{addr}:{port}", rank=args.rank,
            world_size=args.world_size, timeout=datetime.timedelta(seconds=args.timeout))
    except Exception as exc:  # the store raises several types; all mean the same to us
        raise PeerError(f"rendezvous at {addr}:{port} failed within {args.timeout:g} s: "
                        f"{first_line(exc)}") from exc


def keep_alive(idle_s: int, interval_s: int, probes: int) -> int:
    """TCP keepalive on every connected TCP socket of this process (gloo's pairs, made at
    init_gloo, and the rendezvous store's); returns how many were set.

    A connection on which nothing came from the peer for `idle_s` seconds, and nothing of
    ours is unacknowledged, is probed every `interval_s` s: a peer whose socket is gone (a
    killed process whose reset was lost) answers the first probe with a reset, and after
    `probes` unanswered ones (an unreachable peer) the kernel gives the connection up. Either
    way gloo's pair fails, and with it every wait on it, within idle_s + probes x
    interval_s of the peer's last packet. A live peer's kernel answers probes even while
    the process is stopped or busy, so hung and slow peers are still --timeout's."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            # a socket object on a duplicate: options belong to the socket, not the fd,
            # and with no default timeout Python leaves the file's O_NONBLOCK (gloo's) alone
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue  # closed meanwhile, or not ours to inspect
        with sock:
            if sock.family not in (socket.AF_INET, socket.AF_INET6) \
                    or sock.type != socket.SOCK_STREAM:
                continue
            try:
                sock.getpeername()
            except OSError:
                continue  # a listening socket
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, probes)
            count += 1
    return count


def wait(work: Any, timeout: float, what: str) -> None:
    """Wait for a gloo Work (isend/irecv/collective) at most `timeout` seconds."""
    try:
        work.wait(datetime.timedelta(seconds=timeout))
    except Exception as exc:
        raise PeerError(f"{what}: not completed within {timeout:g} s or peer lost "
                        f"(dead, hung or unreachable): {first_line(exc)}") from exc


def finish_gloo(timeout: float) -> None:
    """End a gloo job: a barrier, so no rank closes its sockets while a peer still reads.

    The process group is deliberately not destroyed: tearing gloo down while peers are
    closing their connections was seen to abort a rank ("terminate called without an
    active exception") after its work was done. `run_main` leaves with os._exit instead.
    """
    import torch.distributed as dist

    wait(dist.barrier(async_op=True), timeout, "final barrier")


def first_line(exc: BaseException) -> str:
    """The error's first line, at most 300 characters (a cut may end on a space: the
    stderr line and the logged message must stay the same text)."""
    text = str(exc).strip().splitlines()
    return text[0][:300].rstrip() if text else type(exc).__name__


# ----------------------------------------------------------------------------- entry point


def run_main(prog: str, log: JsonLog, rank: int, body: Callable[[], None]) -> int:
    """Run `body`; on failure write an `error` event and one stderr line, exit non-zero.

    Exit status 0 on success, 1 for an error, 128+N for signal N (SIGTERM, SIGINT). The
    process always leaves with os._exit (this never returns), because gloo's background
    threads and a half-closed process group can otherwise keep it alive or abort it.
    Signals are noticed by a watcher thread, so they act at once even while the main
    thread is blocked inside a gloo wait (where Python signal handlers would not run
    until the wait returns).
    """
    _watch_signals(prog, log, rank)
    try:
        body()
    except BaseException as exc:  # noqa: B036 - everything, including KeyboardInterrupt
        message = first_line(exc) if isinstance(exc, PeerError) else (
            f"{type(exc).__name__}: {first_line(exc)}")
        _fail(prog, log, rank, message, EXIT_RUNTIME_ERROR)
    with _FAIL_LOCK:  # a late signal must not cut the log's last line in half
        log.close()
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter and C++ static teardown (gloo threads): the work is done and
        # logged; see finish_gloo.
        os._exit(0)


_FAIL_LOCK = threading.Lock()


def _fail(prog: str, log: JsonLog, rank: int, message: str, status: int) -> None:
    """Log the error, say it on stderr in one line, and leave now (first caller wins)."""
    _FAIL_LOCK.acquire()  # never released: whoever gets here first ends the process
    try:
        log.write("error", t=time.time(), message=message)
        log.close()
    except Exception:  # the log may already be closed; stderr still tells
        pass
    finally:
        sys.stderr.write(f"{prog}: error: rank {rank}: {message}\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(status)


def _watch_signals(prog: str, log: JsonLog, rank: int) -> None:
    # Python's C-level handler writes the signal number to the wakeup fd from whichever
    # thread the kernel picked; the watcher reads it without needing the main thread.
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)

    def watch() -> None:
        signum = os.read(read_fd, 1)[0]
        _fail(prog, log, rank, f"terminated by signal {signal.Signals(signum).name}",
              128 + signum)

    threading.Thread(target=watch, name="signal-watcher", daemon=True).start()
