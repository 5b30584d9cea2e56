"""Bad input to sample.py and eval.py is one line, `error: ...` with exit code 1, before any work (one table);
prompts are plain text but for [MASK]s and fit the context; train.py refuses runs larger than memory."""
import json
import shutil
import sys
import types

import pytest
import torch

import eval as evaluate
from common import cli, runs
import sample
import train
from helpers import error_of

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task

SEQ_LEN = 128                                                     # the arith task's context
CORES = cli.usable_cores()
THREADS = "--threads must be in [0, {}] (the CPUs this process may use; 0 = the cores other jobs leave " \
          "free), got {}"
TAU = "a confidence threshold must be in (0, 1], or inf for one token per step"
TEMPERATURE = "the temperature must be a finite number >= 0 (0 = greedy)"
WARMUP = "--warmup {} leaves no example to {}: only 2 example(s) are evaluated; raise --limit above " \
         "--warmup (or lower --warmup)"
UNCONDITIONAL = "--task unconditional needs --ref-ckpt DIR, an AR checkpoint trained on the same data (it " \
                "scores the samples), --ppl-model NAME (a Hugging Face causal LM) or --mauve-ref FILE; or " \
                "--throughput-run, which scores nothing"
TASKS = "arith, cnndm, gsm8k, infill, lm-eval, rocstories, throughput"
PLOT = "--plot draws the order of one prompt: add --show-order, and --prompt or none"
FIT = "prompt 1 has {} tokens, and with --max-new-tokens {} that is {}, more than the model's context " \
      "(seq_len=128): at most {} new tokens fit; pass --max-new-tokens {} or less, or shorten the prompt"
MASKS = "prompt 1 has more than 128 tokens with its {{mask:{0}}}: more than the model's context " \
        "(seq_len=128); shorten it"
