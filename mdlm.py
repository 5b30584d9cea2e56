"""Masked diffusion language model (MDLM, Sahoo et al. 2024): the any-order limit.

Idea: corrupt a sequence by replacing each target token with [MASK] independently with probability t, and
train a bidirectional transformer to predict the masked tokens from the rest. Generation starts from all
[MASK] and reveals tokens over several steps, several per step when the model is confident.

Noise: linear schedule alpha_t = 1 - t (probability that a token is still clean), one t ~ U[eps, 1] per
sequence. SUBS parameterisation: the [MASK] logit is -inf and clean tokens are copied through.
Objective (per sequence, then averaged over the batch; M = masked targets, targets = not prompt, not pad):
    training (the paper's): L = 1/|M| * sum_{i in M} -log p_theta(x0_i | xt)
    NELBO (--nelbo, eval):  L = 1/|targets| * sum_{i in M} -alpha'_t / (1 - alpha_t) * -log p_theta(x0_i | xt)
                              = 1/|targets| * sum_{i in M} (1/t) * -log p_theta(x0_i | xt)

Limits: Set Diffusion samples *orders* from a per-position schedule; with a single shared schedule for every
position the reveal order is uniformly random, which is MDLM (paper §3, "uniform random positions recover
order-agnostic masked diffusion"). BD3-LM with one block (S = L) is exactly MDLM.
Paper: baseline of Set Diffusion §5; sampler as the paper's GSM8K baseline: semi-autoregressive blocks of 32,
a full bidirectional forward per step, no KV cache.
Differences from the official code, and paper mode (settings.paper: official, seq_len L; eval.py --official;
the last section): our sampler generates max_new_tokens new tokens and its canvas ends with the block holding
the last of them; the official (align_inputs_to_blocks) counts them from the start of the block holding the
prompt's end (p mod block fewer, or more: its last block also decodes the [MASK]s it pads the canvas with up
to L, which its bidirectional forward attends to), and with p + N > L it slides an L-wide window at positions
0..L-1; ours attends to the whole canvas. Paper mode does as the official, and takes its pick among tied
confidences, its low-confidence stop (the confidences it keeps: a block's slots rewritten each step) and an
infilling penalty's context (the whole canvas) from sampling.py.

The block-aligned canvas (`block_canvas`, `official_count`, `standard`) defined here is shared by bd3lm.py.
"""
import math
from dataclasses import dataclass

import torch

from ar import defaults, finish, trim
from model import padded, with_padding
from sampling import Picker, Settings, check_settings, decode


# ----------------------------------------------------------------------------- config

@dataclass
class MDLMConfig:
    mask_id: int          # the absorbing [MASK] token
    eps: float = 1e-3     # t ~ U[eps, 1]
    nelbo: bool = False   # train on the 1/t-weighted NELBO, not the unweighted masked CE (the paper's runs)

    def __post_init__(self):
        if not 0 < self.eps < 1:
            raise ValueError(f"eps must be in (0, 1), got {self.eps}")

    def check(self, seq_len: int):
        """Raise a ValueError with one line for a setting that cannot train at context seq_len (none here)."""


# What the scripts need to know of a method is data here, never a branch on its name.
KNOBS = frozenset({"max_new_tokens", "threshold", "temperature", "mdlm_block", "paper.official",
                   "paper.seq_len", "paper.options"})
EXACT_NLL = False     # nll is the NELBO, an upper bound on -log p(x0), one noise draw per call
CAN_INFILL = True     # [MASK]s inside the prompt are filled, seeing the visible tokens on both sides
MASK_STREAMS = 1      # training's dense attention mask spans k L positions: xt alone


# ----------------------------------------------------------------------------- noising

def noise(x0, cfg: MDLMConfig, target, generator=None):
    """xt: each target masked with probability t (alpha_t = 1 - t), one t per sequence. Returns xt, t (B,
    L)."""
    B, L = x0.shape
    u = torch.rand(B, 1, generator=generator, device=x0.device)
    t = (cfg.eps + (1 - cfg.eps) * u).expand(B, L)                        # (B, L), same t for the row
    masked = (torch.rand(B, L, generator=generator, device=x0.device) < t) & target
    return torch.where(masked, cfg.mask_id, x0), t


# ----------------------------------------------------------------------------- mask

