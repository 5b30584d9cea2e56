"""Generate from a checkpoint and show how it decoded.

    python sample.py --ckpt out/setdiffusion                         # a held-out problem of its task
    python sample.py --ckpt out/setdiffusion --threshold 0.8 --show-order
    python sample.py --ckpt out/ar --prompt "Ann has 5 pens. She buys 3. How many?\n"

--show-order marks every generated token with the step that decoded it: tokens of one step share a colour
in a terminal (elsewhere a run of tokens decoded at step s is preceded by [s]), so you can see a Set Diffusion
model decode several tokens per step, out of order inside its window.
"""
import argparse
import math
import sys

import torch

import checkpoint
from data import get_task, get_tokenizer
from eval import check_threshold, check_window, generate, sampler_kwargs

COLOURS = [31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96]


def show_order(tok, ids, steps, colour):
    """Text of ids with each run of tokens decoded at the same step marked by that step."""
    out, prev = [], None
    for i, s in zip(ids, steps):
        piece = tok.decode([i])
        if colour:
            out.append(f"\033[{COLOURS[s % len(COLOURS)]}m{piece}\033[0m")
        else:
            out.append(piece if s == prev else f"[{s}]{piece}")
        prev = s
    return "".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="checkpoint directory (written by train.py)")
    p.add_argument("--device", default="auto", help="cuda, mps, cpu or auto")
    p.add_argument("--prompt", default=None, help="prompt text (default: the first held-out problem)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens to generate")
    p.add_argument("--threshold", type=float, default=math.inf, help="confidence threshold tau (inf = 1/step)")
    p.add_argument("--window", type=int, default=0, help="Set Diffusion window W (0 = smax / 2)")
    p.add_argument("--commit-order", choices=["l2r", "fht"], default="l2r",
                   help="Set Diffusion: commit a step's tokens left to right or by first-hitting time")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--show-order", action="store_true", help="mark each token with the step that decoded it")
    args = p.parse_args(argv)
    device = checkpoint.pick_device(args.device)
    try:
        model, method, cfg, config = checkpoint.load(args.ckpt, device)
        tok, task = get_tokenizer(config["tokenizer"]), get_task(config["data"])
        prompt = args.prompt.replace("\\n", "\n") if args.prompt is not None else task.load("test")[0]["prompt"]
        check_threshold(args.threshold)
        check_window(args.window, config["method"], cfg)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    n_prompt = len(tok.encode(prompt))
    if n_prompt >= config["seq_len"]:
        sys.exit(f"error: the prompt has {n_prompt} tokens, more than the model's context "
                 f"(seq_len={config['seq_len']}); shorten it")
    max_new = args.max_new_tokens or config.get("sampler", {}).get("max_new_tokens", 64)
    kw = sampler_kwargs(config["method"], args.threshold, args.window, args.temperature, commit_order=args.commit_order)
    texts, stats, seconds = generate(model, method, cfg, tok, task, [prompt], device, max_new, args.seed, **kw)
    print(prompt, end="")
    if args.show_order:
        P = stats["step"].shape[1] - max_new
        ids, steps = [], []
        for i, s in zip(stats["tokens"][0, P:].tolist(), stats["step"][0, P:].tolist()):
            if i == tok.eos_id or s < 0:
                break
            ids.append(i)
            steps.append(s)
        print(show_order(tok, ids, steps, sys.stdout.isatty()))
    else:
        print(texts[0])
    n = int(stats["n_gen"].sum())
    print(f"\n[{config['method']}] forward passes {stats['nfe']} | tokens/step {stats['tokens_per_step']:.2f} | "
          f"{n} tokens in {seconds:.2f}s = {n / seconds:.1f} tokens/s")


if __name__ == "__main__":
    main()
