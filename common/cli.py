"""The scripts' command line (train.py, sample.py, eval.py; cluster/slurm.py reads train.py's): how a script
starts, its flags with their range checks, and how it ends. Every check raises ValueError with one line that
names the flag; the scripts print it as `error: ...` and exit with code 1: bad input never shows a traceback.

    (on import)                       a short OpenMP spin wait before torch loads, and Ctrl-C while the script
                                      imports answered in one line: so every script imports this module first
    train_parser / parse_train / check_train    train.py's flags, read as train.py and its launcher read them
    check_positive, check_window, refuse_unused, ...   the checks the three scripts share
    set_threads(n) / pick_device(name)               --threads / --device
    run(main, script)                 a script's entry point: Ctrl-C one line, exit code 130

eval.py's and sample.py's own flags, and loading a checkpoint for them: common/eval_args.py.
"""
import argparse
import math
import os
import signal
import sys

# ----------------------------------------------------------------------- before torch loads: OpenMP's spin
# torch's threads come from OpenMP (libgomp), whose idle threads spin GOMP_SPINCOUNT iterations (300,000 by
# default) before they sleep: on an idle machine that makes 2 threads faster than 1; where another job holds a
# core, the two spin while waiting for each other's turn and training becomes slower than with 1
# (docs/speed.md measures both). A short spin (SPIN) keeps most of the one and nearly all of the other, so the
# scripts set it unless the user has: before torch loads (libgomp reads it then), which is why the scripts
# import this module first and why its own imports of torch come after quiet_spin(). A second thread that
# shares a core still slows small models down, so --threads 0 uses the cores the load average leaves free.
# Being the first import, it also answers a Ctrl-C while the script imports (torch takes 1-3 s): one line,
# exit code 130.

SPIN = "1000"   # GOMP_SPINCOUNT: enough for the next parallel region on an idle core, short on a busy one
CORES = []      # torch's own thread count (one per physical core), read before set_threads changes it


def quiet_spin():
    """A short OpenMP spin wait, unless the user set one (GOMP_SPINCOUNT or OMP_WAIT_POLICY) themselves."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN


def free_cores(cores: int, load: float) -> int:
    """Threads for `cores` when `load` jobs already run (the 1-minute load average): the cores they leave, at
    least one: 2 cores idle -> 2; one other job -> 1."""
    return max(1, min(cores, round(cores - load)))


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. a SLURM or taskset share), else all."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def set_threads(n: int):
    """--threads N: torch's intra-op threads; 0 = the cores other jobs leave free (free_cores of torch's
    default, one per physical core). N below 0 or above the usable cores (more threads only wait for each
    other, and OpenMP crashes past some thousands) is a ValueError of one line, before torch sees it."""
    if not 0 <= n <= usable_cores():
        raise ValueError(f"--threads must be in [0, {usable_cores()}] (the CPUs this process may use; 0 = "
                         f"the cores other jobs leave free), got {n}")
    CORES[:] = CORES or [torch.get_num_threads()]
    if n == 0:
        n = free_cores(CORES[0], os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0)
    torch.set_num_threads(n)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ("train.py", "eval.py", "sample.py")      # each runs its main through `run`


def interrupted_while_starting(signum, frame):
    """SIGINT before the script's main runs: one line, exit code 130. Nothing has been written yet, so the
    process ends at once (os._exit): a KeyboardInterrupt raised in the script's imports comes before
    `run`'s try (a traceback), and would unwind through a half-imported torch."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    script = os.path.basename(sys.modules["__main__"].__file__)
    sys.stdout.flush()
    print(f"\n{script}: interrupted (Ctrl-C) while starting; nothing was written", file=sys.stderr,
          flush=True)
    os._exit(130)


