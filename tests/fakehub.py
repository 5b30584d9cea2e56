"""Fakes of what lives on the Hugging Face Hub, for offline tests: a Hub cache snapshot (fake_hub), a
subprocess that reads it (run_offline: huggingface_hub reads HF_HOME and HF_HUB_OFFLINE when imported), tiny
weights in the official released layouts (released_weights, dit_weights) and a Qwen3-format tokenizer.json."""
import dataclasses
import json
import os
import subprocess
import sys

from common import checkpoint
from model import ModelConfig, Transformer

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # the repository root
V = 300                                # tiny vocabulary


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def fake_hub(hf_home, repo_id) -> str:
    """An empty snapshot of repo_id in a Hugging Face cache under hf_home (refs/main -> the revision)."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    root = os.path.join(hf_home, "hub", "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(root, "snapshots", rev))
    os.makedirs(os.path.join(root, "refs"))
    with open(os.path.join(root, "refs", "main"), "w") as f:
        f.write(rev)
    return os.path.join(root, "snapshots", rev)


def run_offline(hf_home, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


TINY = ModelConfig(vocab_size=V, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, head_dim=8,
                   intermediate_size=48,
                   rope_theta=1e6)


def hf_names(state: dict, cfg: ModelConfig) -> dict:
    """Our state dict with each fused self_attn.qkv_proj.weight split into Hugging Face's
    q/k/v_proj.weight."""
    out = {}
    for k, v in state.items():
        if k.endswith("qkv_proj.weight"):
            sizes = [cfg.n_head * cfg.head_dim] + [cfg.n_kv_head * cfg.head_dim] * 2
            out.update({k.replace("qkv_proj", s + "_proj"): w for s, w in zip("qkv", v.split(sizes))})
        else:
            out[k] = v
    return out


def released_weights(tie=True, ema=True, seed=0) -> tuple[dict, dict]:
    """(state dict in the official layout, the state in our names it must load as). With ema, the official
    dict also holds the raw weights under backbone.*, and the EMA copy (what must load) under
    ema.backbone.*. Beside the weights, Set Diffusion's static_attention_mask buffer (not left out by the
    official push code)."""
    def official(model, prefix):                 # Hugging Face names: q, k, v projections apart
        return {(prefix + "lm_head.weight" if k == "lm_head.weight" else prefix + "model." + k): v
                for k, v in hf_names(checkpoint.weights(model), TINY).items()}
    torch.manual_seed(seed)
    cfg = dataclasses.replace(TINY, tie_embeddings=tie)
    raw, avg = Transformer(cfg), Transformer(cfg)
    state = {"static_attention_mask": torch.ones(8, 8, dtype=torch.bool).tril(), **official(raw, "backbone.")}
    if ema:
        state.update(official(avg, "ema.backbone."))
    return state, checkpoint.weights(avg if ema else raw)


def dit_weights(V=40, D=32, H=4, n_layer=2, cond=16, adaln=True, seed=0):
    """A random official DiT (OWT/LM1B releases) under its names; non-zero adaLN, so the folding is used."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, std=0.2: torch.randn(*s, generator=g) * std        # noqa: E731
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


def save_dit(d, w, config, bin_file=False) -> str:
    """A released DiT folder: its weights (model.safetensors, or pytorch_model.bin) and config.json."""
    from safetensors.torch import save_file
    os.makedirs(d, exist_ok=True)
    if bin_file:
        torch.save(w, os.path.join(d, "pytorch_model.bin"))
    else:
        save_file({k: v.contiguous() for k, v in w.items()}, os.path.join(d, "model.safetensors"))
    write_json(os.path.join(d, "config.json"), config)
    return str(d)


def qwen_format_tokenizer(folder) -> str:
    """A Qwen3-format tokenizer.json in folder: 256 byte tokens (id = byte), <|endoftext|> 256, <|fim_middle|>
    257, <|im_end|> 258; returns the folder."""
    from data.qwen import gpt2_byte_alphabet
    names = ["<|endoftext|>", "<|fim_middle|>", "<|im_end|>"]
    added = [{"id": 256 + i, "content": t} for i, t in enumerate(names)]
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "tokenizer.json"),
               {"model": {"vocab": gpt2_byte_alphabet()}, "added_tokens": added})
    return str(folder)
