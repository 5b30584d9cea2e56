"""Checkpoint directories: what train.py writes and what sample.py / eval.py read.

    out_dir/model.safetensors   weights for evaluation (the EMA weights when EMA is on)
    out_dir/config.json         {"model": ModelConfig, "method": "setdiffusion", "method_config": {...},
                                 "tokenizer": "bytes", "data": "arith", "seq_len": 128, "step": 500, ...}
    out_dir/train_state.pt      what --resume needs besides: raw weights, optimizer, step (tensors only)

A checkpoint is written whole into out_dir.tmp, then swapped in with two renames, so a kill at any moment
leaves a complete checkpoint (out_dir, out_dir.tmp or out_dir.old; `resolve` finds the newest), and nothing
train.py did not write is ever deleted (`claim` refuses such an --out-dir before training). config.json is
validated before any weight is read (`check_config`). Weights load with safetensors and
torch.load(weights_only=True) only.

`load` also takes a Hugging Face repo id or a short key of the paper's released checkpoints (RELEASED, e.g.
"gsm8k:setdlm-smax8", "owt:setdlm-smax16"), whose format it converts (`load_released`: Qwen3 backbones, and the
DiT of the OWT/LM1B models through `from_dit`).
"""
import dataclasses
import glob
import json
import math
import os
import pickle
import re
import shutil
import warnings
from dataclasses import asdict

import torch
import torch.nn.functional as F

import ar
import bd3lm
import mdlm
import setdiffusion
from model import ModelConfig, from_state, fuse_qkv, hub_dir, load_safetensors

METHODS = {"ar": ar, "mdlm": mdlm, "bd3lm": bd3lm, "setdiffusion": setdiffusion}
METHOD_CONFIGS = {"ar": ar.ARConfig, "mdlm": mdlm.MDLMConfig, "bd3lm": bd3lm.BD3LMConfig,
                  "setdiffusion": setdiffusion.SetDiffusionConfig}


def pick_device(name: str) -> str:
    """"auto" -> cuda if available, else mps, else cpu; any other name as it is, once checked (one clear line for
    a device this machine does not have)."""
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name}: not a device name; use auto, cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"--device {name}: this torch sees {torch.cuda.device_count()} CUDA GPU(s) (a CPU-only "
                         f"build or no driver?): use --device cpu or auto")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: MPS is not available here: use --device cpu or auto")
    return name


def weights(model) -> dict:
    """State dict without the tied lm_head (safetensors refuses shared tensors)."""
    sd = model.state_dict()
    if model.cfg.tie_embeddings:
        sd.pop("lm_head.weight", None)
    return {k: v.detach().contiguous() for k, v in sd.items()}


def load_weights(model, state: dict):
    missing, unexpected = model.load_state_dict(fuse_qkv(state), strict=False)
    allowed = {"lm_head.weight"} if model.cfg.tie_embeddings else set()
    if set(missing) - allowed or unexpected:
        raise ValueError(f"weights do not fit the model: missing {sorted(set(missing) - allowed)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}")


# ----------------------------------------------------------------------------- the checkpoint directory
# A save writes out_dir.tmp whole (config.json last, so a .tmp holding config.json is complete), marks the
# current out_dir as train.py's own (SWAP_MARK), renames it to out_dir.old, renames out_dir.tmp to out_dir
# and deletes the .old. A kill at any moment leaves a complete checkpoint in out_dir, out_dir.tmp or
# out_dir.old: `newest` finds it, and the next save (or `claim`) finishes the interrupted swap first.
# Nothing train.py did not write is ever removed: an .old without the mark is a user's.
FILES = ("config.json", "model.safetensors", "train_state.pt")    # what a checkpoint directory holds
SWAP_MARK = ".swapping"                                          # "this .old was left by train.py"


def siblings(out_dir: str) -> tuple[str, str, str]:
    out_dir = out_dir.rstrip("/") or "/"
    return out_dir, out_dir + ".tmp", out_dir + ".old"


