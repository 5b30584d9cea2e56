"""The registry of the four method files: what a checkpoint's "method" (train.py's --model) names, and its
config from config.json's "method_config". What differs between methods is data on the method module (KNOBS,
EXACT_NLL, ...), so this is the one place that maps a name to a method. A method file is imported when a run
names it, as data/ imports a task's module: a Set Diffusion run loads setdiffusion.py (and ar.py, whose
helpers it shares), not the other methods.

    NAMES                        the methods, in the order the paper builds them up
    method(name)                 name -> the method module
    config_class(name)           name -> its config dataclass
    method_of(config)            (module, config object) named by a config.json dict
    method_config(name, ...)     a method's config as config.json stores it, checked by the config itself
"""
import importlib
from dataclasses import asdict

NAMES = ("ar", "mdlm", "bd3lm", "setdiffusion")
CONFIGS = {"ar": "ARConfig", "mdlm": "MDLMConfig", "bd3lm": "BD3LMConfig",        # each module's config class
           "setdiffusion": "SetDiffusionConfig"}


def method(name: str):
    """The method file named `name` (one of NAMES), imported on first use."""
    if name not in NAMES:
        raise ValueError(f"unknown method {name!r} (one of {', '.join(NAMES)})")
    return importlib.import_module(name)


def config_class(name: str):
    return getattr(method(name), CONFIGS[name])


def method_of(config: dict):
    """(method module, method config) named by a config.json dict."""
    return method(config["method"]), config_class(config["method"])(**config["method_config"])


def method_config(name: str, mask_id: int, seq_len: int | None = None, **settings) -> dict:
    """asdict of a method's config, keeping only the settings that method has, checked by the config itself
    (its __post_init__, and with seq_len check(seq_len) against the context: a ValueError of one line)."""
    cls = config_class(name)
    fields = cls.__dataclass_fields__
    cfg = cls(mask_id=mask_id, **{k: v for k, v in settings.items() if k in fields})
    if seq_len is not None:
        cfg.check(seq_len)
    return asdict(cfg)
