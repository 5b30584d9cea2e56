"""Set Diffusion (Arriola & Kuleshov, ICML 2026): decode *sets* of tokens, in a near-left-to-right order.

Idea. A sequence is generated as a series of position sets: each step predicts the tokens of a set given
everything revealed so far, then commits them to the KV cache as clean tokens. The order in which positions
are revealed comes from a *staggered* masking schedule: position j has its own schedule, shifted so that
earlier positions clear first. Its first-hitting times T_j give an order that is left to right up to local
shuffles: a token is revealed before a token to its left only if that token is less than smax positions away.
In training this is an any-order autoregressive model over orders drawn from that distribution:

    L = E_sigma [ 1/|targets| * sum_{j in targets} -log p_theta(x_sigma(j) | x_sigma(<j)) ]

Why two streams. The loss needs, for every rank j of sigma, a prediction of x_sigma(j) from the tokens of
ranks < j. One forward over 2L slots [x0 in sigma order | [MASK] in sigma order], at positions
[sigma | sigma], gives them all: the clean stream carries the keys of revealed tokens, causal in sigma order;
the [MASK] stream carries one query per target, which sees the clean tokens of rank < j and itself, never its
own token. One stream cannot do both (a token that later ranks read as a key would be visible to its own
query), so two streams train every rank in one forward, as XLNet's two-stream attention does.

Sampling: a window of W positions from the leftmost still-masked one; every step predicts all masked
positions in the window at once, decodes the confident ones (the MDLM rule) and commits them. So the window
W bounds a step's set (the paper's W = d = smax / 2), while smax bounds how far an order reaches (no token is
revealed before one smax or more positions to its left), not a set's size. Read generate_reference first:
that loop in ~25 lines (batch 1, no cache, one full forward per step); generate is the same sampler batched,
with a KV cache and the commit fused into the next step's forward (tested equal).

Why one target per query licenses a *set* per step. Training asks each query for one token given a clean
prefix in sigma order. When decoding, the W queries of a window all see the same committed tokens, so each
prediction is a marginal p(x_i | committed) of the model, and a step decodes several from these independent
marginals instead of the chain rule inside the set. With tau = inf a step decodes one token: exact AR over the
order. With tau < 1 a token is decoded only if its marginal is >= tau, so by the union bound the set decoded
in one step differs from a draw of the chain rule with probability <= sum_i (1 - p_i) <= |set| (1 - tau): tau
is what trades speed (tokens per step) for that error, and the top-1 token alone is always safe. The bound
takes the p_i to be marginals of one joint: it holds as far as the model's own chain rules agree (they do for
the data distribution; a model trained on many orders agrees only as far as it learned one joint). And every
query's context is one the loss trained: the window spans W <= smax positions, so a token is committed
before a masked token to its left only if it is fewer than smax positions away, which makes the committed
tokens, in commit order, a prefix of an order the schedule draws (test_all.py checks it on generations).

Schedule (paper §3; smax = 2d):
    b = smax / (L + smax - 1),  A = d / (2L),  k = A / (b - A)    (k = 1, b = 2A at d = 1: the AR order)
    loc_j = (1 - b)(1 - j / (L - 1)),  T_j = loc_j + b (1 - exp(-E_j / k)),  E_j ~ Exp(1)
    sigma = argsort(T, descending, stable): prompt first (T = +inf), padding last (T = -inf)
d, physically: position j is masked (forward time) over its support [loc_j, loc_j + b], smax positions wide in
time; A is the area under its masking probability there (b k / (k + 1): BD3-LM's area per token for blocks of
S = d). At any time, the positions in transition hold d / 2 [MASK]s on average (L b k / (k + 1) = d / 2, the
paper's inference budget C). The sampler's window W = d covers twice that, from the leftmost [MASK].

Limits: smax = 2 (d = 1) gives the identity order: the *factorisation order* is AR's (tested), though the
model still predicts x_j at a [MASK] query placed at position j, not from a shifted input as ar.py does. Were
every position to share one schedule (no stagger), all orders would be equally likely: MDLM's order-agnostic
limit. Fixed contiguous sets whose members attend to each other: BD3-LM, whose mask at S = 1 is this one.

Differences from the official code, and paper mode (settings.paper, eval.py --official; the last section):
our sampler runs a batch (each row its own window; the official asserts batch size 1) and its KV cache keeps
every entry, where the official drops entries past the context L (the oldest, or under its FHT commit order
those of the smallest positions, and then reads its mask at positions: Crop). Paper mode does that too, and
takes the official's pick among tied confidences, its low-confidence stop (no check after the last [MASK])
and an infilling penalty's context (the KV cache's tokens: official_context). The commit order "fht"
(the official accuracy runs') commits a step's tokens by decreasing first-hitting time, drawn from a schedule
of its own (fht_key); the default "l2r", left to right, is the official sampler's default. The official
suite runner's OWT likelihood draws its orders at max_block_size = d, not the paper's 2d: suite_nll.

Beyond the paper (off by default; the section before the last): cfg.infill, a fraction of the rows trained
in an infilling order. 0 is the paper's loss, draw for draw.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ar import canvas, defaults, finish
from model import padded, with_padding
from sampling import Picker, Settings, decode


# ----------------------------------------------------------------------------- config

@dataclass
class SetDiffusionConfig:
    mask_id: int    # the [MASK] token of the query stream
    smax: int = 8   # how far an order reaches (no token before one smax positions to its left), = 2d
    # Beyond the paper (the --infill section; at the defaults the loss is the paper's, draw for draw):
    infill: float = 0.0           # the fraction of training rows given an infilling order (infill_span)
    infill_len: str = "uniform"   # ... and how their span lengths are drawn: "uniform" or "loguniform"
    infill_added: bool = False    # ... and whether they are copies added to the batch, not replacements

    def __post_init__(self):
        """The one place each setting's rule is written (ValueError, one line naming the flag)."""
        if self.smax < 2:
            raise ValueError(f"--smax must be at least 2, got {self.smax}")
        if not 0 <= self.infill <= 1:
            raise ValueError(f"--infill must be a fraction in [0, 1], got {self.infill}")
        if self.infill_len not in SPAN_LENGTHS:
            raise ValueError(f"infill_len is one of {', '.join(SPAN_LENGTHS)}, got {self.infill_len!r}")

    def check(self, seq_len: int):
        """Raise a ValueError with one line for a setting that cannot train at context seq_len."""
        if self.smax > seq_len:     # an order's reach past the row: no staggered schedule is that wide
            raise ValueError(f"--smax {self.smax} is larger than the sequence length {seq_len}")

    def window(self, W: int = 0, name: str = "the window") -> int:
        """The sampler's window: W positions, or for 0 the paper's W = d = smax // 2 (ValueError, one line
        naming `name`, outside [1, smax]: a wider window would reveal a token before one smax or more
        positions to its left, an order the schedule never draws)."""
        W = W or self.smax // 2
        if not 1 <= W <= self.smax:
            raise ValueError(f"{name} {W}: the window must be in [1, smax={self.smax}]")
        return W


