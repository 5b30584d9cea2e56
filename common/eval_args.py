"""eval.py's command line, and what eval.py and sample.py share before any work: eval.py's flags, grouped as
--help shows them (the paper tasks' in their own groups), their checks before anything is loaded, and the
checkpoint loaded in --dtype with --compile. Nothing of paper/ is imported here: eval.py imports a paper
task's module only when --task names it. The checks all three scripts share: common/cli.py.

    parser(description) / check(args)     eval.py's flags; range checks, a flag a task does not read refused
    load_for_inference(args)              --threads, --device, the checkpoint in --dtype with --compile
    check_output_file(path, flag)         an output file (--json, --replies, --plot) that can be written
"""
import argparse
import os

import torch

from common import checkpoint
from common.cli import (check_nonnegative, check_positive, load_credentials, pick_device, refuse_unused,
                        set_threads)
from data import files, is_corpus
from data.mcqa import NAMES as MCQA
from model import static_decoding
from sampling import check_temperature, check_threshold

ACCURACY = ("arith", "gsm8k", "cnndm")                       # generation accuracy of a task
PAPER = ("rocstories", "unconditional", *MCQA, "lm-eval")  # the paper's runners (paper/), imported when named
TASKS = [*ACCURACY, "infill", "likelihood", "throughput", *PAPER]
SPANS = ("step", "number", "operand", "verb", "word", "line")


def parser(description: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eval.py", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="checkpoint directory (written by train.py) or a released "
                   "key")
    p.add_argument("--task", choices=TASKS, default=None, help="what to measure (default: the checkpoint's "
                   "task)")
    p.add_argument("--data-dir", default=None, help="local folder with the task's train/test .jsonl")
    p.add_argument("--data", default=None, help="likelihood or infill on a corpus: owt, lm1b, shakespeare, "
                   "text:PATH")
    p.add_argument("--limit", type=int, default=0, help="evaluate the first N held-out examples (0 = all)")
    p.add_argument("--batch-size", type=int, default=32, help="problems generated (or rows scored) at once")
    p.add_argument("--device", default="auto", help="cuda, mps, cpu or auto")
    p.add_argument("--seed", type=int, default=0, help="seed of sampling, noise and orders")
    p.add_argument("--json", default=None, help="also write the metrics to this JSON file (tables of "
                   "several: python -m paper.results)")
    p.add_argument("--replies", default=None, help="also write every example, one JSON line each (lm-eval's "
                   "--log_samples): its prompt, the reply, the gold answer, what each scorer extracted and "
                   "its verdict (accuracy tasks, rocstories, infill, unconditional, lm-eval)")
    speed_args(p)
    g = p.add_argument_group("sampler")
    g.add_argument("--threshold", type=float, default=None, help="confidence threshold tau (inf = 1 "
                   "token/step)")
    g.add_argument("--window", type=int, default=None, help="Set Diffusion window W (default smax / 2)")
    g.add_argument("--commit-order", choices=["l2r", "fht"], default="l2r",
                   help="Set Diffusion: commit a step's tokens left to right (the official throughput runs) "
                        "or by first-hitting time (the official accuracy runs)")
    g.add_argument("--mdlm-block", type=int, default=32, help="MDLM sampler block length")
    g.add_argument("--official", action="store_true",
                   help="decode as the official code (released models): its block alignment, BD3-LM "
                        "infilling, penalty counts, cache crop (docs/fidelity.md)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens to generate per problem (unconditional: default seq_len - 1)")
    g.add_argument("--stop-on-im-end", action="store_true", help="GSM8K: also stop at <|im_end|> (official "
                   "option)")
    g = p.add_argument_group("likelihood, throughput, infill")
    g.add_argument("--precision", choices=["amp_bf16", "fp32"], default="amp_bf16",
                   help="likelihood: the forward under bfloat16 autocast, as the official eval (its composer "
                        "trainer's amp_bf16; the log-softmax in float32), or all in float32")
    g.add_argument("--nll-exclusions", choices=["official", "none"], default=None,
                   help="'official' drops pad-id (EOS) targets and position 0 from Set Diffusion's NLL as "
                        "the official eval does (default for released checkpoints), 'none' counts all")
    g.add_argument("--warmup", type=int, default=5, help="throughput, infill, unconditional: warm-up "
                   "examples (samples) before timing")
    g.add_argument("--rounds", type=int, default=3, help="throughput: times the measured prompts are "
                   "decoded; the median round is reported with the rounds' range")
    g.add_argument("--span", choices=SPANS, default=None,
                   help="infill: what is masked. The shipped task: its middle reasoning step (step, the "
                        "default: decided by the left context); its starting amount (number), its last "
                        "action's amount (operand) or its first verb (verb), each decided by the reply to "
                        "its right; a text corpus: one word (word, the default) or one line (line)")
    paper_groups(p)
    return p


