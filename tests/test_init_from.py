"""train.py --init-from our own checkpoints: any method's transformer (a training folder or a --keep-every
snapshot) starts any other method's run exactly, config.json records where it started, and what cannot
carry over is one line before any training; make finetune-mini's table."""
import fcntl
import json
import os
import shutil

import pytest
import torch

from common import checkpoint
import train
from fakehub import write_json
from helpers import TINY, error_of, snapshot

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Two steps of AR (a snapshot each step) and one of Set Diffusion on the shipped task, tiny."""
    root = tmp_path_factory.mktemp("sources")
    train.main(["--model", "ar", "--out-dir", str(root / "ar"), *TINY, "--max-iters", "2",
                "--keep-every", "1"])
    train.main(["--model", "setdiffusion", "--out-dir", str(root / "setdiffusion"), *TINY,
                "--max-iters", "1"])
    return root


@pytest.mark.parametrize("source, method", [("ar", "setdiffusion"), ("setdiffusion", "ar"),
                                            ("ar-step1", "bd3lm")])
def test_init_from_carries_every_tensor_exactly(sources, tmp_path, source, method):
    """The source's eval weights, every tensor, whatever the methods (no shape flag: the source's shape)."""
    args = train.get_args(["--model", method, "--init-from", str(sources / source), "--batch-size", "4",
                           "--out-dir", str(tmp_path / "o")])
    model = train.setup(args, "cpu")[3]
    want = checkpoint.load(str(sources / source))[0].state_dict()
    got = model.state_dict()
    assert sorted(got) == sorted(want)
    assert [k for k in want if not torch.equal(got[k], want[k])] == []
    assert model.training


def test_init_from_a_snapshot_records_where_the_run_started(sources, tmp_path):
    """config.json names the folder, method and step it started from; the source is as it was."""
    before = snapshot(sources)
    out = tmp_path / "sd"
    train.main(["--model", "setdiffusion", "--init-from", str(sources / "ar-step1"), "--batch-size", "4",
                "--eval-limit", "1", "--max-new-tokens", "8", "--max-iters", "1", "--out-dir", str(out)])
    config = json.loads((out / "config.json").read_text())
    assert config["init_from"] == {"path": str(sources / "ar-step1"), "format": "ours", "method": "ar",
                                   "step": 1, "data": "arith"}
    assert config["method"] == "setdiffusion" and config["model"]["n_layer"] == 1
    assert config["model"]["n_embd"] == 32 and config["step"] == 1
    assert snapshot(sources) == before


def test_a_fine_tuning_run_resumes_exactly_without_its_source_and_never_starts_from_its_own_folder(
        sources, tmp_path):
    """--resume builds the run from its own checkpoint, not from --init-from's (moved away after step 1):
    1 step then 1 resumed equals 2 uninterrupted, every tensor; resumed without its --init-from, that is named
    first; --init-from naming this run's --out-dir (its first save would replace it) is one line."""
    from safetensors.torch import load_file
    src, part, whole = (str(tmp_path / d) for d in ("src", "part", "whole"))
    shutil.copytree(sources / "ar", src)
    flags = ["--model", "mdlm", "--init-from", src, *TINY, "--max-iters"]
    train.main([*flags, "2", "--out-dir", whole])
    train.main([*flags, "1", "--out-dir", part, "--init-from", src + "/"])     # the same folder, spelt src/
    os.rename(src, tmp_path / "moved")
    train.main([*flags, "2", "--out-dir", part, "--resume"])
    a, b = (load_file(os.path.join(d, "model.safetensors")) for d in (whole, part))
    assert [k for k in a if not torch.equal(a[k], b[k])] == [] and a.keys() == b.keys()
    assert json.loads(open(os.path.join(part, "config.json")).read())["init_from"]["path"] == src
    assert error_of(train.main, ["--model", "mdlm", "--max-iters", "3", "--out-dir", part, "--resume"]) \
        .startswith(f"error: --resume: {part} holds another run (run.init_from: '{src}' in the checkpoint, "
                    "'' from the flags; model.")
    before = snapshot(whole)
    assert error_of(train.main, ["--model", "mdlm", "--init-from", whole, "--out-dir", whole]) == (
        f"error: --init-from {whole} is this run's --out-dir, whose first save replaces the weights it "
        "starts from: to continue that run, pass --resume with the flags that wrote it; to start another "
        "from it, choose another --out-dir")
    assert snapshot(whole) == before


GIVE = ("give a folder train.py wrote (--out-dir, or a --keep-every snapshot OUT-stepN) or a Qwen3 model "
        "(Hub id or folder)")
