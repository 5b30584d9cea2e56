"""Evaluating text-corpus checkpoints (conftest's corpus_ckpts): likelihood and bits/char of every method (AR
== the NLL by hand), the default task, unconditional samples' generative perplexity (== exp of the reference
AR's mean NLL, computed here) and entropy, the --generation table, a bad --ref-ckpt one line."""
import importlib.util
import math
import os

import pytest
import torch
import torch.nn.functional as F

from common import checkpoint
import eval as evaluate
from data import byte_tokenizer, textfile
from helpers import METHODS, error_of, eval_json, random_checkpoint, write_runs
from paper import generation, results

TOK = byte_tokenizer()


@pytest.mark.parametrize("method", list(METHODS))
def test_likelihood_of_a_text_checkpoint_reports_bits_per_char_and_is_its_default_task(corpus_ckpts, tmp_path,
                                                                                        method, capsys):
    """AR's NLL is the exact one by hand in float32 (--precision fp32); the default, the official eval's
    bfloat16 autocast, within a percent of it; with no --task a corpus checkpoint reports its likelihood;
    --data takes another text."""
    run = corpus_ckpts
    m = eval_json(tmp_path, ["--ckpt", str(run / method), "--task", "likelihood", "--data-dir",
                             str(run / "cache"), "--precision", "fp32"])
    rows = textfile.load("test", str(run / "richard.txt"), str(run / "cache"), TOK, 32)
    assert m["data"] == f"text:{run / 'richard.txt'}" and m["model"] == method
    assert m["n"] == len(rows) and m["tokens"] == len(rows) * 31            # position 0, the BOS, not counted
    assert math.isfinite(m["nll"]) and m["bits_per_char"] == pytest.approx(m["nll"] / math.log(2))
    assert "bits_per_char" in capsys.readouterr().out
    if method == "ar":                                                          # exact: the NLL by hand
        x = torch.from_numpy(rows.astype("int64"))                              # (N, 32)
        with torch.no_grad():
            logp = F.log_softmax(checkpoint.load(str(run / "ar"))[0](x[:, :-1]).float(), -1)   # (N, 31, V)
        assert m["nll"] == pytest.approx(float(-logp.gather(-1, x[:, 1:, None]).sum() / x[:, 1:].numel()),
                                         rel=1e-5)
    default = eval_json(tmp_path, ["--ckpt", str(run / method), "--data-dir", str(run / "cache")])
    head = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| task |"))
    assert head.startswith("| task | model | nll | perplexity |") and default["model"] == method
    assert (m["precision"], default["precision"]) == ("fp32", "amp_bf16")
    assert default["nll"] == pytest.approx(m["nll"], rel=1e-2) and default["nll"] != m["nll"]
    assert default["task"] == f"text:{run / 'richard.txt'}" and "bits_per_char" in default
    other = tmp_path / "other.txt"
    other.write_text((run / "richard.txt").read_text()[::-1], encoding="utf-8")
    m = eval_json(tmp_path, ["--ckpt", str(run / method), "--task", "likelihood", "--data", f"text:{other}",
                             "--data-dir", str(tmp_path / "cache")])
    assert m["data"] == f"text:{other}" and m["nll"] != default["nll"]


def test_unigram_entropy_on_literals():
    assert generation.unigram_entropy([1, 1, 2, 2]) == pytest.approx(math.log(2))
    assert generation.unigram_entropy([1, 2, 3]) == pytest.approx(math.log(3))
    assert generation.unigram_entropy([1, 1, 1, 2]) == pytest.approx(-(0.75 * math.log(0.75)
                                                                        + 0.25 * math.log(0.25)))
    assert generation.unigram_entropy([7] * 9) == 0 and generation.unigram_entropy([]) == 0


@pytest.mark.parametrize("method, threshold", [("ar", "inf"), ("setdiffusion", "0.5"), ("bd3lm", "0.5"),
                                               ("mdlm", "inf")])