def paper_groups(p: argparse.ArgumentParser):
    """The flags of the paper's tasks, in their own groups of --help."""
    g = p.add_argument_group("paper tasks: unconditional samples (paper/generation.py, paper/hf_metrics.py)")
    g.add_argument("--ref-ckpt", default=None, help="the AR checkpoint that scores the samples (generative "
                   "perplexity), trained on the same data with the same tokenizer")
    g.add_argument("--ppl-model", default=None, help="also the generative perplexity under this Hugging Face "
                   "causal LM (Hub id or local directory; the paper's: gpt2-large) (optional: transformers)")
    g.add_argument("--mauve-ref", default=None, help="MAUVE against these reference texts (.txt one a line, "
                   ".jsonl, .json), mean and std over 5 subsets of 1000 as the official Table 4 (optional: "
                   "mauve-text)")
    g.add_argument("--mauve-encoder", default=None, help="the Hugging Face encoder whose features MAUVE "
                   "compares (default answerdotai/ModernBERT-large, the paper's)")
    g.add_argument("-n", type=int, default=20, help="samples scored, at batch 1")
    g.add_argument("--no-redraw", action="store_true", help="score every sample as drawn (the official "
                   "redraws one whose unigram entropy is < 4 nats or that holds <= 50 tokens)")
    g.add_argument("--throughput-run", action="store_true",
                   help="unconditional, rocstories: the official's throughput run, timed after --warmup and "
                        "scored by nothing (no ROUGE; samples drawn whole: no stop rule, no redraw, no "
                        "scorer); paper.results takes a table's tokens/s from it")
    g = p.add_argument_group("paper tasks: rocstories, hellaswag/piqa/siqa, lm-eval (paper/infill.py, "
                             "zeroshot.py, harness.py)")
    g.add_argument("--sentences", type=int, default=1, choices=[1, 3], help="rocstories: sentences to infill")
    g.add_argument("--recipe", choices=["h100", "script", "suite"], default=None,
                   help="the official recipe where the official code holds two (default: the first). "
                        "rocstories (data/rocstories.py): h100, its H100 wrapper (repetition penalty 1.2 "
                        "counting the right context, Set Diffusion caching the right context first) or "
                        "suite, its suite runner's rows (penalty 1.1 for one sentence, 1.5 for three, the "
                        "right context not counted, nor cached). likelihood of owt or lm1b (data/owt.py): "
                        "script, its likelihood script (Set Diffusion's smax = 2d) or suite, its suite "
                        "runner's rows (OWT's Set Diffusion at max_block_size = d; LM1B's as the script)")
    g.add_argument("--mc-samples", "--samples", dest="samples", type=int, default=1,
                   help="hellaswag/piqa/siqa, "
                   "lm-eval: NELBO draws averaged per option (1 = the official), noise seeded per request")
    g.add_argument("--tasks", default=None, help="lm-eval: task names, comma-separated (lm-eval's or "
                   "--include-path's)")
    g.add_argument("--include-path", default=None, help="lm-eval: a folder of task YAML files (local tasks)")
    g.add_argument("--num-fewshot", type=int, default=None, help="lm-eval: few-shot examples (default: the "
                   "task's)")