SHAPE = ": the shape comes from --init-from, so drop the shape flags (or start from a model of that shape)"
IDS = "the same ids would be other tokens; pass --tokenizer"


@pytest.mark.parametrize("source, flags, message", [
    ("ar", ["--n-layer", "2"], "--n-layer 2 asks for 2 layers, and --init-from {src} has 1 layers" + SHAPE),
    ("ar", ["--n-embd", "64"], "--n-embd 64 asks for width 64, and --init-from {src} has width 32" + SHAPE),
    ("ar", ["--n-layer", "4", "--n-embd", "128", "--n-head", "2"],      # flags given equal to their defaults
     "--n-layer 4 --n-embd 128 asks for 4 layers, width 128, and --init-from {src} has 1 layers, width 32"
     + SHAPE),
    ("ar", ["--preset", "cnndm"], "--preset cnndm asks for vocab_size 151936, and --init-from {src} has "
                                  "vocab_size 258" + SHAPE),
    ("setdiffusion", ["--seq-len", "256"],
     "this run's context of 256 tokens is longer than the 128 positions --init-from {src} was trained on: "
     "pass --seq-len 128 or less, or start from a model trained at this length"),
    ("gpt2-ar", [], "--init-from {src} is trained with the gpt2 tokenizer, and this run's tokenizer is "
                    f"bytes: {IDS} gpt2 (or start from a model of this tokenizer)"),
    ("qwen3", [], "--init-from {src} is a Qwen3 model, and this run's tokenizer is bytes: "
                  f"{IDS} qwen3:<that model> (or start from a model of this tokenizer)"),
    ("empty", [], "--init-from {src}: no checkpoint there (FileNotFoundError reading config.json): give a "
                  "folder train.py wrote (--out-dir, or a --keep-every snapshot OUT-stepN) or a Qwen3 model "
                  "(Hub id or folder)"),
    ("missing", [], "--init-from {src}: no such directory, and not a Hugging Face repo id (org/name)"),
    ("file", [], "--init-from {src}: not a directory (a file): give a model's folder or a Hugging Face repo "
                 "id (org/name)"),
    ("gsm8k:setdlm-smax8", [], "--init-from {src} is a released checkpoint, which --init-from does not take: "
                               f"{GIVE}, e.g. the Qwen3 it was fine-tuned from (eval.py --ckpt {{src}} "
                               "evaluates it)"),
    ("released", [], "--init-from {src}: not a Qwen3 config: model_type='bd3lm', architectures=['SetDLM']: "
                     + GIVE),
    ("deep", [], "--init-from {src}: no checkpoint there (RecursionError reading config.json): " + GIVE),
    ("null", [], "--init-from {src}: config.json holds NoneType, not a model config: " + GIVE),
    ("running", [], "--init-from {src} is being written by a running train.py (it holds {src}.lock): its "
                    "saves replace the weights as they are read; start from one of its --keep-every "
                    "snapshots ({src}-stepN), or when it has ended"),
    ("damaged", [], "cannot read the checkpoint at {src}: {src}/model.safetensors is damaged or not a "
                    "safetensors file (Error while deserializing header: incomplete metadata, file not fully "
                    "covered): write or download it again"),
])
def test_init_from_what_cannot_carry_over_is_one_line_and_writes_nothing(sources, tmp_path, monkeypatch,
                                                                         source, flags, message):
    """Before any data is encoded: no folder for the new run, the source as it was."""
    monkeypatch.setattr(train, "encode", lambda *a, **k: pytest.fail("encoded the examples"))
    src = str(sources / source) if source in ("ar", "setdiffusion") else source if ":" in source else \
        str(tmp_path / source)
    if source == "qwen3":                           # only a config.json: a refusal reads no weights
        os.makedirs(src)
        write_json(os.path.join(src, "config.json"), {
            "model_type": "qwen3", "vocab_size": 151936, "num_hidden_layers": 1, "hidden_size": 16,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 32,
            "max_position_embeddings": 40960})
    elif source == "gpt2-ar":                       # a copy of ar whose config.json names the gpt2 tokenizer
        shutil.copytree(sources / "ar", src)
        config = json.loads(open(os.path.join(src, "config.json")).read())
        write_json(os.path.join(src, "config.json"), {**config, "tokenizer": "gpt2"})
    elif source == "empty":
        os.makedirs(src)
    elif source == "file":
        open(src, "w").close()
    elif source == "released":                      # a released checkpoint's folder (pretrained.fetch's)
        os.makedirs(src)
        write_json(os.path.join(src, "config.json"), {"architectures": ["SetDLM"], "model_type": "bd3lm"})
    elif source in ("deep", "null"):                # a config.json nested too deep (beside weights), or null
        shutil.copytree(sources / "ar", src) if source == "deep" else os.makedirs(src)
        text = "[" * 10**5 + "]" * 10**5 if source == "deep" else "null"
        open(os.path.join(src, "config.json"), "w").write(text)
    elif source == "running":                       # a copy of ar and the lock its train.py would hold
        shutil.copytree(sources / "ar", src)
        held = open(src + ".lock", "a")              # open until the test ends
        fcntl.flock(held, fcntl.LOCK_EX)
    elif source == "damaged":                       # cut short: found before any data is encoded
        shutil.copytree(sources / "ar", src)
        os.truncate(os.path.join(src, "model.safetensors"), 5000)
    before = snapshot(sources)
    out = tmp_path / "o"
    got = error_of(train.main, ["--model", "setdiffusion", "--init-from", src, *flags, "--max-iters", "1",
                                "--out-dir", str(out)])
    assert got == "error: " + message.format(src=src)
    assert not any(os.path.exists(str(out) + s) for s in ("", ".tmp", ".old"))
    assert snapshot(sources) == before


