"""The paper's OWT/LM1B pieces, offline: the official DiT's released weights converted into model.py's
Transformer (checked against a reference forward written from the DiT's equations, adaLN on and off), the
released keys, the GPT-2 and BERT tokenizers, the OWT/LM1B token caches, corpus likelihood and zero-shot MCQA
through eval.py.

    python -m pytest -q tests/test_dit.py

Nothing downloads: the GPT-2 ranks come from the test-only package openai-whisper (its gpt2.tiktoken), the
BERT vocabulary is a tiny vocab.txt made here, checkpoints are tiny random DiTs saved under the official
names.
"""
import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from common import checkpoint, methods, saving
from model import PRESETS, ModelConfig
from common.pretrained import ALSO_NAMED, RELEASED, from_dit, timestep_embedding
from common.weights import from_state
from fakehub import fake_hub

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # the repository root


# ------------------------------------------------------------------------ a reference DiT, from its equations

def dit_weights(V=40, D=32, H=4, n_layer=2, cond=16, adaln=True, seed=0):
    """Random weights under the official names (non-zero adaLN, so the folding is exercised)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, std=0.2: torch.randn(*s, generator=g) * std
    w = {"backbone.vocab_embed.embedding": r(V, D, std=1.0),
         "backbone.rotary_emb.inv_freq": torch.ones(D // H // 2),
         "backbone.output_layer.norm_final.weight": 1 + r(D), "backbone.output_layer.linear.weight": r(V, D),
         "backbone.output_layer.linear.bias": r(V)}
    for i in range(n_layer):
        p = f"backbone.blocks.{i}."
        w.update({p + "norm1.weight": 1 + r(D), p + "attn_qkv.weight": r(3 * D, D),
                  p + "attn_out.weight": r(D, D),
                  p + "norm2.weight": 1 + r(D), p + "mlp.0.weight": r(4 * D, D), p + "mlp.0.bias": r(4 * D),
                  p + "mlp.2.weight": r(D, 4 * D), p + "mlp.2.bias": r(D)})
        if adaln:
            w.update({p + "adaLN_modulation.weight": r(6 * D, cond), p + "adaLN_modulation.bias": r(6 * D)})
    if adaln:
        w.update({"backbone.sigma_map.mlp.0.weight": r(cond, 256), "backbone.sigma_map.mlp.0.bias": r(cond),
                  "backbone.sigma_map.mlp.2.weight": r(cond, cond), "backbone.sigma_map.mlp.2.bias": r(cond),
                  "backbone.output_layer.adaLN_modulation.weight": r(2 * D, cond),
                  "backbone.output_layer.adaLN_modulation.bias": r(2 * D)})
    return w


def reference_dit(w, idx, pos, n_head, mask=None):
    """The official DiT forward (src/backbone/dit.py), eval mode, sigma = 0, written out directly."""
    W = {k.removeprefix("backbone."): v for k, v in w.items()}
    x = W["vocab_embed.embedding"][idx]                                       # (B, T, D)
    B, T, D = x.shape
    hd = D // n_head
    adaln = "sigma_map.mlp.0.weight" in W
    if adaln:
        t = torch.zeros(B)
        half = 128
        freqs = torch.exp(-math.log(10000) * torch.arange(half) / half)
        t_freq = torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs)], -1)
        c = F.silu(F.linear(F.silu(F.linear(t_freq, W["sigma_map.mlp.0.weight"], W["sigma_map.mlp.0.bias"])),
                            W["sigma_map.mlp.2.weight"], W["sigma_map.mlp.2.bias"]))
    inv_freq = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    emb = torch.cat([pos.float()[..., None] * inv_freq] * 2, -1)              # (B, T, hd)
    cos, sin = emb.cos()[:, :, None], emb.sin()[:, :, None]                   # (B, T, 1, hd)
    rot = lambda z: torch.cat([-z[..., hd // 2:], z[..., :hd // 2]], -1)
    ln = lambda z, wt: F.layer_norm(z.float(), [D], weight=wt.float())        # eps 1e-5
    n_layer = 1 + max(int(k.split(".")[1]) for k in W if k.startswith("blocks."))
    for i in range(n_layer):
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
    w = dit_weights(adaln=adaln)
    cfg, state = from_dit(w, n_head=4)
    model = from_state(cfg, state)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 40, (2, 9), generator=g)
    # permuted positions (Set Diffusion)
    pos = torch.stack([torch.randperm(9, generator=g) for _ in range(2)])
    mask = torch.rand(2, 1, 9, 9, generator=g) < 0.6
    mask |= torch.eye(9, dtype=torch.bool)
    with torch.no_grad():
        ours, ref = model(idx, pos, mask), reference_dit(w, idx, pos, 4, mask)
        assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-4), (ours - ref).abs().max()
        causal = torch.ones(9, 9, dtype=torch.bool).tril()
        assert torch.allclose(model(idx), reference_dit(w, idx, torch.arange(9).expand(2, 9), 4, causal),
                              atol=1e-4)


def test_dit_presets_are_the_released_architecture():
    """train.py --preset dit-owt / dit-lm1b build the architecture from_dit reads from a released DiT (adaLN
    off, hence no LayerNorm bias), at 12 x 768 and each corpus's vocabulary."""
    cfg, _ = from_dit(dit_weights(adaln=False), n_head=4)
    for name, V in (("dit-owt", 50258), ("dit-lm1b", 30522)):
        preset = ModelConfig(**PRESETS[name])
        assert dataclasses.replace(cfg, vocab_size=V, n_layer=12, n_head=12, n_kv_head=12, n_embd=768,
                                   head_dim=64, intermediate_size=3072, norm_bias=False) == preset


