"""Weights from elsewhere into model.py's Transformer, converted (the weight files and the one state-dict
check every loader ends in are common/weights.py):

- Hugging Face Qwen3 models (`from_pretrained("Qwen/Qwen3-1.7B-Base")`, train.py --init-from): config.json
  through `qwen3_config`, the safetensors as they are (our parameter names are Qwen3's without "model.").
- The paper's released checkpoints (kuleshov-group/..., short keys in RELEASED such as "gsm8k:setdlm-smax8" or
  "owt:setdlm-smax16"): `fetch` finds a key, a Hub repo id or a local copy (the configs first, so a base model
  or another architecture is refused before any weight is downloaded) and `load_released` converts the
  official format: a Qwen3 backbone under some prefix (`backbone_weights`, the EMA copy first), or the DiT of
  the OWT/LM1B models (`from_dit`, its constant adaLN folded into the norms and projections). The method and
  its settings come from the names and config.json, as the official eval loader reads them.

checkpoint.load hands keys, Hub ids and released-format directories here; a Hub repo in our own format comes
back to checkpoint.load_ours. Weight files are read with safetensors and torch.load(weights_only=True) only
(`read_weights`), and every state dict ends in from_state, the one check of names and shapes.
"""
import glob
import json
import math
import os
import re
import warnings
from dataclasses import asdict

import torch
import torch.nn.functional as F

from common.weights import from_state, read_weights
from data.hub import hub_dir, is_hub_id
from model import ModelConfig, Transformer


# ----------------------------------------------------------------------------- Hugging Face Qwen3 models

def qwen3_config(hf: dict) -> ModelConfig:
    """ModelConfig of a Hugging Face Qwen3 config.json (transformers 4.x `rope_theta` or 5.x
    `rope_parameters`)."""
    kind, archs = hf.get("model_type"), hf.get("architectures") or []
    if kind != "qwen3" and not (kind is None and {"Qwen3ForCausalLM", "Qwen3Model"} & set(archs)):
        raise ValueError(f"not a Qwen3 config: model_type={kind!r}, architectures={archs}")
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default" or hf.get("use_sliding_window") \
            or hf.get("attention_bias") or hf.get("hidden_act", "silu") != "silu":
        raise ValueError("unsupported Qwen3 variant: rope scaling, sliding window, attention bias or a "
                         "non-silu MLP")
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


def from_pretrained(name_or_path: str, dtype=torch.float32) -> Transformer:
    """A Hugging Face Qwen3 model (e.g. "Qwen/Qwen3-1.7B-Base", or a local directory holding its config.json
    and safetensors) as our Transformer, in eval mode."""
    d = hub_dir(name_or_path, ["config.json", "*.safetensors", "model.safetensors.index.json"])
    with open(os.path.join(d, "config.json")) as f:
        cfg = qwen3_config(json.load(f))
    state = {k.removeprefix("model."): v for k, v in read_weights(d).items()}
    return from_state(cfg, state, dtype)


# ---------------------------------------------------------------------- the paper's released checkpoints

def released_keys() -> dict:
    """Short keys of the official eval scripts -> Hub ids. setdlm-dN is setdlm-smax(2N)."""
    keys = {}
    for task in ("gsm8k", "cnndm"):
        for m in ("ar", "mdlm", "bd3lm-s4", "bd3lm-s8", "bd3lm-s16"):
            keys[f"{task}:{m}"] = f"kuleshov-group/{task}-{m}"
        for d in (4, 8, 16):
            repo = f"setdlm-gsm8k-smax{2 * d}" if task == "gsm8k" else f"{task}-setdlm-smax{2 * d}"
            keys[f"{task}:setdlm-smax{2 * d}"] = keys[f"{task}:setdlm-d{d}"] = "kuleshov-group/" + repo
    for task in ("owt", "lm1b"):                  # DiT models; the Set Diffusion ones may be named -setdlm-dN
        for m in ("ar", "mdlm", "bd3lm-s4", "bd3lm-s8", "bd3lm-s16"):
            keys[f"{task}:{m}"] = f"kuleshov-group/{task}-{m}"
        for d in (4, 8, 16):
            keys[f"{task}:setdlm-smax{2 * d}"] = keys[f"{task}:setdlm-d{d}"] = \
                f"kuleshov-group/{task}-setdlm-smax{2 * d}"
    for s in (4, 8, 16):                           # the BD3-LM paper's OWT releases (the same DiT names)
        keys[f"owt:bd3lm-block_size{s}"] = f"kuleshov-group/bd3lm-owt-block_size{s}"
    keys["owt:mdlm-owt"] = "kuleshov-group/mdlm-owt"
    return keys