# ----------------------------------------------------------------------------- make finetune-mini's table

def fake_run(folder, name, accuracy, tokens_per_step, losses, nll=None, total=None):
    """An eval.py --json file <name>.json (and <name>-nll.json), and a train.py log <name>.log (progress
    every 10 steps; of a run of `total` steps, default the last logged one)."""
    write_json(os.path.join(folder, name + ".json"), {"task": "arith", "model": name.split("-")[0], "n": 200,
               "threshold": 0.8, "accuracy": accuracy, "tokens_per_step": tokens_per_step})
    if nll is not None:
        write_json(os.path.join(folder, name + "-nll.json"),
                   {"task": "likelihood", "model": name.split("-")[0], "nll": nll, "n": 500})
    with open(os.path.join(folder, name + ".log"), "w") as f:
        f.write("note: a line that is not progress\n")
        f.writelines(f"step {10 * (i + 1)}/{total or 10 * len(losses)} | loss {x:.4f} | lr 6.70e-05 | 900 "
                     f"tok/s | 00:01 elapsed, 00:02 left\n" for i, x in enumerate(losses))
        f.write("held-out accuracy 0.500 on 20 problems\n")


def test_finetune_table_is_each_starts_seeds_and_the_gain_seed_by_seed(tmp_path):
    """The seeds' mean [min, max] of accuracy, tokens/step and NLL (where given), each run's last logged
    loss, and the gain over scratch of the same seed (+10 and -20 points: -5.0 [-20.0, +10.0]; seed 2
    alone: +5.0); the figure is written."""
    import paper.finetune
    for name, acc, tps, losses, nll in [("setdiffusion-pretrained-s1", 0.5, 3.0, [2.0, 1.0], 0.5),
                                        ("setdiffusion-pretrained-s2", 0.7, 3.5, [2.0, 0.5], 0.3),
                                        ("setdiffusion-pretrained-samelr-s2", 0.95, 3.0, [1.0, 0.25], None),
                                        ("setdiffusion-scratch-s1", 0.4, 2.0, [3.0, 2.0], 0.25),
                                        ("setdiffusion-scratch-s2", 0.9, 2.5, [3.0, 1.5], 0.25)]:
        fake_run(tmp_path, name, acc, tps, losses, nll)
    # a run that stopped at step 10 of 20 (killed, not resumed): named, left out of the means and the gains;
    # a resumed one whose log holds step 10 twice: the later line
    fake_run(tmp_path, "setdiffusion-scratch-s3", 0.0, 9.0, [9.0], 9.0, total=20)
    fake_run(tmp_path, "setdiffusion-pretrained-s3", 0.99, 3.0, [4.0, 9.0], None, total=30)   # saved at 10
    with open(tmp_path / "setdiffusion-pretrained-s3.log", "a") as f:
        f.write("resuming from step 10 of ...\nstep 20/30 | loss 3.0000 | x\nstep 30/30 | loss 1.0000 | x\n")
    md, png = str(tmp_path / "t.md"), str(tmp_path / "t.png")
    paper.finetune.main([md, *map(str, sorted(tmp_path.glob("*.json"))), "--logs", str(tmp_path),
                         "--plot", png])
    rows = open(md).read().splitlines()
    assert rows[0].endswith("| pretrained − scratch, accuracy points (same seed) | stopped early (left out) "
                            "|")
    assert rows[2] == ("| setdiffusion | pretrained | 1,2,3 | 73.0 [50.0, 99.0] | 3.17 [3.00, 3.50] | "
                       "0.400 [0.300, 0.500] | 0.833 [0.500, 1.000] | -5.0 [-20.0, +10.0] |  |")
    assert rows[3] == "| setdiffusion | pretrained-samelr | 2 | 95.0 | 3.00 |  | 0.250 | +5.0 |  |"
    assert rows[4] == ("| setdiffusion | scratch | 1,2 | 65.0 [40.0, 90.0] | 2.25 [2.00, 2.50] | 0.250 | "
                       "1.750 [1.500, 2.000] |  | s3 at step 10/20 |")
    assert os.path.getsize(png) > 0


