"""Checkpoint directories: what train.py writes and what sample.py / eval.py read, so that nothing is lost.

    out_dir/model.safetensors   weights for evaluation (the EMA weights when EMA is on)
    out_dir/config.json         {"model": ModelConfig, "method": "setdiffusion", "method_config": {...},
                                 "tokenizer": "bytes", "data": "arith", "seq_len": 128, "step": 500,
                                 "run": {"seed": 1, "lr": 0.002, ...}, "environment": {...}, ...}
    out_dir/train_state.pt      what --resume needs besides: raw weights, optimizer, step (tensors only)

    METHODS / method_of(config)     config.json's "method" -> the method module, and its config
    check_config(config, where)     config.json checked before anything is built from it (one line if bad)
    json_dump / json_load ...       standard JSON, for every file the project writes (tau = inf as "inf")
    claim / save / newest           before training: lock --out-dir; a save written whole, swapped in
    load(path) / load_train_state   a checkpoint -> (model, method, method config, config); --resume's state

Weights are read by common/weights.py (safetensors and weights_only=True; the one check of names and shapes),
imported where a checkpoint is read: a run from scratch only writes. `load` also takes a Hugging Face repo id
or a key of the paper's released checkpoints ("gsm8k:setdlm-smax8"): common/pretrained.py converts them.
"""
import contextlib
import dataclasses
import json
import math
import os
import re
import secrets
import shutil
import sys
import time

import torch

import ar
import bd3lm
import mdlm
import setdiffusion
from model import ModelConfig

# ----------------------------------------------------------------------------- the methods
# What differs between methods is data on the method module (KNOBS, EXACT_NLL, ...): this table is the one
# place that maps a name (train.py's --model, config.json's "method") to a method.

METHODS = {"ar": ar, "mdlm": mdlm, "bd3lm": bd3lm, "setdiffusion": setdiffusion}   # in the paper's order
CONFIGS = {"ar": ar.ARConfig, "mdlm": mdlm.MDLMConfig, "bd3lm": bd3lm.BD3LMConfig,
           "setdiffusion": setdiffusion.SetDiffusionConfig}


def method_of(config: dict):
    """(method module, method config) named by a config.json dict."""
    return METHODS[config["method"]], CONFIGS[config["method"]](**config["method_config"])


def method_config(name: str, mask_id: int, seq_len: int | None = None, **settings) -> dict:
    """asdict of a method's config, keeping only the settings that method has, checked by the config itself
    (its __post_init__, and with seq_len check(seq_len) against the context: a ValueError of one line)."""
    cls = CONFIGS[name]
    cfg = cls(mask_id=mask_id, **{k: v for k, v in settings.items() if k in cls.__dataclass_fields__})
    if seq_len is not None:
        cfg.check(seq_len)
    return dataclasses.asdict(cfg)


# ----------------------------------------------------------------------------- config.json, checked

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
            raise ValueError(f"{where}.{k} must be {'a finite number' if t is float else t.__name__}, got "
                             f"{v!r:.40}")


