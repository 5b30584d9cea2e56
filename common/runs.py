"""Which run a checkpoint is, and the checks that keep runs apart: train.py --resume continues only the run a
checkpoint holds, and --keep-every's snapshots (<out_dir>-stepN) are written only where nothing else is.

    identity(args, world)                  config.json's "run": the flags that make a run another run
    differences(saved, config)             what tells a checkpoint's run from this one's, in words
    check_resume(out_dir, config, step, max_iters)   --resume refused in one line when it is another run
                                                     or has nothing left to train
    restore / restore_optimizer            a train state's weights and optimizer, or one line
    check_snapshots(out_dir, config, start, max_iters, every)   --keep-every's names claimed before training
    start_from(args, tok, seq_len)         --init-from: our checkpoint or a Qwen3, what cannot carry over
                                           refused in one line; start_record, config.json's "init_from"

A config.json holds the method, its settings, the model, the tokenizer and the data; "run" adds the seed, the
optimiser and its schedule, the global batch and the starting weights (RECIPE), and --max-iters, which is
recorded but not compared: --resume may raise it to train on. A checkpoint of an older version, without a
setting or without "run", is compared on what it has.
"""
import json
import os
import re

from common import checkpoint, methods, saving, schema, train_args
from common.cli import PARENTS
from common.weights import load_safetensors, load_weights
from model import PRESETS, ModelConfig

RECIPE = ("seed", "lr", "final_lr", "warmup", "weight_decay", "beta2", "grad_clip", "ema", "global_batch",
          "init_from")
KEYS = ("method", "method_config", "model", "tokenizer", "data", "data_options", "seq_len", "predict_padding",
        "run")                                          # the parts of a config.json that tell runs apart


def identity(args, world: int) -> dict:
    """config.json's "run" for train.py's args under `world` processes (the global batch: --batch-size x
    --grad-accum x processes, so that a resume on another number of GPUs with the same batch is the same
    run)."""
    run = {k: getattr(args, k) for k in RECIPE if k != "global_batch"}
    return {**run, "global_batch": args.batch_size * args.grad_accum * world, "max_iters": args.max_iters}


def effective(name: str, settings: dict) -> dict:
    """A method's settings as they act: one that refines a setting which is off (PARENTS: --infill-len with
    --infill 0, as an older version wrote it) counts as its default."""
    mc = methods.method_config(name, **settings)
    fields = methods.config_class(name).__dataclass_fields__
    for child, parent in PARENTS.items():
        if child in mc and parent in mc and mc[parent] == fields[parent].default:
            mc[child] = fields[child].default
    return mc


