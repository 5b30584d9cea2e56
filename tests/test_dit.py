"""The paper's OWT/LM1B pieces offline: the official DiT converted into model.py's Transformer (against a
forward written from the DiT's equations, adaLN on and off), the presets, the GPT-2 (openai-whisper's ranks)
and BERT (a tiny vocab.txt) tokenizers, the corpora, likelihood and zero-shot MCQA through eval.py."""
import dataclasses
import importlib.util
import json
import math
import os

import pytest
import torch
import torch.nn.functional as F

from common import checkpoint
from model import PRESETS, ModelConfig
from common.pretrained import from_dit, timestep_embedding
from common.weights import from_state
from fakehub import dit_weights, save_dit
from helpers import causal, error_of, eval_json, random_checkpoint, write_jsonl


def reference_dit(w, idx, pos, n_head, mask=None):
    """The official DiT forward (src/backbone/dit.py), eval mode, sigma = 0, written out directly."""
    W = {k.removeprefix("backbone."): v for k, v in w.items()}
    x = W["vocab_embed.embedding"][idx]                                       # (B, T, D)
    B, T, D = x.shape
    hd = D // n_head
    adaln = "sigma_map.mlp.0.weight" in W
    if adaln:
        t, half = torch.zeros(B), 128
        freqs = torch.exp(-math.log(10000) * torch.arange(half) / half)
        t_freq = torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs)], -1)
        c = F.silu(F.linear(F.silu(F.linear(t_freq, W["sigma_map.mlp.0.weight"], W["sigma_map.mlp.0.bias"])),
                            W["sigma_map.mlp.2.weight"], W["sigma_map.mlp.2.bias"]))
    inv_freq = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    emb = torch.cat([pos.float()[..., None] * inv_freq] * 2, -1)              # (B, T, hd)
    cos, sin = emb.cos()[:, :, None], emb.sin()[:, :, None]                   # (B, T, 1, hd)
    rot = lambda z: torch.cat([-z[..., hd // 2:], z[..., :hd // 2]], -1)      # noqa: E731
    ln = lambda z, wt: F.layer_norm(z.float(), [D], weight=wt.float())        # noqa: E731 (eps 1e-5)
    for i in range(1 + max(int(k.split(".")[1]) for k in W if k.startswith("blocks."))):
        p = f"blocks.{i}."
        if adaln:
            sh1, sc1, g1, sh2, sc2, g2 = F.linear(c, W[p + "adaLN_modulation.weight"],
                                                  W[p + "adaLN_modulation.bias"])[:, None].chunk(6, dim=2)
        else:
            sh1 = sc1 = sh2 = sc2 = torch.zeros(1)
            g1 = g2 = torch.ones(1)
        h = ln(x, W[p + "norm1.weight"]) * (1 + sc1) + sh1
        qkv = (h @ W[p + "attn_qkv.weight"].T).view(B, T, 3, n_head, hd)       # b s (three h d)
        qkv = qkv * torch.stack([cos, cos, torch.ones_like(cos)], 2) + \
            rot(qkv) * torch.stack([sin, sin, torch.zeros_like(sin)], 2)
        q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))            # (B, H, T, hd)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / math.sqrt(hd))
        x = x + g1 * (a.transpose(1, 2).reshape(B, T, D) @ W[p + "attn_out.weight"].T)
        h = ln(x, W[p + "norm2.weight"]) * (1 + sc2) + sh2
        m = F.gelu(h @ W[p + "mlp.0.weight"].T + W[p + "mlp.0.bias"], approximate="tanh")
        x = x + g2 * (m @ W[p + "mlp.2.weight"].T + W[p + "mlp.2.bias"])
    h = ln(x, W["output_layer.norm_final.weight"])
    if adaln:
        shift, scale = F.linear(c, W["output_layer.adaLN_modulation.weight"],
                                W["output_layer.adaLN_modulation.bias"])[:, None].chunk(2, dim=2)
        h = h * (1 + scale) + shift
    return h @ W["output_layer.linear.weight"].T + W["output_layer.linear.bias"]


@pytest.mark.parametrize("adaln", [True, False])
def test_dit_matches_reference(adaln):
    """Permuted positions and a random mask (Set Diffusion); the causal default is checked on a loaded
    release (test_released_dit_local_dir_and_refusal)."""
    w = dit_weights(adaln=adaln)
    model = from_state(*from_dit(w, n_head=4))
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 40, (2, 9), generator=g)
    pos = torch.stack([torch.randperm(9, generator=g) for _ in range(2)])
    mask = (torch.rand(2, 1, 9, 9, generator=g) < 0.6) | torch.eye(9, dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(model(idx, pos, mask), reference_dit(w, idx, pos, 4, mask), atol=1e-4,
                                   rtol=1e-4)


def test_dit_presets_timestep_embedding_and_refusals():
    """--preset dit-owt / dit-lm1b are what from_dit reads from a release (adaLN off: no LayerNorm bias) at
    12 x 768 and each corpus's vocabulary; t = 0 embeds as [1..1 | 0..0]; a missing tensor is one line (an
    unknown one: test_released_dit_local_dir_and_refusal)."""
    w = dit_weights(adaln=False)
    cfg, _ = from_dit(w, n_head=4)
    for name, V in (("dit-owt", 50258), ("dit-lm1b", 30522)):
        assert dataclasses.replace(cfg, vocab_size=V, n_layer=12, n_head=12, n_kv_head=12, n_embd=768,
                                   head_dim=64, intermediate_size=3072, norm_bias=False) == \
            ModelConfig(**PRESETS[name])
    e = timestep_embedding(torch.zeros(1, dtype=torch.float64), 256)
    assert torch.equal(e, torch.cat([torch.ones(1, 128), torch.zeros(1, 128)], -1).double())
    with pytest.raises(ValueError, match="not a complete DiT"):
        from_dit({k: v for k, v in w.items() if "mlp.2.bias" not in k}, 4)


def test_released_dit_local_dir_and_refusal(tmp_path):
    w = dit_weights(adaln=True)
    d = save_dit(tmp_path / "lm1b-bd3lm-s4", w, {"architectures": ["BD3LM"], "length": 16, "n_heads": 4,
                                                  "tokenization_config": {"mask_token_id": 39}})
    model, method, cfg, config = checkpoint.load(d)
    assert (config["method"], cfg.block_size, config["data"]) == ("bd3lm", 4, "lm1b")
    idx = torch.randint(0, 40, (1, 16))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), reference_dit(w, idx, torch.arange(16)[None], 4, causal(16)),
                                   atol=1e-4, rtol=1e-4)
    bad = save_dit(tmp_path / "owt-ar", {**w, "backbone.extra.weight": torch.zeros(2)},
                   {"architectures": ["AR"]})
    with pytest.raises(ValueError, match="unknown tensor 'backbone.extra.weight'"):
        checkpoint.load(bad)


