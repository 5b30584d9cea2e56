r"""Generate from a checkpoint and show how it decoded.

    python sample.py --ckpt out/setdiffusion                         # a held-out problem of its task
    python sample.py --ckpt out/setdiffusion --threshold 0.8 --show-order
    python sample.py --ckpt out/ar --prompt "Ann has 5 pens. She buys 3. How many?\n"
    python sample.py --ckpt out/dates --prompt-file prompts.txt     # one prompt per line, in batches
    python sample.py --ckpt out/dates --prompt "2021-03-09 = {mask:2} March 2021" --max-new-tokens 0
    python sample.py --ckpt out/shakespeare/ar --prompt "ROMEO:"    # a corpus checkpoint continues the text

--show-order marks every generated token with the step that decoded it: tokens of one step share a colour
in a terminal (elsewhere a run of tokens decoded at step s is preceded by [s]), so you can see a Set Diffusion
model decode several tokens per step, out of order inside its window. --plot FILE.png draws them too, one panel
per --ckpt (common/order_plot.py; `make decoding-picture` draws results/decoding.png).

Infilling: [MASK] spans written in a prompt, as <|mask|> repeated or the shorthand {mask:N} (N masks), are
filled in, and the prompt is shown with its gaps filled. Set Diffusion, MDLM and BD3-LM fill masks inside the
prompt; AR continues the left context only, so it refuses such prompts. Everything else in a prompt is plain
text: "<|endoftext|>" typed in a prompt stays those characters. With the byte tokenizer, bytes in --prompt that
are not UTF-8 reach the model as those bytes. A prompt and --max-new-tokens must fit the model's context (seq_len).

A checkpoint trained on a corpus (--data shakespeare, text:PATH, owt, lm1b) has no prompts of its own: a prompt is
preceded by the BOS token its training rows start with (the corpus module's bos: LM1B's [CLS], else EOS), continued until
EOS or --max-new-tokens (default: the checkpoint's, cut to what fits), and its gaps are filled as above. With no
prompt it continues BOS alone, with the same flags (greedy unless --temperature); --unconditional samples from BOS
with the official OWT options instead.
"""
import argparse
import math
import sys

from common import checkpoint
from common import credentials
from common import order_plot
import sampling
from data import get_corpus, get_task, get_tokenizer, is_corpus, sampler_preset
from common.cli import (check_nonnegative, check_positive, check_temperature, check_threshold, check_window, prepare,
                        speed_args, unconditional_tokens)
from data.prompts import fit, prompt_ids, read_prompts
from common.replies import respond, unconditional
from sampling import SamplerOptions, Settings

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


def shown(tok, n, stats, b, max_new, order):
    """Row b as printed: the prompt of n tokens (its [MASK]s filled in), then the reply up to EOS, steps marked
    with order."""
    P = stats["tokens"].shape[1] - max_new
    ids, steps = [], []
    for j, (i, s) in enumerate(zip(stats["tokens"][b, P - n:].tolist(), stats["step"][b, P - n:].tolist())):
        if j >= n and (i == tok.eos_id or s < 0):
            break
        ids.append(i)
        steps.append(s)
    return show_order(tok, ids, steps, sys.stdout.isatty()) if order else tok.decode(ids)


def check_flags(args):
    """The range checks of sample.py's own flags, before the checkpoint is loaded (ValueError: one line)."""
    check_positive("--batch-size", args.batch_size)
    check_positive("-n", args.n)
    if args.max_new_tokens is not None:
        check_nonnegative("--max-new-tokens", args.max_new_tokens, "0 = only fill [MASK]s")
    check_temperature(args.temperature)
    check_threshold(args.threshold)
    if args.prompt is not None and args.prompt_file:
        raise ValueError("give --prompt or --prompt-file, not both")
    if args.plot and (not args.show_order or args.prompt_file):
        raise ValueError("--plot draws the order of one prompt: add --show-order, and --prompt or none")
    if len(args.ckpt) > 1 and not args.plot:
        raise ValueError("several --ckpt are drawn one panel each: add --show-order --plot FILE.png")
    if args.plot:
        order_plot.require(args.plot)
    if args.unconditional and args.show_order:
        raise ValueError("--show-order marks the steps of replies to prompts; --unconditional samples are printed "
                         "as text: drop one of the two")