# Each flag that only some tasks read, and those tasks: given (not its default) to another, it is refused
# (common/cli.py's refuse_unused, the rule of every script's flags).
SAMPLED = ("rocstories", "infill", "throughput", "unconditional", "lm-eval")
READERS = {"data_dir": set(TASKS) - {"lm-eval"}, "n": {"unconditional"},
           "replies": {*ACCURACY, "rocstories", "infill", "unconditional", "lm-eval"},
           "precision": {"likelihood"}, "recipe": {"rocstories", "likelihood"},
           "throughput_run": {"rocstories", "unconditional"},
           "no_redraw": {"unconditional"}, "samples": {*MCQA, "lm-eval"}, "rounds": {"throughput"},
           "limit": set(TASKS) - {"unconditional"}, "batch_size": set(TASKS) - {"rocstories", "infill"},
           **dict.fromkeys(["threshold", "window", "commit_order", "mdlm_block", "official"],
                           {*ACCURACY, *SAMPLED}),
           "temperature": {*ACCURACY, *SAMPLED} - {"unconditional"},
           "max_new_tokens": {*ACCURACY, "throughput", "unconditional", "lm-eval"},
           "stop_on_im_end": {"gsm8k", "throughput", "lm-eval"}, "sentences": {"rocstories"},
           "span": {"infill"}, "warmup": {"throughput", "infill", "rocstories", "unconditional"},
           "nll_exclusions": {"likelihood", *MCQA, "lm-eval"}, "data": {"likelihood", "infill"},
           "seed": set(TASKS) - {"throughput", "rocstories", "infill"},
           **dict.fromkeys(["tasks", "include_path", "num_fewshot"], {"lm-eval"})}


def check(args):
    """The range checks of eval.py's flags, before anything is loaded (ValueError: one line). No --task: the
    checkpoint's own task, an accuracy task or a corpus' likelihood."""
    for flag, value in (("--batch-size", args.batch_size), ("--mdlm-block", args.mdlm_block), ("-n", args.n),
                        ("--mc-samples", args.samples)):
        check_positive(flag, value)
    if check_positive("--rounds", args.rounds) > 100:         # each round decodes every measured prompt again
        raise ValueError(f"--rounds must be at most 100 (the paper's 3), got {args.rounds}")
    check_nonnegative("--limit", args.limit, "0 = all")
    check_nonnegative("--warmup", args.warmup)
    check_temperature(args.temperature, "--temperature")
    if args.max_new_tokens is not None:
        check_positive("--max-new-tokens", args.max_new_tokens)
    if args.threshold is not None:
        check_threshold(args.threshold, "--threshold")
    for flag, path in (("--json", args.json), ("--replies", args.replies)):
        if path:
            check_output_file(path, flag)
            # the file a write replaces is where a link leads (a link named r.jsonl to config.json too)
            folder, name = os.path.split(os.path.realpath(path))
            if name in checkpoint.FILES and checkpoint.complete(folder):
                raise ValueError(f"{flag} {path} would replace a file of the checkpoint in {folder}: give "
                                 f"another name")
    if args.json and args.replies and os.path.realpath(args.json) == os.path.realpath(args.replies) \
            and not files.stream(args.json):
        raise ValueError(f"--replies {args.replies} is the --json file too: give each its own name (the "
                         f"replies go beside the metrics, e.g. {os.path.splitext(args.json)[0]}.jsonl)")
    scorers = [f for f, v in (("--ref-ckpt", args.ref_ckpt), ("--ppl-model", args.ppl_model),
                              ("--mauve-ref", args.mauve_ref), ("--mauve-encoder", args.mauve_encoder)) if v]
    if args.task != "unconditional" and scorers:
        raise ValueError(f"{scorers[0]} goes with --task unconditional (it scores unconditional samples)")
    runs = {args.task} if args.task else {*ACCURACY, "likelihood"}
    refuse_unused(parser(), args, READERS.get, runs,
                  f"--task {args.task}" if args.task else "the checkpoint's own task (no --task)", "--task ")
    if args.task == "unconditional":
        check_scorers(args)


def recipe(args, recipes: dict | None, where: str) -> str | None:
    """--recipe where a run reads it: one of recipes (a data module's RECIPES, the first the default); None
    where there are none (where: the run, in the line). A recipe not there: ValueError, one line."""
    if recipes is None:
        if args.recipe:
            raise ValueError(f"--recipe {args.recipe}: {where} has no official recipes (--task rocstories "
                             f"and the likelihood of owt and lm1b have)")
        return None
    name = args.recipe or next(iter(recipes))
    if name not in recipes:
        raise ValueError(f"--recipe {name} is not a recipe of {where}: choose {', '.join(recipes)}")
    return name


