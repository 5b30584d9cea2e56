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
variant (LayerNorm without bias, GELU MLP with biases) of the paper's OWT/LM1B models.
"""
import math
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

    def __post_init__(self):
        self.head_dim = self.head_dim or self.n_embd // self.n_head
        self.intermediate_size = self.intermediate_size or 4 * self.n_embd
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} must be a multiple of n_kv_head={self.n_kv_head}")
        if self.norm not in ("rms", "layer") or self.mlp not in ("swiglu", "gelu"):
            raise ValueError(f"norm must be 'rms' or 'layer' and mlp 'swiglu' or 'gelu', got {self.norm}, {self.mlp}")


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
    return nn.LayerNorm(dim, eps=cfg.norm_eps, bias=False)


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
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
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
