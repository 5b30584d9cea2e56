"""Generate from a checkpoint and show how it decoded.

    python sample.py --ckpt out/setdiffusion                         # a held-out problem of its task
    python sample.py --ckpt out/setdiffusion --threshold 0.8 --show-order
    python sample.py --ckpt out/ar --prompt "Ann has 5 pens. She buys 3. How many?\n"
    python sample.py --ckpt out/dates --prompt-file prompts.txt     # one prompt per line, in batches
    python sample.py --ckpt out/dates --prompt "2021-03-09 = {mask:2} March 2021" --max-new-tokens 0

--show-order marks every generated token with the step that decoded it: tokens of one step share a colour
in a terminal (elsewhere a run of tokens decoded at step s is preceded by [s]), so you can see a Set Diffusion
model decode several tokens per step, out of order inside its window.

Infilling: [MASK] spans written in a prompt, as <|mask|> repeated or the shorthand {mask:N} (N masks), are
filled in, and the prompt is shown with its gaps filled. Set Diffusion, MDLM and BD3-LM fill masks inside the
prompt; AR continues the left context only, so it refuses such prompts.
"""
import argparse
import math
import re
import sys

import checkpoint
import generation
import sampling
from data import get_task, get_tokenizer
from eval import check_threshold, check_window, generate, prepare, sampler_kwargs, speed_args
from sampling import SamplerOptions

COLOURS = [31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96]


def show_order(tok, ids, steps, colour):
    """Text of ids with each run of tokens decoded at the same step marked by that step."""
    out, prev = [], None
    for i, s in zip(ids, steps):
        piece = tok.decode([i])
        if colour:
            out.append(f"\033[{COLOURS[s % len(COLOURS)]}m{piece}\033[0m" if s >= 0 else piece)
        else:
            out.append(piece if s == prev or s < 0 else f"[{s}]{piece}")   # s = -1: a prompt token
        prev = s
    return "".join(out)


def unconditional(args, model, method, cfg, config, tok, options, device):
    """sample.py --unconditional: args.n samples at batch 1, each printed, then the mean tokens/s."""
    kw = sampler_kwargs(config["method"], args.threshold, args.window)
    kw.pop("temperature")
    max_new = args.max_new_tokens or config["seq_len"] - 1
    texts, rates = generation.unconditional(model, method, cfg, tok, config["method"], args.n, max_new, device,
                                            args.seed, options, **kw)
    for i, text in enumerate(texts):
        print(f"--- sample {i}\n{text}")
    print(f"\n[{config['method']}] {args.n} samples, up to {max_new} tokens, top-p {options.top_p}, repetition "
          f"penalty {options.repetition_penalty}: {sum(rates) / len(rates):.1f} tokens/s (batch 1)")


def expand_masks(tok, prompt: str) -> str:
    """{mask:N} and <|mask|> -> the tokenizer's own [MASK] text (N times), which encodes to tok.mask_id."""
    mask = tok.enc.decode([tok.mask_id])
    return re.sub(r"\{mask:(\d+)\}", lambda m: mask * int(m[1]), prompt.replace("<|mask|>", mask))


def read_prompts(path: str) -> list[str]:
    """One prompt per line of a text file; a literal \\n in a line stands for a newline."""
    with open(path, encoding="utf-8") as f:
        prompts = [line.rstrip("\r\n").replace("\\n", "\n") for line in f if line.strip()]
    if not prompts:
        raise ValueError(f"{path} holds no prompt: write one prompt per line")
    return prompts


