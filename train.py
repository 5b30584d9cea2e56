"""Train any of the four methods. With no flag but --model it trains on the shipped arithmetic task on a
laptop CPU (3,000 steps: about 15 minutes on 2 idle cores; --max-iters 400 shows a first result in 2), then
prints held-out accuracy and one sample.

    python train.py --model setdiffusion
    python train.py --model bd3lm --block-size 4 --max-iters 3000 --out-dir out/bd3lm
    torchrun --nproc_per_node=2 train.py --model ar --max-iters 20      # DistributedDataParallel
    torchrun --nproc_per_node=8 train.py --model ar --init-from Qwen/Qwen3-8B --fsdp ...   # sharded (FSDP2)
    python train.py --model setdiffusion --data shakespeare              # real text, byte-level
    python train.py --model ar --data text:notes/ --tokenizer gpt2       # any UTF-8 text file or folder
    python train.py --model setdiffusion --init-from out/ar --lr 1e-4   # start from another run's weights

On a corpus (--data owt, lm1b, shakespeare or text:PATH) the examples are wrapped token rows whose position 0
is a clean BOS, context only (data/corpus.py), and the periodic evaluation is the validation NLL on the
held-out rows instead of generation accuracy: exact for AR, each diffusion method's bound (its nll()) for the
others, in nats/token, with the bits per byte (= bits per character on ASCII text) of a byte-level model.

Each step's randomness (which examples, which noise or order) comes from a generator seeded by
(--seed, step, rank), so a resumed run repeats the uninterrupted one exactly.
"""
import contextlib
import copy
import math
import signal
import sys
import time

from common import cli  # first, before torch loads OpenMP: a short spin wait (common/cli.py)

import numpy as np
import torch

from common import checkpoint, runs
from common.metrics import bits_per_char, evaluate_accuracy, evaluate_likelihood
from common.runs import check_examples_fit, check_fits, flex_on, init_distributed
from data import custom, encode, get_corpus, get_task, get_tokenizer, is_corpus
from model import PRESETS, ModelConfig, Transformer, make_optimizer
from sampling import Settings


def get_args(argv=None):
    """train.py's arguments (their definitions: common/cli.py, shared with cluster/slurm.py)."""
    return cli.parse_train(argv, cli.train_parser(__doc__))


