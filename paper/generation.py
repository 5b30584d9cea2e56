"""The paper's generation experiments besides GSM8K, as eval.py / sample.py call them: the official decoding
options per task, infilling (ROCStories, and the shipped task's middle step), unconditional samples.

    options_for(task, tok, method)        the official sampler options of CNN/DM, ROCStories, OWT samples
    infill(...) / evaluate_infill(...)    fill a [MASK] span between a left and a right context, one example at a
                                          time (batch 1, as the official): AR sees the left context only
    arith_infill(examples, tok)           the shipped task with its middle reasoning step masked
    unconditional(...) / sample_unconditional(...)   samples from BOS alone, tokens/s each (sample.py --unconditional)
    evaluate_unconditional(...)           those samples scored (eval.py --task unconditional): generative perplexity
                                          under a reference AR checkpoint, unigram entropy, tokens/step, tokens/s
"""
import math
import re
from collections import Counter

import torch

from decoding import sampler_kwargs, timed
from sampling import SamplerOptions


def options_for(task: str, tok, method: str):
    """The official decoding options of a task (the official eval scripts' settings), or None (plain greedy)."""
    if task == "cnndm":   # diffusion samplers penalise the reply (running_generation), HF generate the prompt too
        return SamplerOptions(repetition_penalty=1.2, length_penalty=(80, 1.1), eos_id=tok.eos_id,
                              penalize_context=method == "ar")
    if task == "rocstories":   # the H100 wrapper: 1.2, with the visible right context counted
        return SamplerOptions(repetition_penalty=1.2, penalize_context=True)
    if task == "owt":     # Table 4: AR p 0.90, no penalty, stop 0.005; the others p 0.95, 1.05, stop 0.01
        ar = method == "ar"
        return SamplerOptions(top_p=0.90 if ar else 0.95, repetition_penalty=1.0 if ar else 1.05,
                              stop_confidence=0.005 if ar else 0.01, stop_patience=4, stop_min_tokens=128)
    return None


def infill(model, method, cfg, tok, method_name, ex, device, options=None, **kw):
    """Fill ex's span between ex["left"] and ex["right"] (token id lists). Returns span ids, stats, seconds.
    AR cannot see a right context: it continues from the left one for len(span) tokens (as the official)."""
    left, n, right = ex["left"], len(ex["span"]), ex["right"]
    ids = left if method_name == "ar" else left + [tok.mask_id] * n + right
    prompt = torch.tensor([ids], device=device)
    (tokens, stats), seconds = timed(device, method.generate, model, prompt, cfg,
                                     max_new_tokens=n if method_name == "ar" else 0, options=options, **kw)
    return tokens[0, len(left):len(left) + n].tolist(), stats, seconds


def evaluate_infill(model, method, cfg, tok, items, config, device, scores, warmup=0, options=None, **kw):
    """Mean of each scorer(filled text, ex) over items, tokens/step, and tokens/s at batch 1 after warm-up."""
    name = config["method"]
    if name == "ar":
        print("note: AR cannot infill: it continues from the left context only, for the span's length")
    for ex in items:
        if len(ex["left"]) + len(ex["span"]) + len(ex["right"]) > config["seq_len"]:
            raise ValueError(f"an example has {len(ex['left']) + len(ex['span']) + len(ex['right'])} tokens with "
                             f"its span, more than the model's context (seq_len={config['seq_len']}): drop it")
    if len(items) <= warmup:
        raise ValueError(f"--warmup {warmup} leaves no example to score: only {len(items)} example(s) are "
                         f"evaluated; raise --limit above --warmup (or lower --warmup)")
    for ex in items[:warmup]:
        infill(model, method, cfg, tok, name, ex, device, options, **kw)
    totals, rates, steps = dict.fromkeys(scores, 0.0), [], []
    for ex in items[warmup:]:
        span, stats, sec = infill(model, method, cfg, tok, name, ex, device, options, **kw)
        text = tok.decode([i for i in span if i != tok.mask_id])
        for key, score in scores.items():
            totals[key] += float(score(text, ex))
        rates.append(len(span) / sec)
        steps.append(stats["tokens_per_step"])
    n = max(len(rates), 1)
    return {**{k: v / n for k, v in totals.items()}, "tokens_per_step": sum(steps) / n,
            "tokens_per_s": sum(rates) / n, "n": len(rates)}


def rouge_scores():
    """ROUGE-1/2/L F-measures of a filled span against ex["answer"] (the rouge-score package)."""
    from data.cnndm import rouge
    return {k: (lambda text, ex, f=rouge(k): f(text, ex["answer"])) for k in ("rouge1", "rouge2", "rougeL")}


# ----------------------------------------------------------------------------- the shipped task's middle step

STEP = re.compile(r"(-?\d+)([+\-*])(\d+)=(-?\d+)\.")


