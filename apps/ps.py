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
import sys

from . import common
from .ps_common import (FINISH_TAG, GLOO_WAIT_S, LR_RULES, PULL_TRAILER, PUSH_TRAILER,
                        TOLERATES_LOST, finish, log_start, lr_rates, shard_bounds)
from .ps_server import Server, run_server
from .ps_worker import ShardLink, run_worker

__all__ = ["DEFAULT_LR_RULE", "FINISH_TAG", "GLOO_WAIT_S", "LR_RULES", "MODES", "PROG",
           "PULL_TRAILER", "PUSH_TRAILER", "TOLERATES_LOST", "Server", "ShardLink",
           "build_parser", "finish", "log_start", "lr_rates", "main", "parse_args",
           "run_server", "run_worker", "shard_bounds"]

PROG = "incastlab.apps.ps"
MODES = ("sync", "async", "ssp", "backup")
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = common.JsonLog(args.out, args.rank)
    body = run_server if args.role == "server" else run_worker
    return common.run_main(PROG, log, args.rank, lambda: body(args, log))


if __name__ == "__main__":
    sys.exit(main())
