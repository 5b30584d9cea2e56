"""The math the project rests on, checked on tiny models on the CPU: python -m pytest -q test_all.py

Identities rather than smoke tests: masks against literals and against each other, cached == uncached,
batched == alone, a method reducing to another at its limit, samplers against naive re-implementations.
"""
import math

import pytest
import torch

import ar
import bd3lm
import mdlm
import setdiffusion as sd
from model import KVCache, ModelConfig, Transformer
from sampling import PaperMode, Settings

# ----------------------------------------------------------------------- tiny models (tests/ imports these)

V, MASK = 24, 23                      # tiny vocabulary; the last id is [MASK]


def tiny_model(seed=0, **kw):
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size=V, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, **kw)).eval()
    with torch.no_grad():
        model.embed_tokens.weight.mul_(20)          # peaked distributions: thresholds and argmax are decisive
    return model


class Jitter(torch.nn.Module):
    """A model plus a fixed random logit offset per position, so that confidences differ from slot to slot and
    a threshold decodes some of a window but not all (the tiny model alone is about equally sure
    everywhere)."""

    def __init__(self, model, seed=0):
        super().__init__()
        self.model, self.new_cache = model, model.new_cache
        self.register_buffer("offset", torch.randn(64, V, generator=torch.Generator().manual_seed(seed)) * 3)

    def forward(self, idx, pos=None, mask=None, cache=None, last=None):
        if pos is None:
            start = cache.length if cache is not None else 0
            pos = torch.arange(start, start + idx.shape[1], device=idx.device).expand(idx.shape)
        out = self.model(idx, pos, mask, cache) + self.offset[pos]             # (B, T, V)
        return out if last is None else out[:, -last:]


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


# name -> (method module, its config, the Settings fields the tests decode it with)
METHODS = {
    "ar": (ar, ar.ARConfig(MASK), {}),
    "mdlm": (mdlm, mdlm.MDLMConfig(MASK), {"mdlm_block": 4}),
    "bd3lm": (bd3lm, bd3lm.BD3LMConfig(MASK, 4), {}),
    "setdiffusion": (sd, sd.SetDiffusionConfig(MASK, 6), {}),
}


