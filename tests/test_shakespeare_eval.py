"""Evaluating checkpoints trained on a text corpus (make shakespeare's evaluation side, on a tiny text):
eval.py --task likelihood on a text:PATH checkpoint of every method (bits/char; AR's value the exact NLL
computed here by hand), eval.py --task unconditional (generative perplexity = exp of the reference AR model's
mean NLL on the samples, computed here independently; unigram entropy), the table builder (python -m
paper.results --generation) and one line for a bad --ref-ckpt. python -m pytest -q
tests/test_shakespeare_eval.py
"""
import dataclasses
import json
import math
import os

import pytest
import torch
import torch.nn.functional as F

from common import checkpoint, methods, saving
import eval as evaluate
from data import byte_tokenizer, textfile
from helpers import error_of, text_checkpoints
from model import ModelConfig, Transformer
from paper import generation, results

TEXT = "".join(f"{i}. Now is the winter of our discontent made glorious summer by this sun of York;\n"
               for i in range(30))                                          # ~2.4 kB, ASCII
TINY = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--batch-size", "4", "--eval-limit", "2",
        "--warmup", "2", "--seq-len", "32", "--max-iters", "3", "--seed", "1"]
METHODS = ["ar", "mdlm", "bd3lm", "setdiffusion"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny text, its token cache and one tiny checkpoint per method trained on it (3 steps)."""
    return text_checkpoints(tmp_path_factory, "richard.txt", TEXT, TINY)


def eval_json(tmp_path, argv) -> dict:
    out = tmp_path / "m.json"
    evaluate.main([*argv, "--device", "cpu", "--json", str(out)])
    with open(out) as f:
        return json.load(f)


def eval_error(argv) -> str:
    return error_of(evaluate.main, [*argv, "--device", "cpu"])       # one `error: ...` line


# ----------------------------------------------------------------------------- likelihood

@pytest.mark.parametrize("method", METHODS)
def test_likelihood_of_a_text_checkpoint_reports_bits_per_char(run, tmp_path, method, capsys):
    m = eval_json(tmp_path, ["--ckpt", str(run / method), "--task", "likelihood", "--data-dir",
                             str(run / "cache")])
    rows = textfile.load("test", str(run / "richard.txt"), str(run / "cache"), byte_tokenizer(), 32)
    assert m["data"] == f"text:{run / 'richard.txt'}" and m["model"] == method
    assert m["n"] == len(rows) and m["tokens"] == len(rows) * 31            # position 0, the BOS, not counted
    assert math.isfinite(m["nll"]) and m["bits_per_char"] == pytest.approx(m["nll"] / math.log(2))
    assert "bits_per_char" in capsys.readouterr().out
    if method == "ar":                                                          # exact: the NLL by hand
        model, _, _, _ = checkpoint.load(str(run / "ar"))
        x = torch.from_numpy(rows.astype("int64"))                              # (N, 32)
        with torch.no_grad():
            logp = F.log_softmax(model(x[:, :-1]).float(), -1)                   # (N, 31, V), causal
        nll = -logp.gather(-1, x[:, 1:, None]).sum() / x[:, 1:].numel()
        assert m["nll"] == pytest.approx(float(nll), rel=1e-5)


def test_likelihood_is_the_default_task_of_a_corpus_checkpoint_and_takes_another_text(run, tmp_path):
    default = eval_json(tmp_path, ["--ckpt", str(run / "ar"), "--data-dir", str(run / "cache")])
    assert default["task"] == f"text:{run / 'richard.txt'}" and "bits_per_char" in default
    other = tmp_path / "other.txt"
    other.write_text(TEXT[::-1], encoding="utf-8")
    m = eval_json(tmp_path, ["--ckpt", str(run / "ar"), "--task", "likelihood", "--data", f"text:{other}",
                             "--data-dir", str(tmp_path / "cache")])
    assert m["data"] == f"text:{other}" and m["nll"] != default["nll"]
    assert "unknown --data 'wiki': choose owt, lm1b, shakespeare or text:PATH" in eval_error(
        ["--ckpt", str(run / "ar"), "--task", "likelihood", "--data", "wiki"])
    assert "goes with --task likelihood, not --task throughput" in eval_error(
        ["--ckpt", str(run / "ar"), "--task", "throughput", "--data-dir", str(run / "cache")])


# ----------------------------------------------------------------------------- unconditional samples

def test_unigram_entropy_on_literals():
    assert generation.unigram_entropy([1, 1, 2, 2]) == pytest.approx(math.log(2))
    assert generation.unigram_entropy([1, 2, 3]) == pytest.approx(math.log(3))
    assert generation.unigram_entropy([1, 1, 1, 2]) == \
        pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert generation.unigram_entropy([7] * 9) == 0 and generation.unigram_entropy([]) == 0


@pytest.mark.parametrize("method, threshold", [("ar", "inf"), ("setdiffusion", "0.5"), ("bd3lm", "0.5"),
                                               ("mdlm", "inf")])
def test_unconditional_genppl_is_exp_of_the_reference_models_mean_nll(run, tmp_path, monkeypatch,
                                                                      method, threshold):
    drawn, real = [], generation.unconditional

    def spy(*a, **k):
        out = real(*a, **k)
        drawn.extend(out)
        return out
    monkeypatch.setattr(generation, "unconditional", spy)
    m = eval_json(tmp_path, ["--ckpt", str(run / method), "--task", "unconditional", "--ref-ckpt",
                             str(run / "ar"), "-n", "3", "--warmup", "1", "--max-new-tokens", "20",
                             "--threshold", threshold, "--no-redraw"])
    samples = drawn[1:]                                                         # the first one only warms up
    tok = byte_tokenizer()
    assert len(drawn) == 4 and m["n"] == 3
    assert m["samples"] == [generation.scored_text(tok, s["ids"], s["eos"]) for s in samples]
    ref, _, _, _ = checkpoint.load(str(run / "ar"))
    total, count = 0.0, 0
    for s in samples:
        assert 0 < len(s["ids"]) <= 20 and 256 + 1 not in s["ids"]             # no [MASK] (257) left
        x = torch.tensor([[256] + s["ids"] + [256] * s["eos"]])             # BOS (= EOS), the sample, its EOS
        with torch.no_grad():
            logp = F.log_softmax(ref(x[:, :-1]).float(), -1)
        total -= float(logp.gather(-1, x[:, 1:, None]).sum())
        count += x.shape[1] - 1
    assert m["gen_ppl"] == pytest.approx(math.exp(total / count), rel=1e-5)
    assert m["entropy"] == pytest.approx(sum(generation.unigram_entropy(s["ids"]) for s in samples) / 3)
    assert m["tokens_per_step"] == pytest.approx(sum(s["tokens_per_step"] for s in samples) / 3)
    assert m["tokens_per_s"] > 0 and m["ref_ckpt"] == str(run / "ar") and m["task"] == "unconditional"
    assert m["threshold"] == float(threshold)


def test_a_bad_ref_ckpt_is_one_line(run, tmp_path):
    args = ["--ckpt", str(run / "setdiffusion"), "--task", "unconditional", "-n", "1", "--no-redraw"]
    assert "is a setdiffusion checkpoint: generative perplexity needs an AR model" in eval_error(
        [*args, "--ref-ckpt", str(run / "setdiffusion")])
    own = json.loads((run / "setdiffusion" / "config.json").read_text())["data"]
    for name, V, tokenizer, L, data in (("gpt2-ar", 300, "gpt2", 32, own),
                                        ("short-ar", 258, "bytes", 16, own),
                                        ("owt-ar", 258, "bytes", 64, "owt")):
        cfg = ModelConfig(vocab_size=V, n_layer=1, n_head=2, n_kv_head=2, n_embd=16)
        config = {"model": dataclasses.asdict(cfg), "method": "ar", "method_config": methods.method_config(
                  "ar", V - 1), "tokenizer": tokenizer, "data": data, "seq_len": L}
        saving.save(str(tmp_path / name), Transformer(cfg), config)
    assert "uses the gpt2 tokenizer, the samples are bytes tokens" in eval_error(
        [*args, "--ref-ckpt", str(tmp_path / "gpt2-ar")])
    assert ("has a context of 16 tokens, fewer than the BOS and 20 new tokens: pass --max-new-tokens 15 "
            "or less"
            in eval_error([*args, "--ref-ckpt", str(tmp_path / "short-ar"), "--max-new-tokens", "20"]))
    assert f"owt-ar was trained on owt, the samples' checkpoint on {own}" in eval_error(
        [*args, "--ref-ckpt", str(tmp_path / "owt-ar")])
    assert "--task unconditional needs --ref-ckpt DIR" in eval_error(args)
    assert "--ref-ckpt goes with --task unconditional" in eval_error(
        ["--ckpt", str(run / "ar"), "--task", "likelihood", "--ref-ckpt", str(run / "ar")])
    assert eval_error([*args, "--ref-ckpt", str(tmp_path / "missing")]).startswith(
        f"error: --ref-ckpt: no checkpoint at {tmp_path / 'missing'}")


# ----------------------------------------------------------------------------- the table

def write_runs(tmp_path) -> list[str]:
    runs = [{"task": "likelihood", "model": "setdiffusion", "ckpt": "out/s/setdiffusion", "nll": 1.5,
             "perplexity": math.exp(1.5), "tokens": 100, "bits_per_char": 1.5 / math.log(2)},
            {"task": "likelihood", "model": "ar", "ckpt": "out/s/ar", "nll": 1.2, "perplexity": math.exp(1.2),
             "tokens": 100, "bits_per_char": 1.2 / math.log(2)}]
    for tau, ppl, tps in ((0.5, 9.0, 2.5), (math.inf, 6.0, 1.0), (0.9, 7.0, 1.5)):
        runs.append({"task": "unconditional", "model": "setdiffusion", "ckpt": "out/s/setdiffusion",
                     "threshold": tau, "gen_ppl": ppl, "entropy": 3.1, "tokens_per_step": tps,
                     "tokens_per_s": 50.0, "tokens_per_s_std": 2.0, "n": 20, "ref_ckpt": "out/s/ar"})
    runs.append({"task": "unconditional", "model": "ar", "ckpt": "out/s/ar", "threshold": math.inf,
                 "gen_ppl": 5.0, "entropy": 3.2, "tokens_per_step": 1.0, "tokens_per_s": 80.0,
                 "tokens_per_s_std": 1.0, "n": 20, "ref_ckpt": "out/s/ar"})
    paths = []
    for i, r in enumerate(runs):
        paths.append(str(tmp_path / f"{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(r, f)
    return paths


def test_generation_table_orders_methods_and_thresholds(tmp_path):
    text = results.generation(write_runs(tmp_path), str(tmp_path / "t.md"))
    assert open(tmp_path / "t.md").read() == text + "\n"
    lines = text.splitlines()
    assert lines[0] == "Validation likelihood"
    assert lines[4].startswith("| ar | 1.2000 | 1.7312 | 3.320 | exact | 100 |")
    assert lines[5].startswith("| setdiffusion | 1.5000 | 2.1640 | 4.482 | bound |")
    assert "generative perplexity under out/s/ar" in lines[7]
    body = [line.split(" | ")[:3] for line in lines[11:]]
    assert body == [["| ar", "inf", "5.000"], ["| setdiffusion", "inf", "6.000"],
                    ["| setdiffusion", "0.9", "7.000"], ["| setdiffusion", "0.5", "9.000"]]
    assert "| 2.50 | 50.0 ± 2.0 | 20 |" in lines[-1]


def test_generation_table_cli_plot_and_bad_file(tmp_path, capsys):
    paths = write_runs(tmp_path)
    argv = [str(tmp_path / "t.md"), *paths, "--generation", "--plot", str(tmp_path / "t.png")]
    try:
        import matplotlib  # noqa: F401
    except ImportError:                              # a plot asked for is never dropped: one line, no file
        assert error_of(results.main, argv) == \
            "error: --plot needs matplotlib: pip install matplotlib, or drop --plot"
        assert not os.path.exists(tmp_path / "t.png") and not os.path.exists(tmp_path / "t.md")
    else:
        results.main(argv)
        assert "gen. perplexity" in capsys.readouterr().out
        assert os.path.getsize(tmp_path / "t.png") > 0
    with open(paths[2], "w") as f:
        json.dump({"task": "unconditional", "model": "bd3lm", "ckpt": "x"}, f)
    with pytest.raises(SystemExit) as e:
        results.main([str(tmp_path / "t.md"), *paths, "--generation"])
    assert str(e.value.code) == (f"error: {paths[2]} lacks 'entropy', 'tokens_per_step', 'tokens_per_s', "
                                 f"'n': not the eval.py --json file of an unconditional run")
    with open(paths[2], "w") as f:
        json.dump({"task": "unconditional", "model": "bd3lm", "ckpt": "x", "entropy": 3.0,
                   "tokens_per_step": 1.0, "tokens_per_s": 5.0, "n": 4}, f)
    assert "holds none of gen_ppl, gen_ppl_hf, mauve" in error_of(
        results.main, [str(tmp_path / "t.md"), *paths, "--generation"])


def test_generation_table_of_runs_scored_by_a_hugging_face_lm_and_mauve_only(tmp_path):
    """eval.py --ppl-model / --mauve-ref without --ref-ckpt: the table has those columns (a single run's MAUVE
    with its std over the 5 subsets), its caption names the scoring models, and the plot uses the HF
    perplexity."""
    paths = []
    for seed, (ppl, mauve) in enumerate(((40.0, 0.8), (44.0, 0.6))):
        paths.append(str(tmp_path / f"{seed}.json"))
        with open(paths[-1], "w") as f:
            json.dump({"task": "unconditional", "model": "setdiffusion", "ckpt": f"out/s{seed}/setdiffusion",
                       "threshold": 0.9, "gen_ppl_hf": ppl, "ppl_model": "gpt2-large", "mauve": mauve,
                       "mauve_std": 0.01, "mauve_encoder": "bert", "entropy": 5.0, "tokens_per_step": 2.0,
                       "tokens_per_s": 9.0, "n": 8}, f)
    lines = results.generation(paths, str(tmp_path / "t.md"), str(tmp_path / "t.png")).splitlines()
    assert lines[0] == ("Unconditional samples from BOS (gen. perplexity (HF) under gpt2-large; MAUVE on "
                        "bert features; entropy in nats)")
    assert lines[2].startswith("| checkpoint | tau | gen. perplexity (HF) | MAUVE | entropy |")
    assert lines[-1] == ("| setdiffusion | 0.9 | 42.000 [40.000, 44.000] | 0.700 [0.600, 0.800] | 5.000 | "
                         "2.00 | 9.0 | 8 | 2 |")
    try:
        import matplotlib  # noqa: F401
        assert os.path.getsize(tmp_path / "t.png") > 0
    except ImportError:
        pass
    alone = results.generation(paths[:1], str(tmp_path / "one.md")).splitlines()
    assert alone[-1].startswith("| setdiffusion | 0.9 | 40.000 | 0.800 ± 0.010 | 5.000 |")


def test_generation_table_averages_seeds_with_their_range(tmp_path):
    """Runs of one checkpoint name in several folders (seeds) make one row: mean [min, max] where
    the seeds differ; the plot draws it."""
    runs = []
    for seed, (nll, ppl) in enumerate(((1.2, 5.0), (1.4, 7.0), (1.3, 6.0))):
        ckpt = f"out/s{seed}/ar"
        runs.append({"task": "likelihood", "model": "ar", "ckpt": ckpt, "nll": nll,
                     "perplexity": math.exp(nll), "tokens": 100, "bits_per_char": nll / math.log(2)})
        runs.append({"task": "unconditional", "model": "ar", "ckpt": ckpt, "gen_ppl": ppl, "entropy": 3.0,
                     "tokens_per_step": 1.0, "tokens_per_s": 10.0 * (seed + 1),
                     "tokens_per_s_std": 1.0, "n": 20, "ref_ckpt": ckpt})
    paths = []
    for i, r in enumerate(runs):
        paths.append(str(tmp_path / f"{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(r, f)
    lines = results.generation(paths, str(tmp_path / "t.md"), str(tmp_path / "t.png")).splitlines()
    assert lines[4] == ("| ar | 1.3000 [1.2000, 1.4000] | 1.8755 [1.7312, 2.0198] | 3.682 [3.320, 4.055] | "
                        "exact | 100 | 3 |")
    assert lines[-1] == ("| ar | inf | 6.000 [5.000, 7.000] | 3.000 | 1.00 | 20.0 [10.0, 30.0] | 20 | 3 |")