# What the scripts need to know of a method is data here, never a branch on its name.
KNOBS = frozenset({"max_new_tokens", "threshold", "temperature", "setdiffusion_window",
                   "setdiffusion_commit_order", "paper.seq_len", "paper.official", "paper.options"})
EXACT_NLL = False  # nll is -log p(x0 | sigma) for one sampled order: a bound only in expectation over sigma
CAN_INFILL = True     # [MASK]s inside the prompt are filled, every visible token on both sides cached first
MASK_STREAMS = 2      # training's dense attention mask spans k L positions: [x0 | MASK] in sigma order


# ----------------------------------------------------------------------------- ordering

def schedule(seq_len: int, smax: int, device=None):
    """The staggered schedule (the docstring's formula block, d = smax / 2): loc (L,) float64, b, k.

    Position j's support [loc_j, loc_j + b]: the locs are (1 - b) / (L - 1) apart, so two supports overlap,
    and the order may swap their positions, iff the positions are less than b (L - 1) / (1 - b) = smax apart:
    a token is never revealed before one smax or more positions to its left. At d = 1 (smax = 2) the
    schedule takes k = 1 and b = 2A = 1 / L instead: b (L - 1) / (1 - b) = 1, the supports abut and sigma is
    the identity (AR)."""
    d = smax / 2
    A = d / (2 * seq_len)                       # area under one position's masking probability curve
    if d == 1:                                  # smax = 2: a linear curve (k = 1) on supports that abut
        b, k = 2 * A, 1.0
    else:
        b = smax / (seq_len + smax - 1)         # support width: smax positions' spacing
        if b <= A:      # k = A / (b - A) > 0 needs A < b, i.e. smax <= 3L: a row shorter has no schedule
            raise ValueError(f"no staggered schedule with smax={smax} over {seq_len} positions")
        k = A / (b - A)  # area of b (1 - (1 - u)^k) over the support = b k / (k + 1) = A
    j = torch.arange(seq_len, dtype=torch.float64, device=device)                 # made where it is used
    loc = (1 - b) * (1 - j / max(seq_len - 1, 1))       # (L,); L = 1: one position, its support at 1 - b
    return loc, b, k


def first_hitting_times(batch_size: int, seq_len: int, smax: int, generator=None, device=None):
    """T_j = loc_j + b (1 - exp(-E_j / k)): the time position j is masked, going forward. (B, L) float64.
    P(T_j <= t) = 1 - (1 - clip((t - loc_j) / b, 0, 1))^k, the schedule's masking probability move_j(t)."""
    loc, b, k = schedule(seq_len, smax, device)
    E = torch.empty(batch_size, seq_len, dtype=torch.float64, device=device).exponential_(generator=generator)
    return loc + b * (-torch.expm1(-E / k))                                      # (B, L)


def order(x0, smax: int, prompt_mask, pad_mask, generator=None, span=None):
    """sigma (B, L): the prompt first in its own order, targets by decreasing T, padding last. span (B, L): an
    infilling order (the --infill section), those targets after every other target.

    Descending, because T is the time a position gets *masked* going forward: generation runs time backwards,
    so the last position to be masked (largest T, the leftmost, loc is largest there) is the first revealed.
    Stable, so ties (the prompt's +inf, the padding's -inf) keep position order."""
    B, L = x0.shape
    T = first_hitting_times(B, L, smax, generator, x0.device)                    # (B, L)
    T = T if span is None else torch.where(span, T - 1, T)                       # T - 1 < 0 <= T of the rest
    T = T.masked_fill(prompt_mask, math.inf).masked_fill(pad_mask, -math.inf)
    return torch.argsort(T, dim=1, descending=True, stable=True)