def test_unconditional_genppl_is_exp_of_the_reference_models_mean_nll(corpus_ckpts, tmp_path, monkeypatch,
                                                                      method, threshold):
    """The samples (the first only warms up) are scored as BOS (= EOS), the sample, its EOS, under the AR
    checkpoint; entropy and tokens/step are the samples' means."""
    run, drawn, real = corpus_ckpts, [], generation.unconditional

    def spy(*a, **k):
        drawn.extend(out := real(*a, **k))
        return out
    monkeypatch.setattr(generation, "unconditional", spy)
    m = eval_json(tmp_path, ["--ckpt", str(run / method), "--task", "unconditional", "--ref-ckpt",
                             str(run / "ar"), "-n", "3", "--warmup", "1", "--max-new-tokens", "20",
                             "--threshold", threshold, "--no-redraw"])
    samples = drawn[1:]
    assert len(drawn) == 4 and m["n"] == 3
    assert m["samples"] == [generation.scored_text(TOK, s["ids"], s["eos"]) for s in samples]
    ref, total, count = checkpoint.load(str(run / "ar"))[0], 0.0, 0
    for s in samples:
        assert 0 < len(s["ids"]) <= 20 and 256 + 1 not in s["ids"]             # no [MASK] (257) left
        x = torch.tensor([[256] + s["ids"] + [256] * s["eos"]])
        with torch.no_grad():
            total -= float(F.log_softmax(ref(x[:, :-1]).float(), -1).gather(-1, x[:, 1:, None]).sum())
        count += x.shape[1] - 1
    assert m["gen_ppl"] == pytest.approx(math.exp(total / count), rel=1e-5)
    assert m["entropy"] == pytest.approx(sum(generation.unigram_entropy(s["ids"]) for s in samples) / 3)
    assert m["tokens_per_step"] == pytest.approx(sum(s["tokens_per_step"] for s in samples) / 3)
    assert m["tokens_per_s"] > 0 and m["ref_ckpt"] == str(run / "ar") and m["task"] == "unconditional"
    assert float(m["threshold"]) == float(threshold)                 # tau = inf written as "inf"


U = "--task unconditional -n 1 --no-redraw --ref-ckpt "


@pytest.mark.parametrize("ckpt, flags, message", [
    ("setdiffusion", U + "{run}/setdiffusion", "is a setdiffusion checkpoint: generative perplexity needs an "
                                               "AR model"),
    ("setdiffusion", U + "{t}/gpt2-ar", "uses the gpt2 tokenizer, the samples are bytes tokens"),
    ("setdiffusion", U + "{t}/short-ar --max-new-tokens 20",
     "has a context of 16 tokens, fewer than the BOS and 20 new tokens: pass --max-new-tokens 15 or less"),
    ("setdiffusion", U + "{t}/owt-ar", "owt-ar was trained on owt, the samples' checkpoint on "
                                       "text:{run}/richard.txt"),
    ("setdiffusion", U + "{t}/missing", "error: --ref-ckpt: no checkpoint at {t}/missing"),
    ("setdiffusion", "--task unconditional -n 1 --no-redraw", "--task unconditional needs --ref-ckpt DIR"),
    ("ar", "--task likelihood --ref-ckpt {run}/ar", "--ref-ckpt goes with --task unconditional"),
    ("ar", "--task likelihood --data wiki", "unknown --data 'wiki': choose owt, lm1b, shakespeare or "
                                            "text:PATH"),
    ("ar", "--task throughput --data-dir {run}/cache", "goes with --task likelihood, not --task throughput"),
])
def test_bad_input_to_eval_of_a_corpus_checkpoint_is_one_line(corpus_ckpts, tmp_path, ckpt, flags, message):
    """A --ref-ckpt that is no AR model, of another tokenizer, context or corpus, or missing; --data a corpus
    eval.py does not know; --data-dir without a task that reads it."""
    run, data = corpus_ckpts, f"text:{corpus_ckpts / 'richard.txt'}"
    for name, V, tokenizer, L, d in (("gpt2-ar", 300, "gpt2", 32, data), ("short-ar", 258, "bytes", 16, data),
                                     ("owt-ar", 258, "bytes", 64, "owt")):
        random_checkpoint(tmp_path / name, vocab=V, n_embd=16, tokenizer=tokenizer, data=d, seq_len=L)
    argv = ["--ckpt", str(run / ckpt), *flags.format(run=run, t=tmp_path).split(), "--device", "cpu"]
    assert message.format(run=run, t=tmp_path) in error_of(evaluate.main, argv)