def complete(d: str) -> bool:
    return os.path.isfile(os.path.join(d, "config.json")) and os.path.isfile(os.path.join(d, "model.safetensors"))


def step_of(d: str) -> int:
    try:
        with open(os.path.join(d, "config.json")) as f:
            step = json.load(f).get("step", 0)
        return step if isinstance(step, int) else 0
    except (OSError, ValueError, AttributeError):
        return -1


def newest(out_dir: str) -> str | None:
    """The newest complete checkpoint of out_dir: out_dir itself, or out_dir.tmp (a save killed before its
    swap, newer), or out_dir.old (a save killed between its two renames); None if there is none."""
    d, tmp, old = siblings(out_dir)
    found = [x for x in (d, tmp) if complete(x)] or [x for x in (old,) if complete(x)]
    return max(found, key=step_of) if found else None       # max keeps out_dir on a tie


def resolve(out_dir: str) -> str:
    """The directory holding the newest complete checkpoint written to out_dir, or a clear error."""
    d = newest(out_dir)
    if d is None:
        raise FileNotFoundError(f"no checkpoint at {out_dir}: expected a directory with config.json and "
                                f"model.safetensors (written by train.py --out-dir)")
    return d


def ours(d: str) -> bool:
    """Whether directory d holds only what train.py writes (an empty directory counts)."""
    return all(name in FILES or name in (SWAP_MARK, "config.json.part") for name in os.listdir(d))


def remove(d: str):
    """Delete a directory train.py wrote, by renaming it out of the way first (a kill mid-delete leaves only
    that *.deleting folder, which the next removal clears)."""
    trash = d + ".deleting"
    shutil.rmtree(trash, ignore_errors=True)
    if os.path.isdir(d):
        os.replace(d, trash)
        shutil.rmtree(trash, ignore_errors=True)


def swap_in(out_dir: str):
    """Make out_dir.tmp (complete) the checkpoint: out_dir -> out_dir.old -> deleted."""
    d, tmp, old = siblings(out_dir)
    if os.path.isdir(old) and not os.path.exists(os.path.join(old, SWAP_MARK)):
        raise ValueError(f"{old} exists and was not left by train.py: move it away, or choose another --out-dir")
    remove(old)
    if os.path.isdir(d):
        open(os.path.join(d, SWAP_MARK), "w").close()
        os.replace(d, old)
    os.replace(tmp, d)
    remove(old)


def finish_swap(out_dir: str):
    """Bring out_dir to a clean state after a kill: the newest complete checkpoint in out_dir itself, no .tmp,
    no .old of ours."""
    d, tmp, old = siblings(out_dir)
    if complete(tmp) and (not complete(d) or step_of(tmp) > step_of(d)):
        swap_in(out_dir)
    elif os.path.isdir(tmp):
        remove(tmp)                                      # a save killed half-way
    if os.path.exists(os.path.join(old, SWAP_MARK)):
        if not os.path.isdir(d):
            os.replace(old, d)                           # killed between the renames, with no newer .tmp
            os.remove(os.path.join(d, SWAP_MARK))
        else:
            remove(old)
    if os.path.isfile(os.path.join(d, SWAP_MARK)):
        os.remove(os.path.join(d, SWAP_MARK))            # killed after marking, before the rename


