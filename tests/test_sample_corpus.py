"""sample.py on text-corpus checkpoints (conftest's corpus_ckpts): --prompt and --prompt-file continue [BOS] +
the prompt until EOS or --max-new-tokens, [MASK] gaps are filled in place, --show-order, --threshold and
--window, no prompt (BOS alone). Exact outputs come from "peaked" checkpoints: a huge logit on one token, so
that what a method prints follows from its decoding schedule alone."""

import pytest
import torch

from common import checkpoint, metrics
import sample
from data import byte_tokenizer
from helpers import METHODS, error_of

TOK = byte_tokenizer()
BOS, MASK = TOK.eos_id, TOK.mask_id             # a text row is [BOS] + 31 bytes, BOS = EOS (data/textfile.py)
DIFFUSION = [m for m in METHODS if m != "ar"]


@pytest.fixture
def sampled(corpus_ckpts, capsys):
    """sampled(method, *flags): (the printed samples, the summary line) of sample.py on that checkpoint."""
    def run(method, *flags):
        sample.main(["--ckpt", str(corpus_ckpts / method), "--device", "cpu", *flags])
        text, summary = capsys.readouterr().out.rsplit("\n\n[", 1)
        return text, "[" + summary.strip()
    return run


@pytest.fixture
def peak(monkeypatch):
    """peak(token): from now on the checkpoints load with 1e4 added to that token's logit (probability 1)."""
    real = checkpoint.load

    def peak(token: int):
        def load(*a, **k):
            model, *rest = real(*a, **k)
            bump = torch.zeros(model.cfg.vocab_size)
            bump[token] = 1e4
            model.register_forward_hook(lambda m, i, out: out + bump.to(out))
            return (model, *rest)
        monkeypatch.setattr(checkpoint, "load", load)
    return peak


@pytest.fixture
def calls(monkeypatch):
    """Per batch sample.py generates: its prompt ids, its number of new tokens and the tokens it got back."""
    seen, real = [], sample.respond

    def spy(*a, **k):
        out = real(*a, **k)
        seen.append({"prompts": a[5], "room": a[7].max_new_tokens, "tokens": out[1]["tokens"]})
        return out
    monkeypatch.setattr(sample, "respond", spy)
    return seen


@pytest.mark.parametrize("method", list(METHODS))
def test_prompts_continue_bos_and_the_text_until_eos_or_the_new_tokens(sampled, tmp_path, calls, peak,
                                                                       method):
    """The checkpoint's 32 new tokens cut to what fits after [BOS] + prompt; greedy repeats; a prompt file's
    prompts each; no prompt (or an empty one) is BOS alone with all that fits; a model certain of EOS replies
    nothing (the prompt's BOS, also EOS, does not stop it)."""
    text, summary = sampled(method, "--prompt", "Now is the")
    assert calls[0]["prompts"] == [[BOS, *b"Now is the"]] and calls[0]["room"] == 32 - 11
    assert text.startswith("Now is the") and summary.startswith(f"[{method}] forward passes ")
    assert sampled(method, "--prompt", "Now is the")[0] == text
    text, _ = sampled(method)
    assert calls[2]["prompts"] == [[BOS]] and calls[2]["room"] == 31
    assert sampled(method, "--prompt", "")[0] == text
    peak(ord("a"))
    assert sampled(method, "--prompt", "Now is", "--max-new-tokens", "4")[0] == "Now isaaaa"
    (tmp_path / "p.txt").write_text("Now is\nthe winter\n")
    assert sampled(method, "--prompt-file", str(tmp_path / "p.txt"), "--max-new-tokens", "4")[0] == (
        "Now isaaaa\n\nthe winteraaaa")
    assert sampled(method, "--max-new-tokens", "5")[0] == "aaaaa"
    peak(BOS)
    text, summary = sampled(method, "--prompt", "Now is", "--max-new-tokens", "8")
    assert text == "Now is"
    assert method != "ar" or summary.startswith("[ar] forward passes 1 | tokens/step 1.00 | 1 tokens")


def test_the_corpus_stop_rule_is_an_eos_decided_in_the_reply():
    """metrics.stop_rule with no task: EOS in the reply before its first [MASK], not the prompt's BOS."""
    tokens = torch.tensor([[BOS, 65, 66, BOS, 67], [BOS, 65, 66, MASK, BOS], [BOS, 65, 66, 67, 68],
                           [BOS, 65, 66, 67, BOS]])
    stop = metrics.stop_rule(TOK, None, torch.ones(4, 2, dtype=torch.bool))
    assert stop(tokens, torch.tensor([5, 5, 5, 4])).tolist() == [True, False, False, False]


@pytest.mark.parametrize("method", DIFFUSION)
def test_a_gap_is_filled_in_place_and_the_visible_tokens_stay(sampled, calls, peak, method):
    prompt = [BOS, *b"Now is the ", *[MASK] * 4, *b" of our"]
    text, summary = sampled(method, "--prompt", "Now is the {mask:4} of our", "--max-new-tokens", "0")
    assert calls[0]["prompts"] == [prompt] and calls[0]["room"] == 0
    out = calls[0]["tokens"][0].tolist()
    assert len(out) == len(prompt) and MASK not in out                            # every [MASK] filled
    assert [t for t, p in zip(out, prompt) if p != MASK] == [p for p in prompt if p != MASK]
    assert text.startswith("Now is the ") and text.endswith(" of our")
    assert summary.endswith(" 4 tokens")                                         # the 4 masks, nothing after
    peak(ord("a"))
    for new, reply in (("0", ""), ("2", "aa")):
        assert sampled(method, "--prompt", "Now {mask:3} winter", "--max-new-tokens", new)[0] == (
            "Now aaa winter" + reply)
    assert sampled(method, "--prompt", "Now <|mask|><|mask|> winter", "--max-new-tokens", "0")[0] == (
        "Now aa winter")


@pytest.mark.parametrize("method, flags, shown, per_step", [
    ("ar", [], "Now is[0]a[1]a[2]a[3]a[4]a[5]a[6]a[7]a", "1.00"),
    # tau 0.5 decodes the whole window of W = 2 every step: 8 tokens in 4 steps
    ("setdiffusion", ["--threshold", "0.5", "--window", "2"], "Now is[0]aa[1]aa[2]aa[3]aa", "2.00"),
    ("mdlm", ["--threshold", "0.5"], "Now is[0]aaaaaaaa", "8.00"),       # MDLM's block of 32 holds all 8
    # BD3-LM's blocks of 4: the prompt (7 tokens) ends one column into its block, then a block of 4, then 3
    ("bd3lm", ["--threshold", "0.5"], "Now is[0]a[1]aaaa[2]aaa", "2.67"),
])
def test_show_order_threshold_and_window_follow_the_schedule(sampled, peak, method, flags, shown, per_step):
    peak(ord("a"))
    text, summary = sampled(method, "--prompt", "Now is", "--max-new-tokens", "8", "--show-order", *flags)
    assert text == shown and f"tokens/step {per_step} | 8 tokens" in summary


def test_window_is_set_diffusion_only(corpus_ckpts):
    argv = ["--ckpt", str(corpus_ckpts / "mdlm"), "--prompt", "Now", "--window", "2"]
    assert error_of(sample.main, argv) == "error: --window 2: only Set Diffusion has a window"
