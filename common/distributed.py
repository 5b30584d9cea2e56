"""Several training processes (torchrun, or processes started by hand with WORLD_SIZE > 1): their rendezvous
and FSDP2's sharding (train.py --fsdp). Imported only by a run of more than one process; one process never
loads it (common/runs.py init_distributed).

    rendezvous(world, rank, seconds)     init_process_group's store, waiting at most --dist-timeout seconds
    shard(model, ema) / shard_optimizer_state(opt)   --fsdp: FSDP2's fully_shard, block by block
"""
import os

import torch


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
    optimizer is built after this, and checkpoint.weights gathers them whole for the one safetensors file."""
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
