"""What the scripts measure (train.py's held-out evaluation, eval.py, bench/): a task's scores with tokens/step
and tokens/s, throughput at batch 1 (the paper's protocol), the likelihood of held-out targets or corpus rows,
and the markdown table every result is printed as.

    evaluate_accuracy / evaluate_throughput  the task's scores / tokens/s at batch 1
    evaluate_likelihood(model, method, ...)  NLL per token of a task's targets or a corpus' rows
    bits_per_char(nll, tok)                  nats/token as bits/char of a byte-level model
    markdown_table(head, rows)               one table format for eval.py, paper/results.py and bench/
"""
import math
import sys

import torch

from cli import no_examples_left
from data import encode
from generate import generate, sampler_kwargs, takes


def evaluate_accuracy(model, method, cfg, tok, task, examples, config, device, threshold=math.inf, window=0,
                      max_new_tokens=64, batch_size=32, temperature=0.0, seed=0, mdlm_block=32, commit_order="l2r",
                      stop_opts=None, options=None, official_blocks=False):
    """The task's scores (accuracy first), mean tokens per step and tokens/s over the examples."""
    kw = sampler_kwargs(method, threshold, window, temperature, mdlm_block, commit_order, options, config["seq_len"],
                        official_blocks)
    completions, hits, tps, n_tok, seconds, nfe = [], dict.fromkeys(task.SCORES, 0), 0.0, 0, 0.0, 0
    for i in range(0, len(examples), batch_size):
        chunk = examples[i:i + batch_size]
        texts, stats, sec = generate(model, method, cfg, tok, task, [e["prompt"] for e in chunk], device,
                                     max_new_tokens, seed + i, stop_opts, **kw)
        completions += texts
        for name, score in task.SCORES.items():
            hits[name] += sum(score(t, e["answer"]) for t, e in zip(texts, chunk))
        tps += stats["tokens_per_step"] * len(chunk)
        n_tok, seconds, nfe = n_tok + int(stats["n_gen"].sum()), seconds + sec, nfe + stats["nfe"]
    n = len(examples)
    return {**{k: v / n for k, v in hits.items()}, "tokens_per_step": tps / n, "tokens_per_s": n_tok / seconds,
            "nfe": nfe, "n": n, "completions": completions}


def evaluate_throughput(model, method, cfg, tok, task, examples, config, device, warmup=5, batch_size=16,
                        max_new_tokens=64, stop_opts=None, **kw):
    """Tokens/s at batch size 1 after `warmup` examples (the paper's protocol), then at batch_size.
    A progress bar on stderr when it is a terminal (the run takes a minute or so)."""
    from tqdm import tqdm
    kw = {**sampler_kwargs(method, seq_len=config["seq_len"], **kw), "stop_opts": stop_opts}
    prompts = [e["prompt"] for e in examples]
    if len(prompts) <= warmup:
        raise ValueError(no_examples_left(warmup, len(prompts)))
    rates, steps, nfe = [], [], 0
    measured = prompts[warmup:]
    with tqdm(total=len(prompts) + 2, desc="throughput", unit="run", file=sys.stderr, disable=None,
              dynamic_ncols=True) as bar:
        for p in prompts[:warmup]:
            generate(model, method, cfg, tok, task, [p], device, max_new_tokens, **kw)
            bar.update()
        for j, p in enumerate(measured):
            _, stats, sec = generate(model, method, cfg, tok, task, [p], device, max_new_tokens, seed=j, **kw)
            rates.append(int(stats["n_gen"].sum()) / sec)
            steps.append(stats["tokens_per_step"])
            nfe += stats["nfe"]
            bar.update()
        for _ in range(2):                      # the first batched call warms up (and compiles) that shape
            _, stats, sec = generate(model, method, cfg, tok, task, measured[:batch_size], device, max_new_tokens,
                                     **kw)
            bar.update()
    mean = sum(rates) / len(rates)
    return {"tokens_per_s": mean, "tokens_per_s_std": (sum((r - mean) ** 2 for r in rates) / len(rates)) ** 0.5,
            "tokens_per_step": sum(steps) / len(steps), "nfe": nfe, "n": len(rates),
            "tokens_per_s_batched": int(stats["n_gen"].sum()) / sec, "batch_size": len(measured[:batch_size])}


@torch.no_grad()
def evaluate_likelihood(model, method, cfg, tok, examples, seq_len, device, batch_size=32, seed=0,
                        exclusions="none", encode_fn=encode):
    """Per-token negative log-likelihood of the targets (exact for AR, an upper bound for the others).
    exclusions="official" (a method whose nll takes `exclude`: Set Diffusion, as the official eval): pad-id
    targets (EOS when pad = EOS) are not counted, nor position 0 (keep_clean_bos); "none" counts every target.
    encode_fn(tok, examples[i:j], seq_len) makes a batch (e.g. a corpus' token rows: data/corpus.batch)."""
    total, count = 0.0, 0
    g = torch.Generator(device=device).manual_seed(seed)
    for i in range(0, len(examples), batch_size):
        batch = {k: v.to(device) for k, v in encode_fn(tok, examples[i:i + batch_size], seq_len).items()}
        x0, extra = batch["x0"], {}
        if exclusions == "official" and "exclude" in takes(method.nll):
            extra["exclude"] = (x0 == tok.pad_id) | (torch.arange(x0.shape[1], device=device) == 0)
        nll, n = method.nll(model, x0, cfg, batch["prompt_mask"], batch["pad_mask"], generator=g, **extra)
        total, count = total + nll.sum().item(), count + n.sum().item()
    return {"nll": total / count, "perplexity": math.exp(total / count), "n": len(examples), "tokens": count,
            "exclusions": exclusions}


def bits_per_char(nll: float, tok) -> float | None:
    """Nats per token as bits per character, for a byte-level tokenizer (a byte is a character of ASCII text);
    None for any other tokenizer."""
    return nll / math.log(2) if tok.name == "bytes" else None


# ----------------------------------------------------------------------------- results as markdown

def markdown_table(head: list, rows: list) -> str:
    """A markdown table: the header, its rule, one line per row. A float cell shows 4 significant digits, any
    other cell as str (callers format the cells that want another precision)."""
    def line(cells):
        return "| " + " | ".join(f"{c:.4g}" if isinstance(c, float) else str(c) for c in cells) + " |"
    return "\n".join([line(head), "|" + "---|" * len(head), *map(line, rows)])
