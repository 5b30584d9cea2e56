"""What the tests in this folder share: test_all.py's tiny models and method table, the reference samplers by
name, the scripts' one-line error check, tiny checkpoints (trained or random) and file snapshots."""
import dataclasses
import json
import math
import os

import pytest
import torch

from sampling import Settings
from test_all import (MASK, METHODS, V, Jitter, causal, left_padded, sample_order,  # noqa: F401 (re-exported)
                      tiny_model)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# train.py flags of a tiny run on the shipped task (1 layer, 32 wide)
TINY = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--batch-size", "4", "--eval-limit", "1",
        "--max-new-tokens", "8", "--warmup", "1"]


def random_rows(L, prompt_lens, ends, seed=0):
    """(x0, prompt_mask, pad_mask) of random rows of L tokens: row b's prompt is its first prompt_lens[b]
    tokens, its padding the columns from ends[b] on."""
    col = torch.arange(L)[None]
    x0 = torch.randint(0, MASK, (len(ends), L), generator=torch.Generator().manual_seed(seed))
    return x0, col < torch.tensor(prompt_lens)[:, None], col >= torch.tensor(ends)[:, None]


def naive_generate(name, model, prompt, N, threshold=math.inf):
    """The method's generate_reference (batch 1, no KV cache, the whole forward each step): (tokens, step)."""
    mod, cfg, kw = METHODS[name]
    x, stats = mod.generate_reference(model, prompt, cfg, Settings(N, threshold, **kw))
    return x, stats["step"]


def error_of(main, argv) -> str:
    """The one line a script's main(argv) exits with (asserted: `error: ...`, one line, no unsafe advice)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert "weights_only" not in message, message
    return message


def usage_error(main, argv, capsys) -> str:
    """What argparse prints when it refuses argv (exit code 2)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def eval_json(tmp_path, argv) -> dict:
    """eval.py argv --json FILE on the CPU: what it wrote."""
    import eval as evaluate
    evaluate.main([*argv, "--device", "cpu", "--json", str(tmp_path / "m.json")])
    return json.loads((tmp_path / "m.json").read_text())


def snapshot(root) -> dict:
    """Every file and link under root -> its bytes or '-> target': nothing changed, moved or deleted."""
    out = {}
    for d, dirs, files in os.walk(root):
        for p in (os.path.join(d, n) for n in dirs + files):
            if os.path.islink(p):
                out[os.path.relpath(p, root)] = "-> " + os.readlink(p)
            elif os.path.isfile(p):
                out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def leftovers(out) -> list[str]:
    """What saves left beside the folder out (its lock aside): names out.*"""
    parent, name = os.path.split(str(out))
    return sorted(n for n in os.listdir(parent) if n.startswith(name + ".") and n != name + ".lock")


def killed_in_step(monkeypatch, step: int):
    """Set Diffusion's loss raises KeyboardInterrupt in training step `step`: a run killed there."""
    import setdiffusion as sd
    calls, loss = [], sd.loss

    def killed(*a, **k):
        calls.append(1)
        if len(calls) == step:
            raise KeyboardInterrupt
        return loss(*a, **k)
    monkeypatch.setattr(sd, "loss", killed)


def write_runs(folder, runs) -> list[str]:
    """Each run (an eval.py --json object) as folder/<k>.json, numbered on from the files already there."""
    folder.mkdir(parents=True, exist_ok=True)
    start = len(os.listdir(folder))
    paths = [str(folder / f"{start + i}.json") for i in range(len(runs))]
    for path, run in zip(paths, runs):
        with open(path, "w") as f:
            json.dump(run, f)
    return paths


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def random_checkpoint(path, method="ar", vocab=258, n_embd=32, seed=0, tokenizer="bytes", data="arith",
                      seq_len=128, **settings) -> str:
    """An untrained checkpoint as train.py writes it (1 layer; the method settings smax 8, block size 4)."""
    from common import checkpoint
    from model import ModelConfig, Transformer
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=vocab, n_layer=1, n_head=2, n_kv_head=2, n_embd=n_embd)
    checkpoint.save(str(path), Transformer(cfg), {
        "model": dataclasses.asdict(cfg), "method": method, "tokenizer": tokenizer, "data": data,
        "seq_len": seq_len, "method_config": checkpoint.method_config(
            method, vocab - 1, **{"smax": 8, "block_size": 4, "nelbo": False, **settings})})
    return str(path)


# the lines of a tiny text corpus (~80 bytes each): conftest's corpus_ckpts (30), test_fsdp.py's runs (40)
YORK = [f"{i}. Now is the winter of our discontent made glorious summer by this sun of York;\n"
        for i in range(40)]
STORY = ["Ann found a cat.", "It was hungry.", "She fed it fish.", "The cat purred.", "Ann kept the cat."]


def write_cloze(d):
    """A Story Cloze CSV in folder d: STORY twice, its fifth sentence the right ending (quiz 2, then 1)."""
    import csv
    from data import rocstories
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, rocstories.FILE), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["InputStoryid", *[f"InputSentence{i}" for i in range(1, 5)], "RandomFifthSentenceQuiz1",
                    "RandomFifthSentenceQuiz2", "AnswerRightEnding"])
        w.writerow(["id0", *STORY[:4], "The cat flew away.", STORY[4], "2"])
        w.writerow(["id1", *STORY[:4], STORY[4], "It rained.", "1"])


def text_checkpoints(tmp_path_factory, name: str, text: str, flags: list[str]):
    """A folder with a text file `name`, its token cache and one tiny checkpoint per method trained on it."""
    import train
    d = tmp_path_factory.mktemp("text")
    (d / name).write_text(text, encoding="utf-8")
    for m in METHODS:
        train.main(["--model", m, "--data", f"text:{d / name}", "--data-dir", str(d / "cache"),
                    "--out-dir", str(d / m), *flags])
    return d