def claim(out_dir: str, resume: bool):
    """Before training: check that out_dir can hold our checkpoints, lock it against a second train.py, and
    finish a swap a kill interrupted. Refuses (ValueError, one line) a file, a directory holding anything
    train.py did not write, or a user's own out_dir.old / .tmp; an unwritable place fails here, not at the
    first save. Returns the open lock file: keep it open while training."""
    d, tmp, old = siblings(out_dir)
    if os.path.exists(d) and not os.path.isdir(d):
        raise ValueError(f"--out-dir {d} is a file, not a checkpoint directory: choose another --out-dir")
    for x, what in ((d, "is not a checkpoint directory written by train.py"), (tmp, "was not written by train.py")):
        if os.path.isdir(x) and not ours(x):
            names = sorted(n for n in os.listdir(x) if n not in FILES)
            raise ValueError(f"{x} {what} (it holds {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}), "
                             f"and train.py replaces that directory at every save: choose another --out-dir")
    if os.path.exists(old) and not os.path.exists(os.path.join(old, SWAP_MARK)):
        raise ValueError(f"{old} exists and was not left by train.py (which uses that name while it swaps in a "
                         f"checkpoint): move it away, or choose another --out-dir")
    if resume and newest(d) is None:
        resolve(d)                                       # the "no checkpoint at" error
    try:
        os.makedirs(os.path.dirname(os.path.abspath(d)), exist_ok=True)
        lock = open(d + ".lock", "a")
    except OSError as e:
        raise ValueError(f"cannot write checkpoints to --out-dir {d}: {e.strerror or e}") from None
    try:
        import fcntl
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:                                  # no fcntl (Windows): no lock
        pass
    except OSError:
        lock.close()
        raise ValueError(f"another train.py is writing {d} (it holds {d}.lock): wait for it to finish, or "
                         f"choose another --out-dir") from None
    finish_swap(d)
    return lock


def save(out_dir: str, model, config: dict, train_state: dict | None = None, eval_model=None):
    """Write a complete checkpoint atomically. eval_model (e.g. the EMA copy) goes to model.safetensors."""
    from safetensors.torch import save_file
    d, tmp, _ = siblings(out_dir)
    finish_swap(d)
    os.makedirs(tmp)
    save_file(weights(eval_model or model), os.path.join(tmp, "model.safetensors"))
    if train_state is not None:
        torch.save({"model": weights(model), **train_state}, os.path.join(tmp, "train_state.pt"))
    with open(os.path.join(tmp, "config.json.part"), "w") as f:
        json.dump(config, f, indent=2)
    os.replace(os.path.join(tmp, "config.json.part"), os.path.join(tmp, "config.json"))   # last: complete
    swap_in(d)


def method_of(config: dict):
    """(method module, method config) named by a config.json dict."""
    return METHODS[config["method"]], METHOD_CONFIGS[config["method"]](**config["method_config"])


def load(path: str, device="cpu"):
    """A checkpoint -> (model in eval mode, method module, method config, config dict).

    path: a checkpoint directory written by train.py; a short key of the paper's released checkpoints
    (RELEASED, e.g. "gsm8k:setdlm-smax8"); a Hugging Face repo id; or a local copy of such a repo. The
    directory's config.json decides: ours (it has "method"), the released format (converted, see
    `load_released`), or an error (a plain Qwen3 base model is a backbone, not a trained checkpoint).
    """
    if ":" in path and not os.path.exists(path):
        if path not in RELEASED:
            raise ValueError(f"unknown checkpoint key {path!r}; known keys: {', '.join(RELEASED)}")
        path = RELEASED[path]
    local = [d for d in (path, newest(path)) if d and os.path.isfile(os.path.join(d, "config.json"))]
    missing = FileNotFoundError(f"no checkpoint at {path}: expected a directory with config.json and model."
                                f"safetensors (written by train.py --out-dir), a key like gsm8k:ar or a Hub repo id")
    if not local and (os.path.exists(path) or path.startswith(("/", ".", "~")) or path.count("/") != 1):
        raise missing                                              # a local path, not an "org/name" repo id
    if local:
        d = local[0]
    else:                                                          # the configs first: refuse before a download
        path, d = hub_first(path)
    try:
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
    except OSError:
        raise missing from None
    except json.JSONDecodeError as e:
        raise ValueError(f"cannot read the checkpoint at {d}: config.json: {e}") from e
    if not isinstance(config, dict):                               # a list or null: check_config's one line
        return load_ours(d, device)
    method = config.get("method") or released_method(config, path)
    if not local:                                                  # now the weights (the cache when offline)
        d = hub_dir(path, ["*.safetensors"])
        if not glob.glob(os.path.join(d, "*.safetensors")):
            d = hub_dir(path, ["pytorch_model*.bin"])
    if "method" in config:
        return load_ours(resolve(d), device)
    return load_released(d, path, config, method, device)


