"""One transformer for all four methods. It knows no objective: a method decides the tokens, their
positions and who may attend to whom, and reads the logits it needs.

    logits = model(idx, pos, mask, cache)

- idx  (B, T) token ids.
- pos  (B, T) the position of each token in the sequence. Rotary embeddings are computed from it, so
       repeated positions (the [x0 | xt] layout of BD3-LM) and permuted positions (Set Diffusion lays tokens
       out in generation order) need nothing special. Default: 0..T-1 after the cache.
- mask boolean, broadcastable to (B, 1, T, cache.length + T), True = may attend. None = causal, which takes
       SDPA's is_causal fast path (flash attention on GPU). Or a layout's mask_mod(b, h, q_idx, kv_idx) ->
       bool (the method files state their training masks so): the model builds it with layout_mask, as a dense
       bool, or as a FlexAttention BlockMask when model.flex is on (train.py on CUDA), so the 2L training
       layouts never hold a dense (2L, 2L) mask. The methods never see which.
- cache a KVCache: keys/values of a committed prefix. The forward attends to [prefix + the new tokens] and
       writes the new keys/values after the prefix, but only `cache.commit(n)` (keep the first n new tokens)
       or `cache.crop(n)` changes what is committed. So a diffusion step can run its masked queries against a
       fixed clean prefix and keep only the tokens it decided. Samplers get theirs from model.new_cache.

Static-shape decoding for torch.compile (static_decoding, the last section) is for speed only: same tokens.

The block is Qwen3's (so its weights load as they are): pre-norm RMSNorm, grouped-query attention with
optional per-head QK RMSNorm, rotary embeddings, SwiGLU MLP, optional tied embeddings. Parameter names follow
the Hugging Face Qwen3 layout without the leading "model.". `norm="layer"` and `mlp="gelu"` give the DiT-style
variant (LayerNorm, GELU MLP with biases) of the paper's OWT/LM1B models; common/pretrained.py loads Qwen3
weights and converts the released ones, and common/weights.py holds the one state-dict check (load_weights).
"""
import functools
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention


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
    norm: str = "rms"             # "rms" (Qwen3) or "layer" (DiT: LayerNorm)
    mlp: str = "swiglu"           # "swiglu" (Qwen3) or "gelu" (DiT: GELU(tanh) MLP with biases)
    norm_eps: float = 1e-6
    norm_bias: bool = False       # LayerNorm with a bias (a released DiT's adaLN shift, folded in: from_dit)
    lm_head_bias: bool = False    # the DiT's output layer has a bias

    def __post_init__(self):
        if not self.head_dim and self.n_embd % self.n_head:      # each head is n_embd / n_head wide
            raise ValueError(f"n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")
        self.head_dim = self.head_dim or self.n_embd // self.n_head
        if self.head_dim % 2:                                    # RoPE rotates pairs of a head's features
            raise ValueError(f"head_dim={self.head_dim} (n_embd / n_head) must be even: rotary embeddings "
                             f"rotate pairs")
        self.intermediate_size = self.intermediate_size or 4 * self.n_embd
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} must be a multiple of n_kv_head={self.n_kv_head}")
        if self.norm not in ("rms", "layer") or self.mlp not in ("swiglu", "gelu"):
            raise ValueError(f"norm must be 'rms' or 'layer' and mlp 'swiglu' or 'gelu', "
                             f"got {self.norm}, {self.mlp}")
        if self.norm_bias and self.norm != "layer":
            raise ValueError("norm_bias needs norm='layer' (RMSNorm has no bias)")


# ----------------------------------------------------------------------------- masks
# A layout's mask is a FlexAttention mask_mod(b, h, q_idx, kv_idx) -> bool, which may index tensors it closes
# over (padding, streams, blocks); the model turns it into a dense mask or a BlockMask (layout_mask).

def with_padding(mask, pad_mask):
    """mask (Tq, Tk) and pad_mask (B, Tk) -> (B, 1, Tq, Tk): nobody attends to padding, which sees itself."""
    eye = torch.eye(*mask.shape, dtype=torch.bool, device=mask.device)   # keep every row non-empty
    return (mask & ~pad_mask[:, None, None, :]) | eye


