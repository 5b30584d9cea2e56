"""train.py under torchrun with 2 CPU processes over gloo: DDP trains and rank 0 writes the checkpoint, and
--fsdp (PyTorch's FSDP2, fully_shard) is the same training as DDP's
(weights, EMA and AdamW state after the same steps), one safetensors file per checkpoint, and an exact resume
through the sharded optimizer state. python -m pytest -q tests/test_fsdp.py"""
import os
import subprocess
import sys

import pytest
import torch

from common import checkpoint
import train
from helpers import error_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "data", "examples", "dates.jsonl")      # 500 lines: each process encodes it fast
TINY = ["--model", "setdiffusion", "--data", f"jsonl:{DATA}", "--n-layer", "2", "--n-embd", "32",
        "--n-head", "2", "--batch-size", "2", "--eval-limit", "2", "--max-new-tokens", "8", "--warmup", "1"]


def torchrun(out_dir, *flags):
    """Start train.py under torchrun with 2 CPU processes (its own free port); returns the Popen."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
           *TINY, "--out-dir", str(out_dir), *flags]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def finished(run) -> str:
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    return out


def saved(out_dir):
    """(model.safetensors weights, train_state) of the checkpoint in out_dir."""
    from safetensors.torch import load_file
    return load_file(os.path.join(out_dir, "model.safetensors")), checkpoint.load_train_state(str(out_dir))


def close(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("fsdp")
    ddp, fsdp = torchrun(d / "ddp", "--max-iters", "3"), torchrun(d / "fsdp2", "--max-iters", "2", "--fsdp")
    assert "FSDP2" not in finished(ddp) and "sharded over 2 processes" in finished(fsdp)        # side by side
    resumed = finished(torchrun(d / "fsdp3", "--max-iters", "3", "--fsdp", "--resume", "--out-dir",
                                str(d / "fsdp2")))
    assert "resuming from step 2" in resumed and "sharded over 2 processes" in resumed
    return d


def test_fsdp_trains_as_ddp_does_and_resumes_exactly(runs):
    """FSDP for 2 steps, then --resume for the 3rd (the AdamW moments re-sharded from the one file), equals
    DDP for 3 steps: the EMA weights, the raw weights and every optimizer state tensor; the files are the
    plain format (no DTensor), so eval.py and sample.py read them as any other checkpoint."""
    ddp_ema, ddp_state = saved(runs / "ddp")
    fsdp_ema, fsdp_state = saved(runs / "fsdp2")            # the resumed run wrote into the same folder
    assert ddp_state["step"] == fsdp_state["step"] == 3
    close(ddp_ema, fsdp_ema)
    close(ddp_state["model"], fsdp_state["model"])
    for (i, a), (j, b) in zip(sorted(ddp_state["optimizer"]["state"].items()),
                              sorted(fsdp_state["optimizer"]["state"].items())):
        assert i == j
        close(a, b)
    assert all(type(v) is torch.Tensor for v in fsdp_ema.values())
    model, *_ = checkpoint.load(str(runs / "fsdp2"))
    assert model.cfg.n_layer == 2


def test_fsdp_bad_input_is_one_line(tmp_path):
    assert "--fsdp shards the model over several processes: start them with torchrun" in error_of(
        train.main, [*TINY, "--fsdp", "--max-iters", "1", "--out-dir", str(tmp_path / "a")])
    assert "--fsdp evaluates once, at the end, from the saved checkpoint: drop --eval-every" in error_of(
        train.main, [*TINY, "--fsdp", "--eval-every", "5", "--out-dir", str(tmp_path / "b")])
