"""Observe an unmodified torch.distributed script: every collective, every DDP bucket,
every optimizer step, into the run directory's JSON-lines log of its rank.

Installed before the script runs, by ``apps/script_boot/sitecustomize.py`` (which the
script job puts on the ranks' PYTHONPATH), so the script runs exactly as under plain
torchrun. It changes nothing the script sends; it wraps:

- the ``torch.distributed`` functions (in ``torch.distributed`` and in
  ``torch.distributed.distributed_c10d``, whose own checks compare against them): each
  call logs a ``collective`` event (op, call, bytes, group_size, peer, t_start, t_end,
  step, async_op, seq). Bytes follow NCCL-tests' convention: the whole buffer M
  (all-gather: the gathered output, reduce-scatter: the input to scatter, gather and
  scatter: group size × the tensor); ``op`` is the canonical name (isend: send). A call
  made inside another wrapped call (torch's own nesting) is not logged twice; object
  collectives (``all_gather_object``, ...) are logged as the tensor calls they make;
- ``Work.wait``: an asynchronous call is timed to its completion — its future's done
  callback where gloo gives one (collectives), the return of its ``wait()`` where it
  does not (gloo's send and recv); every wait's blocking time counts as exposed;
- DDP's gradient buckets, through its public comm-hook API: at the first forward, a
  model with no hook of its own gets the all-reduce hook DDP's default performs (divide
  by the group size, all-reduce, the same bytes), timed from the bucket's readiness to
  its all-reduce's completion (op ``all_reduce``, call ``ddp_bucket``). A hook the script
  registers itself is kept and timed the same way; its bytes are the bucket's (what a
  compressing hook really sends is not seen). A built-in C++ hook
  (``_register_builtin_comm_hook``) cannot be timed: a ``notice`` event says so;
- torch.optim's global step hooks: the first optimizer that steps is the primary one,
  and each of its steps ends an ``iteration`` (apps/script_steps.py); other optimizers'
  steps do not (a GAN's two optimizers make one iteration);
- ``init_process_group``: a ``nccl`` backend on a host without GPUs stops the rank at
  once with a message naming ``workload.map_nccl_to_gloo``, or runs on gloo with it.

It writes ``start`` (role "script", mode "script", rank, world_size, iface) when
installed, ``error`` (the exception and the last lines of its traceback) when the script
raises, and ``end`` at exit. Imports only the standard library, torch and
incastlab.apps (the apps' rule).
"""
from __future__ import annotations

import atexit
import functools
import inspect
import itertools
import os
import sys
import threading
import time
import traceback
from typing import Any

from incastlab.apps import common, script_log, script_steps

ENV_OUT = "INCASTLAB_OBSERVE_OUT"      # the workers/ directory (unset: not observed)
ENV_MAP_NCCL = "INCASTLAB_MAP_NCCL"    # "1": init_process_group's nccl becomes gloo
TRACEBACK_LINES = 12                   # of the traceback tail an `error` event carries
NCCL_MESSAGE = ("init_process_group(backend={backend!r}) needs NVIDIA GPUs and these hosts "
                "have none; set workload.map_nccl_to_gloo = true to run the script on gloo "
                "(a script that picks its device with torch.cuda.is_available() then runs "
                "unmodified)")


def _nbytes(t) -> int:
    return int(t.numel() * t.element_size()) if t is not None else 0


def _sum(ts) -> int:
    return sum(_nbytes(t) for t in ts or ())


