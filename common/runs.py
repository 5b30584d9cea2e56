"""One run of train.py: which run it is and what it runs on; and the environment every result records.

    identity(args, world)               config.json's "run": the flags that make a run another run
    check_resume / restore / restore_optimizer   --resume continues only the run a checkpoint holds, exactly
    check_snapshots(out_dir, ...)       --keep-every's <out_dir>-stepN written only where nothing else is
    init_distributed(args)              (ddp, rank, world size, device): torchrun's processes, or one
    check_fits / check_examples_fit     a run too large for this machine refused before anything is allocated
    environment(device)                 what produced a result: commit, versions, device, lock (every result
                                        file and config.json hold it)

Runs differ by config.json's method, settings, model, tokenizer, data and "run" (RECIPE: seed, optimiser,
schedule, global batch, starting weights; --max-iters is recorded, not compared: --resume may raise it); an
older version's checkpoint is compared on what it has. --init-from: common/init_from.py; several processes:
common/distributed.py.
"""
import functools
import hashlib
import json
import math
import os
import platform
import re
import subprocess

import torch

from common import checkpoint
from common.cli import PARENTS, pick_device
from model import ModelConfig

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
    mc = checkpoint.method_config(name, **settings)
    fields = checkpoint.CONFIGS[name].__dataclass_fields__
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
        return checkpoint.check_config(json.load(f), path)


def check_resume(out_dir: str, config: dict, step: int, max_iters: int) -> dict:
    """--resume continues the same run, and trains: the checkpoint's run (its config.json, returned: method,
    settings, model, data, seed, optimiser, batch) must be the flags', and --max-iters beyond its step, or
    it is one line naming what differs."""
    saved = saved_config(d := checkpoint.resolve(out_dir))
    # the start first: without the run's --init-from, the shape flags' defaults differ too
    diff = sorted(differences(saved, config), key=lambda line: not line.startswith("run.init_from"))
    if diff:
        raise ValueError(f"--resume: {d} holds another run ({'; '.join(diff[:3])}): pass the flags that "
                         f"wrote it (see its config.json), or choose another --out-dir")
    if step >= max_iters:
        raise ValueError(f"--resume: {d} is at step {step}, so --max-iters {max_iters} leaves nothing to "
                         f"train: raise --max-iters above {step}, or evaluate it with eval.py --ckpt "
                         f"{out_dir}")
    return saved


def restore(state, model, ema, out_dir) -> int:
    """Load a train_state's weights (and the EMA weights of model.safetensors) for --resume; returns the step.
    The optimizer's state follows with restore_optimizer (train.py --fsdp shards the model in between)."""
    from common.weights import load_safetensors, load_weights
    try:
        load_weights(model, state["model"])
        if ema is not None:
            ema_file = os.path.join(checkpoint.resolve(out_dir), "model.safetensors")
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
    return (f"cannot resume from {checkpoint.resolve(out_dir)}: its train state does not fit "
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
        real = checkpoint.resolved(path)
        why = checkpoint.not_ours(real) or (not os.path.isdir(os.path.dirname(real) or ".") and
                                            f"it leads into {os.path.dirname(real)}, which does not exist")
        if why and n % every == 0 and start < n <= max_iters:
            raise ValueError(f"--keep-every {every} writes step {n} to {path}, which is not a checkpoint "
                             f"directory written by train.py ({why}): move it away, or choose another "
                             f"--out-dir")
        if why or not checkpoint.complete(path):
            continue
        diff = differences(saved_config(path), config)
        if diff:
            raise ValueError(f"{path} holds a snapshot of another run ({'; '.join(diff[:3])}), which "
                             f"--keep-every would mix with this run's: move the {out_dir}-step* folders "
                             f"away, or choose another --out-dir")


# ----------------------------------------------------------------------------- processes

def init_distributed(args):
    """(ddp, rank, world size, device): torchrun's environment (one process per device), or one process.
    Processes started by hand with WORLD_SIZE wait at most --dist-timeout seconds for each other."""
    try:
        world, rank, local = (int(os.environ.get(k, d)) for k, d in (("WORLD_SIZE", "1"), ("RANK", "0"),
                                                                     ("LOCAL_RANK", "0")))
    except ValueError:
        raise ValueError("WORLD_SIZE, RANK and LOCAL_RANK must be whole numbers "
                         "(torchrun sets them)") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"WORLD_SIZE={world}, RANK={rank}: need WORLD_SIZE >= 1 and 0 <= RANK < WORLD_SIZE "
                         f"(torchrun --nproc_per_node=N train.py ... sets them)")
    device = pick_device(args.device)
    if world > 1:
        device = f"cuda:{local}" if device == "cuda" else device
        from common.distributed import rendezvous
        torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                                             **rendezvous(world, rank, args.dist_timeout))
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
    return world > 1, rank, world, device