def test_timestep_embedding_at_zero():
    e = timestep_embedding(torch.zeros(1, dtype=torch.float64), 256)
    assert torch.equal(e, torch.cat([torch.ones(1, 128), torch.zeros(1, 128)], -1).double())


def test_dit_refuses_unknown_and_incomplete():
    w = dit_weights()
    with pytest.raises(ValueError, match="unknown tensor 'backbone.blocks.0.attn_qkv.bias'"):
        from_dit({**w, "backbone.blocks.0.attn_qkv.bias": torch.zeros(96)}, 4)
    with pytest.raises(ValueError, match="not a complete DiT"):
        from_dit({k: v for k, v in w.items() if "mlp.2.bias" not in k}, 4)


# ----------------------------------------------------------------------------- released keys and checkpoints

def test_released_dit_keys():
    R = RELEASED
    assert R["owt:setdlm-smax16"] == R["owt:setdlm-d8"] == "kuleshov-group/owt-setdlm-smax16"
    assert R["lm1b:setdlm-d4"] == "kuleshov-group/lm1b-setdlm-smax8" \
        and R["lm1b:bd3lm-s16"] == "kuleshov-group/lm1b-bd3lm-s16"
    assert ALSO_NAMED["kuleshov-group/owt-setdlm-smax16"] == "kuleshov-group/owt-setdlm-d8"
    assert R["owt:bd3lm-block_size8"] == "kuleshov-group/bd3lm-owt-block_size8" \
        and R["owt:mdlm-owt"] == "kuleshov-group/mdlm-owt"
    assert R["owt:ar"] == "kuleshov-group/owt-ar"


