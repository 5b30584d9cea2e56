"""sample.py on checkpoints trained on a corpus (--data text:PATH here; shakespeare, owt and lm1b take the
same path): --prompt and --prompt-file continue [BOS] + the prompt until EOS or --max-new-tokens, [MASK] gaps
are filled in place by the diffusion methods (AR refuses them in one line), --show-order, --threshold and
--window, no prompt (BOS alone), the EOS stop rule; and eval.py's default task on such a checkpoint (the
likelihood). Exact outputs come from the checkpoints made "peaked": a huge logit added to one token, so that
every method is certain of that token everywhere and what it prints follows from its decoding schedule alone.
python -m pytest -q tests/test_sample_corpus.py
"""
import json
import re

import pytest
import torch

from common import checkpoint
from common import replies
import eval as evaluate
import sample
import test_shakespeare_eval
from data import byte_tokenizer
from helpers import error_of
from test_shakespeare_eval import METHODS

# the fixture: a tiny text and one checkpoint per method (context 32, 3 steps)
run = test_shakespeare_eval.run

TOK = byte_tokenizer()
BOS, MASK = TOK.eos_id, TOK.mask_id             # a text row is [BOS] + 31 bytes, BOS = EOS (data/textfile.py)
DIFFUSION = [m for m in METHODS if m != "ar"]


def sampled(run, capsys, method, *flags) -> tuple[str, str]:
    """(the printed samples, the summary line) of sample.py on the method's checkpoint."""
    sample.main(["--ckpt", str(run / method), "--device", "cpu", *flags])
    text, summary = capsys.readouterr().out.rsplit("\n\n[", 1)
    return text, "[" + summary.strip()


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


# ----------------------------------------------------------------------------- --prompt, --prompt-file

@pytest.mark.parametrize("method", METHODS)
def test_prompt_is_bos_then_the_text_and_greedy_repeats(run, capsys, calls, method):
    text, summary = sampled(run, capsys, method, "--prompt", "Now is the")
    assert calls[0]["prompts"] == [[BOS, *b"Now is the"]]
    assert calls[0]["room"] == 32 - 11                  # the checkpoint's 32 new tokens, cut to what fits
    assert text.startswith("Now is the") and summary.startswith(f"[{method}] forward passes ")
    assert sampled(run, capsys, method, "--prompt", "Now is the")[0] == text     # greedy: the same text again


@pytest.mark.parametrize("method", METHODS)
def test_prompt_and_prompt_file_continue_the_text(run, tmp_path, capsys, peak, method):
    peak(ord("a"))
    assert sampled(run, capsys, method, "--prompt", "Now is", "--max-new-tokens", "4")[0] == "Now isaaaa"
    (tmp_path / "p.txt").write_text("Now is\nthe winter\n")
    text, _ = sampled(run, capsys, method, "--prompt-file", str(tmp_path / "p.txt"), "--max-new-tokens", "4")
    assert text == "Now isaaaa\n\nthe winteraaaa"


@pytest.mark.parametrize("method", METHODS)
def test_a_reply_stops_at_eos(run, capsys, peak, method):
    """A model certain of EOS: every reply is empty (the BOS of the prompt, also EOS, does not stop it)."""
    peak(BOS)
    text, summary = sampled(run, capsys, method, "--prompt", "Now is", "--max-new-tokens", "8")
    assert text == "Now is"
    if method == "ar":
        assert summary.startswith("[ar] forward passes 1 | tokens/step 1.00 | 1 tokens")


def test_the_corpus_stop_rule_is_an_eos_decided_in_the_reply():
    """replies.stop_rule with no task: EOS in the reply before its first [MASK]; the prompt's BOS not
    counted."""
    prompt_mask = torch.ones(4, 2, dtype=torch.bool)
    tokens = torch.tensor([[BOS, 65, 66, BOS, 67], [BOS, 65, 66, MASK, BOS], [BOS, 65, 66, 67, 68],
                           [BOS, 65, 66, 67, BOS]])
    stop = replies.stop_rule(TOK, None, prompt_mask)
    assert stop(tokens, torch.tensor([5, 5, 5, 4])).tolist() == [True, False, False, False]


# ----------------------------------------------------------------------------- gaps

@pytest.mark.parametrize("method", DIFFUSION)
def test_a_gap_is_filled_in_place_and_the_visible_tokens_stay(run, capsys, calls, method):
    prompt = [BOS, *b"Now is the ", *[MASK] * 4, *b" of our"]
    text, summary = sampled(run, capsys, method, "--prompt", "Now is the {mask:4} of our",
                            "--max-new-tokens", "0")
    assert calls[0]["prompts"] == [prompt] and calls[0]["room"] == 0
    out = calls[0]["tokens"][0].tolist()
    assert len(out) == len(prompt) and MASK not in out                            # every [MASK] filled
    # the rest as given
    assert [t for t, p in zip(out, prompt) if p != MASK] == [p for p in prompt if p != MASK]
    assert text.startswith("Now is the ") and text.endswith(" of our")
    assert summary.endswith(" 4 tokens")                                         # the 4 masks, nothing after


