"""The command-line scripts on tiny models: training resumes exactly, a NaN stops cleanly, checkpoints survive
a kill, eval/sample read checkpoints, bad input gets one clear line, DDP runs. python -m pytest -q
tests/test_scripts.py
"""
import contextlib
import copy
import io
import json
import math
import os
import re
import subprocess
import sys
import types
from types import SimpleNamespace

import pytest
import torch

import ar
from common import checkpoint, methods, saving
import eval as evaluate
import paper.results
import sample
import setdiffusion as sd
import train

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task


TINY = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--batch-size", "4", "--eval-limit", "4",
        "--max-new-tokens", "8", "--warmup", "2"]


def run_train(tmp_path, *extra):
    return train.main(["--out-dir", str(tmp_path / "ckpt"), *TINY, *extra])


def killed_after(n_calls, loss, exc):
    """A stand-in method whose loss raises exc (or returns NaN) from its n-th call on."""
    calls = []

    def patched(*a, **k):
        calls.append(1)
        out = loss(*a, **k)
        if len(calls) >= n_calls:
            if exc is None:
                return out[0] * math.nan, out[1]
            raise exc
        return out
    return SimpleNamespace(loss=patched)


def test_resume_repeats_the_uninterrupted_run(tmp_path, monkeypatch):
    """Killed after the step-3 checkpoint, then --resume: the loss curve of the uninterrupted run, exactly."""
    args = ["--model", "setdiffusion", "--max-iters", "6", "--save-every", "3", "--ema", "0.9"]
    full = run_train(tmp_path / "a", *args)
    monkeypatch.setattr(sd, "loss", killed_after(5, sd.loss, KeyboardInterrupt).loss)
    with pytest.raises(KeyboardInterrupt):
        run_train(tmp_path / "b", *args)
    monkeypatch.undo()
    assert checkpoint.load_train_state(str(tmp_path / "b" / "ckpt"))["step"] == 3
    assert run_train(tmp_path / "b", *args, "--resume") == full[3:]


