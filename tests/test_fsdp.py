"""train.py under torchrun with 2 CPU processes over gloo, on a text corpus whose token cache rank 0 builds
while rank 1 waits: DDP trains and rank 0 writes the checkpoint; --fsdp (FSDP2) is DDP's training (weights,
EMA, AdamW state), one safetensors file per checkpoint, an exact resume through the sharded state."""
import os
import subprocess
import sys

import pytest
import torch

from common import checkpoint
import train
from helpers import ROOT, YORK, error_of

TINY = ["--model", "setdiffusion", "--n-layer", "2", "--n-embd", "32", "--n-head", "2", "--batch-size", "2",
        "--eval-limit", "2", "--max-new-tokens", "8", "--warmup", "1", "--seq-len", "32"]


def torchrun(d, name, *flags):
    """train.py under torchrun, 2 CPU processes (their own free port), its own token cache; the Popen."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
           *TINY, "--data", f"text:{d / 'york.txt'}", "--data-dir", str(d / f"cache-{name}"), "--out-dir",
           str(d / name), *flags]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def finished(run) -> str:
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("fsdp")
    (d / "york.txt").write_text("".join(YORK))
    ddp, fsdp = torchrun(d, "ddp", "--max-iters", "3"), torchrun(d, "fsdp2", "--max-iters", "2", "--fsdp")
    out = finished(ddp)                                                          # side by side
    assert "FSDP2" not in out and "validation NLL" in out and "sharded over 2 processes" in finished(fsdp)
    resumed = finished(torchrun(d, "fsdp2", "--max-iters", "3", "--fsdp", "--resume"))
    assert "resuming from step 2" in resumed and "sharded over 2 processes" in resumed
    return d


def saved(out_dir):
    """(model.safetensors weights, train_state) of the checkpoint in out_dir."""
    from safetensors.torch import load_file
    return load_file(os.path.join(out_dir, "model.safetensors")), checkpoint.load_train_state(str(out_dir))


def close(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)


def test_fsdp_trains_as_ddp_does_and_resumes_exactly(runs):
    """FSDP for 2 steps, then --resume for the 3rd (the AdamW moments re-sharded from the one file), == DDP
    for 3 steps: EMA weights, raw weights and every optimizer state tensor; the files are the plain format (no
    DTensor), read as any other checkpoint."""
    ddp_ema, ddp_state = saved(runs / "ddp")
    fsdp_ema, fsdp_state = saved(runs / "fsdp2")
    assert ddp_state["step"] == fsdp_state["step"] == 3
    close(ddp_ema, fsdp_ema)
    close(ddp_state["model"], fsdp_state["model"])
    for (i, a), (j, b) in zip(sorted(ddp_state["optimizer"]["state"].items()),
                              sorted(fsdp_state["optimizer"]["state"].items())):
        assert i == j
        close(a, b)
    assert all(type(v) is torch.Tensor for v in fsdp_ema.values())
    assert checkpoint.load(str(runs / "fsdp2"))[0].cfg.n_layer == 2


@pytest.mark.parametrize("flags, message", [
    ("--max-iters 1", "--fsdp shards the model over several processes: start them with torchrun"),
    ("--eval-every 5", "--fsdp evaluates once, at the end, from the saved checkpoint: drop --eval-every")])
def test_fsdp_bad_input_is_one_line(tmp_path, flags, message):
    assert message in error_of(train.main, [*TINY, "--fsdp", *flags.split(), "--out-dir",
                                            str(tmp_path / "a")])
