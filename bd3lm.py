"""Block diffusion (BD3-LM, Arriola et al. 2025): autoregressive over blocks, diffusion inside a block.

Idea: cut the sequence into blocks of S tokens. Each block is a small MDLM conditioned on all earlier blocks,
which are clean, so finished blocks go to a KV cache exactly as in AR decoding. Training runs every block at
once with a 2L layout: [x0 | xt], both halves at positions 0..L-1, and a mask where the noisy copy of block
b sees the clean blocks < b and its own noisy block.

Noise: as MDLM, with one t ~ U[eps, 1] per block; in training, a block of targets left without a [MASK] gets
r + 1 of its positions masked (r ~ U{0..S-1}), as the official code does. Evaluation draws xt from q exactly.
Objective: MDLM's (masked-token cross-entropy in training, 1/t-weighted NELBO at eval), summed over blocks:
    L = 1/|M| * sum_b sum_{i in M, i in block b} -log p_theta(x0_i | xt_block_b, x0_blocks<b)

Limits: S = 1 gives AR's attention pattern (each query sees the strict clean prefix); S = L is one block,
which is MDLM. Set Diffusion replaces the fixed contiguous blocks by flexible sets (paper §3).
Paper: Set Diffusion §5 baseline (S in {4, 8, 16}); Arriola et al., ICLR 2025.
Differences from the official code: batched generation aligns each row's blocks to its own positions by
left-padding it to a multiple of S (the official sampler runs batch size 1). The sampler generates
max_new_tokens new tokens; the official (align_inputs_to_blocks) counts them from the start of the block
holding the prompt's end, p mod S fewer: generate(official_blocks=True) does the same.
"""
import math
from dataclasses import dataclass

import torch

import sampling
from ar import defaults, finish, trim
from mdlm import block_canvas, decode, masked_nll, objective, official_count, standard
from model import padded


@dataclass
class BD3LMConfig:
    mask_id: int          # the absorbing [MASK] token
    block_size: int = 4   # S, tokens per block
    eps: float = 1e-3     # t ~ U[eps, 1]
    nelbo: bool = False   # train on the 1/t-weighted NELBO instead of the official unweighted masked CE


# ----------------------------------------------------------------------------- noising

def noise(x0, cfg: BD3LMConfig, target, generator=None, train=True):
    """xt with one t per block of S tokens. Returns xt, t (B, L).

    train=True adds the official training rule: a block made entirely of targets (no prompt, no padding)
    that drew no [MASK] gets r + 1 random positions re-masked, r ~ U{0..S-1}. Evaluation (train=False)
    draws xt from q exactly, so the 1/t-weighted NELBO stays an unbiased estimate of the bound."""
    B, L = x0.shape
    S, dev = cfg.block_size, x0.device
    n_blk = math.ceil(L / S)
    u = torch.rand(B, n_blk, generator=generator, device=dev)
    t = (cfg.eps + (1 - cfg.eps) * u).repeat_interleave(S, 1)[:, :L]            # (B, L), one t per block
    masked = (torch.rand(B, L, generator=generator, device=dev) < t) & target
    if train:
        pad = n_blk * S - L                                                      # view as (B, n_blk, S)
        blk_target = torch.nn.functional.pad(target, (0, pad)).view(B, n_blk, S)
        blk_masked = torch.nn.functional.pad(masked, (0, pad)).view(B, n_blk, S)
        need = blk_target.all(-1) & ~blk_masked.any(-1)                          # (B, n_blk) all targets, no mask
        r = torch.randint(0, S, (B, n_blk, 1), generator=generator, device=dev)  # re-mask r + 1 positions
        rank = torch.rand(B, n_blk, S, generator=generator, device=dev).argsort(-1).argsort(-1)
        force = (rank <= r) & need[..., None]                                    # (B, n_blk, S)
        masked |= force.view(B, -1)[:, :L]
    return torch.where(masked, cfg.mask_id, x0), t