# ----------------------------------------------------------------------------- memory, before allocation

def memory_of(device: str) -> float:
    """Bytes of memory here: the GPU's on CUDA, else the machine's (inf where unknown)."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else math.inf


def check_fits(cfg: ModelConfig, device: str, seq_len: int, batch_size: int, method, flex: bool = False):
    """Refuse, before anything is allocated, a run that needs more than this machine's memory (the GPU's on
    CUDA): the weights, gradients and AdamW state (16 bytes a parameter) and at least one micro-batch's
    activations: its float32 logits (4 bytes x batch x L x vocabulary) and, with dense masks (not
    FlexAttention), the method's bool attention mask, batch x (k L)^2 bytes (k: its MASK_STREAMS)."""
    D, hd = cfg.n_embd, cfg.head_dim
    per_layer = D * hd * (cfg.n_head + 2 * cfg.n_kv_head) + hd * cfg.n_head * D + \
        3 * D * cfg.intermediate_size
    params = cfg.vocab_size * D * (1 if cfg.tie_embeddings else 2) + cfg.n_layer * per_layer   # qkv, o, MLP
    streams = 0 if flex else method.MASK_STREAMS
    activations = 4 * batch_size * seq_len * cfg.vocab_size + batch_size * (streams * seq_len) ** 2
    memory, gib = memory_of(device), 2 ** 30
    if 16 * params > memory:
        raise ValueError(f"a model of {params / 1e9:.1f}B parameters needs about {16 * params / gib:.0f} GiB "
                         f"to train, more than the {memory / gib:.0f} GiB here: make it smaller")
    if 16 * params + activations > memory:
        raise ValueError(f"--seq-len {seq_len} and --batch-size {batch_size} need at least "
                         f"{activations / gib:,.0f} GiB of activations a micro-batch beside the "
                         f"{16 * params / gib:,.1f} GiB of weights and optimizer state, more than the "
                         f"{memory / gib:,.0f} GiB here: lower --seq-len or --batch-size")


def check_examples_fit(n: int, seq_len: int, default: int):
    """A task's training examples are encoded whole (data.encode: int64 tokens and two bool masks, 10 bytes a
    position): refuse, before allocating them, more than this machine's memory."""
    need, memory = 10 * n * seq_len, memory_of("cpu")
    if need > memory:
        raise ValueError(f"the {n:,} training examples at --seq-len {seq_len} take {need / 2**30:,.0f} GiB "
                         f"encoded, more than the {memory / 2**30:,.0f} GiB here: lower --seq-len (0 = the "
                         f"task's {default})")


def flex_on(attention: str, device: str) -> bool:
    """--attention -> whether the methods' training masks are FlexAttention BlockMasks (Transformer.flex)."""
    if attention == "flex" and not device.startswith("cuda"):
        raise ValueError(f"--attention flex needs a CUDA device, not {device} (FlexAttention has no backward "
                         f"on CPU): use --attention sdpa or auto")
    return attention == "flex" or attention == "auto" and device.startswith("cuda")


# ----------------------------------------------------------------------------- what produced a result
# train.py's config.json and every results file (eval.py --json, paper.speed, paper.infill_curve, bench/) hold
# `"environment": environment(device)`, and python -m paper.results prints it under each table, so that two
# tables made months apart can be told apart and either made again (docs/usage.md#reproducing-a-result):
#
#   {"commit": "ed7a066...",      git's HEAD of this tree, None outside a git clone (or without git)
#    "dirty": false,              tracked files changed since that commit, outside results/ (what runs write):
#    "changed": [],               their names (the first 20), when dirty
#    "python": "3.11.7", "torch": "2.13.0+cpu",
#    "cuda": null,                the CUDA version torch was built with (null: a CPU build)
#    "device": "cpu: AMD EPYC 7B13", "threads": 2,
#    "lock": "lock/cpu-test.txt", the lock (lock/) whose every pin this Python's packages match, the largest
#    "lock_sha256": "...",        tier first (test, extras, runtime), and that file's sha256;
#    "lock_differs": []}          when none matches: the runtime lock of torch's build and the packages that
#                                 differ from it ("numpy 2.4.5, locked 2.4.6"; the first 10)
#
# Git is asked only about this tree's own folder (a copy inside another repository records no commit).
# Everything but the device is read once per process.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))         # the tree: common/..
TIERS = ("-test", "-extras", "")                           # lock/<build><tier>.txt, the largest first
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;([^\\]*))?")   # name==version ; marker


def git(*args: str) -> str | None:
    """git's output in ROOT, or None where there is no git, no repository or it fails (never raises)."""
    try:
        out = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def source() -> dict:
    """The commit, and whether (and where) the tracked files differ from it; Nones outside a git clone."""
    top = git("rev-parse", "--show-toplevel")
    commit = git("rev-parse", "HEAD")
    if top is None or commit is None or os.path.realpath(top.strip()) != os.path.realpath(ROOT):
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    changed = [line[3:] for line in (status or "").splitlines() if line.strip()]
    return {"commit": commit.strip(), "dirty": bool(changed) if status is not None else None,
            **({"changed": changed[:20]} if changed else {})}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_differences(path: str, installed: dict) -> list[str]:
    """The pins of a lock file (uv's format: name==version ; marker) that apply here (their markers, read with
    packaging where it is installed) and that the installed packages do not match: "name installed, locked
    version"."""
    try:
        from packaging.markers import Marker
    except ImportError:                                   # packaging absent: the pins without a marker only
        Marker = None
    out = []
    with open(path, encoding="utf-8") as f:
        pins = [m for m in map(PIN.match, f) if m]
    for m in pins:
        name, version, marker = canonical(m[1]), m[2], (m[3] or "").strip()
        if marker and (Marker is None or not Marker(marker).evaluate()):
            continue
        if installed.get(name) != version:
            out.append(f"{name} {installed.get(name, 'absent')}, locked {version}")
    return out


def installed_versions() -> dict:
    """{canonical name: version} of the packages this Python imports (the first of a name on sys.path)."""
    from importlib import metadata
    installed = {}
    for d in metadata.distributions():
        installed.setdefault(canonical(d.metadata["Name"] or ""), d.version)
    return installed


def lock(installed: dict | None = None) -> dict:
    """The lock this Python's packages (installed: installed_versions()) match (see the comment above)."""
    installed = installed_versions() if installed is None else installed
    builds = ("cpu", "cuda") if torch.version.cuda is None else ("cuda", "cpu")
    files = [f for f in (os.path.join("lock", f"{b}{t}.txt") for b in builds for t in TIERS)
             if os.path.isfile(os.path.join(ROOT, f))]
    if not files:
        return {"lock": None}
    name = next((f for f in files if not lock_differences(os.path.join(ROOT, f), installed)),
                os.path.join("lock", f"{builds[0]}.txt"))        # none matches: the runtime lock, and how
    with open(os.path.join(ROOT, name), "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    return {"lock": name, "lock_sha256": digest,
            "lock_differs": lock_differences(os.path.join(ROOT, name), installed)[:10]}


@functools.lru_cache(maxsize=None)
def fixed() -> dict:
    """What stays the same for the whole process: the source, the versions and the lock."""
    return {**source(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, **lock()}


@functools.lru_cache(maxsize=None)
def device_name(device: str) -> str:
    """"cuda: NVIDIA H100 80GB HBM3", "cpu: AMD EPYC 7B13", "mps: arm64": the kind, then the model."""
    kind = torch.device(device).type
    if kind == "cuda" and torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(torch.device(device))}"
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{kind}: {model or platform.processor() or platform.machine()}"


def environment(device="cpu") -> dict:
    """The environment of a result measured (or a checkpoint trained) on `device`, as the docstring shows."""
    return {**fixed(), "device": device_name(str(device)), "threads": torch.get_num_threads()}


def earlier_environments(saved: dict, current: dict) -> dict:
    """A resumed run's {"earlier_environments": [...]}: the saved checkpoint's own list, then its environment
    with the step it reached ("until_step") where that differs from the current one; {} when there is none."""
    past = list(saved.get("earlier_environments") or [])
    env = saved.get("environment")
    if isinstance(env, dict) and env != current:
        past.append({**env, "until_step": saved.get("step")})
    return {"earlier_environments": past} if past else {}