def mask_mod(cfg: MDLMConfig, seq_len: int):
    """Bidirectional, as a FlexAttention mask_mod (b, h, q_idx, kv_idx) -> bool: every query sees every
    key."""
    def mod(b, h, q_idx, kv_idx):
        return (q_idx >= 0) & (kv_idx >= 0)
    return mod


def attention_mask(cfg: MDLMConfig, seq_len: int, device=None) -> torch.Tensor:
    """mask_mod as a dense (L, L) bool."""
    idx = torch.arange(seq_len, device=device)
    return mask_mod(cfg, seq_len)(0, 0, idx[:, None], idx[None, :])


# ----------------------------------------------------------------------------- loss

def subs(logits, xt, mask_id: int):
    """SUBS parameterisation -> log-probs (B, L, V): never predict [MASK]; clean tokens are copied through."""
    logits = logits.float()
    logits[..., mask_id] = float("-inf")
    logp = torch.log_softmax(logits, dim=-1)
    clean = (xt != mask_id)[..., None]                                     # (B, L, 1)
    copy = torch.full_like(logp, float("-inf")).scatter_(-1, xt[..., None], 0.0)
    return torch.where(clean, copy, logp)


def denoise(model, x0, xt, cfg: MDLMConfig, pad_mask):
    """The model call: logits (B, L, V) of every position of xt, attending bidirectionally."""
    return model(xt, mask=padded(mask_mod(cfg, x0.shape[1]), pad_mask))


def masked_nll(logits, x0, xt, target, mask_id: int):
    """-log p(x0_i | xt) under SUBS (B, L), and the masked targets it counts on (B, L)."""
    nll_i = -subs(logits, xt, mask_id).gather(-1, x0[..., None]).squeeze(-1)     # (B, L)
    return nll_i, (xt == mask_id) & target


def objective(nll_i, masked, t, target, nelbo: bool):
    """Per-sequence loss (B,): mean over masked tokens, or the NELBO (1/t weights, mean over targets)."""
    if nelbo:                                   # clamp: a row with no target (or no [MASK]) counts 0
        return (nll_i / t * masked).sum(1) / target.sum(1).clamp(min=1)
    return (nll_i * masked).sum(1) / masked.sum(1).clamp(min=1)


def nll(model, x0, cfg: MDLMConfig, prompt_mask=None, pad_mask=None, generator=None, exclude=None):
    """NELBO, an upper bound on -log p(x0), from one noise draw: (sum over counted targets (B,), their number
    (B,)). exclude (B, L): targets noised as usual but not counted."""
    prompt_mask, pad_mask, target = defaults(x0, prompt_mask, pad_mask)
    xt, t = noise(x0, cfg, target, generator)
    counted = target if exclude is None else target & ~exclude
    x0, xt, t, counted, pad_mask = trim(pad_mask, x0, xt, t, counted, pad_mask)   # drop trailing padding
    nll_i, masked = masked_nll(denoise(model, x0, xt, cfg, pad_mask), x0, xt, counted, cfg.mask_id)
    return (nll_i / t * masked).sum(1), counted.sum(1)             # weight -alpha'/(1-alpha) = 1/t


def loss(model, x0, cfg: MDLMConfig, prompt_mask=None, pad_mask=None, generator=None):
    """Masked-token cross-entropy (or the NELBO with cfg.nelbo), mean over the batch. The stats stay on the
    device (no host synchronisation per micro-batch)."""
    prompt_mask, pad_mask, target = defaults(x0, prompt_mask, pad_mask)
    xt, t = noise(x0, cfg, target, generator)
    x0, xt, t, target, pad_mask = trim(pad_mask, x0, xt, t, target, pad_mask)   # drop trailing padding
    nll_i, masked = masked_nll(denoise(model, x0, xt, cfg, pad_mask), x0, xt, target, cfg.mask_id)
    per_seq = objective(nll_i, masked, t, target, cfg.nelbo)
    return per_seq.mean(), {"masked": masked.sum() / target.sum().clamp(min=1)}   # no target: 0, not 0 / 0


# ----------------------------------------------------------------------------- reference sampler (read first)

