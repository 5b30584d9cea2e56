"""One transformer for all four methods. It knows no objective: a method decides the tokens, their
positions and who may attend to whom, and reads the logits it needs.

    logits = model(idx, pos, mask, cache)

- idx  (B, T) token ids.
- pos  (B, T) the position of each token in the sequence. Rotary embeddings are computed from it, so
       repeated positions (the [x0 | xt] layout of BD3-LM) and permuted positions (Set Diffusion lays tokens
       out in generation order) need nothing special. Default: 0..T-1 after the cache.
- mask boolean, broadcastable to (B, 1, T, cache.length + T), True = may attend. None = causal, which takes
       SDPA's is_causal fast path (flash attention on GPU).
- cache a KVCache: keys/values of a committed prefix. The forward attends to [prefix + the new tokens] and
       writes the new keys/values after the prefix, but only `cache.commit(n)` (keep the first n new tokens)
       or `cache.crop(n)` changes what is committed. So a diffusion step can run its masked queries against a
       fixed clean prefix and keep only the tokens it decided.

The block is Qwen3's (so its weights load as they are): pre-norm RMSNorm, grouped-query attention with
optional per-head QK RMSNorm, rotary embeddings, SwiGLU MLP, optional tied embeddings. Parameter names follow
the Hugging Face Qwen3 layout without the leading "model.". `norm="layer"` and `mlp="gelu"` give the DiT-style
variant (LayerNorm, GELU MLP with biases) of the paper's OWT/LM1B models; `from_dit` converts their released
weights (see there).
"""
import json
import math
import os
import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    vocab_size: int = 258
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int = 4            # grouped-query attention when < n_head
    n_embd: int = 128
    head_dim: int = 0             # 0 = n_embd // n_head (Qwen3 sets it explicitly: 128)
    intermediate_size: int = 0    # MLP hidden size, 0 = 4 * n_embd
    rope_theta: float = 10000.0
    qk_norm: bool = True          # RMSNorm over each head of q and k (Qwen3)
    tie_embeddings: bool = True   # lm_head shares the token embedding
    norm: str = "rms"             # "rms" (Qwen3) or "layer" (DiT: LayerNorm, weight only)
    mlp: str = "swiglu"           # "swiglu" (Qwen3) or "gelu" (DiT: GELU(tanh) MLP with biases)
    norm_eps: float = 1e-6
    norm_bias: bool = False       # LayerNorm with a bias (a released DiT's adaLN shift, folded in by from_dit)
    lm_head_bias: bool = False    # the DiT's output layer has a bias

    def __post_init__(self):
        self.head_dim = self.head_dim or self.n_embd // self.n_head
        self.intermediate_size = self.intermediate_size or 4 * self.n_embd
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} must be a multiple of n_kv_head={self.n_kv_head}")
        if self.norm not in ("rms", "layer") or self.mlp not in ("swiglu", "gelu"):
            raise ValueError(f"norm must be 'rms' or 'layer' and mlp 'swiglu' or 'gelu', got {self.norm}, {self.mlp}")
        if self.norm_bias and self.norm != "layer":
            raise ValueError("norm_bias needs norm='layer' (RMSNorm has no bias)")


