"""Parameter-server training over gloo point-to-point messages.

    python -m incastlab.apps.ps --role server|worker --rank R --world-size W \\
        --master ADDR:PORT --out DIR [--mode sync|async|ssp|backup] [--shards K] ...

Rank layout: ranks 0..K-1 are the parameter servers (shard k owns the k-th of K nearly
equal contiguous slices of the flat parameter vector, `torch.tensor_split` order), ranks
K..W-1 are the N = W-K workers; worker index j = rank-K picks the data shard. Rank 0
(server 0) hosts the rendezvous, so --master is server 0's address. Every worker talks
to every server; servers never talk to each other, workers never to workers: the traffic
is exactly workers->PS (push) and PS->workers (pull).

Messages are one flat float32 tensor each (gradient bytes = 4 x parameter count):

    push  worker -> server k   [gradient slice, model version used, worker iteration]
    pull  server k -> worker   [parameter slice, version, staleness, hold seconds,
                                stop flag, accepted flag]

At start every server sends its slice of the initial parameters (version 0) to every
worker. Each worker iteration: compute the gradient on its current parameters, push it
to every shard, pull the new slice from every shard. Modes (each shard decides alone):

- sync (BSP): a server waits for all N gradients of its current version, averages them
  (summed in rank order), applies SGD and replies to all N. `--iterations` = updates =
  iterations of every worker.
- async: every gradient is applied on arrival and answered at once; staleness = server
  version at arrival minus the version the gradient was computed on. Each worker does
  `--iterations` iterations (N x iterations updates in all).
- ssp: async, but the reply to a worker that would start iteration i is held until
  i - min_clock <= S (`--staleness S`), where a worker's clock = gradients the server
  received from it. So no worker ever runs more than S iterations ahead of the slowest.
- backup: a server updates as soon as N-B (`--backup-workers B`) gradients of its
  current version arrived and replies to those; a gradient arriving for an older version
  is late: it is still received (the stream stays consistent), discarded, counted, and
  answered with the current parameters. `--iterations` = updates; workers run until the
  server's reply carries the stop flag (stragglers do fewer iterations). With shards,
  each decides alone (a gradient can be late at one shard and on time at another); a
  worker stops pushing to a shard once that shard said stop, and ends when all did.

Learning-rate rules (--lr-rule; how an update of k gradients g_i of staleness s_i moves
the parameters, N = workers):

- mean:       params -= lr * (sum g_i) / k            (the sync/backup default: SGD on the
              average, so one update moves as far as one gradient of N x the batch)
- per_worker: params -= (lr / N) * sum g_i            (the async/SSP default: N single-
              gradient updates move as far as one sync step of N gradients)
- staleness:  params -= lr * (sum g_i / (1 + s_i)) / k   (staleness-aware async SGD; the
              same as mean where nothing is stale, i.e. in sync and backup)

Without --lr-rule the mode's default applies (DEFAULT_LR_RULE); the server logs the rule
it used in its start event and each gradient's rate in `update` events (`rates`).

Held-out evaluation (single PS only, --shards 1): the server evaluates its parameters on
the test set at version 0 and then whenever another --eval-every gradients have been
applied (default: N, one sync step), and once more at the end, logging `eval` events
(version, gradients applied, accuracy, loss): time-to-accuracy is read from these.

Emulated compute (--compute-ms MS): a worker's compute of one iteration lasts at least
MS milliseconds (the real forward/backward runs, then a sleep pads it), as if the model
were bigger or the device slower; a straggler's --slowdown factor then multiplies that.

Every send and receive has the --timeout deadline (make it exceed the longest
legitimate wait: a straggler's step, or N x gradient bytes / link rate for a sync push);
a dead or hung peer makes this process exit 1 with one line on stderr and an `error`
event; SIGTERM exits 143 the same way. All ranks end with a barrier. Log:
DIR/<rank>.jsonl, see docs/run-directory.md.

A lost worker (its connection failed: killed, or silent past --timeout, which the
server applies itself, since a gloo wait that times out closes every connection) ends a sync
server with that reason: every step needs every worker. The other modes go on without
it, as they would in a real cluster: async and SSP (the slowest clock is then taken
over the workers left), and backup while at least N-B workers are left (a step's
quorum); each server logs a `lost` event (rank, message) and leaves that worker out of
the end. The end is a barrier of point-to-point messages among the ranks left (every
rank sends a token to rank 0, which answers each), since gloo's barrier needs every
rank, dead ones too.
"""
from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from . import common
from .model import BYTES_PER_PARAM, Digits, Trainer, build_model, params_digest

