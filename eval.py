"""Evaluate a checkpoint; prints one markdown table row (and writes the same metrics with --json).

    python eval.py --ckpt out/setdiffusion                       # accuracy on the task it was trained on
    python eval.py --ckpt out/setdiffusion --threshold 0.9       # decode every token with p >= 0.9 too
    python eval.py --ckpt out/setdiffusion --task likelihood     # NLL / perplexity (a bound for diffusion)
    python eval.py --ckpt out/ar --task throughput               # tokens/s at batch 1 (paper) and batched

    python eval.py --ckpt owt:setdlm-smax16 --task likelihood --data owt   # OWT/LM1B perplexity
    python eval.py --ckpt out/shakespeare/ar --task likelihood            # a text corpus: also bits/char (bytes)
    python eval.py --ckpt out/shakespeare/setdiffusion --task unconditional --ref-ckpt out/shakespeare/ar -n 20 \
        --threshold 0.9 --no-redraw                    # samples from BOS: generative perplexity, entropy, tokens/s
    python eval.py --ckpt owt:setdlm-smax32 --task unconditional -n 1000 --ppl-model gpt2-large --mauve-ref owt.jsonl
                                                       # the paper's Table 4: GPT-2 Large gen. PPL, MAUVE (optional);
                                                       # samples of entropy < 4 or <= 50 tokens redrawn as the official
    python eval.py --ckpt owt:setdlm-smax16 --task piqa             # zero-shot multiple choice (paper/zeroshot.py)
    python eval.py --ckpt out/ar --task lm-eval --tasks NAME[,NAME] --include-path DIR   # lm-eval (paper/harness.py)

Tasks: arith, gsm8k (accuracy of the generated answers), cnndm (ROUGE), rocstories --sentences 1|3 and infill
(fill a masked span: paper/infill.py), likelihood (a task's test split, or a corpus: owt, lm1b,
shakespeare, text:PATH), throughput, unconditional (samples scored by an AR checkpoint, a Hugging Face
causal LM and MAUVE: paper/hf_metrics.py), hellaswag, piqa, siqa,
lm-eval (lm-eval-harness tasks through the method's likelihood and sampler: paper/harness.py; optional dependency).
Tables of several --json files: python -m paper.results.
"""
import argparse
import json
import math
import sys

from common import threads  # first, before torch loads OpenMP: a short spin wait (common/threads.py)

from common import checkpoint
from common import credentials
from common.files import replaced
from data import CORPORA, get_corpus, get_task, get_tokenizer, is_corpus, sampler_preset
from common.cli import (check_nonnegative, check_output_file, check_positive, check_temperature, check_threshold,
                 check_window, no_examples_left, prepare, speed_args)
from sampling import Settings
from common.metrics import (bits_per_char, evaluate_accuracy, evaluate_likelihood, evaluate_throughput, markdown_table,
                     run_record, window_used)
from paper import generation, harness, hf_metrics, infill, zeroshot

TASKS = ["arith", "gsm8k", "cnndm", "rocstories", "infill", "likelihood", "throughput", "unconditional", *zeroshot.MCQA,
         "lm-eval"]