def batches(ids, batch_size: int, max_new: int, seq_len: int, default: bool):
    """(index of the first prompt, prompts, new tokens) per batch, in order. An explicit max_new is every batch's
    (fit checked it); the checkpoint's default shrinks to what fits beside each prompt, and a prompt that would
    shorten the replies of the batch before it starts a new batch."""
    out = []
    for k, row in enumerate(ids):
        room = min(max_new, seq_len - len(row)) if default else max_new
        if out and len(out[-1][1]) < batch_size and out[-1][2] == room:
            out[-1][1].append(row)
        else:
            out.append((k, [row], room))
    return out


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, action="append",
                   help="checkpoint directory (written by train.py); several only with --plot (a panel each)")
    p.add_argument("--device", default="auto", help="cuda, mps, cpu or auto")
    p.add_argument("--prompt", default=None, help="prompt text (default: the first held-out problem; on a corpus "
                   "checkpoint, BOS alone)")
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
    p.add_argument("--plot", default=None, metavar="FILE.png", help="with --show-order: draw the step that "
                   "revealed each position of one prompt, a panel per --ckpt (needs matplotlib)")
    p.add_argument("--unconditional", action="store_true",
                   help="sample from BOS alone with the official OWT options (nucleus, repetition penalty, "
                        "low-confidence stop), seq_len - 1 new tokens by default; prints tokens/s")
    p.add_argument("-n", type=int, default=1, help="--unconditional: how many samples")
    p.add_argument("--top-p", type=float, default=None, help="nucleus mass (needs --temperature > 0 unless "
                   "--unconditional, which samples at 1; default: 1, or the official 0.95 / AR 0.90 there)")
    p.add_argument("--repetition-penalty", type=float, default=None,
                   help="HF repetition penalty (default: 1, or the official 1.05 / AR 1.0 with --unconditional)")
    speed_args(p)
    return p.parse_args(argv)


def sampler_options(args, tok, method) -> SamplerOptions:
    """Plain sampling, or with --unconditional the official OWT options; --top-p and --repetition-penalty
    override either (checked: ValueError)."""
    options = sampler_preset("owt", tok, method) if args.unconditional else SamplerOptions()
    options.top_p = options.top_p if args.top_p is None else args.top_p
    options.repetition_penalty = (options.repetition_penalty if args.repetition_penalty is None
                                  else args.repetition_penalty)
    sampling.check(options, 1.0 if args.unconditional else args.temperature)
    return options


def prompt_texts(args, task) -> tuple[list[str], bool]:
    """The prompts and whether they came from the command line (raw: bytes that are not UTF-8 kept): --prompt,
    each line of --prompt-file, else the task's first held-out problem, or on a corpus (task None) the empty
    text, so that the sample continues BOS alone."""
    if args.prompt is not None:
        return [args.prompt.replace("\\n", "\n")], True
    if args.prompt_file:
        return read_prompts(args.prompt_file), False
    return [task.load("test")[0]["prompt"] if task is not None else ""], False


def encoded_prompts(args, task, tok, config, method, max_new: int, default: bool) -> list[list[int]]:
    """Token ids of each prompt (prompt_texts), after the corpus' BOS on a corpus checkpoint (task None); each
    checked against the context (ValueError: one line)."""
    prompts, raw = prompt_texts(args, task)
    head = [] if task is not None else [get_corpus(config["data"]).bos(tok)]
    ids = []
    for k, prompt in enumerate(prompts, 1):
        ids.append(head + prompt_ids(tok, prompt, config["seq_len"], k, raw))
        fit(k, len(ids[-1]), 0 if default else max_new, config["seq_len"])
        if tok.mask_id in ids[-1] and not method.CAN_INFILL:
            raise ValueError(f"prompt {k} has [MASK]s to fill, and {config['method'].upper()} cannot fill masks "
                             f"inside the prompt (it continues the left context only): use a Set Diffusion, BD3-LM "
                             f"or MDLM checkpoint")
    return ids


