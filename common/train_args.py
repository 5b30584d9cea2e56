"""train.py's command line, in one place for train.py and for what launches it (cluster/slurm.py): a launcher
reads the arguments with the parser train.py reads them with, so every form argparse accepts (--model=ar,
--batch-size=8, an abbreviated --grad-acc 3, ...) and every default (--out-dir out/<model>) means to it what
it means to train.py.

    parser(description)      the ArgumentParser (train.py passes its docstring, shown by --help)
    parse(argv, p)           the arguments, --out-dir defaulted to out/<model>; a shape flag not given is None
                             where the shape comes from elsewhere (--init-from's weights, --preset)
    check(args)              every flag in its range, none that would do nothing (ValueError, one line)
"""
import argparse
import math
import os

from common import methods
from common.cli import check_nonnegative, check_positive, data_spec, method_needs, refuse_unused
from data import CORPORA, TASKS, custom
from model import PRESETS
from sampling import check_threshold


class HelpFormat(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help keeps the docstring's layout and shows every default."""


def parser(description: str | None = None) -> argparse.ArgumentParser:
    """train.py's flags, grouped as --help shows them."""
    p = argparse.ArgumentParser(prog="train.py", description=description, formatter_class=HelpFormat)
    g = p.add_argument_group("method")
    g.add_argument("--model", required=True, choices=list(methods.NAMES),
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
                   "common/threads.py)")
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


def parse(argv=None, p: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """train.py's arguments from argv (default sys.argv), with --out-dir's default out/<model> filled in, and
    a trailing slash dropped (--keep-every's OUT_DIR-stepN is then beside it, not in it; --init-from's, so
    that --resume names the run's start as it was recorded).
    With --init-from or --preset the shape comes from elsewhere, so a shape flag (or --preset) left out is
    None: one given is compared with it (runs.check_start, check), even when it equals its default, which
    argparse alone cannot tell from a flag left out."""
    p = p or parser()
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


def check(args):
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
    refuse_unused(parser(), args, method_needs, {args.model}, f"--model {args.model}", "--model ")
    if args.fsdp and args.eval_every:
        raise ValueError("--fsdp evaluates once, at the end, from the saved checkpoint: drop --eval-every")
