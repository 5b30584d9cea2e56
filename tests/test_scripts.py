"""The scripts on tiny models: --keep-every snapshots, argparse's usage lines, training progress off and on a
terminal, DDP's --grad-accum, what eval.py hands the samplers, and the import graph."""
import ast
import contextlib
import copy
import functools
import io
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import ar
from common import checkpoint
import eval as evaluate
import train
from helpers import ROOT, TINY, killed_in_step, usage_error

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task


def run_train(tmp_path, *extra):
    return train.main(["--out-dir", str(tmp_path / "ckpt"), *TINY, *extra])


def test_keep_every_keeps_the_eval_weights_of_each_step_and_changes_nothing(tmp_path, monkeypatch):
    """--keep-every 2 over 4 steps: OUT-step2 and OUT-step4 hold the (EMA) weights a save at that step writes,
    without the optimizer state, and the losses are those of the run without it."""
    from safetensors.torch import load_file
    args = ["--model", "setdiffusion", "--max-iters", "4", "--ema", "0.9"]
    plain = run_train(tmp_path / "a", *args)
    assert run_train(tmp_path / "b", *args, "--keep-every", "2") == plain
    kept = {k: tmp_path / "b" / f"ckpt-step{k}" for k in (2, 4)}
    assert all(checkpoint.step_of(str(d)) == k and not (d / "train_state.pt").exists()
               for k, d in kept.items())
    killed_in_step(monkeypatch, 3)                      # the same run, saved at step 2, stopped in step 3
    with pytest.raises(KeyboardInterrupt):
        run_train(tmp_path / "c", *args, "--save-every", "2")
    for d, same in ((kept[2], tmp_path / "c" / "ckpt"), (kept[4], tmp_path / "b" / "ckpt")):
        a, b = load_file(d / "model.safetensors"), load_file(same / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("main, argv, said", [
    (train.main, "--model gpt", "invalid choice"), (evaluate.main, "--ckpt x --task poem", "invalid choice"),
    (train.main, "--model ar --data csv:x", "invalid choice: 'csv:x' (choose arith, gsm8k, cnndm, jsonl:PATH "
                                           "or hf:ORG/NAME)"),
    (train.main, "--model ar --data text:", "a corpus: owt, lm1b, shakespeare or text:PATH")])
def test_an_unknown_choice_is_argparses_usage_line(capsys, main, argv, said):
    assert said in usage_error(main, argv.split(), capsys)


def test_progress_is_a_plain_line_per_log_interval_off_a_terminal_and_tqdms_bar_on_one(tmp_path, monkeypatch,
                                                                                        capsys):
    """10 steps logged every 4, captured: 3 plain lines (steps 4, 8, 10), each with its steps' mean loss, no
    carriage return; on a terminal tqdm's bar (steps done of all, rate, time left, the last interval's mean
    loss) and no plain line."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(train, "LOG_EVERY", 4)
    losses = run_train(tmp_path / "a", "--model", "ar", "--max-iters", "10")
    out, err = capsys.readouterr()
    assert "\r" not in out + err
    assert [line.split(" | ")[:2] for line in err.splitlines() if line.startswith("step ")] == [
        [f"step {done}/10", f"loss {sum(losses[a:done]) / (done - a):.4f}"]
        for a, done in [(0, 4), (4, 8), (8, 10)]]
    monkeypatch.setattr(sys, "stderr", Terminal())
    losses = run_train(tmp_path / "b", "--model", "ar", "--max-iters", "10")
    last = sys.stderr.getvalue().split("\r")[-1]
    bar = r"10/10 \[\d\d:\d\d<00:00, +[\d.]+step/s, loss="
    assert re.search(bar + f"{sum(losses[8:]) / 2:.4f}", last), last
    assert "step 4/10" not in sys.stderr.getvalue()


def test_grad_accum_under_ddp_reduces_the_gradients_once_a_step():
    """--grad-accum 3 under DDP all-reduces once a step, in the last micro-batch's backward (no_sync on the
    others), and the gradients are those of the same three micro-batches without DDP."""
    import torch.distributed as dist
    from model import ModelConfig, Transformer
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        alone = Transformer(ModelConfig(vocab_size=16, n_layer=1, n_head=2, n_kv_head=2, n_embd=16))
        ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(alone))
        reductions = []

        def count(state, bucket):                     # one process: the reduced gradient is its own
            reductions.append(bucket.index())
            done = torch.futures.Future()
            done.set_result(bucket.buffer())
            return done
        ddp.register_comm_hook(None, count)
        x0 = torch.randint(0, 15, (8, 12), generator=torch.Generator().manual_seed(0))
        data = {"x0": x0, "prompt_mask": torch.zeros_like(x0, dtype=torch.bool),
                "pad_mask": torch.zeros_like(x0, dtype=torch.bool)}
        args = SimpleNamespace(seed=1, batch_size=2, grad_accum=3, predict_padding=False)
        run = dict(args=args, train=data, rank=0, world=1, tok=None, task=None, device="cpu", method=ar,
                   cfg=ar.ARConfig(15))
        for step in range(2):
            for model, no_sync in ((ddp, ddp.no_sync), (alone, contextlib.nullcontext)):
                model.zero_grad(set_to_none=True)
                train.step_loss(model, no_sync, run, step, contextlib.nullcontext())
            assert len(reductions) == step + 1                      # one bucket: one reduction a step
            for p, q in zip(ddp.module.parameters(), alone.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
    finally:
        dist.destroy_process_group()


def test_eval_passes_the_context_and_official_to_the_samplers(random_ckpts, monkeypatch, capsys):
    """Set Diffusion gets the model's seq_len (its FHT commit order is the tail of the L-long schedule); with
    --official, MDLM (with seq_len: its canvas is L wide) and BD3-LM the official block count."""
    seen = {}
    for m in ("setdiffusion", "mdlm", "bd3lm"):
        def spy(*a, _real=checkpoint.METHODS[m].generate, _m=m, **k):
            seen[_m] = a[3]                                             # the Settings
            return _real(*a, **k)
        monkeypatch.setattr(checkpoint.METHODS[m], "generate", spy)
        evaluate.main(["--ckpt", str(random_ckpts / m), "--limit", "1", "--official", "--commit-order", "fht",
                       "--max-new-tokens", "8"])
    sd, md, bd = seen["setdiffusion"], seen["mdlm"], seen["bd3lm"]
    assert sd.paper.seq_len == 128 and sd.setdiffusion_commit_order == "fht"
    assert md.paper.official and md.paper.seq_len == 128 and bd.paper.official
    assert "official" in capsys.readouterr().out                    # the row names the setting


# ----------------------------------------------------------------------------- the import graph
# the layers, bottom up: a module imports only from its own layer or the ones below it
LAYERS = [("model", "ar", "mdlm", "bd3lm", "setdiffusion", "sampling"), ("data",), ("common",),
          ("paper", "bench", "cluster"), ("train", "sample", "eval")]


@functools.cache
def local_imports(path: str, top: bool = False) -> frozenset:
    """The repo modules a file imports (import x, from x import y) anywhere in it, or at its top level."""
    names, tree = set(), ast.parse(open(path).read())
    for node in (tree.body if top else ast.walk(tree)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return frozenset(n for n in names if os.path.exists(module_path(n)))


def module_path(name: str) -> str:
    path = os.path.join(ROOT, *name.split("."))
    return path + ".py" if os.path.exists(path + ".py") else os.path.join(path, "__init__.py")


def closure(name: str, top: bool = False) -> set:
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo += local_imports(module_path(n), top)
    return seen


# What a default training run loads besides the root's card files and data/, from sys.modules after a 2-step
# run (docs/reading.md gives the same command): the rest of common/ is imported where a flag asks for it.
LOADS = """
import os, runpy, sys
sys.argv = "train.py --model setdiffusion --max-iters 2 --eval-limit 2 --out-dir {out}".split()
runpy.run_path("train.py", run_name="__main__")
card = ("model", "ar", "mdlm", "bd3lm", "setdiffusion", "sampling", "train", "sample", "eval")
here = [os.path.relpath(f) for f in (getattr(m, "__file__", None) or "" for m in list(sys.modules.values()))
        if f.startswith(os.getcwd() + os.sep)]
