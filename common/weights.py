"""Weight files and state dicts: reading .safetensors and .pt files safely, and the one state-dict check every
loader ends in (our checkpoints, --resume, Qwen3 and the released checkpoints in pretrained.py).

    load_safetensors(path) / load_pt(f) / read_weights(d)   tensors from files (a damaged file is one line)
    load_weights(model, state) / from_state(cfg, state)     a state dict into a Transformer, checked
"""
import glob
import os
import pickle

import torch

from model import ModelConfig, Transformer


# ----------------------------------------------------------------------------- weight files

def load_safetensors(path: str) -> dict:
    """The tensors of one .safetensors file; a damaged or truncated file is a ValueError naming it."""
    from safetensors.torch import load_file
    try:
        return load_file(path)
    except Exception as e:        # safetensors_rust.SafetensorError: header too large, truncated data, ...
        raise ValueError(f"{path} is damaged or not a safetensors file ({str(e).splitlines()[0][:80]}): "
                         f"write or download it again") from None


def load_pt(f: str):
    """torch.load(f, weights_only=True): a file holding anything but tensors and numbers (code) or a damaged
    one is a ValueError naming it, never torch's advice to turn weights_only off."""
    try:
        return torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ValueError(f"{f} holds objects other than tensors and numbers, so it was not loaded (only "
                         f"plain weights are read from .pt/.bin files)") from None
    except (EOFError, RuntimeError, OSError) as e:
        raise ValueError(f"{f} is damaged ({(str(e).splitlines() or [type(e).__name__])[0][:60]})") from None


def read_weights(d: str) -> dict:
    """All tensors of directory d under their own names: its *.safetensors (one file or the shards), else its
    pytorch_model*.bin (weights_only). A directory holding neither is a FileNotFoundError."""
    files = sorted(glob.glob(os.path.join(d, "*.safetensors"))) or \
        sorted(glob.glob(os.path.join(d, "pytorch_model*.bin")))
    if not files:
        raise FileNotFoundError(f"{d} holds no weights (*.safetensors or pytorch_model*.bin)")
    return {k: v for f in files
            for k, v in (load_safetensors(f) if f.endswith(".safetensors") else load_pt(f)).items()}


# ----------------------------------------------------------------------------- state dicts into a Transformer
# The one state-dict check: every loader (our checkpoints, --resume, Qwen3, released checkpoints in
# pretrained.py) ends in load_weights or from_state.

def fuse_qkv(state: dict) -> dict:
    """Hugging Face's separate self_attn.{q,k,v}_proj.weight (Qwen3, the DiT after conversion, our checkpoints
    before the fusion) -> our self_attn.qkv_proj.weight, rows [q | k | v]; other names unchanged."""
    split = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")
    out = {k: v for k, v in state.items() if not k.endswith(split)}
    for name in state:
        if name.endswith("self_attn.q_proj.weight"):
            p = name.removesuffix("q_proj.weight")
            out[p + "qkv_proj.weight"] = torch.cat([state[p + s + "_proj.weight"] for s in "qkv"])
    return out


def load_weights(model: Transformer, state: dict, assign: bool = False):
    """Load `state` (our names, or separate q/k/v projections as Hugging Face names them; lm_head.weight
    optional when tied) into model: copied into its tensors, or with assign=True taken as they are. Anything
    missing, unexpected or of another shape is a ValueError (one line)."""
    tied = model.cfg.tie_embeddings
    state = {k: v for k, v in fuse_qkv(state).items() if not (tied and k == "lm_head.weight")}
    try:
        missing, unexpected = model.load_state_dict(state, strict=False, assign=assign)
    except RuntimeError as e:                     # shape mismatches
        raise ValueError(f"weights do not fit the model: {str(e).splitlines()[-1].strip()}") from None
    if tied:
        model.lm_head.weight = model.embed_tokens.weight          # assign=True replaced the embedding
        missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ValueError(f"weights do not fit the model: missing {sorted(missing)[:5]}, unexpected "
                         f"{sorted(unexpected)[:5]}")


def from_state(cfg: ModelConfig, state: dict, dtype=torch.float32) -> Transformer:
    """A Transformer holding exactly `state` (as load_weights takes it), cast to dtype, in eval mode. Built on
    the meta device, so no time goes into a random init that would be overwritten."""
    layers = {int(k.split(".")[1]) for k in state if k.startswith("layers.") and k.split(".")[1].isdigit()}
    if len(layers) != cfg.n_layer:               # before building: n_layer = 1e9 must not build 1e9 blocks
        raise ValueError(f"weights do not fit the model: the weights hold {len(layers)} layers, the config "
                         f"n_layer={cfg.n_layer}")
    odd = next((k for k, v in state.items() if not v.is_floating_point()), None)
    if odd is not None:
        raise ValueError(f"weights do not fit the model: {odd} is stored as {state[odd].dtype}, not floating "
                         "point")
    with torch.device("meta"):
        model = Transformer(cfg)
    load_weights(model, {k: v.to(dtype) for k, v in state.items()}, assign=True)
    return model.eval()