# ----------------------------------------------------------------------------- the table

def likelihood(model, ckpt, nll):
    return {"task": "likelihood", "model": model, "ckpt": ckpt, "nll": nll, "perplexity": math.exp(nll),
            "tokens": 100, "bits_per_char": nll / math.log(2)}


def sampled(model, ckpt, tau, ppl, tps, tokens_per_s=50.0, std=2.0, entropy=3.1):
    return {"task": "unconditional", "model": model, "ckpt": ckpt, "threshold": tau, "gen_ppl": ppl,
            "entropy": entropy, "tokens_per_step": tps, "tokens_per_s": tokens_per_s, "tokens_per_s_std": std,
            "n": 20, "ref_ckpt": "out/s/ar"}


RUNS = [likelihood("setdiffusion", "out/s/setdiffusion", 1.5), likelihood("ar", "out/s/ar", 1.2),
        *(sampled("setdiffusion", "out/s/setdiffusion", tau, ppl, tps)
          for tau, ppl, tps in ((0.5, 9.0, 2.5), (math.inf, 6.0, 1.0), (0.9, 7.0, 1.5))),
        sampled("ar", "out/s/ar", math.inf, 5.0, 1.0, 80.0, 1.0, 3.2)]


def test_generation_table_orders_methods_and_thresholds(tmp_path, capsys):
    """Likelihood (exact for AR, a bound otherwise) then samples, AR first, each method's taus from inf down;
    the CLI prints it and draws the plot."""
    paths = write_runs(tmp_path, RUNS)
    text = results.generation(paths, str(tmp_path / "t.md"))
    assert open(tmp_path / "t.md").read() == text + "\n"
    lines = text.splitlines()
    assert lines[0] == "Validation likelihood"
    assert lines[4].startswith("| ar | 1.2000 | 1.7312 | 3.320 | exact | 100 |")
    assert lines[5].startswith("| setdiffusion | 1.5000 | 2.1640 | 4.482 | bound |")
    assert "generative perplexity under out/s/ar" in lines[7]
    assert [line.split(" | ")[:3] for line in lines[11:15]] == [
        ["| ar", "inf", "5.000"], ["| setdiffusion", "inf", "6.000"], ["| setdiffusion", "0.9", "7.000"],
        ["| setdiffusion", "0.5", "9.000"]]
    assert "| 2.50 | 50.0 ± 2.0 | 20 |" in lines[14] and lines[16].startswith("Environments")
    pytest.importorskip("matplotlib")
    results.main([str(tmp_path / "t.md"), *paths, "--generation", "--plot", str(tmp_path / "t.png")])
    assert "gen. perplexity" in capsys.readouterr().out and os.path.getsize(tmp_path / "t.png") > 0