def lr_at(step, args):
    """Linear warm-up, then cosine decay from lr to final_lr * lr."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.max_iters - args.warmup)
    return args.lr * (args.final_lr + (1 - args.final_lr) * 0.5 * (1 + math.cos(math.pi * progress)))


def setup(args, device, flex: bool = False):
    """Tokenizer, task (or corpus), training data, model, and the config.json dict describing them. The
    training data of a task is its encoded tensors {x0, prompt_mask, pad_mask} (B, L); of a corpus, its token
    rows (N, L) (a numpy memmap, read a batch at a time)."""
    if is_corpus(args.data):
        task = get_corpus(args.data)
    else:
        task = get_task(args.data,
                        custom.options_from_args(args) if args.data.startswith(custom.PREFIXES) else None)
    tok = get_tokenizer(args.tokenizer or task.TOKENIZER)
    seq_len = args.seq_len or task.SEQ_LEN
    start = record = None
    if args.init_from:                       # what cannot carry over is refused here, before any data
        from common import init_from
        start = init_from.start_from(args, tok, seq_len)
        record = init_from.start_record(start)
    # the method's settings, checked by its config (against seq_len too) and its window, before any data
    cfg = checkpoint.method_config(args.model, tok.mask_id, seq_len, smax=args.smax,
                                   block_size=args.block_size, nelbo=args.nelbo, infill=args.infill,
                                   infill_len=args.infill_len, infill_added=args.infill_added)
    method = checkpoint.METHODS[args.model]
    cli.check_window(args.window, method, checkpoint.CONFIGS[args.model](**cfg))
    shape = None if start else model_shape(args, tok)
    if shape is not None:                              # before any data or weights are allocated
        check_fits(ModelConfig(**shape), device, seq_len, args.batch_size, method, flex)
    if not is_corpus(args.data):                       # the examples, sized before they or a model are made
        examples = task.load("train", args.data_dir)
        check_examples_fit(len(examples), seq_len, task.SEQ_LEN)
    if start and start["format"] == "ours":  # its eval (EMA) weights, whatever method trained them: a
        model = checkpoint.load(start["dir"])[0].train()      # damaged file is one line before any data
    elif start:
        from common.pretrained import from_pretrained     # a Qwen3's conversion: loaded only for one
        model = from_pretrained(args.init_from).train()
    else:
        torch.manual_seed(args.seed)
        model = Transformer(ModelConfig(**shape))
    if is_corpus(args.data):
        train = task.load("train", args.data_dir, tok, seq_len)
        task.load("test", args.data_dir, tok, seq_len)            # the validation rows: built, checked now
    else:
        train = encode(tok, examples, seq_len)
    if args.max_new_tokens is None:
        args.max_new_tokens = min(64, seq_len)
    elif args.max_new_tokens > seq_len:
        raise ValueError(f"--max-new-tokens {args.max_new_tokens} is more than the sequence length {seq_len}")
    config = {"model": vars(model.cfg).copy(), "method": args.model, "method_config": cfg,
              "tokenizer": tok.name, "data": task.NAME if is_corpus(args.data) else args.data,
              "seq_len": seq_len, "predict_padding": args.predict_padding,
              "sampler": {"threshold": args.threshold, "window": args.window,
                          "max_new_tokens": args.max_new_tokens}}
    if args.data.startswith(custom.PREFIXES):       # what rebuilds the same task from the checkpoint alone
        config["data_options"] = task.OPTIONS
    if start:
        config["init_from"] = record
    return task, tok, train, model, config


def model_shape(args, tok) -> dict:
    """The ModelConfig fields of --preset, or of --n-layer/--n-embd/--n-head/--n-kv-head with the tokenizer's
    vocabulary. Shape flags given beside --preset replace its fields (a small DiT: --preset dit-owt --n-layer
    2 --n-embd 64 --n-head 4); a width or head count given derives the MLP (4 x width) and the head size
    anew, and --n-kv-head defaults to the heads, as without a preset. A preset whose vocabulary is smaller
    than the tokenizer's is refused (ValueError)."""
    given = {k: getattr(args, k) for k in cli.SHAPE if getattr(args, k) is not None}
    shape = dict(PRESETS[args.preset]) if args.preset else {"vocab_size": tok.vocab_size}
    if {"n_embd", "n_head"} & given.keys():
        for derived in ("intermediate_size", "head_dim"):
            shape.pop(derived, None)
    if {"n_head", "n_kv_head"} & given.keys() or not args.preset:
        given["n_kv_head"] = given.get("n_kv_head") or given.get("n_head", shape.get("n_head"))
    shape.update(given)
    if shape["vocab_size"] < tok.vocab_size:
        raise ValueError(f"--preset {args.preset} has a vocabulary of {shape['vocab_size']} tokens, "
                         f"fewer than the {tok.name} tokenizer's {tok.vocab_size}: choose the preset of this "
                         f"tokenizer")
    return shape


def rows_of(train, idx, tok, task) -> dict:
    """The examples idx (B,) of the training data as a batch on the CPU: a task's tensors indexed, or a
    corpus' token rows read from its memmap and made a batch (position 0 the clean BOS)."""
    if isinstance(train, dict):
        return {k: v[idx] for k, v in train.items()}
    return task.batch(tok, train[idx.numpy()], train.shape[1])


def step_loss(model, no_sync, run, step, autocast):
    """One optimizer step's forward/backward over --grad-accum micro-batches -> (mean loss, a 0-d tensor left
    on the device; tokens seen, counted on the host from the CPU batch): nothing here waits for the device
    (what the method's loss does is its own).
    Under DDP the gradients are all-reduced once, in the last micro-batch's backward (no_sync on the others).
    The examples and the noise come from a generator seeded by (seed, step, micro-batch) and the rank."""
    args, train, rank, world = run["args"], run["train"], run["rank"], run["world"]
    cuda = run["device"].startswith("cuda")     # copies from pageable memory would wait for the GPU: pin
    total, tokens, N, B = 0.0, 0, len(train["x0"]) if isinstance(train, dict) else len(train), args.batch_size
    for micro in range(args.grad_accum):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + micro)
        idx = torch.randint(0, N, (B * world,), generator=g)[rank * B:(rank + 1) * B]
        rows = rows_of(train, idx, run["tok"], run["task"])
        tokens += int((~rows["pad_mask"]).sum()) * world
        batch = {k: (v.pin_memory() if cuda else v).to(run["device"], non_blocking=cuda)
                 for k, v in rows.items()}
        noise_g = torch.Generator(device=run["device"]).manual_seed(
            int(torch.randint(0, 2**62, (1,), generator=g)) + rank)
        with contextlib.nullcontext() if micro == args.grad_accum - 1 else no_sync():
            with autocast:
                pad_mask = None if args.predict_padding else batch["pad_mask"]
                loss, _ = run["method"].loss(model, batch["x0"], run["cfg"], batch["prompt_mask"], pad_mask,
                                             noise_g)
            (loss / args.grad_accum).backward()
        total = total + loss.detach() / args.grad_accum
    return total, tokens


