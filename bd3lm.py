"""Block diffusion (BD3-LM, Arriola et al. 2025): autoregressive over blocks, diffusion inside a block.

Idea: cut the sequence into blocks of S tokens. Each block is a small MDLM conditioned on all earlier blocks,
which are clean, so finished blocks go to a KV cache exactly as in AR decoding. Training runs every block at
once with a 2L layout: [x0 | xt], both halves at positions 0..L-1, and a mask where the noisy copy of block
b sees the clean blocks < b and its own noisy block.

Noise: as MDLM, with one t ~ U[eps, 1] per block; in training, a block of targets left without a [MASK] gets
r + 1 of its positions masked (r ~ U{0..S-1}), as the paper's code does. Evaluation draws xt from q exactly.
Objective: MDLM's (masked-token cross-entropy in training, 1/t-weighted NELBO at eval), summed over blocks:
    L = 1/|M| * sum_b sum_{i in M, i in block b} -log p_theta(x0_i | xt_block_b, x0_blocks<b)

Limits: S = 1 gives AR's attention pattern (each query sees the strict clean prefix); S = L is one block,
which is MDLM. Set Diffusion replaces the fixed contiguous blocks by flexible sets (paper §3).
Paper: Set Diffusion §5 baseline (S in {4, 8, 16}); Arriola et al., ICLR 2025.
Differences from the official code, and paper mode (settings.paper.official, eval.py --official; the last
section), which does as the official: the official counts max_new_tokens from the start of the block holding
the prompt's end (align_inputs_to_blocks: p mod S fewer; official_count), where ours generates N; past the
context L its cache drops its oldest entries and renumbers the inputs after them (crop_left), where ours keeps
every entry at its own position; it infills by another algorithm (official_infill), where ours decodes block
by block from the left (the default: it fills the shipped task's spans far better, docs/fidelity.md); it runs
one prompt at a time, where ours runs a batch, each row's blocks aligned to its own positions by left padding.
Paper mode also takes the official's pick among tied confidences, its low-confidence stop and an infilling
penalty's context (the canvas up to the block decoded: official_context) from sampling.py.
"""
import math
from dataclasses import dataclass

import torch

from ar import canvas, defaults, finish, trim
from mdlm import block_canvas, masked_nll, objective, official_count, standard
from model import padded
from sampling import Picker, Settings, decode


# ----------------------------------------------------------------------------- config

@dataclass
class BD3LMConfig:
    mask_id: int          # the absorbing [MASK] token
    block_size: int = 4   # S, tokens per block
    eps: float = 1e-3     # t ~ U[eps, 1]
    nelbo: bool = False   # train on the 1/t-weighted NELBO, not the unweighted masked CE (the paper's runs)

    def __post_init__(self):
        if self.block_size < 1:
            raise ValueError(f"--block-size must be at least 1, got {self.block_size}")
        if not 0 < self.eps < 1:
            raise ValueError(f"eps must be in (0, 1), got {self.eps}")

    def check(self, seq_len: int):
        """Raise a ValueError with one line for a setting that cannot train at context seq_len."""
        if self.block_size > seq_len:
            raise ValueError(f"--block-size {self.block_size} is larger than the sequence length {seq_len}")


# What the scripts need to know of a method is data here, never a branch on its name.
KNOBS = frozenset({"max_new_tokens", "threshold", "temperature", "paper.official", "paper.seq_len",
                   "paper.options"})
EXACT_NLL = False     # nll is the NELBO, an upper bound on -log p(x0), one noise draw per call
CAN_INFILL = True  # [MASK]s inside the prompt are filled, block by block (a block sees the blocks left of it)
MASK_STREAMS = 2      # training's dense attention mask spans k L positions: [x0 | xt]


# ----------------------------------------------------------------------------- noising

