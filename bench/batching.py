"""Does batching pay? Decode tokens/s of AR and Set Diffusion at batch 1 and batch 8, bench.py's shape (a 4 x
256 DiT-like model, a 16-token prompt, 96 new tokens, tau = inf), rounds interleaved, the median and range per
run and of the batch-8 / batch-1 ratio within a round.

    python -m bench.batching                   # torch threads: the free cores (as the scripts)
    python -m bench.batching --threads 1 --rounds 9
"""
import argparse
import statistics
import time

from common import cli  # before torch: the scripts' short OpenMP spin (common/cli.py)

import torch

import ar
import model
import setdiffusion
from bench.bench import DECODE
from sampling import Settings


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0 = the cores other jobs leave free)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = p.parse_args(argv)
    cli.set_threads(args.threads)
    torch.manual_seed(0)
    dit = model.Transformer(model.ModelConfig(n_layer=4, n_embd=256, n_head=4, n_kv_head=4, vocab_size=4097,
                                              norm="layer", mlp="gelu", qk_norm=False,
                                              tie_embeddings=False)).eval()
    methods = {"ar": (ar, ar.ARConfig(4096)),
               "setdiffusion": (setdiffusion, setdiffusion.SetDiffusionConfig(4096, 8))}
    runs = [(name, B) for name in methods for B in (1, 8)]
    prompts = {B: torch.randint(0, 4096, (B, DECODE["prompt"]), generator=torch.Generator().manual_seed(B))
               for B in (1, 8)}
    rates = {run: [] for run in runs}
    for k in range(args.rounds + 1):                                 # round 0 warms up
        for name, B in runs:
            mod, cfg = methods[name]
            t0 = time.perf_counter()
            mod.generate(dit, prompts[B], cfg, Settings(DECODE["new"]))
            if k:
                rates[name, B].append(B * DECODE["new"] / (time.perf_counter() - t0))
    print(f"threads {torch.get_num_threads()}, {args.rounds} rounds: tokens/s median [min, max]")
    for (name, B), r in rates.items():
        print(f"{name} batch {B}: {statistics.median(r):.0f} [{min(r):.0f}, {max(r):.0f}]")
    for name in methods:
        ratio = [b8 / b1 for b1, b8 in zip(rates[name, 1], rates[name, 8])]
        print(f"{name} batch 8 / batch 1: {statistics.median(ratio):.2f} [{min(ratio):.2f}, "
              f"{max(ratio):.2f}]")


if __name__ == "__main__":
    main()
