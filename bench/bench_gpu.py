"""GPU decode timings at Qwen3-1.7B-Base's shape: AR and Set Diffusion steps, eager vs compiled vs CUDA graphs.

    python -m bench.bench_gpu --json results/bench_gpu.json            # make bench-gpu (a CUDA GPU)
    python -m bench.bench_gpu --device cpu --tiny --modes eager,static # smoke run on CPU (seconds)

Random weights (nothing is downloaded: the speed of a step does not depend on the values), built on the device
in bf16. Batch 1, a 150-token prompt (GSM8K's length), 128 new tokens, greedy:
- AR: ar.generate, one token per step.
- Set Diffusion: setdiffusion.generate, smax 8, window 4, tau = inf, so one token per step and every step has
  the same shape. (A tau = 0.9 step feeds up to 4 + 4 tokens instead of 1 + 4; at batch 1 a step's time is
  mostly reading the weights, so we assume the same cost. This is an assumption, not a measurement.)
Modes, one after the other (torch._dynamo.reset() between them):
- eager: dynamic shapes (model.step = None), the default sampler path.
- static: static_decoding(model) - every cached step padded to a fixed number of slots, run eagerly.
- compiled: static_decoding(model, compile=True) - torch.compile, default mode, one graph per method.
- cudagraphs: static_decoding(model, compile=True, mode="reduce-overhead") - the same graph as a CUDA graph.
Each (mode, method) runs one warm-up call (it compiles), then --repeats timed calls (median).
ms/step = seconds / stats["nfe"]; seconds include the prompt's prefill, as the paper's tokens/s do.
Implied tokens/s = the paper's tokens/step * 1000 / ms/step, beside the paper's measured tokens/s (its GSM8K
Pareto data, batch 1: AR 55.52; Set Diffusion smax 8 at tau 0.9: 87.47 at 1.95 tokens/step; the official
throughput runs target one H100 80GB, without compilation).
A (mode, method) that fails prints one line and the run goes on; --json is rewritten after every result.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch

import ar
import setdiffusion
from generate import timed
from metrics import markdown_table
from model import ModelConfig, Transformer, static_decoding

QWEN3_1_7B = dict(vocab_size=151936, n_layer=28, n_embd=2048, n_head=16, n_kv_head=8, head_dim=128,
                  intermediate_size=6144, rope_theta=1e6, tie_embeddings=True, qk_norm=True)
TINY = dict(vocab_size=512, n_layer=2, n_embd=64, n_head=4, n_kv_head=2, head_dim=16, intermediate_size=128,
            rope_theta=1e6, tie_embeddings=True, qk_norm=True)
PAPER = {"ar": {"tokens_per_step": 1.0, "tokens_per_s": 55.52},
         "setdiffusion": {"tokens_per_step": 1.95, "tokens_per_s": 87.47}}
MODES = ["eager", "static", "compiled", "cudagraphs"]
METHODS = ["ar", "setdiffusion"]


def set_mode(model, mode: str):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    if mode == "eager":
        model.step = None
    else:
        static_decoding(model, compile=mode != "static", mode="reduce-overhead" if mode == "cudagraphs" else None)


def decode(model, method: str, prompt, N: int) -> dict:
    mask_id = model.cfg.vocab_size - 1
    if method == "ar":
        return ar.generate(model, prompt, ar.ARConfig(mask_id), max_new_tokens=N)[1]
    cfg = setdiffusion.SetDiffusionConfig(mask_id, smax=8)
    return setdiffusion.generate(model, prompt, cfg, max_new_tokens=N, threshold=math.inf, window=4)[1]


def time_decode(model, method: str, prompt, N: int, repeats: int):
    """Median seconds of one generate call (after a warm-up call) and its forward passes (nfe)."""
    decode(model, method, prompt, N)                     # compiles; reduce-overhead records its CUDA graph
    runs = [timed(prompt.device, decode, model, method, prompt, N) for _ in range(repeats)]
    return statistics.median(sec for _, sec in runs), runs[-1][0]["nfe"]


def row(method: str, mode: str, seconds: float, nfe: int) -> dict:
    ms = 1000 * seconds / nfe
    p = PAPER[method]
    implied = p["tokens_per_step"] * 1000 / ms
    return {"method": method, "mode": mode, "ms_per_step": ms, "steps_per_s": 1000 / ms,
            "tokens_per_step": p["tokens_per_step"], "implied_tokens_per_s": implied,
            "paper_tokens_per_s": p["tokens_per_s"], "ours_over_paper": implied / p["tokens_per_s"],
            "seconds": seconds, "nfe": nfe}


def sd_over_ar(rows: list) -> dict:
    """Set Diffusion ms/step / AR ms/step, per mode where both ran."""
    ms = {(r["method"], r["mode"]): r["ms_per_step"] for r in rows}
    return {m: ms["setdiffusion", m] / ms["ar", m] for m in MODES if ("ar", m) in ms and ("setdiffusion", m) in ms}


def table(out: dict) -> str:
    head = ["method", "mode", "ms/step", "steps/s", "tokens/step (paper)", "implied tokens/s", "paper tokens/s",
            "ours/paper"]
    rows = [[r["method"], r["mode"], f"{r['ms_per_step']:.2f}", f"{r['steps_per_s']:.1f}",
             f"{r['tokens_per_step']:.2f}", f"{r['implied_tokens_per_s']:.1f}", f"{r['paper_tokens_per_s']:.2f}",
             f"{r['ours_over_paper']:.2f}x"] for r in out["rows"]]
    ratios = [[m, f"{v:.2f}"] for m, v in out["sd_over_ar"].items()]
    return (markdown_table(head, rows) + "\n\n"
            + markdown_table(["mode", "Set Diffusion ms/step / AR ms/step"], ratios))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --tiny for a smoke run)")
    p.add_argument("--tiny", action="store_true", help="a tiny 2-layer model instead of Qwen3-1.7B's shape")
    p.add_argument("--modes", default=None, help=f"comma-separated subset of {MODES} (default: all; on CPU all "
                                                 f"but cudagraphs)")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prompt", type=int, default=150, help="prompt length in tokens")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per (mode, method), after one warm-up")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--json", default=None, help="write the rows here (rewritten after every result)")
    return p.parse_args(argv)


def check(args) -> list:
    """The requested modes, or a ValueError saying what to do."""
    cuda = args.device.startswith("cuda")
    modes = args.modes.split(",") if args.modes else [m for m in MODES if cuda or m != "cudagraphs"]
    if bad := [m for m in modes if m not in MODES]:
        raise ValueError(f"unknown mode(s) {bad} in --modes: choose from {','.join(MODES)}")
    if cuda and not torch.cuda.is_available():
        raise ValueError("CUDA is not available: run on a CUDA GPU, or pass --device cpu (with --tiny)")
    if "cudagraphs" in modes and not cuda:
        raise ValueError("--modes cudagraphs needs --device cuda")
    if args.new_tokens < 1 or args.prompt < 1 or args.repeats < 1:
        raise ValueError("--new-tokens, --prompt and --repeats must be >= 1")
    return modes


def main(argv=None) -> dict:
    args = parse_args(argv)
    try:
        modes = check(args)
    except ValueError as e:
        sys.exit(f"error: {e}")
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    cfg = ModelConfig(**(TINY if args.tiny else QWEN3_1_7B))
    with torch.device(dev):                                 # init on the device: seconds, not minutes on CPU
        model = Transformer(cfg).to(dtype).eval()
    prompt = torch.randint(0, cfg.vocab_size - 1, (1, args.prompt), device=dev)   # (1, P), no [MASK]
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    out = {"device": name, "torch": torch.__version__, "dtype": args.dtype, "tiny": args.tiny,
           "params": model.num_params(), "prompt": args.prompt, "new_tokens": args.new_tokens,
           "repeats": args.repeats, "rows": [], "failures": [], "graphs": {}, "sd_over_ar": {}, "paper": PAPER}
    print(f"{name}, torch {torch.__version__}, {out['params'] / 1e6:.1f}M parameters, {args.dtype}, batch 1, "
          f"prompt {args.prompt}, {args.new_tokens} new tokens", flush=True)
    for mode in modes:
        set_mode(model, mode)
        for method in METHODS:
            t0 = time.perf_counter()
            try:
                r = row(method, mode, *time_decode(model, method, prompt, args.new_tokens, args.repeats))
                out["rows"].append(r)
                print(f"{mode} {method}: {r['ms_per_step']:.2f} ms/step ({time.perf_counter() - t0:.0f} s with "
                      f"warm-up)", flush=True)
            except Exception as e:                          # one line, and on to the next (mode, method)
                first = (str(e).strip().splitlines() or [""])[0][:200]
                out["failures"].append({"method": method, "mode": mode, "error": f"{type(e).__name__}: {first}",
                                        "traceback": traceback.format_exc()})
                print(f"{mode} {method}: FAILED ({type(e).__name__}: {first})", flush=True)
            c = torch._dynamo.utils.counters
            out["graphs"][mode] = {"graphs": c["stats"]["unique_graphs"],
                                   "cudagraph_skips": c["inductor"]["cudagraph_skips"]}
            out["sd_over_ar"] = sd_over_ar(out["rows"])
            if args.json:
                os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
                with open(args.json, "w") as f:
                    json.dump(out, f, indent=1)
    model.step = None
    torch._dynamo.reset()
    print(table(out))
    print("compiled graphs per mode (expected 1 per method; CUDA-graph skips 0):",
          {m: (g["graphs"], g["cudagraph_skips"]) for m, g in out["graphs"].items()})
    return out


if __name__ == "__main__":
    main()