def noise(x0, cfg: BD3LMConfig, target, generator=None, train=True):
    """xt with one t per block of S tokens. Returns xt, t (B, L).

    train=True adds the paper's training rule: a block made entirely of targets (no prompt, no padding)
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
        need = blk_target.all(-1) & ~blk_masked.any(-1)  # (B, n_blk) all targets, no mask
        r = torch.randint(0, S, (B, n_blk, 1), generator=generator, device=dev)  # re-mask r + 1 positions
        rank = torch.rand(B, n_blk, S, generator=generator, device=dev).argsort(-1).argsort(-1)
        force = (rank <= r) & need[..., None]                                    # (B, n_blk, S)
        masked |= force.view(B, -1)[:, :L]
    return torch.where(masked, cfg.mask_id, x0), t


# ----------------------------------------------------------------------------- mask

def mask_mod(cfg: BD3LMConfig, seq_len: int):
    """The 2L training mask over [x0 | xt] as a FlexAttention mask_mod (b, h, q_idx, kv_idx) -> bool: slots
    0..L-1 the clean copy, L..2L-1 the noisy copy, both at positions 0..L-1."""
    L, S = seq_len, cfg.block_size
    def mod(b, h, q_idx, kv_idx):
        xt_q, xt_k = q_idx >= L, kv_idx >= L                             # noisy half
        # each token's block as its first position i % L - i % L % S: it compares as the block index does,
        # with no integer division, which torch 2.11's compiled BlockMask fails to generate on CUDA
        blk_q, blk_k = q_idx % L - q_idx % L % S, kv_idx % L - kv_idx % L % S    # block of each token
        same_half = xt_q & xt_k | ~xt_q & ~xt_k        # not xt_q == xt_k: inductor cannot bound bool == bool
        block_diagonal = (blk_q == blk_k) & same_half                   # M_BD: own block, same half
        offset_block_causal = xt_q & ~xt_k & (blk_q > blk_k)             # M_OBC: noisy -> earlier clean
        block_causal = ~xt_q & ~xt_k & (blk_q >= blk_k)                  # M_BC: clean -> clean
        return block_diagonal | offset_block_causal | block_causal
    return mod


def attention_mask(cfg: BD3LMConfig, seq_len: int, device=None) -> torch.Tensor:
    """mask_mod as a dense (2L, 2L) bool."""
    idx = torch.arange(2 * seq_len, device=device)
    return mask_mod(cfg, seq_len)(0, 0, idx[:, None], idx[None, :])


# ----------------------------------------------------------------------------- loss

def denoise(model, x0, xt, cfg: BD3LMConfig, pad_mask):
    """The model call of the 2L layout [x0 | xt]: logits (B, L, V) of the noisy half."""
    B, L = x0.shape
    pos = torch.arange(L, device=x0.device).repeat(2).expand(B, 2 * L)          # (B, 2L) = [0..L-1 | 0..L-1]
    mask = padded(mask_mod(cfg, L), pad_mask.repeat(1, 2))                     # a mask_mod over the 2L slots
    return model(torch.cat([x0, xt], 1), pos, mask, last=L)                     # (B, L, V)


def nll(model, x0, cfg: BD3LMConfig, prompt_mask=None, pad_mask=None, generator=None, exclude=None):
    """NELBO, an upper bound on -log p(x0), from one noise draw: (sum over counted targets (B,), their number
    (B,)). As mdlm.nll, with this file's noise (one t per block; q exactly, no forced masks) and denoise
    (2L)."""
    prompt_mask, pad_mask, target = defaults(x0, prompt_mask, pad_mask)
    xt, t = noise(x0, cfg, target, generator, train=False)                     # q exactly: no forced masks
    counted = target if exclude is None else target & ~exclude
    x0, xt, t, counted, pad_mask = trim(pad_mask, x0, xt, t, counted, pad_mask)   # drop trailing padding
    nll_i, masked = masked_nll(denoise(model, x0, xt, cfg, pad_mask), x0, xt, counted, cfg.mask_id)
    return (nll_i / t * masked).sum(1), counted.sum(1)             # weight -alpha'/(1-alpha) = 1/t


def loss(model, x0, cfg: BD3LMConfig, prompt_mask=None, pad_mask=None, generator=None):
    """Masked-token cross-entropy (or the NELBO with cfg.nelbo) over all blocks at once, mean over the batch.
    The stats stay on the device (no host synchronisation per micro-batch)."""
    prompt_mask, pad_mask, target = defaults(x0, prompt_mask, pad_mask)
    xt, t = noise(x0, cfg, target, generator)
    x0, xt, t, target, pad_mask = trim(pad_mask, x0, xt, t, target, pad_mask)   # drop trailing padding
    nll_i, masked = masked_nll(denoise(model, x0, xt, cfg, pad_mask), x0, xt, target, cfg.mask_id)
    per_seq = objective(nll_i, masked, t, target, cfg.nelbo)
    return per_seq.mean(), {"masked": masked.sum() / target.sum().clamp(min=1)}   # no target: 0, not 0 / 0


# ----------------------------------------------------------------------------- reference sampler (read first)

@torch.no_grad()
def generate_reference(model, prompt, cfg: BD3LMConfig, settings: Settings):
    """The sampler as the method states it, to read first: batch 1, greedy, no cache. Every step one forward
    over the canvas up to the end of the block (multiples of S) holding the leftmost [MASK]: earlier blocks
    clean and causal between blocks, this block bidirectional. `generate` is this loop batched and cached,
    with the block commit fused into the next block's first forward (test_all.py checks them equal)."""
    S, m = cfg.block_size, cfg.mask_id
    x = torch.cat([prompt, prompt.new_full((1, settings.max_new_tokens), m)], 1)   # (1, C) the canvas
    decoded_at, forwards = torch.full_like(x, -1), 0      # the forward that decoded a column; forwards run
    while (x == m).any():
        s = int((x[0] == m).nonzero()[0]) // S * S                            # the block being decoded
        e = min(s + S, x.shape[1])                                            # cut at the canvas' end
        blk = torch.arange(e, device=x.device) // S
        logits = model(x[:, :e], mask=blk[:, None] >= blk[None, :])[:, s:e]   # (1, e - s, V)
        y, dec = decode(logits, x[:, s:e] == m, m, settings.threshold)
        x[:, s:e] = torch.where(dec, y, x[:, s:e])
        decoded_at[:, s:e] = torch.where(dec, forwards, decoded_at[:, s:e])
        forwards += 1
    return finish(x, decoded_at, torch.tensor([forwards], device=x.device), forwards)


