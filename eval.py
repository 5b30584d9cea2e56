"""Evaluate a checkpoint; prints one markdown table row (and writes the same metrics with --json).

    python eval.py --ckpt out/setdiffusion                       # accuracy on the task it was trained on
    python eval.py --ckpt out/setdiffusion --threshold 0.9       # decode every token with p >= 0.9 too
    python eval.py --ckpt out/setdiffusion --json m.json --replies m.jsonl   # every reply and its verdicts
    python eval.py --ckpt out/setdiffusion --task likelihood     # NLL / perplexity (a bound for diffusion)
    python eval.py --ckpt out/ar --task throughput               # tokens/s at batch 1 (paper) and batched
    python eval.py --ckpt out/setdiffusion --task infill --span number   # fill a span (paper/infill.py)
    python eval.py --ckpt owt:setdlm-smax16 --task likelihood --data owt # a corpus: also bits/char (bytes)

The paper's tasks, each in paper/ and imported only when --task names it: rocstories, unconditional (samples
scored by an AR checkpoint, a Hugging Face causal LM, MAUVE), hellaswag, piqa, siqa, lm-eval. Their flags are
in their own groups of --help; docs/usage.md has a command for each. Tables of several --json files: python -m
paper.results.
"""
import math
import sys
import types

# first, before torch loads OpenMP: a short spin wait (common/cli.py)
from common import cli

import torch

from common import eval_args, runs
from common.checkpoint import json_dump, json_dumps
from common.eval_args import load_for_inference, no_examples_left
from common.metrics import (bits_per_char, evaluate_accuracy, evaluate_likelihood, markdown_table, run_record,
                            window_used)
from common.throughput import evaluate_throughput
from data.files import replaced
from data import CORPORA, get_corpus, get_task, get_tokenizer, is_corpus, sampler_preset
from data.mcqa import NAMES as MCQA
from sampling import PaperMode, Settings, check_threshold

TASKS = eval_args.TASKS


def get_args(argv=None):
    return eval_args.parser(__doc__).parse_args(argv)


def evaluate_corpus(args, task_name: str, model, method, cfg, config: dict, device, exclusions: str,
                    settings: Settings | None = None) -> dict:
    """--data owt|lm1b|shakespeare|text:PATH (or a checkpoint trained on one): the likelihood of the corpus'
    held-out token rows, each method's own estimate as its nll() defines it, position 0 a clean BOS; a
    byte-level model also gets bits per character. --task infill: a whole word or line of each row masked and
    filled at batch 1 (paper/infill.py evaluate_text)."""
    name = args.data or config["data"]
    if not is_corpus(name):
        raise ValueError(f"unknown --data {name!r}: choose {', '.join(CORPORA)} or text:PATH (the likelihood "
                         f"of a shipped task is --task likelihood without --data)")
    corpus = get_corpus(name)
    if task_name not in ("likelihood", "infill", name, corpus.NAME):
        raise ValueError(f"--data {name} goes with --task likelihood, not --task {task_name}")
    recipes = getattr(corpus, "RECIPES", None)                  # owt and lm1b: the official two
    recipe = eval_args.recipe(args, recipes, f"the likelihood of {corpus.NAME}") if task_name != "infill" \
        else None
    own = corpus.NAME == config["data"]           # its training corpus: the tokenizer it was trained with
    from paper.zeroshot import checked_tokenizer     # paper/: imported only when a run needs it
    tok = checked_tokenizer(config, model, config["tokenizer"] if own else corpus.TOKENIZER, f"--data {name}")
    rows = corpus.load("test", args.data_dir, tok, config["seq_len"])
    if task_name == "infill":
        from paper.infill import evaluate_text
        return evaluate_text(model, method, cfg, tok, rows, config, device, settings, corpus.NAME,
                             args.span or "word", args.limit, args.warmup)
    rows = rows[:args.limit] if args.limit else rows
    print(f"{name} held-out split: {len(rows)} sequences of {rows.shape[1]} tokens, "
          f"batch size {args.batch_size}, dtype {next(model.parameters()).dtype}, {args.precision}"
          + (f", the official {recipe} recipe" if recipe else ""))
    with autocast(args, device):
        m = evaluate_likelihood(model, recipe_method(method, cfg, recipes, recipe), cfg, tok, rows,
                                config["seq_len"], device, args.batch_size, args.seed, exclusions,
                                encode_fn=corpus.batch)
    bpc = bits_per_char(m["nll"], tok)
    return {**m, **({"bits_per_char": bpc} if bpc is not None else {}), "data": corpus.NAME,
            "batch_size": args.batch_size, "precision": args.precision,
            **({"recipe": recipe} if recipe else {})}