BAD = [   # (script, checkpoint: sd, ar or none (missing), flags, the line); {t} tmp_path, {ck} one_step
    ("sample", "sd", "--threads 100000", THREADS.format(CORES, 100000)),
    ("eval", "sd", f"--threads {CORES + 1}", THREADS.format(CORES, CORES + 1)),
    ("sample", "sd", "--top-p 0.9", "--top-p does nothing without --temperature: add --temperature, or drop "
                                    "--top-p"),
    ("sample", "sd", "--top-p 1e-300 --temperature 1", "top-p must be >= 1e-30, got 1e-300"),
    ("sample", "ar", "--temperature 1 --top-p 1.5", "top-p must be in (0, 1], got 1.5"),
    ("sample", "ar", "--repetition-penalty -1", "the repetition penalty must be > 0 (1 = off), got -1.0"),
    ("sample", "sd", "--max-new-tokens -5", "--max-new-tokens must be 0 or more (0 = only fill [MASK]s), got "
                                            "-5"),
    ("sample", "sd", "--batch-size 0", "--batch-size must be at least 1, got 0"),
    ("eval", "sd", "--limit -1", "--limit must be 0 or more (0 = all), got -1"),
    ("eval", "sd", "--batch-size 0", "--batch-size must be at least 1, got 0"),
    ("eval", "sd", "--mdlm-block 0", "--mdlm-block must be at least 1, got 0"),
    ("eval", "sd", "--max-new-tokens 0", "--max-new-tokens must be at least 1, got 0"),
    ("eval", "sd", "--warmup -1", "--warmup must be 0 or more, got -1"),
    ("eval", "ar", "--task throughput --rounds 0", "--rounds must be at least 1, got 0"),
    # NaN passes a `t >= 0`-style check the wrong way: never taken as greedy decoding
    ("sample", "sd", "--temperature nan", "--temperature nan: " + TEMPERATURE),
    ("eval", "sd", "--temperature inf", "--temperature inf: " + TEMPERATURE),
    ("eval", "sd", "--threshold nan", "--threshold nan: " + TAU),
    ("sample", "sd", "--threshold -1", "--threshold -1.0: " + TAU),
    ("eval", "sd", "--threshold 1.5", "--threshold 1.5: " + TAU),
    ("eval", "sd", "--window 99", "--window 99: the window must be in [1, smax=8]"),
    ("sample", "sd", "--window 9", "--window 9: the window must be in [1, smax=8]"),
    ("sample", "sd", "--device foo", "--device foo: not a device name; use auto, cpu, cuda, cuda:N or mps"),
    ("eval", "ar", "--device foo", "--device foo: not a device name; use auto, cpu, cuda, cuda:N or mps"),
    *[(s, "ar", "--device cuda", "--device cuda: this torch sees 0 CUDA GPU(s) (a CPU-only build or no "
                                 "driver?): use --device cpu or auto")
      for s in ("sample", "eval") if not torch.cuda.is_available()],
    ("eval", "none", "", "no checkpoint at {t}/x: expected a directory with config.json and "
                         "model.safetensors (written by train.py --out-dir), a key like gsm8k:ar or a Hub "
                         "repo id"),
    ("eval", "sd", "--task gsm8k offline-datasets", "could not load openai/gsm8k split 'test' from the "
     "Hugging Face Hub (ConnectionError): pass --data-dir with a folder holding train.jsonl and test.jsonl"),
    # prompts: files that are not text, prompts that do not fit ({mask:N} checked before the masks are made)
    ("sample", "sd", "--prompt-file {t}/binary.bin", "--prompt-file {t}/binary.bin is not UTF-8 text "
     "(invalid start byte at byte 3): give a text file of prompts, one per line"),
    ("sample", "sd", "--prompt-file {t}", "cannot read --prompt-file {t}: Is a directory"),
    ("sample", "sd", "--prompt-file {t}/nope.txt", "cannot read --prompt-file {t}/nope.txt: No such file or "
                                                   "directory"),
    ("sample", "ar", "--prompt-file {t}/empty.txt", "{t}/empty.txt holds no prompt: write one prompt per "
                                                    "line"),
    ("sample", "ar", "--prompt 1+{mask:1}=2", "prompt 1 has [MASK]s to fill, and AR cannot fill masks inside "
     "the prompt (it continues the left context only): use a Set Diffusion, BD3-LM or MDLM checkpoint"),
    ("sample", "sd", "--prompt-file /dev/zero", "--prompt-file /dev/zero is larger than 4 MiB: give a text "
                                                "file of prompts, one per line"),
    ("sample", "sd", "--prompt abc --max-new-tokens 1000000000", FIT.format(3, 10**9, 10**9 + 3, 125, 125)),
    ("sample", "sd", "--prompt abc --max-new-tokens 500", FIT.format(3, 500, 503, 125, 125)),
    ("sample", "sd", f"--prompt {'x' * 124} --max-new-tokens 5", FIT.format(124, 5, 129, 4, 4)),
    ("sample", "sd", "--prompt x{mask:99999999999999}y", MASKS.format("99999999999999")),
    ("sample", "sd", "--prompt x{mask:" + "9" * 5000 + "}y", MASKS.format("9" * 5000)),    # nor int()'s limit
    # outputs that cannot be written, a warm-up that leaves nothing to measure
    ("eval", "sd", "--limit 2 --json {t}/no/such/x.json", "--json {t}/no/such/x.json: the folder {t}/no/such "
                                                          "does not exist; create it first"),
    ("eval", "sd", "--limit 2 --json {t}", "--json {t} is a folder: give a file name in it"),
    ("eval", "sd", "--limit 2 --json {ck}/ar/config.json",
     "--json {ck}/ar/config.json would replace a file of the checkpoint in {ck}/ar: give another name"),
    ("eval", "sd", "--limit 2 --task throughput --warmup 5", WARMUP.format(5, "measure")),
    ("eval", "sd", "--limit 2 --task infill --warmup 2", WARMUP.format(2, "score")),
    ("sample", "sd", "--show-order --plot {t}/p.png", "--plot {t}/p.png: the folder {t}/gone does not exist; "
                                                      "create it first"),
    ("sample", "ar", "--plot x.png", PLOT),
    ("sample", "ar", "--show-order --plot x.png --prompt-file p.txt", PLOT),
    ("sample", "ar", "--show-order --plot no/such/x.png", "--plot no/such/x.png: the folder no/such does not "
                                                          "exist; create it first"),
    ("sample", "ar", "--ckpt other", "several --ckpt are drawn one panel each: add --show-order --plot "
                                     "FILE.png"),
    ("sample", "ar", "--show-order --plot x.png no-matplotlib", "--plot needs matplotlib (import of "
     "matplotlib halted; None in sys.modules): pip install matplotlib"),
    ("sample", "sd", "--show-order --plot x.xyz", None),             # a suffix matplotlib cannot write
    # eval.py's flags for a task that does not read them, scorers without their packages
    ("eval", "none", "--task unconditional", UNCONDITIONAL),
    ("eval", "none", "--task unconditional --mauve-encoder b", UNCONDITIONAL),
    ("eval", "none", "--task unconditional --ppl-model g --mauve-encoder b",
     "--mauve-encoder goes with --mauve-ref FILE (the reference texts MAUVE compares with)"),
    ("eval", "none", "--task likelihood --ppl-model gpt2-large",
     "--ppl-model goes with --task unconditional (it scores unconditional samples)"),
    ("eval", "none", "--task unconditional --mauve-ref r.txt no-mauve",
     "MAUVE needs the optional package mauve-text: pip install mauve-text"),
    ("eval", "none", "--task unconditional --ppl-model gpt2-large no-transformers",
     "generative perplexity needs the optional package transformers: pip install transformers"),
    ("eval", "none", "--task arith --rounds 5", "--rounds does not apply to --task arith: it goes with "
                                                "--task throughput"),
    ("eval", "none", "--rounds 5", "--rounds does not apply to the checkpoint's own task (no --task): it "
                                   "goes with --task throughput"),
    ("eval", "none", "--task likelihood --threshold 0.9",
     f"--threshold does not apply to --task likelihood: it goes with --task {TASKS}, unconditional"),
    ("eval", "none", "--task piqa --data owt", "--data does not apply to --task piqa: it goes with --task "
                                               "infill, likelihood"),
    ("eval", "none", "--task unconditional --ppl-model g --temperature 0.5",
     f"--temperature does not apply to --task unconditional: it goes with --task {TASKS}"),
    ("eval", "none", "--task arith --mc-samples 4", "--mc-samples does not apply to --task arith: it goes "
                                                    "with --task hellaswag, lm-eval, piqa, siqa"),
    ("eval", "none", "--task likelihood --no-redraw",
     "--no-redraw does not apply to --task likelihood: it goes with --task unconditional"),
    ("eval", "none", "--task throughput --rounds 1000000000",
     "--rounds must be at most 100 (the paper's 3), got 1000000000"),
    ("eval", "none", "--task piqa --mc-samples 0", "--mc-samples must be at least 1, got 0"),
    # --replies: a file as --json is, beside it; the paper recipes' flags where they act
    ("eval", "sd", "--limit 2 --replies {t}", "--replies {t} is a folder: give a file name in it"),
    ("eval", "sd", "--limit 2 --replies {t}/no/such/r.jsonl", "--replies {t}/no/such/r.jsonl: the folder "
                                                              "{t}/no/such does not exist; create it first"),
    ("eval", "sd", "--limit 2 --replies {ck}/ar/config.json",
     "--replies {ck}/ar/config.json would replace a file of the checkpoint in {ck}/ar: give another name"),
    ("eval", "sd", "--limit 2 --json {t}/m.json --replies {t}/m.json", "--replies {t}/m.json is the --json "
     "file too: give each its own name (the replies go beside the metrics, e.g. {t}/m.jsonl)"),
    ("eval", "sd", "--limit 2 --replies {t}/cfg.jsonl", "--replies {t}/cfg.jsonl would replace a file of "
     "the checkpoint in {ck}/ar: give another name"),                # a link to the checkpoint's config.json
    ("eval", "sd", "--limit 2 --json {t}/m.json --replies {t}/m-link.jsonl", "--replies {t}/m-link.jsonl is "
     "the --json file too: give each its own name (the replies go beside the metrics, e.g. {t}/m.jsonl)"),
    ("eval", "none", "--task likelihood --replies r.jsonl", "--replies does not apply to --task likelihood: "
     "it goes with --task arith, cnndm, gsm8k, infill, lm-eval, rocstories, unconditional"),
    ("eval", "none", "--task arith --recipe suite", "--recipe does not apply to --task arith: it goes with "
                                                    "--task likelihood, rocstories"),
    ("eval", "sd", "--task likelihood --recipe suite", "--recipe suite: --task likelihood on arith has no "
     "official recipes (--task rocstories and the likelihood of owt and lm1b have)"),
    ("eval", "sd", "--task rocstories --recipe script", "--recipe script is not a recipe of --task "
     "rocstories: choose h100, suite"),
    ("eval", "none", "--task arith --precision fp32", "--precision does not apply to --task arith: it goes "
                                                      "with --task likelihood"),
    ("eval", "none", "--task throughput --throughput-run", "--throughput-run does not apply to --task "
     "throughput: it goes with --task rocstories, unconditional"),
    ("eval", "none", "--task unconditional --throughput-run --ppl-model g", "--ppl-model scores samples and "
     "--throughput-run scores none (its samples are drawn whole, with no stop rule): run them as two eval.py "
     "commands"),
    ("eval", "none", "--task unconditional --throughput-run --data-dir d", "--data-dir goes with --task "
     "unconditional only with --mauve-ref owt (or another corpus: its held-out rows, read from --data-dir, "
     "are MAUVE's references)"),
]