def test_keep_every_keeps_the_eval_weights_of_each_step_and_changes_nothing(tmp_path, monkeypatch):
    """--keep-every 2 over 4 steps: OUT-step2 and OUT-step4 hold the (EMA) weights a save at that step writes,
    without the optimizer state, and the losses are those of the run without it."""
    from safetensors.torch import load_file
    args = ["--model", "setdiffusion", "--max-iters", "4", "--ema", "0.9"]
    plain = run_train(tmp_path / "a", *args)
    assert run_train(tmp_path / "b", *args, "--keep-every", "2") == plain
    out = tmp_path / "b" / "ckpt"
    kept = {k: tmp_path / "b" / f"ckpt-step{k}" for k in (2, 4)}
    assert all(saving.step_of(str(d)) == k and not (d / "train_state.pt").exists()
               for k, d in kept.items())
    monkeypatch.setattr(sd, "loss", killed_after(3, sd.loss, KeyboardInterrupt).loss)
    with pytest.raises(KeyboardInterrupt):                # the same run, saved at step 2, stopped in step 3
        run_train(tmp_path / "c", *args, "--save-every", "2")
    for d, same in ((kept[2], tmp_path / "c" / "ckpt"), (kept[4], out)):
        a, b = load_file(d / "model.safetensors"), load_file(same / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_resume_of_a_checkpoint_older_than_a_method_setting(tmp_path):
    """A Set Diffusion checkpoint written before infill_len and infill_added existed (its config.json lacks
    them) resumes with the flags that wrote it: a missing setting is its default."""
    run_train(tmp_path, "--model", "setdiffusion", "--max-iters", "2")
    path = tmp_path / "ckpt" / "config.json"
    config = json.loads(path.read_text())
    for name in ("infill_len", "infill_added"):
        del config["method_config"][name]
    path.write_text(json.dumps(config))
    assert len(run_train(tmp_path, "--model", "setdiffusion", "--max-iters", "3", "--resume")) == 1
    assert saving.step_of(str(path.parent)) == 3


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(ar, "loss", killed_after(5, ar.loss, None).loss)
    with pytest.raises(SystemExit) as e:
        run_train(tmp_path, "--model", "ar", "--max-iters", "8", "--save-every", "2")
    assert e.value.code == 1
    assert checkpoint.load_train_state(str(tmp_path / "ckpt"))["step"] == 4


def test_checkpoint_survives_a_kill_between_renames(tmp_path):
    run_train(tmp_path, "--model", "ar", "--max-iters", "2")
    os.replace(tmp_path / "ckpt", tmp_path / "ckpt.old")            # as if killed between the two renames
    model, method, cfg, config = checkpoint.load(str(tmp_path / "ckpt"))
    assert config["method"] == "ar" and config["step"] == 2


def test_eval_and_sample_from_a_checkpoint(tmp_path, capsys):
    run_train(tmp_path, "--model", "bd3lm", "--max-iters", "2")
    ckpt = str(tmp_path / "ckpt")
    for task in ("arith", "likelihood", "throughput"):
        out = tmp_path / f"{task}.json"
        flags = {"arith": ["--max-new-tokens", "8"], "likelihood": [],            # each task's own flags only
                 "throughput": ["--warmup", "1", "--max-new-tokens", "8"]}[task]
        evaluate.main(["--ckpt", ckpt, "--task", task, "--limit", "6", "--batch-size", "3", *flags,
                       "--json", str(out)])
        m = json.loads(out.read_text())
        assert {"task", "model", "n", "threshold"} <= set(m) and m["model"] == "bd3lm"
        if task != "likelihood":
            assert {"tokens_per_step", "tokens_per_s", "nfe"} <= set(m)
    assert "accuracy" in json.loads((tmp_path / "arith.json").read_text())
    assert math.isfinite(json.loads((tmp_path / "likelihood.json").read_text())["perplexity"])
    paper.results.main([str(tmp_path / "p.md"), str(tmp_path / "arith.json"),
                        str(tmp_path / "throughput.json"),
                  "--pareto"])
    assert "| ckpt | inf |" in (tmp_path / "p.md").read_text()
    sample.main(["--ckpt", ckpt, "--max-new-tokens", "8", "--show-order", "--threshold", "0.5"])
    out = capsys.readouterr().out
    assert "[0]" in out and "forward passes" in out


def test_bad_input_gets_one_clear_line(tmp_path, capsys):
    for argv, main in [(["--model", "gpt"], train.main), (["--model", "ar", "--data", "mnist"], train.main),
                       (["--ckpt", "x", "--task", "poetry"], evaluate.main)]:
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        evaluate.main(["--ckpt", str(tmp_path / "nowhere")])
    assert str(e.value.code).startswith("error: ") and "nowhere" in str(e.value.code)
    for bad, message in [(["--model", "ar", "--resume"], "no checkpoint at"),
                         (["--model", "setdiffusion", "--smax", "1"], "smax must be"),
                         (["--model", "setdiffusion", "--window", "9"], "must be in [1, smax=8]")]:
        with pytest.raises(SystemExit) as e:
            run_train(tmp_path, *bad)
        assert str(e.value.code).startswith("error: ") and message in str(e.value.code)
    run_train(tmp_path, "--model", "ar", "--max-iters", "1")
    with pytest.raises(SystemExit) as e:
        sample.main(["--ckpt", str(tmp_path / "ckpt"), "--prompt", "x" * 200])
    assert "more than the model's context" in str(e.value.code)


def test_more_bad_input_gets_one_clear_line(tmp_path, monkeypatch):
    """A threshold outside (0, 1], a window outside [1, smax], GSM8K offline, a damaged model.safetensors."""
    run_train(tmp_path, "--model", "setdiffusion", "--max-iters", "1")
    ckpt = str(tmp_path / "ckpt")
    broken = types.ModuleType("datasets")
    broken.load_dataset = lambda *a, **k: (_ for _ in ()).throw(ConnectionError("offline"))
    monkeypatch.setitem(sys.modules, "datasets", broken)
    for main, argv, message in [(sample.main, ["--threshold", "-1"], "threshold must be in (0, 1]"),
                                (evaluate.main, ["--threshold", "1.5"], "threshold must be in (0, 1]"),
                                (evaluate.main, ["--window", "99"], "window must be in [1, smax=8]"),
                                (sample.main, ["--window", "9"], "window must be in [1, smax=8]"),
                                (evaluate.main, ["--task", "gsm8k"], "could not load openai/gsm8k")]:
        with pytest.raises(SystemExit) as e:
            main(["--ckpt", ckpt, *argv])
        assert str(e.value.code).startswith("error: ") and message in str(e.value.code), e.value.code
    weights = tmp_path / "ckpt" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])                     # truncated
    with pytest.raises(SystemExit) as e:
        evaluate.main(["--ckpt", ckpt])
    assert "model.safetensors is damaged" in str(e.value.code) and "\n" not in str(e.value.code)


def test_progress_off_a_terminal_is_one_plain_line_per_log_interval(tmp_path, monkeypatch, capsys):
    """Captured (not a terminal), 10 steps logged every 4 write 3 plain lines, after steps 4, 8 and 10 (the
    end), each with the mean loss of its steps, and no carriage return anywhere (no tqdm bar)."""
    monkeypatch.setattr(train, "LOG_EVERY", 4)
    losses = run_train(tmp_path, "--model", "ar", "--max-iters", "10", "--eval-limit", "1")
    out, err = capsys.readouterr()
    assert "\r" not in out + err
    lines = [line for line in err.splitlines() if line.startswith("step ")]
    assert [line.split(" | ")[:2] for line in lines] == [
        [f"step {done}/10", f"loss {sum(losses[a:done]) / (done - a):.4f}"]
        for a, done in [(0, 4), (4, 8), (8, 10)]]


