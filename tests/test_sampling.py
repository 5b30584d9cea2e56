"""The sampler options (sampling.py) on literal logits, and every sampler with them == naive."""
import math

import pytest
import torch

import sampling
from sampling import PaperMode, SamplerOptions, Settings
from helpers import MASK, METHODS, left_padded, naive_generate, tiny_model

EOS = 0


def track_for(opt, tokens, counted, n, shown=None):
    """A Track on literal tensors: tokens/counted (B, T), n (B, K) the slots' index and shown (B, K) the
    visible new tokens left of each slot (default n: nothing left of a slot still [MASK])."""
    B = tokens.shape[0]
    t = sampling.Track(opt, counted, torch.zeros(B, dtype=torch.long), torch.zeros(B, dtype=torch.long),
                       torch.zeros(B, dtype=torch.bool), MASK)
    t.tokens, t.n, t.shown = tokens, n, n if shown is None else shown
    return t


def test_each_option_on_literal_logits():
    """Repetition penalty: positive logits divided, negative multiplied, for counted tokens; the exponential
    length penalty boosts EOS after its start whatever its sign (HF: eos += |eos| * (factor^(n - start) - 1)
    when n > start); min_new_tokens forbids EOS; the nucleus keeps the smallest set reaching top_p."""
    logits = torch.tensor([[[2.0, -1.0, 3.0, 0.5]]])                  # (1, 1, 4)
    tokens = torch.tensor([[0, 1, 3, 3]])
    counted = torch.tensor([[True, True, False, True]])             # token 3 counted once, token 2 never seen
    out = sampling.process(logits, track_for(SamplerOptions(repetition_penalty=2.0), tokens, counted,
                                             torch.zeros(1, 1, dtype=torch.long)))
    assert out.tolist() == [[[1.0, -2.0, 3.0, 0.25]]]
    nothing = torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.bool)
    logits = torch.tensor([[[-2.0, 1.0], [-2.0, 1.0], [-2.0, 1.0], [4.0, 1.0]]])    # EOS = 0, 4 slots
    opt = SamplerOptions(length_penalty=(4, 1.5), eos_id=EOS)        # n: new tokens before each slot
    out = sampling.process(logits, track_for(opt, *nothing, torch.tensor([[3, 4, 6, 6]])))
    torch.testing.assert_close(out[0, :, 0], torch.tensor([-2.0, -2.0, -2.0 + 2 * (1.5 ** 2 - 1),
                                                           4.0 * 1.5 ** 2]))
    assert out[0, :, 1].tolist() == [1.0] * 4
    opt = SamplerOptions(min_new_tokens=2, eos_id=EOS)
    out = sampling.process(torch.zeros(1, 3, 4), track_for(opt, *nothing, torch.tensor([[0, 1, 2]])))
    assert out[0, :, EOS].tolist() == [-math.inf, -math.inf, 0.0] and (out[..., 1:] == 0).all()
    probs = torch.tensor([[0.1, 0.5, 0.3, 0.1]])
    torch.testing.assert_close(sampling.nucleus(probs, 0.75), torch.tensor([[0.0, 0.625, 0.375, 0.0]]))
    torch.testing.assert_close(sampling.nucleus(probs, 0.4), torch.tensor([[0.0, 1.0, 0.0, 0.0]]))


def test_choose_greedy_and_sampled_frequencies_and_confidence():
    logits = torch.log(torch.tensor([[0.1, 0.5, 0.3, 0.1]]))
    y, conf = sampling.choose(logits)
    assert y.tolist() == [1] and conf.item() == pytest.approx(0.5)
    track = track_for(SamplerOptions(top_p=0.75), torch.zeros(1, 1, dtype=torch.long), None, None)
    g = torch.Generator().manual_seed(0)
    ys = torch.stack([sampling.choose(logits, 1.0, g, track)[0] for _ in range(4000)])
    freq = torch.bincount(ys.flatten(), minlength=4).float() / 4000
    assert freq[0] == 0 and freq[3] == 0 and abs(freq[1] - 0.625) < 0.03          # nucleus, renormalised
    y, conf = sampling.choose(logits * 2, 2.0, g)                                   # temperature 2 undoes x2
    assert conf.item() == pytest.approx([0.1, 0.5, 0.3, 0.1][y.item()], rel=1e-5)


def test_low_confidence_stop_counts_consecutive_tokens_after_min():
    opt = SamplerOptions(stop_confidence=0.1, stop_patience=2, stop_min_tokens=1)
    t = track_for(opt, torch.zeros(2, 1, dtype=torch.long), None, torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]]))
    conf = torch.tensor([[0.01, 0.05, 0.5, 0.05], [0.01, 0.05, 0.05, 0.9]])
    decoded = torch.tensor([[True, True, True, True], [True, True, False, True]])
    sampling.early_stop(t, conf, decoded)
    # row 0: slot 0 is under the minimum, 1 strikes, 2 resets, 3 strikes: 1 strike. Row 1: 1 strikes, 2 not
    # decoded, 3 resets.
    assert t.stopped.tolist() == [False, False] and t.strikes.tolist() == [1, 0]
    t.n = torch.tensor([[4], [4]])
    sampling.early_stop(t, torch.tensor([[0.01], [0.01]]), torch.tensor([[True], [True]]))
    assert t.stopped.tolist() == [True, False]