def main(argv=None):
    args = get_args(argv)
    with contextlib.ExitStack() as held:                  # the --out-dir lock, released however main ends
        try:
            cli.check_train(args)
            cli.set_threads(args.threads)
            cli.load_credentials()                    # HF_TOKEN, WANDB_API_KEY from .env
            ddp, rank, world, device = init_distributed(args)
            if args.fsdp and not ddp:
                raise ValueError("--fsdp shards the model over several processes: start them with torchrun "
                                 "--nproc_per_node=N train.py ... (N >= 2), or drop --fsdp")
            master = rank == 0
            if master:
                held.enter_context(checkpoint.claim(args.out_dir, args.resume, lock=not args.no_lock))
            flex = flex_on(args.attention, device)
            wandb = import_wandb(args, master)
            first = ddp and is_corpus(args.data)            # rank 0 builds (or fetches) a corpus' cache first
            if first and not master:
                torch.distributed.barrier()
            task, tok, train, model, config = setup(args, device, flex)
            config["run"] = runs.identity(args, world)      # what makes it another run: seed, lr, ...
            model.flex = flex
            if first and master:
                torch.distributed.barrier()
            state = checkpoint.load_train_state(args.out_dir) if args.resume else None
            if state is not None:
                saved = runs.check_resume(args.out_dir, config, state["step"], args.max_iters)
            elif master and checkpoint.newest(args.out_dir):
                print(f"note: {args.out_dir} holds a checkpoint of an earlier run; the first save replaces "
                      f"it (--resume would continue it)", file=sys.stderr)
            config["environment"] = runs.environment(device)      # the commit, versions, device, lock
            if state is not None:                                 # resumed: where its earlier steps were made
                config.update(runs.earlier_environments(saved, config["environment"]))
            if wandb is not None:
                wandb.init(project=args.wandb, config=vars(args))
            method, cfg = checkpoint.method_of(config)
            model = model.to(device)
            ema = copy.deepcopy(model).requires_grad_(False) if args.ema > 0 else None
            start = runs.restore(state, model, ema, args.out_dir) if state is not None else 0
            if master:                               # --keep-every's folders, claimed as --out-dir is
                runs.check_snapshots(args.out_dir, config, start, args.max_iters, args.keep_every)
            if args.fsdp:
                from common.distributed import shard, shard_optimizer_state
                shard(model, ema)
                if master:
                    print(f"FSDP2: weights, gradients and optimizer state sharded over {world} processes")
            opt = make_optimizer(model, args.lr, args.weight_decay, args.beta2)
            if state is not None:
                runs.restore_optimizer(state, opt, args.out_dir)
                if args.fsdp:
                    shard_optimizer_state(opt)
        except (FileNotFoundError, ValueError) as e:
            sys.exit(f"error: {e}")
        if state is not None and master:
            print(f"resuming from step {start} of {args.out_dir}")
        run = dict(args=args, method=method, cfg=cfg, train=train, device=device, rank=rank, world=world,
                   ddp=ddp, master=master, config=config, wandb=wandb, tok=tok, task=task)
        with interrupts() as stop:
            try:
                losses = loop(model, opt, ema, start, stop, run)
            except checkpoint.SaveError as e:         # a full disk: the last complete checkpoint is kept
                sys.exit(f"error: {e}")
        try:
            if master:                                # FSDP's model is in shards: evaluate the saved one
                final = checkpoint.load(args.out_dir, device)[0] if args.fsdp else ema or model
                held_out(final, method, cfg, tok, task, args, device, config, show=True)
        except KeyboardInterrupt:
            sys.exit(f"interrupted during the final evaluation; the checkpoint in {args.out_dir} is complete")
        if ddp:
            torch.distributed.destroy_process_group()
    return losses


def import_wandb(args, master):
    """The wandb module when --wandb is given (optional; the key comes from WANDB_API_KEY), checked up
    front."""
    if not (args.wandb and master):
        return None
    try:
        import wandb
    except ImportError:
        raise ValueError("--wandb needs the wandb package: pip install wandb (or drop --wandb)") from None
    return wandb


LOG_EVERY = 10       # steps per progress line; the steps' losses wait on the device until one (or a save)


