"""What the scripts measure (train.py's held-out evaluation, eval.py, bench/): a task's scores with
tokens/step and tokens/s, throughput at batch 1 (the paper's protocol), the likelihood of held-out targets or
corpus rows, and the markdown table every result is printed as.

    evaluate_accuracy / evaluate_throughput  the task's scores / tokens/s at batch 1 (median of rounds)
    interleaved_throughput(runs, ...)        several runs' batch-1 tokens/s, timed in turn, in one measurement
    evaluate_likelihood(model, method, ...)  NLL per token of a task's targets or a corpus' rows
    held_out(model, ..., args, ...)          train.py's evaluation: held-out accuracy, or a corpus' validation
                                             NLL
    bits_per_char(nll, tok)                  nats/token as bits/char of a byte-level model
    window_used(window, method, cfg)         the Set Diffusion window a run decodes with (default smax / 2)
    run_record(config, ckpt, task, ...)      the settings every result JSON starts with (eval.py,
                                             paper/speed.py)
    markdown_table(head, rows)               one table format for eval.py, paper/results.py and bench/
"""
import math
import sys

import numpy as np
import torch

from common.cli import no_examples_left
from data import encode, is_corpus
from common.replies import respond
from sampling import Settings


def evaluate_accuracy(model, method, cfg, tok, task, examples, device, settings: Settings, batch_size=32,
                      seed=0, stop_opts=None):
    """The task's scores (accuracy first), mean tokens per step and tokens/s over the examples; with the
    replies ("completions") and, per example, what eval.py --replies writes ("records": reply_record)."""
    completions, records, tps, n_tok, seconds, nfe = [], [], 0.0, 0, 0.0, 0
    hits = dict.fromkeys(task.SCORES, 0)
    for i in range(0, len(examples), batch_size):
        chunk = examples[i:i + batch_size]
        texts, stats, sec = respond(model, method, cfg, tok, task, [e["prompt"] for e in chunk], device,
                                    settings, seed + i, stop_opts)
        completions += texts
        for text, e in zip(texts, chunk):
            verdicts = {name: score(text, e["answer"]) for name, score in task.SCORES.items()}
            for name, v in verdicts.items():
                hits[name] += v
            records.append(reply_record(task, len(records), e, text, verdicts))
        tps += stats["tokens_per_step"] * len(chunk)
        n_tok, seconds, nfe = n_tok + int(stats["n_gen"].sum()), seconds + sec, nfe + stats["nfe"]
    n = len(examples)
    return {**{k: v / n for k, v in hits.items()}, "tokens_per_step": tps / n,
            "tokens_per_s": n_tok / seconds, "nfe": nfe, "n": n, "completions": completions,
            "records": records}


def reply_record(task, index: int, example: dict, reply: str, verdicts: dict) -> dict:
    """One example as eval.py --replies writes it (lm-eval's --log_samples): its prompt, the reply, the gold
    answer, what each scorer extracted from the reply (the task's ANSWERS, where it has them) and each
    scorer's verdict (bools; ROUGE's F-measures)."""
    extracted = {name: get(reply) for name, get in getattr(task, "ANSWERS", {}).items()}
    return {"index": index, "prompt": example["prompt"], "reply": reply, "answer": example["answer"],
            **({"extracted": extracted} if extracted else {}), "scores": verdicts}


def evaluate_throughput(model, method, cfg, tok, task, examples, device, settings: Settings, warmup=5,
                        batch_size=16, stop_opts=None, rounds=3):
    """Tokens/s at batch size 1 after `warmup` examples (the paper's protocol), repeated for `rounds` rounds:
    the median round and the range over rounds (interleaved_throughput with one run); then at batch_size."""
    run = {"model": model, "method": method, "cfg": cfg, "tok": tok, "task": task, "settings": settings,
           "stop_opts": stop_opts}
    prompts = [e["prompt"] for e in examples]
    m = interleaved_throughput({"run": run}, prompts, device, warmup, rounds)["run"]
    measured = prompts[warmup:][:batch_size]
    for _ in range(2):                      # the first batched call warms up (and compiles) that shape
        _, stats, sec = respond(model, method, cfg, tok, task, measured, device, settings,
                                stop_opts=stop_opts)
    return {**m, "tokens_per_s_batched": int(stats["n_gen"].sum()) / sec, "batch_size": len(measured)}


def interleaved_throughput(runs: dict, prompts: list, device, warmup=5, rounds=3) -> dict:
    """Batch-1 tokens/s of several runs compared in one measurement: each run decodes the first `warmup`
    prompts untimed, then, `rounds` times over, every measured prompt is decoded by every run in turn (the
    order rotated by prompt), so that a slow phase of a shared machine falls on all runs alike. A round's
    figure is the paper's: the mean over prompts of each sample's tokens / seconds. Per run: the median round
    (tokens_per_s), the rounds' range (tokens_per_s_min, _max), the per-sample spread of the median round
    (tokens_per_s_std), tokens per step and forward passes. runs: {name: {model, method, cfg, tok, task,
    settings, stop_opts}}."""
    from tqdm import tqdm
    if len(prompts) <= warmup:
        raise ValueError(no_examples_left(warmup, len(prompts)))
    names, measured = list(runs), prompts[warmup:]
    rates = {n: [[] for _ in range(rounds)] for n in names}        # run -> round -> per-sample tokens/s
    steps, nfe = {n: [] for n in names}, dict.fromkeys(names, 0)

    def one(n, prompt, seed):
        r = runs[n]
        return respond(r["model"], r["method"], r["cfg"], r["tok"], r["task"], [prompt], device,
                       r["settings"], seed, r.get("stop_opts"))
    with tqdm(total=len(names) * (warmup + rounds * len(measured)), desc="throughput", unit="run",
              file=sys.stderr, disable=None, dynamic_ncols=True) as bar:
        for p in prompts[:warmup]:
            for n in names:
                one(n, p, 0)
                bar.update()
        for k in range(rounds):
            for j, p in enumerate(measured):
                for n in names[j % len(names):] + names[:j % len(names)]:
                    _, stats, sec = one(n, p, j)
                    rates[n][k].append(int(stats["n_gen"].sum()) / sec)
                    if k == 0:
                        steps[n].append(stats["tokens_per_step"])
                        nfe[n] += stats["nfe"]
                    bar.update()
    return {n: round_summary(rates[n], steps[n], nfe[n]) for n in names}