@pytest.mark.parametrize("script, ckpt, flags, message", BAD)
def test_bad_input_to_sample_and_eval_is_one_line_before_any_work(one_step, tmp_path, monkeypatch, capsys,
                                                                 script, ckpt, flags, message):
    (tmp_path / "binary.bin").write_bytes(b"ok\n\xa1\xff\x00")
    (tmp_path / "empty.txt").write_text("\n")
    (tmp_path / "p.png").symlink_to(tmp_path / "gone" / "p.png")             # a link that leads nowhere
    (tmp_path / "m-link.jsonl").symlink_to(tmp_path / "m.json")                # --json's file, by a link
    (tmp_path / "cfg.jsonl").symlink_to(one_step / "ar" / "config.json")
    for marker, module in (("no-matplotlib", "matplotlib"), ("no-mauve", "mauve"),
                           ("no-transformers", "transformers"), ("offline-datasets", "datasets")):
        if marker in flags:
            broken = types.ModuleType("datasets")
            broken.load_dataset = lambda *a, **k: (_ for _ in ()).throw(ConnectionError("offline"))
            monkeypatch.setitem(sys.modules, module, broken if module == "datasets" else None)
            flags = flags.replace(marker, "")
    if message is None:
        canvas = pytest.importorskip("matplotlib.backend_bases").FigureCanvasBase
        message = ("--plot x.xyz: the file's suffix names the picture's format, and matplotlib writes "
                   f"{', '.join(sorted(canvas.get_supported_filetypes()))}: name it e.g. .png, .pdf or .svg")
    path = {"sd": one_step / "setdiffusion", "ar": one_step / "ar", "none": tmp_path / "x"}[ckpt]
    at = lambda s: s.replace("{t}", str(tmp_path)).replace("{ck}", str(one_step))    # noqa: E731
    main = sample.main if script == "sample" else evaluate.main
    got = error_of(main, ["--ckpt", str(path), *at(flags).split()])
    assert got == "error: " + at(message)
    assert capsys.readouterr().out == ""                                      # nothing ran


