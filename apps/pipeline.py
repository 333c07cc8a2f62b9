"""Pipeline-parallel training: the model cut into stages, micro-batches flowing through.

    python -m incastlab.apps.pipeline --rank S --world-size N --master ADDR:PORT --out DIR
        [--schedule gpipe|1f1b] [--micro-batches M] [--layers L] [--fwd-ms F] [--bwd-ms B]
        [--activation-bytes A] [--iterations I] [--model-size MPARAMS] ...

Rank s is pipeline stage s of S = N stages (rank 0 hosts the rendezvous). The model is
the digits MLP with L Linear layers (`model.mlp_stack`), built from the seed by every
rank and cut with `model.partition`: stage s keeps Linear layers partition(L, S)[s] and
their ReLUs. Every step each stage takes the same mini-batch (every rank reads the same
data: stage 0 needs the inputs, the last stage the labels) and splits it into M
micro-batches (`torch.tensor_split`, sizes differing by at most one).

Per micro-batch m, forward F(m): stage s > 0 receives the activation from s-1, runs its
layers, and sends its output to s+1 (the last stage computes the micro-batch's loss,
weighted by its share of the batch, so the sum over micro-batches is the batch's mean
loss). Backward B(m): stage s < S-1 receives the gradient of its output from s+1,
back-propagates, and sends the gradient of its input to s-1. After the last
micro-batch every stage applies SGD to its own layers with the accumulated gradient:
the step is exactly the unpartitioned model's full-batch step (up to float rounding).

Schedules (`schedule()`; the order of F and B on one stage):
- gpipe: F(0), F(1), ..., F(M-1), then B(0), B(1), ..., B(M-1).
- 1f1b (PipeDream-Flush, Megatron's non-interleaved schedule): w = min(S-1-s, M)
  warm-up forwards F(0..w-1); then M-w times F(w+i) followed by B(i); then the
  cool-down backwards B(M-w..M-1). At most S-s micro-batches are in flight on stage s
  (GPipe: M), which is what 1F1B is for: less activation memory, the same bubble.
Messages (`stage_ops()`): each F is [recv activation m from s-1], compute,
[send activation m to s+1]; each B is [recv gradient m from s+1], compute, [send
gradient m to s-1]. All receives of a step are posted at its start (so a transfer
never waits for the receiver to get there; gloo's send otherwise waits for the
receiver's ready message) and waited for in this order; sends are non-blocking and
all waited for before the optimizer step. No schedule deadlocks (tests simulate every
S = 2..8, M = 1..16).

Emulated compute: `--fwd-ms`/`--bwd-ms` make every F/B of one micro-batch take at least
that long (the real computation runs, then the stage sleeps the rest), so bubbles are
visible on a 2-core machine where S processes share the CPU. A straggler stage
(`--slowdown S:FACTOR`) takes FACTOR times as long for each F and B.
`--activation-bytes A` pads each activation and gradient message to at least A bytes
(the real one is micro-batch x width x 4 bytes), to put more on the wire.

Log (docs/run-directory.md): `start`, a `span` event per F and B (name F<m>/B<m>,
cat forward/backward, t, dur_s), an `iteration` event per step with busy_s (compute),
idle_s (the bubble and the waits: duration - busy), the loss (last stage only), and
`final` (the last stage evaluates the held-out set through the whole pipeline).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from . import common
from .model import BYTES_PER_PARAM, Digits, mlp_stack, param_count, params_digest, partition
from .model import stage_module as _stage_module

PROG = "incastlab.apps.pipeline"
SCHEDULES = ("gpipe", "1f1b")


# --------------------------------------------------------------------------- schedules

class Op(NamedTuple):
    """One step of a stage's schedule: kind 'F' or 'B' of micro-batch `mb`."""
    kind: str
    mb: int


class Msg(NamedTuple):
    """One message operation of a stage, in issue order: `what` is 'recv' or 'send',
    `payload` 'act' (forward activation) or 'grad' (its gradient), `peer` the other
    stage, `mb` the micro-batch."""
    what: str
    payload: str
    peer: int
    mb: int


