"""Standard JSON (RFC 8259) for every file the project writes: config.json, eval.py --json, the paper's and
the benchmarks' results. JSON has no infinite or NaN number, and Python's json writes `Infinity` and `NaN`,
which jq, a browser's JSON.parse and most other readers refuse. So a number that is not finite is written as
a string, the one float() reads back:

    tau = inf  ->  "threshold": "inf"        (also "-inf" and "nan")

    dump(obj, f) / dumps(obj)     write: non-finite floats as those strings; anything else non-standard fails
    load(f) / loads(text)         read: those strings back to floats wherever they are an object's value
                                  (never inside a list: a list of texts stays texts); an older file's
                                  Infinity and NaN tokens (config.json's threshold before) read as floats too
    restored(obj)                 the same on an object already parsed (common/schema.py's check_config)
"""
import json
import math

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


def dumps(obj, **kw) -> str:
    return json.dumps(standard(obj), allow_nan=False, **kw)


def dump(obj, f, **kw):
    json.dump(standard(obj), f, allow_nan=False, **kw)


def loads(text):
    return restored(json.loads(text))


def load(f):
    return restored(json.load(f))