RELEASED = released_keys()
# a second Hub name to try when the first is missing: the push code named them -setdlm-dN, the README -smaxN
ALSO_NAMED = {f"kuleshov-group/{t}-setdlm-smax{2 * d}": f"kuleshov-group/{t}-setdlm-d{d}"
              for t in ("cnndm", "owt", "lm1b") for d in (4, 8, 16)}
DIT_DATA = {50258: "owt", 30522: "lm1b"}         # vocabulary size -> corpus, when the name does not say
DIT_DEFAULTS = {"owt": ("gpt2", 1024, 50257), "lm1b": ("bert-base-uncased", 128, 103)}  # tokenizer, L, [MASK]


def hub_first(repo: str) -> tuple[str, str]:
    """(repo id, snapshot dir of its configs) for repo, else its ALSO_NAMED alternative; the first error if
    both fail."""
    try:
        return repo, hub_dir(repo, ["*.json"])
    except FileNotFoundError:
        if repo not in ALSO_NAMED:
            raise
        try:
            return ALSO_NAMED[repo], hub_dir(ALSO_NAMED[repo], ["*.json"])
        except FileNotFoundError:
            raise FileNotFoundError(f"neither {repo} nor {ALSO_NAMED[repo]} could be found locally or on the "
                                    "Hugging Face Hub: set HF_HUB_OFFLINE=0 and check the network, or pass "
                                    f"a local directory") from None


def fetch(path: str) -> tuple[str, str, dict]:
    """A checkpoint named by a released key (RELEASED), a Hub repo id or a local directory -> (source: the
    repo id or the directory, the directory holding config.json and the weights, config.json as read). From
    the Hub the configs come first, so a base model or another architecture is refused before any weight is
    downloaded; a config.json that is not an object comes back as it is (checkpoint.check_config's one
    line)."""
    if ":" in path and not os.path.exists(path):
        if path not in RELEASED:
            raise ValueError(f"unknown checkpoint key {path!r}; known keys: {', '.join(RELEASED)}")
        path = RELEASED[path]
    local = os.path.isfile(os.path.join(path, "config.json"))
    missing = FileNotFoundError(f"no checkpoint at {path}: expected a directory with config.json and model."
                                "safetensors (written by train.py --out-dir), a key like gsm8k:ar or a Hub "
                                "repo id")
    if not local and (os.path.exists(path) or not is_hub_id(path)):
        raise missing
    source, d = (path, path) if local else hub_first(path)
    try:
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
    except OSError:
        raise missing from None
    except json.JSONDecodeError as e:
        raise ValueError(f"cannot read the checkpoint at {d}: config.json: {e}") from e
    if isinstance(config, dict) and "method" not in config:
        released_method(config, source)                            # a ValueError for what is not a checkpoint
    if not local and isinstance(config, dict):                     # now the weights (the cache when offline)
        d = hub_dir(source, ["*.safetensors"])
        if not glob.glob(os.path.join(d, "*.safetensors")):
            d = hub_dir(source, ["pytorch_model*.bin"])
    return source, d, config


QWEN3_MASK_ID = 151660            # <|fim_middle|>, the official [MASK] for Qwen3
BACKBONE_NAME = re.compile(r"(.*?)(model\.(?:layers\.\d+|embed_tokens|norm)\..+|lm_head\.weight)")
# Tensors of a release that are not weights, skipped by name: the official denoisers' buffers (Set
# Diffusion's static_attention_mask, which its push code does not leave out as MDLM's and BD3-LM's do; the
# BD3-LM line's sampling_eps_min/max) and a RoPE table (recomputed). Every other tensor that is not a weight
# this converter reads is refused (refuse_unknown).
RELEASE_BUFFERS = {"static_attention_mask", "sampling_eps_min", "sampling_eps_max"}