def schedule(kind: str, stages: int, micro_batches: int, stage: int) -> list[Op]:
    """The F/B order of `stage` (0-based) in a pipeline of `stages` stages and
    `micro_batches` micro-batches (see the module docstring)."""
    if kind not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {kind!r}")
    if not 0 <= stage < stages or micro_batches < 1:
        raise ValueError(f"need 0 <= stage < stages and micro_batches >= 1, got stage "
                         f"{stage}, stages {stages}, micro_batches {micro_batches}")
    m = micro_batches
    if kind == "gpipe":
        return [Op("F", i) for i in range(m)] + [Op("B", i) for i in range(m)]
    warm = min(stages - 1 - stage, m)
    ops = [Op("F", i) for i in range(warm)]
    for i in range(m - warm):
        ops += [Op("F", warm + i), Op("B", i)]
    return ops + [Op("B", i) for i in range(m - warm, m)]


def stage_ops(kind: str, stages: int, micro_batches: int, stage: int
              ) -> Iterator[tuple[Op, list[Msg], list[Msg]]]:
    """For each F/B of `stage`, in order: (op, messages before it, messages after it):
    F: recv act from stage-1 / send act to stage+1; B: recv grad from stage+1 / send
    grad to stage-1 (none past either end of the pipeline)."""
    first, last = stage == 0, stage == stages - 1
    for op in schedule(kind, stages, micro_batches, stage):
        if op.kind == "F":
            before = [] if first else [Msg("recv", "act", stage - 1, op.mb)]
            after = [] if last else [Msg("send", "act", stage + 1, op.mb)]
        else:
            before = [] if last else [Msg("recv", "grad", stage + 1, op.mb)]
            after = [] if first else [Msg("send", "grad", stage - 1, op.mb)]
        yield op, before, after


def max_in_flight(ops: list[Op]) -> int:
    """Most micro-batches whose F has run and B has not (activations held)."""
    held = peak = 0
    for op in ops:
        held += 1 if op.kind == "F" else -1
        peak = max(peak, held)
    return peak


def simulate(kind: str, stages: int, micro_batches: int, fwd_s: float = 1.0,
             bwd_s: float = 1.0, comm_s: float = 0.0) -> dict[str, Any]:
    """Run every stage's schedule as an event simulation: a stage does its ops in order;
    an op that receives starts no earlier than the message's send time + `comm_s`;
    sends never block (they are non-blocking and receives are pre-posted, as in the
    app). Returns {"step_s", "busy_s" (per stage), "bubble" (1 - sum busy /
    (stages x step)), "spans" {stage: [(op, start, end)]}}; raises RuntimeError on a
    deadlock (no stage can proceed while some have ops left)."""
    plans = [list(stage_ops(kind, stages, micro_batches, s)) for s in range(stages)]
    pos = [0] * stages
    clock = [0.0] * stages
    sent: dict[tuple[str, int, int, int], float] = {}  # (payload, src, dst, mb) -> time
    spans: dict[int, list[tuple[Op, float, float]]] = {s: [] for s in range(stages)}
    left = sum(len(p) for p in plans)
    while left:
        progressed = False
        for s in range(stages):
            while pos[s] < len(plans[s]):
                op, before, after = plans[s][pos[s]]
                keys = [(m.payload, m.peer, s, m.mb) for m in before]
                if any(k not in sent for k in keys):
                    break  # blocked on a receive
                start = max([clock[s]] + [sent[k] + comm_s for k in keys])
                end = start + (fwd_s if op.kind == "F" else bwd_s)
                spans[s].append((op, start, end))
                clock[s] = end
                for m in after:
                    sent[(m.payload, s, m.peer, m.mb)] = end
                pos[s] += 1
                left -= 1
                progressed = True
        if left and not progressed:
            raise RuntimeError(f"{kind} deadlocks with {stages} stages, {micro_batches} "
                               f"micro-batches at positions {pos}")
    t0 = min(sp[0][1] for sp in spans.values())
    step = max(sp[-1][2] for sp in spans.values()) - t0
    busy = [sum(e - b for _, b, e in spans[s]) for s in range(stages)]
    return {"step_s": step, "busy_s": busy, "bubble": 1 - sum(busy) / (stages * step),
            "spans": spans}


