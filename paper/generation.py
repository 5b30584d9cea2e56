"""The paper's open-generation metrics (eval.py --task unconditional): samples from BOS alone (generate.py's
`unconditional`, with the official OWT options) scored as the paper's Table 4 scores them.

    evaluate_unconditional(...)   generative perplexity under a reference AR checkpoint, unigram entropy,
                                  tokens/step, tokens/s (batch 1), and the texts (MAUVE and generative
                                  perplexity under Hugging Face models: paper/hf_metrics.py)
    check_reference(...)          the reference checkpoint must be AR, of the samples' tokenizer, long enough
    run(args, ...)                eval.py --task unconditional: the samples scored by every scorer given
"""
import dataclasses
import math
from collections import Counter

import torch

from common import checkpoint
from common.cli import unconditional_tokens
from common.replies import unconditional
from data import get_tokenizer, sampler_preset
from sampling import Settings
from paper import hf_metrics


# ----------------------------------------------------------------------------- scoring unconditional samples

def unigram_entropy(ids) -> float:
    """Entropy (nats) of the unigram distribution of one sample's tokens, -sum_v p_v log p_v with p_v = count of v
    / len(ids): low when a sample repeats itself (0 for one token repeated; 0 for an empty sample)."""
    n = len(ids)
    return -sum(c / n * math.log(c / n) for c in Counter(ids).values()) if n else 0.0


def check_reference(config: dict, ref_config: dict, ref_path: str, max_new: int) -> None:
    """The --ref-ckpt that scores the samples must be AR (an exact likelihood), use the samples' tokenizer and hold
    the BOS and max_new tokens in its context (ValueError: one line)."""
    if not checkpoint.METHODS[ref_config["method"]].EXACT_NLL:
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


def evaluate_unconditional(model, method, cfg, tok, ref, n, settings: Settings, device, seed=0, warmup=0) -> dict:
    """eval.py --task unconditional: warmup + n samples from BOS at batch 1 (the first warmup only time the
    start), the last n scored: generative perplexity = exp(the reference model's NLL summed over all their
    tokens / their number) when ref is given (None: none; paper/hf_metrics.py scores under Hugging Face models),
    the mean unigram entropy per sample, tokens/step, tokens/s (batch 1), the texts and their ids (sample_ids)."""
    samples = unconditional(model, method, cfg, tok, warmup + n, settings, device, seed)[warmup:]
    count = sum(len(s["ids"]) for s in samples)
    if count == 0:
        raise ValueError(f"the {n} samples hold no token to score (each stopped at once): raise -n or "
                         f"--max-new-tokens")
    ppl = {}
    if ref is not None:
        nll = sum(reference_nll(ref, tok.eos_id, s["ids"], device)[0] for s in samples)
        ppl = {"gen_ppl": math.exp(nll / count), "gen_nll": nll / count}
    rates = [s["tokens_per_s"] for s in samples]
    mean = sum(rates) / n
    return {**ppl, "entropy": sum(unigram_entropy(s["ids"]) for s in samples) / n,
            "tokens_per_step": sum(s["tokens_per_step"] for s in samples) / n, "tokens_per_s": mean,
            "tokens_per_s_std": (sum((r - mean) ** 2 for r in rates) / n) ** 0.5,
            "sample_tokens": count / n, "nfe": sum(s["nfe"] for s in samples), "n": n,
            "samples": [s["text"] for s in samples], "sample_ids": [s["ids"] for s in samples]}


# ----------------------------------------------------------------------------- eval.py --task unconditional

def run(args, model, method, cfg, config: dict, device, settings: Settings) -> dict:
    """eval.py --task unconditional (its args): -n samples from BOS alone at batch 1 with the official OWT sampler
    options, scored by the --ref-ckpt AR model (evaluate_unconditional), a Hugging Face causal LM (--ppl-model) and
    MAUVE against --mauve-ref (paper/hf_metrics.py), each when given; sample 0 printed. Returns the metrics."""
    max_new = unconditional_tokens(args.max_new_tokens, config["seq_len"])
    references = hf_metrics.read_texts(args.mauve_ref) if args.mauve_ref else None   # a bad file: before sampling
    ref = None
    if args.ref_ckpt:
        try:
            ref_model, ref_method, ref_cfg, ref_config = checkpoint.load(args.ref_ckpt, device)
        except (FileNotFoundError, ValueError) as e:
            raise ValueError(f"--ref-ckpt: {e}") from None
        check_reference(config, ref_config, args.ref_ckpt, max_new)
        ref = (ref_model, ref_method, ref_cfg)
    tok = get_tokenizer(config["tokenizer"])
    settings = dataclasses.replace(settings, max_new_tokens=max_new, options=sampler_preset("owt", tok, method))
    m = evaluate_unconditional(model, method, cfg, tok, ref, args.n, settings, device, args.seed, args.warmup)
    ids = m.pop("sample_ids")
    if args.ppl_model:
        m.update(hf_metrics.hf_gen_ppl(m["samples"], args.ppl_model, args.batch_size, device, ids, tok))
    if references:
        m.update(hf_metrics.mauve_score(m["samples"], references, args.mauve_encoder or hf_metrics.MAUVE_ENCODER,
                                        device=device, batch_size=args.batch_size))
    print(f"--- sample 0 of {args.n}{' (all in --json)' if args.json else ''}\n{m['samples'][0]}\n---")
    return {**m, "ref_ckpt": args.ref_ckpt, "max_new_tokens": max_new}