# ----------------------------------------------------------------------------- batched sampler

def block_view(seen, new, S: int):
    """The mask and positions of T inputs fed after a KV cache, as the paper's code lays them out. seen (B, K)
    the valid cache entries; new (B, T): the inputs that are real (the rest see only themselves). An entry's
    storage index is its rank among the valid ones, and that is its position (a column's position); a query
    sees the valid entries of its own and earlier S-blocks of storage indices: the cache, and its own block
    bidirectionally (block-causal). Returns pos (B, T), mask (B, 1, T, K + T)."""
    K, T = seen.shape[1], new.shape[1]
    n = seen.sum(1, keepdim=True)                                                # (B, 1) valid entries
    idx = torch.cat([seen.cumsum(1) - 1, n + new.cumsum(1) - 1], 1)              # (B, K + T) storage index
    q = idx[:, K:]                                                               # (B, T)
    mask = torch.cat([seen, new], 1)[:, None, :] & (idx[:, None, :] // S <= q[:, :, None] // S)
    mask[:, :, K:] |= torch.eye(T, dtype=torch.bool, device=seen.device)        # (B, T, K + T)
    return q.clamp(min=0), mask[:, None]           # an input before any real one (left padding): position 0


def prefill(model, tokens, visible, cache, S: int):
    """Cache the canvas' first columns tokens (B, F), visible (B, F) the real ones: the prompt's whole blocks
    before the first one that holds a new token (or a [MASK] of the prompt), block-causally. Not ar's and
    setdiffusion's prefill(model, tokens, pos, visible, cache): the positions come from the block layout
    (block_view), which needs S."""
    if tokens.shape[1] > 0:           # else col0 = 0, no whole prompt block before the first to decode
        pos, mask = block_view(visible[:, :0], visible, S)
        model(tokens, pos, mask, cache, last=1)
        cache.commit(tokens.shape[1])


@torch.no_grad()
def generate(model, prompt, cfg: BD3LMConfig, settings: Settings, prompt_mask=None, stop=None,
             generator=None):
    """Block by block: inside a block, steps of the confidence rule with the block's queries attending to
    the cache and to their own block; a finished block is committed to the KV cache by the next block's
    first forward, which takes it as a clean prefix (the paper's `fused_block_cache`). [MASK]s inside the
    prompt are infilled block by block too (a block sees only the blocks to its left). Paper mode's new-token
    count, cache crop and infilling: the last section."""
    B, P = prompt.shape
    N, S, dev = settings.max_new_tokens, cfg.block_size, prompt.device
    official = settings.paper.official                                   # paper mode (the last section)
    if official and official_infilling(prompt, prompt_mask, cfg.mask_id, N):
        return official_infill(model, prompt, cfg, settings, prompt_mask, stop, generator)   # paper mode
    tokens, real, _, col0, new = block_canvas(prompt, prompt_mask, N, S, cfg.mask_id)     # (B, C)
    gen = official_count(real, new, S) if official else real     # (B, C) to decode; paper mode fewer
    C, E = tokens.shape[1], int(gen.any(0).nonzero().max()) + 1          # E: after the last column to decode
    L = settings.paper.seq_len if official else None                    # paper mode: the cache crop past L
    pick = Picker(settings, tokens, gen, cfg.mask_id, prompt, prompt_mask, stop, generator)
    cache = model.new_cache(B, C, slots=2 * S)   # slot j holds column j; a step feeds <= 2 blocks
    seen = real[:, :col0]                                                # (B, col0) the prompt to cache
    if L:                                                                # paper mode: its last L only
        seen = crop_left(seen, seen[:, :0], L)
    prefill(model, tokens[:, :col0], seen, cache, S)
    decoded_at = torch.full_like(tokens, -1)            # (B, C) the row's forward that decoded a column
    live_forwards = torch.zeros(B, dtype=torch.long, device=dev)       # (B,) the forwards a row was live in
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    forwards = 0
    # The fused block commit. The cache holds the columns < lo = cache.length. Each forward = [columns
    # lo..s-1, the blocks finished since the last forward (clean) -> committed to the cache | this block
    # s..e-1 (its [MASK]s and the tokens decoded so far) -> dropped]. So a block's first forward commits the
    # previous block (lo < s; nothing for the first block), its later ones commit nothing (lo == s): a
    # finished block costs no forward of its own.
    for s in range(col0, E, S):
        e = s + S
        while True:
            cand = (tokens[:, s:e] == cfg.mask_id) & gen[:, s:e] & ~done[:, None]          # (B, S)
            if not cand.any():                                   # the block is done in every live row
                break
            lo = cache.length                                    # < s: earlier blocks still to commit
            if L:                                                # paper mode: the oldest entries go past L
                seen = crop_left(seen, real[:, lo:e], L)
            pos, mask = block_view(seen, real[:, lo:e], S)                                # (B, 1, e-lo, e)
            logits = model(tokens[:, lo:e], pos, mask, cache, last=S)                     # (B, S, V)
            cache.commit(s - lo)                                 # keep lo..s-1, drop this block's entries
            seen = torch.cat([seen, real[:, lo:s]], 1)
            draw = real[:, s:e] if official else None   # paper mode: the official's random stream
            y, dec = pick(logits, torch.arange(s, e, device=dev).expand(B, -1), cand, draw)
            done |= pick.stopped
            tokens[:, s:e] = torch.where(dec, y, tokens[:, s:e])
            decoded_at[:, s:e] = torch.where(dec, live_forwards[:, None], decoded_at[:, s:e])
            live_forwards += cand.any(1)
            forwards += 1
        if pick.stop is not None:                        # after each block, on the canvas up to its end
            end = P + (e - new[:, 0]).clamp(0, N)                     # (B,) the block's end in the output
            out = standard(prompt, tokens, decoded_at, new, real)[0]      # (B, P + N), gaps filled
            done |= pick.stop(out, end)
        if done.all():
            break
    return finish(*standard(prompt, tokens, decoded_at, new, real), live_forwards, forwards)


# ----------------------------------------------------------------------------- reproduction only

# The official BD3-LM fills the [MASK]s of a prompt [left | MASK * n | right] (ROCStories) by another
# algorithm than the block-left infilling of `generate`: the prompt's whole blocks, [MASK]s and right context
# included, are cached first, and each block of the span is decoded at the positions AFTER that cache.
# generate(settings.paper.official) calls it when the prompt holds [MASK]s.

HF_GENERATE = False   # the official runs decode it with its own diffusion sampler
OFFICIAL_EXCLUDES = False  # the official eval counts every target (nll's exclude unused)
SUITE_NLL = None      # the official suite runner's OWT likelihood: this file's own nll


def crop_left(seen, new, L: int):
    """The official KV cache past the model's context L (_crop_kv_cache_left): before a forward of the inputs
    `new` (B, T), the oldest valid entries of `seen` (B, K) go so that cache + inputs <= L. block_view then
    numbers the inputs after the entries left (the official renumbers them: L - T.., or 0.. when the inputs
    alone pass L). Returns seen (B, K). The prefill's crop: seen the prompt's visible columns, new none, so
    the last L of them are kept (the official caches inputs[-L:])."""
    drop = (seen.sum(1, keepdim=True) + new.sum(1, keepdim=True) - L).clamp(min=0)    # (B, 1)
    return seen & (seen.cumsum(1) - 1 >= drop)


def official_context(pick, cols, sample):
    """Infilling with a repetition penalty without penalize_context (sampling.infill_context): the official
    penalises its canvas up to the end of the block it decodes (running_generation = the columns up to the
    block's last one that is not padding): the prompt left of it, pad ids included, the blocks before it and
    this block as decoded so far. cols, sample (B, S): the block's columns, and which are not padding."""
    track = pick.track
    if track is None or track.context is None:
        return
    end = torch.where(sample, cols, -1).max(1, keepdim=True).values + 1       # (B, 1)
    col = torch.arange(track.gen.shape[1], device=cols.device)
    track.context = (track.visible | track.gen) & (col < end)                 # (B, C)


def official_infilling(prompt, prompt_mask, mask_id: int, max_new_tokens: int) -> bool:
    """Whether a paper-mode call infills: its prompt holds [MASK]s. The official decodes only those (it
    ignores max_new_tokens) and runs one prompt at a time: a batch must infill in every row (ValueError)."""
    visible = prompt_mask if prompt_mask is not None else torch.ones_like(prompt, dtype=torch.bool)
    holes = ((prompt == mask_id) & visible).any(1)                                 # (B,)
    if not holes.any():
        return False
    if not holes.all() or max_new_tokens:
        raise ValueError("official BD3-LM infilling decodes the [MASK]s of the prompt only: every row must "
                         "hold one, with max_new_tokens 0 (or run without official)")
    return True


@torch.no_grad()
def official_infill(model, prompt, cfg: BD3LMConfig, settings: Settings, prompt_mask=None, stop=None,
                    generator=None):
    """The official BD3-LM infilling (its generate with align_inputs_to_blocks and a KV cache, not fused),
    batched. A row of p tokens is padded with [MASK] to a multiple of S (that padding is never decoded); its
    first S floor(p/S) tokens, [MASK]s and right context included, are cached block-causally at
    positions 0, 1, ...; then the blocks of S columns from the one holding the first [MASK] (as many as hold
    one) are decoded in turn: a block's tokens sit at the positions right after the cache (not their own),
    see the whole cache and each other, and the confidence rule decodes its [MASK]s; a finished block is
    then appended to the cache by a forward of its own. With settings.paper.seq_len = L the oldest cache
    entries go before a forward would pass L (crop_left). `stop` is checked after each block, to its end."""
    B, P = prompt.shape
    S, m, L, dev = cfg.block_size, cfg.mask_id, settings.paper.seq_len, prompt.device
    tokens, real, _ = canvas(prompt, prompt_mask, 0, m)                          # (B, P) left-padded
    tokens, real = torch.nn.functional.pad(tokens, (0, S), value=m), torch.nn.functional.pad(real, (0, S))
    lead, length = (~real[:, :P]).sum(1), real.sum(1)                           # (B,) left padding, p
    hole = (tokens == m) & real                                                 # (B, P + S) to decode
    rel = torch.arange(P + S, device=dev) - lead[:, None]                       # (B, P + S) row position
    start = lead + (hole.float().argmax(1) - lead) // S * S                     # (B,) first block's column
    held = torch.zeros(B, P // S + 2, device=dev).scatter_add_(1, (rel // S).clamp(min=0), hole.float())
    n_blk = (held > 0).sum(1)                                                   # (B,) blocks holding a hole
    Fmax = int((length // S * S).max())
    src = lead[:, None] + length[:, None] // S * S - Fmax + torch.arange(Fmax, device=dev)   # (B, Fmax)
    cache = model.new_cache(B, Fmax + (int(n_blk.max()) + 1) * S, slots=S)
    seen = src >= lead[:, None]                                                 # (B, Fmax) the prompt's
    seen = crop_left(seen, seen[:, :0], L) if L else seen
    prefill(model, tokens.gather(1, src.clamp(min=0)), seen, cache, S)
    pick = Picker(settings, tokens, real, m, prompt, prompt_mask, stop, generator)
    decoded_at = torch.full_like(tokens, -1)            # (B, P + S) the row's forward that decoded a column
    live_forwards = torch.zeros(B, dtype=torch.long, device=dev)       # (B,) the forwards a row was live in
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    forwards, shift = 0, torch.arange(S, device=dev)
    for j in range(int(n_blk.max())):
        cols = (start[:, None] + j * S + shift).clamp(max=P + S - 1)           # (B, S) this block's columns
        sample = rel.gather(1, cols) < length[:, None]                          # (B, S) not the pad
        # a block runs if it is one of the row's n_blk and holds a [MASK] (the pad's too, as the official)
        run = (j < n_blk) & ~done & sample[:, 0] & (tokens.gather(1, cols) == m).any(1)   # (B,)
        inputs = run[:, None].expand(B, S)                                      # (B, S) real where it runs
        official_context(pick, cols, sample)
        while True:
            cand = (tokens.gather(1, cols) == m) & sample & run[:, None]       # (B, S)
            if not cand.any():                                   # the block is done in every running row
                break
            seen = crop_left(seen, inputs, L) if L else seen
            pos, mask = block_view(seen, inputs, S)
            logits = model(tokens.gather(1, cols), pos, mask, cache, last=S)    # (B, S, V)
            cache.commit(0)
            y, dec = pick(logits, cols, cand, draw=sample)                      # sampled: not the pad
            done |= pick.stopped
            tokens.scatter_(1, cols, torch.where(dec, y, tokens.gather(1, cols)))
            decoded_at.scatter_(1, cols, torch.where(dec, live_forwards[:, None], decoded_at.gather(1, cols)))
            live_forwards += cand.any(1)
            forwards += 1
        if run.any():                                            # the finished block joins the cache
            seen = crop_left(seen, inputs, L) if L else seen
            pos, mask = block_view(seen, inputs, S)
            model(tokens.gather(1, cols), pos, mask, cache, last=1)
            cache.commit(S)
            seen = torch.cat([seen, inputs], 1)
        if pick.stop is not None:
            end = torch.minimum(cols[:, -1] + 1, lead + length)                 # (B,) the block's last + 1
            done |= pick.stop(tokens[:, :P], end) & run
    return finish(tokens[:, :P], decoded_at[:, :P], live_forwards, forwards)