# ----------------------------------------------------------------------------- tokenizers and corpora

WHISPER = importlib.util.find_spec("whisper")                  # the gpt2 fixture skips without it
needs_bert = pytest.mark.skipif(importlib.util.find_spec("tokenizers") is None, reason="needs tokenizers")


@pytest.fixture(scope="session")
def gpt2_encoding():
    """tiktoken's gpt2 encoding, rebuilt offline from the ranks that openai-whisper ships."""
    if WHISPER is None:
        pytest.skip("openai-whisper (test-only) ships the GPT-2 ranks")
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext.openai_public import r50k_pat_str
    ranks = load_tiktoken_bpe(os.path.join(WHISPER.submodule_search_locations[0], "assets", "gpt2.tiktoken"))
    return tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


@pytest.fixture
def gpt2(monkeypatch, gpt2_encoding):
    import data.text
    from data import get_tokenizer
    monkeypatch.setattr(data.text, "gpt2_encoding", lambda: gpt2_encoding)
    return get_tokenizer("gpt2")


BERT_WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "ran", ".", ",", "##s", "big", "red", "yes", "no"]


def bert_dir(tmp_path):
    """A tiny bert-base-uncased-style vocab.txt: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103."""
    d = tmp_path / "bert"
    d.mkdir()
    (d / "vocab.txt").write_text("\n".join(["[PAD]", *[f"[unused{i}]" for i in range(99)], "[UNK]", "[CLS]",
                                            "[SEP]", "[MASK]", *BERT_WORDS]) + "\n")
    return str(d)


