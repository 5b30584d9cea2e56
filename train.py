"""Train any of the four methods. With no flag but --model it trains on the shipped arithmetic task on a
laptop CPU in a few minutes, then prints held-out accuracy and one sample.

    python train.py --model setdiffusion
    python train.py --model bd3lm --block-size 4 --max-iters 3000 --out-dir out/bd3lm
    torchrun --nproc_per_node=2 train.py --model ar --max-iters 20      # DistributedDataParallel
    python train.py --model setdiffusion --data shakespeare              # real text, byte-level
    python train.py --model ar --data text:notes/ --tokenizer gpt2       # any UTF-8 text file or folder

On a corpus (--data owt, lm1b, shakespeare or text:PATH) the examples are wrapped token rows whose position 0
is a clean BOS, context only (data/corpus.py), and the periodic evaluation is the validation NLL on the
held-out rows instead of generation accuracy: exact for AR, each diffusion method's bound (its nll()) for the
others, in nats/token, with the bits per byte (= bits per character on ASCII text) of a byte-level model.

Each step's randomness (which examples, which noise or order) comes from a generator seeded by
(--seed, step, rank), so a resumed run repeats the uninterrupted one exactly.
"""
import argparse
import contextlib
import copy
import math
import os
import signal
import sys
import time

import torch

import checkpoint
import setdiffusion
from data import CORPORA, TASKS, custom, encode, get_corpus, get_task, get_tokenizer, is_corpus
from decoding import (bits_per_char, check_nonnegative, check_positive, check_threshold, evaluate_accuracy,
                      evaluate_likelihood)
from model import PRESETS, ModelConfig, Transformer
from pretrained import from_pretrained


