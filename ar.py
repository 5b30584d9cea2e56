"""Autoregressive (AR) language modelling: the left-to-right limit of every other method here.

Idea: predict each token from the ones before it, one token per forward pass when generating.

Objective (per sequence, then averaged over the batch; targets = tokens that are neither prompt nor pad):
    L_AR = 1/|targets| * sum_{i in targets} -log p_theta(x_i | x_<i)

Limits: Set Diffusion with smax = 2 (d = 1) orders tokens left to right and becomes AR (paper §3); BD3-LM
with block size S = 1 has AR's attention pattern.
Paper: the AR baseline of Set Diffusion (Arriola & Kuleshov, ICML 2026), §5.
Differences from the official code: none in the loss; generation is this file's KV-cached loop (the official
GSM8K runs call Hugging Face `generate`), batched with left-padded prompts.

The sampler interface, the same in all four method files (diff them):
    generate(model, prompt, cfg, settings, prompt_mask=None, stop=None, generator=None) -> tokens, stats
`prompt` (B, P) is left-padded and prompt_mask (B, P) marks its real tokens; settings a sampling.Settings (how
many new tokens, threshold, temperature, the paper presets' options; each method reads its KNOBS);
`stop(tokens, end) -> (B,) bool` an optional stopping rule that sees the canvas up to column end (B,).
tokens (B, P + N): the prompt then the new tokens; positions never generated hold cfg.mask_id. stats: nfe
(forward passes that predict), tokens_per_step (mean over rows), step (B, P + N) the step at which each token
was decoded, counted in its row's own forwards (-1 for the prompt), n_gen (B,) tokens generated per row.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from model import with_padding
from sampling import Picker, Settings


# ----------------------------------------------------------------------------- config

@dataclass
class ARConfig:
    mask_id: int    # the tokenizer's [MASK]: never sampled; fills positions that were not generated

    def check(self, seq_len: int):
        """Raise a ValueError with one line for a setting that cannot train at context seq_len (AR has
        none)."""


# What the scripts need to know of a method is data here, never a branch on its name.
KNOBS = frozenset({"max_new_tokens", "temperature", "paper.options"})   # the Settings fields generate reads
EXACT_NLL = True      # nll is the exact -log p(x0); the diffusion methods' nll is a bound
CAN_INFILL = False    # generate cannot fill [MASK]s inside the prompt: it only continues the prompt
MASK_STREAMS = 0      # training's dense attention mask spans k L positions ((k L)^2 bools): none, causal


# ----------------------------------------------------------------------------- ordering: left to right

# AR has no noise: its one order is the identity, x_i predicted from x_<i. Every other method here draws a
# corruption (MDLM, BD3-LM) or an order (Set Diffusion) per sequence.


# ----------------------------------------------------------------------------- mask

def mask_mod(cfg: ARConfig, seq_len: int):
    """Causal, as a FlexAttention mask_mod (b, h, q_idx, kv_idx) -> bool: query i sees keys 0..i."""
    def mod(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    return mod


def attention_mask(cfg: ARConfig, seq_len: int, device=None) -> torch.Tensor:
    """mask_mod as a dense (L, L) bool. The model's mask=None is the same causal mask, faster (is_causal)."""
    idx = torch.arange(seq_len, device=device)
    return mask_mod(cfg, seq_len)(0, 0, idx[:, None], idx[None, :])


# ----------------------------------------------------------------------------- loss

def defaults(x0, prompt_mask, pad_mask):
    """Fill in absent masks: no prompt, no padding. Returns (prompt_mask, pad_mask, target) all (B, L)."""
    prompt_mask = torch.zeros_like(x0, dtype=torch.bool) if prompt_mask is None else prompt_mask
    pad_mask = torch.zeros_like(x0, dtype=torch.bool) if pad_mask is None else pad_mask
    return prompt_mask, pad_mask, ~(prompt_mask | pad_mask)


def trim(pad_mask, *tensors):
    """Cut (B, L) tensors after the last column that is not padding in some row: nobody attends to trailing
    padding and no loss falls on it, so the logits are the same, for less compute (L = 1024 on GSM8K)."""
    keep = (~pad_mask).any(0).nonzero()
    end = int(keep.max()) + 1 if len(keep) else 1          # all padding: one column, a forward needs a token
    return [x[:, :end] for x in tensors]


def nll(model, x0, cfg: ARConfig, prompt_mask=None, pad_mask=None, generator=None, exclude=None):
    """Exact negative log-likelihood of the targets: (sum over counted targets (B,), their number (B,)).
    exclude (B, L): targets not counted (the official eval drops pad-id targets)."""
    prompt_mask, pad_mask, target = defaults(x0, prompt_mask, pad_mask)
    target = target if exclude is None else target & ~exclude
    x0, target = trim(pad_mask, x0, target)
    logits = model(x0[:, :-1])                                      # (B, L-1, V), causal
    nll_i = F.cross_entropy(logits.float().transpose(1, 2), x0[:, 1:], reduction="none")  # (B, L-1)
    target = target[:, 1:]                                          # the first token is never predicted
    return (nll_i * target).sum(1), target.sum(1)


def loss(model, x0, cfg: ARConfig, prompt_mask=None, pad_mask=None, generator=None):
    """Next-token cross-entropy, mean over each sequence's targets, then over the batch."""
    nll_sum, n = nll(model, x0, cfg, prompt_mask, pad_mask)
    return (nll_sum / n.clamp(min=1)).mean(), {"tokens": n.sum()}      # a row with no target: 0, not 0 / 0