def check_scorers(args):
    """--task unconditional needs a scorer, each installed (paper/hf_metrics.py, imported only here), or
    --throughput-run (which takes none: the official's throughput runs score nothing). --data-dir goes with
    --mauve-ref CORPUS (its held-out rows are the references)."""
    scorers = [f for f, v in (("--ref-ckpt", args.ref_ckpt), ("--ppl-model", args.ppl_model),
                              ("--mauve-ref", args.mauve_ref)) if v]
    if not scorers and not args.throughput_run:
        raise ValueError("--task unconditional needs --ref-ckpt DIR, an AR checkpoint trained on the same "
                         "data (it scores the samples), --ppl-model NAME (a Hugging Face causal LM) or "
                         "--mauve-ref FILE; or --throughput-run, which scores nothing")
    if scorers and args.throughput_run:
        raise ValueError(f"{scorers[0]} scores samples and --throughput-run scores none (its samples are "
                         f"drawn whole, with no stop rule): run them as two eval.py commands")
    if args.mauve_encoder and not args.mauve_ref:
        raise ValueError("--mauve-encoder goes with --mauve-ref FILE (the reference texts MAUVE compares "
                         "with)")
    if args.data_dir and not (args.mauve_ref and is_corpus(args.mauve_ref)):
        raise ValueError("--data-dir goes with --task unconditional only with --mauve-ref owt (or another "
                         "corpus: its held-out rows, read from --data-dir, are MAUVE's references)")


# ----------------------------------------------------------------------------- eval.py's and sample.py's

def check_output_file(path: str, flag: str = "--json") -> str:
    """An output file that will be written at the end: a stream or device (written in place) this process
    may write, or a file it may write (not write-protected) in an existing folder it may write (the file is
    replaced through a temporary file there; a symlink's is the folder it leads to)."""
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path} is a folder: give a file name in it")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{flag} {path} is write-protected: make it writable (chmod u+w) or give another "
                         f"file")
    if files.stream(path):
        return path
    folder = os.path.dirname(os.path.realpath(path) if os.path.islink(path) else path) or "."
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {path}: the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{flag} {path}: the folder {folder} is not writable")
    return path


def no_examples_left(warmup: int, n: int) -> str:
    return (f"--warmup {warmup} leaves no example to measure: only {n} example(s) are evaluated; "
            f"raise --limit above --warmup (or lower --warmup)")


def speed_args(p):
    """--compile, --dtype and --threads, shared by eval.py and sample.py."""
    p.add_argument("--compile", action="store_true", help="static-shape decoding compiled with torch.compile "
                   "(CUDA graphs on CUDA); the first calls pay the compile time")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="weights and activations (the official evaluation runs float32)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads of torch (0 = the cores other jobs "
                   "leave free, by the load average; with a short OpenMP spin wait either way: "
                   "common/cli.py)")


def load_for_inference(args):
    """What eval.py and sample.py do before any work with a checkpoint: --threads, HF_TOKEN from a .env (a
    gated Hub checkpoint), --device checked against the machine, the checkpoint loaded, in --dtype, with
    --compile. Returns (device, model, method module, method config, config dict); a bad value is a ValueError
    (one line)."""
    set_threads(args.threads)
    load_credentials()
    device = pick_device(args.device)
    model, method, cfg, config = checkpoint.load(args.ckpt, device)
    return device, prepare(model, args, device), method, cfg, config


def prepare(model, args, device):
    """The loaded model in --dtype, with --compile's static-shape decoding."""
    model = model.to(getattr(torch, args.dtype))
    if args.compile:
        static_decoding(model, compile=True, mode="reduce-overhead" if device.startswith("cuda") else None)
    return model


def unconditional_tokens(max_new_tokens, seq_len: int) -> int:
    """eval.py --task unconditional's number of new tokens: --max-new-tokens, or seq_len - 1 (all that fits
    after the BOS token); a number that does not fit is a ValueError (one line)."""
    max_new = max_new_tokens if max_new_tokens is not None else seq_len - 1
    if max_new < 1:
        raise ValueError(f"--task unconditional with --max-new-tokens {max_new}: it samples from BOS alone, "
                         f"so give --max-new-tokens 1 or more (default: seq_len - 1 = {seq_len - 1})")
    if 1 + max_new > seq_len:
        raise ValueError(f"--max-new-tokens {max_new} and the BOS token are more than the model's context "
                         f"(seq_len={seq_len}): at most {seq_len - 1} new tokens fit")
    return max_new