# ----------------------------------------------------------------------------- mask

def mask_mod(cfg: SetDiffusionConfig, seq_len: int):
    """The 2L training mask in *rank* space, as a FlexAttention mask_mod (b, h, q_idx, kv_idx) -> bool: slots
    0..L-1 the clean stream in sigma order, L..2L-1 the [MASK] stream in sigma order. It is BD3-LM's mask with
    S = 1 (test_all.py), and it is the same for every row: the rows differ only in sigma, which the layout
    carries in the token order and the positions [sigma | sigma], so one mask (one BlockMask) serves the
    batch."""
    L = seq_len
    def mod(b, h, q_idx, kv_idx):
        xt_q, xt_k = q_idx >= L, kv_idx >= L                             # noisy half
        # BD3-LM's mask with S = 1: each rank in sigma is a block of its own, so a block is a rank
        blk_q, blk_k = q_idx % L, kv_idx % L                             # rank of each token in sigma
        same_half = xt_q & xt_k | ~xt_q & ~xt_k        # not xt_q == xt_k: inductor cannot bound bool == bool
        block_diagonal = (blk_q == blk_k) & same_half                   # M_BD: own block, same half
        offset_block_causal = xt_q & ~xt_k & (blk_q > blk_k)             # M_OBC: noisy -> earlier clean
        block_causal = ~xt_q & ~xt_k & (blk_q >= blk_k)                  # M_BC: clean -> clean
        return block_diagonal | offset_block_causal | block_causal
    return mod


def attention_mask(cfg: SetDiffusionConfig, seq_len: int, device=None) -> torch.Tensor:
    """mask_mod as a dense (2L, 2L) bool."""
    idx = torch.arange(2 * seq_len, device=device)
    return mask_mod(cfg, seq_len)(0, 0, idx[:, None], idx[None, :])


# ----------------------------------------------------------------------------- loss

def denoise(model, x0, sigma, target, cfg: SetDiffusionConfig, pad_mask, first=0, end=None):
    """One forward of the two-stream layout. Returns logits (B, end - first, V) of the [MASK] stream for the
    ranks [first, end) in sigma order (default all L)."""
    B, L = x0.shape
    end = L if end is None else end
    x0_s = x0.gather(1, sigma)                                                   # (B, L) clean, sigma order
    xt_s = torch.where(target.gather(1, sigma), cfg.mask_id, x0_s)               # (B, L) targets -> [MASK]
    tokens, pos = torch.cat([x0_s, xt_s], 1), torch.cat([sigma, sigma], 1)       # (B, 2L) the paper's layout
    mask = padded(mask_mod(cfg, L), pad_mask.gather(1, sigma).repeat(1, 2))      # over the 2L slots
    # Trim: only [MASK] ranks [first, end) carry a loss (the rest are prompt or padding in every row), and
    # only clean ranks < end are seen by them. The same logits from 2 end - first slots instead of 2L.
    keep = torch.cat([torch.arange(end, device=x0.device), L + torch.arange(first, end, device=x0.device)])
    kept = lambda b, h, q_idx, kv_idx: mask(b, h, keep[q_idx], keep[kv_idx])    # noqa: E731 (trimmed mask)
    return model(tokens[:, keep], pos[:, keep], kept, last=end - first)          # (B, end - first, V)


def target_nll(model, x0, cfg, prompt_mask, pad_mask, generator, exclude=None, span=None, sigma=None):
    """-log p of every target under one sampled order: nll (B, n) (0 off counted targets) and the counted
    targets (B, n), both in sigma order over the ranks that hold a target in some row. `exclude` (B, L):
    targets kept in the order but not counted. span (B, L): infilling rows (the --infill section). sigma
    (B, L): an order drawn by the caller (the last section's suite_nll), else one drawn here."""
    prompt_mask, pad_mask, _ = defaults(x0, prompt_mask, pad_mask)
    prompt_mask = prompt_mask if span is None else prompt_mask & ~span           # a span's prompt is a target
    target = ~(prompt_mask | pad_mask)
    if sigma is None:
        sigma = order(x0, cfg.smax, prompt_mask, pad_mask, generator, span)      # (B, L)
    n_prompt, n_target = prompt_mask.sum(1), target.sum(1)                       # (B,)
    # The ranks [first, end) that hold a target in some row. Where no row holds one (prompts of one length,
    # or padding alone) they keep one rank, counted nowhere: a forward needs a query (last=0 keeps all slots).
    first, end = int(n_prompt.min()), max(int((n_prompt + n_target).max()), 1)
    first = min(first, end - 1)
    logits = denoise(model, x0, sigma, target, cfg, pad_mask, first, end).float()
    logits[..., cfg.mask_id] = float("-inf")                                     # never predict [MASK]
    counted = target if exclude is None else target & ~exclude
    target_s = counted.gather(1, sigma)[:, first:end]                            # (B, n)
    nll_i = F.cross_entropy(logits.transpose(1, 2), x0.gather(1, sigma)[:, first:end], reduction="none")
    return nll_i * target_s, target_s