@torch.no_grad()
def generate_reference(model, prompt, cfg: MDLMConfig, settings: Settings):
    """The sampler as the method states it, to read first: batch 1, greedy, and every step one bidirectional
    forward over the whole canvas [prompt | N [MASK]], decoding in the block (multiples of
    settings.mdlm_block) that holds the leftmost [MASK]. `generate` is this loop batched (test_all.py checks
    them equal)."""
    S, m = settings.mdlm_block, cfg.mask_id
    x = torch.cat([prompt, prompt.new_full((1, settings.max_new_tokens), m)], 1)   # (1, C) the canvas
    decoded_at, forwards = torch.full_like(x, -1), 0      # the forward that decoded a column; forwards run
    while (x == m).any():
        s = int((x[0] == m).nonzero()[0]) // S * S                            # the block being decoded
        e = min(s + S, x.shape[1])                                            # cut at the canvas' end
        logits = model(x, mask=attention_mask(cfg, x.shape[1], x.device))[:, s:e]   # (1, e - s, V)
        y, dec = decode(logits, x[:, s:e] == m, m, settings.threshold)
        x[:, s:e] = torch.where(dec, y, x[:, s:e])
        decoded_at[:, s:e] = torch.where(dec, forwards, decoded_at[:, s:e])
        forwards += 1
    return finish(x, decoded_at, torch.tensor([forwards], device=x.device), forwards)


# ----------------------------------------------------------------------------- batched sampler

# MDLM keeps no KV cache (every step recomputes the whole canvas bidirectionally), so nothing is prefilled:
# the canvas is laid out in blocks, the layout BD3-LM caches block by block.

def block_canvas(prompt, prompt_mask, max_new_tokens, S, mask_id):
    """Lay each row out so that its blocks (positions S*b .. S*b + S-1) share canvas columns across the batch
    (align_inputs_to_blocks of the paper's code, for a batch).

    Row b (prompt length p) is left-padded by off_b, a multiple of S, chosen so that the block holding its
    first new token starts at the same column col0 in every row (the prompt's tail shares that block, as in
    training). Returns tokens, real, pos (B, C), col0, and new (B, N): the canvas column of each new token.
    """
    B, P = prompt.shape
    dev = prompt.device
    p = prompt_mask.sum(1) if prompt_mask is not None else torch.full((B,), P, device=dev)   # (B,)
    hole = (prompt == mask_id) & (torch.arange(P, device=dev) >= P - p[:, None])   # (B, P) [MASK]s to infill
    lead = torch.where(hole.any(1), hole.float().argmax(1) - (P - p), p)  # (B,) first position to decode
    first = lead // S * S                                        # (B,) start of the first generated block
    col0 = int(first.max())
    off = col0 - first                                           # (B,) multiple of S
    C = col0 + math.ceil(int((off + p + max_new_tokens).max() - col0) / S) * S   # whole blocks from col0
    rel = torch.arange(C, device=dev) - off[:, None]             # (B, C) position of each column
    is_prompt = (rel >= 0) & (rel < p[:, None])
    real = (rel >= 0) & (rel < (p + max_new_tokens)[:, None])
    src = (P - p[:, None] + rel).clamp(0, P - 1)                 # the prompt's column (off it: any, unused)
    tokens = torch.where(is_prompt, prompt.gather(1, src), mask_id)
    new = off[:, None] + p[:, None] + torch.arange(max_new_tokens, device=dev)   # (B, N)
    return tokens, real, rel.clamp(min=0), col0, new             # left padding at position 0, never seen


def standard(prompt, tokens, step, new, real):
    """Back from block_canvas to the layout every sampler returns: [left-padded prompt | N new] (B, P + N);
    the prompt's part is read from the canvas too, so [MASK]s infilled inside the prompt come back filled."""
    B, P = prompt.shape
    off = real.float().argmax(1, keepdim=True)                                  # (B, 1) first real column
    src = off + real.sum(1, keepdim=True) - new.shape[1] - P + torch.arange(P, device=prompt.device)  # (B, P)
    vis, src = src >= off, src.clamp(min=0)          # a prompt column left of the canvas: the prompt's own
    return (torch.cat([torch.where(vis, tokens.gather(1, src), prompt), tokens.gather(1, new)], 1),
            torch.cat([torch.where(vis, step.gather(1, src), -1), step.gather(1, new)], 1))