# call -> (op, bytes of the bound arguments and the group size, the peer's argument)
OPS = {
    "all_reduce": ("all_reduce", lambda a, n: _nbytes(a["tensor"]), None),
    "broadcast": ("broadcast", lambda a, n: _nbytes(a["tensor"]), "src"),
    "reduce": ("reduce", lambda a, n: _nbytes(a["tensor"]), "dst"),
    "all_gather": ("all_gather", lambda a, n: _sum(a["tensor_list"]), None),
    "all_gather_into_tensor": ("all_gather", lambda a, n: _nbytes(a["output_tensor"]), None),
    "all_gather_single": ("all_gather", lambda a, n: _nbytes(a["output_tensor"]), None),
    "reduce_scatter": ("reduce_scatter", lambda a, n: _sum(a["input_list"]), None),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a, n: _nbytes(a["input"]), None),
    "reduce_scatter_single": ("reduce_scatter", lambda a, n: _nbytes(a["input"]), None),
    "gather": ("gather", lambda a, n: n * _nbytes(a["tensor"]), "dst"),
    "scatter": ("scatter", lambda a, n: n * _nbytes(a["tensor"]), "src"),
    "all_to_all": ("all_to_all", lambda a, n: _sum(a["input_tensor_list"]), None),
    "all_to_all_single": ("all_to_all", lambda a, n: _nbytes(a["input"]), None),
    "barrier": ("barrier", lambda a, n: 0, None),
    "monitored_barrier": ("barrier", lambda a, n: 0, None),
    "send": ("send", lambda a, n: _nbytes(a["tensor"]), "dst"),
    "recv": ("recv", lambda a, n: _nbytes(a["tensor"]), "src"),
    "isend": ("send", lambda a, n: _nbytes(a["tensor"]), "dst"),
    "irecv": ("recv", lambda a, n: _nbytes(a["tensor"]), "src"),
}
ASYNC_CALLS = ("isend", "irecv")


class _Depth(threading.local):
    depth = 0


_tls = _Depth()


class _Nested:
    """Inside: wrapped calls are torch's own (not logged again)."""

    def __enter__(self):
        _tls.depth += 1

    def __exit__(self, *exc):
        _tls.depth -= 1


