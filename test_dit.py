"""The paper's OWT/LM1B pieces, offline: the official DiT's released weights converted into model.py's Transformer
(checked against a reference forward written from the DiT's equations, adaLN on and off), the released keys,
the GPT-2 and BERT tokenizers, the OWT/LM1B token caches, corpus likelihood and zero-shot MCQA through eval.py.

    python -m pytest -q test_dit.py

Nothing downloads: the GPT-2 ranks come from the test-only package openai-whisper (its gpt2.tiktoken), the BERT
vocabulary is a tiny vocab.txt made here, checkpoints are tiny random DiTs saved under the official names.
"""
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

import checkpoint
from model import from_dit, from_state, timestep_embedding

REPO = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- a reference DiT, from its equations

def dit_weights(V=40, D=32, H=4, n_layer=2, cond=16, adaln=True, seed=0):
    """Random weights under the official names (non-zero adaLN, so the folding is exercised)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, std=0.2: torch.randn(*s, generator=g) * std
    w = {"backbone.vocab_embed.embedding": r(V, D, std=1.0), "backbone.rotary_emb.inv_freq": torch.ones(D // H // 2),
         "backbone.output_layer.norm_final.weight": 1 + r(D), "backbone.output_layer.linear.weight": r(V, D),
         "backbone.output_layer.linear.bias": r(V)}
    for i in range(n_layer):
        p = f"backbone.blocks.{i}."
        w.update({p + "norm1.weight": 1 + r(D), p + "attn_qkv.weight": r(3 * D, D), p + "attn_out.weight": r(D, D),
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
    pos = torch.stack([torch.randperm(9, generator=g) for _ in range(2)])    # permuted positions (Set Diffusion)
    mask = torch.rand(2, 1, 9, 9, generator=g) < 0.6
    mask |= torch.eye(9, dtype=torch.bool)
    with torch.no_grad():
        ours, ref = model(idx, pos, mask), reference_dit(w, idx, pos, 4, mask)
        assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-4), (ours - ref).abs().max()
        causal = torch.ones(9, 9, dtype=torch.bool).tril()
        assert torch.allclose(model(idx), reference_dit(w, idx, torch.arange(9).expand(2, 9), 4, causal), atol=1e-4)


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
    R = checkpoint.RELEASED
    assert R["owt:setdlm-smax16"] == R["owt:setdlm-d8"] == "kuleshov-group/owt-setdlm-smax16"
    assert R["lm1b:setdlm-d4"] == "kuleshov-group/lm1b-setdlm-smax8" and R["lm1b:bd3lm-s16"] == "kuleshov-group/lm1b-bd3lm-s16"
    assert checkpoint.ALSO_NAMED["kuleshov-group/owt-setdlm-smax16"] == "kuleshov-group/owt-setdlm-d8"
    assert R["owt:bd3lm-block_size8"] == "kuleshov-group/bd3lm-owt-block_size8" and R["owt:mdlm-owt"] == "kuleshov-group/mdlm-owt"
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


def fake_hub(hf_home, repo_id) -> str:
    rev = "0123456789abcdef0123456789abcdef01234567"
    root = os.path.join(hf_home, "hub", "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(root, "snapshots", rev))
    os.makedirs(os.path.join(root, "refs"))
    with open(os.path.join(root, "refs", "main"), "w") as f:
        f.write(rev)
    return os.path.join(root, "snapshots", rev)


def test_released_dit_from_fake_hub_both_names(tmp_path):
    """owt:setdlm-smax16 finds the repo under its other name (-setdlm-d8); lm1b:mdlm loads a .bin with adaLN."""
    hf = tmp_path / "hf"
    cfg = {"architectures": ["SetDLM"], "model_type": "bd3lm", "length": 16, "n_heads": 4,
           "tokenization_config": {"mask_token_id": 39}}
    save_dit(fake_hub(hf, "kuleshov-group/owt-setdlm-d8"), dit_weights(adaln=False), cfg)
    save_dit(fake_hub(hf, "kuleshov-group/lm1b-mdlm"), dit_weights(adaln=True, seed=3),
             {**cfg, "architectures": ["MDLM"], "model_type": "mdlm"}, bin_file=True)
    code = """
import json, torch, checkpoint
from model import from_dit, from_state
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
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["owt:setdlm-smax16"] == ["kuleshov-group/owt-setdlm-d8", "setdiffusion", "owt", "gpt2", 16, 16, 39, 1e-5]
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
                                                        torch.ones(16, 16, dtype=torch.bool).tril()), atol=1e-4)
    bad = save_dit(tmp_path / "owt-ar", {**w, "backbone.extra.weight": torch.zeros(2)}, {"architectures": ["AR"]})
    with pytest.raises(ValueError, match="unknown tensor 'backbone.extra.weight'"):
        checkpoint.load(bad)