def is_buffer(name: str) -> bool:
    """Whether a released tensor is one of RELEASE_BUFFERS or a RoPE table (...rotary_emb.inv_freq)."""
    return name in RELEASE_BUFFERS or name.endswith("rotary_emb.inv_freq")


def refuse_unknown(names, where: str):
    """One line naming the tensors of a release this converter does not know (ValueError), if any: loading
    around them could leave out weights the model needs."""
    if unknown := sorted(names):
        shown = ", ".join(repr(n) for n in unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3
                                                          else "")
        raise ValueError(f"unknown tensor{'s' * (len(unknown) > 1)} {shown} in {where}: refusing to load "
                         "weights this converter does not know (common/pretrained.py names those it reads)")


def source_name(source: str) -> str:
    """What the method and its settings are read from: the repo id, or a local directory's own name."""
    return os.path.basename(os.path.normpath(source)) if os.path.isdir(source) else source


def release_length(config: dict, source: str, default: int) -> int:
    """The context L of a release: the top-level "length" its config.json writes (the official code's
    configs; "model_length" in the BD3-LM line's), else default. Nested keys of that name (a backbone's
    config) are not read. Not a positive whole number: one line (ValueError)."""
    for key in ("length", "model_length"):
        if config.get(key) is not None:
            L = config[key]
            if isinstance(L, bool) or not isinstance(L, int) or L < 1:
                raise ValueError(f"{source}: config.json's {key!r} is {L!r}, not a positive whole number")
            return L
    return default


def find_key(obj, key):
    """The first non-null value of `key` anywhere in nested dicts (depth first), else None."""
    if isinstance(obj, dict):
        if obj.get(key) is not None:
            return obj[key]
        for v in obj.values():
            if (found := find_key(v, key)) is not None:
                return found
    return None


def released_method(config: dict, source: str) -> str:
    """Our method name for a released checkpoint, from config.json's architectures/model_type and the repo
    name; a ValueError for anything else (a plain Qwen3 base model, another architecture)."""
    archs, kind = [str(a) for a in config.get("architectures") or []], str(config.get("model_type", ""))
    text = " ".join(archs + [kind, source_name(source)]).lower()
    for word, method in (("setdlm", "setdiffusion"), ("bd3lm", "bd3lm"), ("mdlm", "mdlm")):
        if word in text:
            return method
    if "ar" in re.split(r"[^a-z0-9]+", text) or any(re.match(r"AR([A-Z_]|$)", a) for a in archs):
        return "ar"
    if kind == "qwen3" or "Qwen3ForCausalLM" in archs:
        raise ValueError(f"{source} is a plain Qwen3 model (a backbone), not a trained checkpoint: fine-tune "
                         f"it with train.py --init-from {source}")
    raise ValueError(f"{source} is neither a checkpoint of ours (config.json has no 'method') nor a released "
                     f"SetDLM/BD3LM/MDLM/AR one: found architectures={archs}, model_type={kind!r}")


def backbone_weights(raw: dict, where: str) -> dict:
    """The Qwen3 backbone's tensors in our names, from raw (read_weights of directory `where`).
    Names are cut before model.layers/model.embed_tokens/model.norm/lm_head; of several copies under
    different prefixes the one whose prefix contains "ema" wins. A tensor that is neither such a weight nor
    a known buffer (is_buffer) is refused."""
    copies = {}
    for name, tensor in raw.items():
        if m := BACKBONE_NAME.fullmatch(name):
            copies.setdefault(m[1], {})[m[2].removeprefix("model.")] = tensor
    refuse_unknown((n for n in raw if not BACKBONE_NAME.fullmatch(n) and not is_buffer(n)), where)
    if not copies:
        raise ValueError(f"no Qwen3 backbone weights (...model.layers.N..., ...model.embed_tokens.weight) in "
                         f"{where}: found {sorted(raw)[:4]}")
    pick = [p for p in copies if "ema" in p.lower()] or list(copies)
    if len(pick) > 1:
        raise ValueError(f"several weight copies in {where} (prefixes {pick}): cannot tell which to load")
    return copies[pick[0]]