def save_dit(d, w, config, bin_file=False):
    os.makedirs(d, exist_ok=True)
    if bin_file:
        torch.save(w, os.path.join(d, "pytorch_model.bin"))
    else:
        save_file({k: v.contiguous() for k, v in w.items()}, os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    return str(d)


def test_released_dit_from_fake_hub_both_names(tmp_path):
    """owt:setdlm-smax16 finds the repo under its other name (-setdlm-d8); lm1b:mdlm loads a .bin with
    adaLN."""
    hf = tmp_path / "hf"
    cfg = {"architectures": ["SetDLM"], "model_type": "bd3lm", "length": 16, "n_heads": 4,
           "tokenization_config": {"mask_token_id": 39}}
    save_dit(fake_hub(hf, "kuleshov-group/owt-setdlm-d8"), dit_weights(adaln=False), cfg)
    save_dit(fake_hub(hf, "kuleshov-group/lm1b-mdlm"), dit_weights(adaln=True, seed=3),
             {**cfg, "architectures": ["MDLM"], "model_type": "mdlm"}, bin_file=True)
    code = """
import json
from common import checkpoint
out = {}
for key in ("owt:setdlm-smax16", "lm1b:mdlm"):
    model, method, cfg, config = checkpoint.load(key)
    out[key] = [config["source"], config["method"], config["data"], config["tokenizer"], config["seq_len"],
                config["method_config"].get("smax"), cfg.mask_id, model.cfg.norm_eps]
try:
    checkpoint.load("owt:setdlm-smax32")
except FileNotFoundError as e:
    out["missing"] = str(e)
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(hf), HF_HUB_OFFLINE="1", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["owt:setdlm-smax16"] == ["kuleshov-group/owt-setdlm-d8", "setdiffusion", "owt", "gpt2", 16, 16,
                                        39, 1e-5]
    assert out["lm1b:mdlm"][1:5] == ["mdlm", "lm1b", "bert-base-uncased", 16]
    assert "neither kuleshov-group/owt-setdlm-smax32 nor kuleshov-group/owt-setdlm-d16" in out["missing"]


def test_released_dit_local_dir_and_refusal(tmp_path):
    w = dit_weights(adaln=True)
    d = save_dit(tmp_path / "lm1b-bd3lm-s4", w, {"architectures": ["BD3LM"], "length": 16, "n_heads": 4,
                                                  "tokenization_config": {"mask_token_id": 39}})
    model, method, cfg, config = checkpoint.load(d)
    assert (config["method"], cfg.block_size, config["data"]) == ("bd3lm", 4, "lm1b")
    idx = torch.randint(0, 40, (1, 16))
    with torch.no_grad():
        assert torch.allclose(model(idx), reference_dit(w, idx, torch.arange(16)[None], 4,
                                                        torch.ones(16, 16, dtype=torch.bool).tril()),
                              atol=1e-4)
    bad = save_dit(tmp_path / "owt-ar", {**w, "backbone.extra.weight": torch.zeros(2)},
                   {"architectures": ["AR"]})
    with pytest.raises(ValueError, match="unknown tensor 'backbone.extra.weight'"):
        checkpoint.load(bad)


# ----------------------------------------------------------------------------- tokenizers

WHISPER = importlib.util.find_spec("whisper")
needs_gpt2 = pytest.mark.skipif(WHISPER is None, reason="the test-only package openai-whisper ships the "
                                                        "GPT-2 ranks")
_GPT2 = []


def gpt2_from_whisper():
    """tiktoken's gpt2 encoding, rebuilt offline from the ranks that openai-whisper ships."""
    if not _GPT2:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
        from tiktoken_ext.openai_public import r50k_pat_str
        ranks = load_tiktoken_bpe(os.path.join(WHISPER.submodule_search_locations[0], "assets",
                                               "gpt2.tiktoken"))
        _GPT2.append(tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                       special_tokens={"<|endoftext|>": 50256}))
    return _GPT2[0]


@pytest.fixture
def gpt2(monkeypatch):
    import data.text
    monkeypatch.setattr(data.text, "gpt2_encoding", gpt2_from_whisper)
    from data import get_tokenizer
    return get_tokenizer("gpt2")


BERT_WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "ran", ".", ",", "##s", "big", "red", "yes", "no"]


def bert_dir(tmp_path):
    """A tiny bert-base-uncased-style vocab.txt: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103."""
    d = tmp_path / "bert"
    d.mkdir()
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] \
        + BERT_WORDS
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return str(d)