def recipe_method(method, cfg, recipes: dict | None, recipe: str | None):
    """The method a corpus likelihood scores with: the method itself, or under a recipe whose Set Diffusion
    orders are drawn at the official max_block_size = d (data/owt.py RECIPES "suite"), Set Diffusion with its
    nll taken from its last section (SUITE_NLL: setdiffusion.suite_nll). Only Set Diffusion has one: the
    official passes MAX_BLOCK_SIZE to its Set Diffusion models alone."""
    if recipe is None or recipes[recipe]["smax"] == "2d" or method.SUITE_NLL is None:
        return method
    return types.SimpleNamespace(**{**vars(method), "nll": method.suite_nll})


def autocast(args, device):
    """The likelihood's precision: --precision amp_bf16, the forward under bfloat16 autocast as the official
    eval runs it (its composer trainer's `precision: amp_bf16`; the methods' log-softmax stays float32); fp32:
    no autocast."""
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16,
                          enabled=args.precision == "amp_bf16")


def sampler_settings(args, config: dict, method, cfg, options=None) -> Settings:
    """The sampler's Settings: the threshold, window and new-token count each from its flag, else the
    checkpoint's config.json sampler entry (train.py's flags), else the default, checked, naming where a bad
    value came from (ValueError); the other fields from their flags; options a task's official preset."""
    sampler = config.get("sampler", {})
    given = {k: getattr(args, k) is not None for k in ("threshold", "window")}
    threshold = args.threshold if given["threshold"] else sampler.get("threshold", math.inf)
    window = args.window if given["window"] else sampler.get("window", 0)
    check_threshold(threshold, "--threshold" if given["threshold"] else "config.json's sampler.threshold")
    cli.check_window(window, method, cfg, "--window" if given["window"] else "config.json's sampler.window")
    max_new = args.max_new_tokens if args.max_new_tokens is not None else sampler.get("max_new_tokens", 64)
    return Settings(max_new, threshold, args.temperature, setdiffusion_window=window,
                    setdiffusion_commit_order=args.commit_order, mdlm_block=args.mdlm_block,
                    paper=PaperMode(args.official, config["seq_len"], options))


def main(argv=None):
    args = get_args(argv)
    try:
        eval_args.check(args)
        if args.task == "lm-eval":               # --tasks, --include-path, --num-fewshot; lm-eval installed
            from paper import harness
            harness.check_args(args)
        if args.task == "unconditional":         # the scorers' packages installed
            from paper import hf_metrics
            hf_metrics.check_installed(bool(args.ppl_model), bool(args.mauve_ref))
        device, model, method, cfg, config = load_for_inference(args)
        task_name = args.task or config["data"]
        if args.replies and task_name not in eval_args.READERS["replies"]:
            raise ValueError(f"--replies does not apply to the checkpoint's own task, {task_name}: it goes "
                             f"with --task {', '.join(sorted(eval_args.READERS['replies']))}")
        # a released checkpoint (config holds its source) counts as the official code does
        exclusions = args.nll_exclusions or ("official" if "source" in config else "none")
        if task_name == "unconditional":
            settings = sampler_settings(args, config, method, cfg)
            from paper import generation
            m = generation.run(args, model, method, cfg, config, device, settings)
            return report(args, config, method, cfg, task_name, m, settings, sampled=True)
        if task_name == "lm-eval":               # lm-eval-harness tasks: one row per task, filter and metric
            from paper import harness
            head, rows, m = harness.run(args, model, method, cfg, config, device, exclusions,
                                        sampler_settings(args, config, method, cfg))
            print(markdown_table(head, rows))
            records = m.pop("records")
            write_json(args, {"task": task_name, "model": config["method"], "ckpt": args.ckpt,
                              "commit_order": args.commit_order, **m})
            return write_replies(args, records)
        if task_name in MCQA:
            from paper import zeroshot
            m = zeroshot.evaluate(args, task_name, model, method, cfg, config, device, exclusions)
            return report(args, config, method, cfg, task_name, m)
        # a corpus (ROCStories is a task of the OWT models too)
        if args.data or (is_corpus(config["data"]) and task_name != "rocstories"):
            settings = sampler_settings(args, config, method, cfg) if task_name == "infill" else None
            m = evaluate_corpus(args, task_name, model, method, cfg, config, device, exclusions, settings)
            return report(args, config, method, cfg, task_name, m, settings, sampled=settings is not None)
        data_name = config["data"] if task_name in ("likelihood", "throughput", "infill") else task_name
        data = get_task(data_name, config.get("data_options") if data_name == config["data"] else None)
        tok = get_tokenizer(config["tokenizer"])
        args.recipe = eval_args.recipe(args, data.RECIPES if task_name == "rocstories" else None,
                                       f"--task {task_name}" + f" on {data_name}" * (data_name != task_name))
        examples = data.load("test", args.data_dir)
        settings = sampler_settings(args, config, method, cfg, sampler_preset(data_name, tok, method))
        examples = examples[:args.limit] if args.limit else examples
        if task_name == "throughput" and len(examples) <= args.warmup:
            raise ValueError(no_examples_left(args.warmup, len(examples)))
        m = measure(args, task_name, data_name, data, examples, model, method, cfg, tok, config, device,
                    settings, exclusions)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(cli.compile_failure(e) or f"error: {e}")
    report(args, config, method, cfg, task_name, m, settings, sampled=task_name != "likelihood",
           im_end=data_name == "gsm8k" and task_name not in ("rocstories", "infill"))