# --------------------------------------------------------------------------- training

class Stage:
    """One stage's layers, its data and its message buffers."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.s, self.n = args.rank, args.world_size
        self.first, self.last = self.s == 0, self.s == self.n - 1
        model = mlp_stack(args.model_size, args.layers, args.seed)
        self.layers = partition(args.layers, self.n)[self.s]
        self.module = _stage_module(model, self.layers)
        self.full_params = param_count(model)
        self.n_params = param_count(self.module)
        linear = [m for m in model if isinstance(m, nn.Linear)]
        self.in_width = linear[self.layers.start].in_features
        self.out_width = linear[self.layers.stop - 1].out_features
        self.data = Digits(0, 1, args.batch_size, args.seed)
        self.pad = max(0, args.activation_bytes // BYTES_PER_PARAM)
        self.loss_fn = nn.CrossEntropyLoss(reduction="mean")
        # One local forward and backward on zeros before the first step, with the
        # input's gradient as in a real backward: torch's first such call took 1.6-1.9 s
        # here (measured), which would otherwise land in step 0 as a stage's compute and
        # hold every stage upstream. No message, no parameter change (gradients are
        # zeroed at every step's start).
        torch.set_num_threads(args.threads)
        warm = torch.zeros(1, self.in_width, requires_grad=True)
        out = self.module(warm)
        out.backward(torch.ones_like(out))
        self.module.zero_grad(set_to_none=False)

    def message(self, rows: int, width: int) -> torch.Tensor:
        """A message buffer for a rows x width tensor, padded to --activation-bytes."""
        return torch.zeros(max(rows * width, self.pad))


def _emulate(t0: float, target_s: float) -> None:
    """Sleep until `target_s` seconds after `t0` (perf_counter) if not there yet."""
    rest = target_s - (time.perf_counter() - t0)
    if rest > 0:
        time.sleep(rest)


def _post_receives(st: Stage, rows: list[int], m: int) -> tuple[dict, dict]:
    """Every receive of one step of `m` micro-batches (`rows` each) posted, in
    micro-batch order, an activation's before a gradient's: micro-batch -> (work,
    buffer) of the activations from the stage before (tag mb) and of the gradients from
    the stage after (tag m + mb)."""
    s = st.s
    acts: dict[int, tuple[Any, torch.Tensor]] = {}
    grads: dict[int, tuple[Any, torch.Tensor]] = {}
    for mb in range(m):
        if not st.first:
            buf = st.message(rows[mb], st.in_width)
            acts[mb] = (dist.irecv(buf, src=s - 1, tag=mb), buf)
        if not st.last:
            buf = st.message(rows[mb], st.out_width)
            grads[mb] = (dist.irecv(buf, src=s + 1, tag=m + mb), buf)
    return acts, grads


def run_step(st: Stage, args: argparse.Namespace, it: int, log: common.JsonLog,
             factor: float) -> dict[str, Any]:
    """One training step of stage `st`: the schedule's F and B, then SGD."""
    s, timeout, m = st.s, args.timeout, args.micro_batches
    x, y = st.data.next_batch()
    xs, ys = torch.tensor_split(x, m), torch.tensor_split(y, m)
    rows = [len(c) for c in xs]
    total = sum(rows)
    st.module.zero_grad(set_to_none=False)
    # post every receive of the step now (see the module docstring)
    acts, grads = _post_receives(st, rows, m)
    sends: list[tuple[Any, str]] = []
    held: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    busy = 0.0
    loss_sum = 0.0
    sent = recv = 0
    peak = 0
    for op, _before, _after in stage_ops(args.schedule, st.n, m, s):
        mb = op.mb
        if op.kind == "F":
            if st.first:
                inp = xs[mb]
            else:
                work, buf = acts.pop(mb)
                common.wait(work, timeout, f"step {it} F{mb}: activation from stage {s - 1}")
                recv += buf.numel() * BYTES_PER_PARAM
                inp = buf[:rows[mb] * st.in_width].view(rows[mb], st.in_width).clone()
                inp.requires_grad_(True)
            t0 = time.perf_counter()
            t_wall = time.time()
            out = st.module(inp)
            if st.last:
                out = st.loss_fn(out, ys[mb]) * (rows[mb] / total)
                loss_sum += float(out.item())
            _emulate(t0, factor * args.fwd_ms / 1000)
            held[mb] = (inp, out)
            peak = max(peak, len(held))
            dur = time.perf_counter() - t0
            if not st.last:
                msg = st.message(rows[mb], st.out_width)
                msg[:out.numel()] = out.detach().reshape(-1)
                sends.append((dist.isend(msg, dst=s + 1, tag=mb),
                              f"step {it} F{mb}: activation to stage {s + 1}"))
                sent += msg.numel() * BYTES_PER_PARAM
        else:
            inp, out = held.pop(mb)
            grad_out = None
            if not st.last:
                work, buf = grads.pop(mb)
                common.wait(work, timeout, f"step {it} B{mb}: gradient from stage {s + 1}")
                recv += buf.numel() * BYTES_PER_PARAM
                grad_out = buf[:out.numel()].view_as(out)
            t0 = time.perf_counter()
            t_wall = time.time()
            out.backward(grad_out)
            _emulate(t0, factor * args.bwd_ms / 1000)
            dur = time.perf_counter() - t0
            if not st.first:
                msg = st.message(rows[mb], st.in_width)
                msg[:inp.grad.numel()] = inp.grad.reshape(-1)
                sends.append((dist.isend(msg, dst=s - 1, tag=m + mb),
                              f"step {it} B{mb}: gradient to stage {s - 1}"))
                sent += msg.numel() * BYTES_PER_PARAM
        busy += dur
        log.write("span", name=f"{op.kind}{mb}", cat="forward" if op.kind == "F" else
                  "backward", t=t_wall, dur_s=dur, iteration=it, micro_batch=mb)
    for work, what in sends:
        common.wait(work, timeout, what)
    t0 = time.perf_counter()
    with torch.no_grad():
        for p in st.module.parameters():
            p -= args.lr * p.grad
    busy += time.perf_counter() - t0
    return {"busy_s": busy, "loss": loss_sum if st.last else None, "bytes_sent": sent,
            "bytes_recv": recv, "peak_in_flight": peak}