@needs_bert
def test_gpt2_and_bert_tokenizers(tmp_path, gpt2):
    assert (gpt2.vocab_size, gpt2.mask_id, gpt2.eos_id, gpt2.pad_id) == (50258, 50257, 50256, 50256)
    assert gpt2.encode("<|fim_middle|>") == [50257] and gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.decode(gpt2.encode("Hello world") + [50257, 50256]) == "Hello world"
    from data import get_tokenizer
    tok = get_tokenizer("bert:" + bert_dir(tmp_path))
    assert (tok.vocab_size, tok.mask_id, tok.pad_id, tok.eos_id) == (104 + len(BERT_WORDS), 103, 0, 102)
    ids = tok.encode("The cats SAT.")
    assert ids == [104, 105, 114, 107, 112]                 # lower-cased, cats = cat ##s, . split off
    assert tok.decode(ids + [103, 0]) == "the cats sat."
    with pytest.raises(ValueError, match="unknown tokenizer"):
        get_tokenizer("wordpiece")


def test_wrap_as_the_official_builder():
    from data.corpus import wrap
    assert wrap([[1, 2, 3], [4, 5]], 3, eos=0) == [[1, 2, 3], [0, 4, 5]]          # remainder [0] dropped
    assert wrap([[1, 2, 3], [4, 5]], 4, eos=0, bos=9) == [[9, 1, 2, 0], [9, 3, 0, 0], [9, 4, 5, 0]]


def test_owt_split_rows_and_cache(tmp_path, gpt2, monkeypatch):
    """The validation split is the last VALID_DOCS documents, wrapped per map batch; a second load reads the
    cache (the source gone)."""
    from data import owt
    docs = [f"Document number {i} says hello to the world again and again." for i in range(7)]
    write_jsonl(tmp_path / "train.jsonl", [{"text": t} for t in docs])
    monkeypatch.setattr(owt, "VALID_DOCS", 3)
    monkeypatch.setattr("data.corpus.MAP_BATCH", 2)
    rows = owt.load("validation", str(tmp_path), gpt2, L=8)
    ids = [gpt2.encode(d) + [50256] for d in docs[4:]]
    expect = [r for chunk in (ids[:2], ids[2:]) for r in
              [sum(chunk, [])[i:i + 8] for i in range(0, len(sum(chunk, [])) - 7, 8)]]
    assert rows.tolist() == expect and rows.dtype.name == "uint16"
    os.remove(tmp_path / "train.jsonl")
    assert owt.load("test", str(tmp_path), gpt2, L=8).tolist() == expect


@needs_bert
def test_lm1b_rows(tmp_path):
    from data import get_tokenizer, lm1b
    tok = get_tokenizer("bert:" + bert_dir(tmp_path))
    (tmp_path / "lm1b").mkdir()
    write_jsonl(tmp_path / "lm1b" / "test.jsonl", [{"text": "the big cat sat on a mat ."}] * 40)
    rows = lm1b.load("test", str(tmp_path / "lm1b"), tok, L=128)
    assert rows.shape == (2, 128) and (rows[:, 0] == 101).all() and (rows[:, -1] == 102).all()
    assert rows[0, 1:10].tolist() == [104, 115, 105, 107, 108, 110, 109, 112, 102]   # detokenized "mat."


# ----------------------------------------------------------------------------- eval.py: likelihood and MCQA

YES = 3763                                                  # the GPT-2 id of " yes"


def owt_dit(tmp_path, name, yes_bias=None, V=50258, adaln=False):
    """A tiny DiT release folder (its name gives the method and corpus); with yes_bias its logits are the
    output bias alone (norm_final = 0), so every position prefers " yes"."""
    w = dit_weights(V=V, D=16, H=2, n_layer=1, cond=8, adaln=adaln, seed=5)
    if yes_bias is not None:
        w["backbone.output_layer.norm_final.weight"] = torch.zeros(16)
        w["backbone.output_layer.linear.bias"] = torch.zeros(V)
        w["backbone.output_layer.linear.bias"][YES] = yes_bias
    arch = {"ar": "AR", "setdlm": "SetDLM", "mdlm": "MDLM", "bd3lm": "BD3LM"}[name.split("-")[1]]
    return save_dit(tmp_path / name, w, {"architectures": [arch], "length": 32, "n_heads": 2,
                                          "tokenization_config": {"mask_token_id": V - 1}})