def arith_infill(examples: list[dict], tok) -> list[dict]:
    """Each arith test problem with its middle reasoning step masked (step n // 2 of n: the 2nd of 2 or 3,
    the 3rd of 4): left = prompt + the steps before, span = that step, right = the rest + EOS."""
    out = []
    for ex in examples:
        steps = ex["target"].split(" ")
        eqs = [i for i, s in enumerate(steps) if STEP.fullmatch(s)]
        k = eqs[len(eqs) // 2]
        left = ex["prompt"] + "".join(s + " " for s in steps[:k])
        out.append({"left": tok.encode(left), "span": tok.encode(steps[k]),
                    "right": tok.encode(" " + " ".join(steps[k + 1:])) + [tok.eos_id],
                    "answer": ex["answer"], "step": steps[k], "before": steps[:k], "after": steps[k + 1:]})
    return out


def chain_ok(steps: list[str], answer: str) -> bool:
    """Every step is a true equation starting from the previous result, and '#### n' repeats the last result."""
    prev = None
    for s in steps[:-2]:
        m = STEP.fullmatch(s)
        if not m:
            return False
        a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
        if (prev is not None and a != prev) or {"+": a + b, "-": a - b, "*": a * b}[op] != c:
            return False
        prev = c
    return steps[-2:] == ["####", str(prev)] and str(prev) == answer


ARITH_SCORES = {
    "step_exact": lambda text, ex: text == ex["step"],
    "answer_right": lambda text, ex: chain_ok(ex["before"] + [text] + ex["after"], ex["answer"]),
}


# ----------------------------------------------------------------------------- unconditional samples

def unconditional(model, method, cfg, tok, n, max_new, device, seed=0, options=None, **kw) -> list[dict]:
    """n samples from BOS alone, one at a time (batch 1). Per sample: ids (the new tokens up to its stop, the
    first EOS after the first start - 1; [MASK]s of columns never generated dropped), text, tokens_per_s,
    tokens_per_step, nfe."""
    samples = []
    g = torch.Generator(device=device).manual_seed(seed)
    for _ in range(n):
        prompt = torch.tensor([[tok.eos_id]], device=device)          # BOS = EOS (GPT-2, Qwen3, bytes)
        start = max(options.stop_min_tokens if options else 0, 1)       # EOS before start does not stop a row
        (tokens, stats), sec = timed(device, method.generate, model, prompt, cfg, max_new_tokens=max_new,
                                     generator=g, options=options, temperature=1.0,
                                     stop=eos_stop(tok.eos_id, start), **kw)
        ids = tokens[0].tolist()
        ends = [j for j in range(start, len(ids)) if ids[j] == tok.eos_id]
        new = [i for i in ids[1:ends[0] if ends else len(ids)] if i != tok.mask_id]
        samples.append({"ids": new, "text": tok.decode(new), "tokens_per_s": int(stats["n_gen"].sum()) / sec,
                        "tokens_per_step": stats["tokens_per_step"], "nfe": stats["nfe"]})
    return samples


def unconditional_tokens(max_new_tokens, seq_len: int) -> int:
    """sample.py --unconditional's number of new tokens: --max-new-tokens, or seq_len - 1 (all that fits after
    the BOS token); a number that does not fit is a ValueError (one line)."""
    max_new = max_new_tokens if max_new_tokens is not None else seq_len - 1
    if max_new < 1:
        raise ValueError(f"--unconditional with --max-new-tokens {max_new}: it samples from BOS alone, so give "
                         f"--max-new-tokens 1 or more (default: seq_len - 1 = {seq_len - 1})")
    if 1 + max_new > seq_len:
        raise ValueError(f"--max-new-tokens {max_new} and the BOS token are more than the model's context "
                         f"(seq_len={seq_len}): at most {seq_len - 1} new tokens fit")
    return max_new


def sample_unconditional(args, model, method, cfg, config, tok, options, device, max_new: int):
    """sample.py --unconditional: args.n samples at batch 1, each printed, then the mean tokens/s."""
    kw = sampler_kwargs(method, args.threshold, args.window, seq_len=config["seq_len"])
    kw.pop("temperature")
    samples = unconditional(model, method, cfg, tok, args.n, max_new, device, args.seed, options, **kw)
    for i, s in enumerate(samples):
        print(f"--- sample {i}\n{s['text']}")
    rate = sum(s["tokens_per_s"] for s in samples) / len(samples)
    print(f"\n[{config['method']}] {args.n} samples, up to {max_new} tokens, top-p {options.top_p}, repetition "
          f"penalty {options.repetition_penalty}: {rate:.1f} tokens/s (batch 1)")


def unigram_entropy(ids) -> float:
    """Entropy (nats) of the unigram distribution of one sample's tokens, -sum_v p_v log p_v with p_v = count of v
    / len(ids): low when a sample repeats itself (0 for one token repeated; 0 for an empty sample)."""
    n = len(ids)
    return -sum(c / n * math.log(c / n) for c in Counter(ids).values()) if n else 0.0


def check_reference(config: dict, ref_config: dict, ref_path: str, max_new: int) -> None:
    """The --ref-ckpt that scores the samples must be AR (an exact likelihood), use the samples' tokenizer and hold
    the BOS and max_new tokens in its context (ValueError: one line)."""
    if ref_config["method"] != "ar":
        raise ValueError(f"--ref-ckpt {ref_path} is a {ref_config['method']} checkpoint: generative perplexity needs "
                         f"an AR model (its likelihood is exact); give an AR checkpoint trained on the same data")
    if ref_config["tokenizer"] != config["tokenizer"]:
        raise ValueError(f"--ref-ckpt {ref_path} uses the {ref_config['tokenizer']} tokenizer, the samples are "
                         f"{config['tokenizer']} tokens: give an AR checkpoint trained with the {config['tokenizer']} "
                         f"tokenizer")
    if 1 + max_new > ref_config["seq_len"]:
        raise ValueError(f"--ref-ckpt {ref_path} has a context of {ref_config['seq_len']} tokens, fewer than the BOS "
                         f"and {max_new} new tokens: pass --max-new-tokens {ref_config['seq_len'] - 1} or less")


@torch.no_grad()
def reference_nll(ref, bos: int, ids: list, device) -> tuple[float, int]:
    """(summed NLL in nats, number of tokens) of ids after BOS under ref = (model, method, cfg), an AR model: its
    exact nll(), position 0 (the BOS) context only."""
    model, method, cfg = ref
    x0 = torch.tensor([[bos] + list(ids)], device=device)                     # (1, 1 + n)
    prompt_mask = torch.zeros_like(x0, dtype=torch.bool)
    prompt_mask[:, 0] = True
    nll, n = method.nll(model, x0, cfg, prompt_mask, torch.zeros_like(prompt_mask))
    return float(nll.sum()), int(n.sum())


def evaluate_unconditional(model, method, cfg, tok, ref, n, max_new, device, seed=0, warmup=0, options=None,
                           **kw) -> dict:
    """eval.py --task unconditional: warmup + n samples from BOS at batch 1 (the first warmup only time the
    start), the last n scored: generative perplexity = exp(the reference model's NLL summed over all their
    tokens / their number), the mean unigram entropy per sample, tokens/step, tokens/s (batch 1), and the texts."""
    samples = unconditional(model, method, cfg, tok, warmup + n, max_new, device, seed, options, **kw)[warmup:]
    scored = [reference_nll(ref, tok.eos_id, s["ids"], device) for s in samples]
    nll, count = sum(x for x, _ in scored), sum(k for _, k in scored)
    if count == 0:
        raise ValueError(f"the {n} samples hold no token to score (each stopped at once): raise -n or "
                         f"--max-new-tokens")
    rates = [s["tokens_per_s"] for s in samples]
    mean = sum(rates) / n
    return {"gen_ppl": math.exp(nll / count), "gen_nll": nll / count,
            "entropy": sum(unigram_entropy(s["ids"]) for s in samples) / n,
            "tokens_per_step": sum(s["tokens_per_step"] for s in samples) / n, "tokens_per_s": mean,
            "tokens_per_s_std": (sum((r - mean) ** 2 for r in rates) / n) ** 0.5,
            "sample_tokens": count / n, "nfe": sum(s["nfe"] for s in samples), "n": n,
            "samples": [s["text"] for s in samples]}


def evaluate_task(task_name, data, examples, model, method, cfg, tok, config, device, sentences=1, warmup=0,
                  **kw):
    """eval.py --task rocstories | infill: the infilling items of the task, then evaluate_infill."""
    if task_name == "rocstories":
        items, scores = data.examples(tok, examples, sentences), rouge_scores()
    elif config["data"] != "arith":
        raise ValueError(f"--task infill masks a step of the shipped arith task; this checkpoint was trained on "
                         f"{config['data']}")
    else:
        items, scores = arith_infill(examples, tok), ARITH_SCORES
    return evaluate_infill(model, method, cfg, tok, items, config, device, scores, warmup=warmup, **kw)


def eos_stop(eos_id: int, start: int = 1):
    """A sampler stop hook for a 1-token (BOS) prompt: a row stops at an EOS in column >= start, i.e. after the
    first start - 1 new tokens (the official EntropyEosStoppingCriteria: ignore_prompt_eos, confidence_min_tokens)."""
    return lambda tokens, end: torch.stack([(row[start:e] == eos_id).any() for row, e in zip(tokens, end.tolist())])