# ----------------------------------------------------------------------------- mask

def attention_mask(seq_len: int, block_size: int, device=None) -> torch.Tensor:
    """(2L, 2L) bool over [x0 | xt]: rows/cols 0..L-1 the clean copy, L..2L-1 the noisy copy."""
    idx = torch.arange(2 * seq_len, device=device)
    return mask_mod(seq_len, block_size)(0, 0, idx[:, None], idx[None, :])


def mask_mod(seq_len: int, block_size: int):
    """attention_mask as a FlexAttention mask_mod: (b, h, q_idx, kv_idx) -> may q attend to kv."""
    def mod(b, h, q, k):
        xt_q, xt_k = q >= seq_len, k >= seq_len                          # noisy half
        blk_q, blk_k = (q % seq_len) // block_size, (k % seq_len) // block_size   # block of each token
        block_diagonal = (blk_q == blk_k) & (xt_q == xt_k)               # M_BD: own block, same half
        offset_block_causal = xt_q & ~xt_k & (blk_q > blk_k)             # M_OBC: noisy -> earlier clean
        block_causal = ~xt_q & ~xt_k & (blk_q >= blk_k)                  # M_BC: clean -> clean
        return block_diagonal | offset_block_causal | block_causal
    return mod


# ----------------------------------------------------------------------------- loss

def denoise(model, x0, xt, cfg: BD3LMConfig, pad_mask):
    """The model call of the 2L layout [x0 | xt]: logits (B, L, V) of the noisy half."""
    B, L = x0.shape
    pos = torch.arange(L, device=x0.device).repeat(2).expand(B, 2 * L)          # (B, 2L) = [0..L-1 | 0..L-1]
    mask = padded(mask_mod(L, cfg.block_size), pad_mask.repeat(1, 2))         # a mask_mod over the 2L slots
    return model(torch.cat([x0, xt], 1), pos, mask, last=L)                     # (B, L, V)


def nll(model, x0, cfg: BD3LMConfig, prompt_mask=None, pad_mask=None, generator=None, xt=None, t=None):
    """NELBO, an upper bound on -log p(x0): (sum over targets (B,), number of targets (B,)).
    Same as mdlm.nll, with this file's noise (one t per block) and denoise (the 2L layout)."""
    prompt_mask, pad_mask, target = defaults(x0, prompt_mask, pad_mask)
    if xt is None:
        xt, t = noise(x0, cfg, target, generator, train=False)                   # q exactly: no forced masks
    x0, xt, t, target, pad_mask = trim(pad_mask, x0, xt, t, target, pad_mask)   # drop trailing padding
    nll_i, masked = masked_nll(denoise(model, x0, xt, cfg, pad_mask), x0, xt, target, cfg.mask_id)
    return (nll_i / t * masked).sum(1), target.sum(1)              # weight -alpha'/(1-alpha) = 1/t


def loss(model, x0, cfg: BD3LMConfig, prompt_mask=None, pad_mask=None, generator=None, xt=None, t=None):
    """Masked-token cross-entropy (or the NELBO with cfg.nelbo) over all blocks at once; as mdlm.loss."""
    prompt_mask, pad_mask, target = defaults(x0, prompt_mask, pad_mask)
    if xt is None:
        xt, t = noise(x0, cfg, target, generator)
    x0, xt, t, target, pad_mask = trim(pad_mask, x0, xt, t, target, pad_mask)   # drop trailing padding
    nll_i, masked = masked_nll(denoise(model, x0, xt, cfg, pad_mask), x0, xt, target, cfg.mask_id)
    per_seq = objective(nll_i, masked, t, target, cfg.nelbo)
    return per_seq.mean(), {"masked": masked.sum().item() / max(target.sum().item(), 1)}


# ----------------------------------------------------------------------------- generate