def check_config(config, where: str) -> dict:
    """A config.json of ours, checked before anything is built from it (types, sizes, ranges); returned with
    its sampler threshold read as a number (tau = inf is the string "inf"; an older file's Infinity token is
    read as inf by json itself)."""
    if not isinstance(config, dict):
        raise ValueError(f"{where} holds {type(config).__name__}, not an object: it was not written by "
                         "train.py")
    if isinstance(config.get("sampler"), dict):
        config = {**config, "sampler": restored(config["sampler"])}
    for key, kind in (("model", dict), ("method", str), ("method_config", dict), ("tokenizer", str),
                      ("data", str), ("seq_len", int)):
        if key not in config:
            raise ValueError(f"{where} has no {key!r}: it was not written by train.py, or was edited")
        if not isinstance(config[key], kind) or isinstance(config[key], bool):
            raise ValueError(f"{where}: {key} must be {'an object' if kind is dict else kind.__name__}, "
                             f"got {config[key]!r:.40}")
    if config["method"] not in METHODS:
        raise ValueError(f"{where}: unknown method {config['method']!r} (one of {', '.join(METHODS)})")
    model, mc = config["model"], config["method_config"]
    check_fields(ModelConfig, model, f"{where}: model")
    check_fields(CONFIGS[config["method"]], mc, f"{where}: method_config")
    vocab = model.get("vocab_size", ModelConfig.vocab_size)
    lowest = {"seq_len": (config["seq_len"], 1),    # (a method's settings: its config's own rules)
              **{f"model.{k}": (model.get(k, 1), 1) for k in ("vocab_size", "n_layer", "n_head", "n_kv_head",
                                                              "n_embd")}}
    for name, (value, low) in lowest.items():
        if value < low:
            raise ValueError(f"{where}: {name} must be >= {low}, got {value}")
    for k in ("rope_theta", "norm_eps"):
        if model.get(k, 1.0) <= 0:
            raise ValueError(f"{where}: model.{k} must be > 0, got {model[k]}")
    if not isinstance(mc.get("mask_id"), int) or not 0 <= mc["mask_id"] < vocab:
        raise ValueError(f"{where}: method_config.mask_id must be a token id in [0, {vocab}), got "
                         f"{mc.get('mask_id')!r}")
    if not isinstance(config.get("run", {}), dict):                       # train.py's run record
        raise ValueError(f"{where}: run must be an object, got {config['run']!r:.40}")
    sampler = config.get("sampler", {})
    counts = [sampler.get(k, 0) for k in ("window", "max_new_tokens")] if isinstance(sampler, dict) else [-1]
    if any(type(n) is not int or n < 0 for n in counts) or not isinstance(sampler.get("threshold", 1.0),
                                                                          (int, float)):
        raise ValueError(f"{where}: sampler must be an object with a threshold number and window / "
                         f"max_new_tokens integers >= 0, got {sampler!r:.80}")
    return config


# ----------------------------------------------------------------------------- standard JSON
# Every file the project writes (config.json, eval.py --json, the paper's and the benchmarks' results) is
# standard JSON (RFC 8259), which has no infinite or NaN number: Python's json writes `Infinity` and `NaN`,
# which jq, a browser's JSON.parse and most readers refuse. So a number that is not finite is written as the
# string float() reads back (tau = inf -> "threshold": "inf"), and read back wherever it is an object's value
# (never inside a list: a list of texts stays texts).

NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}      # the strings, and what they read as


