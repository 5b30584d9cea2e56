"""`make compile-check` (not the suite: minutes of compiling): train.py --compile trains every method in
float32 and in bfloat16 autocast on this CPU, at awkward shapes, with the compiled losses equal to eager
ones over the first steps; every layout's FlexAttention BlockMask gives the dense mask's loss eagerly and
compiled (CPU FlexAttention has a forward only); sample.py and eval.py --compile give the eager replies.
Each case is one train.py (sample.py, eval.py) main() in this process, after torch._dynamo.reset() (a fresh
compile, as a new process's)."""
import json
import os
import subprocess
import sys

import pytest
import torch
from torch._dynamo.utils import counters

import bd3lm
import eval as eval_py
import mdlm
import sample
import setdiffusion as sd
import train
from data import arith
from helpers import MASK, random_rows, tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = [pytest.mark.compile,
              pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")]

# tests/test_gpu.py's shape: the one the GPU check trains. --max-iters 4: the trimmed length changes from step
# to step (the shipped task's rows end where their answer does), so the second step recompiles with a dynamic
# length and the later ones run that graph.
SHAPE = ["--batch-size", "16", "--n-layer", "2", "--n-embd", "64", "--n-head", "4"]
SMALL = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2"]
STEPS = ["--max-iters", "4", "--warmup", "2", "--save-every", "100000", "--eval-limit", "1",
         "--max-new-tokens", "4", "--seed", "3"]
CASES = {   # name: (train.py flags, dtype); every awkward shape once, each method in both dtypes
    "ar": (["--model", "ar", *SHAPE], "float32"),
    "mdlm": (["--model", "mdlm", *SHAPE], "float32"),
    "bd3lm": (["--model", "bd3lm", *SHAPE], "float32"),
    "setdiffusion": (["--model", "setdiffusion", *SHAPE], "float32"),
    "ar-odd": (["--model", "ar", *SMALL, "--batch-size", "7", "--seq-len", "131"], "bfloat16"),
    "mdlm-odd": (["--model", "mdlm", *SMALL, "--batch-size", "5", "--seq-len", "131", "--predict-padding"],
                 "bfloat16"),
    "bd3lm-S16": (["--model", "bd3lm", *SMALL, "--batch-size", "7", "--block-size", "16", "--seq-len", "133"],
                  "bfloat16"),
    "setdiffusion-smax4-infill": (["--model", "setdiffusion", *SMALL, "--batch-size", "9", "--smax", "4",
                                   "--infill", "0.5"], "bfloat16"),
    "setdiffusion-smax32-dit": (["--model", "setdiffusion", "--preset", "dit-lm1b", *SMALL,   # the DiT block
                                 "--batch-size", "6", "--smax", "32", "--seq-len", "129"], "float32"),
}
# compiled vs eager, per step: float32 sums in another order (1e-4); bfloat16 autocast rounds where the fused
# kernels of the compiled graph keep float32 (2 %)
TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2}


def losses(tmp_path, flags, dtype, compile: bool) -> list:
    torch._dynamo.reset()
    out = tmp_path / ("compiled" if compile else "eager")
    argv = [*flags, *STEPS, "--dtype", dtype, "--device", "cpu", "--out-dir", str(out)]
    return train.main(argv + ["--compile"] * compile)


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_training_equals_eager(name, tmp_path):
    flags, dtype = CASES[name]
    eager, compiled = (losses(tmp_path, flags, dtype, c) for c in (False, True))
    assert len(compiled) == 4
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=TOLERANCE[dtype], atol=0)


LAYOUTS = {"mdlm": (mdlm, mdlm.MDLMConfig(MASK)), "bd3lm": (bd3lm, bd3lm.BD3LMConfig(MASK, block_size=3)),
           "setdiffusion": (sd, sd.SetDiffusionConfig(MASK, smax=4))}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_compiled_flex_loss_equals_dense(name):
    """No-grad loss with flex on, eager and compiled == with flex off (SDPA, dense mask), same noise; rows
    with prompts and right padding of different lengths. AR passes no mask (causal SDPA): no BlockMask."""
    mod, cfg = LAYOUTS[name]
    torch._dynamo.reset()
    model = tiny_model(2)
    x0, prompt_mask, pad_mask = random_rows(23, [4, 7, 2], [23, 15, 19], seed=3)
    out = {}
    for flex, fn in ((False, model), (True, model), ("compiled", torch.compile(model))):
        model.flex = bool(flex)
        with torch.no_grad():
            out[flex] = mod.loss(fn, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(4))[0]
    torch.testing.assert_close(out[True], out[False])
    torch.testing.assert_close(out["compiled"], out[False])


# ----------------------------------------------------------------------------- compiled decoding

DECODE_TRAIN = ["--max-iters", "150", "--warmup", "10", "--batch-size", "16", *SMALL, "--save-every",
                "100000", "--eval-limit", "1", "--max-new-tokens", "4", "--device", "cpu",
                "--dtype", "float32"]