# ----------------------------------------------------------------------------- reference sampler (read first)

def finish(tokens, decoded_at, live_forwards, forwards):
    """The (tokens, stats) every sampler returns from its three counters: decoded_at (B, C) the row's forward
    that decoded each column (-1: not generated), live_forwards (B,) the forwards each row was live in,
    forwards the forwards run in all (stats: step, tokens_per_step, nfe)."""
    n_gen = (decoded_at >= 0).sum(1)
    per_step = n_gen / live_forwards.clamp(min=1)              # a row never live (nothing to decode): 0
    return tokens, {"nfe": forwards, "tokens_per_step": per_step.mean().item(), "step": decoded_at,
                    "n_gen": n_gen}


@torch.no_grad()
def generate_reference(model, prompt, cfg: ARConfig, settings: Settings):
    """The sampler as the method states it, to read first: batch 1, greedy, no cache, one full forward per
    token. `generate` is this loop batched and KV-cached (test_all.py checks them equal token for token)."""
    x, P = prompt.clone(), prompt.shape[1]
    for _ in range(settings.max_new_tokens):
        logits = model(x)[:, -1].float()                                        # (1, V), causal
        logits[:, cfg.mask_id] = float("-inf")
        x = torch.cat([x, logits.argmax(-1, keepdim=True)], 1)
    decoded_at = torch.cat([torch.full((1, P), -1), torch.arange(settings.max_new_tokens)[None]], 1)
    return finish(x, decoded_at.to(x.device), torch.tensor([settings.max_new_tokens], device=x.device),
                  settings.max_new_tokens)


# ----------------------------------------------------------------------------- batched sampler

def canvas(prompt, prompt_mask, max_new_tokens, mask_id):
    """[prompt | MASK * N]: tokens (B, C), real (B, C) not left padding, positions (B, C) from 0 per row."""
    B = prompt.shape[0]
    if prompt_mask is None:
        prompt_mask = torch.ones_like(prompt, dtype=torch.bool)
    tokens = torch.cat([prompt, prompt.new_full((B, max_new_tokens), mask_id)], 1)
    real = torch.cat([prompt_mask, prompt_mask.new_ones(B, max_new_tokens)], 1)
    return tokens, real, (real.cumsum(1) - 1).clamp(min=0)        # left padding at 0, never attended


def prefill(model, tokens, pos, visible, cache):
    """Cache the visible prompt tokens (B, P), causally, and return the logits (B, V) of the last: the first
    prediction. An unpadded batch passes no mask, so SDPA takes its is_causal path (the flash kernel on
    CUDA). Set Diffusion's prefill takes the same arguments; BD3-LM's caches whole blocks instead."""
    P = tokens.shape[1]
    causal = attention_mask(None, P, tokens.device)                                # (P, P)
    mask = None if bool(visible.all()) else with_padding(causal, ~visible)
    logits = model(tokens, pos, mask, cache, last=1)[:, -1]                          # (B, V)
    cache.commit(P)
    return logits


@torch.no_grad()
def generate(model, prompt, cfg: ARConfig, settings: Settings, prompt_mask=None, stop=None, generator=None):
    """KV-cached decoding, one token per forward pass: each step feeds the last token and predicts the
    next."""
    B, P = prompt.shape
    N, dev = settings.max_new_tokens, prompt.device
    tokens, real, pos = canvas(prompt, prompt_mask, N, cfg.mask_id)                # (B, P + N)
    pick = Picker(settings, tokens, real, cfg.mask_id, prompt, real[:, :P], stop, generator)
    decoded_at = torch.full_like(tokens, -1)             # (B, P + N) the forward that decoded a column
    live_forwards = torch.zeros(B, dtype=torch.long, device=dev)       # (B,) the forwards a row was live in
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    cache = model.new_cache(B, P + N, slots=1)                                    # a step feeds 1 token
    logits, forwards = prefill(model, prompt, pos[:, :P], real[:, :P], cache), 1
    for i in range(N):
        live_forwards += ~done
        y, _ = pick(logits[:, None], torch.full((B, 1), P + i, device=dev), ~done[:, None])   # (B, 1)
        tokens[:, P + i] = torch.where(done, cfg.mask_id, y[:, 0])          # a stopped row: [MASK] after it
        decoded_at[:, P + i] = torch.where(done, -1, i)
        if pick.stop is not None:
            done |= pick.stop(tokens, torch.full((B,), P + i + 1, device=dev))
        done |= pick.stopped
        if done.all() or i == N - 1:            # the last token needs no forward after it
            break
        mask = real[:, None, None, :P + i + 1]                                   # (B, 1, 1, P+i+1)
        logits = model(tokens[:, P + i:P + i + 1], pos[:, P + i:P + i + 1], mask, cache)[:, -1]
        cache.commit(1)
        forwards += 1
    return finish(tokens, decoded_at, live_forwards, forwards)


# ----------------------------------------------------------------------------- reproduction only

# What the paper's reproduction needs to know of AR, as data: how the official code decodes and counts it.
HF_GENERATE = True    # the official runs decode it with Hugging Face generate (EOS stop, prompt penalised)
OFFICIAL_EXCLUDES = False  # the official eval counts every target (nll's exclude unused)
SUITE_NLL = None      # the official suite runner's OWT likelihood: this file's own nll