def mdlm_canvas(prompt, prompt_mask, settings: Settings, mask_id: int):
    """MDLM's decoding canvas: block_canvas cut after the last column a row uses (no cache: none more).
    Returns tokens, real, pos (B, C), col0 (the first column to decode), new (B, N), gen (B, C) the columns
    to decode and seen (B, C) the columns attended to: both `real` here (paper mode's canvas,
    official_mdlm_canvas, decodes and attends to more)."""
    N, S = settings.max_new_tokens, settings.mdlm_block
    tokens, real, pos, col0, new = block_canvas(prompt, prompt_mask, N, S, mask_id)   # (B, C)
    C = int(real.any(0).nonzero().max()) + 1           # after every row's last column: the rest is dead
    return tokens[:, :C], real[:, :C], pos[:, :C], col0, new, real[:, :C], real[:, :C]


@torch.no_grad()
def generate(model, prompt, cfg: MDLMConfig, settings: Settings, prompt_mask=None, stop=None, generator=None):
    """Semi-autoregressive: decode blocks of settings.mdlm_block positions left to right, aligned to multiples
    of the block (the first block also holds the prompt's tail, as block_canvas lays it out); inside a block,
    one full bidirectional forward per step and the confidence rule until the block has no [MASK] left.
    [MASK]s inside the prompt are infilled too, from the block holding the first of them (bidirectionally, so
    the visible tokens right of them count). Paper mode's canvas and window: the last section."""
    check_settings(settings)              # before the canvas, which is laid out in blocks (Picker checks too)
    B, P = prompt.shape
    S, dev, paper = settings.mdlm_block, prompt.device, settings.paper     # paper mode: the last section
    layout = official_mdlm_canvas if paper.official else mdlm_canvas     # paper mode: the official canvas
    tokens, real, pos, col0, new, gen, seen = layout(prompt, prompt_mask, settings, cfg.mask_id)   # (B, C)
    C, E = tokens.shape[1], int(gen.any(0).nonzero().max()) + 1       # E: after the last column to decode
    mask = with_padding(attention_mask(cfg, C, dev), ~seen)                        # (B, 1, C, C)
    slide = paper.official and bool((real.sum(1) > paper.seq_len).any())    # paper mode, p + N > L
    pick = Picker(settings, tokens, gen, cfg.mask_id, prompt, prompt_mask, stop, generator)
    decoded_at = torch.full_like(tokens, -1)            # (B, C) the row's forward that decoded a column
    live_forwards = torch.zeros(B, dtype=torch.long, device=dev)       # (B,) the forwards a row was live in
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    forwards = 0
    for s in range(col0, E, S):
        e = min(s + S, E)                                    # the last block: up to the last column to decode
        while True:
            cand = (tokens[:, s:e] == cfg.mask_id) & gen[:, s:e] & ~done[:, None]     # (B, e-s)
            if not cand.any():                                         # the block is done in every live row
                break
            if slide:                                   # paper mode: an L-wide window at positions 0..L-1
                logits = official_window(model, tokens, seen, s, S, paper.seq_len)[:, :e - s]
            else:
                logits = model(tokens, pos, mask, last=C - s)[:, :e - s]             # (B, e-s, V)
            y, dec = pick(logits, torch.arange(s, e, device=dev).expand(B, -1), cand)
            done |= pick.stopped
            tokens[:, s:e] = torch.where(dec, y, tokens[:, s:e])
            decoded_at[:, s:e] = torch.where(dec, live_forwards[:, None], decoded_at[:, s:e])
            live_forwards += cand.any(1)
            forwards += 1
        if pick.stop is not None:                        # after each block, on the canvas up to its end
            end = P + (e - new[:, 0]).clamp(0, new.shape[1])          # (B,) the block's end in the output
            out = standard(prompt, tokens, decoded_at, new, real)[0]      # (B, P + N), gaps filled
            done |= pick.stop(out, end)
        if done.all():
            break
    return finish(*standard(prompt, tokens, decoded_at, new, real), live_forwards, forwards)


# ----------------------------------------------------------------------------- reproduction only

# MDLM as the official code runs the released checkpoints (settings.paper.official, eval.py --official): its
# new-token count, its canvas padded with [MASK] to the context L, its L-wide window once p + N > L.
HF_GENERATE = False   # the official runs decode it with its own diffusion sampler
OFFICIAL_EXCLUDES = False  # the official eval counts every target (nll's exclude unused)
SUITE_NLL = None      # the official suite runner's OWT likelihood: this file's own nll