@pytest.mark.parametrize("method", DIFFUSION)
def test_a_gap_and_new_tokens_on_a_peaked_model(run, capsys, peak, method):
    peak(ord("a"))
    for new, reply in (("0", ""), ("2", "aa")):
        text, _ = sampled(run, capsys, method, "--prompt", "Now {mask:3} winter", "--max-new-tokens", new)
        assert text == "Now aaa winter" + reply
    assert sampled(run, capsys, method, "--prompt", "Now <|mask|><|mask|> winter",
                   "--max-new-tokens", "0")[0] == \
        "Now aa winter"


def test_ar_refuses_a_gap_in_one_line(run):
    assert error_of(sample.main, ["--ckpt", str(run / "ar"), "--prompt", "Now {mask:2} winter"]) == (
        "error: prompt 1 has [MASK]s to fill, and AR cannot fill masks inside the prompt (it continues the "
        "left context only): use a Set Diffusion, BD3-LM or MDLM checkpoint")


# ------------------------------------------------------------------------ --show-order, --threshold, --window

@pytest.mark.parametrize("method, flags, shown, per_step", [
    ("ar", [], "Now is[0]a[1]a[2]a[3]a[4]a[5]a[6]a[7]a", "1.00"),
    # tau 0.5 decodes the whole window of W = 2 every step: 8 tokens in 4 steps
    ("setdiffusion", ["--threshold", "0.5", "--window", "2"], "Now is[0]aa[1]aa[2]aa[3]aa", "2.00"),
    # MDLM's block of 32 holds all 8: one step
    ("mdlm", ["--threshold", "0.5"], "Now is[0]aaaaaaaa", "8.00"),
    # BD3-LM's blocks of 4: the prompt (7 tokens) ends one column into its block, then a block of 4,
    # then 3 left
    ("bd3lm", ["--threshold", "0.5"], "Now is[0]a[1]aaaa[2]aaa", "2.67"),
])
def test_show_order_threshold_and_window_follow_the_schedule(run, capsys, peak, method, flags,
                                                             shown, per_step):
    peak(ord("a"))
    text, summary = sampled(run, capsys, method, "--prompt", "Now is", "--max-new-tokens", "8",
                            "--show-order", *flags)
    assert text == shown and f"tokens/step {per_step} | 8 tokens" in summary


@pytest.mark.parametrize("method", METHODS)
def test_show_order_on_the_trained_model_marks_every_step(run, capsys, method):
    text, summary = sampled(run, capsys, method, "--prompt", "Now is", "--max-new-tokens", "6",
                            "--show-order", *(["--threshold", "0.5"] if method != "ar" else []))
    assert text.startswith("Now is[")                                             # the prompt unmarked
    steps = [int(s) for s in re.findall(r"\[(\d+)\]", text)]
    nfe = int(re.search(r"forward passes (\d+)", summary)[1])
    assert set(steps) == set(range(nfe))                                          # every step decoded a token
    if method == "ar":
        assert steps == list(range(6))                                            # one token a step, in order


def test_window_is_set_diffusion_only(run):
    assert error_of(sample.main, ["--ckpt", str(run / "mdlm"), "--prompt", "Now", "--window", "2"]) == \
        "error: --window 2: only Set Diffusion has a window"


# ----------------------------------------------------------------------------- no prompt

@pytest.mark.parametrize("method", METHODS)
def test_no_prompt_continues_bos_alone(run, capsys, calls, peak, method):
    text, _ = sampled(run, capsys, method)
    assert calls[0]["prompts"] == [[BOS]] and calls[0]["room"] == 31             # all that fits after BOS
    assert sampled(run, capsys, method, "--prompt", "")[0] == text                # the empty prompt
    peak(ord("a"))
    assert sampled(run, capsys, method, "--max-new-tokens", "5")[0] == "aaaaa"


# ----------------------------------------------------------------------------- eval.py

@pytest.mark.parametrize("method", ["ar", "setdiffusion"])
def test_eval_with_no_task_on_a_corpus_checkpoint_is_the_likelihood(run, tmp_path, capsys, method):
    out = tmp_path / "m.json"
    evaluate.main(["--ckpt", str(run / method), "--device", "cpu", "--data-dir", str(run / "cache"),
                   "--json", str(out)])
    head = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| task |"))
    m = json.loads(out.read_text())
    assert head.startswith("| task | model | nll | perplexity |") and m["model"] == method and m["nll"] > 0
