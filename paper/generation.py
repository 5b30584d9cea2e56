"""The paper's generation experiments besides GSM8K, as eval.py / sample.py call them: the official decoding
options per task and unconditional samples (infilling: paper/infill.py).

    options_for(task, tok, method)        the official sampler options of CNN/DM, ROCStories, OWT samples
    unconditional(...) / sample_unconditional(...)   samples from BOS alone, tokens/s each (sample.py --unconditional)
    evaluate_unconditional(...)           those samples scored (eval.py --task unconditional): generative perplexity
                                          under a reference AR checkpoint, unigram entropy, tokens/step, tokens/s
"""
import math
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


def eos_stop(eos_id: int, start: int = 1):
    """A sampler stop hook for a 1-token (BOS) prompt: a row stops at an EOS in column >= start, i.e. after the
    first start - 1 new tokens (the official EntropyEosStoppingCriteria: ignore_prompt_eos, confidence_min_tokens)."""
    return lambda tokens, end: torch.stack([(row[start:e] == eos_id).any() for row, e in zip(tokens, end.tolist())])