class KVCache:
    """Keys and values of every layer, preallocated to max_len, plus the committed length.

    A forward writes its T new entries at [length, length + T) and attends to [0, length + T); the entries
    stay uncommitted (the next forward overwrites them) until commit(n) keeps the first n of them. Storage is
    allocated on first write, with the dtype and device of the keys, so the cache has no dtype policy.
    """

    def __init__(self, n_layer: int, batch_size: int, max_len: int):
        self.max_len, self.batch_size = max_len, batch_size
        self.k: list = [None] * n_layer           # each (B, n_kv_head, max_len, head_dim)
        self.v: list = [None] * n_layer
        self.length = 0                            # committed entries
        self.written = 0                           # entries written by the last forward (uncommitted)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        B, H, T, D = k.shape
        if self.length + T > self.max_len:
            raise ValueError(f"KV cache overflow: {self.length} cached + {T} new > max_len={self.max_len}; "
                             f"use a shorter prompt or fewer new tokens")
        if self.k[layer] is None:
            self.k[layer] = k.new_zeros(B, H, self.max_len, D)
            self.v[layer] = v.new_zeros(B, H, self.max_len, D)
        self.k[layer][:, :, self.length:self.length + T] = k
        self.v[layer][:, :, self.length:self.length + T] = v
        self.written = T
        end = self.length + T
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def commit(self, n: int):
        """Keep the first n entries written by the last forward."""
        if not 0 <= n <= self.written:
            raise ValueError(f"cannot commit {n} entries: the last forward wrote {self.written}")
        self.length += n
        self.written = 0

    def crop(self, n: int):
        """Forget everything after the first n committed entries."""
        self.length, self.written = min(n, self.length), 0


def norm_layer(cfg: ModelConfig, dim: int) -> nn.Module:
    if cfg.norm == "rms":
        return nn.RMSNorm(dim, eps=cfg.norm_eps)
    return nn.LayerNorm(dim, eps=cfg.norm_eps, bias=cfg.norm_bias)