METHOD_FLAGS = {"ar": [], "mdlm": ["--predict-padding"], "bd3lm": [], "setdiffusion": []}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{method: checkpoint}: each method trained eagerly for 150 steps (seconds), so that its greedy choices
    are confident (an untrained model's near-ties would turn on float noise)."""
    root = tmp_path_factory.mktemp("trained")
    for m, extra in METHOD_FLAGS.items():
        train.main(["--model", m, *extra, *DECODE_TRAIN, "--out-dir", str(root / m)])
    prompts = root / "prompts.txt"
    prompts.write_text("".join(ex["prompt"].strip() + "\n" for ex in arith.load("test")[:12]))
    return root


@pytest.mark.parametrize("name", list(METHOD_FLAGS))
def test_compiled_decoding_equals_eager(name, trained, capsys):
    """sample.py --compile (static-shape steps, one compiled graph) prints the eager run's replies: the same
    tokens, decoded at the same steps (--show-order), for 12 held-out prompts in one batch, at tau 0.7 (sets
    of tokens). Exact ties between two logits would be broken the same way only up to float noise: none occur
    on this trained model's greedy choices."""
    out = {}
    for flags in ([], ["--compile"]):
        torch._dynamo.reset()
        counters.clear()
        tau = [] if name == "ar" else ["--threshold", "0.7"]
        sample.main(["--ckpt", str(trained / name), "--prompt-file", str(trained / "prompts.txt"),
                     "--max-new-tokens", "40", "--show-order", *tau, *flags])
        out[bool(flags)] = capsys.readouterr().out
        assert bool(counters["stats"]["unique_graphs"]) == bool(flags)     # compiled only with --compile
    assert out[True] == out[False] and out[False].count("\n") > 12


@pytest.mark.parametrize("name", list(METHOD_FLAGS))
def test_compiled_evaluation_equals_eager(name, trained, tmp_path):
    """eval.py --compile writes the eager run's replies, verdicts and accuracy (--replies, --json: 12
    held-out problems in one batch, tau 0.7), and no tokens/s: its decodes' time holds the compile."""
    out = {}
    for flags in ([], ["--compile"]):
        torch._dynamo.reset()
        tau = [] if name == "ar" else ["--threshold", "0.7"]
        counters.clear()
        replies, metrics = tmp_path / f"r{len(flags)}.jsonl", tmp_path / f"m{len(flags)}.json"
        ckpt = str(trained / name)
        eval_py.main(["--ckpt", ckpt, "--limit", "12", "--batch-size", "12", "--max-new-tokens", "40", *tau,
                      "--replies", str(replies), "--json", str(metrics), *flags])
        m = json.loads(metrics.read_text())
        out[bool(flags)] = replies.read_text(), m["accuracy"], m["tokens_per_step"]
        assert ("tokens_per_s" in m) != bool(flags)     # compiled: its decodes' time holds the compile's
        assert bool(counters["stats"]["unique_graphs"]) == bool(flags)     # compiled only with --compile
    assert out[True] == out[False] and out[False][0].count("\n") == 12


def test_bench_gpu_trains_compiled_as_train_py():
    """make gpu-check's training rows (bench_gpu --train-compile) on this CPU, tiny: the compiled step runs,
    the row says so, and it feeds the eager step's tokens."""
    from bench import bench_gpu
    tiny = ["--device", "cpu", "--tiny", "--parts", "train", "--train-len", "32", "--train-prompt", "8",
            "--train-answer", "12", "--train-batch", "2", "--train-steps", "1", "--methods", "setdiffusion"]
    rows = {c: bench_gpu.main(tiny + ["--train-compile"] * c)["train"] for c in (False, True)}
    assert [r["compiled"] for r in rows[False] + rows[True]] == [False, True]
    assert rows[True][0]["fed_tokens"] == rows[False][0]["fed_tokens"] == 2 * 32


@pytest.mark.parametrize("script", ["train.py", "sample.py", "eval.py"])
def test_a_compile_that_cannot_build_is_one_line(script, trained, tmp_path):
    """--compile where torch.compile cannot build its kernels (here: no working C++ compiler) stops in one
    line that says to run without --compile, not inductor's traceback (nor, from eval.py, which turns a
    RuntimeError into a line, its many lines)."""
    argv = {"train.py": ["--model", "ar", *SMALL, *STEPS, "--out-dir", str(tmp_path / "ck")],
            "sample.py": ["--ckpt", str(trained / "ar"), "--max-new-tokens", "4"],
            "eval.py": ["--ckpt", str(trained / "ar"), "--limit", "1", "--max-new-tokens", "4"]}[script]
    env = {**os.environ, "CXX": "/bin/false", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, script, *argv, "--compile"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith("error: --compile: torch.compile failed (")
