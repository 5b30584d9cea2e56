"""What train.py runs on, not what it trains: the processes (torchrun's DDP rendezvous, or one process), the
memory checks that refuse a run too large for this machine before anything is allocated, the signals that end
a run after a saved step, and the progress line.

    init_distributed(args)        (ddp, rank, world size, device) from torchrun's environment
    shard(model, ema)             --fsdp: FSDP2's fully_shard, block by block
    check_fits / check_examples_fit   weights + AdamW + one micro-batch (or the encoded examples) against
                                      memory
    flex_on(attention, device)    whether training masks are FlexAttention block masks
    interrupts()                  Ctrl-C / SIGTERM -> stop after the current step, which is saved
    finite / stop_run             a NaN or inf stops the run, naming the last good checkpoint
    Progress                      tqdm's bar on a terminal, one plain line per log interval in a log
"""
import contextlib
import math
import os
import signal
import sys
import time

import torch

from common import saving
from model import ModelConfig


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
        torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                                             **rendezvous(world, rank, args.dist_timeout))
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
    return world > 1, rank, world, device


def rendezvous(world: int, rank: int, seconds: float) -> dict:
    """init_process_group's store: torchrun's own (it starts every process), or, for processes started by
    hand, a TCPStore that waits at most `seconds` for all `world` of them instead of hanging."""
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return {}
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        raise ValueError(f"WORLD_SIZE={world} needs {' and '.join(missing)}: start the processes with "
                         f"torchrun --nproc_per_node={world} train.py ..., which sets them")
    from datetime import timedelta
    try:
        store = torch.distributed.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                                           rank == 0, timedelta(seconds=seconds), wait_for_workers=True)
    except (RuntimeError, ValueError) as e:              # DistStoreError / DistNetworkError are RuntimeErrors
        raise ValueError(f"WORLD_SIZE={world}: the other processes did not join within {seconds:g} s "
                         f"({str(e).splitlines()[0][:80]}): start all of them, e.g. with torchrun "
                         f"--nproc_per_node={world}, or unset WORLD_SIZE") from None
    return {"store": store, "rank": rank, "world_size": world}


def shard(*models):
    """train.py --fsdp: PyTorch's FSDP2 (fully_shard) over the ranks, each transformer block its own unit,
    then the rest (embeddings, final norm, head); None models are skipped. Parameters become DTensors: the
    optimizer is built after this, and saving.weights gathers them whole for the one safetensors file."""
    from torch.distributed.fsdp import fully_shard
    for m in models:
        if m is not None:
            for block in m.layers:
                fully_shard(block)
            fully_shard(m)


def shard_optimizer_state(opt):
    """After opt.load_state_dict of a whole (unsharded) train_state: each per-parameter state tensor (AdamW's
    moments) distributed as its FSDP-sharded parameter is."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    for p, s in opt.state.items():
        if isinstance(p, DTensor):
            for k, v in s.items():
                if torch.is_tensor(v) and not isinstance(v, DTensor) and v.shape == p.shape:
                    s[k] = distribute_tensor(v.to(p.device), p.device_mesh, p.placements)


# ----------------------------------------------------------------------------- memory, before allocation

def memory_of(device: str) -> float:
    """Bytes of memory here: the GPU's on CUDA, else the machine's (inf where unknown)."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else math.inf


def check_fits(cfg: ModelConfig, device: str, seq_len: int, batch_size: int, method: str, flex: bool = False):
    """Refuse, before anything is allocated, a run that needs more than this machine's memory (the GPU's on
    CUDA): the weights, gradients and AdamW state (16 bytes a parameter) and at least one micro-batch's
    activations: its float32 logits (4 bytes x batch x L x vocabulary) and, with dense masks (not
    FlexAttention), the bool attention mask, batch x (2L)^2 bytes over [x0 | xt] (BD3-LM, Set Diffusion),
    batch x L^2 (MDLM), none for AR (causal attention needs no mask)."""
    D, hd = cfg.n_embd, cfg.head_dim
    per_layer = D * hd * (cfg.n_head + 2 * cfg.n_kv_head) + hd * cfg.n_head * D + \
        3 * D * cfg.intermediate_size
    params = cfg.vocab_size * D * (1 if cfg.tie_embeddings else 2) + cfg.n_layer * per_layer   # qkv, o, MLP
    streams = 0 if flex else {"ar": 0, "mdlm": 1}.get(method, 2)
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


