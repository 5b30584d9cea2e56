"""Checkpoint directories: what train.py writes and what sample.py / eval.py read.

    out_dir/model.safetensors   weights for evaluation (the EMA weights when EMA is on)
    out_dir/config.json         {"model": ModelConfig, "method": "setdiffusion", "method_config": {...},
                                 "tokenizer": "bytes", "data": "arith", "seq_len": 128, "step": 500,
                                 "run": {"seed": 1, "lr": 0.002, ...}, ...}
    out_dir/train_state.pt      what --resume needs besides: raw weights, optimizer, step (tensors only)

A checkpoint is written whole into a fresh out_dir.tmp-XXXXXXXX, then swapped in with two renames, so a kill
at any moment leaves a complete checkpoint (`resolve` finds the newest), a full disk keeps the last one
(SaveError: one line), and nothing train.py did not write is ever deleted (`claim` refuses, before training,
an --out-dir whose config.json train.py did not write). config.json is validated before any weight is read
(`check_config`). Weights load with safetensors and torch.load(weights_only=True) only.

`load` also takes a Hugging Face repo id or a short key of the paper's released checkpoints (e.g.
"gsm8k:setdlm-smax8", "owt:setdlm-smax16"): it hands them to pretrained.py, which fetches them and converts
the official format (Qwen3 backbones, and the DiT of the OWT/LM1B models). Writing is common/saving.py's
(the crash-safe swap), checking config.json common/schema.py's, the method registry common/methods.py's, and
which run a checkpoint is (its "run" record; --resume's, --keep-every's and --init-from's checks)
common/runs.py's.
"""
import json
import os
import time

from common.methods import method_config, method_of
from common.saving import complete, locked, newest, resolve, resolved
from common.schema import check_config
from common.weights import from_state, load_pt, load_safetensors
from model import ModelConfig


def ours_on_disk(path: str) -> bool:
    """A local directory whose config.json is ours (it names a "method"), or not an object at all (then
    load_ours says in one line what is wrong); anything else is the released format or a Hub repo."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False                                # absent or unreadable: pretrained.fetch names the problem
    return not isinstance(config, dict) or "method" in config


def load(path: str, device="cpu", tries: int = 5):
    """A checkpoint -> (model in eval mode, method module, method config, config dict).

    A folder a running train.py saves into (it holds the folder's lock) is read again when a save swapped it
    mid-read (a file gone between the swap's two renames, or config.json changed under the weights), so an
    evaluation during training reads one checkpoint whole, never one step's config with another's weights.
    """
    for attempt in range(tries):
        try:
            return load_once(path, device)
        except ValueError:
            if attempt + 1 == tries or not locked(path):
                raise
            time.sleep(0.2)


def load_once(path: str, device="cpu"):
    """load, one try.

    path: a checkpoint directory written by train.py, read here (pretrained.py is not even imported); a short
    key of the paper's released checkpoints (pretrained.RELEASED, e.g. "gsm8k:setdlm-smax8"); a Hugging Face
    repo id; or a local copy of such a repo. For those, pretrained.fetch finds it and reads its config.json,
    which decides: ours (it has "method"), the released format (converted by pretrained.load_released), or an
    error (a plain Qwen3 base model is a backbone, not a trained checkpoint).
    """
    if not os.path.isfile(os.path.join(path, "config.json")):
        # a save killed mid-swap left its .tmp or .old (an older version's unmarked .old too): read, not moved
        old = resolved(path) + ".old"
        path = newest(path) or (old if complete(old) else path)
    if ours_on_disk(path):                            # our directory format: read here, nothing fetched
        return load_ours(resolve(path), device)
    from common import pretrained                     # a released checkpoint or a Hub repo
    source, d, config = pretrained.fetch(path)
    if not isinstance(config, dict):                  # a list or null: check_config's one line
        return load_ours(d, device)
    if "method" in config:
        return load_ours(resolve(d), device)
    model, config = pretrained.load_released(d, source, config, device)
    config["method_config"] = method_config(config["method"], **config["method_config"])
    return (model, *method_of(config), config)


def load_ours(d: str, device="cpu"):
    """Load a directory in our format (see the module docstring)."""
    try:
        with open(os.path.join(d, "config.json")) as f:
            text = f.read()
        config = check_config(json.loads(text), os.path.join(d, "config.json"))
        model = from_state(ModelConfig(**config["model"]),
                           load_safetensors(os.path.join(d, "model.safetensors")))
        method, cfg = method_of(config)
        with open(os.path.join(d, "config.json")) as f:
            if f.read() != text:                                  # a save swapped the folder meanwhile
                raise ValueError("config.json changed while the weights were read (a train.py saving "
                                 "into it?): read it again")
    except (OSError, ValueError, KeyError, TypeError) as e:       # json.JSONDecodeError is a ValueError
        raise ValueError(f"cannot read the checkpoint at {d}: {e}") from e
    return model.to(device).eval(), method, cfg, config


def load_train_state(path: str) -> dict:
    """train_state.pt of the newest complete checkpoint in path, for --resume: a damaged or foreign file is
    one line (it is read with weights_only=True, so nothing in it runs)."""
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
        raise ValueError(f"{f} is not a train state written by train.py (it needs model, optimizer and "
                         f"step): start again without --resume")
    return state