class Observer:
    """The per-rank state: the log, the step in progress and its collectives."""

    def __init__(self, out_dir: str, rank: int, world: int, iface: str | None) -> None:
        self.log = script_log.RecordLog(out_dir, rank)
        self.rank, self.world = rank, world
        self.lock = threading.Lock()
        self.seq = itertools.count()
        self.step = 0
        self.primary: int | None = None
        self.t0 = time.time()
        self.t_iter: float | None = None     # start of the iteration in progress
        self.pending: dict[int, tuple[Any, dict]] = {}   # id(work) -> (work, record)
        self.acc: dict[int, dict] = {}       # step -> its intervals, bytes, count
        self.logged = 0
        self._forwarded = False
        self.log.write("start", role="script", rank=rank, world_size=world, mode="script",
                       t=self.t0, script=sys.argv[0] if sys.argv else None,
                       argv=list(sys.argv[1:]), local_rank=_env_int("LOCAL_RANK"),
                       **common.host_info(iface))

    # -- collectives ----------------------------------------------------------------
    def begin(self, op: str, call: str, nbytes: int | None, group_size: int | None,
              peer: int | None, async_op: bool) -> dict:
        return {"seq": next(self.seq), "op": op, "call": call, "bytes": nbytes,
                "group_size": group_size, "peer": peer, "async_op": async_op,
                "step": self.step, "t_start": time.time(), "t_end": None}

    def finish(self, rec: dict, t_end: float | None = None, blocking: bool = False) -> None:
        """The call completed at `t_end` (now): log it, count it in its step."""
        with self.lock:
            if rec["t_end"] is not None:  # a wait and a done callback: the first wins
                return
            rec["t_end"] = t_end if t_end is not None else time.time()
            acc = self._acc(rec["step"])
            if acc is not None:
                acc["comm"].append((rec["t_start"], rec["t_end"]))
                if blocking:
                    acc["blocking"].append((rec["t_start"], rec["t_end"]))
                if rec["call"] == "ddp_bucket":
                    acc["buckets"].append((rec["t_start"], rec["t_end"]))
                acc["bytes"] += rec["bytes"] or 0
                acc["count"] += 1
            self.logged += 1
        self.log.collective(rec)

    def returned(self, rec: dict, result) -> None:
        """A wrapped call returned `result`: done if synchronous, else await its Work."""
        if result is None or not hasattr(result, "wait") or not rec["async_op"]:
            self.finish(rec, blocking=True)
            return
        with self.lock:
            self.pending[id(result)] = (result, rec)
        try:
            future = result.get_future()
        except RuntimeError:  # gloo's send/recv: timed at their wait()
            return
        # the callback names the Work by its key only: a Work in its own future's
        # callback is a cycle through C++ that no collector sees, so the Work (and the
        # gloo process group it holds) outlived destroy_process_group into the
        # interpreter's exit, where a rank sometimes aborted (SIGABRT)
        key = id(result)
        future.add_done_callback(lambda _f: self._completed(key))

    def _completed(self, key: int) -> None:
        with self.lock:
            _, rec = self.pending.pop(key, (None, None))
        if rec is not None and rec["t_end"] is None:
            self.finish(rec)

    def waited(self, work, t0: float, t1: float) -> None:
        """The script blocked in ``work.wait()`` from t0 to t1."""
        with self.lock:
            work_rec = self.pending.pop(id(work), None)
            acc = self._acc(self.step)
            if acc is not None:
                acc["blocking"].append((t0, t1))
        if work_rec is not None:
            self.finish(work_rec[1], t1)

    def _acc(self, step: int) -> dict | None:
        if step < self.step:  # completed after its iteration was logged
            return None
        return self.acc.setdefault(step, {"comm": [], "blocking": [], "buckets": [],
                                          "bytes": 0, "count": 0})

    # -- iterations -----------------------------------------------------------------
    def ready(self) -> None:
        """init_process_group returned: the first iteration starts here at the latest."""
        if self.t_iter is None:
            self.t_iter = time.time()

    def forward(self) -> None:
        """A DDP forward begins: the first one starts the first iteration."""
        if self.step == 0 and not self._forwarded:
            self._forwarded = True
            self.t_iter = time.time()

    def pre_step(self, optimizer) -> None:
        if self.primary is None:
            self.primary = id(optimizer)

    def post_step(self, optimizer) -> None:
        if id(optimizer) != self.primary:
            return
        t_end = time.time()
        with self.lock:
            k = self.step
            acc = self.acc.pop(k, None) or {"comm": [], "blocking": [], "buckets": [],
                                            "bytes": 0, "count": 0}
            self.step += 1
            # works of this step never waited for and now complete: their wait is lost
            for key, (work, rec) in list(self.pending.items()):
                if rec["t_end"] is None and rec["step"] <= k and _completed(work):
                    self.pending.pop(key)
        t_start = self.t_iter if self.t_iter is not None else self.t0
        ev = script_steps.iteration_event(k, t_start, t_end, acc["comm"], acc["blocking"],
                                          acc["buckets"], acc["bytes"], acc["count"])
        self.log.write("iteration", rank=self.rank, **ev)
        self.t_iter = t_end

    def end(self) -> None:
        with self.lock:
            unfinished = [rec for _, rec in self.pending.values() if rec["t_end"] is None]
            self.pending.clear()  # release the Works before the interpreter's exit
        for rec in unfinished:  # never waited for: logged without an end
            self.log.write("collective", **rec, unfinished=True)
        self.log.write("end", t=time.time(), steps=self.step, collectives=self.logged,
                       unfinished=len(unfinished))

    def error(self, exc_type, exc, tb) -> None:
        """The script raised: an `error` event with the traceback's tail, and one stderr
        line "script: error: rank R: ..." (what the runner's verdict quotes)."""
        lines = "".join(traceback.format_exception(exc_type, exc, tb)).rstrip().splitlines()
        tail = lines[-TRACEBACK_LINES:]
        where = [ln.strip() for ln in tail if ln.lstrip().startswith("File ")]
        message = f"{exc_type.__name__}: {common.first_line(exc)}"
        if where:
            message += f" (at {where[-1]})"
        self.log.write("error", t=time.time(), message=message, traceback_tail=tail)
        sys.stderr.write(f"script: error: rank {self.rank}: {message}\n")