# ----------------------------------------------------------------------------- a NaN stops the run

def stop_run(what: str, out_dir: str):
    """A NaN/inf stops the run: say where the last complete (finite) checkpoint is, if there is one."""
    d = saving.newest(out_dir)
    where = f"the last good checkpoint (step {saving.step_of(d)}) is in {d}" if d else \
        "no checkpoint was saved"
    print(f"\n{what}: stopping; {where}", file=sys.stderr)
    sys.exit(1)


def finite(*models, reduce: bool = False) -> bool:
    """Every weight finite; a sharded (FSDP) model checks its own shards and, with reduce, agrees with the
    other ranks (all must stop together)."""
    ok = all(bool(torch.isfinite(p.to_local() if hasattr(p, "to_local") else p).all())
             for m in models if m is not None for p in m.parameters())
    if reduce:
        t = torch.tensor(float(ok), device=next(models[0].parameters()).device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
        ok = bool(t.item())
    return ok


# ----------------------------------------------------------------------------- signals and progress

@contextlib.contextmanager
def interrupts():
    """Ctrl-C (SIGINT) or SIGTERM end the run after the current step (under DDP after the next step that
    every rank reads back, so that all stop together), which is saved: yields a dict whose "signal" is set
    then. A second Ctrl-C stops at once (the last save stays complete)."""
    stop = {"signal": None}

    def on_signal(signum, frame):
        stop["signal"] = signum
        signal.signal(signum, signal.SIG_DFL)
    try:
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:                                   # not the main thread: keep the default handlers
        previous = {}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class Progress:
    """Training progress, one update per log interval. On a terminal: tqdm's own bar (steps, rate, elapsed
    and ETA) with the interval's loss, lr and tokens/s beside it. Elsewhere (a log file, a pipe): one plain
    line per interval and no carriage returns, which a log would collect into one long line."""

    def __init__(self, start: int, total: int, master: bool):
        from tqdm import tqdm
        self.format_interval = tqdm.format_interval
        self.master, self.start, self.total = master, start, total
        self.bar = tqdm(initial=start, total=total, unit="step", dynamic_ncols=True,
                        disable=not (master and sys.stderr.isatty()))
        self.t0 = self.last = time.time()

    def step(self):
        """One optimizer step done: the bar counts it (host only, nothing waits for the device)."""
        self.bar.update(1)

    def log(self, done: int, loss: float, lr: float, tokens: int):
        """The interval ending after step `done` (1-based): its mean loss, the lr, its tokens per second."""
        now = time.time()
        rate, self.last = tokens / max(now - self.last, 1e-9), now
        if not self.master:
            return
        if not self.bar.disable:
            self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{rate:.0f}")
            return
        left = (now - self.t0) / (done - self.start) * (self.total - done)
        print(f"step {done}/{self.total} | loss {loss:.4f} | lr {lr:.2e} | {rate:.0f} tok/s | "
              f"{self.format_interval(now - self.t0)} elapsed, {self.format_interval(left)} left",
              file=sys.stderr, flush=True)

    def close(self):
        self.bar.close()


def pick_device(name: str) -> str:
    """"auto" -> cuda if available, else mps, else cpu; any other name as it is, once checked (one clear line
    for a device this machine does not have)."""
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name}: not a device name; use auto, cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda" and (not torch.cuda.is_available()
                               or (dev.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"--device {name}: this torch sees {torch.cuda.device_count()} CUDA GPU(s) (a "
                         f"CPU-only build or no driver?): use --device cpu or auto")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: MPS is not available here: use --device cpu or auto")
    return name