def evaluate_corpus(args, task_name: str, model, method, cfg, config: dict, device, exclusions: str,
                    settings: Settings | None = None) -> dict:
    """--data owt|lm1b|shakespeare|text:PATH (or a checkpoint trained on one): the likelihood of the corpus' held-out
    token rows (data.get_corpus: OWT's validation split, LM1B's test split, a text's validation tail), each
    method's own estimate as its nll() defines it (AR exact; MDLM/BD3-LM the 1/t NELBO, t per block for BD3-LM;
    Set Diffusion one sampled order), position 0 a clean BOS. A byte-level model also gets bits per character
    (nats/token / ln 2: bits per byte, = per character on ASCII text, EOS between documents counted).
    --task infill: one whole word (--span word, the default) or line (--span line) of each held-out row masked
    and filled at batch 1 with the threshold and window given (paper/infill.py evaluate_text)."""
    name = args.data or config["data"]
    if not is_corpus(name):
        raise ValueError(f"unknown --data {name!r}: choose {', '.join(CORPORA)} or text:PATH (the likelihood of a "
                         f"shipped task is --task likelihood without --data)")
    corpus = get_corpus(name)
    if task_name not in ("likelihood", "infill", name, corpus.NAME):
        raise ValueError(f"--data {name} goes with --task likelihood, not --task {task_name}")
    own = corpus.NAME == config["data"]           # its training corpus: the tokenizer it was trained with
    tok = zeroshot.checked_tokenizer(config, model, config["tokenizer"] if own else corpus.TOKENIZER, f"--data {name}")
    rows = corpus.load("test", args.data_dir, tok, config["seq_len"])
    if task_name == "infill":
        return infill.evaluate_text(model, method, cfg, tok, rows, config, device, settings, corpus.NAME,
                                    args.span or "word", args.limit, args.warmup)
    rows = rows[:args.limit] if args.limit else rows
    print(f"{name} held-out split: {len(rows)} sequences of {rows.shape[1]} tokens, batch size {args.batch_size}, "
          f"dtype {next(model.parameters()).dtype}")
    m = evaluate_likelihood(model, method, cfg, tok, rows, config["seq_len"], device, args.batch_size, args.seed,
                            exclusions, encode_fn=corpus.batch)
    bpc = bits_per_char(m["nll"], tok)
    return {**m, **({"bits_per_char": bpc} if bpc is not None else {}), "data": corpus.NAME, "batch_size": args.batch_size}


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="checkpoint directory (written by train.py)")
    p.add_argument("--task", choices=TASKS, default=None, help="what to measure (default: the checkpoint's task)")
    p.add_argument("--data-dir", default=None, help="local folder with the task's train/test .jsonl")
    p.add_argument("--data", default=None, help="likelihood on a corpus: owt, lm1b, shakespeare or text:PATH")
    p.add_argument("--ref-ckpt", default=None, help="unconditional: the AR checkpoint that scores the samples "
                   "(generative perplexity), trained on the same data with the same tokenizer")
    p.add_argument("--ppl-model", default=None, help="unconditional: also the generative perplexity under this "
                   "Hugging Face causal LM (Hub id or local directory; the paper's: gpt2-large), --batch-size samples "
                   "per forward (optional: transformers)")
    p.add_argument("--mauve-ref", default=None, help="unconditional: MAUVE against these reference texts (.txt one "
                   "a line, .jsonl, .json), mean and std over 5 subsets of 1000 as the official Table 4 (optional: "
                   "mauve-text, transformers)")
    p.add_argument("--mauve-encoder", default=None, help="unconditional: the Hugging Face encoder whose features "
                   f"MAUVE compares (default {hf_metrics.MAUVE_ENCODER}, the paper's)")
    p.add_argument("-n", type=int, default=20, help="unconditional: samples scored, at batch 1")
    p.add_argument("--no-redraw", action="store_true", help="unconditional: score every sample as drawn (the "
                   "official redraws one whose unigram entropy is < 4 nats or that holds <= 50 tokens)")
    p.add_argument("--mc-samples", "--samples", dest="samples", type=int, default=1, help="hellaswag/piqa/siqa, "
                   "lm-eval: NELBO draws averaged per option (1 = the official), noise seeded per request")
    p.add_argument("--limit", type=int, default=0, help="evaluate the first N held-out examples (0 = all)")
    p.add_argument("--batch-size", type=int, default=32, help="problems generated at once")
    p.add_argument("--device", default="auto", help="cuda, mps, cpu or auto")
    p.add_argument("--threshold", type=float, default=None, help="confidence threshold tau (inf = 1 token/step)")
    p.add_argument("--window", type=int, default=None, help="Set Diffusion window W (default smax / 2)")
    p.add_argument("--commit-order", choices=["l2r", "fht"], default="l2r",
                   help="Set Diffusion: commit a step's tokens left to right (the official throughput runs) or by "
                        "first-hitting time (the official accuracy runs)")
    p.add_argument("--stop-on-im-end", action="store_true", help="GSM8K: also stop at <|im_end|> (official option)")
    p.add_argument("--nll-exclusions", choices=["official", "none"], default=None,
                   help="likelihood: 'official' drops pad-id (EOS) targets and position 0 from Set Diffusion's "
                        "NLL as the official eval does (default for released checkpoints), 'none' counts all")
    p.add_argument("--mdlm-block", type=int, default=32, help="MDLM sampler block length")
    p.add_argument("--official-blocks", action="store_true",
                   help="MDLM/BD3-LM: count the new tokens from the start of the prompt's last block and (MDLM) pad "
                        "the canvas to seq_len with [MASK], as the official align_inputs_to_blocks (released models)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens to generate per problem (unconditional: default seq_len - 1)")
    p.add_argument("--sentences", type=int, default=1, choices=[1, 3], help="rocstories: sentences to infill")
    p.add_argument("--span", choices=["step", "number", "operand", "verb", "word", "line"], default=None,
                   help="infill: what is masked. The shipped task: its middle reasoning step (step, the default: "
                        "decided by the left context) or its starting amount in the problem (number: decided by the "
                        "reply to its right), its last action's amount (operand) or first verb (verb), both decided by the reply; "
                        "a text corpus: one word (word, the default) or one line (line)")
    p.add_argument("--warmup", type=int, default=5, help="throughput, infill, unconditional: warm-up examples "
                   "(samples) before timing")
    p.add_argument("--rounds", type=int, default=3, help="throughput: times the measured prompts are decoded; the "
                   "median round is reported with the rounds' range")
    p.add_argument("--seed", type=int, default=0, help="seed of sampling, noise and orders")
    speed_args(p)
    p.add_argument("--tasks", default=None, help="lm-eval: task names, comma-separated (lm-eval's or --include-path's)")
    p.add_argument("--include-path", default=None, help="lm-eval: a folder of task YAML files (local tasks)")
    p.add_argument("--num-fewshot", type=int, default=None, help="lm-eval: few-shot examples (default: the task's)")
    p.add_argument("--json", default=None, help="also write the metrics to this JSON file (tables of several: "
                   "python -m paper.results)")
    return p.parse_args(argv)