def loop(model, opt, ema, start, stop, run):
    """The optimizer steps from `start`; saves every --save-every steps and at the end (never non-finite
    weights); returns the losses. No step waits for the device: its loss (under DDP summed over the ranks with
    their signal flags) stays there until a step that logs (every LOG_EVERY), saves, evaluates or stops, where
    read_back brings them all in one wait and stops the run at the first non-finite one, before any save.
    Ctrl-C or SIGTERM ends the run after the current step; under DDP after the next step that every rank
    reads back (at most LOG_EVERY steps on), so that all of them stop at the same step."""
    args, device, master, ddp = run["args"], run["device"], run["master"], run["ddp"]
    dtype = {"auto": torch.bfloat16 if device.startswith("cuda") else torch.float32,
             "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    autocast = (torch.autocast(device.split(":")[0], dtype=dtype) if dtype != torch.float32
                else contextlib.nullcontext())
    train_model = torch.compile(model, dynamic=True) if args.compile else model
    no_sync = contextlib.nullcontext                    # FSDP2 (and one process) reduce in every backward
    if ddp and not args.fsdp:
        train_model = torch.nn.parallel.DistributedDataParallel(train_model)
        no_sync = train_model.no_sync
    progress = Progress(start, args.max_iters, master)
    losses, pending, window, tokens = [], [], [], 0     # pending: on the device; window: this progress line's
    for step in range(start, args.max_iters):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        loss, n = step_loss(train_model, no_sync, run, step, autocast)
        signalled = stop["signal"] is not None
        flags = torch.stack([loss, torch.full_like(loss, float(signalled))])   # a fill, no host copy
        if ddp:
            torch.distributed.all_reduce(flags)                                  # summed over the ranks
        pending.append(flags)
        update(model, opt, ema, args)
        progress.step()
        tokens, done = tokens + n, step + 1
        logs = done % LOG_EVERY == 0 or done == args.max_iters
        saves = done % args.save_every == 0 or done == args.max_iters
        evals = args.eval_every and done % args.eval_every == 0 and done != args.max_iters
        keeps = args.keep_every and done % args.keep_every == 0           # a learning curve's snapshot
        if not (logs or saves or evals or keeps or (signalled and not ddp)):   # the same steps on every rank
            continue
        new, signalled = read_back(pending, done - len(pending), run)
        pending = []
        losses.extend(new)
        window.extend(new)
        if run["wandb"] is not None:
            for k, value in enumerate(new, done - len(new)):
                run["wandb"].log({"loss": value, "lr": lr_at(k, args)}, step=k)
        if logs:
            progress.log(done, sum(window) / len(window), lr_at(step, args), tokens)
            window, tokens = [], 0
        if (master or args.fsdp) and (saves or signalled or keeps):
            if not finite(model, ema, reduce=args.fsdp):          # FSDP: every rank gathers, rank 0 writes
                stop_run(f"the weights are not finite after step {done}", args.out_dir)
            if saves or signalled:
                checkpoint.save(args.out_dir, model, {**run["config"], "step": done},
                                {"optimizer": opt.state_dict(), "step": done}, eval_model=ema, write=master)
            if keeps:                                             # weights only, beside --out-dir
                checkpoint.save(f"{args.out_dir}-step{done}", model, {**run["config"], "step": done},
                                eval_model=ema, write=master)
        if signalled:
            progress.close()
            sys.exit(f"interrupted after step {done}: saved it to {args.out_dir}; "
                     "--resume continues from there")
        if master and evals:
            m = held_out(ema or model, run["method"], run["cfg"], run["tok"], run["task"], args, device,
                         run["config"], show=False)
            if run["wandb"] is not None and "nll" in m:
                run["wandb"].log({"val_nll": m["nll"]}, step=step)
    progress.close()
    return losses


def update(model, opt, ema, args):
    """Clip the gradient, take the AdamW step, move the EMA weights towards the new ones."""
    if args.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if ema is not None:
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.lerp_(pm, 1 - args.ema)


def read_back(pending, first, run):
    """The losses of steps first, first + 1, ... that waited on the device, and whether any rank was signalled
    during them: one wait. A non-finite loss stops the run naming its step; no checkpoint was written since
    (every save comes after a read-back)."""
    world = run["world"]
    values = torch.stack(pending).tolist()             # (steps, 2): loss and signal, summed over the ranks
    for step, (loss, _) in enumerate(values, first + 1):       # 1-based, as the progress lines
        if not math.isfinite(loss):
            stop_run(f"loss is {loss / world} at step {step}", run["args"].out_dir)
    return [loss / world for loss, _ in values], any(flag > 0 for _, flag in values)


# ----------------------------------------------------------------------------- held-out evaluation