def standard(obj):
    """obj with every non-finite float (inf, -inf, nan) replaced by its string, at any depth."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {k: standard(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [standard(v) for v in obj]
    return obj


def restored(obj):
    """obj (parsed JSON) with the strings "inf", "-inf" and "nan" that are an object's values read as floats,
    at any depth; lists keep their strings (texts, such as samples, are lists' items)."""
    if isinstance(obj, dict):
        return {k: NON_FINITE[v] if isinstance(v, str) and v in NON_FINITE else restored(v)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [restored(v) if isinstance(v, (dict, list)) else v for v in obj]
    return obj


def json_dumps(obj, **kw) -> str:
    return json.dumps(standard(obj), allow_nan=False, **kw)


def json_dump(obj, f, **kw):
    json.dump(standard(obj), f, allow_nan=False, **kw)


def json_loads(text):
    return restored(json.loads(text))


def json_load(f):
    return restored(json.load(f))


# ----------------------------------------------------------------------------- finding the newest checkpoint
# A save writes a fresh scratch folder <out_dir>.tmp-XXXXXXXX (holding SWAP_MARK) whole, config.json last
# (so one holding config.json is complete); then it marks out_dir, renames it onto a fresh
# <out_dir>.old-XXXXXXXX, renames the .tmp to out_dir and deletes the .old. A kill at any moment leaves a
# complete checkpoint in one of them (`newest` finds it; the next save or `claim` finishes the swap). Only
# folders of those names that hold the mark are ever removed, and in them only train.py's file names. A
# symlinked out_dir is resolved: the lock and the renames act on the folder it points to, and the link stays.
# Older versions swapped through <out_dir>.tmp and <out_dir>.old, recovered the same way when they are that
# version's (`legacy`).
FILES = ("config.json", "model.safetensors", "train_state.pt")    # what a checkpoint directory holds
SWAP_MARK = ".swapping"                                          # "this folder is train.py's scratch"
PART = "config.json.part"                                         # config.json while it is written
OURS = {*FILES, SWAP_MARK, PART}                                  # every name train.py writes in a folder


class SaveError(OSError):
    """A checkpoint that could not be written (a full disk, an unwritable folder): its one line names the
    folder and the last complete checkpoint, which is kept."""


def resolved(out_dir: str) -> str:
    """out_dir as given, or the real path it leads to when it (or a folder above it, in the path as given) is
    a symbolic link."""
    out_dir = out_dir.rstrip("/") or "/"
    real = os.path.realpath(out_dir)
    return out_dir if os.path.normpath(os.path.join(os.path.realpath("."), out_dir)) == real else real


def complete(d: str) -> bool:
    return os.path.isfile(os.path.join(d, "config.json")) and \
        os.path.isfile(os.path.join(d, "model.safetensors"))


def step_of(d: str) -> int:
    try:
        with open(os.path.join(d, "config.json")) as f:
            step = json.load(f).get("step", 0)
        return step if isinstance(step, int) else 0
    except (OSError, ValueError, AttributeError, RecursionError):     # unreadable: the oldest
        return -1


def same_run(a: str, b: str) -> bool:
    """Whether the checkpoints in folders a and b have the same config.json but for the step and the
    environment (the saves of one run)."""
    def config(d):
        try:
            with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
                c = json_load(f)
        except (OSError, ValueError):
            return None
        return {k: v for k, v in c.items() if k not in ("step", "environment", "earlier_environments")} \
            if isinstance(c, dict) else None
    return config(a) is not None and config(a) == config(b)


def legacy(d: str) -> tuple[str | None, str | None]:
    """(<d>.tmp, <d>.old) of an older train.py's interrupted swap, each None unless it is one: that .old
    holds the version's swap mark (a copy of yours never does) and train.py's files only; that .tmp holds
    train.py's files only, while a swap was under way (d, or that .old, holds the mark), and a complete one
    is of the same run. A folder of those names that is not is yours: train.py never reads, moves or deletes
    it (load reads an unmarked .old when d holds no checkpoint: reading loses nothing)."""
    tmp, old = d + ".tmp", d + ".old"
    marked = [x for x in (d, old) if os.path.isfile(os.path.join(x, SWAP_MARK)) and not os.path.islink(x)
              and not foreign(x)]
    old = old if old in marked else None
    if not os.path.isdir(tmp) or os.path.islink(tmp) or foreign(tmp, partial=True) or not any(
            not complete(tmp) or complete(x) and same_run(x, tmp) for x in marked):
        tmp = None
    return tmp, old


def scratch(d: str, kind: str = "tmp|old", empty: bool = False) -> list[str]:
    """The scratch folders of saves to d that hold train.py's mark (with empty, also those left empty by a
    kill): <d>.tmp-XXXXXXXX and <d>.old-XXXXXXXX."""
    parent, name = os.path.split(d)
    pattern = re.compile(re.escape(name) + rf"\.({kind})-[0-9a-f]{{8}}")
    try:
        names = [n for n in os.listdir(parent or ".") if pattern.fullmatch(n)]
    except OSError:
        return []
    found = []
    for x in (os.path.join(parent, n) for n in sorted(names)):
        if os.path.isdir(x) and not os.path.islink(x) and (
                os.path.isfile(os.path.join(x, SWAP_MARK)) or empty and not os.listdir(x)):
            found.append(x)
    return found


def newest(out_dir: str) -> str | None:
    """The newest complete checkpoint of out_dir: out_dir itself, or a save's .tmp (killed before its swap,
    newer), or its .old (killed between its two renames); None if there is none."""
    d = resolved(out_dir)
    tmp, old = legacy(d)
    found = [x for x in (d, tmp, *scratch(d, "tmp")) if x and complete(x)] or \
        [x for x in (old, *scratch(d, "old")) if x and complete(x)]
    return max(found, key=step_of) if found else None       # max keeps out_dir on a tie


def resolve(out_dir: str) -> str:
    """The directory holding the newest complete checkpoint written to out_dir, or a clear error."""
    d = newest(out_dir)
    if d is None:
        tmp = resolved(out_dir) + ".tmp"
        hint = f" ({tmp} holds one, not marked as a save of train.py's: if it is, mv {tmp} {out_dir})" \
            if complete(tmp) else ""
        raise FileNotFoundError(f"no checkpoint at {out_dir}: expected a directory with config.json and "
                                f"model.safetensors (written by train.py --out-dir){hint}")
    return d


def foreign(d: str, partial: bool = False) -> str:
    """Why directory d is not one train.py wrote, for a one-line refusal; "" when it is: empty, or train.py's
    file names only with a config.json that passes check_config (older checkpoints do). partial: a save's
    folder, which may lack config.json (killed while writing it)."""
    names = sorted(os.listdir(d))
    other = [n for n in names if n not in OURS]
    if other:
        return f"it holds {', '.join(other[:3])}{', ...' if len(other) > 3 else ''}"
    if not os.path.isfile(os.path.join(d, "config.json")):
        return "" if partial or not set(names) - {SWAP_MARK} else \
            f"it holds {', '.join(names)} but no config.json"
    try:
        with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
            check_config(json.load(f), "its config.json")
    except (OSError, ValueError, RecursionError) as e:   # json's and UTF-8's errors are ValueErrors
        return str(e).splitlines()[0][:200]
    return ""


def not_ours(d: str) -> str:
    """Why train.py may not write a checkpoint to d, for a one-line refusal; "" when it may: d is absent, an
    empty folder, or a checkpoint folder of train.py's."""
    if os.path.lexists(d) and not os.path.isdir(d):
        return "it is a file, not a folder"
    return foreign(d) if os.path.isdir(d) else ""


def locked(d: str) -> bool:
    """Whether a train.py trains in folder d now: it holds d.lock (claim's; opened read-only here, so none is
    made). This process's own --out-dir counts too."""
    try:
        import fcntl
        with open(resolved(d) + ".lock") as f:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except (OSError, ImportError):                       # no lock file, no locks here (Windows, some NFS)
        return False
    return False


# --------------------------------------------------------------------- writing, so that a kill loses nothing

def fresh(d: str, kind: str) -> str:
    """A new empty folder <d>.<kind>-XXXXXXXX, made by this call (never one that was there)."""
    while True:
        path = f"{d}.{kind}-{secrets.token_hex(4)}"
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def remove(d: str):
    """Delete a folder train.py wrote: its files by their names (config.json first, so that a kill half-way
    never leaves it complete; the mark last, so that the next save still knows it), then the folder if that
    left it empty. Anything else in it stays, and so does the folder."""
    for name in ("config.json", PART, "model.safetensors", "train_state.pt", SWAP_MARK):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(d, name))
    with contextlib.suppress(OSError):
        os.rmdir(d)


def swap_in(d: str, src: str):
    """Make the complete folder src (a save's .tmp) the checkpoint d: d -> a fresh .old -> deleted."""
    old = None
    if os.path.isdir(d):
        open(os.path.join(d, SWAP_MARK), "w").close()
        old = fresh(d, "old")
        os.replace(d, old)                               # onto the empty folder made for it
    os.replace(src, d)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(d, SWAP_MARK))
    if old is not None:
        remove(old)