def _stamped(obs: Observer, rec: dict, value):
    obs.finish(rec)
    return value


def _completed(work) -> bool:
    try:
        return bool(work.is_completed())
    except RuntimeError:
        return False


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v is not None and v.lstrip("-").isdigit() else None


# --- the wrappers ---------------------------------------------------------------------

def _group_size(dist, group) -> int | None:
    try:
        return int(dist.get_world_size(group))
    except (RuntimeError, ValueError):
        return None


def _binder(orig):
    """A function (args, kwargs) -> {parameter: value, defaults included} for calls of
    `orig`: inspect's bind costs more than a small collective, so for a plain signature
    the names and defaults are read once. A call that does not fit may bind to nonsense:
    `orig` then raises on it as it would unobserved, before anything is logged."""
    sig = inspect.signature(orig)
    params = list(sig.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        def bind_slowly(args, kwargs):
            a = sig.bind(*args, **kwargs)
            a.apply_defaults()
            return a.arguments
        return bind_slowly
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
    defaults = {p.name: p.default for p in params if p.default is not p.empty}

    def bind(args, kwargs):
        if len(args) > len(positional):
            raise TypeError(f"{orig.__name__}: too many positional arguments")
        arguments = dict(defaults)
        arguments.update(zip(positional, args, strict=False))  # length checked above
        arguments.update(kwargs)
        return arguments
    return bind


def _wrap(obs: Observer, dist, name: str, orig):
    op, size_of, peer_key = OPS[name]
    bind = _binder(orig)

    @functools.wraps(orig)
    def observed(*args, **kwargs):
        if _tls.depth:
            return orig(*args, **kwargs)
        try:
            arguments = bind(args, kwargs)
            n = 2 if op in ("send", "recv") else _group_size(dist, arguments.get("group"))
            nbytes = size_of(arguments, n or 1)
        except Exception:  # noqa: BLE001 - a call we cannot read still runs as written
            return orig(*args, **kwargs)
        rec = obs.begin(op, name, nbytes, n, arguments.get(peer_key) if peer_key else None,
                        name in ASYNC_CALLS or bool(arguments.get("async_op")))
        with _Nested():
            result = orig(*args, **kwargs)
        obs.returned(rec, result)
        return result

    observed.__incastlab_observed__ = True
    return observed


def _patch_collectives(obs: Observer) -> dict:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    originals = {}
    for name in OPS:
        orig = getattr(c10d, name, None)
        if orig is None or getattr(orig, "__incastlab_observed__", False):
            continue
        originals[name] = orig
        wrapped = _wrap(obs, dist, name, orig)
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is orig:
            setattr(dist, name, wrapped)
    work = c10d.Work
    orig_wait = work.wait

    def wait(self, *args, **kwargs):
        if _tls.depth:
            return orig_wait(self, *args, **kwargs)
        t0 = time.time()
        try:
            return orig_wait(self, *args, **kwargs)
        finally:
            obs.waited(self, t0, time.time())

    work.wait = wait
    return originals


def _patch_init(obs: Observer, map_nccl: bool) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    orig = c10d.init_process_group
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def init_process_group(*args, **kwargs):
        a = sig.bind(*args, **kwargs)
        backend = a.arguments.get("backend")
        if backend is not None and "nccl" in str(backend).lower() \
                and not torch.cuda.is_available():
            if not map_nccl:
                raise RuntimeError(NCCL_MESSAGE.format(backend=str(backend)))
            a.arguments["backend"] = "gloo"
            a.arguments.pop("device_id", None)
            obs.log.write("notice", t=time.time(), message=f"backend {str(backend)!r} "
                          "mapped to 'gloo' (workload.map_nccl_to_gloo)")
        result = orig(*a.args, **a.kwargs)
        obs.ready()
        return result

    c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group


def _patch_ddp(obs: Observer, all_reduce) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    orig_register, orig_builtin = DDP.register_comm_hook, DDP._register_builtin_comm_hook
    orig_forward = DDP.forward

    def timed(hook, group):
        def observed_bucket_hook(state, bucket):
            buf = bucket.buffer()
            n = _group_size(dist, group)
            rec = obs.begin("all_reduce", "ddp_bucket", _nbytes(buf), n, None, True)
            rec["bucket"] = bucket.index()
            with _Nested():
                return hook(state, bucket, rec)
        return observed_bucket_hook

    def default_hook(group, bucket, rec):
        # what DDP does without a hook (torch's allreduce_hook): divide, sum; the end is
        # stamped in the future DDP waits on, so it is in before the backward returns
        buf = bucket.buffer()
        buf.div_(_group_size(dist, group) or 1)
        fut = all_reduce(buf, group=group, async_op=True).get_future()
        return fut.then(lambda f: _stamped(obs, rec, f.value()[0]))

    def scripts_hook(hook):
        def run(state, bucket, rec):
            return hook(state, bucket).then(lambda f: _stamped(obs, rec, f.value()))
        return run

    def register_comm_hook(self, state, hook):
        if getattr(self, "_incastlab_hook", None) is None:
            self._incastlab_hook = "script"
            return orig_register(self, state, timed(scripts_hook(hook), self.process_group))
        return orig_register(self, state, hook)  # DDP refuses a second hook itself

    def register_builtin_comm_hook(self, comm_hook_type):
        self._incastlab_hook = "builtin"
        obs.log.write("notice", t=time.time(), message="a built-in DDP comm hook "
                      f"({comm_hook_type}) runs in C++: its buckets are not observed")
        return orig_builtin(self, comm_hook_type)

    def forward(self, *args, **kwargs):
        if getattr(self, "_incastlab_hook", None) is None:
            self._incastlab_hook = "observer"
            orig_register(self, self.process_group,
                          timed(lambda _state, bucket, rec: default_hook(self.process_group,
                                                                        bucket, rec),
                                self.process_group))
        obs.forward()
        return orig_forward(self, *args, **kwargs)

    DDP.register_comm_hook = register_comm_hook
    DDP._register_builtin_comm_hook = register_builtin_comm_hook
    DDP.forward = forward


def install(out_dir: str, rank: int, world: int, iface: str | None = None,
            map_nccl: bool = False) -> Observer:
    """Install the observer in this process (once); returns it."""
    import torch.optim.optimizer as optim

    global _OBSERVER
    if _OBSERVER is not None:
        return _OBSERVER
    obs = Observer(out_dir, rank, world, iface)
    _OBSERVER = obs
    originals = _patch_collectives(obs)
    _patch_init(obs, map_nccl)
    _patch_ddp(obs, originals["all_reduce"])
    optim.register_optimizer_step_pre_hook(lambda opt, *_: obs.pre_step(opt))
    optim.register_optimizer_step_post_hook(lambda opt, *_: obs.post_step(opt))
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        obs.error(exc_type, exc, tb)
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    atexit.register(obs.end)
    return obs


_OBSERVER: Observer | None = None


def install_from_env() -> Observer | None:
    """Install from torchrun's environment (RANK, WORLD_SIZE) and ours (ENV_OUT,
    ENV_MAP_NCCL, GLOO_SOCKET_IFNAME); None when ENV_OUT is unset."""
    out = os.environ.get(ENV_OUT)
    if not out:
        return None
    return install(out, _env_int("RANK") or 0, _env_int("WORLD_SIZE") or 1,
                   os.environ.get("GLOO_SOCKET_IFNAME"),
                   os.environ.get(ENV_MAP_NCCL) == "1")