def rotary(pos: torch.Tensor, head_dim: int, theta: float):
    """cos, sin of shape (B, 1, T, head_dim) for integer positions pos (B, T); half-split (Qwen) layout."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float32) / head_dim)
    angles = pos.float()[..., None] * inv_freq                     # (B, T, head_dim/2)
    angles = torch.cat([angles, angles], dim=-1)[:, None]           # (B, 1, T, head_dim)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        H, Hkv, D = cfg.n_head, cfg.n_kv_head, cfg.head_dim
        self.q_proj = nn.Linear(cfg.n_embd, H * D, bias=False)
        self.k_proj = nn.Linear(cfg.n_embd, Hkv * D, bias=False)
        self.v_proj = nn.Linear(cfg.n_embd, Hkv * D, bias=False)
        self.o_proj = nn.Linear(H * D, cfg.n_embd, bias=False)
        if cfg.qk_norm:
            self.q_norm = nn.RMSNorm(D, eps=cfg.norm_eps)
            self.k_norm = nn.RMSNorm(D, eps=cfg.norm_eps)

    def forward(self, x, cos, sin, mask, cache):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.cfg.n_head, -1)              # (B, T, H, D)
        k = self.k_proj(x).view(B, T, self.cfg.n_kv_head, -1)           # (B, T, Hkv, D)
        v = self.v_proj(x).view(B, T, self.cfg.n_kv_head, -1)
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rotary(q.transpose(1, 2), cos, sin)                    # (B, H, T, D)
        k = apply_rotary(k.transpose(1, 2), cos, sin)                    # (B, Hkv, T, D)
        v = v.transpose(1, 2)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)                        # (B, Hkv, length + T, D)
        is_causal = mask is None and T > 1                               # mask=None means causal
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                           enable_gqa=self.cfg.n_kv_head != self.cfg.n_head)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.swiglu = cfg.mlp == "swiglu"
        if self.swiglu:
            self.gate_proj = nn.Linear(cfg.n_embd, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.n_embd, cfg.intermediate_size, bias=not self.swiglu)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.n_embd, bias=not self.swiglu)

    def forward(self, x):
        if self.swiglu:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.input_layernorm = norm_layer(cfg, cfg.n_embd)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = norm_layer(cfg, cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.norm = norm_layer(cfg, cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=cfg.lm_head_bias)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():   # scaled init of the residual projections (GPT-2)
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, pos=None, mask=None, cache=None, last=None):
        """Logits (B, T, V), or (B, last, V) for the last `last` positions only (saves the lm_head)."""
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if pos is None:
            pos = torch.arange(start, start + T, device=idx.device).expand(B, T)
        if mask is None and start > 0 and T > 1:     # causal with a prefix: SDPA's is_causal is top-left aligned
            mask = torch.ones(T, start + T, dtype=torch.bool, device=idx.device).tril(start)
        cos, sin = rotary(pos, self.cfg.head_dim, self.cfg.rope_theta)
        x = self.embed_tokens(idx)                   # (B, T, C)
        for block in self.layers:
            x = block(x, cos, sin, mask, cache)
        if last is not None:
            x = x[:, -last:]
        return self.lm_head(self.norm(x))            # (B, T or last, V)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


# ----------------------------------------------------------------------------- Hugging Face Qwen3 weights

def qwen3_config(hf: dict) -> ModelConfig:
    """ModelConfig of a Hugging Face Qwen3 config.json (transformers 4.x `rope_theta` or 5.x `rope_parameters`)."""
    kind, archs = hf.get("model_type"), hf.get("architectures") or []
    if kind != "qwen3" and not (kind is None and {"Qwen3ForCausalLM", "Qwen3Model"} & set(archs)):
        raise ValueError(f"not a Qwen3 config: model_type={kind!r}, architectures={archs}")
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default" or hf.get("use_sliding_window") \
            or hf.get("attention_bias") or hf.get("hidden_act", "silu") != "silu":
        raise ValueError("unsupported Qwen3 variant: rope scaling, sliding window, attention bias or a non-silu MLP")
    if missing := [k for k in ("vocab_size", "num_hidden_layers", "num_attention_heads", "hidden_size",
                               "intermediate_size") if k not in hf]:
        raise ValueError(f"the Qwen3 config lacks {missing}")
    heads = hf["num_attention_heads"]                # defaults below are transformers' Qwen3Config ones
    return ModelConfig(vocab_size=hf["vocab_size"], n_layer=hf["num_hidden_layers"], n_head=heads,
                       n_kv_head=hf.get("num_key_value_heads") or heads, n_embd=hf["hidden_size"],
                       head_dim=hf.get("head_dim", 128), intermediate_size=hf["intermediate_size"],
                       rope_theta=float(hf.get("rope_theta") or rope.get("rope_theta") or 10000.0),
                       qk_norm=True, tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
                       norm_eps=hf.get("rms_norm_eps", 1e-6))


def hub_dir(name_or_path: str, allow_patterns: list) -> str:
    """A local directory as it is, else a Hub repo id fetched with huggingface_hub (HF_TOKEN, HF_HOME and
    HF_HUB_OFFLINE apply) -> the snapshot directory. Errors are one line naming the id."""
    path = os.path.expanduser(name_or_path)
    if os.path.isdir(path):
        return path
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:   # a path, not an "org/name" repo id
        raise FileNotFoundError(f"{name_or_path}: no such directory, and not a Hugging Face repo id (org/name)")
    from huggingface_hub import snapshot_download
    try:
        return snapshot_download(repo_id=name_or_path, allow_patterns=allow_patterns)
    except Exception as e:   # offline and not cached, no network, unknown or gated repo, ...
        raise FileNotFoundError(f"{name_or_path}: no such local directory, and downloading it from the Hugging "
                                f"Face Hub failed ({type(e).__name__}): check the id, set HF_HUB_OFFLINE=0 and "
                                f"check the network (HF_TOKEN for a gated repo), or pass a local directory") from None


def load_safetensors(path: str) -> dict:
    """The tensors of one .safetensors file; a damaged or truncated file is a ValueError naming it."""
    from safetensors.torch import load_file
    try:
        return load_file(path)
    except Exception as e:        # safetensors_rust.SafetensorError: header too large, truncated data, ...
        raise ValueError(f"{path} is damaged or not a safetensors file ({str(e).splitlines()[0][:80]}): "
                         f"write or download it again") from None


def read_safetensors(d: str) -> dict:
    """All tensors of model.safetensors, or of the shards a model.safetensors.index.json lists, in d."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"] if os.path.isfile(os.path.join(d, "model.safetensors")) else []
    if not files:
        raise FileNotFoundError(f"{d} holds neither model.safetensors nor model.safetensors.index.json")
    return {k: v for f in files for k, v in load_safetensors(os.path.join(d, f)).items()}