def nll(model, x0, cfg: SetDiffusionConfig, prompt_mask=None, pad_mask=None, generator=None, exclude=None):
    """-log p(x0 | sigma) for one sampled order: (sum over counted targets (B,), their number (B,)). What it
    estimates: E_sigma[-log p(x0 | sigma)] >= -log E_sigma p(x0 | sigma) (Jensen), so its mean over orders is
    an upper bound on the model's NLL, while a single draw (the official eval's) is not a bound by itself.
    exclude (B, L): targets not counted (the official eval drops pad-id targets, e.g. EOS, and position 0
    with keep_clean_bos); they still take their place in the order."""
    nll_i, target_s = target_nll(model, x0, cfg, prompt_mask, pad_mask, generator, exclude)
    return nll_i.sum(1), target_s.sum(1)


def loss(model, x0, cfg: SetDiffusionConfig, prompt_mask=None, pad_mask=None, generator=None):
    """Any-order AR cross-entropy over one staggered order: mean over each sequence's targets, then batch.
    cfg.infill > 0 (not the paper): that fraction of rows in an infilling order instead (infill_span), or with
    cfg.infill_added as well (added_rows): the --infill section."""
    prompt_mask, pad_mask, _ = defaults(x0, prompt_mask, pad_mask)
    span = infill_span(pad_mask, cfg.infill, generator, cfg.infill_len) if cfg.infill > 0 else None
    if span is not None and cfg.infill_added:
        x0, prompt_mask, pad_mask, span = added_rows(x0, prompt_mask, pad_mask, span)
    nll_i, target_s = target_nll(model, x0, cfg, prompt_mask, pad_mask, generator, span=span)
    per_seq = nll_i.sum(1) / target_s.sum(1).clamp(min=1)          # a row with no target: 0, not 0 / 0
    return per_seq.mean(), {"tokens": target_s.sum()}


# ----------------------------------------------------------------------------- reference sampler (read first)

@torch.no_grad()
def generate_reference(model, prompt, cfg: SetDiffusionConfig, settings: Settings):
    """The sampler as the paper states it, to read first: batch size 1, greedy, no KV cache, commit order l2r.

    The canvas is [prompt | N [MASK]]; [MASK]s inside the prompt are infilled too. Each step recomputes one
    forward over [the clean tokens in commit order | one [MASK] query per masked column of the window]: the
    clean stream is causal in commit order (the visible prompt first, in position order), each query sees
    every clean token and itself. The window is the W columns from the leftmost [MASK]. The confidence rule
    picks the tokens to decode, and they are committed left to right. `generate` is this loop with a KV cache,
    a batch and options; test_all.py checks them equal token for token and step for step.
    """
    W, m = cfg.window(settings.setdiffusion_window), cfg.mask_id
    x = torch.cat([prompt, prompt.new_full((1, settings.max_new_tokens), m)], 1)   # (1, C) the canvas
    C, dev = x.shape[1], x.device
    clean = [c for c in range(C) if x[0, c] != m]  # committed columns, in commit order
    decoded_at, forwards = torch.full_like(x, -1), 0      # the forward that decoded a column; forwards run
    while (x == m).any():
        left = int((x[0] == m).nonzero()[0])                                # the window: W columns from here
        queries = [c for c in range(left, min(left + W, C)) if x[0, c] == m]   # cut at the canvas' end
        n, n_q = len(clean), len(queries)
        mask = torch.zeros(n + n_q, n + n_q, dtype=torch.bool, device=dev)
        mask[:n, :n] = torch.ones(n, n, dtype=torch.bool, device=dev).tril()   # clean: causal in commit order
        mask[n:, :n] = True                                                  # a query sees every clean token
        mask[n:, n:] = torch.eye(n_q, dtype=torch.bool, device=dev)          # and itself
        inp = torch.cat([x[:, clean], x.new_full((1, n_q), m)], 1)          # (1, n + n_q)
        pos = torch.tensor([clean + queries], device=dev)                   # each slot at its own column
        logits = model(inp, pos, mask)[:, n:]                               # (1, n_q, V) the queries' logits
        y, dec = decode(logits, torch.ones(1, n_q, dtype=torch.bool, device=dev), m, settings.threshold)
        for j, c in enumerate(queries):                                     # commit left to right
            if dec[0, j]:
                x[0, c], decoded_at[0, c] = y[0, j], forwards
                clean.append(c)
        forwards += 1
    return finish(x, decoded_at, torch.tensor([forwards], device=dev), forwards)


# ----------------------------------------------------------------------------- batched sampler

def prefill(model, tokens, pos, visible, cache):
    """Cache every visible token (B, C) in position order, causally: the prompt, and with [MASK]s inside it
    (infilling) the visible tokens on both sides of the gaps. Returns which cache entries are valid and
    their positions (B, K)."""
    cols = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
    idx, ok = gather_slots(visible, cols.double())                                  # (B, K)
    if idx.shape[1] > 0:                                # else no row has a visible token: nothing to cache
        causal = torch.ones(idx.shape[1], idx.shape[1], dtype=torch.bool, device=tokens.device).tril()
        model(tokens.gather(1, idx), pos.gather(1, idx), with_padding(causal, ~ok), cache, last=1)
        cache.commit(idx.shape[1])
    return ok, pos.gather(1, idx)


