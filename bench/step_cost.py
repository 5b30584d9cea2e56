"""What one decoding step costs, split into the model's forward (and its output head) and the sampler's own
bookkeeping, per method, in CPU time: the question behind "Set Diffusion's step costs 1.5x AR's".

    python -m bench.step_cost                 # bench.py's DiT-like shape, batch 1, tau = inf, 1 thread
    python -m bench.step_cost --threads 2 --rounds 9 --json results/step_cost.json

CPU time (time.process_time) of this process, not wall-clock time, so that other jobs on a shared machine
slow the numbers little (with --threads 1 they hardly move); each method runs `--rounds` times, interleaved,
and every number is the median, per forward pass of the generation (its prefill included, as bench.py's
ms/forward). forward = inside model.forward (embedding, blocks, final norm, output head);
head = the output head alone (a forward hook pair on lm_head); sampler = the step minus its forward: masks,
gathers, the confidence rule, cache bookkeeping, Python. FLOPs per step are the matmuls' multiply-adds of the
tokens a step feeds (AR 1; Set Diffusion 1 clean + W queries, the head on the W queries; BD3-LM 2S at tau =
inf; MDLM its whole block canvas, no cache).
"""
import argparse
import statistics
import sys
import time

import torch

from bench.bench import DECODE, METHODS
from common.checkpoint import json_dump
from common.runs import environment
from sampling import Settings

SHAPE = dict(n_layer=4, n_embd=256, n_head=4, n_kv_head=4, vocab_size=4097, norm="layer", mlp="gelu",
             qk_norm=False, tie_embeddings=False)


def instrument(model) -> dict:
    """Accumulate process time inside model.forward and inside its lm_head into the returned dict."""
    spent = {"forward": 0.0, "head": 0.0, "head_t0": 0.0}
    inner = model.forward

    def forward(*args, **kw):
        t0 = time.process_time()
        out = inner(*args, **kw)
        spent["forward"] += time.process_time() - t0
        return out
    model.forward = forward
    model.lm_head.register_forward_pre_hook(lambda m, a: spent.__setitem__("head_t0", time.process_time()))
    model.lm_head.register_forward_hook(
        lambda m, a, out: spent.__setitem__("head", spent["head"] + time.process_time() - spent["head_t0"]))
    return spent


def measure(mods, cfgs, model, spent, rounds: int, new: int, kinds: dict) -> dict:
    """{(method, kind): {ms_step, ms_forward, ms_head, ms_sampler, nfe}}: medians over rounds, methods and
    kinds interleaved. kinds: {name: model.static}: None eager, else static_decoding's (compiled) steps."""
    prompt = torch.randint(0, 4096, (1, DECODE["prompt"]), generator=torch.Generator().manual_seed(0))
    runs = {(m, k): [] for m in METHODS for k in kinds}
    for m, k in runs:                                                    # warm-up (compiles)
        model.static = kinds[k]
        mods[m].generate(model, prompt, cfgs[m], Settings(new))
    for _ in range(rounds):
        for m, k in runs:
            model.static = kinds[k]
            spent["forward"] = spent["head"] = 0.0
            t0 = time.process_time()
            _, stats = mods[m].generate(model, prompt, cfgs[m], Settings(new))
            total, nfe = time.process_time() - t0, stats["nfe"]
            run = {"ms_step": total, "ms_forward": spent["forward"], "ms_head": spent["head"],
                   "ms_sampler": total - spent["forward"]}
            runs[m, k].append({key: 1000 * v / nfe for key, v in run.items()} | {"nfe": nfe})
    model.static = None
    return {mk: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for mk, rs in runs.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: CPU time barely depends on load)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved repetitions; medians reported")
    p.add_argument("--new", type=int, default=DECODE["new"], help="new tokens per generation")
    p.add_argument("--compile", action="store_true", help="also time the compiled static-shape steps "
                   "(eval.py --compile), interleaved with the eager ones")
    p.add_argument("--json", default=None, help="also write the numbers here")
    args = p.parse_args(argv)
    if args.threads < 1 or args.rounds < 1 or args.new < 1:
        sys.exit("error: --threads, --rounds and --new must be at least 1")
    torch.set_num_threads(args.threads)
    import importlib

    import model as model_py
    mods = {m: importlib.import_module(m) for m in METHODS}
    cfgs = {"ar": mods["ar"].ARConfig(4096), "mdlm": mods["mdlm"].MDLMConfig(4096),
            "bd3lm": mods["bd3lm"].BD3LMConfig(4096, 4),
            "setdiffusion": mods["setdiffusion"].SetDiffusionConfig(4096, 8)}
    torch.manual_seed(0)
    net = model_py.Transformer(model_py.ModelConfig(**SHAPE)).eval()
    spent = instrument(net)
    kinds = {"eager": None}
    if args.compile:             # eval.py --compile's static-shape steps, compiled (one graph per method)
        kinds["compiled"] = model_py.static_decoding(net, compile=True).static
    with torch.no_grad():
        out = measure(mods, cfgs, net, spent, args.rounds, args.new, kinds)
    from common.metrics import markdown_table
    rows = []
    for (m, k), r in out.items():
        ar = out["ar", k]
        rows.append([m, k, f"{r['ms_step']:.3f}", f"{r['ms_forward']:.3f}", f"{r['ms_head']:.3f}",
                     f"{r['ms_sampler']:.3f}", f"{r['ms_step'] / ar['ms_step']:.2f}x",
                     f"{r['ms_forward'] / ar['ms_forward']:.2f}x"])
    print(markdown_table(["method", "kind", "CPU ms/step", "forward", "of which head", "sampler",
                          "step vs AR", "forward vs AR"], rows))
    if args.json:
        with open(args.json, "w") as f:
            json_dump({"threads": args.threads, "rounds": args.rounds, "new": args.new,
                       **{f"{m} {k}": r for (m, k), r in out.items()},
                       "environment": environment("cpu")}, f, indent=2)
    return out


if __name__ == "__main__":
    main()
