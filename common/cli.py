"""Command-line input the three scripts share (train.py, sample.py, eval.py): range checks of their flags and
the --compile/--dtype settings. Prompt text to token ids lives beside the tokenizers, in data/prompts.py.

Every check raises ValueError with one line that names the flag; the scripts print it as `error: ...` and exit
with code 1, so bad input never shows a traceback.
"""
import argparse
import math
import os
import signal
import sys

import torch

from common import checkpoint, methods, runtime, threads
from data import CORPORA, TASKS, custom
from model import static_decoding

# ----------------------------------------------------------------------------- range checks of shared flags
# Each raises ValueError with one line that names the flag (the scripts print it as `error: ...`,
# exit code 1).


def check_window(window: int, method, cfg, name: str = "--window") -> int:
    """A window given to a method without one (all but Set Diffusion: "window" not in its KNOBS) is refused;
    its range is the method's own rule (SetDiffusionConfig.window)."""
    if window and "window" not in method.KNOBS:
        raise ValueError(f"{name} {window}: only Set Diffusion has a window")
    return cfg.window(window, name) if window else window


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


def check_output_file(path: str, flag: str = "--json") -> str:
    """An output file that will be written at the end: a stream or device (written in place) this process
    may write, or a file it may write (not write-protected) in an existing folder it may write (the file is
    replaced through a temporary file there; a symlink's is the folder it leads to)."""
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path} is a folder: give a file name in it")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{flag} {path} is write-protected: make it writable (chmod u+w) or give another "
                         f"file")
    from data import files                  # what writes results (eval.py, sample.py; not train.py)
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


# ----------------------------------------------------------------------------- flags that would do nothing
# The one rule of the three scripts: a flag given (its value not its default) that would do nothing where it
# is given is refused in one line (`refuse_unused`), never ignored and never written into a config.json. What
# a flag needs to act is data: the flag it refines (PARENTS), and for train.py, whose run trains one method,
# the method setting it sets (SETTINGS: a field of the method's config or a sampler knob in its KNOBS; a
# method without it refuses the flag). eval.py adds the tasks that read each of its flags
# (eval_args.READERS). Sampler settings that one eval.py or sample.py command may share over several methods
# (sample.py's panels, a sweep's --threshold or --commit-order) act where the method has them, and eval.py's
# row shows only those that did; --window, which only Set Diffusion has, is check_window's.
PARENTS = {"infill_len": "infill", "infill_added": "infill", "top_p": "temperature"}
SETTINGS = {"smax": "smax", "block_size": "block_size", "nelbo": "nelbo", "infill": "infill",
            "infill_len": "infill", "infill_added": "infill", "window": "window", "threshold": "threshold"}
FLAGS = {"n": "-n", "samples": "--mc-samples"}          # a flag whose name is not --dest-with-dashes


def flag(dest: str) -> str:
    return FLAGS.get(dest, "--" + dest.replace("_", "-"))


def methods_with(setting: str) -> set[str]:
    """The methods that have a setting: a field of their config, or a knob their sampler reads."""
    return {name for name in methods.NAMES if setting in methods.config_class(name).__dataclass_fields__
            or setting in methods.method(name).KNOBS}


def method_needs(dest: str) -> set[str] | None:
    """refuse_unused's needs by method: the methods a flag acts with (SETTINGS), None for any."""
    return methods_with(SETTINGS[dest]) if dest in SETTINGS else None


def refuse_unused(parser, args, needs, here: set, where: str, kind: str):
    """Refuse (ValueError, one line) the first flag of args given (not parser's default) that would do
    nothing: its parent flag (PARENTS) not given, or none of what it needs here (needs(dest): the methods or
    tasks it acts with, None for any). where names here in the line ("--model ar"), kind what chooses it
    ("--model ")."""
    def given(dest):
        return dest in vars(args) and getattr(args, dest) != parser.get_default(dest)
    for dest in [d for d in vars(args) if given(d)]:
        parent = PARENTS.get(dest)
        if parent is not None and parent in vars(args) and not given(parent):
            raise ValueError(f"{flag(dest)} does nothing without {flag(parent)}: add {flag(parent)}, or drop "
                             f"{flag(dest)}")
        wanted = needs(dest)
        if wanted is not None and not wanted & here:
            raise ValueError(f"{flag(dest)} does not apply to {where}: it goes with {kind}"
                             f"{', '.join(sorted(wanted))}")


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
    device = runtime.pick_device(args.device)
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

def run(main, script: str, why: str = "no file was written"):
    """A script's entry point: main() with Ctrl-C turned into one line on stderr (`script: interrupted
    (Ctrl-C); why`) and exit code 130, the shell's for an interrupted command, instead of a traceback; once
    the script is exiting with a line, a second Ctrl-C is ignored (it would land in torch's atexit handlers
    and print their traceback). Nothing is left half-written: the scripts write their files whole, at the
    end (data/files.replaced removes an unfinished one). Before, while the script imports, common/threads.py
    answers Ctrl-C."""
    threads.started()
    try:
        main()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"\n{script}: interrupted (Ctrl-C); {why}", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise
