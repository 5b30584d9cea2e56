"""Training throughput on this CPU, eager against compiled (`train.py --compile`), per method, in one run.

    python -m bench.train_speed                         # train.py's default shape on the shipped task
    python -m bench.train_speed --rounds 5 --json results/train_speed.json

One optimizer step as train.py takes it: the method's loss on a batch of the shipped task (train.py's
default model, 4 x 128, batch 16, rows trimmed to their longest), backward, gradient clipping, AdamW. The
compiled model is `torch.compile(model, dynamic=True)`, as train.py --compile builds it, warmed up (compiled)
before timing. Eager and compiled alternate, `--steps` steps each, `--rounds` times; each number is the median
round's tokens/s (non-padding tokens), with the rounds' range. Wall-clock time: run it on idle cores.
"""
import argparse
import statistics
import sys
import time

import torch

from common.checkpoint import CONFIGS, METHODS, json_dump
from common.runs import environment
from data import encode, get_task, get_tokenizer
from model import ModelConfig, Transformer, make_optimizer

SHAPE = dict(n_layer=4, n_embd=128, n_head=4, n_kv_head=4)        # train.py's defaults


def batches(tok, n: int, B: int, seed: int = 0) -> list:
    """n batches of B examples of the shipped task's training split, as train.py draws them."""
    data = encode(tok, get_task("arith").load("train"), 128)
    g = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, len(data["x0"]), (n, B), generator=g)
    return [{k: v[idx] for k, v in data.items()} for idx in draws]


def step(model, opt, method, cfg, batch, g):
    loss, _ = method.loss(model, batch["x0"], cfg, batch["prompt_mask"], batch["pad_mask"], g)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def tokens_per_s(model, opt, method, cfg, data, g) -> float:
    t0 = time.perf_counter()
    for batch in data:
        step(model, opt, method, cfg, batch, g)
    return sum(int((~b["pad_mask"]).sum()) for b in data) / (time.perf_counter() - t0)


def measure(name: str, tok, args) -> dict:
    """{"eager": [tokens/s per round], "compiled": [...]} of one method."""
    method = METHODS[name]
    cfg = CONFIGS[name](mask_id=tok.mask_id)                  # the defaults train.py uses
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, **SHAPE)).train()
    opt = make_optimizer(model, 1e-4, 0.1, 0.98)
    runs = {"eager": model, "compiled": torch.compile(model, dynamic=True)}
    g = torch.Generator().manual_seed(0)
    warm = batches(tok, 3, args.batch_size, seed=1)
    for fn in runs.values():                                         # warm-up: compiles the second
        for batch in warm:
            step(fn, opt, method, cfg, batch, g)
    data = batches(tok, args.steps, args.batch_size)
    out = {kind: [] for kind in runs}
    for _ in range(args.rounds):
        for kind, fn in runs.items():
            out[kind].append(tokens_per_s(fn, opt, method, cfg, data, g))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds; the median is reported")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps per round and kind")
    p.add_argument("--batch-size", type=int, default=16, help="examples per step (train.py's default)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--json", default=None, help="also write every round's numbers here")
    args = p.parse_args(argv)
    if min(args.rounds, args.steps, args.batch_size, args.threads) < 1:
        sys.exit("error: --rounds, --steps, --batch-size and --threads must be at least 1")
    torch.set_num_threads(args.threads)
    tok = get_tokenizer("bytes")
    out = {name: measure(name, tok, args) for name in METHODS}
    from common.metrics import markdown_table
    rows = []
    for name, r in out.items():
        med = {k: statistics.median(v) for k, v in r.items()}
        rows.append([name, *(f"{med[k]:,.0f} [{min(r[k]):,.0f}, {max(r[k]):,.0f}]" for k in r),
                     f"{med['compiled'] / med['eager']:.2f}x"])
    print(markdown_table(["method", "eager tokens/s", "compiled tokens/s", "compiled / eager"], rows))
    if args.json:
        with open(args.json, "w") as f:
            json_dump({"args": vars(args), **out, "environment": environment("cpu")}, f, indent=1)
    return out


if __name__ == "__main__":
    main()
