"""Evaluation as the paper's: unbiased estimators, orders from the schedule's formulas, the decode rule,
commit orders and stopping; paper mode (official) == plain transcriptions of the official code's rules."""
import contextlib
import dataclasses
import inspect
import math
import sys

import pytest
import torch

import ar
import bd3lm
import sampling
from sampling import PaperMode, SamplerOptions, Settings, at, confident, decode, process, start
from common import metrics, unconditional
import mdlm
import setdiffusion as sd
from data import byte_tokenizer, gsm8k
from model import KVCache
from helpers import MASK, METHODS, V, Jitter, causal, left_padded, random_rows, sample_order, tiny_model


def position_only(table):
    """logits = table[pos] whatever the context: its NELBO is exactly sum_i -log p_i (P(masked_i) = t)."""
    def forward(idx, pos=None, mask=None, cache=None, last=None):
        out = table[torch.arange(idx.shape[1]).expand(idx.shape) if pos is None else pos]     # (B, T, V)
        return out if last is None else out[:, -last:]
    return forward


@pytest.mark.parametrize("name", ["mdlm", "bd3lm"])
def test_nelbo_estimator_is_unbiased(name):
    """The mean of nll() over many draws is the exact value (q exactly, no forced masks)."""
    L, B = 12, 30000
    g = torch.Generator().manual_seed(0)
    table = torch.randn(L, V, generator=g) * 2
    x0 = torch.randint(0, MASK, (1, L), generator=g).expand(B, L)
    prompt_mask = (torch.arange(L) < 2).expand(B, L)                         # block 0 holds the prompt,
    pad_mask = (torch.arange(L) >= L - 1).expand(B, L)                      # block 2 padding, block 1 targets
    target = ~(prompt_mask | pad_mask)[0]
    logp = table.clone()
    logp[:, MASK] = -math.inf
    exact = -(logp.log_softmax(-1).gather(1, x0[0, :, None]).squeeze(1) * target).sum()
    cfg = mdlm.MDLMConfig(MASK) if name == "mdlm" else bd3lm.BD3LMConfig(MASK, 4)
    nll, n = {"mdlm": mdlm, "bd3lm": bd3lm}[name].nll(position_only(table), x0, cfg, prompt_mask, pad_mask,
                                                      generator=torch.Generator().manual_seed(1))
    assert (n == target.sum()).all()
    se = nll.std() / math.sqrt(B)
    assert abs(nll.mean() - exact) < 4 * se, (nll.mean().item(), exact.item(), se.item())


def naive_order_nll(model, x0, sigma, target):
    """Each target's NLL, one forward per target over [its clean predecessors in sigma order | its query]."""
    nll = torch.zeros(x0.shape[0])
    for b in range(x0.shape[0]):
        for r in range(x0.shape[1]):
            q = int(sigma[b, r])
            if not target[b, q]:
                continue
            clean = sigma[b, :r].tolist()
            mk = torch.zeros(r + 1, r + 1, dtype=torch.bool)
            mk[:r, :r], mk[r, :] = causal(r), True
            logits = model(torch.tensor([[int(x0[b, c]) for c in clean] + [MASK]]),
                           torch.tensor([clean + [q]]), mk)
            logits[..., MASK] = -math.inf
            nll[b] -= logits[0, -1].log_softmax(-1)[x0[b, q]]
    return nll


def test_setdiffusion_loss_equals_one_forward_per_target():
    model, L, smax = tiny_model(11), 10, 4
    x0, prompt_mask, pad_mask = random_rows(L, [2, 3], [L, L - 2])
    cfg = sd.SetDiffusionConfig(MASK, smax)
    sigma = sd.order(x0, smax, prompt_mask, pad_mask, torch.Generator().manual_seed(5))
    nll, n = sd.nll(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(5))
    loss = sd.loss(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(5))[0]
    naive = naive_order_nll(model, x0, sigma, ~(prompt_mask | pad_mask))
    torch.testing.assert_close(nll, naive, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, (naive / n).mean(), rtol=1e-4, atol=1e-4)
    excluded = sd.nll(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(5),
                      exclude=x0 == int(x0[0, 5]))[1]
    assert (excluded == n - ((x0 == int(x0[0, 5])) & ~prompt_mask & ~pad_mask).sum(1)).all()


def naive_infill(model, x0, prompt_mask, pad_mask, span, g):
    """(the loss as naive NLLs along sd.order with span revealed last, its prompt tokens targets; ranks;
    targets)."""
    sigma = sd.order(x0, 4, prompt_mask & ~span, pad_mask, g, span)
    target = ~(prompt_mask & ~span) & ~pad_mask
    return (naive_order_nll(model, x0, sigma, target) / target.sum(1)).mean(), sigma.argsort(1), target