def check_fields(cls, values, where: str):
    """values (a config.json section) must name only fields of the dataclass cls, each of its type: an int
    (not a bool) for int, a finite number for float, ... A wrong file is one line, not a traceback."""
    if not isinstance(values, dict):
        raise ValueError(f"{where} must be an object, got {values!r:.40}")
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    for k, v in values.items():
        t = types.get(k)
        if t is None:
            raise ValueError(f"{where} has an unknown setting {k!r} (known: {', '.join(types)})")
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        ok = {bool: isinstance(v, bool), int: number and isinstance(v, int), str: isinstance(v, str),
              float: number and math.isfinite(v)}.get(t, True)
        if not ok:
            raise ValueError(f"{where}.{k} must be {'a finite number' if t is float else t.__name__}, got {v!r:.40}")


def check_config(config, where: str) -> dict:
    """A config.json of ours, checked before anything is built from it (types, sizes, ranges)."""
    if not isinstance(config, dict):
        raise ValueError(f"{where} holds {type(config).__name__}, not an object: it was not written by train.py")
    for key, kind in (("model", dict), ("method", str), ("method_config", dict), ("tokenizer", str), ("data", str),
                      ("seq_len", int)):
        if key not in config:
            raise ValueError(f"{where} has no {key!r}: it was not written by train.py, or was edited")
        if not isinstance(config[key], kind) or isinstance(config[key], bool):
            raise ValueError(f"{where}: {key} must be {'an object' if kind is dict else kind.__name__}, "
                             f"got {config[key]!r:.40}")
    if config["method"] not in METHODS:
        raise ValueError(f"{where}: unknown method {config['method']!r} (one of {', '.join(METHODS)})")
    model, mc = config["model"], config["method_config"]
    check_fields(ModelConfig, model, f"{where}: model")
    check_fields(METHOD_CONFIGS[config["method"]], mc, f"{where}: method_config")
    vocab = model.get("vocab_size", ModelConfig.vocab_size)
    lowest = {"seq_len": (config["seq_len"], 1), "method_config.smax": (mc.get("smax", 2), 2),
              "method_config.block_size": (mc.get("block_size", 1), 1),
              **{f"model.{k}": (model.get(k, 1), 1) for k in ("vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd")}}
    for name, (value, low) in lowest.items():
        if value < low:
            raise ValueError(f"{where}: {name} must be >= {low}, got {value}")
    for k in ("rope_theta", "norm_eps"):
        if model.get(k, 1.0) <= 0:
            raise ValueError(f"{where}: model.{k} must be > 0, got {model[k]}")
    if not isinstance(mc.get("mask_id"), int) or not 0 <= mc["mask_id"] < vocab:
        raise ValueError(f"{where}: method_config.mask_id must be a token id in [0, {vocab}), got {mc.get('mask_id')!r}")
    sampler = config.get("sampler", {})
    if not isinstance(sampler, dict) or any(
            not isinstance(sampler.get(k, 0), int) or isinstance(sampler.get(k), bool) or sampler.get(k, 0) < 0
            for k in ("window", "max_new_tokens")) or not isinstance(sampler.get("threshold", 1.0), (int, float)):
        raise ValueError(f"{where}: sampler must be an object with a threshold number and window / max_new_tokens "
                         f"integers >= 0, got {sampler!r:.80}")
    return config


def load_ours(d: str, device="cpu"):
    """Load a directory in our format (see the module docstring)."""
    try:
        with open(os.path.join(d, "config.json")) as f:
            config = check_config(json.load(f), os.path.join(d, "config.json"))
        model = from_state(ModelConfig(**config["model"]), load_safetensors(os.path.join(d, "model.safetensors")))
        method, cfg = method_of(config)
    except (OSError, ValueError, KeyError, TypeError) as e:       # json.JSONDecodeError is a ValueError
        raise ValueError(f"cannot read the checkpoint at {d}: {e}") from e
    return model.to(device).eval(), method, cfg, config