def padded(mask_mod, pad_mask):
    """with_padding for a mask_mod: pad_mask (B, Tk), the same rule."""
    def mod(b, h, q_idx, kv_idx):
        return mask_mod(b, h, q_idx, kv_idx) & ~pad_mask[b, kv_idx] | (q_idx == kv_idx)
    return mod


def layout_mask(mask_mod, B: int, Q: int, KV: int, device=None, flex: bool = False):
    """The attention mask of mask_mod over Q queries and KV keys. flex: a BlockMask from create_block_mask;
    else the dense bool (B, 1, Q, KV): the mask_mod on the broadcast index grid."""
    if flex:      # compiled on CUDA: the block mask without a dense (Q, KV) grid
        return create_block_mask(mask_mod, B, None, Q, KV, device=device,
                                 _compile=str(device).startswith("cuda"))
    b, q, kv = (torch.arange(n, device=device) for n in (B, Q, KV))
    return mask_mod(b[:, None, None, None], b.new_zeros(()), q[:, None], kv).expand(B, 1, Q, KV)


# ----------------------------------------------------------------------------- the model

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
        self.check_room(T)
        if self.k[layer] is None:
            self.k[layer] = k.new_zeros(B, H, self.max_len, D)
            self.v[layer] = v.new_zeros(B, H, self.max_len, D)
        self.k[layer][:, :, self.length:self.length + T] = k
        self.v[layer][:, :, self.length:self.length + T] = v
        self.written = T
        end = self.length + T
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def check_room(self, T: int):
        if self.length + T > self.max_len:
            raise ValueError(f"KV cache overflow: {self.length} cached + {T} new > max_len={self.max_len}; "
                             f"use a shorter prompt or fewer new tokens")

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
    """cos, sin of shape (B, 1, T, head_dim) for integer positions pos (B, T), computed once per forward.
    Half-split (Qwen) layout; sin carries the sign of rotate_half: [-sin | sin], so apply_rotary is 3 ops."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float32) / head_dim)
    angles = pos.float()[..., None] * inv_freq                      # (B, T, head_dim/2)
    cos, sin = angles.cos(), angles.sin()
    return torch.cat([cos, cos], -1)[:, None], torch.cat([-sin, sin], -1)[:, None]   # (B, 1, T, head_dim)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, with rotate_half(x) = [-x2 | x1] = roll(x) * sign (sign in sin).
    Computed in float32 (cos and sin are), returned in x's dtype."""
    return (x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        H, Hkv, D = cfg.n_head, cfg.n_kv_head, cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.n_embd, (H + 2 * Hkv) * D, bias=False)   # q, k, v in one matmul
        self.o_proj = nn.Linear(H * D, cfg.n_embd, bias=False)
        if cfg.qk_norm:
            self.q_norm = nn.RMSNorm(D, eps=cfg.norm_eps)
            self.k_norm = nn.RMSNorm(D, eps=cfg.norm_eps)

    def forward(self, x, cos, sin, mask, cache):
        B, T, _ = x.shape
        H, Hkv = self.cfg.n_head, self.cfg.n_kv_head
        qkv = self.qkv_proj(x).view(B, T, H + 2 * Hkv, -1)               # (B, T, H + 2 Hkv, D)
        q, k, v = qkv.split([H, Hkv, Hkv], dim=2)                         # (B, T, H or Hkv, D)
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        # q and k rotated apart, each a dense tensor of its own: slices of one rotated tensor made compiled
        # training copy them, and bake the first trimmed length into the backward (docs/speed.md)
        q = apply_rotary(q.transpose(1, 2), cos, sin)                    # (B, H, T, D)
        k = apply_rotary(k.transpose(1, 2), cos, sin)                    # (B, Hkv, T, D)
        v = v.transpose(1, 2)                                            # (B, Hkv, T, D)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)                        # (B, Hkv, length + T, D)
        if isinstance(mask, BlockMask):                                  # FlexAttention, no cache
            y = flex_attend(q, k, v, mask, Hkv != H)
            return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))
        is_causal = mask is None and T > 1                               # mask=None means causal
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                           enable_gqa=Hkv != H)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


@functools.cache
def compiled_flex():
    """flex_attention compiled once (lazily: importing model.py compiles nothing)."""
    return torch.compile(flex_attention)