def window_canvas(prompt, prompt_mask, max_new_tokens: int, mask_id: int, W: int):
    """ar.canvas (B, C) plus W dead columns ([MASK], not real, never decoded), so that a window starting at
    any column stays inside the tensors. Returns tokens, real, pos (B, C + W) and C."""
    tokens, real, pos = canvas(prompt, prompt_mask, max_new_tokens, mask_id)
    C = tokens.shape[1]
    tokens = F.pad(tokens, (0, W), value=mask_id)
    real = F.pad(real, (0, W))
    pos = F.pad(pos, (0, W))
    return tokens, real, pos, C


def step_cache(model, B: int, C: int, n_masked: int, W: int, threshold):
    """A KV cache the sampler never overflows. A step commits up to new_max tokens a row (1 at threshold inf,
    else up to W), left-aligned and padded to the batch's most with dead slots. Over a generation of at most
    n_masked steps that is at most min(B, new_max) * n_masked slots (a step's width is one row's commits, and
    the rows' commits sum to at most B * n_masked). Room: the prefill (< C) + those commits + the W queries a
    step writes and drops. Each step feeds at most new_max + W tokens (static decoding)."""
    new_max = 1 if threshold == math.inf else W
    room = C + min(B, new_max) * n_masked + W
    return model.new_cache(B, room, slots=new_max + W)


def step_mask(cache_ok, new_ok, W: int):
    """Mask (B, 1, n + W, cache + n + W) of one sampler step over [cache | n new clean | W queries].

    New clean tokens: the valid cache, causally each other. Queries: the valid cache, every new clean token,
    themselves. Dead slots (padding of a short row) are attended by nobody but see themselves.
    """
    B, n = new_ok.shape
    i, j = torch.arange(n + W, device=new_ok.device)[:, None], torch.arange(n + W, device=new_ok.device)
    ok = torch.cat([cache_ok, new_ok, new_ok.new_zeros(B, W)], 1)[:, None, None]   # (B, 1, 1, cache + n + W)
    own = (i >= j) & (j < n) & ok[..., cache_ok.shape[1]:] | (i == j)              # (B, 1, n + W, n + W)
    return torch.cat([ok[..., :cache_ok.shape[1]].expand(-1, -1, n + W, -1), own], -1)


def gather_slots(chosen, key):
    """Indices of the True entries of chosen (B, K), sorted by key (B, K), left-aligned: (idx, ok) (B, n)."""
    count = chosen.sum(1, keepdim=True)                                                    # (B, 1)
    n = int(count.max())
    idx = torch.argsort(key.masked_fill(~chosen, math.inf), dim=1, stable=True)[:, :n]   # (B, n)
    return idx, torch.arange(n, device=chosen.device) < count