def load_pt(f: str):
    """torch.load(f, weights_only=True): a file holding anything but tensors and numbers (code) or a damaged one
    is a ValueError naming it, never torch's advice to turn weights_only off."""
    try:
        return torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ValueError(f"{f} holds objects other than tensors and numbers, so it was not loaded (only plain "
                         f"weights are read from .pt/.bin files)") from None
    except (EOFError, RuntimeError, OSError) as e:
        raise ValueError(f"{f} is damaged ({(str(e).splitlines() or [type(e).__name__])[0][:60]})") from None


def load_train_state(path: str) -> dict:
    """train_state.pt of the newest complete checkpoint in path, for --resume: a damaged or foreign file is one
    line (it is read with weights_only=True, so nothing in it runs)."""
    d = resolve(path)
    f = os.path.join(d, "train_state.pt")
    if not os.path.isfile(f):
        raise FileNotFoundError(f"{d} holds no train_state.pt, so training cannot resume from it")
    try:
        state = load_pt(f)
    except ValueError as e:
        raise ValueError(f"{e}; start again without --resume") from None
    if not isinstance(state, dict) or not {"model", "optimizer", "step"} <= set(state) or \
            not isinstance(state["step"], int):
        raise ValueError(f"{f} is not a train state written by train.py (it needs model, optimizer and step): "
                         f"start again without --resume")
    return state


def method_config(name: str, mask_id: int, **settings) -> dict:
    """asdict of a method's config, keeping only the settings that method has."""
    cls = METHOD_CONFIGS[name]
    fields = cls.__dataclass_fields__
    return asdict(cls(mask_id=mask_id, **{k: v for k, v in settings.items() if k in fields}))


# ----------------------------------------------------------------------------- the paper's released checkpoints

def released_keys() -> dict:
    """Short keys of the official eval scripts -> Hub ids (spec §6). setdlm-dN is setdlm-smax(2N)."""
    keys = {}
    for task in ("gsm8k", "cnndm"):
        for m in ("ar", "mdlm", "bd3lm-s4", "bd3lm-s8", "bd3lm-s16"):
            keys[f"{task}:{m}"] = f"kuleshov-group/{task}-{m}"
        for d in (4, 8, 16):
            repo = f"setdlm-gsm8k-smax{2 * d}" if task == "gsm8k" else f"{task}-setdlm-smax{2 * d}"
            keys[f"{task}:setdlm-smax{2 * d}"] = keys[f"{task}:setdlm-d{d}"] = "kuleshov-group/" + repo
    for task in ("owt", "lm1b"):                   # DiT models; the Set Diffusion ones may be named -setdlm-dN
        for m in ("ar", "mdlm", "bd3lm-s4", "bd3lm-s8", "bd3lm-s16"):
            keys[f"{task}:{m}"] = f"kuleshov-group/{task}-{m}"
        for d in (4, 8, 16):
            keys[f"{task}:setdlm-smax{2 * d}"] = keys[f"{task}:setdlm-d{d}"] = f"kuleshov-group/{task}-setdlm-smax{2 * d}"
    for s in (4, 8, 16):                           # the BD3-LM paper's OWT releases (the same DiT names)
        keys[f"owt:bd3lm-block_size{s}"] = f"kuleshov-group/bd3lm-owt-block_size{s}"
    keys["owt:mdlm-owt"] = "kuleshov-group/mdlm-owt"
    return keys


RELEASED = released_keys()
# a second Hub name to try when the first is missing: the push code named them -setdlm-dN, the README -smaxN
ALSO_NAMED = {f"kuleshov-group/{t}-setdlm-smax{2 * d}": f"kuleshov-group/{t}-setdlm-d{d}"
              for t in ("cnndm", "owt", "lm1b") for d in (4, 8, 16)}
DIT_DATA = {50258: "owt", 30522: "lm1b"}         # vocabulary size -> corpus, when the name does not say
DIT_DEFAULTS = {"owt": ("gpt2", 1024, 50257), "lm1b": ("bert-base-uncased", 128, 103)}   # tokenizer, L, [MASK]