def test_eval_owt_likelihood_ar_exact_and_setdiffusion(tmp_path, gpt2, capsys):
    """AR's NLL is the cross-entropy by hand in float32 (--precision fp32; position 0, the clean BOS, not
    counted); Set Diffusion's bound leaves EOS out (the official exclusions)."""
    d = tmp_path / "owt"
    d.mkdir()
    write_jsonl(d / "train.jsonl", [{"text": f"Story {i}: the quick brown fox jumps over the lazy dog, then "
                                             "naps in the sun."} for i in range(12)])
    ar_dir = owt_dit(tmp_path, "owt-ar")
    m = eval_json(tmp_path, ["--ckpt", ar_dir, "--task", "likelihood", "--data", "owt", "--data-dir", str(d),
                             "--batch-size", "3", "--precision", "fp32"])
    assert "sequences of 32 tokens, batch size 3, dtype torch.float32, fp32" in capsys.readouterr().out
    from data import owt
    rows = torch.from_numpy(owt.load("validation", str(d), gpt2, L=32).astype("int64"))
    with torch.no_grad():
        ce = F.cross_entropy(checkpoint.load(ar_dir)[0](rows[:, :-1]).transpose(1, 2), rows[:, 1:],
                             reduction="none")
    assert m["n"] == len(rows) > 1 and m["tokens"] == ce.numel() and math.isclose(m["nll"], ce.mean().item(),
                                                                                   rel_tol=1e-5)
    assert m["recipe"] == "script" and eval_json(tmp_path, [
        "--ckpt", ar_dir, "--task", "likelihood", "--data", "owt", "--data-dir", str(d), "--batch-size", "3",
        "--precision", "fp32", "--recipe", "suite"])["nll"] == m["nll"]          # AR: one likelihood in both
    sd_dir = owt_dit(tmp_path, "owt-setdlm-d4")
    m = eval_json(tmp_path, ["--ckpt", sd_dir, "--task", "likelihood", "--data", "owt", "--data-dir", str(d)])
    assert m["model"] == "setdiffusion" and m["data"] == "owt" and math.isfinite(m["perplexity"])
    assert m["exclusions"] == "official" and m["tokens"] == int((rows[:, 1:] != 50256).sum())
    # Set Diffusion's two recipes: nll (smax = 2d) and suite_nll (max_block_size = d), seed 0, one batch
    model, method, cfg = checkpoint.load(sd_dir)[:3]
    batch = owt.batch(gpt2, rows, 32)
    exclude = (rows == 50256) | (torch.arange(32) == 0)
    for recipe, nll in (("script", method.nll), ("suite", method.suite_nll)):
        m = eval_json(tmp_path, ["--ckpt", sd_dir, "--task", "likelihood", "--data", "owt", "--data-dir",
                                 str(d), "--precision", "fp32", "--recipe", recipe])
        with torch.no_grad():
            total, n = nll(model, rows, cfg, batch["prompt_mask"], batch["pad_mask"],
                           torch.Generator().manual_seed(0), exclude)
        assert m["recipe"] == recipe and m["tokens"] == n.sum()
        assert math.isclose(m["nll"], (total.sum() / n.sum()).item(), rel_tol=1e-5)


@pytest.mark.parametrize("name", ["owt-ar", "owt-setdlm-d4"])
def test_mcqa_picks_the_likelier_option(tmp_path, gpt2, name):
    """The model prefers " yes" everywhere: the four questions whose gold option is "yes" score, the last
    (gold "no") does not."""
    d = tmp_path / "piqa"
    d.mkdir()
    write_jsonl(d / "valid.jsonl", [{"goal": f"Goal {i}:  answer  it", "sol1": ["yes", "no"][lab],
                                     "sol2": ["no", "yes"][lab]} for i, lab in enumerate([0, 1, 1, 0, 0])])
    (d / "valid-labels.lst").write_text("0\n1\n1\n0\n1\n")
    m = eval_json(tmp_path, ["--ckpt", owt_dit(tmp_path, name, yes_bias=6.0), "--task", "piqa", "--data-dir",
                             str(d), "--batch-size", "4", "--samples", "2"])
    assert (m["n"], m["options"], m["samples"]) == (5, 10, 2)
    assert math.isclose(m["accuracy"], 0.8) and math.isclose(m["stderr"], math.sqrt(0.8 * 0.2 / 5))