def official_mdlm_canvas(prompt, prompt_mask, settings: Settings, mask_id: int):
    """mdlm_canvas in paper mode: the official layout for released checkpoints. max_new_tokens counts from the
    start of the block holding the prompt's end (official_count: ceil(N / block) blocks), the canvas is
    padded with [MASK] to the context length settings.paper.seq_len (required), every column attended to, and
    the last block decodes that padding too (new has S ceil(N/S) columns: the output holds them, [MASK] where
    nothing was decoded); with p + N > L each forward sees an L-wide window (official_window)."""
    N, S = settings.max_new_tokens, settings.mdlm_block
    if settings.paper.seq_len is None:
        raise ValueError("official needs seq_len: the official MDLM canvas is padded to the context "
                         "length")
    tokens, real, pos, col0, new = block_canvas(prompt, prompt_mask, S * math.ceil(N / S), S, mask_id)
    within = real & (torch.arange(real.shape[1], device=real.device) < new[:, :1] + N) if N else real
    tokens, pos, seen = official_canvas(tokens, within, settings.paper.seq_len, mask_id)     # (B, C')
    real = torch.nn.functional.pad(real, (0, tokens.shape[1] - real.shape[1]))
    # the [MASK]s to decode: ceil(N/S) blocks of the canvas (its padding too); infilling: the prompt's only
    gen = official_count(seen, new[:, :N], S) if N else real
    return tokens, real, pos, col0, new, gen, seen


def official_count(real, new, S: int):
    """real (B, C), the canvas, cut to the official align_inputs_to_blocks count of new tokens: ceil(N / S)
    blocks from the start of the block holding each row's first new token (new (B, N)). With real ending at
    p + N (BD3-LM) a prompt of length p gets N - (p mod S) new tokens when S divides N (min(S floor(p/S) +
    S ceil(N/S), p + N) - p in general); MDLM's official canvas also holds its [MASK] padding up to L, into
    which that last block decodes too."""
    N = new.shape[1]
    if N == 0:                   # infilling alone: every [MASK] of the prompt, no new-token count to cut
        return real
    end = new[:, :1] // S * S + math.ceil(N / S) * S                            # (B, 1) first column after
    return real & (torch.arange(real.shape[1], device=real.device) < end)


def official_canvas(tokens, real, seq_len: int, mask_id: int):
    """The official MDLM canvas: each row's [prompt | N new] padded with [MASK] to seq_len columns, all of
    them attended to. Returns tokens, pos, seen (B, C'), the columns every query attends to."""
    B, C = tokens.shape
    off = real.float().argmax(1, keepdim=True)                                  # (B, 1) first real column
    width = real.sum(1, keepdim=True).clamp(min=seq_len)                        # (B, 1) max(p + N, L)
    C2 = max(C, int((off + width).max()))
    rel = torch.arange(C2, device=tokens.device) - off                          # (B, C') position of a column
    tokens = torch.nn.functional.pad(tokens, (0, C2 - C), value=mask_id)
    return tokens, rel.clamp(min=0), (rel >= 0) & (rel < width)


def official_window(model, tokens, seen, s: int, S: int, L: int):
    """The official MDLM forward for the block starting at column s once a row outgrows its context L
    (p + N > L): L columns of the row, from its first while the block starts before its position L, else
    ending with the block (S columns from s: the window slides a block at a time; at the canvas' end it is
    shorter), at positions 0..L-1 (renumbered), all attended. tokens, seen (B, C): official_canvas's.
    Returns the logits (B, S, V) of the block's columns."""
    B, C = tokens.shape
    off = seen.float().argmax(1).long()                                         # (B,) the row's column 0
    start = off + torch.where(s - off >= L, s - off + S - L, 0)                 # (B,) the window's first
    cols = start[:, None] + torch.arange(L, device=tokens.device)               # (B, L)
    ok = (cols < C) & seen.gather(1, cols.clamp(max=C - 1))
    mask = with_padding(torch.ones(L, L, dtype=torch.bool, device=tokens.device), ~ok)   # (B, 1, L, L)
    pos = torch.arange(L, device=tokens.device).expand(B, L)
    logits = model(tokens.gather(1, cols.clamp(max=C - 1)), pos, mask)          # (B, L, V)
    idx = (s - start)[:, None] + torch.arange(S, device=tokens.device)          # (B, S) the block's columns
    return logits.gather(1, idx.clamp(max=L - 1)[..., None].expand(-1, -1, logits.shape[-1]))