def infer_model_config(state: dict, config: dict) -> ModelConfig:
    """Qwen3 shape from the weights themselves; RoPE theta and the RMSNorm eps from config.json (anywhere,
    e.g. a nested backbone config) else Qwen3's 1e6 and 1e-6."""
    try:
        emb, D = state["embed_tokens.weight"], state["layers.0.self_attn.q_norm.weight"].shape[0]
        tie = "lm_head.weight" not in state or torch.equal(state["lm_head.weight"], emb)
        return ModelConfig(vocab_size=emb.shape[0], n_embd=emb.shape[1], head_dim=D,
                           n_layer=1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers.")),
                           n_head=state["layers.0.self_attn.q_proj.weight"].shape[0] // D,
                           n_kv_head=state["layers.0.self_attn.k_proj.weight"].shape[0] // D,
                           intermediate_size=state["layers.0.mlp.gate_proj.weight"].shape[0], qk_norm=True,
                           tie_embeddings=tie, rope_theta=float(find_key(config, "rope_theta") or 1e6),
                           norm_eps=float(find_key(config, "rms_norm_eps") or 1e-6))
    except KeyError as e:
        raise ValueError(f"not a Qwen3 backbone: no {e} among the weights") from None


def name_number(name: str, pattern: str):
    """N from the first dash/underscore-separated word of name matching pattern (e.g. r"smax(\\d+)")."""
    return next((int(m[1]) for w in re.split(r"[^a-z0-9]+", name.lower()) if (m := re.fullmatch(pattern, w))),
                None)


# ----------------------------------------------------------------- the official DiT's weights (OWT, LM1B)

