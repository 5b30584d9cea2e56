"""train.py --init-from: where a run starts. A run starts from our own checkpoint (any method, a training
folder or a --keep-every snapshot: its eval weights) or from a Hugging Face Qwen3. Only the transformer
carries over: the method, its settings, the optimizer and the step are the new run's. What the weights cannot
serve (another tokenizer, shape flags that ask another shape, a longer context) is refused in one line before
any data or weight is read (check_start); config.json's "init_from" records where the run started
(start_record). Imported by train.py only when --init-from is given.
"""
import json
import os

from common import checkpoint
from common.cli import SHAPE, shape_words
from common.runs import saved_config
from model import PRESETS, ModelConfig

GIVE = ("give a folder train.py wrote (--out-dir, or a --keep-every snapshot OUT-stepN) or a Qwen3 model "
        "(Hub id or folder)")


def our_start(path: str, config: dict) -> dict:
    """--init-from our checkpoint, whose config.json (checkpoint.check_config'd) is `config`."""
    return {"path": path, "format": "ours", "model": ModelConfig(**config["model"]),
            "method": config["method"], "step": config.get("step"), "data": config["data"],
            "tokenizer": config["tokenizer"], "seq_len": config["seq_len"]}


def qwen3_start(path: str) -> dict:
    """--init-from a Hugging Face Qwen3 (Hub id or folder), from its config.json alone (no weight is read or
    downloaded before check_start): its context is max_position_embeddings."""
    from common.pretrained import qwen3_config     # only for a Qwen3: its conversion code
    from data.hub import hub_dir
    try:
        d = hub_dir(path, ["config.json"])
    except FileNotFoundError as e:
        raise ValueError(f"--init-from {e}") from None
    try:
        with open(os.path.join(d, "config.json")) as f:
            hf = json.load(f)
    except (OSError, ValueError, RecursionError) as e:              # RecursionError: nested too deep
        raise ValueError(f"--init-from {path}: no checkpoint there ({type(e).__name__} reading "
                         f"config.json): {GIVE}") from None
    if isinstance(hf, dict) and "method" in hf:
        raise ValueError(f"--init-from {path}: its config.json is train.py's, but no model.safetensors is "
                         f"beside it: give a complete checkpoint (a save killed half-way leaves none)")
    if not isinstance(hf, dict):
        raise ValueError(f"--init-from {path}: config.json holds {type(hf).__name__}, not a model config: "
                         f"{GIVE}")
    try:
        model = qwen3_config(hf)
    except ValueError as e:                        # a released checkpoint's, another architecture's
        raise ValueError(f"--init-from {path}: {e}: {GIVE}") from None
    return {"path": path, "format": "qwen3", "model": model, "tokenizer": "qwen3:",
            "seq_len": hf.get("max_position_embeddings")}


def same_tokenizer(ours: str, theirs: str) -> bool:
    """Whether two tokenizer names give the same ids: the same name, or two copies of Qwen3's (a Hub id and a
    local folder; every Qwen3 size shares one tokenizer)."""
    return ours == theirs or ours.startswith("qwen3:") and theirs.startswith("qwen3:")