def from_state(cfg: ModelConfig, state: dict, dtype=torch.float32) -> Transformer:
    """A Transformer holding exactly `state` (our names; lm_head.weight optional when tied), cast to dtype.
    Built on the meta device, so no time goes into a random init that would be overwritten."""
    with torch.device("meta"):
        model = Transformer(cfg)
    state = {k: v.to(dtype) for k, v in state.items() if not (cfg.tie_embeddings and k == "lm_head.weight")}
    try:
        missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as e:                     # shape mismatches
        raise ValueError(f"weights do not fit the model: {str(e).splitlines()[-1].strip()}") from None
    if cfg.tie_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
        missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ValueError(f"weights do not fit the model: missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    return model.eval()


def from_pretrained(name_or_path: str, dtype=torch.float32) -> Transformer:
    """A Hugging Face Qwen3 model (e.g. "Qwen/Qwen3-1.7B-Base", or a local directory holding its config.json
    and safetensors) as our Transformer, in eval mode."""
    d = hub_dir(name_or_path, ["config.json", "*.safetensors", "model.safetensors.index.json"])
    with open(os.path.join(d, "config.json")) as f:
        cfg = qwen3_config(json.load(f))
    state = {k.removeprefix("model."): v for k, v in read_safetensors(d).items()}
    return from_state(cfg, state, dtype)


# ----------------------------------------------------------------------------- the official DiT's weights (OWT, LM1B)

DIT_NAME = re.compile(r"backbone\.(vocab_embed\.embedding|sigma_map\.mlp\.[02]\.(weight|bias)|output_layer\."
                      r"(norm_final\.weight|linear\.(weight|bias)|adaLN_modulation\.(weight|bias))|blocks\.\d+\."
                      r"(norm1\.weight|attn_qkv\.weight|attn_out\.weight|norm2\.weight|mlp\.[02]\.(weight|bias)|"
                      r"adaLN_modulation\.(weight|bias)))")
DIT_IGNORED = {"backbone.rotary_emb.inv_freq", "sampling_eps_min", "sampling_eps_max"}   # recomputed / unused


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """The DiT's sinusoidal embedding of t (N,) -> (N, dim): [cos(t f) | sin(t f)], f = max_period^(-k/(dim/2))."""
    freqs = torch.exp(-math.log(max_period) * torch.arange(dim // 2, dtype=t.dtype) / (dim // 2))
    args = t[:, None] * freqs[None]                                           # (N, dim/2)
    return torch.cat([args.cos(), args.sin()], dim=-1)


def from_dit(raw: dict, n_head: int) -> tuple[ModelConfig, dict]:
    """The official DiT's released tensors (backbone.vocab_embed.embedding, backbone.blocks.{i}..., see DIT_NAME)
    -> (ModelConfig, our state dict in fp32). Any other name is refused.

    The DiT is this Transformer with LayerNorm (eps 1e-5), no QK-norm, GELU(tanh) MLP with biases, RoPE base
    1e4 (the same half-split layout) and an untied output Linear with a bias. Its qkv is fused, rows laid out
    (three h d). With adaLN on, the conditioning is a constant, c = silu(sigma_map(0)), so every block's
    (shift, scale, gate) = adaLN_modulation(c) is a constant vector and folds into the weights:
    norm(x) * (1 + scale) + shift is a LayerNorm with weight w * (1 + scale) and bias shift, and
    gate * (W y + b) is the output projection with its rows (and bias) scaled by gate.
    """
    if unknown := sorted(k for k in raw if not DIT_NAME.fullmatch(k) and k not in DIT_IGNORED):
        raise ValueError(f"unknown tensor {unknown[0]!r} (and {len(unknown) - 1} more) in a DiT checkpoint: "
                         f"refusing to load what this converter does not know")
    w = {k.removeprefix("backbone."): v.double() for k, v in raw.items() if k not in DIT_IGNORED}
    try:
        emb, n_layer = w["vocab_embed.embedding"], 1 + max(int(k.split(".")[1]) for k in w if k.startswith("blocks."))
        V, D = emb.shape
        c = None
        if "blocks.0.adaLN_modulation.weight" in w:                            # c = silu(sigma_map(sigma = 0))
            t_freq = timestep_embedding(torch.zeros(1, dtype=torch.float64), w["sigma_map.mlp.0.weight"].shape[1])
            h = F.silu(F.linear(t_freq, w["sigma_map.mlp.0.weight"], w["sigma_map.mlp.0.bias"]))
            c = F.silu(F.linear(h, w["sigma_map.mlp.2.weight"], w["sigma_map.mlp.2.bias"]))   # (1, cond_dim)

        def modulation(prefix: str, n: int):                                   # (shift, scale[, gate]) * blocks
            if c is None:                                                      # adaLN off: 0, 0, 1
                zero, one = torch.zeros(D, dtype=torch.float64), torch.ones(D, dtype=torch.float64)
                return [zero, zero, one] * 2 if n == 6 else [zero, zero]
            return F.linear(c, w[prefix + "adaLN_modulation.weight"], w[prefix + "adaLN_modulation.bias"])[0].chunk(n)

        state = {"embed_tokens.weight": emb}
        for i in range(n_layer):
            p, o = f"blocks.{i}.", f"layers.{i}."
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = modulation(p, 6)
            q, k, v = w[p + "attn_qkv.weight"].chunk(3, dim=0)                 # (three h d) rows
            state.update({
                o + "input_layernorm.weight": w[p + "norm1.weight"] * (1 + scale_msa),
                o + "input_layernorm.bias": shift_msa,
                o + "self_attn.q_proj.weight": q, o + "self_attn.k_proj.weight": k, o + "self_attn.v_proj.weight": v,
                o + "self_attn.o_proj.weight": gate_msa[:, None] * w[p + "attn_out.weight"],
                o + "post_attention_layernorm.weight": w[p + "norm2.weight"] * (1 + scale_mlp),
                o + "post_attention_layernorm.bias": shift_mlp,
                o + "mlp.up_proj.weight": w[p + "mlp.0.weight"], o + "mlp.up_proj.bias": w[p + "mlp.0.bias"],
                o + "mlp.down_proj.weight": gate_mlp[:, None] * w[p + "mlp.2.weight"],
                o + "mlp.down_proj.bias": gate_mlp * w[p + "mlp.2.bias"]})
        shift, scale = modulation("output_layer.", 2)
        state.update({"norm.weight": w["output_layer.norm_final.weight"] * (1 + scale), "norm.bias": shift,
                      "lm_head.weight": w["output_layer.linear.weight"], "lm_head.bias": w["output_layer.linear.bias"]})
        hidden = w["blocks.0.mlp.0.weight"].shape[0]
    except (KeyError, ValueError) as e:
        raise ValueError(f"not a complete DiT checkpoint: missing {e}") from None
    if D % n_head:
        raise ValueError(f"DiT width {D} is not a multiple of n_heads={n_head}")
    cfg = ModelConfig(vocab_size=V, n_layer=n_layer, n_head=n_head, n_kv_head=n_head, n_embd=D,
                      intermediate_size=hidden, rope_theta=10000.0, qk_norm=False, tie_embeddings=False,
                      norm="layer", mlp="gelu", norm_eps=1e-5, norm_bias=True, lm_head_bias=True)
    return cfg, {k: v.float() for k, v in state.items()}
