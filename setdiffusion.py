"""Set Diffusion (Arriola & Kuleshov, ICML 2026): decode *sets* of tokens, in a near-left-to-right order.

Idea. A sequence is generated as a series of position sets: each step predicts the tokens of a set given
everything revealed so far, then commits them to the KV cache as clean tokens. The order in which positions
are revealed comes from a *staggered* masking schedule: position j has its own schedule, shifted so that
earlier positions clear first. Its first-hitting times T_j give an order that is left to right up to local
shuffles of reach smax: a token is never revealed before a token more than smax - 1 positions to its left.
In training this is an any-order autoregressive model over orders drawn from that distribution:

    L = E_sigma [ 1/|targets| * sum_{j in targets} -log p_theta(x_sigma(j) | x_sigma(<j)) ]

computed in one forward over a 2L two-stream layout [x0 in sigma order | [MASK] in sigma order], positions
[sigma | sigma], where the [MASK] copy of rank j sees the clean tokens of rank < j and itself only.
Sampling: a window of W positions from the leftmost still-masked one; every step predicts all masked
positions in the window at once, decodes the confident ones (the MDLM rule) and commits them. Read
generate_reference first: that loop in ~20 lines (batch 1, no cache, one full forward per step); generate is
the same sampler batched, with a KV cache and the commit fused into the next step's forward (tested equal).

Schedule (paper §3; smax = max set size = 2d, where d/2 is the expected number of [MASK]s in the active window):
    b = smax / (L + smax - 1),  A = d / (2L),  k = A / (b - A)   (k = 1, b = 2A when d in {1, smax})
    loc_j = (1 - b)(1 - j / (L - 1)),  T_j = loc_j + b (1 - exp(-E_j / k)),  E_j ~ Exp(1)
    sigma = argsort(T, descending, stable): prompt first (T = +inf), padding last (T = -inf)

Limits: smax = 2 (d = 1) gives the identity order, so the model is AR (tested). Were every position to share
one schedule (no stagger), all orders would be equally likely: MDLM's order-agnostic limit. Fixed contiguous
sets whose members attend to each other: BD3-LM.
Differences from the official code: the sampler runs a batch (each row its own window; the official asserts
batch size 1); the KV cache never overflows (it is sized for prompt + new tokens, so there is no left crop).
With commit_order="fht" a batch draws T over the longest row's N target slots, the last N entries of the
schedule over the model's seq_len positions as the official (over N positions when N > L, where the official
has no schedule, or when no seq_len is given).
Beyond the paper (off by default): cfg.infill = F trains a fraction F of rows in an *infilling* order, one
random span revealed after every other token (infill_span). Staggered orders never show a query a clean token
more than smax - 1 positions to its right, so a zero-shot model cannot read a far right context when it fills
a gap; these rows teach it to. F = 0 is the paper's loss, draw for draw (tests/test_fidelity.py).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import sampling
from ar import canvas, defaults, finish
from mdlm import decode
from model import padded, with_padding


@dataclass
class SetDiffusionConfig:
    mask_id: int    # the [MASK] token of the query stream
    smax: int = 8   # max set size / reorder reach, = 2d; the window defaults to smax // 2 = d
    infill: float = 0.0   # NOT the paper: the fraction of training rows given an infilling order (infill_span)


# ----------------------------------------------------------------------------- ordering

def schedule(seq_len: int, smax: int, d: float | None = None):
    """Staggered schedule constants: loc (L,) float64, b, k. d defaults to smax / 2 (the paper's models)."""
    if not 2 <= smax <= seq_len:
        raise ValueError(f"smax must be in [2, seq_len={seq_len}], got {smax}")
    d = smax / 2 if d is None else d
    A = d / (2 * seq_len)                                            # desired area per position
    if d in (1, smax):
        b, k = 2 * A, 1.0
    else:
        b = smax / (seq_len + smax - 1)
        if b <= A:
            raise ValueError(f"no staggered schedule with smax={smax} and d={d} over {seq_len} positions")
        k = A / (b - A)
    loc = (1 - b) * (1 - torch.arange(seq_len, dtype=torch.float64) / max(seq_len - 1, 1))   # (L,)
    return loc, b, k


def first_hitting_times(batch_size: int, seq_len: int, smax: int, generator=None, device=None, d=None,
                        last: int | None = None):
    """T_j = loc_j + b (1 - exp(-E_j / k)): the time position j is masked, going forward. (B, L) float64.
    P(T_j <= t) = 1 - (1 - clip((t - loc_j) / b, 0, 1))^k, the schedule's masking probability move_j(t).
    last: only the last `last` positions of the L-long schedule, (B, last), E drawn for those alone (the
    official compute_first_hitting_times)."""
    loc, b, k = schedule(seq_len, smax, d)
    n = seq_len if last is None else last
    E = torch.empty(batch_size, n, dtype=torch.float64, device=device).exponential_(generator=generator)
    return loc[seq_len - n:].to(E.device) + b * (-torch.expm1(-E / k))          # (B, n)


def sample_order(batch_size: int, seq_len: int, smax: int, generator=None, device=None):
    """Generation orders (B, L): row b lists the positions in the order they are revealed (no prompt)."""
    T = first_hitting_times(batch_size, seq_len, smax, generator, device)
    return torch.argsort(T, dim=1, descending=True, stable=True)


def order(x0, smax: int, prompt_mask, pad_mask, generator=None, span=None):
    """sigma (B, L): the prompt first in its own order, targets by decreasing T, padding last. span (B, L), an
    infilling order: those targets after every other target (T - 1 < 0 <= T of the rest), by decreasing T."""
    B, L = x0.shape
    T = first_hitting_times(B, L, smax, generator, x0.device)
    T = T if span is None else torch.where(span, T - 1, T)
    T = T.masked_fill(prompt_mask, math.inf).masked_fill(pad_mask, -math.inf)
    return torch.argsort(T, dim=1, descending=True, stable=True)


def infill_span(pad_mask, fraction: float, generator=None):
    """Beyond the paper (train.py --infill): a fraction of the rows each get one random span, (B, L) bool, that
    `order` reveals after every other token, so the model learns to fill a gap from a visible RIGHT context
    of any distance, as the sampler infills (staggered orders alone never show a query a clean token more
    than smax - 1 positions to its right). Span length n ~ U{1, ..., max(1, R // 4)} over a row's R real
    tokens, start uniform with at least one real token after the span; span tokens of the prompt become
    targets. Neither the paper nor the official code has this."""
    B, L = pad_mask.shape
    u = torch.rand(B, 3, generator=generator, device=pad_mask.device)             # (B, 3)
    real = (~pad_mask).sum(1)                                                      # (B,) real tokens (a prefix)
    n = 1 + (u[:, 1] * (real // 4).clamp(min=1)).long()                            # (B,) span length
    start = (u[:, 2] * (real - n).clamp(min=1)).long()                             # (B,) its first position
    j = torch.arange(L, device=pad_mask.device)
    inside = (j >= start[:, None]) & (j < (start + n)[:, None])                    # (B, L)
    return (u[:, :1] < fraction) & inside & ~pad_mask


# ----------------------------------------------------------------------------- mask

def attention_mask(seq_len: int, device=None, first: int = 0, end: int | None = None) -> torch.Tensor:
    """(2L, 2L) bool in rank space: 0..L-1 clean stream in sigma order, L..2L-1 [MASK] stream in sigma order.
    With first/end: only clean ranks < end and [MASK] ranks in [first, end), the rows a loss needs (the
    others are prompt or padding, and nobody else attends to them): (2 end - first) x (2 end - first)."""
    end = seq_len if end is None else end
    slot = torch.arange(2 * end - first, device=device)
    return mask_mod(first, end)(0, 0, slot[:, None], slot[None, :])


def mask_mod(first: int, end: int):
    """attention_mask as a FlexAttention mask_mod over slots: (b, h, q_idx, kv_idx) -> may q attend to kv.
    Slots 0..end-1 are clean ranks 0..end-1, slots end.. the [MASK] ranks first..end-1."""
    def mod(b, h, q, k):
        xt_q, xt_k = q >= end, k >= end                                  # stream of each slot
        rank_q, rank_k = torch.where(xt_q, q - end + first, q), torch.where(xt_k, k - end + first, k)
        causal = ~xt_q & ~xt_k & (rank_q >= rank_k)                      # clean -> clean, earlier or same rank
        offset_causal = xt_q & ~xt_k & (rank_q > rank_k)                 # [MASK] query -> strictly earlier clean
        diagonal = (rank_q == rank_k) & (xt_q == xt_k)                   # each slot sees itself
        return causal | offset_causal | diagonal
    return mod


# ----------------------------------------------------------------------------- loss

def denoise(model, x0, sigma, target, cfg: SetDiffusionConfig, pad_mask, first=0, end=None):
    """One forward of the two-stream layout. Returns logits (B, end - first, V) of the [MASK] stream for the
    ranks [first, end) in sigma order (default all L); clean ranks from `end` on are left out."""
    B, L = x0.shape
    end = L if end is None else end
    x0_s = x0.gather(1, sigma)                                                   # (B, L) clean, sigma order
    xt_s = torch.where(target.gather(1, sigma), cfg.mask_id, x0_s)[:, first:end] # (B, end - first) targets -> [MASK]
    pos = torch.cat([sigma[:, :end], sigma[:, first:end]], 1)                    # (B, 2 end - first) positions
    pad_s = pad_mask.gather(1, sigma)                                            # (B, L) padding, sigma order
    pad_2 = torch.cat([pad_s[:, :end], pad_s[:, first:end]], 1)                 # (B, 2 end - first) of each slot
    mask = padded(mask_mod(first, end), pad_2)                                  # a mask_mod over those slots
    return model(torch.cat([x0_s[:, :end], xt_s], 1), pos, mask, last=end - first)   # (B, end - first, V)


def target_nll(model, x0, cfg, prompt_mask, pad_mask, generator, exclude=None, infill=0.0):
    """-log p of every target under one sampled order: nll (B, n) (0 off counted targets) and the counted
    targets (B, n), both in sigma order over the ranks that hold a target in some row (the prompt comes first
    and padding last, so the forward skips the prompt's [MASK] copies and the padding's clean tokens).
    `exclude` (B, L): targets kept in the order but not counted. infill > 0: that fraction of rows in an
    infilling order (infill_span; training only), its span's prompt tokens made targets."""
    prompt_mask, pad_mask, _ = defaults(x0, prompt_mask, pad_mask)
    span = infill_span(pad_mask, infill, generator) if infill > 0 else None       # (B, L) or None
    prompt_mask = prompt_mask if span is None else prompt_mask & ~span
    target = ~(prompt_mask | pad_mask)
    sigma = order(x0, cfg.smax, prompt_mask, pad_mask, generator, span)          # (B, L)
    n_prompt, n_target = prompt_mask.sum(1), target.sum(1)                       # (B,)
    first, end = int(n_prompt.min()), max(int((n_prompt + n_target).max()), 1)   # ranks holding targets
    first = min(first, end - 1)
    logits = denoise(model, x0, sigma, target, cfg, pad_mask, first, end).float()
    logits[..., cfg.mask_id] = float("-inf")                                     # never predict [MASK]
    counted = target if exclude is None else target & ~exclude
    target_s = counted.gather(1, sigma)[:, first:end]                            # (B, n)
    nll_i = F.cross_entropy(logits.transpose(1, 2), x0.gather(1, sigma)[:, first:end], reduction="none")
    return nll_i * target_s, target_s


def nll(model, x0, cfg: SetDiffusionConfig, prompt_mask=None, pad_mask=None, generator=None, n_orders=1,
        exclude=None):
    """-log p(x0 | sigma) averaged over n_orders sampled orders: (sum over counted targets (B,), count (B,)).
    One order (the official eval) is a single-sample estimate; the exact likelihood sums over orders.
    exclude (B, L): targets not counted (the official eval drops pad-id targets, e.g. EOS, and position 0
    with keep_clean_bos); they still take their place in the order."""
    total = 0.0
    for _ in range(n_orders):
        nll_i, target_s = target_nll(model, x0, cfg, prompt_mask, pad_mask, generator, exclude)
        total = total + nll_i.sum(1) / n_orders
    return total, target_s.sum(1)


def loss(model, x0, cfg: SetDiffusionConfig, prompt_mask=None, pad_mask=None, generator=None):
    """Any-order AR cross-entropy over one staggered order: mean over each sequence's targets, then batch.
    cfg.infill > 0 (not the paper): that fraction of rows in an infilling order instead (infill_span)."""
    nll_i, target_s = target_nll(model, x0, cfg, prompt_mask, pad_mask, generator, infill=cfg.infill)
    per_seq = nll_i.sum(1) / target_s.sum(1).clamp(min=1)
    return per_seq.mean(), {"tokens": int(target_s.sum())}


# ----------------------------------------------------------------------------- generate

@torch.no_grad()
def generate_reference(model, prompt, cfg: SetDiffusionConfig, max_new_tokens=64, threshold=math.inf,
                       window=None):
    """The sampler as the paper states it, to read first: batch size 1, greedy, no KV cache, commit order l2r.

    The canvas is [prompt | N [MASK]]; [MASK]s inside the prompt are infilled too. Each step recomputes one
    forward over [the clean tokens in commit order | one [MASK] query per masked column of the window]: the
    clean stream is causal in commit order (the visible prompt first, in position order), each query sees
    every clean token and itself. The window is the W columns from the leftmost [MASK]. The confidence rule
    (mdlm.decode) picks the tokens to decode, and they are committed left to right. `generate` is this loop
    with a KV cache, a batch and options; test_all.py checks them equal token for token and step for step.
    """
    W, m = window or cfg.smax // 2, cfg.mask_id
    x = torch.cat([prompt, prompt.new_full((1, max_new_tokens), m)], 1)       # (1, C) the canvas
    C, dev = x.shape[1], x.device
    clean = [c for c in range(C) if x[0, c] != m]                           # committed columns, in commit order
    step, nfe = torch.full_like(x, -1), 0
    while (x == m).any():
        left = int((x[0] == m).nonzero()[0])                                # the window: W columns from here
        queries = [c for c in range(left, min(left + W, C)) if x[0, c] == m]
        n, k = len(clean), len(queries)
        mask = torch.zeros(n + k, n + k, dtype=torch.bool, device=dev)
        mask[:n, :n] = torch.ones(n, n, dtype=torch.bool, device=dev).tril()   # clean: causal in commit order
        mask[n:, :n] = True                                                  # a query sees every clean token
        mask[n:, n:] = torch.eye(k, dtype=torch.bool, device=dev)            # and itself
        inp = torch.cat([x[:, clean], x.new_full((1, k), m)], 1)            # (1, n + k)
        pos = torch.tensor([clean + queries], device=dev)                   # each slot at its own column
        logits = model(inp, pos, mask)[:, n:]                               # (1, k, V) the queries' logits
        y, dec = decode(logits, torch.ones(1, k, dtype=torch.bool, device=dev), m, threshold)   # (1, k)
        for j, c in enumerate(queries):                                     # commit left to right
            if dec[0, j]:
                x[0, c], step[0, c] = y[0, j], nfe
                clean.append(c)
        nfe += 1
    return finish(x, step, torch.tensor([nfe], device=dev), nfe)


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
    n_masked steps that is at most min(B, new_max) * n_masked slots. Room: the prefill (< C) + those commits
    + the W queries a step writes and drops. Each step feeds at most new_max + W tokens (static decoding)."""
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


def commit_key(masked, W: int, d: float, commit_order: str, generator=None, seq_len: int | None = None):
    """Sort key (B, C) of the canvas columns: a step commits its decoded tokens by increasing key.

    "l2r": the column itself. "fht": minus the first-hitting times of the N masked (target) slots, drawn
    once per generation as the official accuracy runs do (setdlm_fht_cache_order): the last N entries of the
    staggered schedule over the model's L = seq_len positions (A = d / 2L), with max 2W and the model's d, so
    tokens are committed by decreasing T. The schedule spans max(L, N) positions (the official needs N <= L);
    seq_len None: L = N, a schedule over the target slots alone."""
    B, C = masked.shape
    key = torch.arange(C, device=masked.device, dtype=torch.float64).expand(B, C)
    N = int(masked.sum(1).max())
    if commit_order == "l2r" or N < 2:
        return key
    L = max(seq_len or N, N)
    smax = min(2 * W, L)
    T = first_hitting_times(B, L, smax, generator, masked.device, d=min(d, smax), last=N)   # (B, N)
    slot = (masked.cumsum(1) - 1).clamp(min=0)                                     # (B, C) slot of a column
    return torch.where(masked, -T.gather(1, slot.clamp(max=N - 1)), key)


def gather_slots(chosen, key):
    """Indices of the True entries of chosen (B, K), sorted by key (B, K), left-aligned: (idx, ok) (B, n)."""
    n = int(chosen.sum(1).max())
    idx = torch.argsort(key.masked_fill(~chosen, math.inf), dim=1, stable=True)[:, :n]   # (B, n)
    return idx, torch.arange(n, device=chosen.device) < chosen.sum(1, keepdim=True)


@torch.no_grad()
def generate(model, prompt, cfg: SetDiffusionConfig, prompt_mask=None, max_new_tokens=64, threshold=math.inf,
             temperature=0.0, generator=None, stop=None, window=None, commit_order="l2r", options=None,
             seq_len=None):
    """Sliding-window set decoding with a KV commit every step: generate_reference, batched and cached.

    The prompt may hold [MASK] anywhere (infilling): every visible token, left and right of the gaps, is
    cached first (causally, in position order), then the gaps and the N new tokens are filled by the window.
    Each step is one forward over [tokens decoded last step (clean) | masked positions of the window]; the
    clean ones are committed to the cache, the queries' entries dropped. commit_order "l2r" commits a step's
    tokens left to right, "fht" by decreasing first-hitting time (the training order distribution), T the
    last N entries of the schedule over the model's context length seq_len (commit_key; None: over N).
    `stop` is checked every W steps on the canvas up to the window's end. options: a sampling.SamplerOptions.
    """
    W = window or cfg.smax // 2
    if not 1 <= W <= cfg.smax:
        raise ValueError(f"window must be in [1, smax={cfg.smax}], got {W}")
    if commit_order not in ("l2r", "fht"):
        raise ValueError(f"commit_order must be 'l2r' or 'fht', got {commit_order!r}")
    B, dev = prompt.shape[0], prompt.device
    tokens, real, pos, C = window_canvas(prompt, prompt_mask, max_new_tokens, cfg.mask_id, W)   # (B, C + W)
    masked = (tokens == cfg.mask_id) & real                                         # (B, C + W) still to decode
    track = sampling.start(options, tokens, real, cfg.mask_id, temperature)
    stop = sampling.entropy_stop(stop, track, prompt, prompt_mask, cfg.mask_id, max_new_tokens)
    key = commit_key(masked, W, cfg.smax / 2, commit_order, generator, seq_len)     # (B, C + W) commit order
    cache = step_cache(model, B, C, int(masked.sum(1).max()), W, threshold)
    cache_ok = prefill(model, tokens, pos, real & ~masked, cache)                   # (B, cached) valid entries

    step = torch.full_like(tokens, -1)
    steps = torch.zeros(B, dtype=torch.long, device=dev)
    done = ~masked.any(1)
    # The fused commit. Each forward = [the tokens decoded last step -> committed to the cache | this step's
    # W [MASK] queries -> dropped], so committing costs no forward of its own. At the top of the loop `win`
    # and `dec` (B, W) still hold LAST step's window and what it decoded: the commit set is gathered from
    # them before `win` moves to this step's window. The cache plus these commits is generate_reference's
    # clean stream; the last step's decoded tokens are never fed (nothing follows them).
    win, dec = tokens.new_zeros(B, 0), masked.new_zeros(B, 0)                       # no last step yet
    nfe, shift = 0, torch.arange(W, device=dev)
    while not done.all():
        commit_idx, commit_ok = gather_slots(dec, key.gather(1, win))       # (B, n) in last window, commit order
        commit_cols = win.gather(1, commit_idx)                             # (B, n) their canvas columns
        win = masked.float().argmax(1, keepdim=True) + shift                # (B, W) from the leftmost [MASK]
        cand = masked.gather(1, win) & ~done[:, None]                       # (B, W) to predict
        inp = torch.cat([tokens.gather(1, commit_cols), torch.full_like(win, cfg.mask_id)], 1)   # (B, n + W)
        inp_pos = torch.cat([pos.gather(1, commit_cols), pos.gather(1, win)], 1)
        logits = model(inp, inp_pos, step_mask(cache_ok, commit_ok, W), cache, last=W)    # (B, W, V)
        cache.commit(commit_cols.shape[1])                                  # keep the clean, drop the queries
        cache_ok = torch.cat([cache_ok, commit_ok], 1)
        sampling.at(track, tokens, win)
        y, dec = decode(logits, cand, cfg.mask_id, threshold, temperature, generator, track)  # (B, W)
        done = sampling.stopped(track, done)
        tokens.scatter_(1, win, torch.where(dec, y, tokens.gather(1, win)))
        step.scatter_(1, win, torch.where(dec, steps[:, None], step.gather(1, win)))   # the row's own step
        masked.scatter_(1, win, masked.gather(1, win) & ~dec)
        steps += cand.any(1)
        nfe += 1
        done |= ~masked.any(1)
        if stop is not None and nfe > 1 and (nfe - 1) % W == 0:                    # every W steps, as official
            left = torch.where(masked.any(1), masked.float().argmax(1), C)
            done |= stop(tokens[:, :C], (left + W).clamp(max=C))
    return finish(tokens[:, :C], step[:, :C], steps, nfe)


def prefill(model, tokens, pos, visible, cache):
    """Cache every visible token (B, C) in position order, causally. Returns which cache entries are valid
    (B, K)."""
    cols = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
    idx, ok = gather_slots(visible, cols.double())                                  # (B, K)
    if idx.shape[1] > 0:
        causal = torch.ones(idx.shape[1], idx.shape[1], dtype=torch.bool, device=tokens.device).tril()
        model(tokens.gather(1, idx), pos.gather(1, idx), with_padding(causal, ~ok), cache, last=1)
        cache.commit(idx.shape[1])
    return ok