def test_generation_table_of_hugging_face_scorers_alone_and_of_seeds_with_their_range(tmp_path):
    """--ppl-model / --mauve-ref without --ref-ckpt: those columns (a single run's MAUVE with its std over the
    5 subsets), a caption naming the scorers, the plot of the HF perplexity; runs of one checkpoint name in
    several folders (seeds) make one row: mean [min, max] where they differ."""
    paths = write_runs(tmp_path, [
        {"task": "unconditional", "model": "setdiffusion", "ckpt": f"out/s{seed}/setdiffusion",
         "threshold": 0.9, "gen_ppl_hf": ppl, "ppl_model": "gpt2-large", "mauve": mauve, "mauve_std": 0.01,
         "mauve_encoder": "bert", "entropy": 5.0, "tokens_per_step": 2.0, "tokens_per_s": 9.0, "n": 8}
        for seed, (ppl, mauve) in enumerate(((40.0, 0.8), (44.0, 0.6)))])
    lines = results.generation(paths, str(tmp_path / "t.md"), str(tmp_path / "t.png")).splitlines()
    assert lines[0] == ("Unconditional samples from BOS (gen. perplexity (HF) under gpt2-large; MAUVE on "
                        "bert features; entropy in nats)")
    assert lines[2].startswith("| checkpoint | tau | gen. perplexity (HF) | MAUVE | entropy |")
    assert lines[-5] == ("| setdiffusion | 0.9 | 42.000 [40.000, 44.000] | 0.700 [0.600, 0.800] | 5.000 | "
                         "2.00 | 9.0 | 8 | 2 |")
    assert importlib.util.find_spec("matplotlib") is None or os.path.getsize(tmp_path / "t.png") > 0
    alone = results.generation(paths[:1], str(tmp_path / "one.md")).splitlines()
    assert alone[-5].startswith("| setdiffusion | 0.9 | 40.000 | 0.800 ± 0.010 | 5.000 |")
    # make reproduce-unconditional: a throughput run (--throughput-run) gives its row's speed, not a seed;
    # one without a scored run is a row of its own, after the scored ones
    timed = write_runs(tmp_path / "timed", [
        {"task": "unconditional", "model": "setdiffusion", "ckpt": "out/s0/setdiffusion", "threshold": 0.9,
         "entropy": 4.0, "tokens_per_step": 3.0, "tokens_per_s": 50.0, "tokens_per_s_std": 2.0, "n": 200,
         "throughput_run": True},
        {"task": "unconditional", "model": "ar", "ckpt": "lm1b:ar", "threshold": math.inf, "entropy": 4.5,
         "tokens_per_step": 1.0, "tokens_per_s": 70.0, "tokens_per_s_std": 1.0, "n": 200,
         "throughput_run": True}])
    both = results.generation(paths[:1] + timed, str(tmp_path / "two.md")).splitlines()
    assert both[0].endswith("tokens/s from the throughput runs (timed n after their warm-up, drawn whole, "
                            "unscored) where a row has one)")
    assert both[-6:-4] == ["| setdiffusion | 0.9 | 40.000 | 0.800 ± 0.010 | 5.000 | 3.00 | 50.0 ± 2.0 | 8 | "
                         "200 | 1 |", "| lm1b:ar | inf |  |  | 4.500 | 1.00 | 70.0 ± 1.0 |  | 200 | 1 |"]
    runs = []
    for seed, (nll, ppl) in enumerate(((1.2, 5.0), (1.4, 7.0), (1.3, 6.0))):
        ckpt = f"out/s{seed}/ar"
        runs += [likelihood("ar", ckpt, nll), {**sampled("ar", ckpt, math.inf, ppl, 1.0, 10.0 * (seed + 1),
                                                         1.0, 3.0), "ref_ckpt": ckpt}]
    lines = results.generation(write_runs(tmp_path / "seeds", runs), str(tmp_path / "s.md"),
                               str(tmp_path / "s.png")).splitlines()
    assert lines[4] == ("| ar | 1.3000 [1.2000, 1.4000] | 1.8755 [1.7312, 2.0198] | 3.682 [3.320, 4.055] | "
                        "exact | 100 | 3 |")
    assert lines[-5] == "| ar | inf | 6.000 [5.000, 7.000] | 3.000 | 1.00 | 20.0 [10.0, 30.0] | 20 | 3 |"