def test_bad_checkpoint_files_are_blamed_on_the_file(one_step, tmp_path):
    """A bad sampler.threshold in config.json is blamed on config.json, not on a --threshold never passed; a
    truncated model.safetensors is named as damaged."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(one_step / "setdiffusion", ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config["sampler"]["threshold"] = 0.0
    (ckpt / "config.json").write_text(json.dumps(config))
    assert error_of(evaluate.main, ["--ckpt", str(ckpt), "--limit", "1"]) == \
        "error: config.json's sampler.threshold 0.0: " + TAU
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert "model.safetensors is damaged" in error_of(evaluate.main, ["--ckpt", str(ckpt)])


def test_a_long_prompt_gets_the_room_left_and_cuts_no_other_reply(one_step, tmp_path, capsys):
    """The checkpoint's 8 new tokens do not fit after a prompt of 124: it gets the 4 that fit; a short prompt
    beside it in a prompt file gets its own reply, as alone."""
    ckpt = ["--ckpt", str(one_step / "setdiffusion")]
    short, long = "Ann has 5 pens.", "x" * (SEQ_LEN - 4)
    sample.main([*ckpt, "--prompt", long, "--max-new-tokens", "4"])
    sample.main([*ckpt, "--prompt", long])
    (tmp_path / "p.txt").write_text(f"{short}\n{long}\n")
    capsys.readouterr()
    sample.main([*ckpt, "--prompt-file", str(tmp_path / "p.txt")])
    both = capsys.readouterr().out.split("\n")
    sample.main([*ckpt, "--prompt", short])
    assert both[0] == capsys.readouterr().out.split("\n")[0]


def test_prompt_text_is_plain_text_except_masks(one_step, tmp_path, monkeypatch, capsys):
    """Literal <|endoftext|> stays text (echoed as typed); argv's raw bytes (surrogate escapes) reach the byte
    tokenizer as those bytes; <|mask|> and {mask:N} become [MASK]s; a file's byte-order mark is dropped."""
    seen, real = [], sample.respond
    monkeypatch.setattr(sample, "respond", lambda *a, **k: (seen.append(a[5]), real(*a, **k))[1])
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffab\n".encode("utf-8"))
    for prompt, ids in [("A<|endoftext|>B", list(b"A<|endoftext|>B")),
                        ("\udcff\udcfe x", [0xFF, 0xFE, ord(" "), ord("x")]),     # argv's b"\xff\xfe x"
                        ("x<|mask|>{mask:2}y", [ord("x"), 257, 257, 257, ord("y")]), (bom, list(b"ab"))]:
        flag = "--prompt-file" if prompt == bom else "--prompt"
        sample.main(["--ckpt", str(one_step / "setdiffusion"), flag, str(prompt), "--max-new-tokens", "2"])
        assert seen.pop() == [ids]
    assert capsys.readouterr().out.startswith("A<|endoftext|>B")