def quiet_start():
    """Ctrl-C answered by interrupted_while_starting while one of SCRIPTS, run as a script, imports, unless
    SIGINT is not Python's default (ignored, as in a background job); `run` takes it back (started).
    A module importing this one (a test, a notebook) keeps its own Ctrl-C."""
    main = os.path.abspath(getattr(sys.modules.get("__main__"), "__file__", None) or "")
    if main in [os.path.join(ROOT, s) for s in SCRIPTS] and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, interrupted_while_starting)


def started():
    """The script's main runs (`run`): Ctrl-C is a KeyboardInterrupt again, which run answers."""
    if signal.getsignal(signal.SIGINT) is interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)


quiet_spin()
quiet_start()

import torch  # noqa: E402  (this and what follows load torch: after quiet_spin)

from common.checkpoint import CONFIGS, METHODS  # noqa: E402
from data import CORPORA, TASKS, custom  # noqa: E402
from model import PRESETS  # noqa: E402
from sampling import check_threshold  # noqa: E402

# ----------------------------------------------------------------------------- range checks the scripts share

def check_window(window: int, method, cfg, name: str = "--window") -> int:
    """A window given to a method without one (all but Set Diffusion: "setdiffusion_window" not in its KNOBS)
    is refused; its range is the method's own rule (SetDiffusionConfig.window)."""
    if window and "setdiffusion_window" not in method.KNOBS:
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


# ----------------------------------------------------------------------------- flags that would do nothing
# The one rule of the three scripts: a flag given (not its default) that would do nothing where it is given is
# refused in one line (`refuse_unused`), never ignored nor written into a config.json. What a flag needs to
# act is data: the flag it refines (PARENTS); for train.py, the method setting it sets (SETTINGS: a field of
# the method's config or a sampler knob in its KNOBS); for eval.py, the tasks that read it
# (eval_args.READERS). Sampler settings one eval.py or sample.py command shares over several methods act where
# the method has them (eval.py's row shows only those); --window, which only Set Diffusion has, is
# check_window's.
PARENTS = {"infill_len": "infill", "infill_added": "infill", "top_p": "temperature"}
SETTINGS = {"smax": "smax", "block_size": "block_size", "nelbo": "nelbo", "infill": "infill",
            "infill_len": "infill", "infill_added": "infill", "window": "setdiffusion_window",
            "threshold": "threshold"}
FLAGS = {"n": "-n", "samples": "--mc-samples"}          # a flag whose name is not --dest-with-dashes


def flag(dest: str) -> str:
    return FLAGS.get(dest, "--" + dest.replace("_", "-"))


def methods_with(setting: str) -> set[str]:
    """The methods that have a setting: a field of their config, or a knob their sampler reads."""
    return {name for name, method in METHODS.items() if setting in CONFIGS[name].__dataclass_fields__
            or setting in method.KNOBS}


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