@pytest.mark.parametrize("bad", [dict(top_p=0.0), dict(top_p=1.5), dict(top_p=0.9, temperature=0.0),
                                 dict(repetition_penalty=-1.0), dict(length_penalty=(80, -1.1), eos_id=0),
                                 dict(length_penalty=(80, 1.1)), dict(stop_confidence=1.5),
                                 dict(temperature=-1.0)])
def test_contradictory_options_get_one_clear_error(bad):
    temperature = bad.pop("temperature", 1.0)
    with pytest.raises(ValueError) as e:                  # the settings' check runs the options' check too
        options = SamplerOptions(**bad)
        sampling.check_settings(Settings(temperature=temperature, paper=PaperMode(options=options)))
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- the samplers with options on

class Processed(torch.nn.Module):
    """A model whose logits already went through sampling.process: what a naive sampler with options sees."""

    def __init__(self, model, opt, first, shift):
        super().__init__()
        self.model, self.opt, self.first, self.shift = model, opt, first, shift

    def forward(self, x, pos=None, mask=None):
        logits = self.model(x, pos, mask).float()
        logits[..., MASK] = -math.inf                          # as every sampler does first
        pos = torch.arange(x.shape[1])[None] if pos is None else pos
        counted = (x != MASK) & (self.opt.penalize_context | (pos >= self.first))
        n = pos + self.shift - self.first                     # AR: the logits at i predict the token at i + 1
        # the official length-penalty count: visible new tokens (not [MASK], not pad) left of each slot
        vis = (x != MASK) & (x != self.opt.pad_id) & (pos >= self.first)                 # (1, T)
        shown = (vis[:, None, :] & (pos[:, None, :] < (pos + self.shift)[:, :, None])).sum(-1)
        t = track_for(self.opt, x, counted, n, shown)
        return sampling.process(logits, t)


OPTIONS = [SamplerOptions(repetition_penalty=30.0, length_penalty=(3, 1.5), min_new_tokens=2, eos_id=EOS),
           SamplerOptions(repetition_penalty=0.5, penalize_context=True, length_penalty=(1, 4.0), eos_id=EOS)]


@pytest.mark.parametrize("name", list(METHODS))
@pytest.mark.parametrize("opt", [0, 1])
def test_sampler_with_options_equals_naive_recompute(name, opt):
    mod, cfg, kw = METHODS[name]
    model, N, P, opt = tiny_model(4), 11, 4, OPTIONS[opt]
    prompt = torch.randint(0, MASK, (1, P), generator=torch.Generator().manual_seed(3))
    extra = {} if name == "ar" else {"threshold": 0.5}
    tokens, stats = mod.generate(model, prompt, cfg, Settings(N, **extra, **kw, paper=PaperMode(options=opt)))
    x, step = naive_generate(name, Processed(model, opt, P, int(name == "ar")), prompt, N,
                             extra.get("threshold", math.inf))
    assert torch.equal(tokens, x) and torch.equal(stats["step"], step)
    plain, _ = mod.generate(model, prompt, cfg, Settings(N, **extra, **kw))
    assert not torch.equal(plain, tokens)                      # the options changed something


@pytest.mark.parametrize("name", list(METHODS))
def test_batched_equals_each_row_alone_with_options(name):
    mod, cfg, kw = METHODS[name]
    model, N = tiny_model(5), 9
    opt = SamplerOptions(repetition_penalty=2.0, length_penalty=(2, 1.5), eos_id=EOS, stop_confidence=0.9,
                         stop_patience=2, stop_min_tokens=1)
    prompts, batch, prompt_mask = left_padded([2, 7, 5])
    P = batch.shape[1]
    extra = {} if name == "ar" else {"threshold": 0.5}
    settings = Settings(N, **extra, **kw, paper=PaperMode(options=opt))
    tokens, stats = mod.generate(model, batch, cfg, settings, prompt_mask)
    for b, p in enumerate(prompts):
        alone, st = mod.generate(model, p[None], cfg, settings)
        assert torch.equal(tokens[b, P - len(p):], alone[0])
        assert torch.equal(stats["step"][b, P - len(p):], st["step"][0])


def test_ar_low_confidence_stop_stops_where_the_confidences_say():
    mod, cfg, _ = METHODS["ar"]
    model, N, P = tiny_model(8), 12, 3
    prompt = torch.randint(0, MASK, (1, P), generator=torch.Generator().manual_seed(2))
    full, _ = mod.generate(model, prompt, cfg, Settings(N))
    logits = model(full[:, :-1]).float()
    logits[..., MASK] = -math.inf
    conf = torch.softmax(logits, -1).amax(-1)[0, P - 1:]                   # (N,) each new token's confidence
    thr = float(conf.detach().median())
    opt = SamplerOptions(stop_confidence=thr, stop_patience=2, stop_min_tokens=1)
    tokens, stats = mod.generate(model, prompt, cfg, Settings(N, paper=PaperMode(options=opt)))
    strikes, stop_at = 0, N
    for i, c in enumerate(conf.tolist()):
        strikes = strikes + 1 if (i >= 1 and c < thr) else 0
        if strikes >= 2:
            stop_at = i + 1
            break
    assert stop_at < N and int(stats["n_gen"][0]) == stop_at
    assert torch.equal(tokens[0, :P + stop_at], full[0, :P + stop_at])