@torch.no_grad()
def generate(model, prompt, cfg: SetDiffusionConfig, settings: Settings, prompt_mask=None, stop=None,
             generator=None):
    """Sliding-window set decoding with a KV commit every step: generate_reference, batched and cached.

    Every visible token of the prompt, left and right of any [MASK] gaps, is cached first (prefill); then the
    gaps and the N new tokens are filled by the window. Each step is one forward over [tokens decoded last
    step (clean) | masked positions of the window]; the clean ones are committed to the cache, left to right,
    the queries' entries dropped. `stop` is checked every W steps, on the canvas up to the window's end.
    The hooks of paper mode and of the "fht" commit order call into the last section."""
    W, N = cfg.window(settings.setdiffusion_window), settings.max_new_tokens
    B, dev, paper = prompt.shape[0], prompt.device, settings.paper          # paper mode: the last section
    tokens, real, pos, C = window_canvas(prompt, prompt_mask, N, cfg.mask_id, W)   # (B, C + W)
    masked = (tokens == cfg.mask_id) & real                                    # (B, C + W) still to decode
    pick = Picker(settings, tokens, real, cfg.mask_id, prompt, prompt_mask, stop, generator)
    key = torch.arange(C + W, dtype=torch.float64, device=dev).expand(B, -1)       # (B, C + W) commit order
    if settings.setdiffusion_commit_order == "fht":  # by first-hitting time, drawn once (last section)
        key = fht_key(key, masked, W, cfg.smax / 2, generator, paper.seq_len)
    cache = step_cache(model, B, C, int(masked.sum(1).max()), W, settings.threshold)
    cache_ok, cache_pos = prefill(model, tokens, pos, real & ~masked, cache)      # (B, K) valid entries
    paper_crop = paper.official and paper.seq_len        # paper mode: the official cache crop past L
    crop = Crop(paper.seq_len, settings.setdiffusion_commit_order, cache_pos) if paper_crop else None
    decoded_at = torch.full_like(tokens, -1)            # (B, C + W) the row's forward that decoded a column
    live_forwards = torch.zeros(B, dtype=torch.long, device=dev)       # (B,) the forwards a row was live in
    forwards, done = 0, ~masked.any(1)                  # a row with nothing to decode is done at once
    # The fused commit. At the top of the loop `win` and `dec` (B, W) still hold LAST step's window and what
    # it decoded: those tokens, in commit order, are fed clean and committed by this step's forward, beside
    # this step's W [MASK] queries (dropped), so a commit costs no forward of its own. The cache plus these
    # commits is generate_reference's clean stream; the last step's decoded tokens are never fed.
    win, dec = tokens.new_zeros(B, 0), masked.new_zeros(B, 0)                      # no last step yet
    shift = torch.arange(W, device=dev)
    while not done.all():
        commit_idx, commit_ok = gather_slots(dec, key.gather(1, win))  # (B, n) in last window, commit order
        commit_cols = win.gather(1, commit_idx)                            # (B, n) their canvas columns
        win = masked.float().argmax(1, keepdim=True) + shift               # (B, W) from the leftmost [MASK]
        cand = masked.gather(1, win) & ~done[:, None]                      # (B, W) to predict; done rows none
        inp = torch.cat([tokens.gather(1, commit_cols), torch.full_like(win, cfg.mask_id)], 1)   # (B, n + W)
        inp_pos = torch.cat([pos.gather(1, commit_cols), pos.gather(1, win)], 1)                 # (B, n + W)
        if crop is None:
            mask = step_mask(cache_ok, commit_ok, W)                       # (B, 1, n + W, cache + n + W)
        else:
            cache_ok, mask = crop(cache_ok, commit_ok, cand, inp_pos)
        logits = model(inp, inp_pos, mask, cache, last=W)                  # (B, W, V)
        cache.commit(commit_cols.shape[1])                                 # keep the clean, drop the queries
        cache_ok = torch.cat([cache_ok, commit_ok], 1)
        y, dec = pick(logits, win, cand, draw=cand)    # (B, W); sampled: one draw per query
        tokens.scatter_(1, win, torch.where(dec, y, tokens.gather(1, win)))
        decoded_at.scatter_(1, win, torch.where(dec, live_forwards[:, None], decoded_at.gather(1, win)))
        masked.scatter_(1, win, masked.gather(1, win) & ~dec)
        if paper.official:                          # paper mode: the official's infilling penalty context
            official_context(pick, win, dec)
        live_forwards += cand.any(1)
        forwards += 1
        done |= pick.stopped | ~masked.any(1)
        # every W steps (paper mode: not after the last [MASK], where the official loop has ended)
        check = forwards > 1 and (forwards - 1) % W == 0 and (not paper.official or masked.any())
        if pick.stop is not None and check:
            left = torch.where(masked.any(1), masked.float().argmax(1), C)   # (B,) a finished row: its end
            done |= pick.stop(tokens[:, :C], (left + W).clamp(max=C))       # the window's end, in the canvas
    return finish(tokens[:, :C], decoded_at[:, :C], live_forwards, forwards)


# ----------------------------------------------------------------------------- beyond the paper: --infill

# Staggered orders never show a query a clean token more than about smax positions to its right, so a model
# trained on them alone cannot read a far right context when it fills a gap (make infill: the right-determined
# span sits at chance). train.py --infill FRAC gives that fraction of the rows an *infilling* order: one
# random span is revealed after every other token (order's `span`: its T shifted below every other target's),
# so its queries see the whole visible context on both sides, as the sampler's prefill gives them when
# infilling. --infill 0 draws nothing here, so the loss is the paper's draw for draw. Neither the paper nor
# the official code has this.


SPAN_LENGTHS = ("uniform", "loguniform")   # infill_len: how a span's length n in {1, ..., m} is drawn