DIT_NAME = re.compile(r"backbone\.(vocab_embed\.embedding|sigma_map\.mlp\.[02]\.(weight|bias)|output_layer\."
                      r"(norm_final\.weight|linear\.(weight|bias)|adaLN_modulation\.(weight|bias))|"
                      r"blocks\.\d+\.(norm1\.weight|attn_qkv\.weight|attn_out\.weight|norm2\.weight|"
                      r"mlp\.[02]\.(weight|bias)|adaLN_modulation\.(weight|bias)))")


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """The DiT's sinusoidal embedding of t (N,) -> (N, dim): [cos(t f) | sin(t f)], f =
    max_period^(-k/(dim/2))."""
    freqs = torch.exp(-math.log(max_period) * torch.arange(dim // 2, dtype=t.dtype) / (dim // 2))
    args = t[:, None] * freqs[None]                                           # (N, dim/2)
    return torch.cat([args.cos(), args.sin()], dim=-1)


def from_dit(raw: dict, n_head: int) -> tuple[ModelConfig, dict]:
    """The official DiT's released tensors (backbone.vocab_embed.embedding, backbone.blocks.{i}..., see
    DIT_NAME) -> (ModelConfig, our state dict in fp32). Any other name but a known buffer (is_buffer) is
    refused.

    The DiT is this Transformer with LayerNorm (eps 1e-5), no QK-norm, GELU(tanh) MLP with biases, RoPE base
    1e4 (the same half-split layout) and an untied output Linear with a bias. Its fused qkv, rows laid out
    (three h d), is our qkv_proj as it is. With adaLN on, the conditioning is a constant,
    c = silu(sigma_map(0)), so every block's (shift, scale, gate) = adaLN_modulation(c) is a constant vector
    and folds into the weights:
    norm(x) * (1 + scale) + shift is a LayerNorm with weight w * (1 + scale) and bias shift, and
    gate * (W y + b) is the output projection with its rows (and bias) scaled by gate.
    """
    refuse_unknown((k for k in raw if not DIT_NAME.fullmatch(k) and not is_buffer(k)), "a DiT checkpoint")
    w = {k.removeprefix("backbone."): v.double() for k, v in raw.items() if not is_buffer(k)}
    try:
        emb, n_layer = w["vocab_embed.embedding"], 1 + max(int(k.split(".")[1]) for k in w
                                                           if k.startswith("blocks."))
        V, D = emb.shape
        c = None
        if "blocks.0.adaLN_modulation.weight" in w:                           # c = silu(sigma_map(sigma = 0))
            t_freq = timestep_embedding(torch.zeros(1, dtype=torch.float64),
                                        w["sigma_map.mlp.0.weight"].shape[1])
            h = F.silu(F.linear(t_freq, w["sigma_map.mlp.0.weight"], w["sigma_map.mlp.0.bias"]))
            c = F.silu(F.linear(h, w["sigma_map.mlp.2.weight"], w["sigma_map.mlp.2.bias"]))   # (1, cond_dim)

        def modulation(prefix: str, n: int):                                 # (shift, scale[, gate]) * blocks
            if c is None:                                                      # adaLN off: 0, 0, 1
                zero, one = torch.zeros(D, dtype=torch.float64), torch.ones(D, dtype=torch.float64)
                return [zero, zero, one] * 2 if n == 6 else [zero, zero]
            return F.linear(c, w[prefix + "adaLN_modulation.weight"],
                            w[prefix + "adaLN_modulation.bias"])[0].chunk(n)

        state = {"embed_tokens.weight": emb}
        for i in range(n_layer):
            p, o = f"blocks.{i}.", f"layers.{i}."
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = modulation(p, 6)
            state.update({
                o + "input_layernorm.weight": w[p + "norm1.weight"] * (1 + scale_msa),
                o + "input_layernorm.bias": shift_msa,
                o + "self_attn.qkv_proj.weight": w[p + "attn_qkv.weight"],    # (three h d) rows = [q | k | v]
                o + "self_attn.o_proj.weight": gate_msa[:, None] * w[p + "attn_out.weight"],
                o + "post_attention_layernorm.weight": w[p + "norm2.weight"] * (1 + scale_mlp),
                o + "post_attention_layernorm.bias": shift_mlp,
                o + "mlp.up_proj.weight": w[p + "mlp.0.weight"], o + "mlp.up_proj.bias": w[p + "mlp.0.bias"],
                o + "mlp.down_proj.weight": gate_mlp[:, None] * w[p + "mlp.2.weight"],
                o + "mlp.down_proj.bias": gate_mlp * w[p + "mlp.2.bias"]})
        shift, scale = modulation("output_layer.", 2)
        state.update({"norm.weight": w["output_layer.norm_final.weight"] * (1 + scale), "norm.bias": shift,
                      "lm_head.weight": w["output_layer.linear.weight"],
                      "lm_head.bias": w["output_layer.linear.bias"]})
        hidden = w["blocks.0.mlp.0.weight"].shape[0]
    except (KeyError, ValueError) as e:
        raise ValueError(f"not a complete DiT checkpoint: missing {e}") from None
    if D % n_head:
        raise ValueError(f"DiT width {D} is not a multiple of n_heads={n_head}")
    cfg = ModelConfig(vocab_size=V, n_layer=n_layer, n_head=n_head, n_kv_head=n_head, n_embd=D,
                      intermediate_size=hidden, rope_theta=10000.0, qk_norm=False, tie_embeddings=False,
                      norm="layer", mlp="gelu", norm_eps=1e-5, norm_bias=True, lm_head_bias=True)
    return cfg, {k: v.float() for k, v in state.items()}


def load_released(d: str, source: str, config: dict, device="cpu") -> tuple[Transformer, dict]:
    """Convert a checkpoint of the official code (kuleshov-group/..., or a local copy; see `fetch`) into ours:
    (model in eval mode, a config.json dict of our format whose method_config holds the settings read here;
    checkpoint.load fills in the method's defaults).

    Assumed, as the release itself cannot be read offline:
    - weights: *.safetensors (shards by glob) or pytorch_model*.bin; the backbone is stock HF Qwen3 under
      some prefix (e.g. backbone.model.layers.N...); EMA weights, a second copy under a prefix containing
      "ema", win. The known buffers (RELEASE_BUFFERS, RoPE tables) are skipped, any other tensor refused.
      The shape comes from the weights.
    - method: "setdlm"/"bd3lm"/"mdlm"/"ar" in architectures, model_type or the repo name.
    - smax: the name's smaxN (or dN -> 2N), as the official eval loader does; else noise_config:
      max_block_size when < the length, else 2 * desired_block_size. BD3-LM block: the name's sN, else
      block_size. A disagreement between name and config warns and keeps the name.
    - mask id: mask_token_id (e.g. in tokenization_config), else 151660 (<|fim_middle|>).
    - data: gsm8k or cnndm from the name, else null. seq_len: config.json's top-level "length" (or
      "model_length", release_length), else 768 for cnndm and 1024 otherwise. Names are read from the repo
      id, or a local directory's own name.
    - the OWT/LM1B DiT (backbone.vocab_embed.embedding among the names): from_dit, n_heads from config.json
      (else 12); data owt or lm1b from the name, else the vocabulary size; tokenizer, L (release_length, else)
      and mask id (else) of that corpus: gpt2, 1024, 50257 / bert-base-uncased, 128, 103.
    """
    method = released_method(config, source)
    raw = read_weights(d)
    dit = any(k.startswith("backbone.vocab_embed.") for k in raw)
    if dit:
        model_cfg, state = from_dit(raw, int(find_key(config, "n_heads") or 12))
    else:
        state = backbone_weights(raw, d)
        model_cfg = infer_model_config(state, config)
    del raw
    name = source_name(source).lower()
    data = "gsm8k" if "gsm8k" in name else "cnndm" if "cnn" in name else None
    if dit:
        data = "lm1b" if "lm1b" in name else "owt" if "owt" in name else DIT_DATA.get(model_cfg.vocab_size)
        if data is None:
            raise ValueError(f"{source}: a DiT with a vocabulary of {model_cfg.vocab_size}, neither OWT's "
                             f"50258 nor LM1B's 30522, and no owt/lm1b in its name")
    tokenizer, default_len, default_mask = DIT_DEFAULTS[data] if dit else \
        (None, 768 if data == "cnndm" else 1024, QWEN3_MASK_ID)
    seq_len = release_length(config, source, default_len)
    mask_id = find_key(config, "mask_token_id")
    mask_id = int(default_mask if mask_id is None else mask_id)
    if not 0 <= mask_id < model_cfg.vocab_size:
        raise ValueError(f"{source}: mask id {mask_id} outside the vocabulary of {model_cfg.vocab_size}")

    settings = {}
    nc = find_key(config, "noise_config") or {}
    if method == "setdiffusion":
        m, dd = nc.get("max_block_size"), nc.get("desired_block_size")
        from_config = m if m and seq_len and m < seq_len else 2 * dd if dd else None
        from_name = name_number(name, r"smax(\d+)") or 2 * (name_number(name, r"d(\d+)") or 0) or None
        settings["smax"] = pick_setting(source, "smax", from_name, from_config)
    elif method == "bd3lm":
        bs = find_key(config, "block_size")
        settings["block_size"] = pick_setting(source, "block size", name_number(name, r"s(\d+)") or
                                              name_number(name, r"size(\d+)"),
                                              bs if bs and (not seq_len or bs < seq_len) else None)
    has_tok = os.path.isfile(os.path.join(d, "tokenizer.json"))
    if data == "lm1b" and (has_tok or os.path.isfile(os.path.join(d, "vocab.txt"))):
        tokenizer = "bert:" + source                               # the release's own copy of the WordPiece
    out = {"model": asdict(model_cfg), "method": method,
           "method_config": {"mask_id": mask_id, **settings},
           "tokenizer": tokenizer or "qwen3:" + (source if has_tok else "Qwen/Qwen3-1.7B-Base"),
           "data": data, "seq_len": seq_len, "source": source}
    model = from_state(model_cfg, state)
    return model.to(device).eval(), out


def pick_setting(source: str, what: str, from_name, from_config):
    if from_name and from_config and from_name != from_config:
        warnings.warn(f"{source}: {what} {from_name} from the name, {from_config} from config.json; using "
                      f"{from_name}")
    if not (from_name or from_config):
        raise ValueError(f"{source}: cannot tell the {what} from the name or config.json")
    return int(from_name or from_config)