def test_mcqa_score_is_the_length_normalised_nll(gpt2):
    """Constant logits: an option's score is the mean -log p of its tokens, AR and Set Diffusion alike."""
    import ar
    import setdiffusion
    from paper.zeroshot import encode_options, option_scores
    w = dit_weights(V=50258, D=16, H=2, n_layer=1, cond=8, adaln=False, seed=5)
    w["backbone.output_layer.norm_final.weight"] = torch.zeros(16)
    model, bias = from_state(*from_dit(w, 2)), w["backbone.output_layer.linear.bias"]
    pairs = encode_options(gpt2, "Question: why?\nAnswer:", ["yes", "no way at all"], 32)
    for method, cfg, width, logp in ((setdiffusion, setdiffusion.SetDiffusionConfig(mask_id=50257, smax=8),
                                      32, torch.log_softmax(bias[:50257], -1)),     # [MASK] suppressed
                                     (ar, ar.ARConfig(mask_id=50257), 20, torch.log_softmax(bias, -1))):
        expect = torch.tensor([-logp[a].mean().item() for _, a in pairs], dtype=torch.float64)
        torch.testing.assert_close(option_scores(model, method, cfg, gpt2, pairs, width, "cpu", 1, 0), expect,
                                   atol=1e-4, rtol=0)


def test_mcqa_prompts_as_the_official_script(tmp_path):
    from data import mcqa
    (tmp_path / "hs").mkdir()
    (tmp_path / "hs" / "hellaswag_val.jsonl").write_text(json.dumps(
        {"activity_label": "Baking  cookies", "ctx_a": "A man mixes dough.", "ctx_b": "then he",
         "endings": ["bakes it.", " eats it ", "sleeps.", "runs."], "label": "1"}) + "\n")
    assert mcqa.load("hellaswag", str(tmp_path / "hs"))[0] == {
        "prompt": "Activity: Baking cookies\nContext: A man mixes dough. Then he\nContinuation:",
        "options": ["bakes it.", "eats it", "sleeps.", "runs."], "label": 1}
    (tmp_path / "siqa").mkdir()
    (tmp_path / "siqa" / "dev.jsonl").write_text(json.dumps({"context": "Ana lent Ben a pen.", "question":
                                                             "What will Ben do?", "answerA": "thank Ana",
                                                             "answerB": "cry", "answerC": "leave"}) + "\n")
    (tmp_path / "siqa" / "dev-labels.lst").write_text("1\n")
    ex = mcqa.load("siqa", str(tmp_path / "siqa"))[0]
    assert ex["prompt"] == "Context: Ana lent Ben a pen.\nQuestion: What will Ben " \
                           "do?\nAnswer:" and ex["label"] == 0


@pytest.mark.parametrize("ckpt, flags, message", [
    ("gsm8k-qwen", "--task likelihood --data lm1b", "needs a model with the bert-base-uncased tokenizer, but "
                                                    "this checkpoint uses qwen3:"),
    ("lm1b-ar", "--task hellaswag", "needs a model with the gpt2 tokenizer, but this checkpoint uses "
                                    "bert-base-uncased"),
    ("owt-ar", "--task likelihood --data owt --data-dir "
               "{t}/nope", "error: --data-dir {t}/nope: no such folder"),
    ("owt-mdlm", "--task siqa --data-dir {t}/nope", "no such folder"),
    ("owt-ar-1000", "--task likelihood --data owt", "the model's vocabulary has 1000 tokens but the gpt2 "
                                                    "tokenizer 50258"),
    ("owt-setdlm-d4", "--task likelihood --data owt --recipe h100",
     "--recipe h100 is not a recipe of the likelihood of owt: choose script, suite"),
    ("owt-setdlm-d4", "--task likelihood --data shakespeare --recipe suite",
     "--recipe suite: the likelihood of shakespeare has no official recipes"),
])
def test_eval_of_a_release_with_what_it_cannot_read_is_one_line(tmp_path, request, ckpt, flags, message):
    if ckpt.startswith("owt"):
        request.getfixturevalue("gpt2")                     # the checkpoint's tokenizer, offline
    if ckpt == "gsm8k-qwen":
        path = random_checkpoint(tmp_path / ckpt, vocab=300, n_embd=16,
                                 tokenizer="qwen3:Qwen/Qwen3-1.7B-Base", data="gsm8k", seq_len=32)
    else:
        vocab = {"lm1b-ar": 60, "owt-ar-1000": 1000}.get(ckpt, 50258)
        path = owt_dit(tmp_path, ckpt.removesuffix("-1000"), V=vocab)
    argv = ["--ckpt", path, *flags.replace("{t}", str(tmp_path)).split(), "--device", "cpu"]
    assert message.replace("{t}", str(tmp_path)) in error_of(__import__("eval").main, argv)