def check_args(args):
    """The range checks of eval.py's flags, before anything is loaded (ValueError: one line)."""
    check_positive("--batch-size", args.batch_size)
    check_positive("--mdlm-block", args.mdlm_block)
    check_positive("-n", args.n)
    if check_positive("--rounds", args.rounds) > 100:          # each round decodes every measured prompt again
        raise ValueError(f"--rounds must be at most 100 (the paper's 3), got {args.rounds}")
    check_positive("--mc-samples", args.samples)
    scorers = [f for f, v in (("--ref-ckpt", args.ref_ckpt), ("--ppl-model", args.ppl_model),
                              ("--mauve-ref", args.mauve_ref), ("--mauve-encoder", args.mauve_encoder)) if v]
    if args.task == "unconditional" and not set(scorers) - {"--mauve-encoder"}:
        raise ValueError("--task unconditional needs --ref-ckpt DIR, an AR checkpoint trained on the same data (it "
                         "scores the samples), --ppl-model NAME (a Hugging Face causal LM) or --mauve-ref FILE")
    if args.task != "unconditional" and scorers:
        raise ValueError(f"{scorers[0]} goes with --task unconditional (it scores unconditional samples)")
    if args.mauve_encoder and not args.mauve_ref:
        raise ValueError("--mauve-encoder goes with --mauve-ref FILE (the reference texts MAUVE compares with)")
    hf_metrics.check_installed(bool(args.ppl_model), bool(args.mauve_ref))
    check_nonnegative("--limit", args.limit, "0 = all")
    check_nonnegative("--warmup", args.warmup)
    check_temperature(args.temperature)
    if args.max_new_tokens is not None:
        check_positive("--max-new-tokens", args.max_new_tokens)
    if args.threshold is not None:
        check_threshold(args.threshold)
    if args.json:
        check_output_file(args.json)
    harness.check_args(args)                     # --tasks, --include-path, --num-fewshot; lm-eval installed
    # Each flag that only some tasks read, and those tasks: given (not its default) to another, it is refused.
    # No --task: the checkpoint's own, an accuracy task (arith, gsm8k, cnndm) or a corpus' likelihood.
    accuracy, sampled = ("arith", "gsm8k", "cnndm"), ("rocstories", "infill", "throughput", "unconditional", "lm-eval")
    readers = {"data_dir": set(TASKS) - {"unconditional", "lm-eval"}, "n": {"unconditional"},
               "no_redraw": {"unconditional"}, "samples": {*zeroshot.MCQA, "lm-eval"}, "rounds": {"throughput"},
               "limit": set(TASKS) - {"unconditional"}, "batch_size": set(TASKS) - {"rocstories", "infill"},
               **dict.fromkeys(["threshold", "window", "commit_order", "mdlm_block", "official_blocks"],
                               {*accuracy, *sampled}),
               "temperature": {*accuracy, *sampled} - {"unconditional"},
               "max_new_tokens": {*accuracy, "throughput", "unconditional", "lm-eval"},
               "stop_on_im_end": {"gsm8k", "throughput", "lm-eval"}, "sentences": {"rocstories"},
               "span": {"infill"}, "warmup": {"throughput", "infill", "rocstories", "unconditional"},
               "nll_exclusions": {"likelihood", *zeroshot.MCQA, "lm-eval"}, "data": {"likelihood", "infill"},
               "seed": set(TASKS) - {"throughput", "rocstories", "infill"}}
    defaults, runs = vars(get_args(["--ckpt", "x"])), {args.task} if args.task else {*accuracy, "likelihood"}
    for dest, tasks in readers.items():
        if getattr(args, dest) != defaults[dest] and not runs & tasks:
            flag = {"n": "-n", "samples": "--mc-samples"}.get(dest, "--" + dest.replace("_", "-"))
            task = f"--task {args.task}" if args.task else "the checkpoint's own task (no --task)"
            raise ValueError(f"{flag} does not apply to {task}: it goes with --task {', '.join(sorted(tasks))}")