def hub_first(repo: str) -> tuple[str, str]:
    """(repo id, snapshot dir of its configs) for repo, else its ALSO_NAMED alternative; the first error if both fail."""
    try:
        return repo, hub_dir(repo, ["*.json"])
    except FileNotFoundError:
        if repo not in ALSO_NAMED:
            raise
        try:
            return ALSO_NAMED[repo], hub_dir(ALSO_NAMED[repo], ["*.json"])
        except FileNotFoundError:
            raise FileNotFoundError(f"neither {repo} nor {ALSO_NAMED[repo]} could be found locally or on the "
                                    f"Hugging Face Hub: set HF_HUB_OFFLINE=0 and check the network, or pass a "
                                    f"local directory") from None


QWEN3_MASK_ID = 151660            # <|fim_middle|>, the official [MASK] for Qwen3
BACKBONE_NAME = re.compile(r"(.*?)(model\.(?:layers\.\d+|embed_tokens|norm)\..+|lm_head\.weight)")


def source_name(source: str) -> str:
    """What the method and its settings are read from: the repo id, or a local directory's own name."""
    return os.path.basename(os.path.normpath(source)) if os.path.isdir(source) else source


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
    """Our method name for a released checkpoint, from config.json's architectures/model_type and the repo name;
    a ValueError for anything else (a plain Qwen3 base model, another architecture)."""
    archs, kind = [str(a) for a in config.get("architectures") or []], str(config.get("model_type", ""))
    text = " ".join(archs + [kind, source_name(source)]).lower()
    for word, method in (("setdlm", "setdiffusion"), ("bd3lm", "bd3lm"), ("mdlm", "mdlm")):
        if word in text:
            return method
    if "ar" in re.split(r"[^a-z0-9]+", text) or any(re.match(r"AR([A-Z_]|$)", a) for a in archs):
        return "ar"
    if kind == "qwen3" or "Qwen3ForCausalLM" in archs:
        raise ValueError(f"{source} is a plain Qwen3 model (a backbone), not a trained checkpoint: fine-tune it "
                         f"with train.py --init-from {source}")
    raise ValueError(f"{source} is neither a checkpoint of ours (config.json has no 'method') nor a released "
                     f"SetDLM/BD3LM/MDLM/AR one: found architectures={archs}, model_type={kind!r}")


def raw_weights(d: str) -> dict:
    """All tensors of any *.safetensors (else pytorch_model*.bin, weights_only) in d, under their own names."""
    files = sorted(glob.glob(os.path.join(d, "*.safetensors")))
    return {k: v for f in files for k, v in load_safetensors(f).items()} if files else \
        {k: v for f in sorted(glob.glob(os.path.join(d, "pytorch_model*.bin")))
         for k, v in load_pt(f).items()}