def flex_attend(q, k, v, block_mask: BlockMask, enable_gqa: bool):
    """FlexAttention: compiled on CUDA (its fused kernel, no score matrix in memory); eager elsewhere, which
    materialises the scores and has no backward on CPU (tests compare its forward with SDPA's)."""
    fn = compiled_flex() if q.is_cuda else flex_attention
    # v is a slice of the qkv projection, at an offset into it; torch 2.13's compiled CPU FlexAttention
    # template, fused with the ops that make q and k, reads it from the projection's start (the offset
    # lost): a wrong loss, no error (docs/speed.md). Its own buffer costs one copy of v.
    return fn(q, k, v.contiguous(), block_mask=block_mask, enable_gqa=enable_gqa)


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
        # Two switches the scripts set; the method files never see them.
        self.flex = False     # mask_mods as FlexAttention BlockMasks, not dense masks (train.py on CUDA)
        self.static = None    # a StaticDecoding (static_decoding(): eval.py/sample.py --compile), or None
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
        if callable(mask):                           # a layout's mask_mod: dense, or a BlockMask if self.flex
            mask = layout_mask(mask, B, T, start + T, idx.device, self.flex)
        if mask is None and start > 0 and T > 1:     # causal after a prefix (is_causal is top-left)
            mask = torch.ones(T, start + T, dtype=torch.bool, device=idx.device).tril(start)
        run = self.hidden if self.static is None else self.static.hidden    # static shapes: the last section
        x = run(idx, pos, mask, cache)                                       # (B, T, C)
        if last is not None:
            x = x[:, -last:]
        return self.lm_head(x)                       # (B, T or last, V)

    def hidden(self, idx, pos, mask, cache):
        """The final-normed hidden states (B, T, C): everything but the output head."""
        cos, sin = rotary(pos, self.cfg.head_dim, self.cfg.rope_theta)
        x = self.embed_tokens(idx)                   # (B, T, C)
        for block in self.layers:
            x = block(x, cos, sin, mask, cache)
        return self.norm(x)

    def new_cache(self, batch_size: int, max_len: int, slots: int) -> KVCache:
        """A KVCache for a sampler whose steps feed at most `slots` tokens (prefill aside); a StaticKVCache
        with static decoding on."""
        if self.static is not None:
            return StaticKVCache(self.static, batch_size, max_len, slots)
        return KVCache(len(self.layers), batch_size, max_len)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, beta2: float) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on norms and biases), as nanoGPT and the official
    recipes; betas (0.9, beta2)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, beta2))


# ----------------------------------------------------------------------------- backbone presets
# Named model shapes (train.py --preset). cnndm: the official from-scratch CNN/DM model, the Qwen3-0.6B-Base
# config with width 256, MLP 768 and 28 layers; heads, KV heads, head_dim, vocabulary, tying, theta inherited.
# dit-owt / dit-lm1b: the paper's OWT and LM1B DiT (12 x 768, 12 heads, LayerNorm, GELU MLP 4D, RoPE 1e4, an
# untied output layer with a bias) for GPT-2 + [MASK] and bert-base-uncased; adaLN off, as the official
# trains these methods (its dropout 0.1 and zero-initialised output layer are not reproduced).
DIT = dict(n_layer=12, n_head=12, n_kv_head=12, n_embd=768, intermediate_size=3072, rope_theta=10000.0,
           qk_norm=False, tie_embeddings=False, norm="layer", mlp="gelu", norm_eps=1e-5, lm_head_bias=True)
PRESETS = {
    "cnndm": dict(vocab_size=151936, n_layer=28, n_embd=256, intermediate_size=768, n_head=16, head_dim=128,
                  n_kv_head=8, rope_theta=1e6, tie_embeddings=True),
    "dit-owt": dict(vocab_size=50258, **DIT),
    "dit-lm1b": dict(vocab_size=30522, **DIT),
}


# ----------------------------------------------------------------------------- static-shape decoding
# For speed only (eval.py/sample.py --compile), as gpt-fast does: every cached step is padded to the sampler's
# fixed number of slots and attends to the whole preallocated cache under a validity mask, so one
# torch.compile graph (one CUDA graph with mode="reduce-overhead") serves every step. The method files do not
# change, and eager and static steps give the same tokens (tests/test_static.py).

def static_decoding(model: Transformer, compile: bool = False, mode: str | None = None) -> Transformer:
    """Static-shape steps for every sampler, and cache-less forwards (MDLM) through the same function:
    model.static = StaticDecoding(...); compile=True compiles it (mode="reduce-overhead" adds CUDA graphs).
    model.static = None undoes it."""
    if compile:      # one graph per shape: (batch, slots) per sampler and eval batch (MDLM: one dynamic);
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)   # then eager
    model.static = StaticDecoding(model, compile, mode)
    return model


