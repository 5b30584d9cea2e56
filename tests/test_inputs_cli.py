"""Bad input to sample.py and eval.py (and paper/results.py's tables) gets one clear line, `error: ...` with
exit code 1, before any work is done; one test per class of failure: counts and floats out of range, prompts
that do not fit the context, prompt files that are not text, devices not here, outputs that cannot be written,
and train.py runs larger than this machine's memory. python -m pytest -q tests/test_inputs_cli.py
"""
import json
import shutil

import pytest
import torch

import eval as evaluate
import paper.results
from common import runtime, threads
import sample
import train
from helpers import error_of

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task

SEQ_LEN = 128                                                     # the arith task's context


CORES = threads.usable_cores()


@pytest.mark.parametrize("script, flags, message", [
    ("sample", ["--threads", "100000"], f"--threads must be in [0, {CORES}] (the CPUs this process may use; "
                                        f"0 = the cores other jobs leave free), got 100000"),
    ("eval", ["--threads", str(CORES + 1)], f"--threads must be in [0, {CORES}] (the CPUs this process may "
                                            f"use; 0 = the cores other jobs leave free), got {CORES + 1}"),
    ("sample", ["--top-p", "0.9"], "--top-p does nothing without --temperature: add --temperature, or drop "
                                   "--top-p"),
    ("sample", ["--top-p", "1e-300", "--temperature", "1"], "top-p must be >= 1e-30, got 1e-300"),
    ("sample", ["--show-order", "--plot", "x.xyz"], None),
    ("sample", ["--max-new-tokens", "-5"],
     "--max-new-tokens must be 0 or more (0 = only fill [MASK]s), got -5"),
    ("sample", ["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    ("sample", ["--batch-size", "-1"], "--batch-size must be at least 1, got -1"),
    ("eval", ["--limit", "-1"], "--limit must be 0 or more (0 = all), got -1"),
    ("eval", ["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    ("eval", ["--mdlm-block", "0"], "--mdlm-block must be at least 1, got 0"),
    ("eval", ["--max-new-tokens", "0"], "--max-new-tokens must be at least 1, got 0"),
    ("eval", ["--warmup", "-1"], "--warmup must be 0 or more, got -1"),
])
def test_flags_out_of_range_or_without_effect(one_step, capsys, script, flags, message):
    """A count out of range, more threads than CPUs, a flag that does nothing without the one it refines, a
    nucleus too small for float32, or a --plot suffix matplotlib cannot write: refused before the checkpoint
    is loaded."""
    main = sample.main if script == "sample" else evaluate.main
    if message is None:
        FigureCanvasBase = pytest.importorskip("matplotlib.backend_bases").FigureCanvasBase
        message = ("--plot x.xyz: the file's suffix names the picture's format, and matplotlib writes "
                   f"{', '.join(sorted(FigureCanvasBase.get_supported_filetypes()))}: name it e.g. .png, "
                   ".pdf or .svg")
    assert error_of(main, ["--ckpt", str(one_step / "setdiffusion"), *flags]) == "error: " + message
    assert capsys.readouterr().out == ""                                          # nothing ran


@pytest.mark.parametrize("script, flags, message", [
    ("sample", ["--temperature", "nan"],
     "--temperature nan: the temperature must be a finite number >= 0 (0 = greedy)"),
    ("eval", ["--temperature", "inf"],
     "--temperature inf: the temperature must be a finite number >= 0 (0 = greedy)"),
    ("eval", ["--threshold", "nan"], "--threshold nan: a confidence threshold must be in (0, 1], or inf for "
                                     "one token per step"),
])
def test_non_finite_sampler_floats(one_step, script, flags, message):
    """A NaN or infinite temperature or threshold is one line, never taken as greedy decoding (NaN passes a
    `t >= 0`-style check the wrong way)."""
    main = sample.main if script == "sample" else evaluate.main
    assert error_of(main, ["--ckpt", str(one_step / "setdiffusion"), *flags]) == "error: " + message


def test_threshold_from_config_is_blamed_on_config(one_step, tmp_path):
    """A bad sampler.threshold stored in config.json is blamed on config.json, not on a --threshold never
    passed."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(one_step / "setdiffusion", ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config["sampler"]["threshold"] = 0.0
    (ckpt / "config.json").write_text(json.dumps(config))
    assert error_of(evaluate.main, ["--ckpt", str(ckpt), "--limit", "1"]) == (
        "error: config.json's sampler.threshold 0.0: a confidence threshold must be in (0, 1], or inf for "
        "one token per step")


def test_prompt_and_reply_must_fit_the_context(one_step):
    """Prompt + --max-new-tokens past seq_len, and {mask:N} checked before the masks are made."""
    ckpt = ["--ckpt", str(one_step / "setdiffusion"), "--prompt", "abc"]
    for n in ("1000000000", "500"):
        assert error_of(sample.main, [*ckpt, "--max-new-tokens", n]) == (
            f"error: prompt 1 has 3 tokens, and with --max-new-tokens {n} that is {int(n) + 3}, more than "
            f"the model's context (seq_len={SEQ_LEN}): at most {SEQ_LEN - 3} new tokens fit; pass "
            f"--max-new-tokens {SEQ_LEN - 3} or less, or shorten the prompt")
    long = "x" * (SEQ_LEN - 4)                         # the checkpoint's default (8 new tokens) does not fit:
    sample.main(["--ckpt", str(one_step / "setdiffusion"), "--prompt", long, "--max-new-tokens", "4"])
    sample.main(["--ckpt", str(one_step / "setdiffusion"), "--prompt", long])   # it shrinks to the 4 that fit
    assert error_of(sample.main, ["--ckpt", str(one_step / "setdiffusion"), "--prompt", long,
                                  "--max-new-tokens", "5"])
    for n in ("99999999999999", "9" * 5000):                 # no MemoryError, nor int()'s digit limit
        assert error_of(sample.main, ["--ckpt", str(one_step / "setdiffusion"), "--prompt",
                                      f"x {{mask:{n}}} y"]) == (
            f"error: prompt 1 has more than {SEQ_LEN} tokens with its {{mask:{n}}}: more than the model's "
            f"context (seq_len={SEQ_LEN}); shorten it")


def test_default_reply_length_follows_each_prompt(one_step, tmp_path, capsys):
    """With the checkpoint's default max_new_tokens, a long prompt that leaves little room does not cut the
    replies of the short prompts beside it in a prompt file: each is what it is alone."""
    short, long = "Ann has 5 pens.", "x" * (SEQ_LEN - 4)
    (tmp_path / "p.txt").write_text(f"{short}\n{long}\n")
    ckpt = ["--ckpt", str(one_step / "setdiffusion")]
    sample.main([*ckpt, "--prompt-file", str(tmp_path / "p.txt")])
    both = capsys.readouterr().out.split("\n")
    sample.main([*ckpt, "--prompt", short])
    assert both[0] == capsys.readouterr().out.split("\n")[0]


def test_prompt_file_that_is_not_a_text_file(one_step, tmp_path):
    """A binary file, a folder, a missing file and an endless one (/dev/zero, not read forever): each named in
    one line."""
    binary = tmp_path / "binary.bin"
    binary.write_bytes(b"ok\n\xa1\xff\x00")
    cases = [(binary, f"--prompt-file {binary} is not UTF-8 text (invalid start byte at byte 3): give a text "
                      f"file of prompts, one per line"),
             (tmp_path, f"cannot read --prompt-file {tmp_path}: Is a directory"),
             (tmp_path / "nope.txt",
              f"cannot read --prompt-file {tmp_path / 'nope.txt'}: No such file or directory"),
             ("/dev/zero",
              "--prompt-file /dev/zero is larger than 4 MiB: give a text file of prompts, one per line")]
    for path, message in cases:
        argv = ["--ckpt", str(one_step / "setdiffusion"), "--prompt-file", str(path)]
        assert error_of(sample.main, argv) == "error: " + message


def test_prompt_text_is_plain_text_except_masks(one_step, tmp_path, monkeypatch, capsys):
    """Literal <|endoftext|> stays text; raw bytes from argv (surrogate escapes) reach the byte
    tokenizer as those bytes, not U+FFFD; <|mask|> and {mask:N} still become [MASK]s; a prompt file's
    byte-order mark is dropped."""
    seen = []
    real = sample.respond
    monkeypatch.setattr(sample, "respond", lambda *a, **k: (seen.append(a[5]), real(*a, **k))[1])
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffab\n".encode("utf-8"))                   # an editor's UTF-8 byte-order mark
    for prompt, ids in [("A<|endoftext|>B", list(b"A<|endoftext|>B")),
                        ("\udcff\udcfe x", [0xFF, 0xFE, ord(" "), ord("x")]),     # argv's b"\xff\xfe x"
                        ("x<|mask|>{mask:2}y", [ord("x"), 257, 257, 257, ord("y")]),
                        (bom, list(b"ab"))]:                           # the mark is not text
        flag = "--prompt-file" if prompt == bom else "--prompt"
        sample.main(["--ckpt", str(one_step / "setdiffusion"), flag, str(prompt), "--max-new-tokens", "2"])
        assert seen.pop() == [ids]
    assert capsys.readouterr().out.startswith("A<|endoftext|>B")                  # echoed as typed


@pytest.mark.parametrize("device", ["foo", *([] if torch.cuda.is_available() else ["cuda"])])
def test_device_not_here(one_step, device):
    """A device name that is not one, or a GPU this machine lacks: one line naming --device."""
    for main in (sample.main, evaluate.main):
        assert error_of(main, ["--ckpt", str(one_step / "ar"), "--device", device]).startswith(
            f"error: --device {device}: ")


def test_outputs_and_warmup_checked_before_the_work(one_step, tmp_path, capsys):
    """eval.py --json into a missing folder, onto a folder or onto a checkpoint's own file, sample.py --plot
    through a link into a missing folder, or a warm-up that leaves nothing to measure: one line before any
    work."""
    ckpt = ["--ckpt", str(one_step / "setdiffusion"), "--limit", "2"]
    missing = tmp_path / "no" / "such" / "x.json"
    (tmp_path / "p.png").symlink_to(tmp_path / "gone" / "p.png")               # a link that leads nowhere
    cases = [(["--json", str(missing)], f"--json {missing}: the folder {missing.parent} does not exist; "
                                        f"create it first"),
             (["--json", str(tmp_path)], f"--json {tmp_path} is a folder: give a file name in it"),
             (["--json", str(one_step / "ar" / "config.json")],
              f"--json {one_step / 'ar' / 'config.json'} would replace a file of the checkpoint in "
              f"{one_step / 'ar'}: give another name"),
             (["--task", "throughput", "--warmup", "5"], "--warmup 5 leaves no example to measure: only 2 "
                                                         "example(s) are evaluated; raise --limit above "
                                                         "--warmup (or lower --warmup)"),
             (["--task", "infill", "--warmup", "2"], "--warmup 2 leaves no example to score: only 2 "
                                                     "example(s) are evaluated; raise --limit above --warmup "
                                                     "(or lower --warmup)"),
             (["--show-order", "--plot", str(tmp_path / "p.png")],
              f"--plot {tmp_path / 'p.png'}: the folder {tmp_path / 'gone'} does not exist; create it first")]
    for flags, message in cases:
        main = sample.main if "--plot" in flags else evaluate.main
        assert error_of(main, [*(ckpt[:2] if main is sample.main else ckpt), *flags]) == "error: " + message
        assert "|" not in capsys.readouterr().out                                 # no result row: nothing ran


def test_summarize_of_a_bad_json_names_the_file(tmp_path):
    """paper/results.py names the file that is not JSON, a partial run, not an object, or missing; writes no
    table."""
    files = {"bad.json": "garbage{", "partial.json": '{"task": "arith"}', "list.json": "[1, 2]"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    out = str(tmp_path / "p.md")
    for name, message in [("bad.json", "is not valid JSON (Expecting value, line 1 column 1): pass the files "
                                       "eval.py --json wrote"),
                          ("partial.json",
                           "lacks 'model', 'ckpt': not the eval.py --json file of an accuracy run"),
                          ("list.json", "holds a JSON list, not the object eval.py --json writes")]:
        path = tmp_path / name
        assert error_of(paper.results.main, [out, str(path), "--pareto"]) == f"error: {path} {message}"
    assert error_of(paper.results.main, [out, str(tmp_path / "nope.json"), "--pareto"]) == \
        f"error: cannot read {tmp_path / 'nope.json'}: No such file or directory"
    assert not (tmp_path / "p.md").exists()


def test_eval_row_shows_only_the_settings_that_apply(one_step, capsys):
    """A result row's header names only the settings that apply: no window for AR, no threshold on likelihood,
    stop_on_im_end only for GSM8K."""
    heads = {}
    for name, task in [("ar", "arith"), ("setdiffusion", "arith"), ("setdiffusion", "likelihood")]:
        evaluate.main(["--ckpt", str(one_step / name), "--task", task, "--limit", "1",
                       # likelihood samples nothing
                       *(["--max-new-tokens", "4"] if task != "likelihood" else [])])
        heads[name, task] = capsys.readouterr().out.splitlines()[0]
    assert heads["ar", "arith"].startswith("| task | model | accuracy |")
    assert heads["setdiffusion", "arith"].startswith("| task | model | threshold | window | commit_order | "
                                                     "official | accuracy |")
    assert heads["setdiffusion", "likelihood"].startswith("| task | model | nll |")


# ----------------------------------------------------------------------------- runs larger than memory

@pytest.fixture
def nothing_allocated(monkeypatch):
    """16 GiB of memory here, and a failure if train.py encodes the examples or builds the model."""
    monkeypatch.setattr(runtime, "memory_of", lambda device: 16 * 2**30)
    monkeypatch.setattr(train, "encode", lambda *a, **k: pytest.fail("encoded the examples"))
    monkeypatch.setattr(train, "Transformer", lambda *a, **k: pytest.fail("built the model"))


@pytest.mark.parametrize("flags, message", [
    (["--n-embd", "100000"], "a model of 640.0B parameters needs about 9537 GiB to train, more than the 16 "
                             "GiB here: make it smaller"),
    ([], "--seq-len 100000000 and --batch-size 16 need at least 1,538 GiB of activations a micro-batch "
         "beside the 0.0 GiB of weights and optimizer state, more than the 16 GiB here: lower --seq-len or "
         "--batch-size"),
])
def test_train_refuses_a_run_larger_than_memory_before_allocating(tmp_path, nothing_allocated,
                                                                  flags, message):
    """A huge --seq-len or --n-embd is one line before anything is allocated: the weights (16 bytes a
    parameter) or the activations, at least the float32 logits (4 x 16 x 1e8 x 258 bytes), more than the
    memory here."""
    argv = ["--model", "ar", "--seq-len", "100000000", *flags, "--max-iters", "1", "--out-dir",
            str(tmp_path / "o")]
    assert error_of(train.main, argv) == "error: " + message


def test_train_refuses_examples_larger_than_memory_before_encoding(tmp_path, nothing_allocated):
    """The arith task's 20,000 examples encoded at L = 1e7: 10 bytes a position, 1,863 GiB."""
    argv = ["--model", "ar", "--seq-len", "10000000", "--batch-size", "1", "--max-iters", "1",
            "--out-dir", str(tmp_path / "o")]
    assert error_of(train.main, argv) == ("error: the 20,000 training examples at --seq-len 10000000 take "
                                          "1,863 GiB encoded, more than the 16 GiB here: lower --seq-len (0 "
                                          "= the task's 128)")


def test_train_seq_len_one_says_the_context_must_be_at_least_two(tmp_path):
    with pytest.raises(SystemExit) as e:
        train.main(["--model", "ar", "--seq-len", "1", "--max-iters", "1", "--out-dir", str(tmp_path / "o")])
    assert str(e.value.code) == ("error: --seq-len 1: the context must be at least 2 tokens (one to "
                                 "condition on, one to predict); 0 = the task's default")


def test_sample_help_shows_the_prompts_backslash_n_as_written(capsys):
    """The docstring's example prompt ends with the two characters \\n (sample.py turns them into a line
    break)."""
    with pytest.raises(SystemExit) as e:
        sample.main(["--help"])
    assert e.value.code == 0
    assert '--prompt "Ann has 5 pens. She buys 3. How many?\\n"\n' in capsys.readouterr().out