def sample_unconditional(args, model, method, cfg, config, tok, options, device, max_new: int):
    """sample.py --unconditional: args.n samples at batch 1, each printed, then the mean tokens/s."""
    settings = Settings(max_new, args.threshold, window=args.window, seq_len=config["seq_len"], options=options)
    samples = unconditional(model, method, cfg, tok, args.n, settings, device, args.seed)
    for i, s in enumerate(samples):
        print(f"--- sample {i}\n{s['text']}")
    rate = sum(s["tokens_per_s"] for s in samples) / len(samples)
    print(f"\n[{config['method']}] {args.n} samples, up to {max_new} tokens, top-p {options.top_p}, repetition "
          f"penalty {options.repetition_penalty}: {rate:.1f} tokens/s (batch 1)")


def main(argv=None):
    args = get_args(argv)
    panels = [decode(args, ckpt) for ckpt in args.ckpt]      # several only with --plot: check_flags
    if args.plot:
        order_plot.draw(panels, args.plot)
        print(f"\nwrote {args.plot}")


def decode(args, ckpt: str):
    """Load ckpt, reply to the prompts and print them; with --plot, return the first prompt's panel."""
    try:
        check_flags(args)
        credentials.load_dotenv()                     # HF_TOKEN from .env (a gated Hub checkpoint)
        device = checkpoint.pick_device(args.device)   # ValueError: a device not here
        model, method, cfg, config = checkpoint.load(ckpt, device)
        model = prepare(model, args, device)
        tok = get_tokenizer(config["tokenizer"])
        options = sampler_options(args, tok, method)
        check_window(args.window, method, cfg)
        if args.unconditional:
            max_new = unconditional_tokens(args.max_new_tokens, config["seq_len"])
        else:
            task = None if is_corpus(config["data"]) else get_task(config["data"], config.get("data_options"))
            default = args.max_new_tokens is None
            max_new = config.get("sampler", {}).get("max_new_tokens", 64) if default else args.max_new_tokens
            ids = encoded_prompts(args, task, tok, config, method, max_new, default)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    if args.unconditional:
        return sample_unconditional(args, model, method, cfg, config, tok, options, device, max_new)
    settings = Settings(max_new, args.threshold, args.temperature, args.window, args.commit_order,
                        seq_len=config["seq_len"], options=options if options != SamplerOptions() else None)
    nfe, n, seconds, tps, panel = 0, 0, 0.0, 0.0, None
    for i, chunk, room in batches(ids, args.batch_size, max_new, config["seq_len"], default):
        settings.max_new_tokens = room
        _, stats, sec = respond(model, method, cfg, tok, task, chunk, device, settings, args.seed + i)
        for b, row in enumerate(chunk):
            print(("\n" if i + b else "") + shown(tok, len(row), stats, b, room, args.show_order))
        nfe, n, seconds = nfe + stats["nfe"], n + int(stats["n_gen"].sum()), seconds + sec
        tps += stats["tokens_per_step"] * len(chunk)
        if args.plot and i == 0:      # the picture is of the first prompt
            title = order_plot.title(config["method"], cfg, settings, method.KNOBS)
            panel = order_plot.panel(title, tok, stats, 0, len(chunk[0]), room)
    print(f"\n[{config['method']}] forward passes {nfe} | tokens/step {tps / len(ids):.2f} | "
          f"{n} tokens in {seconds:.2f}s = {n / seconds if seconds else 0.0:.1f} tokens/s")
    return panel


if __name__ == "__main__":
    from common.cli import run
    run(main, "sample.py")              # Ctrl-C: one line, exit code 130