def finish_swap(out_dir: str):
    """Bring out_dir to a clean state after a kill: the newest complete checkpoint in out_dir itself, and no
    scratch folder of train.py's left (any other folder is never touched)."""
    d = resolved(out_dir)
    tmp, old = legacy(d)
    best = newest(d)
    if best is not None and best != d:
        swap_in(d, best)
    if tmp is not None and os.path.isdir(tmp) and not complete(tmp):
        remove(tmp)                                      # an older version's save killed half-way
    if old is not None and os.path.isdir(old):
        remove(old)
    for x in scratch(d, empty=True):
        remove(x)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(d, SWAP_MARK))            # killed after marking out_dir, before its rename


def claim(out_dir: str, resume: bool, lock: bool = True):
    """Before training: check that out_dir can hold our checkpoints, lock it against a second train.py, and
    finish a swap a kill interrupted. Refuses (ValueError, one line) a file, a directory train.py did not
    write or a link that leads nowhere; an unwritable place fails here, not at the first save. Returns the
    open lock file: keep it open while training. lock=False (--no-lock, a file system without locks) trains on
    where locking fails; where it works, a train.py holding it is still refused."""
    d = resolved(out_dir)
    if os.path.islink(d):
        raise ValueError(f"--out-dir {out_dir} is a symbolic link that leads to no folder (a loop?): choose "
                         f"another --out-dir")
    if os.path.exists(d) and not os.path.isdir(d):
        raise ValueError(f"--out-dir {d} is a file, not a checkpoint directory: choose another --out-dir")
    why = not_ours(d)
    if why:
        raise ValueError(f"{d} is not a checkpoint directory written by train.py ({why}), and train.py "
                         f"replaces that directory at every save: choose another --out-dir")
    if resume and newest(d) is None:
        resolve(out_dir)                                 # the "no checkpoint at" error
    try:
        os.makedirs(os.path.dirname(os.path.abspath(d)), exist_ok=True)
        held = open(d + ".lock", "a")
    except OSError as e:
        raise ValueError(f"cannot write checkpoints to --out-dir {d}: {e.strerror or e}") from None
    try:
        import fcntl
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:                                  # no fcntl (Windows): no lock
        pass
    except BlockingIOError:                              # with --no-lock too: a lock that works is held
        held.close()
        raise ValueError(f"another train.py is writing {d} (it holds {d}.lock): wait for it to finish, or "
                         f"choose another --out-dir") from None
    except OSError as e:                                 # ENOLCK, EOPNOTSUPP: NFS without lockd, Lustre
        if not lock:
            return held                                  # --no-lock: the user keeps other runs off out_dir
        held.close()
        raise ValueError(f"{d}.lock cannot be locked on this file system ({e.strerror}), so train.py cannot "
                         f"keep a second run off {d}: choose an --out-dir on a file system with locks, or "
                         f"add --no-lock and start one train.py per --out-dir yourself") from None
    try:
        finish_swap(d)
    except OSError as e:
        held.close()
        raise ValueError(f"cannot finish the save a kill interrupted in {d}: {e.strerror or e}") from None
    for line in older_leftovers(d):
        print(line, file=sys.stderr)
    return held


