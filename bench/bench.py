"""Speed benchmark: decoding and training throughput of the four methods, this code beside an older commit.

    python -m bench.bench                   # this working tree only
    python -m bench.bench --ref f1c58be     # and commit f1c58be, timed in the same run

Every claim "x times faster" in the README is a ratio from one run of this script: each source tree runs in
its own worker process (this file, run with that tree first on sys.path: it imports that tree's model.py and
method files, so its top imports only the standard library). A reference tree must have today's interface
(sampling.Settings, model.static_decoding: f1c58be and later). The workers
alternate (ref, new, ref, new, ...) `--rounds` times, and each number is the median over rounds. Shapes
(CPU-sized; --quick shrinks them):
- decode: a 16-token prompt + 96 new tokens, tau = inf (one token per step), batch 1, 8 and 32, the tiny
  DiT-like model (4 layers x 256, 4 heads, vocab 4097); ms/forward = seconds / forward passes.
- train: loss + backward on the shipped task's shape (batch 16 x 128 tokens, prompt 40, 8 padding) and at
  GSM8K's shape (L = 1024, prompt 150, answer 250, batch 1) with a small Qwen3 block; tokens/s counts
  non-padding tokens.
- compiled decode (this tree): the same at batch 1 and 8 with model.static_decoding(compile=True).
- shipped task: the `make pareto` checkpoints (--pareto), eval.py's throughput protocol (evaluate_throughput)
  at batch 1: Set Diffusion at tau = 0.9 against AR, eager and compiled (trees with static_decoding).
- forward: one forward (8 x 128 tokens) of the DiT-like block and the Qwen3 block at the same width, and the
  Qwen3 block without QK-norm / with a SwiGLU of the DiT MLP's parameter count.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DECODE = {"prompt": 16, "new": 96, "batches": [1, 8, 32]}
TRAIN = {"arith": {"B": 16, "L": 128, "prompt": 40, "pad": 8, "steps": 4},
         "gsm8k": {"B": 1, "L": 1024, "prompt": 150, "pad": 1024 - 400, "steps": 2}}
METHODS = ["ar", "mdlm", "bd3lm", "setdiffusion"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # this working tree
BLOCKS = {"DiT block (LayerNorm, GELU MLP 4D)": dict(norm="layer", mlp="gelu", qk_norm=False),
          "Qwen3 block (RMSNorm, QK-norm, SwiGLU 4D)": dict(),
          "Qwen3 block without QK-norm": dict(qk_norm=False),
          "Qwen3 block, SwiGLU 8D/3 (DiT's MLP size)": dict(intermediate_size=683)}


def worker(src: str, quick: bool, threads: int, pareto: str) -> dict:
    """Time everything with the modules of source tree `src`; returns {item: value}."""
    sys.path.insert(0, src)
    import torch
    torch.set_num_threads(threads)
    import ar
    import bd3lm
    import mdlm
    import model
    import setdiffusion
    mods = {"ar": ar, "mdlm": mdlm, "bd3lm": bd3lm, "setdiffusion": setdiffusion}
    cfgs = {"ar": mods["ar"].ARConfig(4096), "mdlm": mods["mdlm"].MDLMConfig(4096),
            "bd3lm": mods["bd3lm"].BD3LMConfig(4096, 4),
            "setdiffusion": mods["setdiffusion"].SetDiffusionConfig(4096, 8)}
    torch.manual_seed(0)
    dit = model.Transformer(model.ModelConfig(n_layer=4, n_embd=256, n_head=4, n_kv_head=4, vocab_size=4097,
                                              norm="layer", mlp="gelu", qk_norm=False,
                                              tie_embeddings=False)).eval()
    out = decode(dit, mods, cfgs, DECODE["batches"][:2 if quick else 3], quick, "")
    model.static_decoding(dit, compile=True)            # static shapes + torch.compile
    out |= decode(dit, mods, cfgs, DECODE["batches"][:2], quick, " compiled")
    dit.static = dit.step = None                         # static decoding off (.step: older trees)
    for kind in ("", " compiled"):
        if f"decode ar batch 1{kind}: ms/forward" in out:
            out[f"ratio Set Diffusion / AR ms/forward, batch 1{kind}"] = \
                out[f"decode setdiffusion batch 1{kind}: ms/forward"] / \
                out[f"decode ar batch 1{kind}: ms/forward"]
            out[f"ratio Set Diffusion tokens/s, batch 8 / batch 1{kind}"] = \
                out[f"decode setdiffusion batch 8{kind}: tokens/s"] / \
                out[f"decode setdiffusion batch 1{kind}: tokens/s"]
    out |= train(model, mods, cfgs, quick)
    out |= blocks(model, quick)
    if pareto and os.path.isdir(os.path.join(pareto, "setdiffusion")):
        out |= shipped(model, pareto, quick)
    return out


def greedy(mod, model, prompt, cfg, new: int):
    """One greedy call of mod.generate at tau = inf (one token per step)."""
    import sampling
    return mod.generate(model, prompt, cfg, sampling.Settings(new))


def decode(dit, mods, cfgs, batches, quick, kind):
    """Decode tokens/s and ms/forward per method and batch size (tau = inf: one token per step)."""
    import torch
    out, new = {}, DECODE["new"] // (4 if quick else 1)
    for m in METHODS:
        for B in batches:
            prompt = torch.randint(0, 4096, (B, DECODE["prompt"]))
            greedy(mods[m], dit, prompt, cfgs[m], new)                               # warm-up (compiles)
            t0 = time.perf_counter()
            _, stats = greedy(mods[m], dit, prompt, cfgs[m], new)
            sec = time.perf_counter() - t0
            out[f"decode {m} batch {B}{kind}: tokens/s"] = B * new / sec
            out[f"decode {m} batch {B}{kind}: ms/forward"] = 1000 * sec / stats["nfe"]
    return out


def train(model, mods, cfgs, quick):
    """Training tokens/s (loss + backward, non-padding tokens) per method at the shipped and GSM8K shapes."""
    import torch
    out = {}
    for shape, s in TRAIN.items():
        L = s["L"] // (4 if quick else 1)
        cfg = (model.ModelConfig(n_layer=4, n_embd=256, n_head=4, n_kv_head=4, vocab_size=4097)
               if shape == "arith"
               else model.ModelConfig(n_layer=2, n_embd=256, n_head=4, n_kv_head=2, head_dim=64,
                                      vocab_size=4097))
        torch.manual_seed(0)
        net = model.Transformer(cfg).train()
        x0 = torch.randint(0, 4096, (s["B"], L))
        cols = torch.arange(L).expand(s["B"], L)
        prompt_mask, pad_mask = (cols < s["prompt"] // (4 if quick else 1),
                                 cols >= L - s["pad"] // (4 if quick else 1))
        for m in METHODS:
            g = torch.Generator().manual_seed(0)
            mods[m].loss(net, x0, cfgs[m], prompt_mask, pad_mask, g)[0].backward()   # warm-up
            t0 = time.perf_counter()
            for _ in range(s["steps"]):
                mods[m].loss(net, x0, cfgs[m], prompt_mask, pad_mask, g)[0].backward()
            sec = time.perf_counter() - t0
            out[f"train {m} {shape}: tokens/s"] = s["steps"] * int((~pad_mask).sum()) / sec
    return out


def blocks(model, quick):
    """One forward of 8 x 128 tokens per block variant: why the Qwen3 block is slower than the DiT's."""
    import torch
    out, x = {}, torch.randint(0, 4096, (8, 128 // (4 if quick else 1)))
    for name, kw in BLOCKS.items():
        torch.manual_seed(0)
        net = model.Transformer(model.ModelConfig(n_layer=4, n_embd=256, n_head=4, n_kv_head=4,
                                                  vocab_size=4097, **kw)).eval()
        with torch.no_grad():
            net(x)
            t0 = time.perf_counter()
            for _ in range(5):
                net(x)
        out[f"forward {name}: ms"] = 1000 * (time.perf_counter() - t0) / 5
    return out


def shipped(model, pareto, quick):
    """The shipped task with the `make pareto` checkpoints, batch 1 as eval.py --task throughput: Set
    Diffusion at tau = 0.9 against AR, tokens/s ratio and tokens per step, eager and compiled."""
    import sampling
    from common import checkpoint
    from common.throughput import evaluate_throughput
    from data import get_task, get_tokenizer
    out, n, rate = {}, 8 if quick else 40, {}
    for m, tau in (("ar", float("inf")), ("setdiffusion", 0.9)):
        net, method, cfg, config = checkpoint.load(os.path.join(pareto, m))
        task, tok = get_task(config["data"]), get_tokenizer(config["tokenizer"])
        examples = task.load("test")[:n + 5]
        for kind in ("", " compiled"):
            if kind:
                model.static_decoding(net, compile=True)
            r = evaluate_throughput(net, method, cfg, tok, task, examples, "cpu", sampling.Settings(64, tau),
                                    warmup=5, batch_size=1, rounds=1)
            rate[m, kind] = r["tokens_per_s"]
            out[f"shipped task {m} tau {tau}{kind}: tokens/s"] = r["tokens_per_s"]
            out[f"shipped task {m} tau {tau}{kind}: tokens/step"] = r["tokens_per_step"]
    for kind in ("", " compiled"):
        out[f"ratio shipped task Set Diffusion (tau 0.9) / AR tokens/s{kind}"] = \
            rate["setdiffusion", kind] / rate["ar", kind]
    return out


def run_worker(src: str, quick: bool, threads: int, pareto: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", src, "--threads", str(threads),
           "--pareto", pareto] + (["--quick"] if quick else [])
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=src)
    if r.returncode != 0:
        sys.exit(f"error: the benchmark worker for {src} failed: {r.stderr.strip().splitlines()[-1:]}")
    from common.checkpoint import json_loads             # this tree's (not at the top: see main)
    return json_loads(r.stdout.strip().splitlines()[-1])


def checkout(commit: str, into: str) -> str:
    """The files of `commit` (this repository's history) in a fresh folder, via git archive."""
    r = subprocess.run(f"git -C {ROOT} archive {commit} | tar -x -C {into}", shell=True, capture_output=True,
                       text=True)
    if r.returncode != 0:
        sys.exit(f"error: cannot read commit {commit!r} of this repository: {r.stderr.strip()}")
    return into


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", default="",
                   help="also time this commit (f1c58be or later), interleaved with this tree")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds; each number is the median")
    p.add_argument("--threads", type=int, default=2, help="torch threads per worker")
    p.add_argument("--quick", action="store_true", help="smaller shapes (a smoke run)")
    p.add_argument("--json", default=None, help="also write every round's numbers here")
    p.add_argument("--pareto", default="out/pareto",
                   help="the `make pareto` checkpoints for the shipped-task "
                        "rows (this tree only; skipped when absent)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.quick, args.threads, args.pareto), allow_nan=False))
        return
    from common.checkpoint import json_dump         # this tree's (not at the top: a worker imports another
    from common.metrics import markdown_table       # tree's)
    from common.runs import environment
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"new": ROOT} | ({args.ref: checkout(args.ref, tmp)} if args.ref else {})
        runs = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, src in reversed(trees.items()):              # ref first, then this tree
                runs[name].append(run_worker(src, args.quick, args.threads, os.path.abspath(args.pareto)))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    names = list(trees)[::-1]
    rows = []
    for k in med["new"]:
        vals = [med[n].get(k, float("nan")) for n in names]
        ratio = med["new"][k] / med[args.ref][k] if args.ref and k in med[args.ref] else None
        cells = [f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}" for v in vals]
        rows.append([k, *cells, *([f"{ratio:.2f}x"] if ratio else [])])
    print(markdown_table(["item", *names, *(["new / ref"] if args.ref else [])], rows))
    if args.json:
        with open(args.json, "w") as f:             # each tree's rounds, and what measured them
            json_dump({**runs, "environment": environment("cpu")}, f, indent=1)


if __name__ == "__main__":
    main()