def test_setdiffusion_infill_orders():
    """--infill (not the paper): at 0 the paper's loss draw for draw; at 1 every row reveals all but one
    span first, the span's prompt tokens become targets, the loss the naive NLL along that order."""
    model = tiny_model(11)
    x0, prompt_mask, pad_mask = random_rows(12, [2, 5, 3], [12, 10, 9])
    loss = lambda cfg: sd.loss(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(5))[0]
    assert torch.equal(loss(sd.SetDiffusionConfig(MASK, 4)), loss(sd.SetDiffusionConfig(MASK, 4, infill=0.0)))
    g = torch.Generator().manual_seed(5)
    span = sd.infill_span(pad_mask, 1.0, g)                                  # (B, L): the draws loss() makes
    want, rank, target = naive_infill(model, x0, prompt_mask, pad_mask, span, g)
    torch.testing.assert_close(loss(sd.SetDiffusionConfig(MASK, 4, infill=1.0)), want, rtol=1e-4, atol=1e-4)
    for b in range(3):
        cols, real = span[b].nonzero().flatten(), int((~pad_mask[b]).sum())
        assert len(cols) >= 1 and cols.max() - cols.min() + 1 == len(cols) and cols.max() < real - 1
        assert len(cols) <= max(1, real // 4)
        assert rank[b, cols].min() > rank[b, target[b] & ~span[b]].max()    # the span comes after the rest
    spans = sd.infill_span(torch.zeros(4000, 40, dtype=torch.bool), 0.25, torch.Generator().manual_seed(1))
    assert abs(spans.any(1).float().mean() - 0.25) < 0.03 and not sd.infill_span(pad_mask, 0.0, g).any()


def test_infill_added_keeps_every_row_in_its_paper_order_and_appends_the_infilling_copies():
    model = tiny_model(12)
    x0, prompt_mask, pad_mask = random_rows(12, [2, 5, 3, 4], [12, 10, 9, 12])
    cfg = sd.SetDiffusionConfig(MASK, 4, infill=0.5, infill_added=True)
    got = sd.loss(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(7))[0]
    g = torch.Generator().manual_seed(7)
    span = sd.infill_span(pad_mask, 0.5, g)
    rows = span.any(1)
    assert 0 < int(rows.sum()) < 4                                     # some rows drawn, some not (this seed)
    X, P, D = (torch.cat([a, a[rows]]) for a in (x0, prompt_mask, pad_mask))
    S = torch.cat([torch.zeros_like(span), span[rows]])
    want, rank, target = naive_infill(model, X, P, D, S, g)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for b in range(4, len(X)):                                          # each copy: its span after the rest
        assert rank[b, S[b]].min() > rank[b, target[b] & ~S[b]].max()


@pytest.mark.parametrize("lengths", sd.SPAN_LENGTHS)
def test_infill_span_lengths_follow_their_distribution(lengths):
    """Rows of 44 real tokens (m = 11): P(n) = 1/m (uniform) or log((n + 1)/n) / log(m + 1) (loguniform),
    the span inside the real tokens."""
    R, m, rows = 44, 11, 20000
    pad_mask = torch.arange(48)[None] >= torch.full((rows, 1), R)                    # (rows, 48)
    span = sd.infill_span(pad_mask, 1.0, torch.Generator().manual_seed(2), lengths)
    n = span.sum(1)
    assert n.min() >= 1 and n.max() <= m and not (span & pad_mask).any()
    exact = torch.tensor([1 / m if lengths == "uniform" else math.log((k + 1) / k) / math.log(m + 1)
                          for k in range(1, m + 1)])
    seen = torch.bincount(n, minlength=m + 1)[1:].float() / rows
    torch.testing.assert_close(seen, exact, atol=0.012, rtol=0)
    with pytest.raises(ValueError, match="infill_len is one of uniform, loguniform"):
        sd.SetDiffusionConfig(MASK, 8, infill=0.5, infill_len="geometric")


def test_setdiffusion_lean_forward_equals_the_full_layout():
    """Leaving out the prompt's [MASK] copies and the padding's clean tokens changes no target's logits."""
    model = tiny_model(14)
    x0, prompt_mask, pad_mask = random_rows(12, [3, 5, 2], [9, 12, 7], seed=1)
    target, cfg = ~(prompt_mask | pad_mask), sd.SetDiffusionConfig(MASK, 4)
    sigma = sd.order(x0, 4, prompt_mask, pad_mask, torch.Generator().manual_seed(2))
    full = sd.denoise(model, x0, sigma, target, cfg, pad_mask)                          # (B, L, V)
    lean = sd.denoise(model, x0, sigma, target, cfg, pad_mask, 2, 10)                   # ranks [2, 10)
    torch.testing.assert_close(lean, full[:, 2:10], rtol=1e-5, atol=1e-5)


def test_order_distribution_matches_the_schedule():
    """P(T_j <= t) = 1 - (1 - x)^k, and P(j+1 revealed before j) = int_0^{1-delta} k (1-u)^(k-1)
    (1-u-delta)^k du, delta = (loc_j - loc_j+1) / b."""
    L, smax, B = 48, 8, 20000
    loc, b, k = sd.schedule(L, smax)
    T = sd.first_hitting_times(B, L, smax, torch.Generator().manual_seed(0))        # (B, L)
    for j in (0, 17, L - 1):
        for x in (0.1, 0.4, 0.8):
            t = loc[j] + x * b
            assert abs((T[:, j] <= t).double().mean() - (1 - (1 - x) ** k)) < 0.015
    delta = (loc[0] - loc[1]).item() / b
    u = torch.linspace(0, 1 - delta, 200001, dtype=torch.float64)
    swap = torch.trapezoid(k * (1 - u) ** (k - 1) * (1 - u - delta).clamp(min=0) ** k, u).item()
    rank = sample_order(B, L, smax, torch.Generator().manual_seed(1)).argsort(1)  # (B, L) rank of position
    observed = (rank[:, 11:40] < rank[:, 10:39]).double().mean().item()
    assert 0.05 < swap < 0.95 and abs(observed - swap) < 0.01, (observed, swap)


def test_decode_rule_on_literal_logits():
    probs = torch.tensor([[[0.70, 0.10, 0.10, 0.10], [0.50, 0.30, 0.10, 0.10],
                           [0.02, 0.95, 0.02, 0.01], [0.05, 0.05, 0.65, 0.25]]])    # (1, 4 slots, 4 tokens)
    logits = torch.full((1, 4, V), -1e4)
    logits[..., :4] = probs.log()
    logits[..., MASK] = 50.0                                                 # most likely, never chosen
    cand = torch.tensor([[True, True, False, True]])
    for tau, expected in [(0.6, [1, 0, 0, 1]), (math.inf, [1, 0, 0, 0]), (0.99, [1, 0, 0, 0]),
                          (0.5, [1, 1, 0, 1])]:
        y, dec = decode(logits.clone(), cand, MASK, tau)
        assert dec[0].int().tolist() == expected, tau
        assert y[0].tolist() == [0, 0, 1, 2]
    y, dec = decode(logits.clone(), torch.tensor([[False, True, False, False]]), MASK, math.inf)
    assert dec[0].int().tolist() == [0, 1, 0, 0]                         # the top candidate, not the top slot


def test_decode_ties_go_to_the_rightmost_candidate_under_the_official_arithmetic():
    """Confidence = exp(logits - logsumexp) in float32 (the official `_forward`), a top-1 tie to the
    rightmost candidate (the default; the last of the official's argsort on a CPU up to 16 slots). Slots 0
    and 3 differ in their runner-up logit, which softmax resolves but that arithmetic rounds to one
    0.99999237: a tie, so slot 3 is decoded."""
    logits = torch.full((1, 4, V), -1e4)
    logits[0, :, :3] = torch.tensor([[50.0, 38.17695617675781, 0.0], [3.0, 2.0, 1.0],
                                     [3.0, 2.0, 1.0], [50.0, 38.264060974121094, 0.0]])
    logits[..., MASK] = 60.0                                                 # suppressed
    row = logits[0, :, :3]
    conf = (row - row.logsumexp(-1, keepdim=True)).exp()[:, 0]
    assert conf[0] == conf[3] and torch.softmax(row, -1)[0, 0] > torch.softmax(row, -1)[3, 0]
    y, dec = decode(logits.clone(), torch.ones(1, 4, dtype=torch.bool), MASK, math.inf)
    assert y[0].tolist() == [0, 0, 0, 0] and dec[0].int().tolist() == [0, 0, 0, 1]
    y, dec = decode(logits.clone(), torch.tensor([[True, True, True, False]]), MASK, math.inf)
    assert dec[0].int().tolist() == [1, 0, 0, 0]                             # no tie left: the top one
    y, dec = decode(logits.clone(), torch.tensor([[False, True, True, False]]), MASK, math.inf)
    assert dec[0].int().tolist() == [0, 0, 1, 0]                             # identical logits: the rightmost
    y, dec = decode(logits.clone(), torch.ones(1, 4, dtype=torch.bool), MASK, float(conf[0]))
    assert dec[0].int().tolist() == [1, 0, 0, 1]                             # tau uses the same number


def test_official_top_is_the_last_of_the_official_argsort_on_literal_rows():
    """Paper mode's top-1 (sampling.official_top) == the official's: over its row (the slots in `row`, in
    order), the candidates' confidences and +inf at its decoded slots, the last finite entry of
    conf.argsort(dim=-1). Rows of 4 to 33 slots, all tied, a tied top among lower ones, decoded slots among
    them; batched (rows of other lengths, a row's slots apart, as Set Diffusion's window) == the official
    on each row alone. At 17 tied slots the pick is not the rightmost (a CPU sort keeps index order only up
    to 16 entries; CUDA's bitonic sort, up to 32, does not keep it: docs/fidelity.md)."""
    g = torch.Generator().manual_seed(0)
    K, rows = 40, []
    for n in (4, 16, 17, 20, 32, 33):
        for kind in ("tied", "top tied", "decoded"):
            conf = torch.rand(n, generator=g) * 0.5 if kind != "tied" else torch.full((n,), 0.75)
            conf[torch.randperm(n, generator=g)[:max(2, n // 3)]] = 0.9               # the tied top
            cand = torch.rand(n, generator=g) > 0.3 if kind == "decoded" else torch.ones(n, dtype=torch.bool)
            cand[int(conf.argmax())] = True
            slots = torch.randperm(K, generator=g)[:n].sort().values                  # where the row lies
            rows.append((conf, cand, slots))
    conf = torch.zeros(len(rows), K)
    cand = torch.zeros(len(rows), K, dtype=torch.bool)
    row = torch.zeros(len(rows), K, dtype=torch.bool)
    for b, (c, m, slots) in enumerate(rows):
        conf[b, slots], cand[b, slots], row[b, slots] = c, m, True
    top = sampling.official_top(conf, cand, row)
    for b, (c, m, slots) in enumerate(rows):
        keys = torch.where(m, c, math.inf)[None]                                        # (1, n) its conf
        want = keys.argsort(dim=-1)[0, -(int((~m).sum()) + 1)]                           # last kept: the top
        assert int(top[b]) == int(slots[want]), b
    dec = sampling.official_confident(conf, cand, 0.85, row)
    assert torch.equal(dec, (cand & (conf >= 0.85)) | (torch.arange(K) == top[:, None]))
    tied = torch.zeros(1, 17)
    assert int(sampling.official_top(tied, torch.ones(1, 17, dtype=torch.bool))) != 16
    assert not sampling.official_top(tied, torch.zeros(1, 17, dtype=torch.bool)).ge(0).any()    # none to pick


def official_fht(N, L, W, d, seed):
    """The official FHT commit times: the last N entries of the L-long staggered schedule with max 2W and
    the model's d (b = 2W / (L + 2W - 1), A = d / 2L, k = A / (b - A)), E ~ Exp(1)."""
    smax, A = 2 * W, d / (2 * L)
    b = smax / (L + smax - 1)
    k = A / (b - A)
    loc = (1 - b) * (1 - torch.arange(L - N, L, dtype=torch.float64) / (L - 1))            # (N,)
    E = torch.empty(1, N, dtype=torch.float64).exponential_(generator=torch.Generator().manual_seed(seed))
    return loc + b * (1 - torch.exp(-E / k)), k                                           # (1, N), k


def test_fht_commit_times_are_the_last_n_entries_of_the_context_long_schedule():
    W, d, P, N, L = 3, 3.0, 4, 24, 40
    masked = torch.arange(P + N)[None] >= P                                              # (1, P + N)
    l2r = torch.arange(P + N, dtype=torch.float64)[None]                                 # generate's key
    key = sd.fht_key(l2r, masked, W, d, torch.Generator().manual_seed(7), seq_len=L)
    T, k = official_fht(N, L, W, d, 7)
    torch.testing.assert_close(-key[:, P:], T, rtol=0, atol=1e-12)
    assert torch.equal(key[0, :P], torch.arange(P, dtype=torch.float64))                 # the prompt: l2r
    T_n, k_n = official_fht(N, N, W, d, 7)                                           # the old N-slot schedule
    assert abs(k - k_n) > 0.01 and not torch.allclose(T, T_n)
    key = sd.fht_key(l2r, masked, W, d, torch.Generator().manual_seed(7))               # no seq_len: L = N
    torch.testing.assert_close(-key[:, P:], T_n, rtol=0, atol=1e-12)
    key = sd.fht_key(l2r, masked, W, d, torch.Generator().manual_seed(7), seq_len=10)   # N > L: over N
    torch.testing.assert_close(-key[:, P:], T_n, rtol=0, atol=1e-12)


def official_staggered(L, d, max_block_size):
    """The official StaggeredNoise(block_size=L, desired_block_size=d, max_block_size, length=L), as its
    init_schedule computes it: (loc (L,), b, k)."""
    desired_area = 1 / (2 * (L / d))
    if d not in [1, max_block_size]:
        b = max_block_size / (L + max_block_size - 1)
        k = desired_area / (b - desired_area)
    else:
        k = 1.0
        b = desired_area * (k + 1) / k
    return torch.linspace(0.0, 1.0 - b, L, dtype=torch.float64).flip(0), b, k


def official_permutation(to_permute, d, max_block_size, generator):
    """The official sample_permutation_order (its staggered path; one row of block_size = L a sequence):
    compute_first_hitting_times' T = loc + b (1 - exp(-E / k)), +inf before the first target, -inf after the
    last, argsort descending and stable."""
    B, L = to_permute.shape
    loc, b, k = official_staggered(L, d, max_block_size)
    is_beginning = (to_permute.cumsum(-1) == 0) & (~to_permute[:, :1])
    is_end = (to_permute.flip(-1).cumsum(-1) == 0).flip(-1) & (~to_permute[:, -1:])
    E = torch.empty(B, L, dtype=torch.float64).exponential_(generator=generator)
    T = loc[None, :] + b * -torch.expm1(-E / k)
    T = torch.where(is_beginning, float("inf"), T)
    T = torch.where(is_end, -float("inf"), T)
    return torch.argsort(T, dim=-1, stable=True, descending=True)


@pytest.mark.parametrize("L, d", [(48, 4), (40, 3), (32, 8), (24, 1)])
def test_likelihood_orders_are_the_official_schedules_of_both_recipes(L, d):
    """eval.py --recipe script: the official likelihood script's max_block_size = 2d, the paper's order
    (order at smax = 2d); --recipe suite: the suite runner's max_block_size = d (suite_order), the official
    schedule's other branch (k = 1, b = d / L). Each the official permutation, draw for draw; at d = 1 (smax
    2) the two are one schedule."""
    x0, prompt_mask, pad_mask = random_rows(L, [1, 4, 2], [L, L - 3, L - 7], seed=3)
    target = ~(prompt_mask | pad_mask)
    g = lambda: torch.Generator().manual_seed(11)                                   # noqa: E731
    script = sd.order(x0, 2 * d, prompt_mask, pad_mask, g())
    suite = sd.suite_order(x0, d, prompt_mask, pad_mask, g())
    assert torch.equal(script, official_permutation(target, d, 2 * d, g()))
    assert torch.equal(suite, official_permutation(target, d, d, g()))
    _, b, k = official_staggered(L, d, d)
    assert math.isclose(b, d / L) and k == 1.0
    assert torch.equal(suite, script) == (d == 1)


def test_suite_nll_is_the_nll_of_the_suite_runners_order():
    """suite_nll: -log p(x0 | sigma) of the order the official suite runner draws (one forward per target over
    its clean predecessors), excluded targets left out of the count."""
    model, L, d = tiny_model(11), 10, 2
    x0, prompt_mask, pad_mask = random_rows(L, [1, 3], [L, L - 2])
    cfg, target = sd.SetDiffusionConfig(MASK, 2 * d), ~(prompt_mask | pad_mask)
    sigma = official_permutation(target, d, d, torch.Generator().manual_seed(5))
    nll, n = sd.suite_nll(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(5))
    torch.testing.assert_close(nll, naive_order_nll(model, x0, sigma, target), rtol=1e-4, atol=1e-4)
    assert torch.equal(n, target.sum(1))
    exclude = x0 == int(x0[0, 5])
    _, m = sd.suite_nll(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(5), exclude)
    assert torch.equal(m, (target & ~exclude).sum(1))


def test_the_likelihood_takes_the_suite_schedule_only_when_asked(monkeypatch):
    """nll and loss call nothing from the last section (every name there made to fail); suite_nll, which
    eval.py --recipe suite takes in nll's place, calls into it."""
    suite_nll = sd.suite_nll

    def fail(*args, **kwargs):
        raise LookupError("the reproduction section was called")
    for name in reproduction_section(sd):
        monkeypatch.setattr(sd, name, fail)
    model, cfg = tiny_model(11), sd.SetDiffusionConfig(MASK, 4)
    x0, prompt_mask, pad_mask = random_rows(10, [1, 3], [10, 8])
    sd.nll(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(0))
    sd.loss(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(0))
    with pytest.raises(LookupError):
        suite_nll(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(0))


def reproduction_section(mod) -> set:
    """The names of the functions and classes a method file takes from a method file's last section
    ("reproduction only"): its own, and those it imports (bd3lm's official_count from mdlm)."""
    names = set()
    for name, obj in vars(mod).items():
        home = sys.modules.get(getattr(obj, "__module__", ""))
        if home in (ar, mdlm, bd3lm, sd) and (inspect.isfunction(obj) or inspect.isclass(obj)):
            lines = inspect.getsource(home).splitlines()
            last = max(i for i, s in enumerate(lines, 1) if s.startswith("# -") and "reproduction only" in s)
            names |= {name} if inspect.getsourcelines(obj)[1] > last else set()
    return names


@pytest.mark.parametrize("name", list(METHODS))
def test_the_default_sampler_calls_nothing_from_the_reproduction_section(name, monkeypatch):
    """Paper mode and the "fht" commit order are hooks into the last section: with every name from it made
    to fail, the default generate (not official, commit order l2r) runs a batch, sampled, with a stop hook,
    and a prompt with [MASK]s; paper mode (and "fht") fails, so the names are the ones the hooks call."""
    mod, cfg, kw = METHODS[name]
    names = reproduction_section(mod)
    assert bool(names) == (name != "ar"), names                   # AR's last section holds data alone

    def fail(*args, **kwargs):
        raise LookupError("the reproduction section was called")
    for n in names:
        monkeypatch.setattr(mod, n, fail)
    model, (_, batch, prompt_mask) = Jitter(tiny_model(8), 3), left_padded([2, 7, 5])
    stop = lambda tokens, end: end > batch.shape[1] + 4          # noqa: E731 (rows stop after 4 new tokens)
    settings = Settings(9, 0.5, 1.0, **kw)
    tokens, _ = mod.generate(model, batch, cfg, settings, prompt_mask, stop, torch.Generator().manual_seed(0))
    assert tokens.shape == (3, batch.shape[1] + 9)
    if mod.CAN_INFILL:
        mod.generate(model, torch.tensor([[1, 2, 3, MASK, MASK, 4, 5]]), cfg, Settings(0, 0.5, **kw))
    hooks = [{"paper": PaperMode(official=True, seq_len=16)}]
    for hooked in hooks + [{"setdiffusion_commit_order": "fht"}] * (name == "setdiffusion"):
        with pytest.raises(LookupError) if names else contextlib.nullcontext():
            mod.generate(model, batch, cfg, Settings(9, 0.5, **kw, **hooked), prompt_mask)


def test_setdiffusion_commit_orders_and_stop_rule():
    """Both commit orders decode every [MASK]; `stop` is checked every W steps, after step W + 1, on the
    canvas up to the window's end (nothing decoded past it); a window past smax, an unknown commit order, a
    NaN threshold refused."""
    model, cfg = tiny_model(7), sd.SetDiffusionConfig(MASK, 6)
    prompt = torch.randint(0, MASK, (2, 4))
    g = torch.Generator().manual_seed(0)
    settings = Settings(12, 0.3, setdiffusion_commit_order="fht")
    tokens, stats = sd.generate(model, prompt, cfg, settings, generator=g)
    assert not (tokens == MASK).any() and stats["nfe"] <= 12
    calls = []
    stop = lambda tok, end: (calls.append(end.clone()), torch.ones(2, dtype=torch.bool))[1]
    tokens, stats = sd.generate(model, prompt, cfg, Settings(12), stop=stop)
    assert stats["nfe"] == 4 and len(calls) == 1                         # checked after step W + 1 (W = 3)
    left = (tokens == MASK).float().argmax(1)                     # the window starts at the first [MASK]
    assert torch.equal(calls[0], left + 3) and stats["n_gen"].tolist() == [4, 4]
    for row, end in zip(tokens, calls[0]):
        assert (row[end:] == MASK).all()                                 # nothing decoded past the window
    for bad in ({"setdiffusion_window": 7}, {"setdiffusion_commit_order": "random"},
                {"threshold": float("nan")}):
        with pytest.raises(ValueError):
            sd.generate(model, prompt, cfg, Settings(4, **bad))


@pytest.mark.parametrize("commit_order", ["fht", "l2r"])
def test_commit_order(commit_order):
    """fht: a step's tokens enter the cache by decreasing first-hitting time (official_fht, drawn once);
    l2r: by position."""
    cfg, W, P, N, L = sd.SetDiffusionConfig(MASK, 6), 3, 4, 24, 40
    model, commits = tiny_model(12), []

    def spy(idx, pos=None, mask=None, cache=None, last=None):    # the clean inputs before the W queries
        if last == W:
            commits.append(pos[0, :idx.shape[1] - W].tolist())
        return model(idx, pos, mask, cache, last)
    spy.new_cache = model.new_cache
    prompt = torch.randint(0, MASK, (1, P), generator=torch.Generator().manual_seed(3))
    settings = Settings(N, threshold=0.05, setdiffusion_commit_order=commit_order, paper=PaperMode(seq_len=L))
    sd.generate(spy, prompt, cfg, settings, generator=torch.Generator().manual_seed(7))
    T = official_fht(N, L, W, cfg.smax / 2, 7)[0][0]                                     # (N,)
    key = (lambda p: -T[p - P]) if commit_order == "fht" else (lambda p: p)
    multi = [c for c in commits if len(c) > 1]
    assert multi and all(c == sorted(c, key=key) for c in commits)
    assert any(sorted(c, key=lambda p: -T[p - P]) != sorted(c) for c in multi)   # the two orders differ here


def test_cache_commit_fewer_than_written_then_overwrite():
    """Write 4, keep 2: the next forward overwrites the 2 dropped entries."""
    model, x = tiny_model(13), torch.randint(0, MASK, (2, 7))
    full = model(x)
    cache = KVCache(2, 2, 7)
    model(x[:, :4], cache=cache)
    cache.commit(2)
    out = model(torch.cat([x[:, 2:5], torch.randint(0, MASK, (2, 1))], 1), cache=cache)
    cache.commit(3)
    torch.testing.assert_close(out[:, :3], full[:, 2:5])
    torch.testing.assert_close(model(x[:, 5:], cache=cache), full[:, 5:])
    cache.commit(2)
    with pytest.raises(ValueError):
        cache.commit(1)                                                      # nothing written since


def test_eval_stop_rule_reads_left_padded_rows_up_to_the_window_end():
    """GSM8K's official rule on [prompt | reply up to end], [MASK]s included; AR stops at EOS."""
    tok = byte_tokenizer()
    M, prompt = tok.mask_id, tok.encode(gsm8k.make_prompt("q"))
    P = len(prompt) + 2
    reply = tok.encode("x ") + [M] + tok.encode(" \\boxed{4}") + [M] * 3
    rows = torch.tensor([[0, 0] + prompt + reply, [0, 0] + prompt + [M] * len(reply)])
    prompt_mask = torch.arange(P)[None].expand(2, P) >= 2
    stop = metrics.stop_rule(tok, gsm8k, prompt_mask)
    end = torch.tensor([P + len(reply), P + len(reply)])
    assert stop(rows, end).tolist() == [True, False]
    assert stop(rows, end - 4).tolist() == [False, False]                    # the box ends after the window
    ar_stop = metrics.stop_rule(tok, gsm8k, prompt_mask, eos=True)
    rows[1, P] = tok.eos_id
    assert ar_stop(rows, end).tolist() == [True, True]


@pytest.mark.parametrize("name", ["ar", "mdlm", "bd3lm"])
def test_trailing_padding_changes_no_loss(name, monkeypatch):
    """The losses cut trailing padding before the forward (the noise draw held fixed)."""
    mod, cfg, _ = METHODS[name]
    model, L, extra = tiny_model(15), 12, 6
    x0, prompt_mask, pad_mask = random_rows(L, [2, 3], [8, 10], seed=3)
    wide = [torch.cat([x, x[:, -1:].expand(-1, extra)], 1) for x in (x0, prompt_mask, pad_mask)]
    if name != "ar":
        xt, t = mod.noise(x0, cfg, ~(prompt_mask | pad_mask), torch.Generator().manual_seed(4))
        fixed = {L: (xt, t), L + extra: (torch.cat([xt, xt[:, -1:].expand(-1, extra)], 1),
                                         torch.cat([t, t[:, -1:].expand(-1, extra)], 1))}
        monkeypatch.setattr(mod, "noise", lambda x0, *a, **k: fixed[x0.shape[1]])
    torch.testing.assert_close(mod.loss(model, x0, cfg, prompt_mask, pad_mask)[0],
                               mod.loss(model, wide[0], cfg, *wide[1:])[0])
    for a, b in zip(mod.nll(model, x0, cfg, prompt_mask, pad_mask), mod.nll(model, wide[0], cfg, *wide[1:])):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["mdlm", "bd3lm"])
def test_official_count_new_tokens_from_the_prompt_end_block(name):
    """official: N counted from the start of the block holding the prompt's end (N - p mod S new tokens,
    the rest left [MASK]); with p a multiple of S both settings agree."""
    mod, cfg, kw = METHODS[name]                                            # blocks of S = 4
    S, N, model = 4, 8, Jitter(tiny_model(16))
    official = {"paper": PaperMode(official=True, seq_len=24 if name == "mdlm" else None)}
    g = torch.Generator().manual_seed(2)
    lens = [6, 8, 5]
    batch = torch.randint(0, MASK, (3, 8), generator=g)
    prompt_mask = torch.arange(8)[None] >= torch.tensor([[8 - p] for p in lens])          # left-padded
    tokens, stats = mod.generate(model, batch, cfg, Settings(N, threshold=0.5, **kw, **official), prompt_mask)
    assert tokens.shape == (3, 8 + N) and stats["n_gen"].tolist() == [N - p % S for p in lens] == [6, 8, 7]
    for row, n in zip(tokens, stats["n_gen"].tolist()):
        assert not (row[8:8 + n] == MASK).any() and (row[8 + n:] == MASK).all()
    ours = mod.generate(model, batch, cfg, Settings(N, threshold=0.5, **kw), prompt_mask)[1]
    assert ours["n_gen"].tolist() == [N] * 3
    prompt = batch[1:2]                                                                    # p = 8 = 2 S
    if name == "mdlm":
        official["paper"].seq_len = 8 + N
    a, sa = mod.generate(model, prompt, cfg, Settings(N, threshold=0.5, **kw, **official))
    b, sb = mod.generate(model, prompt, cfg, Settings(N, threshold=0.5, **kw))
    assert torch.equal(a, b) and torch.equal(sa["step"], sb["step"]) and sa["nfe"] == sb["nfe"]


def test_length_penalties_count_the_visible_new_tokens_left_of_a_slot():
    """The official _length_penalty_prefix_lengths: n of a slot = the decoded new tokens left of it that
    are not the pad id. Canvas [7 8 | 5 M E 6 M M], slots 3, 6, 7: n = 1, 2, 2.
    ExponentialDecayLengthPenalty (1, 2) adds |eos| (2^(n - 1) - 1) when n > 1; MinNewTokens (2) forbids
    EOS where n < 2."""
    E = 0
    tokens = torch.tensor([[7, 8, 5, MASK, E, 6, MASK, MASK]])
    real = torch.ones_like(tokens, dtype=torch.bool)
    opt = SamplerOptions(length_penalty=(1, 2.0), eos_id=E, pad_id=E)
    canvas = torch.tensor([[7, 8] + [MASK] * 6])                        # before decoding: 6 new tokens
    track = start(opt, canvas, real, MASK)
    cols = torch.tensor([[3, 6, 7]])
    logits = torch.full((1, 3, V), 0.5)
    logits[..., E] = torch.tensor([-2.0, -2.0, 3.0])
    out = process(logits, at(track, tokens, cols))
    assert track.shown.tolist() == [[1, 2, 2]] and track.n.tolist() == [[1, 4, 5]]
    assert out[0, :, E].tolist() == [-2.0, -2.0 + 2.0 * (2 - 1), 3.0 + 3.0 * (2 - 1)]
    opt = SamplerOptions(min_new_tokens=2, eos_id=E, pad_id=E)
    out = process(logits, at(start(opt, canvas, real, MASK), tokens, cols))
    assert out[0, :, E].tolist() == [-math.inf, -2.0, 3.0]


def test_infilling_repetition_penalty_leaves_the_pad_id_out_of_the_context():
    """The official _visible_infill_context: every visible token but the pad id; pad_id -1 (HF generate)
    counts it."""
    E = 0
    tokens = torch.tensor([[E, 3, 4, MASK, MASK, 5, E]])
    real = torch.ones_like(tokens, dtype=torch.bool)
    logits = torch.full((1, 1, V), 2.0)
    for pad_id, seen in ((E, [3, 4, 5]), (-1, [E, 3, 4, 5])):
        opt = SamplerOptions(repetition_penalty=2.0, penalize_context=True, pad_id=pad_id)
        out = process(logits, at(start(opt, tokens, real, MASK), tokens, torch.tensor([[3]])))
        assert (out[0, 0, :MASK] == 1.0).nonzero().flatten().tolist() == seen     # [MASK]: -inf anyway


def test_sampled_setdiffusion_draws_for_the_window_masks_only():
    """One multinomial draw per [MASK] query of the window, in position order (the official
    _sample_categorical): the tokens of a naive loop drawing so."""
    model, cfg, W, N, T = tiny_model(21), sd.SetDiffusionConfig(MASK, 8), 4, 10, 1.5
    prompt = torch.randint(0, MASK, (1, 3), generator=torch.Generator().manual_seed(1))
    settings = Settings(N, threshold=0.6, temperature=T, setdiffusion_window=W)
    tokens, _ = sd.generate(model, prompt, cfg, settings, generator=torch.Generator().manual_seed(5))
    g, x = torch.Generator().manual_seed(5), torch.cat([prompt, torch.full((1, N), MASK)], 1)
    clean = list(range(3))
    while (x == MASK).any():
        left = int((x[0] == MASK).nonzero()[0])
        queries = [c for c in range(left, min(left + W, x.shape[1])) if x[0, c] == MASK]
        n, k = len(clean), len(queries)
        mask = torch.zeros(n + k, n + k, dtype=torch.bool)
        mask[:n, :n], mask[n:, :n], mask[n:, n:] = causal(n), True, torch.eye(k, dtype=torch.bool)
        logits = model(torch.cat([x[:, clean], torch.full((1, k), MASK)], 1), torch.tensor([clean + queries]),
                       mask)[:, n:].float() / T
        logits[..., MASK] = -math.inf
        probs = (logits - logits.logsumexp(-1, keepdim=True)).exp()[0]                  # (k, V)
        y = torch.multinomial(probs, 1, generator=g)[:, 0]                                # one draw per query
        dec = confident(probs.gather(1, y[:, None]).T, torch.ones(1, k, dtype=torch.bool), 0.6)[0]
        for j, c in enumerate(queries):
            if dec[j]:
                x[0, c] = y[j]
                clean.append(c)
    assert torch.equal(tokens, x)


class OfficialCache:
    """The official BD3-LM KV cache, plainly: entries (token, position, the entries it attended to).
    forward(inputs, keep): the oldest entries go so that cache + inputs <= L (_crop_kv_cache_left); the
    inputs sit at positions n.. after the n kept entries and attend block-causally (blocks of S); one model
    call over every entry made so far recomputes the cached keys and values exactly. The first `keep`
    inputs join the cache. Returns the inputs' logits."""

    def __init__(self, model, S, L):
        self.model, self.S, self.L, self.made, self.live = model, S, L, [], []

    def forward(self, inputs, keep=0):
        S = self.S
        self.live = self.live[max(len(self.live) + len(inputs) - self.L, 0):]
        n, base = len(self.live), len(self.made)
        new = [(t, n + i, [e for k, e in enumerate(self.live) if k // S <= (n + i) // S]
                + [base + j for j in range(len(inputs)) if (n + j) // S <= (n + i) // S])
               for i, t in enumerate(inputs)]
        rows = self.made + new
        mask = torch.zeros(len(rows), len(rows), dtype=torch.bool)
        for r, (_, _, sees) in enumerate(rows):
            mask[r, sees] = True
        logits = self.model(torch.tensor([[t for t, _, _ in rows]]), torch.tensor([[p for _, p, _ in rows]]),
                            mask)
        self.made += new[:keep]
        self.live += list(range(base, base + keep))
        return logits[:, base:]


def official_decode(logits, cand, threshold, generator=None):
    """The official decode step (MDLM._generate_unconditional, predict_and_noise, one token forced a step),
    plainly: logits (1, n, V) of its row, cand (1, n) the row's [MASK] slots (the others decoded). The
    [MASK] logit at -1e12, p = exp(logits - logsumexp); xs the argmax, or one draw per slot; conf = p(xs),
    +inf at the decoded slots; `conf.argsort(dim=-1)[..., :-num_clean]` (num_clean = decoded + 1) stay
    [MASK], the rest and every p(xs) >= threshold decoded. Returns xs, decoded, p(xs) (1, n)."""
    logits = logits.detach().float().clone()
    logits[..., MASK] = -1e12
    probs = (logits - logits.logsumexp(-1, keepdim=True)).exp()                        # (1, n, V)
    xs = probs.argmax(-1) if generator is None else torch.multinomial(probs[0], 1, generator=generator).T
    p = probs.gather(-1, xs[..., None])[..., 0]                                        # (1, n)
    conf = torch.where(cand, p, math.inf)
    noise = conf.argsort(dim=-1)[..., :-(int((~cand).sum()) + 1)]                     # stay [MASK]
    output = xs.clone()
    output[..., noise] = MASK
    output = torch.where(p >= threshold, xs, output)
    return xs, (output != MASK) & cand, p


def decode_block(x, c0, end, logits, threshold, generator=None, conf=None):
    """One official step on columns [c0, end) (official_decode): greedy, or sampled at temperature 1 with
    one draw per column (the official's stream). conf (a list over the columns): the official's
    accumulated_confidence, p(xs) written at every column of the block that holds a token after the step.
    Returns the columns it decoded."""
    cand = torch.tensor([[t == MASK for t in x[c0:end]]])
    y, dec, p = official_decode(logits[:, :end - c0], cand, threshold, generator)
    x[c0:end] = [int(y[0, i]) if dec[0, i] else x[c0 + i] for i in range(end - c0)]
    for i in range(end - c0):
        if conf is not None and x[c0 + i] != MASK:
            conf[c0 + i] = float(p[0, i])
    return [c0 + i for i in range(end - c0) if dec[0, i]]


def hf_penalty(logits, context, p):
    """HF's RepetitionPenaltyLogitsProcessor on every slot of logits (1, n, V), as the official applies it:
    the logits of the ids in context (a list) divided by p where positive, multiplied by p where not."""
    if p == 1.0 or not context:
        return logits
    logits, ids = logits.detach().float().clone(), torch.tensor(sorted(set(context)))
    score = logits[..., ids]
    logits[..., ids] = torch.where(score < 0, score * p, score / p)
    return logits


def official_bd3lm_infill(model, prompt, S, L, threshold, penalty=1.0):
    """The official BD3-LM infilling (align_inputs_to_blocks, not fused): pad the prompt with [MASK] to a
    multiple of S; cache its first S floor(P/S) tokens (the last L); decode the blocks from S floor(first
    [MASK]/S), as many as hold a [MASK], left of the pad; cache each. A repetition penalty (without the
    right-context flag) reads the canvas up to the end of the block it decodes."""
    x, P = prompt[0].tolist(), prompt.shape[1]
    x += [MASK] * (-P % S)
    cache, F = OfficialCache(model, S, L), S * (P // S)
    if F:
        cache.forward(x[:F][-L:], keep=F)
    first = x.index(MASK) // S * S
    for b in range(len({c // S for c in range(P) if x[c] == MASK})):
        c0 = first + b * S
        if c0 >= P:                                      # no column left to decode: the official stops
            break
        if MASK not in x[c0:c0 + S]:                     # nothing to decode here: skipped, not cached
            continue
        end = min(c0 + S, P)                             # the pad is never decoded
        while MASK in x[c0:end]:
            decode_block(x, c0, end, hf_penalty(cache.forward(x[c0:c0 + S]), x[:end], penalty), threshold)
        cache.forward(x[c0:c0 + S], keep=S)
    return torch.tensor([x[:P]])


def official_bd3lm_generate(model, prompt, N, S, L, threshold, generator=None, steps=None, stop=None):
    """The official BD3-LM generation (fused block cache): cache the prompt's first F = S floor(P/S)
    tokens; decode ceil(N/S) blocks of S from F (to P + N); a block's first forward also feeds the previous
    block, after the oldest entries go so that cache + both blocks <= L. steps (a dict): column -> the step
    that decoded it. stop (OfficialStop): checked after each block on the columns up to its end; when it
    fires the output ends there."""
    x, P = prompt[0].tolist() + [MASK] * N, prompt.shape[1]
    cache, F, pending, nfe = OfficialCache(model, S, L), S * (P // S), [], 0
    conf = [1.0] * P + [math.nan] * N
    if F:
        cache.forward(x[:F][-L:], keep=F)
    for b in range(math.ceil(N / S)):
        c0, end = F + b * S, min(F + (b + 1) * S, P + N)
        fed = pending                          # the previous block, committed by this block's first forward
        while MASK in x[c0:end]:
            logits = cache.forward(fed + x[c0:end], keep=len(fed))[:, len(fed):]
            for c in decode_block(x, c0, end, logits, threshold, generator, conf):
                (steps if steps is not None else {})[c] = nfe
            fed, nfe = [], nfe + 1
        pending = x[c0:end]
        if stop is not None and stop(x[:end], conf[:end]):
            return torch.tensor([x[:end]])
    return torch.tensor([x])


@pytest.mark.parametrize("L", [16, 64])
def test_bd3lm_official_infilling_equals_the_official_rule(L):
    """Batched and alone, with the crop (L 16: past 12 + 4 + 4 entries) and without; the default is another
    algorithm; new tokens, or a row without a [MASK], refused."""
    S, cfg, model = 4, bd3lm.BD3LMConfig(MASK, 4), Jitter(tiny_model(22), 5)
    g = torch.Generator().manual_seed(3)
    rows = [torch.cat([torch.randint(0, MASK, (a,), generator=g), torch.full((n,), MASK),
                       torch.randint(0, MASK, (c,), generator=g)])
            for a, n, c in ((5, 6, 3), (3, 4, 4), (8, 2, 1))]
    P = max(len(r) for r in rows)
    batch = torch.stack([torch.cat([torch.zeros(P - len(r), dtype=torch.long), r]) for r in rows])
    prompt_mask = torch.arange(P)[None] >= torch.tensor([[P - len(r)] for r in rows])
    for tau in (math.inf, 0.6):
        settings = Settings(0, threshold=tau, paper=PaperMode(official=True, seq_len=L))
        tokens, _ = bd3lm.generate(model, batch, cfg, settings, prompt_mask)
        for b, r in enumerate(rows):
            want = official_bd3lm_infill(model, r[None], S, L, tau)
            alone, _ = bd3lm.generate(model, r[None], cfg, settings)
            assert torch.equal(alone, want) and torch.equal(tokens[b:b + 1, P - len(r):], want), (b, tau)
            assert not (want == MASK).any()
    ours, _ = bd3lm.generate(model, rows[0][None], cfg, Settings(0))
    assert not torch.equal(ours, official_bd3lm_infill(model, rows[0][None], S, L, math.inf))
    for N, bad in ((2, [[1, MASK, 2]]), (0, [[1, MASK, 2], [1, 3, 2]])):      # new tokens; a row without one
        with pytest.raises(ValueError, match="every row must hold one, with max_new_tokens 0") as e:
            bd3lm.generate(model, torch.tensor(bad), cfg, Settings(N, paper=PaperMode(True, L)))
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("P, N, L", [(6, 16, 12), (8, 14, 12), (6, 16, 64), (6, 16, 6)])
def test_bd3lm_official_cache_crop_equals_the_official_rule(P, N, L):
    """P + N > L (make reproduce-gsm8k): the oldest entries go before a forward would pass L and the inputs
    are renumbered; the default keeps every entry at its position. L 6 < 2S: a forward's two blocks alone
    pass L, the cache empties and they sit at positions 0.. (the official's), not L - 2S.."""
    S, cfg, model = 4, bd3lm.BD3LMConfig(MASK, 4), Jitter(tiny_model(23), 6)
    prompt = torch.randint(0, MASK, (1, P), generator=torch.Generator().manual_seed(P))
    for tau in (math.inf, 0.6):
        tokens, _ = bd3lm.generate(model, prompt, cfg, Settings(N, threshold=tau, paper=PaperMode(True, L)))
        want = official_bd3lm_generate(model, prompt, N, S, L, tau)
        assert torch.equal(tokens, want), tau
    sampled, _ = bd3lm.generate(model, prompt, cfg, Settings(N, 0.6, 1.0, paper=PaperMode(True, L)),
                                generator=torch.Generator().manual_seed(8))      # the last block may be short
    assert torch.equal(sampled, official_bd3lm_generate(model, prompt, N, S, L, 0.6,
                                                        torch.Generator().manual_seed(8)))
    ours, _ = bd3lm.generate(model, prompt, cfg, Settings(N, paper=PaperMode(official=True)))    # no seq_len
    assert torch.equal(ours, official_bd3lm_generate(model, prompt, N, S, 10 ** 6, math.inf))
    assert L == 64 or not torch.equal(ours, official_bd3lm_generate(model, prompt, N, S, L, math.inf))


def official_setdiffusion(model, prompt, N, W, L, threshold, T=None, steps=None, stop=None, penalty=1.0):
    """The official Set Diffusion decoding with its KV cache crop (entries as in OfficialCache). The prompt
    is cached causally at 0..P-1; each step feeds [the last step's tokens in commit order (position; with
    T, decreasing first-hitting time) | a query per masked column of the W-wide window]; before it the
    entries past L go (the oldest, or with T the smallest positions, after which the mask reads the static
    two-stream rule at positions: stream = position >= L, index = position mod L, queries see no other
    query). Otherwise an input sees every cached entry, the committed inputs causally, a query them and
    itself. The queries decode by official_decode; steps (a dict): column -> the step that decoded it.
    stop (OfficialStop): checked after every W-th step (not the first, nor once no [MASK] is left) on the
    columns up to the window's end, a token's own confidence at its column; when it fires the output ends
    at the window's end. A prompt with [MASK]s is infilled, every visible token cached first (in position
    order, causally); a repetition penalty (without the right-context flag) reads the cached tokens when
    the step starts (hf_penalty)."""
    x, P = prompt[0].tolist() + [MASK] * N, prompt.shape[1]
    conf = [math.nan if t == MASK else 1.0 for t in x]
    visible = [c for c, t in enumerate(x) if t != MASK]
    made, live = [(x[c], c, list(range(k + 1))) for k, c in enumerate(visible)], list(range(len(visible)))
    key = (lambda c: c) if T is None else (lambda c: -float(T[c - P]))
    rule = lambda q, k: (q % L == k % L and (q >= L) == (k >= L)) or (q >= L > k and q % L > k) or (  # noqa
        q < L and k < L and q >= k)
    last, semantic, step = [], False, 0
    while MASK in x:
        left = x.index(MASK)
        queries = [c for c in range(left, min(left + W, len(x))) if x[c] == MASK]
        commit, n, base = sorted(last, key=key), len(last), len(made)
        drop = len(live) + n + len(queries) - L
        if drop > 0:
            gone = set(live[:drop] if T is None else sorted(live, key=lambda e: made[e][1])[:drop])
            live, semantic = [e for e in live if e not in gone], semantic or T is not None
        inputs = [(x[c], c) for c in commit] + [(MASK, c) for c in queries]
        keys = live + list(range(base, base + len(inputs)))
        pos = lambda e: made[e][1] if e < base else inputs[e - base][1]  # noqa: E731
        rows = []
        for i, (t, p) in enumerate(inputs):
            if semantic:
                sees = [e for e in keys                     # queries see no other query
                        if e == base + i or (rule(p, pos(e)) and not (i >= n and e >= base + n))]
            else:
                sees = live + list(range(base, base + (i + 1 if i < n else n))) + [base + i] * (i >= n)
            rows.append((t, p, sees))
        every = made + rows
        mask = torch.zeros(len(every), len(every), dtype=torch.bool)
        for r, (_, _, sees) in enumerate(every):
            mask[r, sees] = True
        logits = model(torch.tensor([[t for t, _, _ in every]]), torch.tensor([[p for _, p, _ in every]]),
                       mask)
        logits = hf_penalty(logits[:, base + n:], [t for t, _, _ in made], penalty)
        y, dec, p = official_decode(logits, torch.ones(1, len(queries), dtype=torch.bool), threshold)
        made, live, last = made + rows[:n], live + list(range(base, base + n)), []
        for j, c in enumerate(queries):
            if dec[0, j]:
                x[c], conf[c] = int(y[0, j]), float(p[0, j])
                last.append(c)
                (steps if steps is not None else {})[c] = step
        if stop is not None and MASK in x and step > 0 and step % W == 0:
            end = x.index(MASK) + W
            if stop(x[:end], conf[:end]):
                return torch.tensor([x[:end]])
        step += 1
    return torch.tensor([x])


def sharp_model(seed):
    """Sharp attention (q, k, v, o scaled up, embeddings down): which entries a query sees changes its
    argmax."""
    model = tiny_model(seed)
    with torch.no_grad():
        model.embed_tokens.weight.mul_(0.5)
        for block in model.layers:
            block.self_attn.qkv_proj.weight.mul_(5.0)
            block.self_attn.o_proj.weight.mul_(20.0)
    return model


@pytest.mark.parametrize("commit_order", ["l2r", "fht"])
def test_setdiffusion_official_cache_crop_equals_the_official_rule(commit_order):
    """P + N > L: the entries past L go before each step (l2r: the oldest; fht: the smallest positions);
    the default keeps all (the rule with no L)."""
    cfg, W, P, N, L = sd.SetDiffusionConfig(MASK, 6), 3, 5, 14, 14
    model = sharp_model(24)
    prompt = torch.randint(0, MASK, (1, P), generator=torch.Generator().manual_seed(4))
    T = official_fht(N, L, W, cfg.smax / 2, 7)[0][0] if commit_order == "fht" else None
    for tau in (math.inf, 0.5):
        settings = Settings(N, threshold=tau, setdiffusion_window=W, setdiffusion_commit_order=commit_order,
                            paper=PaperMode(official=True, seq_len=L))
        tokens, _ = sd.generate(model, prompt, cfg, settings, generator=torch.Generator().manual_seed(7))
        assert torch.equal(tokens, official_setdiffusion(model, prompt, N, W, L, tau, T)), tau
    default = dataclasses.replace(settings, threshold=math.inf, paper=PaperMode(seq_len=L))
    ours, _ = sd.generate(model, prompt, cfg, default, generator=torch.Generator().manual_seed(7))
    assert torch.equal(ours, official_setdiffusion(model, prompt, N, W, 10 ** 6, math.inf, T))
    assert not torch.equal(ours, official_setdiffusion(model, prompt, N, W, L, math.inf, T))
    # which entries go, on literals: 6 cached (one a step committed out of position order), 1 + 2 inputs, L 5
    crop = sd.Crop(5, commit_order, torch.tensor([[0, 1, 2, 5, 3, 4]]))
    one = lambda n: torch.ones(1, n, dtype=torch.bool)  # noqa: E731
    ok, _ = crop(one(6), one(1), one(2), torch.tensor([[6, 7, 8]]))
    assert ok.int().tolist() == [[0, 0, 0, 1, 0, 1] if commit_order == "fht" else [0, 0, 0, 0, 1, 1]]


def official_mdlm_window(model, prompt, N, S, L, threshold, steps=None, stop=None):
    """The official MDLM generation: the canvas [prompt | N [MASK]] (padded with [MASK] to L); ceil(N/S)
    blocks of S from S floor(P/S), cut at the canvas' end; each step one forward over [0, L) while the
    block starts before L, else [block end - L, block end), at positions 0..; returns P + S ceil(N/S)
    columns and the number of forwards. steps (a dict): column -> the step that decoded it. stop
    (OfficialStop): checked after each block on the columns up to its end; when it fires the output ends
    there."""
    x, P = prompt[0].tolist() + [MASK] * N, prompt.shape[1]
    x += [MASK] * max(L - len(x), 0)
    conf = [1.0] * P + [math.nan] * (len(x) - P)
    F, nfe = S * (P // S), 0
    for b in range(math.ceil(N / S)):
        s, end = F + b * S, min(F + (b + 1) * S, len(x))
        w0 = 0 if s < L else s + S - L
        while MASK in x[s:end]:
            window = torch.tensor([x[w0:w0 + L]])
            logits = model(window, torch.arange(window.shape[1])[None],
                           torch.ones(window.shape[1], window.shape[1], dtype=torch.bool))
            for c in decode_block(x, s, end, logits[:, s - w0:], threshold, conf=conf):
                (steps if steps is not None else {})[c] = nfe
            nfe += 1
        if stop is not None and stop(x[:end], conf[:end]):
            x = x[:end]
            break
    out = P + S * math.ceil(N / S)
    return torch.tensor([(x + [MASK] * out)[:out]]), nfe


@pytest.mark.parametrize("P, N", [(6, 18), (9, 14), (5, 7), (4, 5)])
def test_mdlm_official_window_equals_the_official_rule(P, N):
    """An L-wide window at positions 0..L-1 sliding a block at a time past L; P + N <= L (5 + 7, 4 + 5): the
    canvas padded with [MASK] to L, every column attended to, whose last block decodes into the padding when
    S does not divide N (4 + 5: 8 new tokens); the rule's forwards; batched == alone; seq_len needed."""
    S, L, cfg, model = 4, 12, mdlm.MDLMConfig(MASK), sharp_model(25)
    _, batch, prompt_mask = left_padded([P, P - 2], seed=P)
    prompt, seen = batch[:1], []

    def spy(idx, pos=None, mask=None, cache=None, last=None):                           # the canvas each step
        seen.append((idx.shape[1], bool(mask.all()), pos[0].tolist()))
        return model(idx, pos, mask, cache, last)
    for tau in (math.inf, 0.5):
        settings = Settings(N, threshold=tau, mdlm_block=S, paper=PaperMode(official=True, seq_len=L))
        tokens, stats = mdlm.generate(spy, prompt, cfg, settings)
        want, nfe = official_mdlm_window(model, prompt, N, S, L, tau)
        assert torch.equal(tokens, want) and stats["nfe"] == nfe, tau
        both, _ = mdlm.generate(model, batch, cfg, settings, prompt_mask)
        alone, _ = mdlm.generate(model, batch[1:, 2:], cfg, settings)
        assert torch.equal(both[:1], tokens) and torch.equal(both[1:, 2:], alone)
    assert seen and all(w == L and p == list(range(L)) and (every or P + N > L) for w, every, p in seen)
    with pytest.raises(ValueError, match="seq_len"):
        mdlm.generate(model, prompt, cfg, Settings(N, mdlm_block=S, paper=PaperMode(official=True)))


class Saturated(torch.nn.Module):
    """A model's logits scaled up until every probability is 0 or 1 in float32: every [MASK] slot is equally
    sure (confidence exactly 1), so which one a step decodes at tau = inf is the sort's tie order alone."""

    def __init__(self, model, scale=1e3):
        super().__init__()
        self.model, self.new_cache, self.scale = model, model.new_cache, scale

    def forward(self, idx, pos=None, mask=None, cache=None, last=None):
        return self.model(idx, pos, mask, cache, last) * self.scale


@pytest.mark.parametrize("name", ["setdiffusion", "mdlm", "bd3lm"])
def test_official_ties_follow_the_official_argsort(name):
    """Every slot at confidence 1, rows of 20 slots (a window, a block; more than the 16 a CPU sort keeps in
    index order): paper mode decodes, step by step, the slot the official's conf.argsort() leaves last, as
    the transcriptions (official_decode) do: the same tokens, each decoded at the same step; the default
    (the rightmost) decodes in another order."""
    S, N, L = 20, 30, 64
    model = Saturated(Jitter(tiny_model(31), 7))
    prompt = torch.randint(0, MASK, (1, 3), generator=torch.Generator().manual_seed(2))
    want = {}
    if name == "setdiffusion":
        cfg, kw = sd.SetDiffusionConfig(MASK, 2 * S), {"setdiffusion_window": S}
        tokens = official_setdiffusion(model, prompt, N, S, L, math.inf, steps=want)
    elif name == "mdlm":
        cfg, kw = mdlm.MDLMConfig(MASK), {"mdlm_block": S}
        tokens = official_mdlm_window(model, prompt, N, S, L, math.inf, steps=want)[0]
    else:
        cfg, kw = bd3lm.BD3LMConfig(MASK, S), {}
        tokens = official_bd3lm_generate(model, prompt, N, S, L, math.inf, steps=want)
    mod = {"setdiffusion": sd, "mdlm": mdlm, "bd3lm": bd3lm}[name]
    got, stats = mod.generate(model, prompt, cfg, Settings(N, **kw, paper=PaperMode(True, L)))
    step = stats["step"][0].tolist()
    assert torch.equal(got, tokens) and {c: step[c] for c in want} == want
    assert all(s < 0 for c, s in enumerate(step) if c not in want)
    default = mod.generate(model, prompt, cfg, Settings(N, **kw, paper=PaperMode(seq_len=L)))[1]["step"]
    default = default[0].tolist()
    assert [default[c] for c in range(3, 3 + N)] != [want[c] for c in range(3, 3 + N)]


class OfficialStop:
    """The official EntropyEosStoppingCriteria (var_length, ignore_prompt_eos, prompt_length 1, num_matches
    1, legacy low-entropy truncation), plainly: call(ids, conf) on the sample so far (lists: its tokens,
    [MASK]s included, and accumulated_confidence, nan where nothing is decoded) -> whether it stops, setting
    truncate_idx. Its EOS rule first (the first EOS at or after the min-tokens floor, no [MASK] before it),
    then _confidence_stop (the positions with a confidence, from 1, not met before, in order: the first
    max(min, 1) met skipped, strikes below the threshold, reset above; patience strikes stop, cutting after
    that token; none to read resets the strikes), then the entropy rule."""

    def __init__(self, eos, threshold, patience, min_tokens, entropy=0.0, window=128):
        self.eos, self.threshold, self.patience, self.m = eos, threshold, patience, max(min_tokens, 1)
        self.entropy, self.window = entropy, window
        self.seen, self.strikes, self.truncate_idx = set(), 0, None

    def __call__(self, ids, conf):
        n = len(ids)
        floor = min(1 + self.m, n)
        eos = [i for i in range(1, n) if ids[i] == self.eos and i + 1 >= floor]
        if eos and MASK not in ids[1:eos[0]]:
            self.truncate_idx = min(eos[0] + 1, n)
            return True
        positions = [i for i in range(1, n) if not math.isnan(conf[i]) and ids[i] != MASK]
        new = [i for i in positions if i not in self.seen]
        if not positions:
            self.strikes = 0
        elif new:
            if len(self.seen) < self.m:
                k = min(self.m - len(self.seen), len(new))
                self.seen.update(new[:k])
                new, self.strikes = new[k:], 0
            for i in new:
                self.seen.add(i)
                self.strikes = self.strikes + 1 if conf[i] < self.threshold else 0
                if self.strikes >= self.patience:
                    self.truncate_idx = min(i + 1, n)
                    return True
        if n < self.window or n - 1 < self.m:
            return False
        if sampling.window_entropy(torch.tensor(ids[-self.window:]), MASK) < self.entropy:
            self.truncate_idx = min(max(n - self.window, floor), n)
            return True
        return False


@torch.no_grad()
def official_ar(model, prompt, N, stop):
    """The official AR loop (its DiT path), plainly: greedy, one token a forward over the whole prefix, the
    stop checked after each token but the first (the prompt's forward writes it) on the prefix; when it
    fires the output ends there."""
    x, conf = prompt[0].tolist(), [1.0] * prompt.shape[1]
    for i in range(N):
        logits = model(torch.tensor([x]), torch.arange(len(x))[None], causal(len(x)))[0, -1].float()
        logits[MASK] = -math.inf
        p = (logits - logits.logsumexp(-1)).exp()
        x, conf = x + [int(p.argmax())], conf + [float(p.max())]
        if i > 0 and stop(x, conf):
            break
    return torch.tensor([x])


@pytest.mark.parametrize("name", ["ar", "setdiffusion", "mdlm", "bd3lm"])
def test_official_low_confidence_stop_equals_the_official_rule(name):
    """Paper mode's low-confidence stop == OfficialStop read where each official sampler checks its
    criteria, with the confidences it keeps (MDLM, BD3-LM: a block's slots rewritten every step): the
    sampler stops at the same check with the same tokens decoded, and its cut (EntropyStop.cut) keeps the
    same [MASK]-free columns. The default (every step, every decoded token kept) keeps other tokens but for
    AR, where both rules meet."""
    mod, cfg, kw = METHODS[name]
    model, N, L = Jitter(tiny_model(32), 3), 40, 64
    prompt = torch.tensor([[3]])
    stopped, differs = 0, 0
    for threshold in (0.6, 0.9, 0.99):
        for patience, m in ((1, 3), (2, 6)):
            opt = SamplerOptions(stop_confidence=threshold, stop_patience=patience, stop_min_tokens=m)
            official = OfficialStop(-1, threshold, patience, m)
            if name == "ar":
                want = official_ar(model, prompt, N, official)
            elif name == "setdiffusion":
                want = official_setdiffusion(model, prompt, N, cfg.smax // 2, L, math.inf, stop=official)
            elif name == "mdlm":
                want = official_mdlm_window(model, prompt, N, 4, L, math.inf, stop=official)[0]
            else:
                want = official_bd3lm_generate(model, prompt, N, 4, L, math.inf, stop=official)
            hook = sampling.EntropyStop()
            settings = Settings(N, **kw, paper=PaperMode(official=True, seq_len=L, options=opt))
            got, _ = mod.generate(model, prompt, cfg, settings, stop=hook)
            ids = [t for t in got[0].tolist() if t != MASK]
            assert ids == [t for t in want[0].tolist() if t != MASK], (threshold, patience, m)
            assert hook.cut(0) == official.truncate_idx, (threshold, patience, m)
            kept = ids[:official.truncate_idx]
            settings = Settings(N, **kw, paper=PaperMode(seq_len=L, options=opt))
            default, _ = mod.generate(model, prompt, cfg, settings)
            stopped += official.truncate_idx is not None
            differs += [t for t in default[0].tolist() if t != MASK] != kept
    assert stopped >= 3 and (differs > 0) == (name != "ar")


def test_official_stop_hook_equals_the_official_criteria_on_random_checks():
    """The paper-mode stop hook (EOS stop, then OfficialConfidenceStop, then the entropy rule) == the
    official criteria (OfficialStop) on random decoding histories: tokens decoded out of position order
    within a window, checked at growing window ends, EOS among them; the same check stops, with the same
    cut (the EOS stop's at its EOS column + 1)."""
    g, C, fired = torch.Generator().manual_seed(0), 31, {"eos": 0, "confidence": 0, "entropy": 0}
    for trial in range(300):
        threshold, patience, m = [0.2, 0.5][trial % 2], 1 + trial % 3, trial % 5
        w, entropy = 6 + trial % 4, [0.0, 1.2][trial // 2 % 2]
        opt = SamplerOptions(stop_confidence=threshold, stop_patience=patience, stop_min_tokens=m,
                             stop_entropy=entropy, stop_entropy_window=w)
        tokens = torch.full((1, C), MASK)
        tokens[0, 0] = 3
        eos = unconditional.eos_stop(0, max(m, 1), MASK)
        hook = sampling.EntropyStop(eos)
        track = start(opt, tokens.clone(), torch.ones(1, C, dtype=torch.bool), MASK)
        hook.attach(track, tokens[:, :1], None, MASK, official=True)
        track.confs = torch.full((1, C), math.nan)
        official = OfficialStop(0, threshold, patience, m, entropy or -1.0, w)
        order = (torch.arange(1, C) + torch.rand(C - 1, generator=g) * 4).argsort() + 1   # near l2r
        pool = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7])[torch.randint(0, 8, (C,), generator=g)]
        for k, c in enumerate(order.tolist()):
            tokens[0, c] = pool[c]
            track.confs[0, c - 1] = float(torch.rand(1, generator=g))
            if k % 3:
                continue
            undecided = (tokens[0] == MASK).nonzero()
            end = min((int(undecided[0]) if len(undecided) else C) + 4, C)
            conf = [1.0] + track.confs[0, :end - 1].tolist()
            ours = bool(hook(tokens, torch.tensor([end]))[0])
            assert ours == official(tokens[0, :end].tolist(), conf), (trial, k)
            if ours:
                cut = eos.at[0] + 1 if 0 in eos.at else hook.cut(0)
                assert cut == official.truncate_idx, (trial, k)
                kind = "eos" if 0 in eos.at else "confidence" if hook.confidence.cuts[0] >= 0 else "entropy"
                fired[kind] += 1
                break
    assert min(fired.values()) >= 10, fired


def official_mdlm_infill(model, prompt, S, L, threshold, penalty):
    """The official MDLM infilling (align_inputs_to_blocks, P <= L): the prompt padded with [MASK] to L,
    the blocks of S from S floor(first [MASK]/S), as many as hold one, each decoded to its last prompt
    column by bidirectional forwards over [0, L) at positions 0.., the repetition penalty (without the
    right-context flag) reading the whole canvas (hf_penalty)."""
    x, P = prompt[0].tolist(), prompt.shape[1]
    x += [MASK] * (L - P)
    first = x.index(MASK) // S * S
    for b in range(len({c // S for c in range(P) if x[c] == MASK})):
        s, end = first + b * S, min(first + (b + 1) * S, P)
        while MASK in x[s:end]:
            logits = model(torch.tensor([x]), torch.arange(L)[None], torch.ones(L, L, dtype=torch.bool))
            decode_block(x, s, end, hf_penalty(logits[:, s:], x, penalty), threshold)
    return torch.tensor([x[:P]])


@pytest.mark.parametrize("name", ["setdiffusion", "mdlm", "bd3lm"])
def test_official_infilling_penalty_without_the_context_flag_equals_the_official_rule(name):
    """Infilling with a repetition penalty, penalize_context off (sample.py --repetition-penalty with a
    [MASK] prompt): paper mode penalises what each official sampler's running_generation holds (MDLM its
    whole canvas, BD3-LM its canvas up to the block it decodes, Set Diffusion its KV cache's tokens when a
    step starts, pad ids included), == the transcriptions; the default (the span decoded so far) differs."""
    mod, cfg, kw = METHODS[name]
    model, L, S = Jitter(tiny_model(33), 4), 40, 4
    g, differs = torch.Generator().manual_seed(3), 0
    for k, (a, n, c) in enumerate(((5, 6, 3), (3, 9, 4), (8, 5, 2))):
        prompt = torch.cat([torch.tensor([0]), torch.randint(1, MASK, (a,), generator=g),
                            torch.full((n,), MASK), torch.randint(1, MASK, (c,), generator=g),
                            torch.tensor([0])])[None]                          # BOS = EOS = the pad id
        for tau, p in ((math.inf, 3.0), (0.6, 3.0), (math.inf, 0.4)):
            if name == "setdiffusion":
                want = official_setdiffusion(model, prompt, 0, cfg.smax // 2, L, tau, penalty=p)
            elif name == "mdlm":
                want = official_mdlm_infill(model, prompt, S, L, tau, p)
            else:
                want = official_bd3lm_infill(model, prompt, S, L, tau, p)
            options = SamplerOptions(repetition_penalty=p)
            settings = Settings(0, tau, **{**kw, **({"mdlm_block": S} if name == "mdlm" else {})},
                                paper=PaperMode(official=True, seq_len=L, options=options))
            got, _ = mod.generate(model, prompt, cfg, settings)
            assert torch.equal(got, want), (k, tau, p)
            default = mod.generate(model, prompt, cfg, dataclasses.replace(
                settings, paper=dataclasses.replace(settings.paper, official=False)))[0]
            differs += not torch.equal(default, want)
    assert differs