def held_out(model, method, cfg, tok, task, args, device, config, show):
    """train.py's periodic and final evaluation: held-out accuracy (and one sample) with the sampler flags
    given to train.py (args); on a corpus, the validation NLL instead (validate). Returns the metrics."""
    if is_corpus(config["data"]):
        return validate(model, method, cfg, tok, task, args, device, config, show)
    model.eval()
    examples = task.load("test", args.data_dir)[:args.eval_limit]
    settings = Settings(args.max_new_tokens, args.threshold, setdiffusion_window=args.window)
    m = evaluate_accuracy(model, method, cfg, tok, task, examples, device, settings)
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
    order), with a fixed noise seed so that successive evaluations compare. Position 0 (BOS) is not
    counted."""
    model.eval()
    rows = task.load("test", args.data_dir, tok, config["seq_len"])
    pick = np.unique(np.linspace(0, len(rows) - 1, min(len(rows), args.eval_limit)).round().astype(np.int64))
    m = evaluate_likelihood(model, method, cfg, tok, rows[pick], config["seq_len"], device,
                            batch_size=args.batch_size, seed=0, encode_fn=task.batch)
    bound = "exact" if method.EXACT_NLL else "a bound"
    bpc = bits_per_char(m["nll"], tok)
    per_char = f", {bpc:.4f} bits/char (bits per byte)" if bpc is not None else ""
    print(f"\nvalidation NLL {m['nll']:.4f} nats/token ({bound}), perplexity "
          f"{m['perplexity']:.3f}{per_char}, on {len(pick)} of {len(rows)} held-out rows ({m['tokens']} "
          "tokens)")
    if show:
        print(f"samples: python sample.py --ckpt {args.out_dir} (continues BOS)")
    model.train()
    return m


# --------------------------------------------------------------------- a NaN stops the run, a signal ends it

def stop_run(what: str, out_dir: str):
    """A NaN/inf stops the run: say where the last complete (finite) checkpoint is, if there is one."""
    d = checkpoint.newest(out_dir)
    where = f"the last good checkpoint (step {checkpoint.step_of(d)}) is in {d}" if d else \
        "no checkpoint was saved"
    print(f"\n{what}: stopping; {where}", file=sys.stderr)
    sys.exit(1)


def finite(*models, reduce: bool = False) -> bool:
    """Every weight finite; a sharded (FSDP) model checks its own shards and, with reduce, agrees with the
    other ranks (all must stop together)."""
    ok = all(bool(torch.isfinite(p.to_local() if hasattr(p, "to_local") else p).all())
             for m in models if m is not None for p in m.parameters())
    if reduce:
        t = torch.tensor(float(ok), device=next(models[0].parameters()).device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
        ok = bool(t.item())
    return ok


@contextlib.contextmanager
def interrupts():
    """Ctrl-C (SIGINT) or SIGTERM end the run after the current step (under DDP after the next step that
    every rank reads back, so that all stop together), which is saved: yields a dict whose "signal" is set
    then. A second Ctrl-C stops at once (the last save stays complete)."""
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


class Progress:
    """Training progress, one update per log interval. On a terminal: tqdm's own bar (steps, rate, elapsed
    and ETA) with the interval's loss, lr and tokens/s beside it. Elsewhere (a log file, a pipe): one plain
    line per interval and no carriage returns, which a log would collect into one long line."""

    def __init__(self, start: int, total: int, master: bool):
        from tqdm import tqdm
        self.format_interval = tqdm.format_interval
        self.master, self.start, self.total = master, start, total
        self.bar = tqdm(initial=start, total=total, unit="step", dynamic_ncols=True,
                        disable=not (master and sys.stderr.isatty()))
        self.t0 = self.last = time.time()

    def step(self):
        """One optimizer step done: the bar counts it (host only, nothing waits for the device)."""
        self.bar.update(1)

    def log(self, done: int, loss: float, lr: float, tokens: int):
        """The interval ending after step `done` (1-based): its mean loss, the lr, its tokens per second."""
        now = time.time()
        rate, self.last = tokens / max(now - self.last, 1e-9), now
        if not self.master:
            return
        if not self.bar.disable:
            self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{rate:.0f}")
            return
        left = (now - self.t0) / (done - self.start) * (self.total - done)
        print(f"step {done}/{self.total} | loss {loss:.4f} | lr {lr:.2e} | {rate:.0f} tok/s | "
              f"{self.format_interval(now - self.t0)} elapsed, {self.format_interval(left)} left",
              file=sys.stderr, flush=True)

    def close(self):
        self.bar.close()


if __name__ == "__main__":
    cli.run(main, "train.py", "nothing was saved")       # before the training loop (which saves, then exits)