def left_padded(lens, seed=1):
    """Random prompts of the given lengths, and their left-padded batch (B, P) with its prompt_mask (B, P)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, MASK, (n,), generator=g) for n in lens]
    P = max(lens)
    batch = torch.stack([torch.cat([torch.zeros(P - len(p), dtype=torch.long), p]) for p in prompts])
    return prompts, batch, torch.arange(P)[None] >= torch.tensor([[P - n] for n in lens])


def sample_order(B: int, L: int, smax: int, generator=None):
    """Set Diffusion's generation orders (B, L) of rows with no prompt and no padding: row b lists the
    positions in the order they are revealed (setdiffusion.order, targets alone)."""
    none = torch.zeros(B, L, dtype=torch.bool)
    return sd.order(torch.zeros(B, L, dtype=torch.long), smax, none, none, generator)


def partial_steps(step, prompt_len: int) -> list[bool]:
    """Per step of a batch-1 run: did tau decode more than one token but not every [MASK] it could see (the
    window's, or the block's)? From the step matrix alone: a step k decoded the columns with step == k."""
    s = step[0, prompt_len:]
    return [1 < int((s == k).sum()) < int((s >= k).sum()) for k in range(int(s.max()) + 1)]


# ----------------------------------------------------------------------------- the transformer


def test_explicit_causal_mask_equals_none():
    model, x = tiny_model(), torch.randint(0, V, (2, 12))
    torch.testing.assert_close(model(x), model(x, mask=causal(12)))


@pytest.mark.parametrize("layout", ["causal", "block", "two-stream"])
def test_cached_incremental_equals_full(layout):
    """Feeding a sequence chunk by chunk through the KV cache gives the full forward's logits."""
    model, L, S = tiny_model(1), 12, 3
    x, pos = torch.randint(0, V, (2, L)), torch.randint(0, 50, (2, L))
    if layout == "causal":
        mask, chunks = causal(L), [5, 1, 6]
    elif layout == "block":                     # BD3-LM's clean stream: block-causal, chunks = blocks
        blk = torch.arange(L) // S
        mask, chunks = blk[:, None] >= blk[None], [S] * (L // S)
    else:                                       # Set Diffusion in rank space: clean ranks, then all queries
        L2 = L // 2
        x, pos, mask, chunks = x, torch.cat([pos[:, :L2]] * 2, 1), sd.attention_mask(None, L2), [2, 4, L2]
    full = model(x, pos, mask)
    cache, out, start = KVCache(2, 2, L), [], 0
    for n in chunks:
        end = start + n
        out.append(model(x[:, start:end], pos[:, start:end], mask[start:end, :end], cache))
        cache.commit(n)
        start = end
    torch.testing.assert_close(torch.cat(out, 1), full)


def test_permutation_equivariance():
    """Permuting tokens, positions and the mask permutes the logits (what Set Diffusion relies on)."""
    model, L = tiny_model(2), 10
    x, pos, mask = torch.randint(0, V, (1, L)), torch.arange(L)[None], causal(L)
    perm = torch.randperm(L)
    out = model(x[:, perm], pos[:, perm], mask[perm][:, perm])
    torch.testing.assert_close(out, model(x, pos, mask)[:, perm])


# the guards of the model and the samplers: a new one is a row (what is called, the error's words)
GUARDS = [(lambda: tiny_model()(torch.zeros(1, 5, dtype=torch.long), cache=KVCache(2, 1, 4)), "overflow"),
          (lambda: ModelConfig(n_head=4, n_kv_head=3), "n_head"),
          (lambda: mdlm.generate(tiny_model(), torch.zeros(1, 3, dtype=torch.long), mdlm.MDLMConfig(MASK),
                                 Settings(4, mdlm_block=0)), "MDLM block")]


@pytest.mark.parametrize("bad, words", GUARDS)
def test_bad_input_is_refused_in_one_line(bad, words):
    with pytest.raises(ValueError, match=words) as e:
        bad()
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- masks

def test_bd3lm_mask_with_block_one_is_strict_prefix():
    """S = 1: clean->clean causal, noisy->clean strictly earlier, noisy->noisy only itself (an AR pattern);
    and Set Diffusion's rank-space mask is exactly that."""
    expected = torch.tensor([[1, 0, 0, 0, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0, 0, 0, 0],
                             [1, 1, 1, 0, 0, 0, 0, 0],
                             [1, 1, 1, 1, 0, 0, 0, 0],
                             [0, 0, 0, 0, 1, 0, 0, 0],
                             [1, 0, 0, 0, 0, 1, 0, 0],
                             [1, 1, 0, 0, 0, 0, 1, 0],
                             [1, 1, 1, 0, 0, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(bd3lm.attention_mask(bd3lm.BD3LMConfig(MASK, 1), 4), expected)
    assert torch.equal(sd.attention_mask(sd.SetDiffusionConfig(MASK), 4), expected)


def test_bd3lm_mask_blocks():
    m = bd3lm.attention_mask(bd3lm.BD3LMConfig(MASK, 2), 4).int()
    assert m[6].tolist() == [1, 1, 0, 0, 0, 0, 1, 1]   # noisy token of block 1: clean block 0, its own block
    assert m[1].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]   # clean token of block 0 sees its whole block


def test_bd3lm_one_block_is_mdlm():
    """BD3-LM with S = L gives MDLM's noise draw, loss and NELBO from the same generator seed (every row holds
    a prompt token, so BD3-LM's training rule forces no extra [MASK])."""
    model, B, L = tiny_model(3), 3, 16
    x0 = torch.randint(0, MASK, (B, L))
    prompt_mask = torch.arange(L)[None].expand(B, L) < torch.tensor([[2], [4], [1]])
    pad_mask = torch.arange(L)[None].expand(B, L) >= torch.tensor([[16], [12], [14]])
    target, seed = ~(prompt_mask | pad_mask), lambda: torch.Generator().manual_seed(0)
    for a, b in zip(mdlm.noise(x0, mdlm.MDLMConfig(MASK), target, seed()),
                    bd3lm.noise(x0, bd3lm.BD3LMConfig(MASK, L), target, seed())):
        assert torch.equal(a, b)                                            # the same xt, the same t
    for nelbo in (False, True):
        a = mdlm.loss(model, x0, mdlm.MDLMConfig(MASK, nelbo=nelbo), prompt_mask, pad_mask, seed())[0]
        b = bd3lm.loss(model, x0, bd3lm.BD3LMConfig(MASK, L, nelbo=nelbo), prompt_mask, pad_mask, seed())[0]
        torch.testing.assert_close(a, b)
    a = mdlm.nll(model, x0, mdlm.MDLMConfig(MASK), prompt_mask, pad_mask, seed())
    b = bd3lm.nll(model, x0, bd3lm.BD3LMConfig(MASK, L), prompt_mask, pad_mask, seed())
    torch.testing.assert_close(a, b)


def test_bd3lm_noise_forces_masks_only_in_blocks_of_targets():
    """Training: every block made entirely of targets holds a [MASK]; a block with prompt is not forced;
    the prompt is never masked; one t per block. Eval (train=False) forces nothing."""
    x0, S = torch.randint(0, MASK, (512, 12)), 4
    target = torch.ones_like(x0, dtype=torch.bool)
    target[:, :3] = False                                                   # block 0 holds the prompt
    cfg = bd3lm.BD3LMConfig(MASK, S, eps=1e-4)
    xt, t = bd3lm.noise(x0, cfg, target, torch.Generator().manual_seed(0))
    assert (xt[:, :3] == x0[:, :3]).all()
    blk = (xt == MASK).view(512, 3, S)
    assert blk[:, 1:].any(-1).all()
    assert not blk[:, 0].any(-1).all()                                      # not forced: some left clean
    assert (t.view(512, 3, S) == t.view(512, 3, S)[..., :1]).all()          # one t per block
    small = t.view(512, 3, S)[:, 1:, 0] < 0.01                        # forced blocks: r + 1 ~ U{1..S} masks
    counts = blk[:, 1:].sum(-1)[small]
    assert set(counts.tolist()) == {1, 2, 3, 4}
    xt, t = bd3lm.noise(x0, cfg, target, torch.Generator().manual_seed(0), train=False)
    assert not (xt == MASK).view(512, 3, S)[:, 1:].any(-1).all()           # q exactly: empty blocks happen


def test_subs_copies_clean_tokens_and_never_predicts_mask():
    logits, xt = torch.randn(2, 5, V), torch.tensor([[1, MASK, 3, MASK, 5]] * 2)
    logp = mdlm.subs(logits, xt, MASK)
    assert (logp[..., MASK] == -math.inf).all()
    assert (logp[0, 0, 1] == 0) and (logp[0, 0, 2] == -math.inf)             # clean: copied through
    torch.testing.assert_close(logp[:, 1].exp().sum(-1), torch.ones(2))


# ----------------------------------------------------------------------------- Set Diffusion's orders

def test_schedule_constants_match_the_official_table():
    for L, smax, b, k in [(1024, 8, 0.00776, 0.336), (1024, 32, 0.03033, 0.347), (128, 32, 0.2013, 0.450)]:
        _, b_, k_ = sd.schedule(L, smax)
        assert abs(b_ - b) < 5e-5 and abs(k_ - k) < 5e-3


def test_orders():
    g = torch.Generator().manual_seed(0)
    assert torch.equal(sample_order(4, 32, 2, g), torch.arange(32).expand(4, 32))   # smax = 2: AR
    for smax in (4, 8, 16):
        sigma = sample_order(256, 40, smax, g)                          # (B, L) positions by reveal
        assert torch.equal(sigma.sort(1).values, torch.arange(40).expand(256, 40))   # permutations
        rank = sigma.argsort(1)                                             # (B, L) reveal rank of j
        # a token is never revealed before a token more than smax - 1 positions to its left
        i, j = torch.meshgrid(torch.arange(40), torch.arange(40), indexing="ij")
        far = j - i >= smax
        assert (rank[:, i[far]] < rank[:, j[far]]).all()
        assert (rank - torch.arange(40)).abs().float().mean() > 0.3         # and it does shuffle locally
    for bad in (1, 41):                                     # the config's rules: smax in [2, L]
        with pytest.raises(ValueError):
            sd.SetDiffusionConfig(MASK, bad).check(40)


def test_order_puts_prompt_first_and_padding_last():
    x0 = torch.zeros(2, 10, dtype=torch.long)
    prompt_mask, pad_mask = torch.zeros(2, 10, dtype=torch.bool), torch.zeros(2, 10, dtype=torch.bool)
    prompt_mask[:, :3], pad_mask[:, 8:] = True, True
    sigma = sd.order(x0, 4, prompt_mask, pad_mask, torch.Generator().manual_seed(0))
    assert (sigma[:, :3] == torch.arange(3)).all() and (sigma[:, 8:] == torch.arange(8, 10)).all()


# ----------------------------------------------------------------------------- samplers

@pytest.mark.parametrize("name", list(METHODS))
@pytest.mark.parametrize("threshold", [math.inf, 0.5])
def test_sampler_equals_its_reference(name, threshold):
    """Each batched, cached sampler against its method's generate_reference (batch 1, no cache, the whole
    forward recomputed every step), token for token and step for step, at threshold inf (one token a step) and
    0.5 (tau picks inside a window or block; AR decodes one token a step whatever tau)."""
    mod, cfg, kw = METHODS[name]
    model, N, partial = Jitter(tiny_model(4)), 11, []
    for P in (3, 6):
        prompt = torch.randint(0, MASK, (1, P), generator=torch.Generator().manual_seed(P))
        settings = Settings(N, threshold, **kw)
        tokens, stats = mod.generate(model, prompt, cfg, settings)
        x, ref = mod.generate_reference(model, prompt, cfg, settings)
        assert torch.equal(tokens, x) and torch.equal(stats["step"], ref["step"])
        assert stats["nfe"] == ref["nfe"]
        assert torch.equal(tokens[:, :P], prompt) and not (tokens == MASK).any()
        if threshold == math.inf:                        # one token per forward pass
            assert stats["nfe"] == N and stats["tokens_per_step"] == 1.0
        partial += partial_steps(stats["step"], P)
    assert any(partial) == (threshold != math.inf and name != "ar")   # tau = 0.5 really selects some, not all


def test_one_sampler_interface():
    """Every method's generate and generate_reference take the same parameters, in the same order; what
    differs between methods is data on the method (its KNOBS, EXACT_NLL, CAN_INFILL, MASK_STREAMS,
    HF_GENERATE, OFFICIAL_EXCLUDES)."""
    import inspect
    names = {f: [list(inspect.signature(getattr(m, f)).parameters) for m, _, _ in METHODS.values()]
             for f in ("generate", "generate_reference", "loss", "nll", "mask_mod", "attention_mask")}
    for f, params in names.items():
        assert all(p == params[0] for p in params), (f, params)
    assert names["generate"][0] == ["model", "prompt", "cfg", "settings", "prompt_mask", "stop", "generator"]
    paper = {f"paper.{f}" for f in PaperMode.__dataclass_fields__}          # paper mode's: "paper.official"
    fields = set(Settings.__dataclass_fields__) - {"paper"} | paper
    for mod, cfg, _ in METHODS.values():
        assert mod.KNOBS <= fields and {"max_new_tokens", "paper.options"} <= mod.KNOBS
        flags = ("EXACT_NLL", "CAN_INFILL", "HF_GENERATE", "OFFICIAL_EXCLUDES")
        assert {type(getattr(mod, k)) for k in flags} == {bool}
        # the dense training mask train.py's memory check counts: MASK_STREAMS x L wide (AR's: none, causal)
        assert mod.attention_mask(cfg, 5).shape == (5 * (mod.MASK_STREAMS or 1),) * 2


@pytest.mark.parametrize("name", list(METHODS))
def test_batched_equals_each_row_alone(name):
    mod, cfg, kw = METHODS[name]
    model, N = Jitter(tiny_model(5), 1), 9
    prompts, batch, prompt_mask = left_padded([2, 7, 5])
    P, settings = batch.shape[1], Settings(N, 0.5, **kw)
    tokens, stats = mod.generate(model, batch, cfg, settings, prompt_mask)
    for b, p in enumerate(prompts):
        alone, st = mod.generate(model, p[None], cfg, settings)
        assert torch.equal(tokens[b, P - len(p):], alone[0])
        assert torch.equal(stats["step"][b, P - len(p):], st["step"][0])


@pytest.mark.parametrize("window", [0, 6])
def test_commits_are_prefixes_of_drawable_orders(window):
    """Every query of the sampler sees a context the loss trained: a token is decoded before a masked token to
    its left only when that token is fewer than smax positions away (the window spans W <= smax), the rule
    that makes a committed set, in commit order, the first tokens of an order the schedule draws with
    positive probability (docs/reading.md). Checked on every pair of generated columns, for windows smax / 2
    and smax, at thresholds that decode out of order."""
    cfg = METHODS["setdiffusion"][1]
    model, out_of_order = Jitter(tiny_model(7), 2), 0
    for seed, threshold in ((0, 0.3), (1, 0.1)):
        prompt = torch.randint(0, MASK, (4, 3), generator=torch.Generator().manual_seed(seed))
        settings = Settings(24, threshold, setdiffusion_window=window)
        step = sd.generate(model, prompt, cfg, settings)[1]["step"][:, 3:]
        i, j = torch.triu_indices(24, 24, 1)                          # every pair of columns i < j
        early = step[:, j] < step[:, i]                               # (B, pairs) j decoded before i
        assert ((j - i)[None].expand_as(early)[early] < cfg.smax).all()
        out_of_order += int(early.sum())
    assert out_of_order > 0                                           # the rule was really exercised


@pytest.mark.parametrize("name", ["mdlm", "bd3lm", "setdiffusion"])
def test_masks_inside_the_prompt_are_filled_as_the_reference_fills_them(name):
    """[MASK]s between visible tokens, with and without new tokens after them: generate == generate_reference
    (Set Diffusion caches both sides first; MDLM and BD3-LM decode block-aligned from the block of the first
    [MASK]), the visible tokens kept, every [MASK] filled."""
    mod, cfg, kw = METHODS[name]
    model = tiny_model(6)
    prompt = torch.tensor([[1, 2, 3, 4, 5, MASK, MASK, MASK, MASK, MASK, 7, 8, 9]])
    for N in (0, 2):
        tokens, stats = mod.generate(model, prompt, cfg, Settings(N, 0.5, **kw))
        x, ref = mod.generate_reference(model, prompt, cfg, Settings(N, 0.5, **kw))
        assert torch.equal(tokens, x) and torch.equal(stats["step"], ref["step"])
        visible = prompt != MASK                                                  # (1, 13)
        assert torch.equal(tokens[:, :13][visible], prompt[visible]) and not (tokens == MASK).any()
        assert stats["nfe"] == ref["nfe"] and int(stats["n_gen"][0]) == 5 + N


class QueryLogits(torch.nn.Module):
    """A model that records, for every forward holding [MASK] queries, the logits of each query by
    position."""

    def __init__(self, model):
        super().__init__()
        self.model, self.new_cache, self.steps = model, model.new_cache, []

    def forward(self, idx, pos, mask=None, cache=None, last=None):
        out = self.model(idx, pos, mask, cache)                                  # (1, T, V)
        if (idx == MASK).any():
            self.steps.append({int(p): o for i, p, o in zip(idx[0], pos[0], out[0]) if i == MASK})
        return out if last is None else out[:, -last:]


@pytest.mark.parametrize("window", [0, 1, 2, 6])
def test_setdiffusion_reference_logits_equal_generate(window):
    """Stronger than equal tokens: at every step each query of the reference has the logits of the same query
    in generate (to 1e-5; float noise is ~2e-7), so the cache + fused commits hold exactly the reference's
    clean stream in commit order (committing a step's tokens right to left instead moves them by ~3e-3); at
    the default window (smax / 2) and at any other W in [1, smax], the reference's argument too. An unscaled
    model, whose logits depend on the context more than tiny_model's, at tau = 0.2: 1 to 3 tokens a step."""
    cfg = METHODS["setdiffusion"][1]
    prompt = torch.randint(0, MASK, (1, 4), generator=torch.Generator().manual_seed(4))
    runs = []
    for sampler in (sd.generate, sd.generate_reference):
        torch.manual_seed(4)
        model = QueryLogits(Jitter(Transformer(ModelConfig(vocab_size=V, n_layer=2, n_head=4, n_kv_head=2,
                                                           n_embd=32)).eval()))
        settings = Settings(12, 0.2, setdiffusion_window=window)
        runs.append((*sampler(model, prompt, cfg, settings), model.steps))
    (tokens, stats, fast), (x, ref_stats, ref) = runs
    assert torch.equal(tokens, x) and torch.equal(stats["step"], ref_stats["step"])
    assert len(fast) == len(ref) == stats["nfe"] and (window or 1 < stats["tokens_per_step"] < 3)
    for f, r in zip(fast, ref):
        for p, logits in r.items():
            torch.testing.assert_close(f[p], logits, rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- learning

@pytest.mark.parametrize("name", list(METHODS))
def test_loss_drops_on_a_tiny_dataset(name):
    """Each objective can fit 8 fixed sequences: the loss falls well below its start."""
    mod, cfg, _ = METHODS[name]
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=V, n_layer=2, n_head=4, n_kv_head=2, n_embd=32))
    base = torch.randint(0, 10, (8, 1))
    x0 = (base + torch.arange(16)) % 20                  # 8 arithmetic sequences, a prompt of 2
    prompt_mask = torch.arange(16)[None].expand(8, 16) < 2
    opt = torch.optim.AdamW(model.parameters(), lr=6e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(80):
        loss = mod.loss(model, x0, cfg, prompt_mask, None, g)[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.3 * sum(losses[:10]) / 10, (losses[:3], losses[-3:])