def round_summary(rates: list, steps: list, nfe: int) -> dict:
    """rates: per round, each sample's tokens/s -> the median round's mean, the rounds' range, that round's
    per-sample standard deviation; with the mean tokens/step and the forward passes of one round."""
    means = [sum(r) / len(r) for r in rates]
    k = sorted(range(len(means)), key=means.__getitem__)[(len(means) - 1) // 2]     # the (lower) median round
    std = (sum((x - means[k]) ** 2 for x in rates[k]) / len(rates[k])) ** 0.5
    return {"tokens_per_s": means[k], "tokens_per_s_min": min(means), "tokens_per_s_max": max(means),
            "tokens_per_s_std": std, "rounds": len(means), "tokens_per_step": sum(steps) / len(steps),
            "nfe": nfe, "n": len(rates[k])}


@torch.no_grad()
def evaluate_likelihood(model, method, cfg, tok, examples, seq_len, device, batch_size=32, seed=0,
                        exclusions="none", encode_fn=encode):
    """Per-token negative log-likelihood of the targets (exact for AR, an upper bound for the others).
    exclusions="official" (a method with OFFICIAL_EXCLUDES: Set Diffusion, as the official eval): pad-id
    targets (EOS when pad = EOS) are not counted, nor position 0 (keep_clean_bos); "none" counts every target.
    encode_fn(tok, examples[i:j], seq_len) makes a batch (e.g. a corpus' token rows: data/corpus.batch)."""
    total, count = 0.0, 0
    g = torch.Generator(device=device).manual_seed(seed)
    for i in range(0, len(examples), batch_size):
        batch = {k: v.to(device) for k, v in encode_fn(tok, examples[i:i + batch_size], seq_len).items()}
        x0, extra = batch["x0"], {}
        if exclusions == "official" and method.OFFICIAL_EXCLUDES:
            extra["exclude"] = (x0 == tok.pad_id) | (torch.arange(x0.shape[1], device=device) == 0)
        nll, n = method.nll(model, x0, cfg, batch["prompt_mask"], batch["pad_mask"], generator=g, **extra)
        total, count = total + nll.sum().item(), count + n.sum().item()
    return {"nll": total / count, "perplexity": math.exp(total / count), "n": len(examples), "tokens": count,
            "exclusions": exclusions}


def bits_per_char(nll: float, tok) -> float | None:
    """Nats per token as bits per character, for a byte-level tokenizer (a byte is a character of ASCII text);
    None for any other tokenizer."""
    return nll / math.log(2) if tok.name == "bytes" else None


# ----------------------------------------------------------------------------- train.py's evaluation

def held_out(model, method, cfg, tok, task, args, device, config, show):
    """train.py's periodic and final evaluation: held-out accuracy (and one sample) with the sampler flags
    given to train.py (args); on a corpus, the validation NLL instead (validate). Returns the metrics."""
    if is_corpus(config["data"]):
        return validate(model, method, cfg, tok, task, args, device, config, show)
    model.eval()
    examples = task.load("test", args.data_dir)[:args.eval_limit]
    settings = Settings(args.max_new_tokens, args.threshold, window=args.window, seq_len=config["seq_len"])
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


# ----------------------------------------------------------------------------- results as JSON and markdown

def window_used(window: int, method, cfg) -> int:
    """The Set Diffusion window a run decodes with: the one given, else smax / 2; 0 for the other methods."""
    return cfg.window(window) if "window" in method.KNOBS else 0


def run_record(config: dict, ckpt: str, task: str, threshold=math.inf, window=0, commit_order="l2r",
               stop_on_im_end=False, official=False) -> dict:
    """The fields every result JSON starts with: what was measured, on which checkpoint, with which sampler
    settings, the method's own settings (smax, S, ...; the mask id left out), and the environment that trained
    the checkpoint (its config.json's: None for a released one or an older one)."""
    return {"task": task, "model": config["method"], "ckpt": ckpt, "threshold": threshold, "window": window,
            "commit_order": commit_order, "stop_on_im_end": stop_on_im_end,
            "official": official,
            "method_config": {k: v for k, v in config["method_config"].items() if k != "mask_id"},
            "ckpt_environment": config.get("environment")}


def markdown_table(head: list, rows: list) -> str:
    """A markdown table: the header, its rule, one line per row. A float cell shows 4 significant digits, any
    other cell as str (callers format the cells that want another precision)."""
    def line(cells):
        return "| " + " | ".join(f"{c:.4g}" if isinstance(c, float) else str(c) for c in cells) + " |"
    return "\n".join([line(head), "|" + "---|" * len(head), *map(line, rows)])
