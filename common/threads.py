"""CPU threads: how many torch uses (--threads, by default the cores other jobs leave free) and how they wait.

torch's intra-op threads come from OpenMP (libgomp in the CPU wheel). Between parallel regions an idle thread
spins for GOMP_SPINCOUNT iterations (300,000 by default) before it sleeps. On an idle machine that spinning is
what makes 2 threads faster than 1; on a machine where another job holds a core, the two threads spin while
waiting for each other's turn on the CPU, and a training run becomes slower with 2 threads than with 1
(docs/speed.md measures both). A short spin (SPIN iterations) keeps most of the idle-machine speed and nearly
all of the shared-machine speed, so the scripts set it when the user has not: `quiet_spin()` must run before
torch is imported (libgomp reads it when it loads), which is why the scripts import this module first. Even
so, a second thread that has to share a core with another job slows small models down (decoding 2.6x on 2
cores with one other job, docs/speed.md), so --threads 0 uses the cores the load average leaves free, at least
one.

Being the scripts' first import, it also answers a Ctrl-C while they import (torch takes 1-3 s), before
common/cli.run answers it: one line and exit code 130 (`quiet_start`).
"""
import os
import signal
import sys

SPIN = "1000"   # GOMP_SPINCOUNT: long enough to catch the next parallel region on an idle core, short on a
                # busy one
CORES = []      # torch's own thread count (one per physical core), read once, before any set_threads
                # changes it


def quiet_spin():
    """A short OpenMP spin wait, unless the user set one (GOMP_SPINCOUNT or OMP_WAIT_POLICY) themselves."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN


def free_cores(cores: int, load: float) -> int:
    """Threads for `cores` when `load` jobs already run (the 1-minute load average): the cores they leave, at
    least one: 2 cores idle -> 2; one other job -> 1."""
    return max(1, min(cores, round(cores - load)))


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. a SLURM or taskset share), else all."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def set_threads(n: int):
    """--threads N: torch's intra-op threads; 0 = the cores other jobs leave free (free_cores of torch's
    default, one per physical core). N below 0 or above the usable cores (more threads only wait for each
    other, and OpenMP crashes past some thousands) is a ValueError of one line, before torch sees it."""
    if not 0 <= n <= usable_cores():
        raise ValueError(f"--threads must be in [0, {usable_cores()}] (the CPUs this process may use; 0 = "
                         f"the cores other jobs leave free), got {n}")
    import torch
    CORES[:] = CORES or [torch.get_num_threads()]
    if n == 0:
        n = free_cores(CORES[0], os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0)
    torch.set_num_threads(n)


# ----------------------------------------------------------------------------- Ctrl-C while a script starts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ("train.py", "eval.py", "sample.py")      # each runs its main through common/cli.run


def interrupted_while_starting(signum, frame):
    """SIGINT before the script's main runs: one line, exit code 130. Nothing has been written yet, so the
    process ends at once (os._exit): a KeyboardInterrupt raised in the script's imports comes before
    common/cli.run's try (a traceback), and would unwind through a half-imported torch."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    script = os.path.basename(sys.modules["__main__"].__file__)
    sys.stdout.flush()
    print(f"\n{script}: interrupted (Ctrl-C) while starting; nothing was written", file=sys.stderr,
          flush=True)
    os._exit(130)


def quiet_start():
    """Ctrl-C answered by interrupted_while_starting while one of SCRIPTS, run as a script, imports, unless
    SIGINT is not Python's default (ignored, as in a background job); common/cli.run takes it back (started).
    A module importing this one (a test, a notebook) keeps its own Ctrl-C."""
    main = os.path.abspath(getattr(sys.modules.get("__main__"), "__file__", None) or "")
    if main in [os.path.join(ROOT, s) for s in SCRIPTS] and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, interrupted_while_starting)


def started():
    """The script's main runs (common/cli.run): Ctrl-C is a KeyboardInterrupt again, which run answers."""
    if signal.getsignal(signal.SIGINT) is interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)


quiet_spin()
quiet_start()