class StaticDecoding:
    """The static-shape state of one model, in one place: `step`, the function that runs a padded step
    (model.hidden, compiled or not), and `storage`, the KV storage every StaticKVCache of one shape shares
    (so one compiled graph serves every step of every call)."""

    def __init__(self, model: Transformer, compile: bool, mode: str | None):
        self.model, self.storage = model, None
        self.step = torch.compile(model.hidden, mode=mode, dynamic=False) if compile else model.hidden
        # without a cache (MDLM: a canvas as wide as prompt + reply): one graph for every width and batch
        self.full = torch.compile(model.hidden, mode=mode, dynamic=True) if compile else model.hidden

    def hidden(self, idx, pos, mask, cache):
        """model.hidden through self.step: a cached step of T <= slots tokens padded to the cache's slots, or
        a forward without a cache through self.full (dense tensors: a view's strides would recompile the
        graph); a prefill (T > slots) runs eagerly."""
        T = idx.shape[1]
        if cache is None:
            return self.full(*(t if t is None else t.contiguous() for t in (idx, pos, mask)), None)
        if not isinstance(cache, StaticKVCache) or T > cache.slots:
            return self.model.hidden(idx, pos, mask, cache)
        if mask is None:                             # causal (T = 1 or no prefix)
            mask = torch.ones(T, cache.length + T, dtype=torch.bool, device=idx.device).tril(cache.length)
        x = self.step(*cache.pad(idx, pos, mask), cache)[:, cache.slots - T:]
        cache.write = None
        return x


class StaticKVCache(KVCache):
    """A KVCache over fixed storage, max_len rows then `slots` scratch rows, shared by every cache of the same
    shape (static.storage), so one compiled graph serves every step of every call."""

    def __init__(self, static: StaticDecoding, batch_size: int, max_len: int, slots: int):
        model = static.model
        super().__init__(len(model.layers), batch_size, -(-max_len // 256) * 256)   # max_len rounded up
        self.slots, w = slots, model.embed_tokens.weight
        dtype = (torch.get_autocast_dtype(w.device.type) if torch.is_autocast_enabled(w.device.type)
                 else w.dtype)
        shape = (batch_size, model.cfg.n_kv_head, self.max_len + slots, model.cfg.head_dim)
        held = static.storage
        if held is None or held[0][0].shape != shape or held[0][0].dtype != dtype:
            static.storage = tuple([w.new_zeros(shape, dtype=dtype) for _ in model.layers] for _ in "kv")
            for t in static.storage[0] + static.storage[1]:
                torch._dynamo.mark_static_address(t)  # CUDA graphs: the cache is not copied in every step
        self.k, self.v = static.storage
        self.write = None                          # during a padded step: (slots,) storage rows of its tokens

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        if self.write is None:                     # a prefill: as KVCache
            return super().update(layer, k, v)
        self.k[layer].index_copy_(2, self.write, k)   # fixed rows in, the whole storage out
        self.v[layer].index_copy_(2, self.write, v)
        return self.k[layer], self.v[layer]

    def pad(self, idx, pos, mask):
        """A step of T <= slots tokens as exactly `slots`: idx, pos (B, slots) with the T real tokens last,
        mask (B, 1, slots, max_len + slots) over the whole storage. The real tokens go to rows
        [length, length + T) as in a dynamic step; pad slot r to scratch row max_len + r, seen by itself
        only."""
        B, T = idx.shape
        n, end = self.slots - T, self.length + T
        self.check_room(T)
        scratch = torch.arange(self.max_len, self.max_len + n, device=idx.device)
        self.write = torch.cat([scratch, torch.arange(self.length, end, device=idx.device)])   # (slots,)
        full = torch.zeros(B, 1, self.slots, self.max_len + self.slots, dtype=torch.bool, device=idx.device)
        full[:, :, n:, :end] = mask
        full[:, :, torch.arange(n), scratch] = True
        self.written = T
        pad = idx.new_zeros(B, n)                  # fresh tensors: a view's strides would recompile the graph
        return torch.cat([pad, idx], 1), torch.cat([pad, pos], 1), full