def test_eval_row_shows_only_the_settings_that_apply(one_step, capsys):
    """No window for AR, no threshold on likelihood (stop_on_im_end only for GSM8K)."""
    heads = {}
    for name, task in [("ar", "arith"), ("setdiffusion", "arith"), ("setdiffusion", "likelihood")]:
        evaluate.main(["--ckpt", str(one_step / name), "--task", task, "--limit", "1",
                       *(["--max-new-tokens", "4"] if task != "likelihood" else [])])
        heads[name, task] = capsys.readouterr().out.splitlines()[0]
    assert heads["ar", "arith"].startswith("| task | model | accuracy |")
    assert heads["setdiffusion", "arith"].startswith("| task | model | threshold | window | commit_order | "
                                                     "official | accuracy |")
    assert heads["setdiffusion", "likelihood"].startswith("| task | model | nll |")


@pytest.mark.parametrize("flags, message", [
    ("--seq-len 100000000 --n-embd 100000", "a model of 640.0B parameters needs about 9537 GiB to train, "
                                            "more than the 16 GiB here: make it smaller"),
    # the float32 logits alone: 4 x 16 x 1e8 x 258 bytes
    ("--seq-len 100000000", "--seq-len 100000000 and --batch-size 16 need at least 1,538 GiB of activations "
     "a micro-batch beside the 0.0 GiB of weights and optimizer state, more than the 16 GiB here: lower "
     "--seq-len or --batch-size"),
    # the 20,000 training examples at 10 bytes a position
    ("--seq-len 10000000 --batch-size 1", "the 20,000 training examples at --seq-len 10000000 take 1,863 GiB "
                                          "encoded, more than the 16 GiB here: lower --seq-len (0 = the "
                                          "task's 128)"),
    ("--seq-len 1", "--seq-len 1: the context must be at least 2 tokens (one to condition on, one to "
                    "predict); 0 = the task's default"),
])
def test_train_refuses_a_run_larger_than_memory_before_allocating(tmp_path, monkeypatch, flags, message):
    """With 16 GiB here: one line before the examples are encoded or the model is built."""
    monkeypatch.setattr(runs, "memory_of", lambda device: 16 * 2**30)
    monkeypatch.setattr(train, "encode", lambda *a, **k: pytest.fail("encoded the examples"))
    monkeypatch.setattr(train, "Transformer", lambda *a, **k: pytest.fail("built the model"))
    argv = ["--model", "ar", *flags.split(), "--max-iters", "1", "--out-dir", str(tmp_path / "o")]
    assert error_of(train.main, argv) == "error: " + message
    assert not (tmp_path / "o").exists()


def test_sample_help_shows_the_prompts_backslash_n_as_written(capsys):
    with pytest.raises(SystemExit) as e:
        sample.main(["--help"])
    assert e.value.code == 0
    assert '--prompt "Ann has 5 pens. She buys 3. How many?\\n"\n' in capsys.readouterr().out