@needs_gpt2
def test_gpt2_tokenizer(gpt2):
    assert (gpt2.vocab_size, gpt2.mask_id, gpt2.eos_id, gpt2.pad_id) == (50258, 50257, 50256, 50256)
    assert gpt2.encode("<|fim_middle|>") == [50257] and gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.decode(gpt2.encode("Hello world") + [50257, 50256]) == "Hello world"


def test_bert_tokenizer(tmp_path):
    pytest.importorskip("tokenizers")
    from data import get_tokenizer
    tok = get_tokenizer("bert:" + bert_dir(tmp_path))
    assert (tok.vocab_size, tok.mask_id, tok.pad_id, tok.eos_id) == (104 + len(BERT_WORDS), 103, 0, 102)
    ids = tok.encode("The cats SAT.")
    assert ids == [104, 105, 114, 107, 112]                 # lower-cased, cats = cat ##s, . split off
    assert tok.decode(ids + [103, 0]) == "the cats sat."
    with pytest.raises(ValueError, match="unknown tokenizer"):
        get_tokenizer("wordpiece")


# ----------------------------------------------------------------------------- corpora

def test_wrap_as_the_official_builder():
    from data.corpus import wrap
    assert wrap([[1, 2, 3], [4, 5]], 3, eos=0) == [[1, 2, 3], [0, 4, 5]]          # remainder [0] dropped
    assert wrap([[1, 2, 3], [4, 5]], 4, eos=0, bos=9) == [[9, 1, 2, 0], [9, 3, 0, 0], [9, 4, 5, 0]]