def older_leftovers(d: str) -> list[str]:
    """Notes naming what an older version's interrupted delete left beside d (it renamed a folder to
    <d>.old.deleting or <d>.tmp.deleting first; a symlinked --out-dir left the link itself there). Nothing
    reads those names now, and nothing deletes them: they may hold the only copy of something."""
    notes = []
    for x in (d + ".old.deleting", d + ".tmp.deleting"):
        if os.path.islink(x):
            notes.append(f"note: {x} is a link an older train.py left (to {os.path.realpath(x)}); nothing "
                         f"uses it now: remove the link once that folder is safe")
        elif os.path.isfile(os.path.join(x, SWAP_MARK)):
            notes.append(f"note: {x} is a half-deleted checkpoint an older train.py left; nothing uses it "
                         f"now: delete it")
    return notes


def save(out_dir: str, model, config: dict, train_state: dict | None = None, eval_model=None, write=True):
    """Write a complete checkpoint atomically. eval_model (e.g. the EMA copy) goes to model.safetensors.
    With FSDP every rank calls it (the shards are gathered into one file) and only the one with write=True
    writes. A write that fails (a full disk) removes its own .tmp and raises SaveError (one line); the last
    complete checkpoint stays."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file
    shown = weights(eval_model or model)
    train_state = None if train_state is None else {"model": weights(model), **unsharded(train_state)}
    if not write:
        return
    d = resolved(out_dir)
    why = not_ours(d)
    if train_state is None and locked(d):             # a snapshot's name another train.py trains in
        raise SaveError(f"cannot save step {config.get('step', '?')} to {d}: another train.py is training "
                        f"there (it holds {d}.lock), so it is not replaced; this run stops: move that run to "
                        f"another --out-dir, then --resume this one from its last save in --out-dir, if any")
    if why:                                           # a folder that appeared since train.py started
        raise SaveError(f"cannot save step {config.get('step', '?')} to {d}: it was not written by train.py "
                        f"({why}), so it is not replaced; move it away, then --resume")
    finish_swap(d)
    tmp = None
    try:
        tmp = fresh(d, "tmp")
        open(os.path.join(tmp, SWAP_MARK), "w").close()
        save_file(shown, os.path.join(tmp, "model.safetensors"))
        if train_state is not None:
            torch.save(train_state, os.path.join(tmp, "train_state.pt"))
        with open(os.path.join(tmp, PART), "w") as f:
            json_dump(config, f, indent=2)               # tau = inf as "inf": standard JSON
        os.replace(os.path.join(tmp, PART), os.path.join(tmp, "config.json"))   # last: complete
    except BaseException as e:                        # a full disk, Ctrl-C, ...: only this save's folder goes
        if tmp is not None:
            remove(tmp)
        if isinstance(e, (OSError, RuntimeError, SafetensorError)):  # torch.save's write errors: RuntimeError
            raise SaveError(cannot_save(d, config, e, train_state is not None)) from None
        raise
    try:
        swap_in(d, tmp)
    except OSError as e:                              # the new checkpoint is complete in tmp: newest finds it
        raise SaveError(cannot_save(d, config, e, train_state is not None)) from None


def cannot_save(d: str, config: dict, e: BaseException, resumable: bool = True) -> str:
    """The one line of a save that failed: the folder, why, its free space, and where the last checkpoint
    is (of a weights-only save, not resumable: --keep-every's snapshot, the run's own is in --out-dir)."""
    why = (getattr(e, "strerror", None) or (str(e).splitlines() or [type(e).__name__])[0])[:120]
    try:
        free = f"{shutil.disk_usage(os.path.dirname(os.path.abspath(d))).free / 2**20:,.1f} MiB free there"
    except OSError:
        free = "its free space unknown"
    last = newest(d) if resumable else None
    kept = (f"the last complete checkpoint (step {step_of(last)}) is in {last}: make room, then --resume"
            if last else "no checkpoint was saved yet" if resumable else
            "the run's last checkpoint is in --out-dir: fix this, then --resume")
    return f"cannot save step {config.get('step', '?')} to {d} ({why}; {free}); {kept}"


def weights(model) -> dict:
    """State dict without the tied lm_head (safetensors refuses shared tensors); an FSDP-sharded model's
    tensors gathered whole (unsharded: every rank calls it)."""
    sd = unsharded(model.state_dict())
    if model.cfg.tie_embeddings:
        sd.pop("lm_head.weight", None)
    return {k: v.detach().contiguous() for k, v in sd.items()}


def unsharded(x):
    """x (a state dict: nested dicts and lists) with every FSDP2 DTensor gathered whole. A DTensor's gather is
    a collective, so with train.py --fsdp every rank calls it, in the same order; without FSDP it is x."""
    from torch.distributed.tensor import DTensor
    if isinstance(x, DTensor):
        return x.full_tensor()
    if isinstance(x, dict):
        return {k: unsharded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [unsharded(v) for v in x]
    return x


# ----------------------------------------------------------------------------- reading

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

    path: a checkpoint directory written by train.py, read here (pretrained.py is not even imported); a short
    key of the paper's released checkpoints (pretrained.RELEASED, e.g. "gsm8k:setdlm-smax8"); a Hugging Face
    repo id; or a local copy of such a repo. A folder a running train.py saves into (it holds the folder's
    lock) is read again when a save swapped it mid-read, so an evaluation during training reads one
    checkpoint whole, never one step's config with another's weights.
    """
    for attempt in range(tries):
        try:
            return load_once(path, device)
        except ValueError:
            if attempt + 1 == tries or not locked(path):
                raise
            time.sleep(0.2)


def load_once(path: str, device="cpu"):
    """load, one try: our directory format read here; anything else fetched by pretrained.fetch, whose
    config.json decides: ours (it has "method"), the released format (pretrained.load_released), or an error
    (a plain Qwen3 base model is a backbone, not a trained checkpoint)."""
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
    from common.weights import from_state, load_safetensors
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
    from common.weights import load_pt
    try:
        state = load_pt(f)
    except ValueError as e:
        raise ValueError(f"{e}; start again without --resume") from None
    if not isinstance(state, dict) or not {"model", "optimizer", "step"} <= set(state) or \
            not isinstance(state["step"], int):
        raise ValueError(f"{f} is not a train state written by train.py (it needs model, optimizer and "
                         f"step): start again without --resume")
    return state
