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
"""
import os

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


quiet_spin()