class HelpFormat(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help keeps the docstring's layout and shows every default."""


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormat)
    g = p.add_argument_group("method")
    g.add_argument("--model", required=True, choices=list(checkpoint.METHODS), help="which objective to train")
    g.add_argument("--smax", type=int, default=8, help="Set Diffusion: max set size / reorder reach (= 2d)")
    g.add_argument("--block-size", type=int, default=4, help="BD3-LM: tokens per block S")
    g.add_argument("--nelbo", action="store_true", help="MDLM/BD3-LM: train on the 1/t-weighted NELBO")
    g.add_argument("--infill", type=float, default=0.0, help="Set Diffusion, NOT in the paper: the fraction of rows "
                   "trained in an infilling order (a random span revealed after everything else; 0 = the paper)")
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=int, default=4, help="transformer blocks")
    g.add_argument("--n-embd", type=int, default=128, help="width")
    g.add_argument("--n-head", type=int, default=4, help="attention heads")
    g.add_argument("--n-kv-head", type=int, default=0, help="key/value heads (0 = n_head)")
    g.add_argument("--preset", default="", choices=["", *PRESETS],
                   help="a named model shape (model.PRESETS) instead of --n-layer/--n-embd/...: cnndm = the "
                        "official from-scratch CNN/DM Qwen3 (28 layers, width 256)")
    g.add_argument("--init-from", default="", help="start from pretrained Qwen3 weights (Hub id or directory)")
    g = p.add_argument_group("data")
    g.add_argument("--data", default="arith", type=data_spec,
                   help=f"training task: {', '.join(TASKS)}, jsonl:PATH or hf:ORG/NAME (your own data); or a "
                        f"corpus of token rows: {', '.join(CORPORA)} or text:PATH (a UTF-8 file or folder of .txt)")
    g.add_argument("--data-dir", default=None, help="local folder with the task's train/test .jsonl; for a corpus, "
                                                    "its local copy and token cache (default ~/.cache/setdiffusion)")
    g.add_argument("--seq-len", type=int, default=0, help="sequence length L (0 = the task's default; text: 256)")
    g.add_argument("--predict-padding", action="store_true",
                   help="train on the padding too (attended, predicted), so a bidirectional model learns where "
                        "a reply ends; the official code's predict_padding")
    g.add_argument("--tokenizer", default="", help="tokenizer name (default: the task's; text:PATH: bytes, or gpt2)")
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
    g.add_argument("--ema", type=float, default=0.995, help="EMA decay of the weights, used at eval (0 = off)")
    g = p.add_argument_group("system")
    g.add_argument("--device", default="auto", help="cuda, mps, cpu or auto (cuda > mps > cpu)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="autocast dtype (auto: bfloat16 on CUDA, float32 elsewhere)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (slow start)")
    g.add_argument("--attention", default="auto", choices=["auto", "sdpa", "flex"],
                   help="training masks: dense for SDPA, or FlexAttention block masks (auto: flex on CUDA)")
    g.add_argument("--seed", type=int, default=1, help="seed of weights, data order and noise")
    g.add_argument("--wandb", default="", help="log to this Weights & Biases project (key from WANDB_API_KEY)")
    g.add_argument("--dist-timeout", type=float, default=60,
                   help="processes started by hand with WORLD_SIZE > 1 (not torchrun): seconds to wait for the others")
    g = p.add_argument_group("checkpoints and evaluation")
    g.add_argument("--out-dir", default="", help="checkpoint directory (default out/<model>)")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out-dir")
    g.add_argument("--save-every", type=int, default=500, help="checkpoint every N steps (and at the end)")
    g.add_argument("--eval-every", type=int, default=0,
                   help="held-out accuracy (validation NLL on a corpus) every N steps (0 = at the end)")
    g.add_argument("--eval-limit", type=int, default=200,
                   help="held-out problems per evaluation (on a corpus: validation rows, spread over the split)")
    g.add_argument("--threshold", type=float, default=math.inf, help="sampler confidence threshold tau")
    g.add_argument("--window", type=int, default=0, help="Set Diffusion window W (0 = smax / 2)")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens to generate per problem (default: 64, or seq_len when that is shorter)")
    args = p.parse_args(argv)
    args.out_dir = args.out_dir or os.path.join("out", args.model)
    return args


def data_spec(spec: str) -> str:
    """argparse type of --data: a corpus (owt, lm1b, shakespeare, text:PATH) or a task (custom.check_spec)."""
    if spec in CORPORA or spec.startswith("text:") and spec[len("text:"):]:
        return spec
    try:
        return custom.check_spec(spec)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"invalid choice: {spec!r} (choose {', '.join(TASKS)}, jsonl:PATH or "
                                         f"hf:ORG/NAME); or a corpus: {', '.join(CORPORA)} or text:PATH") from None


def check_args(args):
    """Every flag in its range, before any work (ValueError, one line); counts and the threshold with the
    checks eval.py and sample.py use."""
    for name in ("max_iters", "batch_size", "grad_accum", "save_every", "eval_limit", "n_layer", "n_embd", "n_head",
                 "block_size"):
        check_positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.max_new_tokens is not None:
        check_positive("--max-new-tokens", args.max_new_tokens)
    for name, zero in (("n_kv_head", "0 = n_head"), ("warmup", ""), ("eval_every", "0 = at the end"),
                       ("seq_len", "0 = the task's"), ("window", "0 = smax / 2")):
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
    if args.window and args.model != "setdiffusion":
        raise ValueError(f"--window {args.window}: only Set Diffusion has a window")
    if not 0 <= args.infill <= 1:
        raise ValueError(f"--infill must be a fraction in [0, 1], got {args.infill}")
    if args.infill and args.model != "setdiffusion":
        raise ValueError(f"--infill {args.infill}: only Set Diffusion trains infilling orders")
    if args.window > args.smax:
        raise ValueError(f"--window {args.window} is larger than --smax {args.smax}")


