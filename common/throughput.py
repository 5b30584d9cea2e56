"""Tokens/s at batch 1, the paper's protocol (eval.py --task throughput, python -m paper.speed, bench/): each
measured prompt decoded alone after warm-up prompts, for several rounds, the median round reported with the
rounds' range; several runs compared in one measurement are timed in turn, so that a slow phase of a shared
machine falls on all of them alike.

    evaluate_throughput(model, method, ...)   one run: batch 1 (median of rounds), then batched
    interleaved_throughput(runs, prompts, ...)   several runs' batch-1 tokens/s, timed in turn
"""
import sys

from common.eval_args import no_examples_left
from common.metrics import respond
from sampling import Settings


def evaluate_throughput(model, method, cfg, tok, task, examples, device, settings: Settings, warmup=5,
                        batch_size=16, stop_opts=None, rounds=3, compiled=False):
    """Tokens/s at batch size 1 after `warmup` examples (the paper's protocol), repeated for `rounds` rounds:
    the median round and the range over rounds (interleaved_throughput with one run); then at batch_size.
    compiled: a model compiled per shape (eval.py --compile), warmed on every measured prompt too."""
    run = {"model": model, "method": method, "cfg": cfg, "tok": tok, "task": task, "settings": settings,
           "stop_opts": stop_opts}
    prompts = [e["prompt"] for e in examples]
    m = interleaved_throughput({"run": run}, prompts, device, warmup, rounds, compiled)["run"]
    measured = prompts[warmup:][:batch_size]
    for _ in range(2):                      # the first batched call warms up (and compiles) that shape
        _, stats, sec = respond(model, method, cfg, tok, task, measured, device, settings,
                                stop_opts=stop_opts)
    return {**m, "tokens_per_s_batched": int(stats["n_gen"].sum()) / sec, "batch_size": len(measured)}


def interleaved_throughput(runs: dict, prompts: list, device, warmup=5, rounds=3, compiled=False) -> dict:
    """Batch-1 tokens/s of several runs compared in one measurement: each run decodes the first `warmup`
    prompts untimed, then, `rounds` times over, every measured prompt is decoded by every run in turn (the
    order rotated by prompt), so that a slow phase of a shared machine falls on all runs alike. A round's
    figure is the paper's: the mean over prompts of each sample's tokens / seconds. Per run: the median round
    (tokens_per_s), the rounds' range (tokens_per_s_min, _max), the per-sample spread of the median round
    (tokens_per_s_std), tokens per step and forward passes. runs: {name: {model, method, cfg, tok, task,
    settings, stop_opts}}. compiled: the warm-up also decodes every measured prompt once, so that no timed
    decode compiles a new shape (MDLM's canvas is as wide as prompt + reply: a graph per prompt length)."""
    from tqdm import tqdm
    if len(prompts) <= warmup:
        raise ValueError(no_examples_left(warmup, len(prompts)))
    names, measured = list(runs), prompts[warmup:]
    warm = prompts[:warmup] + (measured if compiled else [])
    rates = {n: [[] for _ in range(rounds)] for n in names}        # run -> round -> per-sample tokens/s
    steps, nfe = {n: [] for n in names}, dict.fromkeys(names, 0)

    def one(n, prompt, seed):
        r = runs[n]
        return respond(r["model"], r["method"], r["cfg"], r["tok"], r["task"], [prompt], device,
                       r["settings"], seed, r.get("stop_opts"))
    with tqdm(total=len(names) * (len(warm) + rounds * len(measured)), desc="throughput", unit="run",
              file=sys.stderr, disable=None, dynamic_ncols=True) as bar:
        for p in warm:
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
