"""config.json checked before anything is built from it: every section names only known fields, each of
its type and range, so a damaged or foreign file is one line, never a traceback.

    check_config(config, where)      a whole config.json of ours
    check_fields(cls, values, where) one section against its dataclass (ModelConfig, a method's config)
"""
import dataclasses
import math

from common.methods import NAMES, config_class
from common.standard_json import restored
from model import ModelConfig


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
    its sampler threshold read as a number (tau = inf is the string "inf": common/standard_json.py; an older
    file's Infinity token is read as inf by json itself)."""
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
    if config["method"] not in NAMES:
        raise ValueError(f"{where}: unknown method {config['method']!r} (one of {', '.join(NAMES)})")
    model, mc = config["model"], config["method_config"]
    check_fields(ModelConfig, model, f"{where}: model")
    check_fields(config_class(config["method"]), mc, f"{where}: method_config")
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
    if not isinstance(sampler, dict) or any(
            not isinstance(sampler.get(k, 0), int) or isinstance(sampler.get(k), bool)
            or sampler.get(k, 0) < 0
            for k in ("window", "max_new_tokens")) or not isinstance(sampler.get("threshold", 1.0),
                                                                     (int, float)):
        raise ValueError(f"{where}: sampler must be an object with a threshold number and window / "
                         f"max_new_tokens integers >= 0, got {sampler!r:.80}")
    return config