def lr_at(step, args):
    """Linear warm-up, then cosine decay from lr to final_lr * lr."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.max_iters - args.warmup)
    return args.lr * (args.final_lr + (1 - args.final_lr) * 0.5 * (1 + math.cos(math.pi * progress)))


def setup(args, device, flex: bool = False):
    """Tokenizer, task (or corpus), training data, model, and the config.json dict describing them. The training
    data of a task is its encoded tensors {x0, prompt_mask, pad_mask} (B, L); of a corpus, its token rows (N, L)
    (a numpy memmap, read a batch at a time)."""
    if is_corpus(args.data):
        task = get_corpus(args.data)
    else:
        task = get_task(args.data, custom.options_from_args(args) if args.data.startswith(custom.PREFIXES) else None)
    tok = get_tokenizer(args.tokenizer or task.TOKENIZER)
    seq_len = args.seq_len or task.SEQ_LEN
    shape = None if args.init_from else model_shape(args, tok)
    if shape is not None:                              # before any data or weights are allocated
        check_fits(ModelConfig(**shape), device, seq_len, args.batch_size, args.model, flex)
    if is_corpus(args.data):
        train = task.load("train", args.data_dir, tok, seq_len)
        task.load("test", args.data_dir, tok, seq_len)            # the validation rows: built now, checked now
    else:
        examples = task.load("train", args.data_dir)
        check_examples_fit(len(examples), seq_len, task.SEQ_LEN)
        train = encode(tok, examples, seq_len)
    if args.init_from:
        model = from_pretrained(args.init_from).train()
    else:
        torch.manual_seed(args.seed)
        model = Transformer(ModelConfig(**shape))
    cfg = checkpoint.method_config(args.model, tok.mask_id, smax=args.smax, block_size=args.block_size,
                                   nelbo=args.nelbo, infill=args.infill)
    if args.model == "setdiffusion":
        setdiffusion.schedule(seq_len, args.smax)          # raises a clear ValueError for a bad smax
    if args.model == "bd3lm" and args.block_size > seq_len:
        raise ValueError(f"--block-size {args.block_size} is larger than the sequence length {seq_len}")
    if args.max_new_tokens is None:
        args.max_new_tokens = min(64, seq_len)
    elif args.max_new_tokens > seq_len:
        raise ValueError(f"--max-new-tokens {args.max_new_tokens} is more than the sequence length {seq_len}")
    config = {"model": vars(model.cfg).copy(), "method": args.model, "method_config": cfg,
              "tokenizer": tok.name, "data": task.NAME if is_corpus(args.data) else args.data, "seq_len": seq_len,
              "predict_padding": args.predict_padding,
              "sampler": {"threshold": args.threshold, "window": args.window,
                          "max_new_tokens": args.max_new_tokens}}
    if args.data.startswith(custom.PREFIXES):       # what rebuilds the same task from the checkpoint alone
        config["data_options"] = task.OPTIONS
    return task, tok, train, model, config


def model_shape(args, tok) -> dict:
    """The ModelConfig fields of --preset, or of --n-layer/--n-embd/--n-head/--n-kv-head with the tokenizer's
    vocabulary; a preset whose vocabulary is smaller than the tokenizer's is refused (ValueError)."""
    shape = PRESETS[args.preset] if args.preset else dict(
        vocab_size=tok.vocab_size, n_layer=args.n_layer, n_head=args.n_head,
        n_kv_head=args.n_kv_head or args.n_head, n_embd=args.n_embd)
    if shape["vocab_size"] < tok.vocab_size:
        raise ValueError(f"--preset {args.preset} has a vocabulary of {shape['vocab_size']} tokens, fewer than "
                         f"the {tok.name} tokenizer's {tok.vocab_size}: choose the preset of this tokenizer")
    return shape