def sampler_settings(args, config: dict, method, cfg, options=None) -> Settings:
    """The sampler's Settings: the threshold, window and new-token count each from its flag, else the
    checkpoint's config.json sampler entry (train.py's flags), else the default, checked, naming where a bad
    value came from (ValueError); the other fields from their flags; options a task's official preset."""
    sampler = config.get("sampler", {})
    threshold = check_threshold(args.threshold if args.threshold is not None else sampler.get("threshold", math.inf),
                                "--threshold" if args.threshold is not None else "config.json's sampler.threshold")
    window = check_window(args.window if args.window is not None else sampler.get("window", 0), method, cfg,
                          "--window" if args.window is not None else "config.json's sampler.window")
    max_new = args.max_new_tokens if args.max_new_tokens is not None else sampler.get("max_new_tokens", 64)
    return Settings(max_new, threshold, args.temperature, window, args.commit_order, args.mdlm_block,
                    args.official_blocks, config["seq_len"], options)


def main(argv=None):
    args = get_args(argv)
    try:
        check_args(args)
        threads.set_threads(args.threads)
        credentials.load_dotenv()                     # HF_TOKEN from .env (a gated Hub checkpoint)
        device = checkpoint.pick_device(args.device)   # ValueError: a device not here
        model, method, cfg, config = checkpoint.load(args.ckpt, device)
        model = prepare(model, args, device)
        task_name = args.task or config["data"]
        exclusions = args.nll_exclusions or ("official" if "source" in config else "none")   # released: official
        if task_name == "unconditional":
            settings = sampler_settings(args, config, method, cfg)
            m = generation.run(args, model, method, cfg, config, device, settings)
            return report(args, config, method, cfg, task_name, m, settings, sampled=True)
        if task_name == "lm-eval":               # lm-eval-harness tasks: one row per task, filter and metric
            head, rows, m = harness.run(args, model, method, cfg, config, device, exclusions,
                                        sampler_settings(args, config, method, cfg))
            print(markdown_table(head, rows))
            return write_json(args, {"task": task_name, "model": config["method"], "ckpt": args.ckpt,
                                     "commit_order": args.commit_order, **m})
        if task_name in zeroshot.MCQA:
            m = zeroshot.evaluate(args, task_name, model, method, cfg, config, device, exclusions)
            return report(args, config, method, cfg, task_name, m)
        if args.data or (is_corpus(config["data"]) and task_name != "rocstories"):    # ROCStories: OWT models too
            if task_name == "infill":
                settings = sampler_settings(args, config, method, cfg)
                m = evaluate_corpus(args, task_name, model, method, cfg, config, device, exclusions, settings)
                return report(args, config, method, cfg, task_name, m, settings, sampled=True)
            m = evaluate_corpus(args, task_name, model, method, cfg, config, device, exclusions)
            return report(args, config, method, cfg, task_name, m)
        data_name = config["data"] if task_name in ("likelihood", "throughput", "infill") else task_name
        data = get_task(data_name, config.get("data_options") if data_name == config["data"] else None)
        tok = get_tokenizer(config["tokenizer"])
        examples = data.load("test", args.data_dir)
        settings = sampler_settings(args, config, method, cfg, sampler_preset(data_name, tok, method))
        examples = examples[:args.limit] if args.limit else examples
        if task_name == "throughput" and len(examples) <= args.warmup:
            raise ValueError(no_examples_left(args.warmup, len(examples)))
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    stop_opts = {"im_end": True} if args.stop_on_im_end else {}
    if task_name in ("rocstories", "infill"):
        try:
            m = infill.evaluate(task_name, data, examples, model, method, cfg, tok, config, device, settings,
                                args.sentences, args.warmup, span=args.span or "step")
        except ValueError as e:
            sys.exit(f"error: {e}")
    elif task_name == "likelihood":
        m = evaluate_likelihood(model, method, cfg, tok, examples, config["seq_len"], device, args.batch_size,
                                args.seed, exclusions)
    elif task_name == "throughput":
        m = evaluate_throughput(model, method, cfg, tok, data, examples, device, settings, args.warmup,
                                args.batch_size, stop_opts, args.rounds)
    else:
        m = evaluate_accuracy(model, method, cfg, tok, data, examples, device, settings, args.batch_size,
                              args.seed, stop_opts)
        completions = m.pop("completions")
        if data_name == "cnndm":            # the official corpus-level ROUGE (bootstrap) and sacreBLEU, beside ours
            from data.cnndm import corpus_scores
            scores = corpus_scores(completions, [e["answer"] for e in examples], seed=args.seed)
            m.update({f"corpus_{k}": v for k, v in scores.items()})
    report(args, config, method, cfg, task_name, m, settings, sampled=task_name != "likelihood",
           im_end=data_name == "gsm8k" and task_name not in ("rocstories", "infill"))