@needs_bert
def test_eval_lm1b_likelihood_with_the_release_vocab(tmp_path):
    """An LM1B release holding its vocab.txt (tokenizer bert:<folder>): 30 sentences of 10 tokens = 10 rows
    of [CLS] + 30 + [SEP] (L = 32), each scoring its last 31 tokens."""
    V = 104 + len(BERT_WORDS)
    d = owt_dit(tmp_path, "lm1b-mdlm", V=V, adaln=True)
    (tmp_path / "lm1b-mdlm" / "vocab.txt").write_text(open(os.path.join(bert_dir(tmp_path),
                                                                        "vocab.txt")).read())
    config = json.loads(open(os.path.join(d, "config.json")).read())
    (tmp_path / "lm1b-mdlm" / "config.json").write_text(json.dumps({**config, "tokenization_config":
                                                                    {"mask_token_id": 103}}))
    (tmp_path / "lm1b").mkdir()
    write_jsonl(tmp_path / "lm1b" / "test.jsonl", [{"text": "the big dog ran on a red mat ."}] * 30)
    m = eval_json(tmp_path, ["--ckpt", d, "--task", "likelihood", "--data", "lm1b", "--data-dir",
                             str(tmp_path / "lm1b")])
    assert (m["model"], m["data"], m["n"]) == ("mdlm", "lm1b", 10) and m["tokens"] == 10 * 31
    assert math.isfinite(m["nll"]) and m["nll"] > 0


def test_results_table_is_one_row_per_file_without_sampler_settings(tmp_path):
    from paper.results import table
    paths = []
    for name, nll in (("ar", 0.5), ("mdlm", 0.75)):
        paths.append(str(tmp_path / f"{name}.json"))
        (tmp_path / f"{name}.json").write_text(json.dumps({"task": "likelihood", "model": name,
                                                           "threshold": 1e9,
                                                           "window": 0, "nll": nll, "n": 3}))
    assert table(paths, str(tmp_path / "t.md")).splitlines() == [
        "| task | model | nll | n |", "|---|---|---|---|", "| likelihood | ar | 0.5 | 3 |",
        "| likelihood | mdlm | 0.75 | 3 |", "", "Environments (docs/usage.md#reproducing-a-result):",
        "- measured: 2 runs, not recorded", "- trained: 2 runs, not recorded"]       # files of no record


def test_likelihood_table_labels_each_row_with_its_recipe(tmp_path):
    """make reproduce-likelihood's table: a Set Diffusion checkpoint's rows under the two recipes, each
    labelled in the recipe column, and under the table what each recipe is (data/owt.py, data/lm1b.py
    RECIPES); a recipe its corpus does not have is refused in one line."""
    from paper.results import table
    paths = []
    for name, data, recipe, nll in (("owt-sd", "owt", "script", 3.25), ("owt-sd-suite", "owt", "suite", 3.5),
                                    ("lm1b-sd", "lm1b", "script", 4.0)):
        paths.append(str(tmp_path / f"{name}.json"))
        (tmp_path / f"{name}.json").write_text(json.dumps({"task": "likelihood", "model": "setdiffusion",
                                                           "nll": nll, "data": data, "recipe": recipe}))
    lines = table(paths, str(tmp_path / "t.md")).splitlines()
    assert lines[:5] == ["| task | model | nll | data | recipe |", "|---|---|---|---|---|",
                         "| likelihood | setdiffusion | 3.25 | owt | script |",
                         "| likelihood | setdiffusion | 3.5 | owt | suite |",
                         "| likelihood | setdiffusion | 4 | lm1b | script |"]
    assert lines[7:10] == ["- script (owt): the official likelihood script (run_likelihood_eval_owt.sh): Set "
                           "Diffusion's orders at smax = 2d, the paper's schedule",
                           "- suite (owt): the official suite runner's rows (repro_suite_runner.py): Set "
                           "Diffusion's orders at max_block_size = d (k = 1, b = d / L)",
                           "- script (lm1b): the official likelihood script (run_likelihood_eval_lm1b.sh): "
                           "Set Diffusion's orders at smax = 2d, the paper's schedule"]
    (tmp_path / "bad.json").write_text(json.dumps({"task": "likelihood", "model": "ar", "nll": 1.0,
                                                   "data": "owt", "recipe": "h100"}))
    with pytest.raises(ValueError, match="names the recipe 'h100', not one of that corpus' official recipes"):
        table([str(tmp_path / "bad.json")], str(tmp_path / "t.md"))