def evaluate(st: Stage, timeout: float) -> tuple[float | None, float | None]:
    """The held-out set through the whole pipeline (one message per stage boundary);
    (accuracy, loss) on the last stage, (None, None) elsewhere."""
    rows = len(st.data.x_test)
    with torch.no_grad():
        if st.first:
            inp = st.data.x_test
        else:
            buf = torch.zeros(rows * st.in_width)
            common.wait(dist.irecv(buf, src=st.s - 1, tag=0), timeout,
                        f"evaluation: activation from stage {st.s - 1}")
            inp = buf.view(rows, st.in_width)
        out = st.module(inp)
        if not st.last:
            common.wait(dist.isend(out.reshape(-1).contiguous(), dst=st.s + 1, tag=0),
                        timeout, f"evaluation: activation to stage {st.s + 1}")
            return None, None
        loss = float(st.loss_fn(out, st.data.y_test).item())
        acc = float((out.argmax(1) == st.data.y_test).float().mean().item())
        return acc, loss


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Times in seconds, sizes in bytes. Log schema: docs/run-directory.md.")
    common.add_dist_args(p)
    common.add_training_args(p)
    p.add_argument("--schedule", choices=SCHEDULES, default="gpipe",
                   help="gpipe (all forwards, then all backwards; default) or 1f1b")
    p.add_argument("--micro-batches", type=common.positive_int, default=4,
                   help="micro-batches per step, M (default: 4)")
    p.add_argument("--layers", type=common.positive_int, default=4,
                   help="Linear layers of the model, split over the stages (default: 4)")
    p.add_argument("--fwd-ms", type=float, default=0.0, metavar="MS",
                   help="least time of one micro-batch's forward on one stage (default: 0)")
    p.add_argument("--bwd-ms", type=float, default=0.0, metavar="MS",
                   help="least time of one micro-batch's backward on one stage (default: 0)")
    p.add_argument("--activation-bytes", type=common.non_negative_int, default=0,
                   metavar="BYTES", help="pad every activation/gradient message to at "
                   "least this many bytes (default: 0, the real size)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    common.check_rank(parser, args)
    common.check_model_size(parser, args)
    if args.world_size < 2:
        parser.error("argument --world-size: a pipeline needs at least 2 stages")
    if args.layers < args.world_size:
        parser.error(f"argument --layers: {args.layers} layers cannot fill "
                     f"{args.world_size} stages (one layer at least each)")
    if args.layers < 2:
        parser.error("argument --layers: the model has at least 2 Linear layers")
    if args.micro_batches > args.batch_size:
        parser.error(f"argument --micro-batches: {args.micro_batches} is more than "
                     f"--batch-size ({args.batch_size}): a micro-batch needs a sample")
    for name in ("fwd_ms", "bwd_ms"):
        v = getattr(args, name)
        if not 0 <= v <= 60_000:
            parser.error(f"argument --{name.replace('_', '-')}: must be within 0..60000 ms, "
                         f"got {v:g}")
    return args


def run(args: argparse.Namespace, log: common.JsonLog) -> None:
    st = Stage(args)
    factor = common.slowdown_factor(args, args.rank)
    ops = schedule(args.schedule, st.n, args.micro_batches, st.s)
    log.write("start", role="stage", rank=args.rank, world_size=st.n, mode=args.schedule,
              stage=st.s, stages=st.n, micro_batches=args.micro_batches,
              layers=list(st.layers), model_layers=args.layers, param_count=st.n_params,
              model_param_count=st.full_params,
              gradient_bytes=st.n_params * BYTES_PER_PARAM,
              activation_bytes=st.message(-(-args.batch_size // args.micro_batches),
                                          st.out_width if not st.last else st.in_width
                                          ).numel() * BYTES_PER_PARAM,
              fwd_ms=args.fwd_ms, bwd_ms=args.bwd_ms, max_in_flight=max_in_flight(ops),
              t=time.time(), **common.host_info(args.iface), slowdown=factor,
              options=common.options(args))
    t0 = time.time()
    common.init_gloo(args)
    log.write("ready", t=time.time(), init_s=time.time() - t0, bytes_recv=0)
    for it in range(args.iterations):
        t_start = time.time()
        r = run_step(st, args, it, log, factor)
        t_end = time.time()
        d = t_end - t_start
        log.write("iteration", iteration=it, t_start=t_start, t_end=t_end,
                  compute_s=r["busy_s"], slowdown_s=None, comm_s=d - r["busy_s"],
                  wait_s=None, busy_s=r["busy_s"], idle_s=d - r["busy_s"],
                  bytes_sent=r["bytes_sent"], bytes_recv=r["bytes_recv"],
                  peak_in_flight=r["peak_in_flight"], model_version=it, staleness=0,
                  loss=r["loss"])
    accuracy, loss = evaluate(st, args.timeout)
    common.finish_gloo(args.timeout)
    flat = nn.utils.parameters_to_vector(st.module.parameters()).detach()
    log.write("final", t=time.time(), accuracy=accuracy, loss=loss,
              iterations=args.iterations, params_sha256=params_digest(flat))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = common.JsonLog(args.out, args.rank)
    return common.run_main(PROG, log, args.rank, lambda: run(args, log))


if __name__ == "__main__":
    sys.exit(main())