def test_progress_on_a_terminal_is_tqdms_bar(tmp_path, monkeypatch):
    """On a terminal, tqdm's own bar: steps done of all, the rate and the time left, the last interval's mean
    loss beside it, and no plain lines."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(train, "LOG_EVERY", 4)
    monkeypatch.setattr(sys, "stderr", Terminal())
    losses = run_train(tmp_path, "--model", "ar", "--max-iters", "10", "--eval-limit", "1")
    last = sys.stderr.getvalue().split("\r")[-1]
    assert re.search(r"10/10 \[\d\d:\d\d<00:00, +[\d.]+step/s, loss=" + f"{sum(losses[8:]) / 2:.4f}",
                     last), last
    assert "step 4/10" not in sys.stderr.getvalue()


def test_grad_accum_under_ddp_reduces_the_gradients_once_a_step():
    """Under DDP, --grad-accum 3 all-reduces the gradients once a step, in the last micro-batch's backward
    (no_sync on the others), and the gradients are those of the same three micro-batches without DDP."""
    import torch
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
        run = dict(args=SimpleNamespace(seed=1, batch_size=2, grad_accum=3, predict_padding=False),
                   train=data, rank=0, world=1, tok=None, task=None, device="cpu", method=ar,
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


def test_eval_passes_the_context_and_official_to_the_samplers(tmp_path, monkeypatch, capsys):
    """eval.py gives Set Diffusion the model's seq_len (its FHT commit order is the tail of the L-long
    schedule) and, with --official, MDLM (with seq_len: its canvas is L wide) and BD3-LM the official
    block count."""
    seen = {}
    for m in ("setdiffusion", "mdlm", "bd3lm"):
        run_train(tmp_path / m, "--model", m, "--max-iters", "1")

        def spy(*a, _real=methods.method(m).generate, _m=m, **k):
            seen[_m] = a[3]                                             # the Settings
            return _real(*a, **k)
        monkeypatch.setattr(methods.method(m), "generate", spy)
        evaluate.main(["--ckpt", str(tmp_path / m / "ckpt"), "--limit", "1", "--official",
                       "--commit-order", "fht"])
    assert seen["setdiffusion"].seq_len == 128 and seen["setdiffusion"].commit_order == "fht"
    assert seen["mdlm"].official and seen["mdlm"].seq_len == 128
    assert seen["bd3lm"].official
    assert "official" in capsys.readouterr().out                    # the row names the setting


# ----------------------------------------------------------------------------- the import graph

def local_imports(path: str, top: bool = False) -> set:
    """The repo modules a file imports at its top level or anywhere inside it (ast: import x, from x import
    y); top: at its top level only (what importing the file runs)."""
    import ast
    names = set()
    tree = ast.parse(open(path).read())
    for node in (tree.body if top else ast.walk(tree)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in names if os.path.exists(module_path(n))}


def module_path(name: str) -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, *name.split("."))
    return path + ".py" if os.path.exists(path + ".py") else os.path.join(path, "__init__.py")


def closure(name: str, top: bool = False) -> set:
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo += local_imports(module_path(n), top)
    return seen


def test_import_graph_no_script_imports_a_script_and_sample_needs_no_paper():
    """No module imports a script (train, sample, eval); sample.py and eval.py import nothing of paper/ when
    they load (eval.py imports a paper task's module when --task names it); test_all.py needs only the method
    files; the library modules form no import circle."""
    scripts = {"train", "sample", "eval"}
    library = ["model", "ar", "mdlm", "bd3lm", "setdiffusion", "sampling", "common.replies", "common.metrics",
               "common.cli", "common.runtime", "common.checkpoint", "common.pretrained", "data",
               "paper.generation", "paper.infill", "paper.zeroshot", "paper.results", "paper.harness",
               "paper.speed", "common.credentials", "common.eval_args", "common.train_args", "common.threads",
               "data.files", "data.prompts", "common.weights"]
    for name in [*scripts, *library]:
        assert not (local_imports(module_path(name)) & scripts), name
    assert not {n for n in closure("sample", top=True) | closure("eval", top=True) if n.startswith("paper")}
    assert closure("test_all") <= {"test_all", "model", "ar", "mdlm", "bd3lm", "setdiffusion", "sampling"}
    assert "common.pretrained" not in closure("common.checkpoint", top=True)    # only to load a released one
    for name in library:
        deps = closure(name) - {name}
        assert all(name not in local_imports(module_path(d))
                   for d in deps if not d.startswith(name + ".")), name


# the layers, bottom up: a module imports only from its own layer or the ones below it
LAYERS = [("model", "ar", "mdlm", "bd3lm", "setdiffusion", "sampling"), ("data",), ("common",),
          ("paper", "bench", "cluster"), ("train", "sample", "eval")]


def layer(module: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if module.split(".")[0] in names)


def test_no_import_runs_back_up_the_layers():
    """model and the methods import no data/, data/ no common/, common/ no paper/ (nor bench/ or cluster/),
    and nothing imports a script: every import, at the top of a file or inside a function, goes down."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True,
                           text=True).stdout.split()
    upward = []
    for f in files:
        name = f[:-3].replace("/", ".").removesuffix(".__init__")
        if name.split(".")[0] in {n for names in LAYERS for n in names}:
            upward += [f"{name} -> {d}" for d in local_imports(os.path.join(root, f))
                       if layer(d) > layer(name)]
    assert not upward, upward
