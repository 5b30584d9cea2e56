"""Train any of the four methods. With no flag but --model it trains on the shipped arithmetic task on a
laptop CPU in a few minutes, then prints held-out accuracy and one sample.

    python train.py --model setdiffusion
    python train.py --model bd3lm --block-size 4 --max-iters 3000 --out-dir out/bd3lm
    torchrun --nproc_per_node=2 train.py --model ar --max-iters 20      # DistributedDataParallel

Each step's randomness (which examples, which noise or order) comes from a generator seeded by
(--seed, step, rank), so a resumed run repeats the uninterrupted one exactly.
"""
import argparse
import contextlib
import copy
import math
import os
import sys
import time

import torch

import checkpoint
import setdiffusion
from data import TASKS, custom, encode, get_task, get_tokenizer
from model import PRESETS, ModelConfig, Transformer, load_safetensors, use_flex


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("method")
    g.add_argument("--model", required=True, choices=list(checkpoint.METHODS), help="which objective to train")
    g.add_argument("--smax", type=int, default=8, help="Set Diffusion: max set size / reorder reach (= 2d)")
    g.add_argument("--block-size", type=int, default=4, help="BD3-LM: tokens per block S")
    g.add_argument("--nelbo", action="store_true", help="MDLM/BD3-LM: train on the 1/t-weighted NELBO")
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=int, default=4, help="transformer blocks")
    g.add_argument("--n-embd", type=int, default=128, help="width")
    g.add_argument("--n-head", type=int, default=4, help="attention heads")
    g.add_argument("--n-kv-head", type=int, default=0, help="key/value heads (0 = n_head)")
    g.add_argument("--preset", default="", choices=["", "cnndm"],
                   help="a named model shape (model.PRESETS) instead of --n-layer/--n-embd/...: cnndm = the "
                        "official from-scratch CNN/DM Qwen3 (28 layers, width 256)")
    g.add_argument("--init-from", default="", help="start from pretrained Qwen3 weights (Hub id or directory)")
    g = p.add_argument_group("data")
    g.add_argument("--data", default="arith", type=custom.check_spec,
                   help=f"training task: {', '.join(TASKS)}, jsonl:PATH or hf:ORG/NAME (your own data)")
    g.add_argument("--data-dir", default=None, help="local folder with the task's train/test .jsonl")
    g.add_argument("--seq-len", type=int, default=0, help="sequence length L (0 = the task's default)")
    g.add_argument("--predict-padding", action="store_true",
                   help="train on the padding too (attended, predicted), so a bidirectional model learns where "
                        "a reply ends; the official code's predict_padding")
    g.add_argument("--tokenizer", default="", help="tokenizer name (default: the task's)")
    custom.add_args(p)
    g = p.add_argument_group("optimisation")
    g.add_argument("--max-iters", type=int, default=1300, help="optimizer steps")
    g.add_argument("--batch-size", type=int, default=16, help="sequences per step per process")
    g.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step")
    g.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    g.add_argument("--final-lr", type=float, default=0.1, help="cosine decays to this fraction of --lr")
    g.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    g.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay")
    g.add_argument("--grad-clip", type=float, default=1.0, help="clip the gradient norm (0 = off)")
    g.add_argument("--ema", type=float, default=0.0, help="EMA decay of the weights, used at eval (0 = off)")
    g = p.add_argument_group("system")
    g.add_argument("--device", default="auto", help="cuda, mps, cpu or auto (cuda > mps > cpu)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="autocast dtype (auto: bfloat16 on CUDA, float32 elsewhere)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (slow start)")
    g.add_argument("--attention", default="auto", choices=["auto", "sdpa", "flex"],
                   help="training masks: dense for SDPA, or FlexAttention block masks (auto: flex on CUDA)")
    g.add_argument("--seed", type=int, default=1, help="seed of weights, data order and noise")
    g.add_argument("--wandb", default="", help="log to this Weights & Biases project (key from WANDB_API_KEY)")
    g = p.add_argument_group("checkpoints and evaluation")
    g.add_argument("--out-dir", default="", help="checkpoint directory (default out/<model>)")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out-dir")
    g.add_argument("--save-every", type=int, default=500, help="checkpoint every N steps (and at the end)")
    g.add_argument("--eval-every", type=int, default=0, help="held-out accuracy every N steps (0 = at the end)")
    g.add_argument("--eval-limit", type=int, default=200, help="held-out problems per evaluation")
    g.add_argument("--threshold", type=float, default=math.inf, help="sampler confidence threshold tau")
    g.add_argument("--window", type=int, default=0, help="Set Diffusion window W (0 = smax / 2)")
    g.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate per problem")
    args = p.parse_args(argv)
    args.out_dir = args.out_dir or os.path.join("out", args.model)
    return args


def lr_at(step, args):
    """Linear warm-up, then cosine decay from lr to final_lr * lr."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.max_iters - args.warmup)
    return args.lr * (args.final_lr + (1 - args.final_lr) * 0.5 * (1 + math.cos(math.pi * progress)))


def setup(args):
    """Tokenizer, task, data tensors, model, and the config.json dict describing them."""
    task = get_task(args.data, custom.options_from_args(args) if args.data.startswith(custom.PREFIXES) else None)
    tok = get_tokenizer(args.tokenizer or task.TOKENIZER)
    seq_len = args.seq_len or task.SEQ_LEN
    train = encode(tok, task.load("train", args.data_dir), seq_len)
    if args.init_from:
        from model import from_pretrained
        model = from_pretrained(args.init_from).train()
    else:
        torch.manual_seed(args.seed)
        shape = PRESETS[args.preset] if args.preset else dict(
            vocab_size=tok.vocab_size, n_layer=args.n_layer, n_head=args.n_head,
            n_kv_head=args.n_kv_head or args.n_head, n_embd=args.n_embd)
        model = Transformer(ModelConfig(**shape))
    cfg = checkpoint.method_config(args.model, tok.mask_id, smax=args.smax, block_size=args.block_size,
                                   nelbo=args.nelbo)
    if args.model == "setdiffusion":
        setdiffusion.schedule(seq_len, args.smax)          # raises a clear ValueError for a bad smax
        if args.window > args.smax:
            raise ValueError(f"--window {args.window} is larger than --smax {args.smax}")
    config = {"model": vars(model.cfg).copy(), "method": args.model, "method_config": cfg,
              "tokenizer": tok.name, "data": args.data, "seq_len": seq_len, "predict_padding": args.predict_padding,
              "sampler": {"threshold": args.threshold, "window": args.window,
                          "max_new_tokens": args.max_new_tokens}}
    if args.data.startswith(custom.PREFIXES):       # what rebuilds the same task from the checkpoint alone
        config["data_options"] = task.OPTIONS
    return task, tok, train, model, config


def flex_on(attention: str, device: str) -> bool:
    """--attention -> whether the methods' training masks are FlexAttention BlockMasks (model.use_flex)."""
    if attention == "flex" and not device.startswith("cuda"):
        raise ValueError(f"--attention flex needs a CUDA device, not {device} (FlexAttention has no backward on "
                         f"CPU): use --attention sdpa or auto")
    return attention == "flex" or attention == "auto" and device.startswith("cuda")


def init_distributed(args):
    """(ddp, rank, world size, device): torchrun's environment (one process per device), or one process."""
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    device = checkpoint.pick_device(args.device)
    if world > 1:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = f"cuda:{local}" if device == "cuda" else device
        torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
    return world > 1, rank, world, device


def make_optimizer(model, args):
    """AdamW, weight decay on matrices only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.98))


def restore(state, model, opt, ema, out_dir) -> int:
    """Load a train_state (and the EMA weights of model.safetensors) for --resume; returns the step."""
    checkpoint.load_weights(model, state["model"])
    opt.load_state_dict(state["optimizer"])
    if ema is not None:
        checkpoint.load_weights(ema, load_safetensors(os.path.join(checkpoint.resolve(out_dir), "model.safetensors")))
    return int(state["step"])


def step_loss(model, method, cfg, train, step, args, device, autocast, rank, world):
    """One optimizer step's forward/backward over --grad-accum micro-batches -> (mean loss, tokens seen).
    The examples and the noise come from a generator seeded by (seed, step, micro-batch) and the rank."""
    total, tokens, N, B = 0.0, 0, train["x0"].shape[0], args.batch_size
    for micro in range(args.grad_accum):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + micro)
        idx = torch.randint(0, N, (B * world,), generator=g)[rank * B:(rank + 1) * B]
        batch = {k: v[idx].to(device) for k, v in train.items()}
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
    ddp, rank, world, device = init_distributed(args)
    master = rank == 0
    try:
        use_flex(flex_on(args.attention, device))
        task, tok, train, model, config = setup(args)
        state = checkpoint.load_train_state(args.out_dir) if args.resume else None
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    method, cfg = checkpoint.method_of(config)
    dtype = {"auto": torch.bfloat16 if device.startswith("cuda") else torch.float32,
             "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    autocast = torch.autocast(device.split(":")[0], dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
    opt = make_optimizer(model.to(device), args)
    ema = copy.deepcopy(model).requires_grad_(False) if args.ema > 0 else None
    start = restore(state, model, opt, ema, args.out_dir) if state is not None else 0
    if state is not None and master:
        print(f"resuming from step {start} of {args.out_dir}")
    train_model = torch.compile(model) if args.compile else model
    if ddp:
        train_model = torch.nn.parallel.DistributedDataParallel(train_model)
    if args.wandb and master:
        import wandb                                   # optional; reads WANDB_API_KEY from the environment
        wandb.init(project=args.wandb, config=vars(args))
    from tqdm import tqdm                              # not on a terminal (a log file): a line every 10 s at most
    bar = tqdm(range(start, args.max_iters), initial=start, total=args.max_iters, disable=not master,
               dynamic_ncols=True, mininterval=0.1 if sys.stderr.isatty() else 10)
    t0, tokens_seen, losses = time.time(), 0, []
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        total, tokens = step_loss(train_model, method, cfg, train, step, args, device, autocast, rank, world)
        tokens_seen += tokens
        if ddp:                                        # every rank sees the same loss, and stops together
            t = torch.tensor(total, device=device)
            torch.distributed.all_reduce(t)
            total = t.item() / world
        if not math.isfinite(total):
            print(f"\nloss is {total} at step {step}: stopping. The last good checkpoint is in {args.out_dir}",
                  file=sys.stderr)
            sys.exit(1)
        losses.append(total)
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ema is not None:
            with torch.no_grad():
                for pe, pm in zip(ema.parameters(), model.parameters()):
                    pe.lerp_(pm, 1 - args.ema)
        bar.set_postfix(loss=f"{total:.4f}", lr=f"{lr_at(step, args):.2e}", refresh=False,
                        tok_s=f"{tokens_seen / (time.time() - t0):.0f}")
        if args.wandb and master:
            wandb.log({"loss": total, "lr": lr_at(step, args)}, step=step)
        done = step + 1
        if master and (done % args.save_every == 0 or done == args.max_iters):
            checkpoint.save(args.out_dir, model, {**config, "step": done},
                            {"optimizer": opt.state_dict(), "step": done}, eval_model=ema)
        if master and args.eval_every and done % args.eval_every == 0 and done != args.max_iters:
            report(ema or model, method, cfg, tok, task, args, device, config, show=False)
    if master:
        report(ema or model, method, cfg, tok, task, args, device, config, show=True)
    if ddp:
        torch.distributed.destroy_process_group()
    return losses


def report(model, method, cfg, tok, task, args, device, config, show):
    """Held-out accuracy (and one sample) with the sampler flags given to train.py."""
    from eval import evaluate_accuracy
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


if __name__ == "__main__":
    main()