rest = sorted(f for f in here if not f.startswith("data" + os.sep) and f[:-3] not in card)
print(len(rest), sum(len(open(f).readlines()) for f in rest), *rest)
"""


def test_a_default_training_run_loads_at_most_five_support_files(tmp_path):
    """`train.py --model setdiffusion` loads at most 5 files (1,600 lines) outside the card files and data/:
    common/'s training stories; --init-from, FSDP, .env, weight reading and the released checkpoints stay
    out of a default run."""
    out = subprocess.run([sys.executable, "-c", LOADS.format(out=tmp_path / "run")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300).stdout.split("\n")[-2].split()
    files, lines, names = int(out[0]), int(out[1]), out[2:]
    assert files <= 5 and lines <= 1600 and all(n.startswith("common" + os.sep) for n in names), out


def test_import_graph_no_script_imports_a_script_no_circle_and_no_import_up_the_layers():
    """No module imports a script; sample.py and eval.py import nothing of paper/ when they load; test_all.py
    needs only the method files; the library modules form no import circle; every import, at the top of a file
    or inside a function, goes down the layers (LAYERS)."""
    scripts = {"train", "sample", "eval"}
    library = ["model", "ar", "mdlm", "bd3lm", "setdiffusion", "sampling", "common.cli", "common.checkpoint",
               "common.runs", "common.metrics", "common.eval_args", "common.init_from", "common.distributed",
               "common.throughput", "common.unconditional", "common.order_plot", "common.credentials",
               "common.pretrained", "data", "data.files", "data.prompts", "paper.generation", "paper.infill",
               "paper.zeroshot", "paper.results", "paper.harness", "paper.speed"]
    for name in [*scripts, *library]:
        assert not (local_imports(module_path(name)) & scripts), name
    assert not {n for n in closure("sample", top=True) | closure("eval", top=True) if n.startswith("paper")}
    assert closure("test_all") <= {"test_all", "model", "ar", "mdlm", "bd3lm", "setdiffusion", "sampling"}
    assert "common.pretrained" not in closure("common.checkpoint", top=True)    # only to load a released one
    for name in library:
        assert all(name not in local_imports(module_path(d))
                   for d in closure(name) - {name} if not d.startswith(name + ".")), name
    layer = lambda module: next(i for i, names in enumerate(LAYERS) if module.split(".")[0] in names)  # noqa
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout
    upward = []
    for f in files.split():
        name = f[:-3].replace("/", ".").removesuffix(".__init__")
        if name.split(".")[0] in {n for names in LAYERS for n in names}:
            upward += [f"{name} -> {d}" for d in local_imports(f"{ROOT}/{f}") if layer(d) > layer(name)]
    assert not upward, upward
