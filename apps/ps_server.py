"""The parameter server of apps/ps.py: one shard's event loop over gradient arrivals
in the four modes (sync, async, ssp, backup), its lost workers, and its run.
"""
from __future__ import annotations

import argparse
import queue
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from . import common
from .model import BYTES_PER_PARAM, Digits, Trainer, build_model, params_digest
from .ps_common import (GLOO_WAIT_S, KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S,
                        KEEPALIVE_PROBES, PUSH_TRAILER, TOLERATES_LOST, finish, log_start,
                        lr_rates, shard_bounds)

__all__ = ["Server", "run_server"]


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
            f"{what}: peer lost (dead or unreachable): {common.first_line(exc)}")))

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
    keepalive = None
    if args.mode in TOLERATES_LOST:  # a lost worker is given up, not waited for
        keepalive = {"idle_s": KEEPALIVE_IDLE_S, "interval_s": KEEPALIVE_INTERVAL_S,
                     "probes": KEEPALIVE_PROBES}
        keepalive["sockets"] = common.keep_alive(KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S,
                                                 KEEPALIVE_PROBES)
    server = Server(args, log, trainer, lo, hi)
    log.write("ready", t=time.time(), init_s=time.time() - t0, bytes_recv=0,
              keepalive=keepalive)
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