@needs_gpt2
def test_owt_split_rows_and_cache(tmp_path, gpt2, monkeypatch):
    from data import owt
    docs = [f"Document number {i} says hello to the world again and again." for i in range(7)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    monkeypatch.setattr(owt, "VALID_DOCS", 3)
    monkeypatch.setattr("data.corpus.MAP_BATCH", 2)
    rows = owt.load("validation", str(tmp_path), gpt2, L=8)
    ids = [[t for t in gpt2.encode(d)] + [50256] for d in docs[4:]]               # the last 3 documents
    expect = [r for chunk in (ids[:2], ids[2:]) for r in                           # per map batch of 2
              [sum(chunk, [])[i:i + 8] for i in range(0, len(sum(chunk, [])) - 7, 8)]]
    assert rows.tolist() == expect and rows.dtype.name == "uint16"
    os.remove(tmp_path / "train.jsonl")                                             # cached: no rebuild
    assert owt.load("test", str(tmp_path), gpt2, L=8).tolist() == expect


def test_lm1b_rows(tmp_path):
    pytest.importorskip("tokenizers")
    from data import get_tokenizer, lm1b
    tok = get_tokenizer("bert:" + bert_dir(tmp_path))
    data = tmp_path / "lm1b"
    data.mkdir()
    (data / "test.jsonl").write_text("".join(json.dumps({"text": "the big cat sat on a mat ."}) + "\n"
                                             for _ in range(40)))
    rows = lm1b.load("test", str(data), tok, L=128)
    assert rows.shape == (2, 128) and (rows[:, 0] == 101).all() and (rows[:, -1] == 102).all()
    assert rows[0, 1:10].tolist() == [104, 115, 105, 107, 108, 110, 109, 112, 102]   # detokenized "mat."


# ----------------------------------------------------------------------------- eval.py: likelihood and MCQA

YES, NO = 3763, 645                                         # GPT-2 ids of " yes" and " no"


def owt_dit(tmp_path, name, yes_bias=None, V=50258, adaln=False):
    """A tiny DiT checkpoint folder named like a release (the name gives the method and the corpus). With
    yes_bias its logits are the output bias alone (norm_final = 0), so every position prefers " yes"."""
    w = dit_weights(V=V, D=16, H=2, n_layer=1, cond=8, adaln=adaln, seed=5)
    if yes_bias is not None:
        w["backbone.output_layer.norm_final.weight"] = torch.zeros(16)
        w["backbone.output_layer.linear.bias"] = torch.zeros(V)
        w["backbone.output_layer.linear.bias"][YES] = yes_bias
    arch = {"ar": "AR", "setdlm": "SetDLM", "mdlm": "MDLM", "bd3lm": "BD3LM"}[name.split("-")[1]]
    return save_dit(tmp_path / name, w, {"architectures": [arch], "length": 32, "n_heads": 2,
                                          "tokenization_config": {"mask_token_id": V - 1}})


def run_eval(argv, tmp_path):
    import eval as evaluate
    out = tmp_path / "m.json"
    evaluate.main(argv + ["--json", str(out), "--device", "cpu"])
    with open(out) as f:
        return json.load(f)


def owt_data(tmp_path):
    d = tmp_path / "owt"
    d.mkdir()
    docs = [f"Story {i}: the quick brown fox jumps over the lazy dog, then naps in the sun."
            for i in range(12)]
    (d / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    return str(d)


@needs_gpt2
def test_eval_owt_likelihood_ar_exact_and_setdiffusion(tmp_path, gpt2, capsys):
    data = owt_data(tmp_path)
    ar_dir = owt_dit(tmp_path, "owt-ar")
    m = run_eval(["--ckpt", ar_dir, "--task", "likelihood", "--data", "owt", "--data-dir", data,
                  "--batch-size", "3"], tmp_path)
    assert "sequences of 32 tokens, batch size 3, dtype torch.float32" in capsys.readouterr().out
    from data import owt
    rows = torch.from_numpy(owt.load("validation", data, gpt2, L=32).astype("int64"))
    model = checkpoint.load(ar_dir)[0]
    with torch.no_grad():
        ce = F.cross_entropy(model(rows[:, :-1]).transpose(1, 2), rows[:, 1:], reduction="none")
    assert m["n"] == len(rows) > 1 and m["tokens"] == ce.numel()                  # position 0: the clean BOS
    assert math.isclose(m["nll"], ce.mean().item(), rel_tol=1e-5)
    m = run_eval(["--ckpt", owt_dit(tmp_path, "owt-setdlm-d4"), "--task", "likelihood", "--data", "owt",
                  "--data-dir", data], tmp_path)
    assert m["model"] == "setdiffusion" and m["data"] == "owt" and math.isfinite(m["perplexity"])
    # EOS not counted
    assert m["exclusions"] == "official" and m["tokens"] == int((rows[:, 1:] != 50256).sum())


def piqa_dir(tmp_path, labels):
    """PIQA's original format: valid.jsonl (goal, sol1, sol2) + valid-labels.lst."""
    d = tmp_path / "piqa"
    d.mkdir()
    recs = [{"goal": f"Goal {i}:  answer  it", "sol1": "yes" if lab == 0 else "no",
             "sol2": "no" if lab == 0 else "yes"}
            for i, lab in enumerate(labels)]
    (d / "valid.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "valid-labels.lst").write_text("".join(f"{lab}\n" for lab in labels))
    return str(d)


@needs_gpt2
@pytest.mark.parametrize("name", ["owt-ar", "owt-setdlm-d4"])
def test_mcqa_picks_the_likelier_option(tmp_path, gpt2, name):
    """The model prefers " yes" everywhere, so the option "yes" wins: labels at "yes" score, the last does
    not."""
    labels = [0, 1, 1, 0, 0]
    d = piqa_dir(tmp_path, labels)
    with open(os.path.join(d, "valid-labels.lst"), "w") as f:      # the last question's gold answer is "no"
        f.write("0\n1\n1\n0\n1\n")
    m = run_eval(["--ckpt", owt_dit(tmp_path, name, yes_bias=6.0), "--task", "piqa", "--data-dir", d,
                  "--batch-size", "4", "--samples", "2"], tmp_path)
    assert (m["n"], m["options"], m["samples"]) == (5, 10, 2)
    assert math.isclose(m["accuracy"], 0.8) and math.isclose(m["stderr"], math.sqrt(0.8 * 0.2 / 5))


@needs_gpt2
def test_mcqa_score_is_the_length_normalised_nll(gpt2):
    """Constant logits: an option's score is the mean -log p of its tokens, for AR and Set Diffusion alike."""
    import ar
    import setdiffusion
    from paper.zeroshot import encode_options, option_scores
    w = dit_weights(V=50258, D=16, H=2, n_layer=1, cond=8, adaln=False, seed=5)
    w["backbone.output_layer.norm_final.weight"] = torch.zeros(16)
    model = from_state(*from_dit(w, 2))
    logp = torch.log_softmax(w["backbone.output_layer.linear.bias"][:50257], -1)   # [MASK] suppressed
    pairs = encode_options(gpt2, "Question: why?\nAnswer:", ["yes", "no way at all"], 32)
    expect = torch.tensor([-logp[a].mean().item() for _, a in pairs], dtype=torch.float64)
    for method, cfg in ((setdiffusion, setdiffusion.SetDiffusionConfig(mask_id=50257, smax=8)),):
        got = option_scores(model, method, cfg, gpt2, pairs, 32, "cpu", 1, 0)
        assert torch.allclose(got, expect, atol=1e-4)
    got = option_scores(model, ar, ar.ARConfig(mask_id=50257), gpt2, pairs, 20, "cpu", 1, 0)
    expect_ar = torch.tensor([-torch.log_softmax(w["backbone.output_layer.linear.bias"], -1)[a].mean().item()
                              for _, a in pairs], dtype=torch.float64)
    assert torch.allclose(got, expect_ar, atol=1e-4)


def test_mcqa_prompts_as_the_official_script(tmp_path):
    from data import mcqa
    d = tmp_path / "hs"
    d.mkdir()
    (d / "hellaswag_val.jsonl").write_text(json.dumps(
        {"activity_label": "Baking  cookies", "ctx_a": "A man mixes dough.", "ctx_b": "then he",
         "endings": ["bakes it.", " eats it ", "sleeps.", "runs."], "label": "1"}) + "\n")
    ex = mcqa.load("hellaswag", str(d))[0]
    assert ex == {"prompt": "Activity: Baking cookies\nContext: A man mixes dough. Then he\nContinuation:",
                  "options": ["bakes it.", "eats it", "sleeps.", "runs."], "label": 1}
    d = tmp_path / "siqa"
    d.mkdir()
    (d / "dev.jsonl").write_text(json.dumps({"context": "Ana lent Ben a pen.",
                                             "question": "What will Ben do?", "answerA": "thank Ana",
                                             "answerB": "cry", "answerC": "leave"}) + "\n")
    (d / "dev-labels.lst").write_text("1\n")
    ex = mcqa.load("siqa", str(d))[0]
    assert ex["prompt"] == "Context: Ana lent Ben a pen.\nQuestion: What will Ben do?\nAnswer:" \
        and ex["label"] == 0


# ----------------------------------------------------------------------------- bad input: one line each

def eval_error(argv) -> str:
    import eval as evaluate
    with pytest.raises(SystemExit) as e:
        evaluate.main(argv + ["--device", "cpu"])
    assert str(e.value).startswith("error: ") and "\n" not in str(e.value)
    return str(e.value)


@needs_gpt2
def test_unknown_data(tmp_path, gpt2):
    assert "unknown --data 'wiki': choose owt, lm1b, shakespeare or text:PATH" in eval_error(
        ["--ckpt", owt_dit(tmp_path, "owt-ar"), "--task", "likelihood", "--data", "wiki"])


def test_checkpoint_of_another_family(tmp_path):
    from model import ModelConfig, Transformer
    cfg = ModelConfig(vocab_size=300, n_layer=1, n_head=2, n_kv_head=2, n_embd=16)
    config = {"model": dataclasses.asdict(cfg), "method": "ar",
              "method_config": methods.method_config("ar", mask_id=299),
              "tokenizer": "qwen3:Qwen/Qwen3-1.7B-Base",
              "data": "gsm8k", "seq_len": 32}
    saving.save(str(tmp_path / "gsm8k-qwen"), Transformer(cfg), config)
    msg = eval_error(["--ckpt", str(tmp_path / "gsm8k-qwen"), "--task", "likelihood", "--data", "lm1b"])
    assert "needs a model with the bert-base-uncased tokenizer, but this checkpoint uses qwen3:" in msg
    msg = eval_error(["--ckpt", owt_dit(tmp_path, "lm1b-ar", V=60), "--task", "hellaswag"])
    assert "needs a model with the gpt2 tokenizer, but this checkpoint uses bert-base-uncased" in msg


@needs_gpt2
def test_missing_data_folder(tmp_path, gpt2):
    msg = eval_error(["--ckpt", owt_dit(tmp_path, "owt-ar"), "--task", "likelihood", "--data", "owt",
                      "--data-dir", str(tmp_path / "nope")])
    assert msg == f"error: --data-dir {tmp_path / 'nope'}: no such folder"
    assert "no such folder" in eval_error(["--ckpt", owt_dit(tmp_path, "owt-mdlm"), "--task", "siqa",
                                           "--data-dir", str(tmp_path / "nope")])


@needs_gpt2
def test_bad_samples(tmp_path, gpt2):
    assert "--mc-samples must be at least 1, got 0" in eval_error(
        ["--ckpt", owt_dit(tmp_path, "owt-ar"), "--task", "piqa", "--samples", "0"])


@needs_gpt2
def test_wrong_vocabulary_size(tmp_path, gpt2):
    msg = eval_error(["--ckpt", owt_dit(tmp_path, "owt-ar", V=1000), "--task", "likelihood", "--data", "owt"])
    assert "the model's vocabulary has 1000 tokens but the gpt2 tokenizer 50258" in msg


def test_eval_lm1b_likelihood_with_the_release_vocab(tmp_path):
    """An LM1B release folder holding its vocab.txt: tokenizer bert:<folder>; 30 sentences of 10 tokens (with
    [SEP]) = 10 rows of [CLS] + 30 + [SEP] (L = 32), each scoring its last 31 tokens."""
    pytest.importorskip("tokenizers")
    V = 104 + len(BERT_WORDS)
    d = owt_dit(tmp_path, "lm1b-mdlm", V=V, adaln=True)
    (tmp_path / "lm1b-mdlm" / "vocab.txt").write_text(open(os.path.join(bert_dir(tmp_path),
                                                                        "vocab.txt")).read())
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({**config, "tokenization_config": {"mask_token_id": 103}}, f)
    data = tmp_path / "lm1b"
    data.mkdir()
    (data / "test.jsonl").write_text("".join(json.dumps({"text": "the big dog ran on a red mat ."}) + "\n"
                                             for _ in range(30)))
    m = run_eval(["--ckpt", d, "--task", "likelihood", "--data", "lm1b", "--data-dir", str(data)], tmp_path)
    assert (m["model"], m["data"], m["n"]) == ("mdlm", "lm1b", 10) and m["tokens"] == 10 * 31
    assert math.isfinite(m["nll"]) and m["nll"] > 0


def test_results_table(tmp_path):
    """paper/results.py: one row per --json file in the given order, sampler settings left out."""
    from paper.results import table
    paths = []
    for name, nll in (("ar", 0.5), ("mdlm", 0.75)):
        paths.append(str(tmp_path / f"{name}.json"))
        with open(paths[-1], "w") as f:
            json.dump({"task": "likelihood", "model": name, "threshold": 1e9, "window": 0, "nll": nll,
                       "n": 3}, f)
    assert table(paths, str(tmp_path / "t.md")).splitlines() == [
        "| task | model | nll | n |", "|---|---|---|---|", "| likelihood | ar | 0.5 | 3 |",
        "| likelihood | mdlm | 0.75 | 3 |"]