def measure(args, task_name, data_name, data, examples, model, method, cfg, tok, config, device, settings,
            exclusions) -> dict:
    """The metrics of a task's test examples: infilling, likelihood, throughput or generation accuracy."""
    stop_opts = {"im_end": True} if args.stop_on_im_end else {}
    if task_name in ("rocstories", "infill"):
        from paper import infill
        return infill.evaluate(task_name, data, examples, model, method, cfg, tok, config, device, settings,
                               args.sentences, args.warmup, args.span or "step", args.recipe,
                               args.throughput_run)
    if task_name == "likelihood":
        with autocast(args, device):
            m = evaluate_likelihood(model, method, cfg, tok, examples, config["seq_len"], device,
                                    args.batch_size, args.seed, exclusions)
        return {**m, "precision": args.precision}
    if task_name == "throughput":
        return evaluate_throughput(model, method, cfg, tok, data, examples, device, settings, args.warmup,
                                   args.batch_size, stop_opts, args.rounds, args.compile)
    m = evaluate_accuracy(model, method, cfg, tok, data, examples, device, settings, args.batch_size,
                          args.seed, stop_opts)
    if args.compile:      # a new shape compiles inside a timed decode: no decoding speed (--task throughput
        del m["tokens_per_s"]                                  # times its decodes after a warm-up)
    completions = m.pop("completions")
    if data_name == "cnndm":            # the official corpus-level ROUGE (bootstrap), sacreBLEU, beside ours
        from data.cnndm import corpus_scores
        scores = corpus_scores(completions, [e["answer"] for e in examples], seed=args.seed)
        m.update({f"corpus_{k}": v for k, v in scores.items()})
    return m


def report(args, config, method, cfg, task_name, m, settings: Settings | None = None, sampled=False,
           im_end=False):
    """Print the metrics as a markdown row (and write them with --json). The row shows only the sampler
    settings that apply: none without sampling (sampled=False: likelihood, zero-shot), else those in the
    method's KNOBS (the threshold for the diffusion methods, window and commit order for Set Diffusion,
    official for MDLM and BD3-LM), stop_on_im_end where the task stops on it (im_end). The JSON holds
    every setting."""
    records = m.pop("records", None)
    threshold, window = ((settings.threshold, window_used(settings.setdiffusion_window, method, cfg))
                         if settings else (math.inf, 0))
    m = {**run_record(config, args.ckpt, task_name, threshold, window, args.commit_order, args.stop_on_im_end,
                      args.official), **m, **peak_memory()}
    knobs = {"threshold": "threshold", "window": "setdiffusion_window",      # the row's names: the KNOBS'
             "commit_order": "setdiffusion_commit_order", "official": "paper.official"}
    applies = {k: sampled and knob in method.KNOBS for k, knob in knobs.items()}
    applies["stop_on_im_end"] = sampled and im_end
    keys = [k for k in m if k not in ("ckpt", "ref_ckpt", "samples", "method_config", "mauve_scores",
                                      "ckpt_environment")
            and applies.get(k, True)]
    print(markdown_table(keys, [[m[k] for k in keys]]))
    write_json(args, m)
    write_replies(args, records)


def peak_memory() -> dict:
    """On a CUDA GPU, the most memory torch held at once during the run (torch.cuda.max_memory_allocated),
    in GiB, as "peak_gpu_memory_gib" (printed in the row: make smoke-gsm8k reads it); elsewhere nothing."""
    if not torch.cuda.is_available() or torch.cuda.max_memory_allocated() == 0:
        return {}
    return {"peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}


def write_json(args, m: dict):
    """--json: the metrics printed above, with every setting and the environment that measured them
    (common/runs.py), as one standard JSON file (tau = inf as "inf"; a failed write is one line)."""
    if args.json:
        m = {**m, "environment": runs.environment(cli.pick_device(args.device))}
        try:
            with replaced(args.json) as f:               # whole or not at all: the earlier file stays
                json_dump(m, f, indent=2)
        except OSError as e:
            sys.exit(f"error: cannot write --json {args.json} ({e.strerror}); "
                     "the table above holds the same metrics")


def write_replies(args, records: list | None):
    """--replies: every example's record (its prompt, reply, gold answer, extracted answers and verdicts), one
    JSON line each, written whole as --json is (a full disk leaves the earlier file as it was; a stream such
    as /dev/stdout is written in place); a failed write is one line."""
    if args.replies and records is not None:
        try:
            with replaced(args.replies) as f:
                for r in records:
                    f.write(json_dumps(r, ensure_ascii=False, default=str) + "\n")
        except OSError as e:
            sys.exit(f"error: cannot write --replies {args.replies} ({e.strerror}); the earlier file, if "
                     f"any, is as it was")


if __name__ == "__main__":
    cli.run(main, "eval.py")              # Ctrl-C: one line, exit code 130
