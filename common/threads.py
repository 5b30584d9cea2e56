"""CPU threads: how many torch uses (--threads) and how they wait for each other.

torch's intra-op threads come from OpenMP (libgomp in the CPU wheel). Between parallel regions an idle thread
spins for GOMP_SPINCOUNT iterations (300,000 by default) before it sleeps. On an idle machine that spinning is
what makes 2 threads faster than 1; on a machine where another job holds a core, the two threads spin while
waiting for each other's turn on the CPU, and a training run becomes slower with 2 threads than with 1
(docs/speed.md measures both). A short spin (SPIN iterations) keeps most of the idle-machine speed and nearly
all of the shared-machine speed, so the scripts set it when the user has not: `quiet_spin()` must run before
torch is imported (libgomp reads it when it loads), which is why the scripts import this module first.
"""
import os

SPIN = "1000"   # GOMP_SPINCOUNT: long enough to catch the next parallel region on an idle core, short on a busy one


def quiet_spin():
    """A short OpenMP spin wait, unless the user set one (GOMP_SPINCOUNT or OMP_WAIT_POLICY) themselves."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN


def set_threads(n: int):
    """--threads N: torch's intra-op threads (0 = torch's default, one per physical core). A negative N is a
    ValueError of one line."""
    if n < 0:
        raise ValueError(f"--threads must be >= 0 (0 = one per core), got {n}")
    if n:
        import torch
        torch.set_num_threads(n)


quiet_spin()
