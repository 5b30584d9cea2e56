"""Autoregressive (AR) language modelling: the left-to-right limit of every other method here.

Idea: predict each token from the ones before it, one token per forward pass when generating.

Objective (per sequence, then averaged over the batch; targets = tokens that are neither prompt nor pad):
    L_AR = 1/|targets| * sum_{i in targets} -log p_theta(x_i | x_<i)

Limits: Set Diffusion with smax = 2 (d = 1) orders tokens left to right and becomes AR (paper §3); BD3-LM with
block size S = 1 has AR's attention pattern.
Paper: the AR baseline of Set Diffusion (Arriola & Kuleshov, ICML 2026), §5.
Differences from the official code: none in the loss; generation is this file's KV-cached loop (the official
GSM8K runs call Hugging Face `generate`), batched with left-padded prompts.

Sampler interface shared by all four method files:
    generate(model, prompt, cfg, prompt_mask, max_new_tokens, ..., temperature, generator, stop, options)
    -> tokens (B, P + N): the prompt then the new tokens; positions never generated hold cfg.mask_id
       stats: nfe (forward passes that predict), tokens_per_step (mean over rows), step (B, P + N) the step
       at which each token was decoded (-1 for the prompt), n_gen (B,) tokens generated per row.
`prompt` is left-padded; prompt_mask (B, P) marks its real tokens. `stop(tokens, end) -> (B,) bool` is an
optional stopping rule that sees the canvas up to index end (B,); options an optional
sampling.SamplerOptions (penalties, top-p, the low-confidence stop).
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import sampling
from model import with_padding


@dataclass
class ARConfig:
    mask_id: int    # the tokenizer's [MASK]: never sampled; fills positions that were not generated


def defaults(x0, prompt_mask, pad_mask):
    """Fill in absent masks: no prompt, no padding. Returns (prompt_mask, pad_mask, target) all (B, L)."""
    prompt_mask = torch.zeros_like(x0, dtype=torch.bool) if prompt_mask is None else prompt_mask
    pad_mask = torch.zeros_like(x0, dtype=torch.bool) if pad_mask is None else pad_mask
    return prompt_mask, pad_mask, ~(prompt_mask | pad_mask)


def trim(pad_mask, *tensors):
    """Cut (B, L) tensors after the last column that is not padding in some row: nobody attends to trailing
    padding and no loss falls on it, so the logits are the same, for less compute (L = 1024 on GSM8K)."""
    keep = (~pad_mask).any(0).nonzero()
    end = int(keep.max()) + 1 if len(keep) else 1
    return [x[:, :end] for x in tensors]


# ----------------------------------------------------------------------------- mask

def attention_mask(seq_len: int, device=None) -> torch.Tensor:
    """Causal: query i may attend to keys 0..i. (L, L) bool. The model's mask=None is the same, faster."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


# ----------------------------------------------------------------------------- loss

def nll(model, x0, cfg: ARConfig, prompt_mask=None, pad_mask=None, generator=None):
    """Exact negative log-likelihood of the targets: (sum over targets (B,), number of targets (B,))."""
    prompt_mask, pad_mask, target = defaults(x0, prompt_mask, pad_mask)
    x0, target = trim(pad_mask, x0, target)
    logits = model(x0[:, :-1])                                      # (B, L-1, V), causal
    nll_i = F.cross_entropy(logits.float().transpose(1, 2), x0[:, 1:], reduction="none")  # (B, L-1)
    target = target[:, 1:]                                          # the first token is never predicted
    return (nll_i * target).sum(1), target.sum(1)


def loss(model, x0, cfg: ARConfig, prompt_mask=None, pad_mask=None, generator=None):
    """Next-token cross-entropy, mean over each sequence's targets, then over the batch."""
    nll_sum, n = nll(model, x0, cfg, prompt_mask, pad_mask)
    return (nll_sum / n.clamp(min=1)).mean(), {"tokens": int(n.sum())}


# ----------------------------------------------------------------------------- generate

def sample(logits, temperature: float, generator=None, track=None):
    """Greedy (temperature 0) or temperature sampling from logits (B, V) -> (B,); a sampling.Track adds its
    options (penalties, top-p, the low-confidence stop)."""
    if track is None and temperature == 0:
        return logits.argmax(-1)                                  # greedy needs no softmax
    y, conf = sampling.choose(sampling.process(logits[:, None], track), temperature, generator, track)   # (B, 1)
    sampling.early_stop(track, conf, torch.ones_like(conf, dtype=torch.bool))
    return y[:, 0]


def canvas(prompt, prompt_mask, max_new_tokens, mask_id):
    """[prompt | MASK * N]: tokens (B, C), real (B, C) not left padding, positions (B, C) from 0 per row."""
    B = prompt.shape[0]
    if prompt_mask is None:
        prompt_mask = torch.ones_like(prompt, dtype=torch.bool)
    tokens = torch.cat([prompt, prompt.new_full((B, max_new_tokens), mask_id)], 1)
    real = torch.cat([prompt_mask, prompt_mask.new_ones(B, max_new_tokens)], 1)
    return tokens, real, (real.cumsum(1) - 1).clamp(min=0)


def finish(tokens, step, steps, nfe):
    """The (tokens, stats) every sampler returns; steps (B,) counts the forwards each row was live in."""
    n_gen = (step >= 0).sum(1)
    return tokens, {"nfe": nfe, "tokens_per_step": (n_gen / steps.clamp(min=1)).mean().item(),
                    "step": step, "n_gen": n_gen}


@torch.no_grad()
def generate(model, prompt, cfg: ARConfig, prompt_mask=None, max_new_tokens=64, temperature=0.0,
             generator=None, stop=None, options=None):
    """KV-cached decoding, one token per forward pass. options: a sampling.SamplerOptions."""
    B, P = prompt.shape
    tokens, real, pos = canvas(prompt, prompt_mask, max_new_tokens, cfg.mask_id)   # (B, P+N)
    N, dev = max_new_tokens, prompt.device
    prompt_mask = real[:, :P]
    step = torch.full_like(tokens, -1)
    steps = torch.zeros(B, dtype=torch.long, device=dev)                           # forwards per live row
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    cache = model.new_cache(B, P + N, slots=1)                                    # a step feeds 1 token
    track = sampling.start(options, tokens, real, cfg.mask_id, temperature)
    stop = sampling.entropy_stop(stop, track, prompt, prompt_mask, cfg.mask_id, max_new_tokens)
    mask = None if bool(prompt_mask.all()) else with_padding(attention_mask(P, dev), ~prompt_mask)  # None: is_causal (flash)
    logits = model(prompt, pos[:, :P], mask, cache, last=1)[:, -1]                 # (B, V)
    cache.commit(P)
    nfe = 1
    for i in range(N):
        steps += ~done
        logits[:, cfg.mask_id] = float("-inf")
        sampling.at(track, tokens, torch.full((B, 1), P + i, device=dev))
        y = torch.where(done, cfg.mask_id, sample(logits, temperature, generator, track))   # (B,)
        tokens[:, P + i] = y
        step[:, P + i] = torch.where(done, -1, i)
        if stop is not None:
            done |= stop(tokens, torch.full((B,), P + i + 1, device=dev))
        done = sampling.stopped(track, done)
        if done.all() or i == N - 1:
            break
        mask = real[:, None, None, :P + i + 1]                                   # (B, 1, 1, P+i+1)
        logits = model(y[:, None], pos[:, P + i:P + i + 1], mask, cache)[:, -1]
        cache.commit(1)
        nfe += 1
    return finish(tokens, step, steps, nfe)
