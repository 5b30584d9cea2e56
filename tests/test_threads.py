"""CPU threads (common/cli.py): every script sets a short OpenMP spin wait before torch loads OpenMP,
keeps one the user set, and --threads sets torch's threads (0: the cores the load leaves free)."""
import ast
import os
import subprocess
import sys

import pytest
import torch

from common import cli
import train
from helpers import ROOT, error_of


@pytest.mark.parametrize("script", ["train.py", "eval.py", "sample.py"])
def test_scripts_import_the_spin_setting_before_anything_that_loads_torch(script):
    """libgomp reads GOMP_SPINCOUNT when torch loads it: common.cli is a script's first import outside
    the standard library."""
    tree = ast.parse(open(os.path.join(ROOT, script)).read())
    first = next(n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and
                 (n.module if isinstance(n, ast.ImportFrom) else n.names[0].name).split(".")[0]
                 not in sys.stdlib_module_names)
    assert isinstance(first, ast.ImportFrom) and first.module == "common" and first.names[0].name == "cli"


def test_the_spin_is_set_in_a_fresh_script_and_a_users_is_kept(monkeypatch):
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c",
                          "import os, common.cli; print(os.environ['GOMP_SPINCOUNT'])"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60).stdout.strip()
    assert out == "1000"
    for name, value in (("GOMP_SPINCOUNT", "5"), ("OMP_WAIT_POLICY", "active")):
        monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
        monkeypatch.setenv(name, value)
        cli.quiet_spin()
        assert os.environ.get("GOMP_SPINCOUNT") == (value if name == "GOMP_SPINCOUNT" else None)


def test_threads_flag_sets_torch_threads_and_refuses_a_count_out_of_range(monkeypatch):
    """0 takes the cores the load average leaves free, at least one; a negative count, or more than the CPUs
    this process may use (bounded before torch: 100000 segfaults), is one line."""
    assert [cli.free_cores(2, load) for load in (0.0, 0.4, 1.0, 1.7, 5.0)] == [2, 2, 1, 1, 1]
    before = torch.get_num_threads()
    try:
        cli.set_threads(1)
        assert torch.get_num_threads() == 1
        cores = cli.CORES[0]                                 # torch's own count, read before any change
        for load, want in ((0.0, cores), (float(cores), 1)):     # idle: every core; all busy: one
            monkeypatch.setattr(cli.os, "getloadavg", lambda: (load, 0.0, 0.0))
            cli.set_threads(0)
            assert torch.get_num_threads() == want
    finally:
        torch.set_num_threads(before)
    cores = cli.usable_cores()
    for n in (-1, cores + 1, 100000):
        assert error_of(train.main, ["--model", "ar", "--threads", str(n)]) == (
            f"error: --threads must be in [0, {cores}] (the CPUs this process may use; 0 = the cores other "
            f"jobs leave free), got {n}")