def report(args, config, method, cfg, task_name, m, settings: Settings | None = None, sampled=False, im_end=False):
    """Print the metrics as a markdown row (and write them with --json). The row shows only the sampler settings
    that apply: none without sampling (sampled=False: likelihood, zero-shot), else those in the method's KNOBS
    (the threshold for the diffusion methods, window and commit order for Set Diffusion, official_blocks
    for MDLM and BD3-LM), stop_on_im_end where the task stops on it (im_end). The JSON holds every setting."""
    threshold, window = (settings.threshold, window_used(settings.window, method, cfg)) if settings else (math.inf, 0)
    m = {**run_record(config, args.ckpt, task_name, threshold, window, args.commit_order, args.stop_on_im_end,
                      args.official_blocks), **m}
    applies = {k: sampled and k in method.KNOBS for k in ("threshold", "window", "commit_order", "official_blocks")}
    applies["stop_on_im_end"] = sampled and im_end
    keys = [k for k in m if k not in ("ckpt", "ref_ckpt", "samples", "method_config", "mauve_scores")
            and applies.get(k, True)]
    print(markdown_table(keys, [[m[k] for k in keys]]))
    write_json(args, m)


def write_json(args, m: dict):
    """--json: the metrics printed above, with every setting, as one JSON file (a failed write is one line)."""
    if args.json:
        try:
            with replaced(args.json) as f:               # whole or not at all: the earlier file stays
                json.dump(m, f, indent=2)
        except OSError as e:
            sys.exit(f"error: cannot write --json {args.json} ({e.strerror}); the table above holds the same metrics")


if __name__ == "__main__":
    from common.cli import run
    run(main, "eval.py")              # Ctrl-C: one line, exit code 130
