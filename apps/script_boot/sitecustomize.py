"""Start-up of a rank of the script job (Python imports this module at start-up when
its folder is on PYTHONPATH; the script job's launch plan puts it there).

It acts only in a process torchrun started for the job (TORCHELASTIC_RUN_ID and RANK
set, INCASTLAB_SCRIPT_RUN = "1") and only once per process tree (a DataLoader worker
that re-imports it does nothing); anywhere else it does nothing at all. Then:

1. the rank dies with torchrun: torch's elastic agent starts each rank in a session of
   its own, out of reach of the runner's killpg of torchrun's group, so the rank asks
   the kernel for SIGKILL when its parent ends (prctl PR_SET_PDEATHSIG) and leaves at
   once if torchrun is already gone;
2. with INCASTLAB_OBSERVE_OUT set (workload.observe, the default), the observer is
   installed (apps/script_observer.py);
3. the sitecustomize this one shadows, if any (Debian ships one), still runs.
"""
import os
import sys

MARK = "INCASTLAB_SCRIPT_PID"  # set in the first process that acts; its children skip
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to ask
        return
    if os.getppid() == 1:  # torchrun ended before the request was in place
        os._exit(128 + int(signal.SIGKILL))


def _act() -> None:
    os.environ[MARK] = str(os.getpid())
    _die_with_parent()
    if not os.environ.get("INCASTLAB_OBSERVE_OUT"):
        return
    had_level = "TORCH_CPP_LOG_LEVEL" in os.environ
    from incastlab.apps import script_observer  # sets the apps' C++ log level...

    if not had_level:  # ...which is not the script's: torch logs as it would
        os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
    script_observer.install_from_env()


def _chain() -> None:
    """Run the next ``sitecustomize`` on sys.path (the one this module shadows)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("INCASTLAB_SCRIPT_RUN") == "1" and "TORCHELASTIC_RUN_ID" in os.environ \
        and "RANK" in os.environ and MARK not in os.environ:
    _act()
_chain()