PROG = "incastlab.apps.ps"
MODES = ("sync", "async", "ssp", "backup")
PUSH_TRAILER = 2  # version, iteration
PULL_TRAILER = 5  # version, staleness, hold_s, stop, accepted
LR_RULES = ("mean", "per_worker", "staleness")
TOLERATES_LOST = ("async", "ssp", "backup")  # modes that can go on without a worker
GLOO_WAIT_S = 7 * 24 * 3600.0  # a gloo wait the server's own deadline always beats
FINISH_TAG = 7  # tag of the end barrier's tokens (every other message uses tag 0)
# Defaults that make the modes comparable: N gradients move the model as far in every mode
# (sync averages N gradients with lr; async/SSP apply each of the N with lr / N).
DEFAULT_LR_RULE = {"sync": "mean", "backup": "mean", "async": "per_worker",
                   "ssp": "per_worker"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Rank layout: 0..K-1 servers, K..W-1 workers. Times in seconds, sizes in "
               "bytes. Log schema: docs/run-directory.md.")
    p.add_argument("--role", choices=("server", "worker"), required=True,
                   help="server (ranks 0..K-1) or worker (ranks K..W-1)")
    common.add_dist_args(p)
    common.add_training_args(p)
    p.add_argument("--mode", choices=MODES, default="sync",
                   help="synchronisation: sync (BSP), async, ssp or backup (default: sync)")
    p.add_argument("--shards", type=common.positive_int, default=1, metavar="K",
                   help="number of parameter servers, each owning 1/K of the parameters "
                        "(default: 1)")
    p.add_argument("--staleness", type=common.non_negative_int, default=None, metavar="S",
                   help="ssp: max iterations a worker may run ahead of the slowest "
                        "(required with --mode ssp)")
    p.add_argument("--backup-workers", type=common.non_negative_int, default=None,
                   metavar="B", help="backup: the server aggregates the first N-B gradients "
                                     "of a step (required with --mode backup)")
    p.add_argument("--lr-rule", choices=LR_RULES, default=None,
                   help="how an update scales the learning rate: mean (lr x the average "
                        "gradient), per_worker (lr / workers per gradient), staleness "
                        "(lr / (1 + staleness) per gradient, averaged); default: mean for "
                        "sync and backup, per_worker for async and ssp")
    p.add_argument("--eval-every", type=common.positive_int, default=None, metavar="K",
                   help="single PS: evaluate held-out accuracy and loss every K gradients "
                        "applied (default: the number of workers, one sync step)")
    p.add_argument("--compute-ms", type=common.non_negative_float, default=0.0, metavar="MS",
                   help="emulated compute time of one worker iteration in milliseconds: "
                        "the real compute runs, then a sleep pads it to at least MS; a "
                        "--slowdown factor multiplies the padded time (default: 0)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.check_rank(parser, args)
    common.check_model_size(parser, args)
    workers = args.world_size - args.shards
    if workers < 1:
        parser.error(f"argument --shards: {args.shards} servers leave no worker in "
                     f"--world-size {args.world_size}")
    is_server = args.rank < args.shards
    if (args.role == "server") != is_server:
        parser.error(f"argument --role: rank {args.rank} is a "
                     f"{'server' if is_server else 'worker'} with --shards {args.shards} "
                     f"(servers are ranks 0..{args.shards - 1})")
    if args.mode == "ssp" and args.staleness is None:
        parser.error("argument --staleness: required with --mode ssp")
    if args.mode != "ssp" and args.staleness is not None:
        parser.error("argument --staleness: only valid with --mode ssp")
    if args.mode == "backup":
        if args.backup_workers is None:
            parser.error("argument --backup-workers: required with --mode backup")
        if args.backup_workers >= workers:
            parser.error(f"argument --backup-workers: must be < the number of workers "
                         f"({workers}), got {args.backup_workers}")
    elif args.backup_workers is not None:
        parser.error("argument --backup-workers: only valid with --mode backup")
    args.lr_rule_default = args.lr_rule is None
    if args.lr_rule is None:
        args.lr_rule = DEFAULT_LR_RULE[args.mode]
    if args.eval_every is None:
        args.eval_every = workers
    for r, _ in args.slowdown:
        if r < args.shards:
            parser.error(f"argument --slowdown: rank {r} is a server; stragglers are "
                         f"workers (ranks {args.shards}..{args.world_size - 1})")
    return args


def lr_rates(rule: str, lr: float, workers: int, staleness: list[int]) -> list[float]:
    """The rate each gradient of one update is applied with (see the module docstring):
    the update is params -= sum_i rates[i] * g_i, for gradients of the given staleness."""
    k = len(staleness)
    if rule == "mean":
        return [lr / k] * k
    if rule == "per_worker":
        return [lr / workers] * k
    if rule == "staleness":
        return [lr / (k * (1 + s)) for s in staleness]
    raise ValueError(f"unknown learning-rate rule {rule!r}; rules are {', '.join(LR_RULES)}")


def shard_bounds(n_params: int, shards: int) -> list[tuple[int, int]]:
    """[lo, hi) of each shard's slice: torch.tensor_split's nearly equal split."""
    sizes = [len(c) for c in torch.tensor_split(torch.arange(n_params), shards)]
    bounds, lo = [], 0
    for size in sizes:
        bounds.append((lo, lo + size))
        lo += size
    return bounds


# ----------------------------------------------------------------------------- server


class Server:
    """One parameter-server shard: an event loop over gradient arrivals."""

    def __init__(self, args: argparse.Namespace, log: common.JsonLog, trainer: Trainer,
                 lo: int, hi: int) -> None:
        self.args, self.log, self.trainer = args, log, trainer
        self.params = trainer.flat_params()[lo:hi].clone()
        self.n = hi - lo
        self.workers = list(range(args.shards, args.world_size))
        self.quorum = len(self.workers) - (args.backup_workers or 0)
        self.lost: dict[int, str] = {}  # worker rank -> why it was given up
        self.version = 0
        self.received = {w: 0 for w in self.workers}  # gradients received = SSP clock
        self.stopped: set[int] = set()
        self.buffer: dict[int, tuple[torch.Tensor, float, int]] = {}  # sync/backup step
        self.deferred: dict[int, tuple[float, int]] = {}  # ssp: rank -> (t_arrival, stale)
        self.late: list[int] = []  # backup: discarded since the last update
        self.applied = self.discarded = 0
        self.discarded_by_rank = {w: 0 for w in self.workers}
        self.bytes_sent = self.bytes_recv = 0
        self.events: queue.Queue = queue.Queue()
        # worker rank -> when its pending gradient receive was posted (monotonic s): the
        # server's own --timeout deadline (see _overdue)
        self.expecting: dict[int, float] = {}
        self.senders: list[threading.Thread] = []
        # held-out evaluation needs the whole model: only a single PS has it
        self.evaluates = args.shards == 1
        self.next_eval = 0  # gradients applied at which the next evaluation is due
        self.last_eval_applied = -1

    # -- communication: posts on this thread, waits on helper threads ------------------

    def expect(self, w: int) -> None:
        buf = torch.empty(self.n + PUSH_TRAILER)
        try:
            work = dist.irecv(buf, src=w)
        except RuntimeError as exc:  # its connection already closed: gloo refuses the post
            self._post_failed(w, f"receive gradient from rank {w}", exc)
            return
        self.expecting[w] = time.monotonic()
        threading.Thread(target=self._wait_recv, args=(w, work, buf), daemon=True).start()

    def _post_failed(self, w: int, what: str, exc: RuntimeError) -> None:
        """A post to worker ``w`` that gloo refused (a peer whose connection closed before
        it, e.g. killed): the same lost worker as a wait that failed, so the mode decides
        (a raw RuntimeError here ended even backup and lost sync's reason)."""
        self.events.put((w, None, time.time(), common.PeerError(
            f"{what}: peer lost (dead or unreachable): {common._first_line(exc)}")))

    def _wait_recv(self, w: int, work: Any, buf: torch.Tensor) -> None:
        # gloo's own deadline is kept out of the way (GLOO_WAIT_S): a gloo wait that times
        # out closes every connection of the process ("Application timeout caused pair
        # closure"), which would end the modes that go on without a silent worker. The
        # server's --timeout is applied by the loop instead (_overdue); a closed connection
        # still fails this wait at once.
        try:
            common.wait(work, GLOO_WAIT_S, f"receive gradient from rank {w}")
            self.events.put((w, buf, time.time(), None))
        except common.PeerError as exc:
            self.events.put((w, None, time.time(), exc))

    def reply(self, w: int, t_arrival: float | None, staleness: int, accepted: bool) -> None:
        """Send the current parameters to worker `w` and, unless it stops, expect more."""
        if w in self.lost:
            return  # a lost worker's gradient still counted in its step; it gets no reply
        stop = self._stops(w)
        hold = 0.0 if t_arrival is None else time.time() - t_arrival
        trailer = torch.tensor([self.version, staleness, hold, float(stop), float(accepted)])
        msg = torch.cat([self.params, trailer])
        try:
            work = dist.isend(msg, dst=w)
        except RuntimeError as exc:
            self._post_failed(w, f"send parameters to rank {w}", exc)
            return
        self.bytes_sent += msg.numel() * BYTES_PER_PARAM
        t = threading.Thread(target=self._wait_send, args=(w, work, msg), daemon=True)
        t.start()
        self.senders = [s for s in self.senders if s.is_alive()] + [t]
        if stop:
            self.stopped.add(w)
        else:
            self.expect(w)

    def _wait_send(self, w: int, work: Any, _msg: torch.Tensor) -> None:
        try:
            common.wait(work, self.args.timeout, f"send parameters to rank {w}")
        except common.PeerError as exc:
            self.events.put((w, None, time.time(), exc))

    def _stops(self, w: int) -> bool:
        if self.args.mode in ("sync", "backup"):
            return self.version >= self.args.iterations
        return self.received[w] >= self.args.iterations

    # -- the loop ---------------------------------------------------------------------

    def step(self, grads: list[torch.Tensor], staleness: list[int]) -> list[float]:
        """Apply one update of `grads` (in rank order) under the learning-rate rule;
        returns each gradient's rate (`lr_rates`)."""
        rule, k = self.args.lr_rule, len(grads)
        if rule == "staleness":
            total = grads[0] / (1 + staleness[0])
            for g, st in zip(grads[1:], staleness[1:], strict=True):
                total += g / (1 + st)
        else:
            total = grads[0].clone()
            for g in grads[1:]:  # fixed (rank) order: the same bits whatever the arrival order
                total += g
        # mean keeps lr * (total / k), the expression (and bits) of the rule-less server
        self.params -= self.args.lr * (total / (len(self.workers) if rule == "per_worker"
                                                else k))
        self.version += 1
        self.applied += k
        return lr_rates(rule, self.args.lr, len(self.workers), staleness)

    def maybe_evaluate(self, final: bool = False) -> None:
        """Log an `eval` event when another --eval-every gradients have been applied,
        or at the end (`final`) unless the last evaluation saw this model already."""
        if not self.evaluates:
            return
        if (self.applied == self.last_eval_applied) if final \
                else (self.applied < self.next_eval):
            return
        t0 = time.perf_counter()
        accuracy, loss = self.trainer.evaluate(self.params)
        self.log.write("eval", version=self.version, applied=self.applied, t=time.time(),
                       accuracy=accuracy, loss=loss, eval_s=time.perf_counter() - t0)
        self.last_eval_applied = self.applied
        while self.next_eval <= self.applied:
            self.next_eval += self.args.eval_every

    def run(self) -> None:
        self.maybe_evaluate()  # version 0: where training starts
        for w in self.workers:
            self.reply(w, None, 0, True)
        while any(w not in self.stopped for w in self.live()):
            try:
                w, buf, t_arr, exc = self.events.get(timeout=self._until_due())
            except queue.Empty:
                for w in self._overdue():
                    self.lose(w, common.PeerError(
                        f"receive gradient from rank {w}: not completed within "
                        f"{self.args.timeout:g} s or peer lost (dead, hung or unreachable): "
                        f"silent past the deadline"))
                continue
            self.expecting.pop(w, None)  # its receive ended (a gradient, or failed)
            if w in self.lost:
                continue  # its other pending message failed too, or arrived too late
            if exc is not None:
                self.lose(w, exc)
                continue
            self.bytes_recv += buf.numel() * BYTES_PER_PARAM
            self.received[w] += 1
            grad, g_version, g_iter = buf[:self.n], int(buf[self.n]), int(buf[self.n + 1])
            handler = self.on_arrival_step if self.args.mode in ("sync", "backup") \
                else self.on_arrival_async
            handler(w, grad, g_version, g_iter, t_arr)
            self.maybe_evaluate()
        self.maybe_evaluate(final=True)  # the model training ended with
        for t in self.senders:
            t.join(self.args.timeout + 5)
        self._check_errors()

    def _check_errors(self) -> None:
        while not self.events.empty():
            w, _, _, exc = self.events.get()
            if exc is not None and w not in self.lost:
                if w in self.stopped and self.args.mode in TOLERATES_LOST:
                    self.lose(w, exc)  # its last reply was not taken: gone at the end
                else:
                    raise exc

    def live(self) -> list[int]:
        return [w for w in self.workers if w not in self.lost]

    def _until_due(self) -> float:
        """Seconds until the next pending receive passes --timeout (at least a poll's
        10 ms); --timeout + 5 when none is pending (then nothing can arrive: an error)."""
        pending = [t for w, t in self.expecting.items() if w not in self.lost]
        if not pending:
            return self.args.timeout + 5
        return max(min(pending) + self.args.timeout - time.monotonic(), 0.01)

    def _overdue(self) -> list[int]:
        """Workers whose pending gradient receive is past --timeout (given up here, not
        by gloo); with nothing pending, no worker can send: the old error."""
        now = time.monotonic()
        pending = {w: t for w, t in self.expecting.items() if w not in self.lost}
        if not pending:
            raise common.PeerError(f"no gradient from any worker within "
                                   f"{self.args.timeout:g} s")
        late = [w for w, t in sorted(pending.items()) if now - t >= self.args.timeout]
        for w in late:
            self.expecting.pop(w, None)
        return late

    def lose(self, w: int, exc: Exception) -> None:
        """Give up worker `w` whose message failed (`exc`): in a mode that tolerates it,
        log a `lost` event and go on without it; otherwise (sync, or a backup quorum no
        longer reachable) end with the reason."""
        what = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        left = len(self.live()) - 1
        if self.args.mode not in TOLERATES_LOST:
            raise common.PeerError(f"worker rank {w} lost; mode {self.args.mode} needs every "
                                   f"worker's gradient each step: {what}") from exc
        if self.args.mode == "backup" and left < self.quorum:
            raise common.PeerError(f"worker rank {w} lost; {left} workers left, fewer than "
                                   f"the {self.quorum} a backup step needs (workers - "
                                   f"backup workers): {what}") from exc
        self.lost[w] = what
        self.deferred.pop(w, None)
        self.log.write("lost", t=time.time(), rank=w, workers_left=left, message=what)
        if self.args.mode == "ssp":  # the slowest clock may have been the lost worker's
            for r in self.ssp_releasable():
                t_r, stale_r = self.deferred.pop(r)
                self.reply(r, t_r, stale_r, True)

    def on_arrival_step(self, w: int, grad: torch.Tensor, g_version: int, g_iter: int,
                        t_arr: float) -> None:
        """sync and backup: gather a step's gradients; late ones are discarded."""
        if g_version != self.version:  # late: this version's step is already done
            self.discarded += 1
            self.discarded_by_rank[w] += 1
            self.late.append(w)
            self.reply(w, t_arr, self.version - g_version, False)
            return
        self.buffer[w] = (grad, t_arr, g_iter)
        if len(self.buffer) < self.quorum:
            return
        ranks = sorted(self.buffer)
        rates = self.step([self.buffer[r][0] for r in ranks], [0] * len(ranks))
        self.log.write("update", version=self.version, t=time.time(), from_ranks=ranks,
                       staleness=[0] * len(ranks),
                       iterations=[self.buffer[r][2] for r in ranks], discarded=self.late,
                       rates=rates)
        self.late = []
        step, self.buffer = self.buffer, {}
        for r in ranks:
            self.reply(r, step[r][1], 0, True)

    def slowest_clock(self) -> int:
        """ssp: the least clock (gradients received) of the workers left."""
        return min(self.received[r] for r in self.live())

    def ssp_releasable(self) -> list[int]:
        """ssp: the deferred workers whose next iteration keeps within the bound (or
        who are done), in rank order."""
        slowest = self.slowest_clock()
        # gap = the iteration r would start, minus the least clock
        return [r for r in sorted(self.deferred)
                if self.received[r] - slowest <= self.args.staleness
                or self.received[r] >= self.args.iterations]

    def on_arrival_async(self, w: int, grad: torch.Tensor, g_version: int, g_iter: int,
                         t_arr: float) -> None:
        """async and ssp: apply at once; ssp holds replies that would break the bound."""
        stale = self.version - g_version
        rates = self.step([grad], [stale])
        record: dict[str, Any] = {"version": self.version, "t": time.time(),
                                  "from_ranks": [w], "staleness": [stale],
                                  "iterations": [g_iter], "discarded": [], "rates": rates}
        if self.args.mode == "async":
            self.log.write("update", **record)
            self.reply(w, t_arr, stale, True)
            return
        self.deferred[w] = (t_arr, stale)
        released = self.ssp_releasable()
        slowest = self.slowest_clock()
        gaps = [self.received[r] - slowest if self.received[r] < self.args.iterations
                else None for r in released]
        record.update(clocks={str(r): c for r, c in self.received.items()},
                      released=released, gaps=gaps)
        self.log.write("update", **record)
        for r in released:
            t_r, stale_r = self.deferred.pop(r)
            self.reply(r, t_r, stale_r, True)


def run_server(args: argparse.Namespace, log: common.JsonLog) -> None:
    trainer = Trainer(build_model(args.model_size, args.seed),
                      Digits(0, args.world_size - args.shards, args.batch_size, args.seed))
    lo, hi = shard_bounds(trainer.n_params, args.shards)[args.rank]
    log_start(args, log, trainer.n_params, "server", shard=[lo, hi], lr=args.lr,
              lr_rule=args.lr_rule, lr_rule_default=args.lr_rule_default,
              workers=args.world_size - args.shards,
              eval_every=args.eval_every if args.shards == 1 else None)
    t0 = time.time()
    common.init_gloo(args)
    server = Server(args, log, trainer, lo, hi)
    log.write("ready", t=time.time(), init_s=time.time() - t0, bytes_recv=0)
    server.run()
    finish(args, [r for r in range(1, args.world_size) if r not in server.lost])
    accuracy = loss = None
    if args.shards == 1:
        accuracy, loss = trainer.evaluate(server.params)
    log.write("final", t=time.time(), accuracy=accuracy, loss=loss, iterations=server.version,
              applied=server.applied, discarded=server.discarded,
              lost={str(r): m for r, m in server.lost.items()},
              discarded_by_rank={str(r): c for r, c in server.discarded_by_rank.items()},
              bytes_sent=server.bytes_sent, bytes_recv=server.bytes_recv,
              params_sha256=params_digest(server.params))


def finish(args: argparse.Namespace, peers: list[int]) -> None:
    """The end barrier among the ranks left: every rank but 0 sends a token to rank 0
    and waits for its answer; rank 0 (`peers`: the ranks it expects, lost workers left
    out) answers once all tokens arrived. Like gloo's barrier, it keeps any rank from
    closing its connections while a peer may still be reading (see common.finish_gloo),
    without needing a dead rank. A worker lost at another shard only is given up here."""
    token = torch.zeros(1)
    if args.rank != 0:
        common.wait(dist.isend(token, dst=0, tag=FINISH_TAG), args.timeout,
                    "final barrier: send to rank 0")
        common.wait(dist.irecv(token, src=0, tag=FINISH_TAG), args.timeout,
                    "final barrier: answer from rank 0")
        return
    answered = []
    for r in peers:
        try:
            common.wait(dist.irecv(torch.zeros(1), src=r, tag=FINISH_TAG), args.timeout,
                        f"final barrier: token from rank {r}")
            answered.append(r)
        except common.PeerError:
            if r < args.shards or args.mode not in TOLERATES_LOST:
                raise
    sends = [dist.isend(token, dst=r, tag=FINISH_TAG) for r in answered]
    for r, work in zip(answered, sends, strict=True):
        common.wait(work, args.timeout, f"final barrier: answer to rank {r}")


# ----------------------------------------------------------------------------- worker


class ShardLink:
    """A worker's view of one server shard: its slice, version and whether it stopped."""

    def __init__(self, rank: int, lo: int, hi: int) -> None:
        self.rank, self.lo, self.hi = rank, lo, hi
        self.params = torch.empty(0)
        self.version = 0
        self.stopped = False
        self._posted: tuple[Any, torch.Tensor] | None = None

    def post_pull(self) -> None:
        buf = torch.empty(self.hi - self.lo + PULL_TRAILER)
        self._posted = (dist.irecv(buf, src=self.rank), buf)

    def push(self, grad: torch.Tensor, iteration: int) -> tuple[Any, torch.Tensor]:
        msg = torch.cat([grad[self.lo:self.hi],
                         torch.tensor([self.version, iteration], dtype=torch.float32)])
        return dist.isend(msg, dst=self.rank), msg

    def finish_pull(self, timeout: float) -> dict[str, Any]:
        assert self._posted is not None
        work, buf = self._posted
        self._posted = None
        common.wait(work, timeout, f"receive parameters from server rank {self.rank}")
        version, stale, hold, stop, accepted = buf[-PULL_TRAILER:].tolist()
        self.params = buf[:-PULL_TRAILER]
        self.version, self.stopped = int(version), stop > 0
        return {"staleness": int(stale), "hold": hold, "accepted": accepted > 0,
                "bytes": buf.numel() * BYTES_PER_PARAM}


def run_worker(args: argparse.Namespace, log: common.JsonLog) -> None:
    """Compute, push to every shard still running, pull from them; until all stopped.

    A shard that has answered with the stop flag gets no more traffic from this worker
    (its slice is final), so each server knows when every worker is done with it.
    """
    workers = args.world_size - args.shards
    index = args.rank - args.shards
    trainer = Trainer(build_model(args.model_size, args.seed),
                      Digits(index, workers, args.batch_size, args.seed),
                      slowdown=common.slowdown_factor(args, args.rank),
                      compute_floor_s=args.compute_ms / 1000)
    shards = [ShardLink(k, lo, hi)
              for k, (lo, hi) in enumerate(shard_bounds(trainer.n_params, args.shards))]
    log_start(args, log, trainer.n_params, "worker", worker_index=index,
              slowdown=trainer.slowdown, compute_ms=args.compute_ms)
    t0 = time.time()
    common.init_gloo(args)
    for shard in shards:
        shard.post_pull()
    got = [shard.finish_pull(args.timeout) for shard in shards]
    log.write("ready", t=time.time(), init_s=time.time() - t0,
              bytes_recv=sum(g["bytes"] for g in got))
    iteration = 0
    while not all(shard.stopped for shard in shards):
        active = [shard for shard in shards if not shard.stopped]
        versions = [shard.version for shard in shards]
        t_start = time.time()
        params = torch.cat([shard.params for shard in shards])
        grad, loss, compute_s, slow_s = trainer.gradient(params)
        for shard in active:
            shard.post_pull()
        t_push = time.time()
        sends = [(shard, *shard.push(grad, iteration)) for shard in active]
        for shard, work, _msg in sends:
            common.wait(work, args.timeout, f"send gradient to server rank {shard.rank}")
        t_pushed = time.time()
        got = [shard.finish_pull(args.timeout) for shard in active]
        t_end = time.time()
        log.write("iteration", iteration=iteration, t_start=t_start, t_end=t_end,
                  compute_s=compute_s, slowdown_s=slow_s, emulated_s=trainer.emulated_s,
                  t_push=t_push, comm_s=t_end - t_push,
                  wait_s=max(g["hold"] for g in got), push_s=t_pushed - t_push,
                  pull_s=t_end - t_pushed,
                  bytes_sent=sum(msg.numel() for _, _, msg in sends) * BYTES_PER_PARAM,
                  bytes_recv=sum(g["bytes"] for g in got),
                  model_version=min(versions), shard_versions=versions,
                  new_version=min(shard.version for shard in shards),
                  staleness=max(g["staleness"] for g in got),
                  accepted=all(g["accepted"] for g in got), loss=loss)
        iteration += 1
    finish(args, [])
    params = torch.cat([shard.params for shard in shards])
    accuracy, test_loss = trainer.evaluate(params)
    log.write("final", t=time.time(), accuracy=accuracy, loss=test_loss, iterations=iteration,
              params_sha256=params_digest(params))


def log_start(args: argparse.Namespace, log: common.JsonLog, n_params: int, role: str,
              **extra: Any) -> None:
    log.write("start", role=role, rank=args.rank, world_size=args.world_size,
              mode=args.mode, param_count=n_params,
              gradient_bytes=n_params * BYTES_PER_PARAM, t=time.time(),
              **common.host_info(args.iface), **extra, options=common.options(args))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = common.JsonLog(args.out, args.rank)
    body = run_server if args.role == "server" else run_worker
    return common.run_main(PROG, log, args.rank, lambda: body(args, log))


if __name__ == "__main__":
    sys.exit(main())