@torch.no_grad()
def generate(model, prompt, cfg: BD3LMConfig, prompt_mask=None, max_new_tokens=64, threshold=math.inf,
             temperature=0.0, generator=None, stop=None, options=None, official_blocks=False):
    """Block by block: inside a block, steps of the confidence rule with the block's queries attending to
    the cache and to their own block; a finished block is committed to the KV cache by the next block's
    first forward, which takes it as a clean prefix (the official `fused_block_cache`). [MASK]s inside the
    prompt are infilled block by block too (a block sees only the blocks to its left). options: a
    sampling.SamplerOptions.

    official_blocks=True: the official align_inputs_to_blocks count for released checkpoints: max_new_tokens
    counts from the start of the block holding the prompt's end (mdlm.official_count), so p mod S fewer new
    tokens; the rest of the output stays [MASK]. Off (default): N new tokens."""
    B, P = prompt.shape
    S, N, dev = cfg.block_size, max_new_tokens, prompt.device
    tokens, real, pos, F, new = block_canvas(prompt, prompt_mask, N, S, cfg.mask_id)      # (B, C)
    gen = official_count(real, new, S) if official_blocks else real                       # (B, C) to decode
    C, E = tokens.shape[1], int(gen.any(0).nonzero().max()) + 1          # E: after the last column to decode
    blk = torch.arange(C, device=dev) // S                                                # block of a column
    cols = torch.arange(C, device=dev)

    def block_mask(lo, e):  # queries lo..e-1, keys 0..e-1: clean blocks causal, a block sees itself
        m = (blk[lo:e, None] >= blk[None, :e]) & real[:, None, None, :e]
        return m | (cols[lo:e, None] == cols[None, :e])                                   # (B, 1, e-lo, e)

    cache = model.new_cache(B, C, slots=2 * S)   # slot j holds column j; a step feeds <= 2 blocks
    track = sampling.start(options, tokens, gen, cfg.mask_id, temperature)
    stop = sampling.entropy_stop(stop, track, prompt, prompt_mask, cfg.mask_id, max_new_tokens)
    if F > 0:                                                    # prompt blocks before the first new token
        model(tokens[:, :F], pos[:, :F], block_mask(0, F), cache, last=1)
        cache.commit(F)
    step = torch.full_like(tokens, -1)
    steps = torch.zeros(B, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    nfe = 0
    # The fused block commit. The cache holds the columns < lo = cache.length. Each forward = [columns lo..s-1,
    # the blocks finished since the last forward (clean) -> committed to the cache | this block s..e-1 (its
    # [MASK]s and the tokens decoded so far) -> dropped]. So a block's first forward commits the previous block
    # (lo < s; nothing for the first block), its later ones commit nothing (lo == s): a finished block costs no
    # forward of its own (the official fused_block_cache).
    for s in range(F, E, S):
        e = s + S
        while True:
            cand = (tokens[:, s:e] == cfg.mask_id) & gen[:, s:e] & ~done[:, None]          # (B, S)
            if not cand.any():
                break
            lo = cache.length                                    # < s: earlier blocks still to commit
            logits = model(tokens[:, lo:e], pos[:, lo:e], block_mask(lo, e), cache, last=S)   # (B, S, V)
            cache.commit(s - lo)                                 # keep lo..s-1, drop this block's entries
            sampling.at(track, tokens, torch.arange(s, e, device=dev).expand(B, -1))
            y, dec = decode(logits, cand, cfg.mask_id, threshold, temperature, generator, track)
            done = sampling.stopped(track, done)
            tokens[:, s:e] = torch.where(dec, y, tokens[:, s:e])
            step[:, s:e] = torch.where(dec, steps[:, None], step[:, s:e])    # the row's own step
            steps += cand.any(1)
            nfe += 1
        if stop is not None:
            end = P + (e - new[:, 0]).clamp(0, N)                                           # (B,)
            done |= stop(standard(prompt, tokens, step, new, real)[0], end)   # [MASK]s in the prompt filled
        if done.all():
            break
    return finish(*standard(prompt, tokens, step, new, real), steps, nfe)