@pytest.mark.parametrize("case, message", [
    ("misnamed", "{d}/sd-1.json: not named <method>-<pretrained|pretrained-samelr|scratch>-s<seed>[-nll]"
                 ".json as make finetune-mini names its runs"),
    ("nll alone", "{d}/ar-scratch-s2-nll.json: no accuracy file of that run ({d}/ar-scratch-s2.json) is "
                  "given"),
    ("no log", "cannot read the training log {d}/ar-scratch-s1.log: No such file or directory"),
    ("no progress", "{d}/ar-scratch-s1.log has no progress line (step N/T | loss X | ...): not the log of a "
                    "train.py run written to a file"),
    ("no table", "{d}/ar-scratch-s1.json: the first argument is the markdown table to write (OUT.md), then "
                 "the eval.py --json files: add the table's name first"),
])
def test_finetune_table_refuses_what_is_not_a_run_in_one_line(tmp_path, case, message):
    import paper.finetune
    fake_run(tmp_path, "ar-scratch-s1", 0.5, 1.0, [1.0])
    if case == "misnamed":
        shutil.copy(tmp_path / "ar-scratch-s1.json", tmp_path / "sd-1.json")
    elif case == "nll alone":
        (tmp_path / "ar-scratch-s2-nll.json").write_text('{"nll": 0.5}')
    elif case == "no log":
        os.remove(tmp_path / "ar-scratch-s1.log")
    elif case == "no table":                            # two runs, the table forgotten
        fake_run(tmp_path, "ar-scratch-s2", 0.5, 1.0, [1.0])
    elif case == "no progress":
        (tmp_path / "ar-scratch-s1.log").write_text("held-out accuracy 0.500 on 20 problems\n")
    runs = sorted(map(str, tmp_path.glob("*.json")))
    before = snapshot(tmp_path)
    table = [] if case == "no table" else [str(tmp_path / "t.md")]        # forgotten: a run is the first
    got = error_of(paper.finetune.main, [*table, *runs, "--logs", str(tmp_path)])
    assert got == "error: " + message.format(d=tmp_path)
    assert snapshot(tmp_path) == before


def test_finetune_mini_resumes_a_run_that_stopped_early_and_trains_nothing_finished(tmp_path):
    """make finetune-mini (its command lines recorded by a stand-in python): the pretraining finished, so not
    run; a run whose checkpoint stopped before its last step (a Ctrl-C or SIGTERM save: config.json's step
    below run.max_iters) is resumed, its log appended; a finished one is not trained again; a missing one is
    trained; every run is evaluated where its results are not newer than its checkpoint."""
    import subprocess
    import sys
    from helpers import ROOT
    out, seen = tmp_path / "out", tmp_path / "argv"
    for name, step in (("pretrain", 2500), ("ar-pretrained-s1", 5), ("ar-scratch-s1", 800)):
        os.makedirs(out / name)
        write_json(str(out / name / "config.json"), {"step": step, "run": {"max_iters": 800 if name[0] == "a"
                                                                           else 2500}})
    fake = tmp_path / "py"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then exec {sys.executable} "$@"; fi\n'
                    f'echo "$*" >> {seen}\n')
    fake.chmod(0o755)
    subprocess.run(["make", "--no-print-directory", "-C", ROOT, "finetune-mini", f"PY={fake}",
                    "NEED_EXTRAS=:", f"FT_OUT={out}", f"FT_RESULTS={tmp_path / 'res'}", "FT_SEEDS=1",
                    "FT_CONTROL_SEEDS="],
                   check=True, capture_output=True, timeout=120)
    lines = seen.read_text().splitlines()
    trained = [line.split("--out-dir ")[1] for line in lines if line.startswith("train.py")]
    assert f"{out}/ar-pretrained-s1 --resume" in trained and f"{out}/pretrain" not in " ".join(trained)
    assert not any(t.startswith(f"{out}/ar-scratch-s1") for t in trained)
    assert f"{out}/setdiffusion-scratch-s1" in trained                         # absent: trained
    assert sum(line.startswith("eval.py") for line in lines) == 2 * 8          # accuracy and NLL, 8 runs
