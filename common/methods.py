"""The registry of the four method files: what a checkpoint's "method" names, and its config from
config.json's "method_config". What differs between methods is data on the method module (KNOBS, EXACT_NLL,
...), so this is the one place that maps a name to a method.

    METHODS, METHOD_CONFIGS      name -> method module, name -> its config dataclass
    method_of(config)            (module, config object) named by a config.json dict
    method_config(name, ...)     a method's config as config.json stores it, checked by the config itself
"""
from dataclasses import asdict

import ar
import bd3lm
import mdlm
import setdiffusion

METHODS = {"ar": ar, "mdlm": mdlm, "bd3lm": bd3lm, "setdiffusion": setdiffusion}
METHOD_CONFIGS = {"ar": ar.ARConfig, "mdlm": mdlm.MDLMConfig, "bd3lm": bd3lm.BD3LMConfig,
                  "setdiffusion": setdiffusion.SetDiffusionConfig}


def method_of(config: dict):
    """(method module, method config) named by a config.json dict."""
    return METHODS[config["method"]], METHOD_CONFIGS[config["method"]](**config["method_config"])


def method_config(name: str, mask_id: int, seq_len: int | None = None, **settings) -> dict:
    """asdict of a method's config, keeping only the settings that method has, checked by the config itself
    (its __post_init__, and with seq_len check(seq_len) against the context: a ValueError of one line)."""
    cls = METHOD_CONFIGS[name]
    fields = cls.__dataclass_fields__
    cfg = cls(mask_id=mask_id, **{k: v for k, v in settings.items() if k in fields})
    if seq_len is not None:
        cfg.check(seq_len)
    return asdict(cfg)