class HelpFormat(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help keeps the docstring's layout and shows every default."""


def train_parser(description: str | None = None) -> argparse.ArgumentParser:
    """train.py's flags, grouped as --help shows them."""
    p = argparse.ArgumentParser(prog="train.py", description=description, formatter_class=HelpFormat)
    g = p.add_argument_group("method")
    g.add_argument("--model", required=True, choices=list(METHODS),
                   help="which objective to train")
    g.add_argument("--smax", type=int, default=8, help="Set Diffusion: max set size / reorder reach (= 2d)")
    g.add_argument("--block-size", type=int, default=4, help="BD3-LM: tokens per block S")
    g.add_argument("--nelbo", action="store_true", help="MDLM/BD3-LM: train on the 1/t-weighted NELBO")
    g.add_argument("--infill", type=float, default=0.0, help="Set Diffusion, NOT in the paper: the fraction "
                   "of rows trained in an infilling order (a random span revealed after everything else; 0 = "
                   "the paper)")
    g.add_argument("--infill-len", default="uniform", choices=["uniform", "loguniform"], help="Set Diffusion "
                   "--infill: how a span's length n <= a quarter of the row is drawn (loguniform: "
                   "P(n) ~ 1/n)")
    g.add_argument("--infill-added", action="store_true", help="Set Diffusion --infill: the infilling rows "
                   "are copies added to the batch (each row also keeps its paper order), not replacements")
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=int, default=4, help="transformer blocks")
    g.add_argument("--n-embd", type=int, default=128, help="width")
    g.add_argument("--n-head", type=int, default=4, help="attention heads")
    g.add_argument("--n-kv-head", type=int, default=0, help="key/value heads (0 = n_head)")
    g.add_argument("--preset", default="", choices=["", *PRESETS],
                   help="a named model shape (model.PRESETS): cnndm = the official from-scratch CNN/DM Qwen3 "
                        "(28 layers, width 256), dit-owt/dit-lm1b = the paper's DiTs; --n-layer/--n-embd/... "
                        "given beside it replace its fields (a small DiT)")
    g.add_argument("--init-from", default="",
                   help="start from these weights: a checkpoint of ours, any method (a training folder or a "
                        "--keep-every snapshot OUT-stepN: its eval weights), or a Qwen3 (Hub id or "
                        "directory); the shape comes from it")
    g = p.add_argument_group("data")
    g.add_argument("--data", default="arith", type=data_spec,
                   help=f"training task: {', '.join(TASKS)}, jsonl:PATH or hf:ORG/NAME (your own data); or a "
                        f"corpus of token rows: {', '.join(CORPORA)} or text:PATH (a UTF-8 file or folder of "
                        ".txt)")
    g.add_argument("--data-dir", default=None, help="local folder with the task's train/test .jsonl; for a "
                                                    "corpus, its local copy and token cache (default "
                                                    "~/.cache/setdiffusion)")
    g.add_argument("--seq-len", type=int, default=0, help="sequence length L (0 = the task's default; text: "
                   "256)")
    g.add_argument("--predict-padding", action="store_true",
                   help="train on the padding too (attended, predicted), so a bidirectional model learns "
                        "where a reply ends; the official code's predict_padding")
    g.add_argument("--tokenizer", default="", help="tokenizer name (default: the task's; text:PATH: bytes, "
                   "or gpt2)")
    custom.add_args(p)
    g = p.add_argument_group("optimisation")
    g.add_argument("--max-iters", type=int, default=3000, help="optimizer steps")
    g.add_argument("--batch-size", type=int, default=16, help="sequences per step per process")
    g.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step")
    g.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    g.add_argument("--final-lr", type=float, default=0.1, help="cosine decays to this fraction of --lr")
    g.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    g.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay")
    g.add_argument("--beta2", type=float, default=0.98, help="AdamW beta2 (the OWT/LM1B recipe: 0.999)")
    g.add_argument("--grad-clip", type=float, default=1.0, help="clip the gradient norm (0 = off)")
    g.add_argument("--ema", type=float, default=0.995,
                   help="EMA decay of the weights, used at eval (0 = off)")
    g = p.add_argument_group("system")
    g.add_argument("--device", default="auto", help="cuda, mps, cpu or auto (cuda > mps > cpu)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="autocast dtype (auto: bfloat16 on CUDA, float32 elsewhere)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (slow start)")
    g.add_argument("--attention", default="auto", choices=["auto", "sdpa", "flex"],
                   help="training masks: dense for SDPA, or FlexAttention block masks (auto: flex on CUDA)")
    g.add_argument("--fsdp", action="store_true", help="under torchrun: shard weights, gradients and AdamW "
                   "state over the processes (FSDP2 fully_shard) instead of DDP's full copies; checkpoints "
                   "stay one file")
    g.add_argument("--seed", type=int, default=1, help="seed of weights, data order and noise")
    g.add_argument("--threads", type=int, default=0, help="CPU threads of torch (0 = the cores other jobs "
                   "leave free, by the load average; with a short OpenMP spin wait either way: "
                   "common/cli.py)")
    g.add_argument("--wandb", default="",
                   help="log to this Weights & Biases project (key from WANDB_API_KEY)")
    g.add_argument("--dist-timeout", type=float, default=60,
                   help="processes started by hand with WORLD_SIZE > 1 (not torchrun): seconds to wait for "
                   "the others")
    g = p.add_argument_group("checkpoints and evaluation")
    g.add_argument("--out-dir", default="", help="checkpoint directory (default out/<model>)")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out-dir")
    g.add_argument("--no-lock", action="store_true", help="--out-dir on a file system without file locks "
                   "(some NFS mounts, Lustre): run without OUT_DIR.lock, and start one train.py per "
                   "--out-dir yourself")
    g.add_argument("--save-every", type=int, default=500, help="checkpoint every N steps (and at the end)")
    g.add_argument("--keep-every", type=int, default=0, help="also keep the eval weights every N steps in "
                   "OUT_DIR-stepN, a checkpoint of its own (learning curves; 0 = none)")
    g.add_argument("--eval-every", type=int, default=0,
                   help="held-out accuracy (validation NLL on a corpus) every N steps (0 = at the end)")
    g.add_argument("--eval-limit", type=int, default=200,
                   help="held-out problems per evaluation (on a corpus: validation rows, spread over the "
                   "split)")
    g.add_argument("--threshold", type=float, default=math.inf, help="sampler confidence threshold tau")
    g.add_argument("--window", type=int, default=0, help="Set Diffusion window W (0 = smax / 2)")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens to generate per problem (default: 64, or seq_len when that is shorter)")
    return p


# the shape flags --preset and --init-from replace, each as a refusal names its value
SHAPE = {"n_layer": "{} layers", "n_embd": "width {}", "n_head": "{} heads",
         "n_kv_head": "{} key/value heads"}


def shape_words(keys, value) -> str:
    """Shape fields in words ('4 layers, width 128'), each its value(key); a preset's other fields by name."""
    return ", ".join(SHAPE.get(k, k + " {}").format(value(k)) for k in keys)


def parse_train(argv=None, p: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """train.py's arguments from argv (default sys.argv), with --out-dir's default out/<model> filled in, and
    a trailing slash dropped (--keep-every's OUT_DIR-stepN is then beside it, not in it; --init-from's, so
    that --resume names the run's start as it was recorded).
    With --init-from or --preset the shape comes from elsewhere, so a shape flag (or --preset) left out is
    None: one given is compared with it (common/init_from.py, check_train), even when it equals its default,
    which argparse alone cannot tell from a flag left out."""
    p = p or train_parser()
    args = p.parse_args(argv)
    if args.init_from or args.preset:
        unset = object()                # parse again with the shape flags unset: the ones left out stay so
        given = p.parse_args(argv, argparse.Namespace(**dict.fromkeys(("preset", *SHAPE), unset)))
        for k in ("preset", *SHAPE):
            if getattr(given, k) is unset:
                setattr(args, k, None)
    args.out_dir = os.path.normpath(args.out_dir or os.path.join("out", args.model))   # out/ck/ -> out/ck
    if args.init_from:                   # one folder, one spelling in config.json's run: out/ar/ -> out/ar
        args.init_from = os.path.normpath(args.init_from)
    return args


def check_train(args):
    """Every flag in its range, and none that would do nothing with --model (or without the flag it refines),
    before any work (ValueError, one line); counts and the threshold with the checks eval.py and sample.py
    use."""
    for name in ("max_iters", "batch_size", "grad_accum", "save_every", "eval_limit", "n_layer", "n_embd",
                 "n_head"):
        if getattr(args, name) is not None:
            check_positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.max_new_tokens is not None:
        check_positive("--max-new-tokens", args.max_new_tokens)
    for name, zero in (("n_kv_head", "0 = n_head"), ("warmup", ""), ("eval_every", "0 = at the end"),
                       ("keep_every", "0 = none"), ("seq_len", "0 = the task's")):
        if getattr(args, name) is not None:
            check_nonnegative("--" + name.replace("_", "-"), getattr(args, name), zero)
    if args.seq_len == 1:
        raise ValueError("--seq-len 1: the context must be at least 2 tokens (one to condition on, one to "
                         "predict); 0 = the task's default")
    for name, value, ok, rule in [("--lr", args.lr, args.lr > 0, "> 0"),
                                  ("--final-lr", args.final_lr, args.final_lr >= 0, ">= 0"),
                                  ("--weight-decay", args.weight_decay, args.weight_decay >= 0, ">= 0"),
                                  ("--beta2", args.beta2, 0 <= args.beta2 < 1, "in [0, 1)"),
                                  ("--grad-clip", args.grad_clip, args.grad_clip >= 0, ">= 0 (0 = off)"),
                                  ("--ema", args.ema, 0 <= args.ema < 1, "in [0, 1) (0 = off)"),
                                  ("--dist-timeout", args.dist_timeout, args.dist_timeout > 0, "> 0")]:
        if not (math.isfinite(value) and ok):
            raise ValueError(f"{name} must be a finite number {rule}, got {value}")
    check_threshold(args.threshold, "--threshold")
    refuse_unused(train_parser(), args, method_needs, {args.model}, f"--model {args.model}", "--model ")
    if args.fsdp and args.eval_every:
        raise ValueError("--fsdp evaluates once, at the end, from the saved checkpoint: drop --eval-every")


# ----------------------------------------------------------------------------- --device, credentials

DOTENV = os.path.join(ROOT, ".env")         # credentials the environment lacks: HF_TOKEN, WANDB_API_KEY


def load_credentials():
    """The credentials of DOTENV (git-ignored) where the environment lacks them: common/credentials.py,
    imported only when there is such a file."""
    if os.path.exists(DOTENV):
        from common import credentials
        credentials.load_dotenv(DOTENV)


def pick_device(name: str) -> str:
    """"auto" -> cuda if available, else mps, else cpu; any other name as it is, once checked (one clear line
    for a device this machine does not have)."""
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name}: not a device name; use auto, cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda" and (not torch.cuda.is_available()
                               or (dev.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"--device {name}: this torch sees {torch.cuda.device_count()} CUDA GPU(s) (a "
                         f"CPU-only build or no driver?): use --device cpu or auto")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: MPS is not available here: use --device cpu or auto")
    return name


# ----------------------------------------------------------------------------- the scripts' entry point

def run(main, script: str, why: str = "no file was written"):
    """A script's entry point: main() with Ctrl-C turned into one line on stderr (`script: interrupted
    (Ctrl-C); why`) and exit code 130, the shell's for an interrupted command, instead of a traceback; once
    the script is exiting with a line, a second Ctrl-C is ignored (it would land in torch's atexit handlers
    and print their traceback). Nothing is left half-written: the scripts write their files whole, at the
    end (data/files.replaced removes an unfinished one). Before, while the script imports, quiet_start
    answers Ctrl-C."""
    started()
    try:
        main()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"\n{script}: interrupted (Ctrl-C); {why}", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise
    except Exception as e:
        if (line := compile_failure(e)) is None:
            raise
        sys.exit(line)


def compile_failure(e: BaseException) -> str | None:
    """The one line of --compile where torch.compile cannot build (no C++ compiler, ...): torch's
    BackendCompilerFailed, whose many lines end in advice for torch's developers; None for any other error.
    `run` answers with it, and so does eval.py, whose main turns RuntimeErrors (this is one) into lines."""
    dynamo = sys.modules.get("torch._dynamo.exc")
    if dynamo is None or not isinstance(e, dynamo.BackendCompilerFailed):
        return None
    first = (str(e).strip() or type(e).__name__).splitlines()[0]
    return (f"error: --compile: torch.compile failed ({first}); run without --compile "
            f"(TORCHDYNAMO_VERBOSE=1 shows where)")
