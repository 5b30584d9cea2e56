"""Command-line input the three scripts share (train.py, sample.py, eval.py): range checks of their flags and
the --compile/--dtype settings. Prompt text to token ids lives beside the tokenizers, in data/prompts.py.

Every check raises ValueError with one line that names the flag; the scripts print it as `error: ...` and exit
with code 1, so bad input never shows a traceback.
"""
import argparse
import math
import os
import sys

import torch

from common import checkpoint
from data import CORPORA, TASKS, custom
from model import static_decoding

# ----------------------------------------------------------------------------- range checks of shared flags
# Each raises ValueError with one line that names the flag (the scripts print it as `error: ...`,
# exit code 1).


def check_threshold(tau: float, name: str = "--threshold") -> float:
    """A confidence threshold must be in (0, 1] or inf (one token per step). name: where the value came
    from."""
    if not (0 < tau <= 1 or tau == math.inf):
        raise ValueError(f"{name} {tau}: a confidence threshold must be in (0, 1], or inf for one token per "
                         "step")
    return tau


def check_window(window: int, method, cfg, name: str = "--window") -> int:
    """A sampling window must be in [1, smax] (0 = the default smax / 2); a method without a window in its
    KNOBS (all but Set Diffusion) refuses one."""
    if window and "window" not in method.KNOBS:
        raise ValueError(f"{name} {window}: only Set Diffusion has a window")
    if window and not 1 <= window <= cfg.smax:
        raise ValueError(f"{name} {window}: the window must be in [1, smax={cfg.smax}]")
    return window


def check_positive(name: str, value: int) -> int:
    """A count that must be at least 1: --batch-size, -n, --mdlm-block, --max-new-tokens of an evaluation,
    ..."""
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def check_nonnegative(name: str, value: int, zero: str = "") -> int:
    """A count that may be 0 (zero: what 0 means, shown in the message, e.g. "0 = all")."""
    if value < 0:
        raise ValueError(f"{name} must be 0 or more{f' ({zero})' if zero else ''}, got {value}")
    return value


def check_temperature(t: float, name: str = "--temperature") -> float:
    """A sampling temperature: a finite number >= 0 (0 = greedy)."""
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"{name} {t}: the temperature must be a finite number >= 0 (0 = greedy)")
    return t


def check_output_file(path: str, flag: str = "--json") -> str:
    """An output file that will be written at the end: its folder must exist and be writable now."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path} is a folder: give a file name in it")
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {path}: the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{flag} {path}: the folder {folder} is not writable")
    return path


def no_examples_left(warmup: int, n: int) -> str:
    return (f"--warmup {warmup} leaves no example to measure: only {n} example(s) are evaluated; "
            f"raise --limit above --warmup (or lower --warmup)")


# ----------------------------------------------------------------------------- train.py's flags

def data_spec(spec: str) -> str:
    """argparse type of --data: a corpus (owt, lm1b, shakespeare, text:PATH) or a task (custom.check_spec)."""
    if spec in CORPORA or spec.startswith("text:") and spec[len("text:"):]:
        return spec
    try:
        return custom.check_spec(spec)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"invalid choice: {spec!r} (choose {', '.join(TASKS)}, jsonl:PATH "
                                         f"or hf:ORG/NAME); or a corpus: {', '.join(CORPORA)} or "
                                         "text:PATH") from None


def check_train_args(args):
    """Every flag in its range, before any work (ValueError, one line); counts and the threshold with the
    checks eval.py and sample.py use."""
    for name in ("max_iters", "batch_size", "grad_accum", "save_every", "eval_limit", "n_layer", "n_embd",
                 "n_head", "block_size"):
        check_positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.max_new_tokens is not None:
        check_positive("--max-new-tokens", args.max_new_tokens)
    for name, zero in (("n_kv_head", "0 = n_head"), ("warmup", ""), ("eval_every", "0 = at the end"),
                       ("keep_every", "0 = none"), ("seq_len", "0 = the task's"), ("window", "0 = smax / 2")):
        check_nonnegative("--" + name.replace("_", "-"), getattr(args, name), zero)
    if args.seq_len == 1:
        raise ValueError("--seq-len 1: the context must be at least 2 tokens (one to condition on, one to "
                         "predict); 0 = the task's default")
    if args.smax < 2:
        raise ValueError(f"--smax must be at least 2, got {args.smax}")
    for flag, value, ok, rule in [("--lr", args.lr, args.lr > 0, "> 0"),
                                  ("--final-lr", args.final_lr, args.final_lr >= 0, ">= 0"),
                                  ("--weight-decay", args.weight_decay, args.weight_decay >= 0, ">= 0"),
                                  ("--beta2", args.beta2, 0 <= args.beta2 < 1, "in [0, 1)"),
                                  ("--grad-clip", args.grad_clip, args.grad_clip >= 0, ">= 0 (0 = off)"),
                                  ("--ema", args.ema, 0 <= args.ema < 1, "in [0, 1) (0 = off)"),
                                  ("--dist-timeout", args.dist_timeout, args.dist_timeout > 0, "> 0")]:
        if not (math.isfinite(value) and ok):
            raise ValueError(f"{flag} must be a finite number {rule}, got {value}")
    check_threshold(args.threshold)
    method = checkpoint.METHODS[args.model]
    if args.window and "window" not in method.KNOBS:
        raise ValueError(f"--window {args.window}: only Set Diffusion has a window")
    if not 0 <= args.infill <= 1:
        raise ValueError(f"--infill must be a fraction in [0, 1], got {args.infill}")
    if args.infill and "infill" not in checkpoint.METHOD_CONFIGS[args.model].__dataclass_fields__:
        raise ValueError(f"--infill {args.infill}: only Set Diffusion trains infilling orders")
    if args.fsdp and args.eval_every:
        raise ValueError("--fsdp evaluates once, at the end, from the saved checkpoint: drop --eval-every")
    if args.window > args.smax:
        raise ValueError(f"--window {args.window} is larger than --smax {args.smax}")


# ----------------------------------------------------------------------------- model settings

def speed_args(p):
    """--compile, --dtype and --threads, shared by eval.py and sample.py."""
    p.add_argument("--compile", action="store_true", help="static-shape decoding compiled with torch.compile "
                   "(CUDA graphs on CUDA); the first calls pay the compile time")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="weights and activations (the official evaluation runs float32)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads of torch (0 = the cores other jobs "
                   "leave free, by the load average; with a short OpenMP spin wait either way: "
                   "common/threads.py)")


def load_for_inference(args):
    """What eval.py and sample.py do before any work with a checkpoint: --threads, HF_TOKEN from a .env (a
    gated Hub checkpoint), --device checked against the machine, the checkpoint loaded, in --dtype, with
    --compile. Returns (device, model, method module, method config, config dict); a bad value is a ValueError
    (one line)."""
    from common import credentials, threads
    threads.set_threads(args.threads)
    credentials.load_dotenv()
    device = checkpoint.pick_device(args.device)
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


# ----------------------------------------------------------------------------- the scripts' entry point

def run(main, script: str):
    """A script's entry point (eval.py, sample.py): main() with Ctrl-C turned into one line on stderr and exit
    code 130, the shell's for an interrupted command, instead of a traceback. Nothing is left half-written:
    the scripts write their files whole, at the end (common/files.replaced removes an unfinished one)."""
    try:
        main()
    except KeyboardInterrupt:
        print(f"\n{script}: interrupted (Ctrl-C); no file was written", file=sys.stderr)
        sys.exit(130)
