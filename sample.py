r"""Generate from a checkpoint and show how it decoded.

    python sample.py --ckpt out/setdiffusion                         # a held-out problem of its task
    python sample.py --ckpt out/setdiffusion --threshold 0.8 --show-order
    python sample.py --ckpt out/ar --prompt "Ann has 5 pens. She buys 3. How many?\n"
    python sample.py --ckpt out/dates --prompt-file prompts.txt     # one prompt per line, in batches
    python sample.py --ckpt out/dates --prompt "2021-03-09 = {mask:2} March 2021" --max-new-tokens 0
    python sample.py --ckpt out/shakespeare/ar --prompt "ROMEO:"    # a corpus checkpoint continues the text

--show-order marks each token with the step that decoded it (a colour per step in a terminal, else [s] before
a run of tokens of step s); --plot FILE.png draws it, a panel per --ckpt (`make decoding-picture`). [MASK]
spans in a prompt (<|mask|>, or {mask:N} for N) are filled in place by Set Diffusion, MDLM and BD3-LM (AR
refuses them); all other prompt text is plain text. A corpus checkpoint (shakespeare, text:PATH, owt, lm1b)
reads a prompt after its BOS and continues BOS alone without one. The paper's unconditional samples (its OWT
sampler options, scored and timed) are eval.py --task unconditional.
"""
import argparse
import math
import sys

# first, before torch loads OpenMP: a short spin wait (common/cli.py)
from common import cli

from common import order_plot
from common.cli import check_nonnegative, check_positive, check_window, refuse_unused
from common.eval_args import load_for_inference, speed_args
from common.metrics import respond
from data import get_corpus, get_task, get_tokenizer, is_corpus
from data.prompts import batches, encode_prompts, prompt_texts
from sampling import PaperMode, SamplerOptions, Settings, check, check_temperature, check_threshold


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, action="append",
                   help="checkpoint directory (written by train.py); several only with --plot (a panel each)")
    p.add_argument("--device", default="auto", help="cuda, mps, cpu or auto")
    p.add_argument("--prompt", default=None,
                   help="prompt text (default: the first held-out problem; on a corpus "
                   "checkpoint, BOS alone)")
    p.add_argument("--prompt-file", default=None,
                   help="a text file of prompts, one per line, generated in batches")
    p.add_argument("--batch-size", type=int, default=32, help="prompts generated at once")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens to generate (0: only fill [MASK]s)")
    p.add_argument("--threshold", type=float, default=math.inf,
                   help="confidence threshold tau (inf = 1/step)")
    p.add_argument("--window", type=int, default=0, help="Set Diffusion window W (0 = smax / 2)")
    p.add_argument("--commit-order", choices=["l2r", "fht"], default="l2r",
                   help="Set Diffusion: commit a step's tokens left to right or by first-hitting time")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (needs --temperature > 0 below 1)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, help="HF repetition penalty (1 = off)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--show-order", action="store_true", help="mark each token with the step that decoded it")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="with --show-order: draw the step that "
                   "revealed each position of one prompt, a panel per --ckpt, in the format of the file's "
                   "suffix (.png, .pdf, .svg, ...; needs matplotlib)")
    speed_args(p)
    return p


def get_args(argv=None):
    return parser().parse_args(argv)


def check_flags(args) -> SamplerOptions | None:
    """The range checks of sample.py's flags, before a checkpoint is loaded (ValueError: one line); the
    sampler options they ask for (None: plain sampling)."""
    check_positive("--batch-size", args.batch_size)
    if args.max_new_tokens is not None:
        check_nonnegative("--max-new-tokens", args.max_new_tokens, "0 = only fill [MASK]s")
    check_temperature(args.temperature, "--temperature")
    check_threshold(args.threshold, "--threshold")
    refuse_unused(parser(), args, lambda dest: None, set(), "", "")   # --top-p without --temperature
    if args.prompt is not None and args.prompt_file:
        raise ValueError("give --prompt or --prompt-file, not both")
    if args.plot and (not args.show_order or args.prompt_file):
        raise ValueError("--plot draws the order of one prompt: add --show-order, and --prompt or none")
    if len(args.ckpt) > 1 and not args.plot:
        raise ValueError("several --ckpt are drawn one panel each: add --show-order --plot FILE.png")
    if args.plot:
        order_plot.require(args.plot)
    options = SamplerOptions(top_p=args.top_p, repetition_penalty=args.repetition_penalty)
    check(options, args.temperature)
    return None if options == SamplerOptions() else options


def main(argv=None):
    args = get_args(argv)
    panels = [decode(args, ckpt) for ckpt in args.ckpt]      # several only with --plot: check_flags
    if args.plot:
        try:
            order_plot.draw(panels, args.plot)
        except ValueError as e:                              # a full disk: one line, the earlier file kept
            sys.exit(f"error: {e}")
        print(f"\nwrote {args.plot}")


def decode(args, ckpt: str):
    """Load ckpt, reply to the prompts and print them; with --plot, return the first prompt's panel."""
    try:
        options = check_flags(args)
        device, model, method, cfg, config = load_for_inference(
            argparse.Namespace(**{**vars(args), "ckpt": ckpt}))
        tok, L = get_tokenizer(config["tokenizer"]), config["seq_len"]
        check_window(args.window, method, cfg)
        task = None if is_corpus(config["data"]) else get_task(config["data"], config.get("data_options"))
        default = args.max_new_tokens is None
        max_new = config.get("sampler", {}).get("max_new_tokens", 64) if default else args.max_new_tokens
        head = [] if task is not None else [get_corpus(config["data"]).bos(tok)]
        ids = encode_prompts(tok, *prompt_texts(args.prompt, args.prompt_file, task), head, L,
                             0 if default else max_new, method.CAN_INFILL, config["method"])
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    settings = Settings(max_new, args.threshold, args.temperature, setdiffusion_window=args.window,
                        setdiffusion_commit_order=args.commit_order,
                        paper=PaperMode(seq_len=L, options=options))
    nfe, n, tps, panel = 0, 0, 0.0, None
    for i, chunk, room in batches(ids, args.batch_size, max_new, L, default):
        settings.max_new_tokens = room
        _, stats, _ = respond(model, method, cfg, tok, task, chunk, device, settings, args.seed + i)
        for b, row in enumerate(chunk):
            text = order_plot.text(tok, stats, b, len(row), room, args.show_order, sys.stdout.isatty())
            print(("\n" if i + b else "") + text)
        nfe, n = nfe + stats["nfe"], n + int(stats["n_gen"].sum())
        tps += stats["tokens_per_step"] * len(chunk)
        if args.plot and i == 0:      # the picture is of the first prompt
            title = order_plot.title(config["method"], cfg, settings, method.KNOBS)
            panel = order_plot.panel(title, tok, stats, 0, len(chunk[0]), room)
    print(f"\n[{config['method']}] forward passes {nfe} | tokens/step {tps / len(ids):.2f} | {n} tokens")
    return panel


if __name__ == "__main__":
    cli.run(main, "sample.py")              # Ctrl-C: one line, exit code 130