def backbone_weights(d: str, raw: dict | None = None) -> dict:
    """The Qwen3 backbone's tensors in our names, from raw (default: raw_weights(d)).
    Names are cut before model.layers/model.embed_tokens/model.norm/lm_head; of several copies under
    different prefixes the one whose prefix contains "ema" wins."""
    raw = raw_weights(d) if raw is None else raw
    copies = {}
    for name, tensor in raw.items():
        if m := BACKBONE_NAME.fullmatch(name):
            copies.setdefault(m[1], {})[m[2].removeprefix("model.")] = tensor
    if not copies:
        raise ValueError(f"no Qwen3 backbone weights (...model.layers.N..., ...model.embed_tokens.weight) in {d}: "
                         f"found {sorted(raw)[:4] or 'no safetensors or pytorch_model*.bin files'}")
    pick = [p for p in copies if "ema" in p.lower()] or list(copies)
    if len(pick) > 1:
        raise ValueError(f"several weight copies in {d} (prefixes {pick}): cannot tell which to load")
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
    return next((int(m[1]) for w in re.split(r"[^a-z0-9]+", name.lower()) if (m := re.fullmatch(pattern, w))), None)


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
    1e4 (the same half-split layout) and an untied output Linear with a bias. Its fused qkv, rows laid out
    (three h d), is our qkv_proj as it is. With adaLN on, the conditioning is a constant,
    c = silu(sigma_map(0)), so every block's (shift, scale, gate) = adaLN_modulation(c) is a constant vector
    and folds into the weights:
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
            state.update({
                o + "input_layernorm.weight": w[p + "norm1.weight"] * (1 + scale_msa),
                o + "input_layernorm.bias": shift_msa,
                o + "self_attn.qkv_proj.weight": w[p + "attn_qkv.weight"],       # (three h d) rows = [q | k | v]
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


def load_released(d: str, source: str, config: dict, method: str, device="cpu"):
    """Convert a checkpoint of the official code (kuleshov-group/..., or a local copy) into ours.

    Assumed, as the release itself cannot be read offline (spec §6):
    - weights: *.safetensors (shards by glob) or pytorch_model*.bin; the backbone is stock HF Qwen3 under
      some prefix (e.g. backbone.model.layers.N...); EMA weights, a second copy under a prefix containing
      "ema", win. Other tensors (noise schedule buffers, ...) are ignored. The shape comes from the weights.
    - method: "setdlm"/"bd3lm"/"mdlm"/"ar" in architectures, model_type or the repo name.
    - smax: the name's smaxN (or dN -> 2N), as the official eval loader does; else noise_config:
      max_block_size when < the length, else 2 * desired_block_size. BD3-LM block: the name's sN, else
      block_size. A disagreement between name and config warns and keeps the name.
    - mask id: mask_token_id (e.g. in tokenization_config), else 151660 (<|fim_middle|>).
    - data: gsm8k or cnndm from the name, else null. seq_len: a "length" key in config.json, else 768 for
      cnndm and 1024 otherwise. Names are read from the repo id, or a local directory's own name.
    - the OWT/LM1B DiT (backbone.vocab_embed.embedding among the names): from_dit, n_heads from config.json
      (else 12); data owt or lm1b from the name, else the vocabulary size; tokenizer, L ("length" or
      "model_length" else) and mask id (else) of that corpus: gpt2, 1024, 50257 / bert-base-uncased, 128, 103.
    """
    raw = raw_weights(d)
    dit = any(k.startswith("backbone.vocab_embed.") for k in raw)
    if dit:
        model_cfg, state = from_dit(raw, int(find_key(config, "n_heads") or 12))
    else:
        state = backbone_weights(d, raw)
        model_cfg = infer_model_config(state, config)
    del raw
    name = source_name(source).lower()
    data = "gsm8k" if "gsm8k" in name else "cnndm" if "cnn" in name else None
    if dit:
        data = "lm1b" if "lm1b" in name else "owt" if "owt" in name else DIT_DATA.get(model_cfg.vocab_size)
        if data is None:
            raise ValueError(f"{source}: a DiT with a vocabulary of {model_cfg.vocab_size}, neither OWT's 50258 nor "
                             f"LM1B's 30522, and no owt/lm1b in its name")
    tokenizer, default_len, default_mask = DIT_DEFAULTS[data] if dit else \
        (None, 768 if data == "cnndm" else 1024, QWEN3_MASK_ID)
    length = find_key(config, "length") or find_key(config, "model_length")
    seq_len = length if isinstance(length, int) else default_len
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
           "method_config": method_config(method, mask_id, **settings),
           "tokenizer": tokenizer or "qwen3:" + (source if has_tok else "Qwen/Qwen3-1.7B-Base"),
           "data": data, "seq_len": seq_len, "source": source}
    model = from_state(model_cfg, state)
    return (model.to(device).eval(), *method_of(out), out)


def pick_setting(source: str, what: str, from_name, from_config):
    if from_name and from_config and from_name != from_config:
        warnings.warn(f"{source}: {what} {from_name} from the name, {from_config} from config.json; using {from_name}")
    if not (from_name or from_config):
        raise ValueError(f"{source}: cannot tell the {what} from the name or config.json")
    return int(from_name or from_config)