def differences(saved: dict, config: dict) -> list[str]:
    """'key: a in the checkpoint, b from the flags' for each part of saved (a checked config.json) that is not
    config's (this run's, from the flags); [] for the same run."""
    def flat(c):
        c = {**c, "method_config": effective(c["method"], c["method_config"])}
        out = {f"{k}.{j}" if isinstance(v, dict) else k: w for k, v in c.items() if k in KEYS
               for j, w in (v.items() if isinstance(v, dict) else [(None, v)])}
        out.pop("run.max_iters", None)                   # --resume may raise it
        return out
    saved = {"predict_padding": False, **saved}          # older checkpoints: no predict_padding
    old, new = flat(saved), flat(config)
    # older checkpoints: no run record, or one without an entry added since (neither is compared)
    new = {k: v for k, v in new.items() if not k.startswith("run.") or k in old}
    return [f"{k}: {old.get(k)!r} in the checkpoint, {new.get(k)!r} from the flags"
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def saved_config(d: str) -> dict:
    path = os.path.join(d, "config.json")
    with open(path, encoding="utf-8") as f:
        return schema.check_config(json.load(f), path)


def check_resume(out_dir: str, config: dict, step: int, max_iters: int):
    """--resume continues the same run, and trains: the checkpoint's run must be the flags' (its config.json:
    method, settings, model, data, seed, optimiser, batch), and --max-iters beyond its step, or it is one line
    naming what differs."""
    d = saving.resolve(out_dir)
    # the start first: without the run's --init-from, the shape flags' defaults differ too
    diff = sorted(differences(saved_config(d), config), key=lambda line: not line.startswith("run.init_from"))
    if diff:
        raise ValueError(f"--resume: {d} holds another run ({'; '.join(diff[:3])}): pass the flags that "
                         f"wrote it (see its config.json), or choose another --out-dir")
    if step >= max_iters:
        raise ValueError(f"--resume: {d} is at step {step}, so --max-iters {max_iters} leaves nothing to "
                         f"train: raise --max-iters above {step}, or evaluate it with eval.py --ckpt "
                         f"{out_dir}")


def restore(state, model, ema, out_dir) -> int:
    """Load a train_state's weights (and the EMA weights of model.safetensors) for --resume; returns the step.
    The optimizer's state follows with restore_optimizer (train.py --fsdp shards the model in between)."""
    try:
        load_weights(model, state["model"])
        if ema is not None:
            ema_file = os.path.join(saving.resolve(out_dir), "model.safetensors")
            load_weights(ema, load_safetensors(ema_file))
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise ValueError(cannot_resume(out_dir, e)) from None
    return state["step"]


def restore_optimizer(state, opt, out_dir):
    """Load a train_state's optimizer state into opt (built over the restored model)."""
    try:
        opt.load_state_dict(state["optimizer"])
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise ValueError(cannot_resume(out_dir, e)) from None


def cannot_resume(out_dir: str, e: Exception) -> str:
    return (f"cannot resume from {saving.resolve(out_dir)}: its train state does not fit "
            f"({str(e).splitlines()[0][:100]}); start again without --resume")


def snapshots(out_dir: str) -> dict[int, str]:
    """What is beside out_dir under --keep-every's names, <out_dir>-stepN, by N (a file or a link too)."""
    parent, name = os.path.split(out_dir.rstrip("/"))
    pattern = re.compile(re.escape(name) + r"-step(0|[1-9][0-9]*)")     # as train.py names them
    try:
        names = os.listdir(parent or ".")
    except OSError:
        return {}
    return {int(m[1]): os.path.join(parent, n) for n in names if (m := pattern.fullmatch(n))}


def check_snapshots(out_dir: str, config: dict, start: int, max_iters: int, every: int):
    """Before training with --keep-every `every` (steps start+1 .. max_iters): each <out_dir>-stepN this run
    will write must be absent or a checkpoint folder of train.py's, as --out-dir must; and no snapshot there
    may be another run's (config.json's run: another seed, lr, ...), whose steps would mix with this run's
    in one learning curve; and `every` must keep one (a multiple of it among the steps). A ValueError of one
    line names the folder and what to do; nothing is touched."""
    if not every:
        return
    if max_iters // every == start // every:       # no snapshot at all: the flag would do nothing
        raise ValueError(f"--keep-every {every} keeps no snapshot: this run trains steps {start + 1} to "
                         f"{max_iters} (--max-iters), none a multiple of {every}: lower --keep-every, or "
                         f"drop it")
    for n, path in sorted(snapshots(out_dir).items()):
        real = saving.resolved(path)
        why = saving.not_ours(real) or (not os.path.isdir(os.path.dirname(real) or ".") and
                                            f"it leads into {os.path.dirname(real)}, which does not exist")
        if why and n % every == 0 and start < n <= max_iters:
            raise ValueError(f"--keep-every {every} writes step {n} to {path}, which is not a checkpoint "
                             f"directory written by train.py ({why}): move it away, or choose another "
                             f"--out-dir")
        if why or not saving.complete(path):
            continue
        diff = differences(saved_config(path), config)
        if diff:
            raise ValueError(f"{path} holds a snapshot of another run ({'; '.join(diff[:3])}), which "
                             f"--keep-every would mix with this run's: move the {out_dir}-step* folders "
                             f"away, or choose another --out-dir")


# ------------------------------------------------------------------ where a run starts (train.py --init-from)
# A run starts from our own checkpoint (any method, a training folder or a --keep-every snapshot: its eval
# weights) or from a Qwen3. Only the transformer carries over: the method, its settings, the optimizer and the
# step are the new run's. What the weights cannot serve is refused before any data or weights are read here
# (check_start); config.json records where the run started (start_record).

GIVE = ("give a folder train.py wrote (--out-dir, or a --keep-every snapshot OUT-stepN) or a Qwen3 model "
        "(Hub id or folder)")


def our_start(path: str, config: dict) -> dict:
    """--init-from our checkpoint, whose config.json (schema.check_config'd) is `config`."""
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
        raise ValueError(f"{flags} asks for {train_args.shape_words(differ, wanted.get)}, and {where} has "
                         f"{train_args.shape_words(differ, lambda k: getattr(cfg, k))}: the shape comes from "
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
    own, d = saving.newest(args.out_dir), saving.newest(args.init_from)
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
        if saving.locked(args.init_from):
            lock = saving.resolved(args.init_from) + ".lock"
            raise ValueError(f"--init-from {args.init_from} is being written by a running train.py (it holds "
                             f"{lock}): its saves replace the weights as they are read; start from one of "
                             f"its --keep-every snapshots ({args.init_from}-stepN), or when it has ended")
        start = {**our_start(args.init_from, saved_config(d)), "dir": d}
    else:
        start = qwen3_start(args.init_from)
    check_start(start, tok, seq_len, asked_shape(args))
    return start


def asked_shape(args) -> dict:
    """The shape flags given (train_args.parse: the others are None, the source's shape)."""
    return {k: getattr(args, k) for k in ("preset", *train_args.SHAPE) if getattr(args, k) not in (None, "")}