def memory_of(device: str) -> float:
    """Bytes of memory here: the GPU's on CUDA, else the machine's (inf where unknown)."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else math.inf


def check_fits(cfg: ModelConfig, device: str, seq_len: int, batch_size: int, method: str, flex: bool = False):
    """Refuse, before anything is allocated, a run that needs more than this machine's memory (the GPU's on
    CUDA): the weights, gradients and AdamW state (16 bytes a parameter) and at least one micro-batch's
    activations: its float32 logits (4 bytes x batch x L x vocabulary) and, with dense masks (not FlexAttention),
    the bool attention mask, batch x (2L)^2 bytes over [x0 | xt] (BD3-LM, Set Diffusion), batch x L^2 (MDLM),
    none for AR (causal attention needs no mask)."""
    D, hd = cfg.n_embd, cfg.head_dim
    per_layer = D * hd * (cfg.n_head + 2 * cfg.n_kv_head) + hd * cfg.n_head * D + 3 * D * cfg.intermediate_size
    params = cfg.vocab_size * D * (1 if cfg.tie_embeddings else 2) + cfg.n_layer * per_layer   # qkv, o, MLP
    streams = 0 if flex else {"ar": 0, "mdlm": 1}.get(method, 2)
    activations = 4 * batch_size * seq_len * cfg.vocab_size + batch_size * (streams * seq_len) ** 2
    memory, gib = memory_of(device), 2 ** 30
    if 16 * params > memory:
        raise ValueError(f"a model of {params / 1e9:.1f}B parameters needs about {16 * params / gib:.0f} GiB to "
                         f"train, more than the {memory / gib:.0f} GiB here: make it smaller")
    if 16 * params + activations > memory:
        raise ValueError(f"--seq-len {seq_len} and --batch-size {batch_size} need at least {activations / gib:,.0f} "
                         f"GiB of activations a micro-batch beside the {16 * params / gib:,.1f} GiB of weights and "
                         f"optimizer state, more than the {memory / gib:,.0f} GiB here: lower --seq-len or "
                         f"--batch-size")


def check_examples_fit(n: int, seq_len: int, default: int):
    """A task's training examples are encoded whole (data.encode: int64 tokens and two bool masks, 10 bytes a
    position): refuse, before allocating them, more than this machine's memory."""
    need, memory = 10 * n * seq_len, memory_of("cpu")
    if need > memory:
        raise ValueError(f"the {n:,} training examples at --seq-len {seq_len} take {need / 2**30:,.0f} GiB encoded, "
                         f"more than the {memory / 2**30:,.0f} GiB here: lower --seq-len (0 = the task's {default})")


def flex_on(attention: str, device: str) -> bool:
    """--attention -> whether the methods' training masks are FlexAttention BlockMasks (Transformer.flex)."""
    if attention == "flex" and not device.startswith("cuda"):
        raise ValueError(f"--attention flex needs a CUDA device, not {device} (FlexAttention has no backward on "
                         f"CPU): use --attention sdpa or auto")
    return attention == "flex" or attention == "auto" and device.startswith("cuda")


def init_distributed(args):
    """(ddp, rank, world size, device): torchrun's environment (one process per device), or one process.
    Processes started by hand with WORLD_SIZE wait at most --dist-timeout seconds for each other."""
    try:
        world, rank, local = (int(os.environ.get(k, d)) for k, d in (("WORLD_SIZE", "1"), ("RANK", "0"),
                                                                     ("LOCAL_RANK", "0")))
    except ValueError:
        raise ValueError("WORLD_SIZE, RANK and LOCAL_RANK must be whole numbers (torchrun sets them)") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"WORLD_SIZE={world}, RANK={rank}: need WORLD_SIZE >= 1 and 0 <= RANK < WORLD_SIZE "
                         f"(torchrun --nproc_per_node=N train.py ... sets them)")
    device = checkpoint.pick_device(args.device)
    if world > 1:
        device = f"cuda:{local}" if device == "cuda" else device
        torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                                             **rendezvous(world, rank, args.dist_timeout))
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
    return world > 1, rank, world, device


