"""Which run a checkpoint is, and the checks that keep runs apart: train.py --resume continues only the run a
checkpoint holds, and --keep-every's snapshots (<out_dir>-stepN) are written only where nothing else is.

    identity(args, world)                  config.json's "run": the flags that make a run another run
    differences(saved, config)             what tells a checkpoint's run from this one's, in words
    check_resume(out_dir, config, step, max_iters)   --resume refused in one line when it is another run
                                                     or has nothing left to train
    restore / restore_optimizer            a train state's weights and optimizer, or one line
    check_snapshots(out_dir, config, start, max_iters, every)   --keep-every's names claimed before training

A config.json holds the method, its settings, the model, the tokenizer and the data; "run" adds the seed, the
optimiser and its schedule, the global batch and the starting weights (RECIPE), and --max-iters, which is
recorded but not compared: --resume may raise it to train on. A checkpoint of an older version, without a
setting or without "run", is compared on what it has.
"""
import json
import os
import re

from common import methods, saving, schema
from common.cli import PARENTS
from common.weights import load_safetensors, load_weights

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
    fields = methods.METHOD_CONFIGS[name].__dataclass_fields__
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
    diff = differences(saved_config(d), config)
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
    in one learning curve. A ValueError of one line names the folder and what to do; nothing is touched."""
    if not every:
        return
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