def infill_span(pad_mask, fraction: float, generator=None, lengths: str = "uniform"):
    """A fraction of the rows each get one random span, (B, L) bool: length n in {1, ..., m}, with
    m = max(1, R // 4) over a row's R real tokens, start uniform with at least one real token after the span.
    A span over the prompt makes those prompt tokens targets. lengths "uniform": P(n) = 1/m; "loguniform":
    n = floor((m + 1)^u), so P(n) = log((n + 1)/n) / log(m + 1) ~ 1/n: every scale of gap (a digit, a word, a
    clause) gets an equal share of the rows, where uniform spends most of them on long spans."""
    B, L = pad_mask.shape
    u = torch.rand(B, 3, generator=generator, device=pad_mask.device)             # (B, 3)
    real = (~pad_mask).sum(1)  # (B,) real tokens (a prefix)
    m = (real // 4).clamp(min=1)                                                   # (B,) longest span
    if lengths == "uniform":
        n = 1 + (u[:, 1] * m).long()                                               # (B,) span length
    else:
        n = torch.minimum((m + 1.0).pow(u[:, 1]).long(), m).clamp(min=1)   # (B,) in [1, m] despite rounding
    start = (u[:, 2] * (real - n).clamp(min=1)).long()     # (B,) its first position; 0 if it fills the row
    j = torch.arange(L, device=pad_mask.device)
    inside = (j >= start[:, None]) & (j < (start + n)[:, None])                    # (B, L)
    return (u[:, :1] < fraction) & inside & ~pad_mask


def added_rows(x0, prompt_mask, pad_mask, span):
    """cfg.infill_added: the rows drawn for infilling are trained twice, once in their paper order and once
    more, appended, in their infilling order: every row keeps the paper's signal and the infilling one comes
    on top (at the cost of that many more rows per step). Returns the (B + k, L) batch and its spans."""
    rows = span.any(1)                                                             # (B,) the k drawn rows
    cat = lambda a: torch.cat([a, a[rows]])                                        # noqa: E731 (B + k, L)
    return cat(x0), cat(prompt_mask), cat(pad_mask), torch.cat([torch.zeros_like(span), span[rows]])


# ----------------------------------------------------------------------------- reproduction only

# What the paper's reproduction needs to know of Set Diffusion, as data.
HF_GENERATE = False   # the official runs decode it with its own set sampler
# the official eval does not count pad-id targets (EOS) nor position 0 (nll's exclude)
OFFICIAL_EXCLUDES = True


def fht_key(key, masked, W: int, d: float, generator=None, seq_len: int | None = None):
    """Commit order "fht", the official accuracy runs' (setdlm_fht_cache_order): the commit key
    (B, C) of generate (the columns: left to right) with each masked (target) column's key minus its
    first-hitting time, drawn once per generation (fht_times), so that a step's tokens are committed by
    decreasing T, as training's clean stream lists a set. ("l2r", the default, is the official sampler's
    own default: deterministic, no draw, and what generate_reference states.)"""
    N = int(masked.sum(1).max())
    if N < 2:                   # one target or none: a single order, and no draw from the generator
        return key
    T = fht_times(masked.shape[0], N, W, d, generator, masked.device, seq_len)   # (B, N)
    slot = (masked.cumsum(1) - 1).clamp(min=0, max=N - 1)    # (B, C) a column's target slot (read at targets)
    return torch.where(masked, -T.gather(1, slot), key)


def fht_times(batch_size: int, N: int, W: int, d: float, generator=None, device=None,
              seq_len: int | None = None):
    """First-hitting times (B, N) of the FHT commit order: the official draws them for its N target slots
    from a schedule of their own, the last N entries of a staggered schedule over the model's L = seq_len
    positions with reach 2W (its smax) and the model's d (A = d / 2L): not training's schedule, whose d is
    smax / 2, unless the window is the paper's W = d. The schedule spans max(L, N) positions (the official
    needs N <= L); seq_len None: L = N, over the target slots alone. d is clipped to that smax, and d in {1,
    smax} takes the official schedule's other branch, k = 1 and b = 2A: a window of at most d / 2 reaches it,
    whose supports are wider than smax positions, so its orders reach past smax - 1 (measured over 20,000
    orders: 8 at L 128, smax 8; 18 at L 128, smax 16)."""
    L = max(seq_len or N, N)
    smax = min(2 * W, L)
    loc, b, k = official_schedule(L, min(d, smax), smax, device)
    E = torch.empty(batch_size, N, dtype=torch.float64, device=device).exponential_(generator=generator)
    return loc[L - N:] + b * (-torch.expm1(-E / k))                                # (B, N) the last N


def official_schedule(L: int, d: float, smax: float, device=None):
    """The official staggered schedule (StaggeredNoise.init_schedule) over L positions, with its own d
    (desired_block_size) and smax (max_block_size): A = d / 2L, b = smax / (L + smax - 1), k = A / (b - A),
    except at d in {1, smax}, its other branch: k = 1, b = 2A. At smax = 2d it is the paper's `schedule`.
    loc (L,) float64, b, k."""
    A = d / (2 * L)                                          # the area, over L positions
    if d in (1, smax):                                       # the official schedule's branch: a linear curve
        b, k = 2 * A, 1.0
    else:                                                    # d < smax <= L (both callers): A < b, k > 0
        b = smax / (L + smax - 1)
        k = A / (b - A)
    j = torch.arange(L, dtype=torch.float64, device=device)
    return (1 - b) * (1 - j / max(L - 1, 1)), b, k                                 # (L,), b, k


# The likelihood of the official suite runner's OWT rows (eval.py --task likelihood --data owt --recipe suite,
# data/owt.py RECIPES). Its Set Diffusion targets pass the likelihood script MAX_BLOCK_SIZE = d, where the
# script alone (and the paper's schedule, and LM1B's runs) take 2d: max_block_size = d is the schedule's other
# branch, k = 1 and b = 2A = d / L, whose supports overlap within d (L - 1) / (L - d) positions, about d
# rather than smax = 2d: orders nearer left to right than the ones the model was trained on. No smax of the
# paper's schedule gives it (its d is smax / 2), so nll takes it here, as a drawn order (target_nll's sigma).

def suite_nll(model, x0, cfg: SetDiffusionConfig, prompt_mask=None, pad_mask=None, generator=None,
              exclude=None):
    """nll (the same arguments and result) with sigma drawn from the suite runner's schedule (suite_order)."""
    prompt_mask, pad_mask, _ = defaults(x0, prompt_mask, pad_mask)
    sigma = suite_order(x0, cfg.smax / 2, prompt_mask, pad_mask, generator)      # (B, L)
    nll_i, target_s = target_nll(model, x0, cfg, prompt_mask, pad_mask, generator, exclude, sigma=sigma)
    return nll_i.sum(1), target_s.sum(1)


SUITE_NLL = suite_nll   # what eval.py --recipe suite scores OWT with (the other methods: None)


def suite_order(x0, d: float, prompt_mask, pad_mask, generator=None):
    """order (sigma (B, L): the prompt first, targets by decreasing T, padding last) with T drawn from the
    official schedule at max_block_size = d (official_schedule(L, d, d): k = 1, b = d / L), as the official
    draws it (compute_first_hitting_times over the row's L positions)."""
    B, L = x0.shape
    loc, b, k = official_schedule(L, d, d, x0.device)
    E = torch.empty(B, L, dtype=torch.float64, device=x0.device).exponential_(generator=generator)
    T = loc + b * (-torch.expm1(-E / k))                                           # (B, L)
    T = T.masked_fill(prompt_mask, math.inf).masked_fill(pad_mask, -math.inf)
    return torch.argsort(T, dim=1, descending=True, stable=True)


def official_context(pick, win, dec):
    """Paper mode, infilling with a repetition penalty without penalize_context (sampling.infill_context):
    the official penalises the tokens of its KV cache when a step starts (running_generation = the cached
    columns): the visible prompt, pad ids included, and the tokens committed by earlier steps. A token
    decoded at step i is committed by the forward of step i + 1, after that step has read its context, so
    it counts from step i + 2. Called once a step's tokens are written: win, dec (B, W) its window and what
    it decoded."""
    track = pick.track
    if track is None or track.context is None:
        return
    decoded = track.gen & (track.tokens != track.mask_id)                   # (B, C + W) this step's too
    decoded.scatter_(1, win, decoded.gather(1, win) & ~dec)                 # ... but for this step's
    track.context = track.visible | decoded


class Crop:
    """The official KV cache past the model's context L (generate in paper mode with seq_len L):
    before a step whose inputs (the tokens it commits and its window's [MASK] queries) would take
    the cache past L, the official drops entries: the oldest (commit order "l2r"), or those of the smallest
    positions ("fht": its position ledger). After its first "fht" crop, the official builds that row's mask
    from positions instead (_semantic_attention_base): an input at position q sees the keys at positions k
    with k <= q when both are < L, k < q - L when only q >= L, none of its own stream otherwise, and the
    queries see only themselves among queries; a committed input then also sees the [MASK] queries left of
    it. crop(cache_ok, commit_ok, cand, inp_pos) -> cache_ok, mask (step_mask's layout); it keeps the cache
    entries' positions itself (the prefill's, then each step's committed inputs')."""

    def __init__(self, L, commit_order: str, cache_pos):
        self.L, self.fht, self.pos = L, commit_order == "fht", cache_pos                 # pos (B, K)
        self.semantic = torch.zeros(cache_pos.shape[0], 1, 1, 1, dtype=torch.bool,
                                    device=cache_pos.device)                       # rows cropped by position

    def __call__(self, cache_ok, commit_ok, cand, inp_pos):
        cache_pos = self.pos
        drop = (cache_ok.sum(1) + commit_ok.sum(1) + cand.sum(1) - self.L).clamp(min=0)    # (B,)
        # the order entries go in: by position ("fht") or by storage, the oldest first; invalid ones last
        key = cache_pos if self.fht else torch.arange(cache_ok.shape[1], device=cache_ok.device).expand(
            cache_ok.shape)
        rank = key.masked_fill(~cache_ok, torch.iinfo(key.dtype).max).argsort(dim=1, stable=True).argsort(1)
        cache_ok = cache_ok & (rank >= drop[:, None])                              # (B, K) what is left
        mask = step_mask(cache_ok, commit_ok, cand.shape[1])
        if self.fht:
            self.semantic |= (drop > 0)[:, None, None, None]
            mask = torch.where(self.semantic, self.by_position(cache_ok, cache_pos, commit_ok, cand, inp_pos),
                               mask)
        self.pos = torch.cat([cache_pos, inp_pos[:, :commit_ok.shape[1]]], 1)    # with the inputs committed
        return cache_ok, mask

    def by_position(self, cache_ok, cache_pos, commit_ok, cand, inp_pos):
        """The official mask after an "fht" crop (B, 1, n + W, K + n + W): its static two-stream rule read at
        positions (stream = position >= L, index = position mod L) instead of storage indices."""
        L, n, W = self.L, commit_ok.shape[1], cand.shape[1]
        kp, qp = torch.cat([cache_pos, inp_pos], 1)[:, None, :], inp_pos[:, :, None]   # (B, 1, K'), (B, T, 1)
        xk, xq, k, q = kp >= L, qp >= L, kp % L, qp % L
        rule = ((q == k) & (xq == xk)) | (xq & ~xk & (q > k)) | (~xq & ~xk & (q >= k))   # (B, T, K')
        ok = torch.cat([cache_ok, commit_ok, cand], 1)[:, None, :] & rule
        K = cache_ok.shape[1]
        ok[:, n:, K + n:] = torch.eye(W, dtype=torch.bool, device=ok.device)          # queries: themselves
        i = torch.arange(n + W, device=ok.device)
        ok[:, i, K + i] = True                                                          # every input: itself
        return ok[:, None]