def check_start(source: dict, tok, seq_len: int, asked: dict):
    """Refuse (ValueError, one line) a start that cannot carry over: another tokenizer (its ids mean other
    tokens), a vocabulary the embedding cannot hold, shape flags (asked: the ones given, e.g. {"n_layer": 6}
    or {"preset": "cnndm"}) that ask another shape than the weights have, or a context longer than the
    positions the weights were trained on (RoPE positions never seen)."""
    where, cfg = f"--init-from {source['path']}", source["model"]
    if not same_tokenizer(tok.name, source["tokenizer"]):
        src = "a Qwen3 model" if source["format"] == "qwen3" else f"trained with the {source['tokenizer']} " \
            "tokenizer"
        fix = "qwen3:<that model>" if source["format"] == "qwen3" else source["tokenizer"]
        raise ValueError(f"{where} is {src}, and this run's tokenizer is {tok.name}: the same ids would be "
                         f"other tokens; pass --tokenizer {fix} (or start from a model of this tokenizer)")
    if tok.vocab_size > cfg.vocab_size:
        raise ValueError(f"{where} has {cfg.vocab_size} embedding rows, fewer than the {tok.vocab_size} "
                         f"tokens of the {tok.name} tokenizer: start from a model of this tokenizer")
    wanted = dict(PRESETS[asked["preset"]]) if asked.get("preset") else {}
    wanted.update({k: v for k, v in asked.items() if k != "preset"})
    if wanted.get("n_kv_head") == 0:                   # --n-kv-head 0: as many as the heads
        wanted["n_kv_head"] = wanted.get("n_head", cfg.n_head)
    differ = [k for k, v in wanted.items() if v != getattr(cfg, k)]
    if differ:                       # every flag that differs; of a preset, its first field that does
        flags = f"--preset {asked['preset']}" if asked.get("preset") else " ".join(
            f"--{k.replace('_', '-')} {asked[k]}" for k in differ)
        differ = differ[:1] if asked.get("preset") else differ
        raise ValueError(f"{flags} asks for {shape_words(differ, wanted.get)}, and {where} has "
                         f"{shape_words(differ, lambda k: getattr(cfg, k))}: the shape comes from "
                         f"--init-from, so drop the shape flags (or start from a model of that shape)")
    if source["seq_len"] and seq_len > source["seq_len"]:
        raise ValueError(f"this run's context of {seq_len} tokens is longer than the {source['seq_len']} "
                         f"positions {where} was trained on: pass --seq-len {source['seq_len']} or less, or "
                         f"start from a model trained at this length")


def start_record(source: dict) -> dict:
    """config.json's "init_from": the path as given and, for our checkpoint, its method, step and data (a
    resumed run keeps its own record)."""
    if source.get("record"):
        return source["record"]
    keys = ("path", "format", "method", "step", "data") if source["format"] == "ours" else ("path", "format")
    return {k: source[k] for k in keys}


def start_from(args, tok, seq_len) -> dict:
    """--init-from: our checkpoint (any method; a training folder or a --keep-every snapshot) or a Qwen3, read
    without its weights and checked against this run: a tokenizer, shape flags or context the weights cannot
    serve is one line (check_start). With --resume the run's own checkpoint stands in for it (the train state
    holds the weights), so a source moved or deleted since never stops a resume; check_resume compares the
    run's "init_from" with the flag. Without --resume, this run's own --out-dir (whose first save would
    replace the weights it starts from) and a released checkpoint's key are refused."""
    own, d = checkpoint.newest(args.out_dir), checkpoint.newest(args.init_from)
    if args.resume and own is not None:
        config = saved_config(own)
        start = {**our_start(args.init_from, config), "dir": own, "record": config.get("init_from")}
        check_start(start, tok, seq_len, asked_shape(args))
        return start
    if os.path.realpath(args.init_from) == os.path.realpath(args.out_dir):
        raise ValueError(f"--init-from {args.init_from} is this run's --out-dir, whose first save replaces "
                         f"the weights it starts from: to continue that run, pass --resume with the flags "
                         f"that wrote it; to start another from it, choose another --out-dir")
    if d is None and ":" in args.init_from:
        from common.pretrained import RELEASED
        if args.init_from in RELEASED:
            raise ValueError(f"--init-from {args.init_from} is a released checkpoint, which --init-from does "
                             f"not take: {GIVE}, e.g. the Qwen3 it was fine-tuned from (eval.py --ckpt "
                             f"{args.init_from} evaluates it)")
    try:
        ours = d is not None and checkpoint.ours_on_disk(d)
    except RecursionError:                        # a config.json nested too deep: qwen3_start's one line
        ours = False
    if ours:
        if checkpoint.locked(args.init_from):
            lock = checkpoint.resolved(args.init_from) + ".lock"
            raise ValueError(f"--init-from {args.init_from} is being written by a running train.py (it holds "
                             f"{lock}): its saves replace the weights as they are read; start from one of "
                             f"its --keep-every snapshots ({args.init_from}-stepN), or when it has ended")
        start = {**our_start(args.init_from, saved_config(d)), "dir": d}
    else:
        start = qwen3_start(args.init_from)
    check_start(start, tok, seq_len, asked_shape(args))
    return start


def asked_shape(args) -> dict:
    """The shape flags given (cli.parse_train: the others are None, the source's shape)."""
    return {k: getattr(args, k) for k in ("preset", *SHAPE) if getattr(args, k) not in (None, "")}