def rendezvous(world: int, rank: int, seconds: float) -> dict:
    """init_process_group's store: torchrun's own (it starts every process), or, for processes started by
    hand, a TCPStore that waits at most `seconds` for all `world` of them instead of hanging."""
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return {}
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        raise ValueError(f"WORLD_SIZE={world} needs {' and '.join(missing)}: start the processes with torchrun "
                         f"--nproc_per_node={world} train.py ..., which sets them")
    from datetime import timedelta
    try:
        store = torch.distributed.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                                           rank == 0, timedelta(seconds=seconds), wait_for_workers=True)
    except (RuntimeError, ValueError) as e:                   # DistStoreError / DistNetworkError are RuntimeErrors
        raise ValueError(f"WORLD_SIZE={world}: the other processes did not join within {seconds:g} s "
                         f"({str(e).splitlines()[0][:80]}): start all of them, e.g. with torchrun "
                         f"--nproc_per_node={world}, or unset WORLD_SIZE") from None
    return {"store": store, "rank": rank, "world_size": world}


def make_optimizer(model, args):
    """AdamW, weight decay on matrices only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, args.beta2))


def rows_of(train, idx, tok, task) -> dict:
    """The examples idx (B,) of the training data as a batch on the CPU: a task's tensors indexed, or a corpus'
    token rows read from its memmap and made a batch (position 0 the clean BOS)."""
    if isinstance(train, dict):
        return {k: v[idx] for k, v in train.items()}
    return task.batch(tok, train[idx.numpy()], train.shape[1])


def step_loss(model, method, cfg, train, step, args, device, autocast, rank, world, tok=None, task=None):
    """One optimizer step's forward/backward over --grad-accum micro-batches -> (mean loss, tokens seen).
    The examples and the noise come from a generator seeded by (seed, step, micro-batch) and the rank."""
    total, tokens, N, B = 0.0, 0, len(train["x0"]) if isinstance(train, dict) else len(train), args.batch_size
    for micro in range(args.grad_accum):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + micro)
        idx = torch.randint(0, N, (B * world,), generator=g)[rank * B:(rank + 1) * B]
        batch = {k: v.to(device) for k, v in rows_of(train, idx, tok, task).items()}
        noise_g = torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**62, (1,), generator=g)) + rank)
        with autocast:
            pad_mask = None if args.predict_padding else batch["pad_mask"]
            loss, _ = method.loss(model, batch["x0"], cfg, batch["prompt_mask"], pad_mask, noise_g)
        (loss / args.grad_accum).backward()
        total += loss.item() / args.grad_accum
        tokens += int((~batch["pad_mask"]).sum()) * world
    return total, tokens


def main(argv=None):
    args = get_args(argv)
    with contextlib.ExitStack() as held:                  # the --out-dir lock, released however main ends
        try:
            check_args(args)
            ddp, rank, world, device = init_distributed(args)
            master = rank == 0
            if master:
                held.enter_context(checkpoint.claim(args.out_dir, args.resume))
            flex = flex_on(args.attention, device)
            wandb = import_wandb(args, master)
            first = ddp and is_corpus(args.data)            # rank 0 builds (or fetches) a corpus' cache first
            if first and not master:
                torch.distributed.barrier()
            task, tok, train, model, config = setup(args, device, flex)
            model.flex = flex
            if first and master:
                torch.distributed.barrier()
            state = checkpoint.load_train_state(args.out_dir) if args.resume else None
            if state is not None:
                checkpoint.check_resume(args.out_dir, config)
            elif master and checkpoint.newest(args.out_dir):
                print(f"note: {args.out_dir} holds a checkpoint of an earlier run; the first save replaces it "
                      f"(--resume would continue it)", file=sys.stderr)
            if wandb is not None:
                wandb.init(project=args.wandb, config=vars(args))
            method, cfg = checkpoint.method_of(config)
            opt = make_optimizer(model.to(device), args)
            ema = copy.deepcopy(model).requires_grad_(False) if args.ema > 0 else None
            start = checkpoint.restore(state, model, opt, ema, args.out_dir) if state is not None else 0
        except (FileNotFoundError, ValueError) as e:
            sys.exit(f"error: {e}")
        if state is not None and master:
            print(f"resuming from step {start} of {args.out_dir}")
        run = dict(args=args, method=method, cfg=cfg, train=train, device=device, rank=rank, world=world, ddp=ddp,
                   master=master, config=config, wandb=wandb, tok=tok, task=task)
        with interrupts() as stop:
            losses = loop(model, opt, ema, start, stop, run)
        try:
            if master:
                report(ema or model, method, cfg, tok, task, args, device, config, show=True)
        except KeyboardInterrupt:
            sys.exit(f"interrupted during the final evaluation; the checkpoint in {args.out_dir} is complete")
        if ddp:
            torch.distributed.destroy_process_group()
    return losses


def import_wandb(args, master):
    """The wandb module when --wandb is given (optional; the key comes from WANDB_API_KEY), checked up front."""
    if not (args.wandb and master):
        return None
    try:
        import wandb
    except ImportError:
        raise ValueError("--wandb needs the wandb package: pip install wandb (or drop --wandb)") from None
    return wandb


@contextlib.contextmanager
def interrupts():
    """Ctrl-C (SIGINT) or SIGTERM end the run after the current step, which is saved: yields a dict whose
    "signal" is set then. A second Ctrl-C stops at once (the last save stays complete)."""
    stop = {"signal": None}

    def on_signal(signum, frame):
        stop["signal"] = signum
        signal.signal(signum, signal.SIG_DFL)
    try:
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:                                   # not the main thread: keep the default handlers
        previous = {}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def stop_run(what: str, out_dir: str):
    """A NaN/inf stops the run: say where the last complete (finite) checkpoint is, if there is one."""
    d = checkpoint.newest(out_dir)
    where = f"the last good checkpoint (step {checkpoint.step_of(d)}) is in {d}" if d else "no checkpoint was saved"
    print(f"\n{what}: stopping; {where}", file=sys.stderr)
    sys.exit(1)


def finite(*models) -> bool:
    return all(bool(torch.isfinite(p).all()) for m in models if m is not None for p in m.parameters())


def loop(model, opt, ema, start, stop, run):
    """The optimizer steps from `start`; saves every --save-every steps and at the end (never non-finite
    weights); returns the losses."""
    args, device, master = run["args"], run["device"], run["master"]
    dtype = {"auto": torch.bfloat16 if device.startswith("cuda") else torch.float32,
             "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    autocast = torch.autocast(device.split(":")[0], dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
    train_model = torch.compile(model) if args.compile else model
    if run["ddp"]:
        train_model = torch.nn.parallel.DistributedDataParallel(train_model)
    progress = Progress(start, args.max_iters, master)
    losses = []
    for step in range(start, args.max_iters):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        total, tokens = step_loss(train_model, run["method"], run["cfg"], run["train"], step, args, device, autocast,
                                  run["rank"], run["world"], run["tok"], run["task"])
        signalled = stop["signal"] is not None
        if run["ddp"]:                                 # every rank sees the same loss and signal, and stops together
            t = torch.tensor([total, float(signalled)], device=device)
            torch.distributed.all_reduce(t)
            total, signalled = t[0].item() / run["world"], t[1].item() > 0
        if not math.isfinite(total):
            stop_run(f"loss is {total} at step {step}", args.out_dir)
        losses.append(total)
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ema is not None:
            with torch.no_grad():
                for pe, pm in zip(ema.parameters(), model.parameters()):
                    pe.lerp_(pm, 1 - args.ema)
        progress.update(step, total, lr_at(step, args), tokens)
        if run["wandb"] is not None:
            run["wandb"].log({"loss": total, "lr": lr_at(step, args)}, step=step)
        done = step + 1
        if master and (done % args.save_every == 0 or done == args.max_iters or signalled):
            if not finite(model, ema):
                stop_run(f"the weights are not finite after step {step}", args.out_dir)
            checkpoint.save(args.out_dir, model, {**run["config"], "step": done},
                            {"optimizer": opt.state_dict(), "step": done}, eval_model=ema)
        if signalled:
            progress.close()
            sys.exit(f"interrupted after step {done}: saved it to {args.out_dir}; --resume continues from there")
        if master and args.eval_every and done % args.eval_every == 0 and done != args.max_iters:
            m = report(ema or model, run["method"], run["cfg"], run["tok"], run["task"], args, device, run["config"],
                       show=False)
            if run["wandb"] is not None and "nll" in m:
                run["wandb"].log({"val_nll": m["nll"]}, step=step)
    progress.close()
    return losses


class Progress:
    """A tqdm bar on a terminal; elsewhere (a log file) one plain line every 10 s and one at the end."""

    def __init__(self, start: int, total: int, master: bool):
        from tqdm import tqdm
        self.tty, self.master, self.total = sys.stderr.isatty(), master, total
        self.bar = tqdm(range(start, total), initial=start, total=total, disable=not (master and self.tty),
                        dynamic_ncols=True)
        self.t0 = self.last = time.time()
        self.tokens, self.line = 0, ""

    def update(self, step, loss, lr, tokens):
        self.tokens += tokens
        rate = self.tokens / max(time.time() - self.t0, 1e-9)
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{rate:.0f}", refresh=False)
        self.line = f"step {step + 1}/{self.total} | loss {loss:.4f} | lr {lr:.2e} | {rate:.0f} tok/s"
        if self.master and not self.tty and time.time() - self.last >= 10:
            print(self.line, file=sys.stderr)
            self.last = time.time()

    def close(self):
        self.bar.close()
        if self.master and not self.tty and self.line:
            print(self.line + f" | {time.time() - self.t0:.0f} s", file=sys.stderr)
            self.line = ""


def report(model, method, cfg, tok, task, args, device, config, show):
    """Held-out accuracy (and one sample) with the sampler flags given to train.py; on a corpus, the validation
    NLL instead (validate). Returns the metrics."""
    if is_corpus(config["data"]):
        return validate(model, method, cfg, tok, task, args, device, config, show)
    model.eval()
    examples = task.load("test", args.data_dir)[:args.eval_limit]
    m = evaluate_accuracy(model, method, cfg, tok, task, examples, config, device=device,
                          threshold=args.threshold, window=args.window, max_new_tokens=args.max_new_tokens)
    score = next(iter(task.SCORES))                     # accuracy, or ROUGE-1 for summaries
    print(f"\nheld-out {score} {m[score]:.3f} on {m['n']} problems, "
          f"{m['tokens_per_step']:.2f} tokens/step")
    if show:
        print("sample:\n" + examples[0]["prompt"] + m["completions"][0])
    model.train()
    return m


def validate(model, method, cfg, tok, task, args, device, config, show):
    """Validation NLL per token on --eval-limit held-out rows, spread evenly over the split: exact for AR, the
    bound of each diffusion method's nll() (MDLM/BD3-LM: the 1/t-weighted NELBO; Set Diffusion: one sampled
    order), with a fixed noise seed so that successive evaluations compare. Position 0 (BOS) is not counted."""
    import numpy as np

    model.eval()
    rows = task.load("test", args.data_dir, tok, config["seq_len"])
    pick = np.unique(np.linspace(0, len(rows) - 1, min(len(rows), args.eval_limit)).round().astype(np.int64))
    m = evaluate_likelihood(model, method, cfg, tok, rows[pick], config["seq_len"], device,
                            batch_size=args.batch_size, seed=0, encode_fn=task.batch)
    bound = "exact" if config["method"] == "ar" else "a bound"
    bpc = bits_per_char(m["nll"], tok)
    per_char = f", {bpc:.4f} bits/char (bits per byte)" if bpc is not None else ""
    print(f"\nvalidation NLL {m['nll']:.4f} nats/token ({bound}), perplexity {m['perplexity']:.3f}{per_char}, "
          f"on {len(pick)} of {len(rows)} held-out rows ({m['tokens']} tokens)")
    if show:
        print(f"samples: python sample.py --ckpt {args.out_dir} --unconditional")
    model.train()
    return m


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:                         # before the training loop (which saves, then exits)
        sys.exit("interrupted before training started: nothing was saved")