def shown(tok, prompt, stats, b, max_new, order):
    """Row b as printed: the prompt (its [MASK]s filled in), then the reply up to EOS, steps marked with order."""
    P = stats["tokens"].shape[1] - max_new
    n = len(tok.encode(prompt))
    ids, steps = [], []
    for j, (i, s) in enumerate(zip(stats["tokens"][b, P - n:].tolist(), stats["step"][b, P - n:].tolist())):
        if j >= n and (i == tok.eos_id or s < 0):
            break
        ids.append(i)
        steps.append(s)
    return show_order(tok, ids, steps, sys.stdout.isatty()) if order else tok.decode(ids)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="checkpoint directory (written by train.py)")
    p.add_argument("--device", default="auto", help="cuda, mps, cpu or auto")
    p.add_argument("--prompt", default=None, help="prompt text (default: the first held-out problem)")
    p.add_argument("--prompt-file", default=None, help="a text file of prompts, one per line, generated in batches")
    p.add_argument("--batch-size", type=int, default=32, help="prompts generated at once")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens to generate (0: only fill [MASK]s)")
    p.add_argument("--threshold", type=float, default=math.inf, help="confidence threshold tau (inf = 1/step)")
    p.add_argument("--window", type=int, default=0, help="Set Diffusion window W (0 = smax / 2)")
    p.add_argument("--commit-order", choices=["l2r", "fht"], default="l2r",
                   help="Set Diffusion: commit a step's tokens left to right or by first-hitting time")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--show-order", action="store_true", help="mark each token with the step that decoded it")
    p.add_argument("--unconditional", action="store_true",
                   help="sample from BOS alone with the official OWT options (nucleus, repetition penalty, "
                        "low-confidence stop), seq_len - 1 new tokens by default; prints tokens/s")
    p.add_argument("-n", type=int, default=1, help="--unconditional: how many samples")
    p.add_argument("--top-p", type=float, default=None, help="nucleus mass (needs --temperature > 0 unless "
                   "--unconditional, which samples at 1; default: 1, or the official 0.95 / AR 0.90 there)")
    p.add_argument("--repetition-penalty", type=float, default=None,
                   help="HF repetition penalty (default: 1, or the official 1.05 / AR 1.0 with --unconditional)")
    speed_args(p)
    args = p.parse_args(argv)
    device = checkpoint.pick_device(args.device)
    try:
        model, method, cfg, config = checkpoint.load(args.ckpt, device)
        model = prepare(model, args, device)
        tok = get_tokenizer(config["tokenizer"])
        options = generation.options_for("owt", tok, config["method"]) if args.unconditional else SamplerOptions()
        options.top_p = options.top_p if args.top_p is None else args.top_p
        options.repetition_penalty = (options.repetition_penalty if args.repetition_penalty is None
                                      else args.repetition_penalty)
        sampling.check(options, 1.0 if args.unconditional else args.temperature)
        if args.unconditional:
            return unconditional(args, model, method, cfg, config, tok, options, device)
        task = get_task(config["data"], config.get("data_options"))
        prompts = ([args.prompt.replace("\\n", "\n")] if args.prompt is not None else
                   read_prompts(args.prompt_file) if args.prompt_file else [task.load("test")[0]["prompt"]])
        check_threshold(args.threshold)
        check_window(args.window, config["method"], cfg)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    prompts = [expand_masks(tok, p) for p in prompts]
    for k, prompt in enumerate(prompts):
        ids = tok.encode(prompt)
        if len(ids) >= config["seq_len"]:
            sys.exit(f"error: prompt {k + 1} has {len(ids)} tokens, more than the model's context "
                     f"(seq_len={config['seq_len']}); shorten it")
        if tok.mask_id in ids and config["method"] == "ar":
            sys.exit(f"error: prompt {k + 1} has [MASK]s to fill, and AR cannot fill masks inside the prompt (it "
                     f"continues the left context only): use a Set Diffusion, BD3-LM or MDLM checkpoint")
    max_new = args.max_new_tokens if args.max_new_tokens is not None else \
        config.get("sampler", {}).get("max_new_tokens", 64)
    kw = sampler_kwargs(config["method"], args.threshold, args.window, args.temperature,
                        commit_order=args.commit_order, options=options if options != SamplerOptions() else None)
    nfe, n, seconds, tps = 0, 0, 0.0, 0.0
    for i in range(0, len(prompts), args.batch_size):
        chunk = prompts[i:i + args.batch_size]
        _, stats, sec = generate(model, method, cfg, tok, task, chunk, device, max_new, args.seed + i, **kw)
        for b, prompt in enumerate(chunk):
            print(("\n" if i + b else "") + shown(tok, prompt, stats, b, max_new, args.show_order))
        nfe, n, seconds = nfe + stats["nfe"], n + int(stats["n_gen"].sum()), seconds + sec
        tps += stats["tokens_per_step"] * len(chunk)
    print(f"\n[{config['method']}] forward passes {nfe} | tokens/step {tps / len(prompts):.2f} | "
          f"{n} tokens in {seconds:.2f}s = {n / seconds:.1f} tokens/s")


if __name__ == "__main__":
    main()
