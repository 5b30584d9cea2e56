"""GPU benchmarks at the paper's GSM8K scale: decode tokens/s of the four methods at Qwen3-1.7B-Base's shape,
and training tokens/s and MFU at GSM8K's shape.

    python -m bench.bench_gpu --json results/bench_gpu.json         # make bench-gpu (a CUDA GPU)
    python -m bench.bench_gpu --device cpu --tiny --new-tokens 3 --prompt 4 --train-len 32  # smoke run on CPU

Random weights (nothing is downloaded: a step's time does not depend on the values), built on the device.
Decode (--parts decode): bfloat16 weights, a 150-token prompt (GSM8K's length), 128 new tokens, greedy, batch
1 and 8 (--batch), for
- AR: ar.generate, one token per step;
- MDLM (blocks of 32), BD3-LM (S = 4), Set Diffusion (smax 8, window 4) at tau = 0.9 (--threshold), the
  paper's Set Diffusion point. Random weights are never that sure, so every step decodes one token, each with
  the shape of a tau = 0.9 step (compiled Set Diffusion: 4 clean + 4 query slots).
Modes (--modes), for each batch size in turn (batch 1 in every mode first), torch._dynamo.reset() between
them:
- eager: dynamic shapes (model.static = None), the default sampler path;
- static: static_decoding(model): every cached step padded to a fixed number of slots, run eagerly;
- compiled: static_decoding(model, compile=True): torch.compile, one graph per (method, batch);
- cudagraphs: static_decoding(model, compile=True, mode="reduce-overhead"): that graph as a CUDA graph.
Each (mode, batch, method) runs one warm-up call (it compiles: its seconds are reported), then --repeats timed
calls (median). ms/step = seconds / forward passes (stats["nfe"]), the prefill included, as the paper's
tokens/s; tokens/s = tokens generated (all rows) / seconds. At batch 1, AR's and Set Diffusion's rows also
give the paper's measured tokens/s (its GSM8K Pareto data, H100, batch 1: AR 55.52; Set Diffusion smax 8 at
tau 0.9: 87.47 at 1.95 tokens/step) and the implied tokens/s = the paper's tokens/step * 1000 / our ms/step
(our step at a trained model's tokens per step: an assumption that the step's cost does not depend on how many
of its tokens decode). Train (--parts train): train.py's CUDA step (float32 weights, bfloat16 autocast,
FlexAttention masks, AdamW, gradient clipping at 1; with --train-compile the model compiled as train.py
--compile compiles it, make gpu-check's setting) at GSM8K's shape: --train-batch rows of L = 1024
(--train-len), a 150-token prompt, a 250-token answer, the rest padding (the losses trim it); one warm-up
step, then --train-steps timed steps (median). tokens/s counts prompt + answer tokens; fed tokens/s the tokens
the forwards take (BD3-LM [x0 | xt]: 2x; Set Diffusion: the clean stream + the answer's [MASK] stream). MFU =
model FLOP/s / the GPU's peak dense bf16 FLOP/s (PEAK_BF16, or --peak-tflops); a forward of B x T tokens
counts B T (6 N + 12 n_layer n_head head_dim T) FLOPs for forward + backward (PaLM, appendix B; N =
parameters, the tied output head included; attention counted dense).
--budget: a case is not started when the seconds so far plus the slowest case of its mode so far would pass it
(decoding's cases: the budget less --train-reserve, when training follows); skipped cases are listed. A case
that fails prints one line and the run goes on; --json is rewritten after every result.
"""
import argparse
import math
import os
import statistics
import sys
import time
import traceback

import torch

import ar
import bd3lm
import mdlm
import setdiffusion
from common.checkpoint import json_dump
from common.metrics import markdown_table, timed
from common.runs import environment
from model import ModelConfig, Transformer, make_optimizer, static_decoding
from sampling import Settings

QWEN3_1_7B = dict(vocab_size=151936, n_layer=28, n_embd=2048, n_head=16, n_kv_head=8, head_dim=128,
                  intermediate_size=6144, rope_theta=1e6, tie_embeddings=True, qk_norm=True)
TINY = dict(vocab_size=512, n_layer=2, n_embd=64, n_head=4, n_kv_head=2, head_dim=16, intermediate_size=128,
            rope_theta=1e6, tie_embeddings=True, qk_norm=True)
PAPER = {"ar": {"tokens_per_step": 1.0, "tokens_per_s": 55.52},
         "setdiffusion": {"tokens_per_step": 1.95, "tokens_per_s": 87.47}}
MODES = ["eager", "static", "compiled", "cudagraphs"]
METHODS = ["ar", "setdiffusion", "bd3lm", "mdlm"]        # the order they run in: the paper's pair first
NAMES = {"ar": "AR", "mdlm": "MDLM", "bd3lm": "BD3-LM (S 4)", "setdiffusion": "Set Diffusion (smax 8)"}
PEAK_BF16 = {"H100 PCIe": 756e12, "H100 NVL": 835e12, "H100": 989e12, "H200": 989e12, "H800": 989e12,
             "A100": 312e12, "L40S": 362e12, "B200": 2250e12}      # dense bf16 FLOP/s (vendor data sheets)


def method_of(name: str, mask_id: int):
    """(module, config) of a method at the benchmark's settings."""
    return {"ar": (ar, ar.ARConfig(mask_id)), "mdlm": (mdlm, mdlm.MDLMConfig(mask_id)),
            "bd3lm": (bd3lm, bd3lm.BD3LMConfig(mask_id, 4)),
            "setdiffusion": (setdiffusion, setdiffusion.SetDiffusionConfig(mask_id, smax=8))}[name]


def peak_flops(device_name: str):
    """The peak dense bf16 FLOP/s of a GPU by name (the first PEAK_BF16 key in it), or None."""
    return next((v for k, v in PEAK_BF16.items() if k in device_name), None)


# ----------------------------------------------------------------------------- decode

def set_mode(model, mode: str):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    if mode == "eager":
        model.static = None
    else:
        static_decoding(model, compile=mode != "static",
                        mode="reduce-overhead" if mode == "cudagraphs" else None)


def decode(model, method: str, prompt, N: int, threshold: float = 0.9) -> dict:
    """One greedy generate call of the method; its stats."""
    mod, cfg = method_of(method, model.cfg.vocab_size - 1)
    window = 4 if "setdiffusion_window" in mod.KNOBS else 0
    return mod.generate(model, prompt, cfg, Settings(N, threshold, setdiffusion_window=window))[1]


def time_decode(model, method: str, prompt, N: int, repeats: int, threshold: float):
    """(median seconds of one generate call, its stats, the warm-up call's seconds)."""
    warm = timed(prompt.device, decode, model, method, prompt, N, threshold)[1]    # compiles; records graphs
    runs = [timed(prompt.device, decode, model, method, prompt, N, threshold) for _ in range(repeats)]
    return statistics.median(sec for _, sec in runs), runs[-1][0], warm


def decode_row(method: str, mode: str, batch: int, seconds: float, stats: dict, warm: float) -> dict:
    nfe, tokens = stats["nfe"], int(stats["n_gen"].sum())
    ms = 1000 * seconds / nfe
    r = {"method": method, "mode": mode, "batch": batch, "ms_per_step": ms, "steps_per_s": 1000 / ms,
         "tokens_per_step": stats["tokens_per_step"], "tokens_per_s": tokens / seconds, "seconds": seconds,
         "nfe": nfe, "tokens": tokens, "warmup_s": warm}
    if method in PAPER and batch == 1:
        p = PAPER[method]
        r |= {"paper_tokens_per_step": p["tokens_per_step"],
              "implied_tokens_per_s": p["tokens_per_step"] * 1000 / ms,
              "paper_tokens_per_s": p["tokens_per_s"]}
        r["ours_over_paper"] = r["implied_tokens_per_s"] / p["tokens_per_s"]
    return r


def sd_over_ar(rows: list) -> dict:
    """Set Diffusion ms/step / AR ms/step, per "mode, batch B" where both ran."""
    ms = {(r["method"], r["mode"], r["batch"]): r["ms_per_step"] for r in rows}
    return {f"{m}, batch {b}": ms["setdiffusion", m, b] / ms["ar", m, b]
            for (name, m, b) in ms if name == "ar" and ("setdiffusion", m, b) in ms}


# ----------------------------------------------------------------------------- train

def flops_per_forward(cfg: ModelConfig, n_params: int, B: int, T: int) -> float:
    """Forward + backward FLOPs of a forward over (B, T) tokens (PaLM, appendix B; attention counted
    dense)."""
    return B * T * (6 * n_params + 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * T)


def gsm8k_batch(B: int, L: int, prompt: int, answer: int, vocab: int, dev):
    """x0 (B, L) random tokens below the [MASK] id, prompt_mask and pad_mask (B, L): prompt, answer,
    padding."""
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, vocab - 1, (B, L), generator=g).to(dev)
    col = torch.arange(L, device=dev).expand(B, L)
    return x0, col < prompt, col >= prompt + answer


def train_step(model, opt, method: str, batch, gen, autocast):
    """One optimizer step as train.py's: loss under autocast, backward, clip at 1, AdamW."""
    mod, cfg = method_of(method, model.cfg.vocab_size - 1)
    x0, prompt_mask, pad_mask = batch
    with autocast:
        loss = mod.loss(model, x0, cfg, prompt_mask, pad_mask, gen)[0]
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def time_train(model, opt, method: str, batch, steps: int, peak, compile: bool = False) -> dict:
    """One warm-up step, then `steps` timed ones: the median step's tokens/s, fed tokens/s, FLOP/s and MFU.
    The forwards a step feeds are read in an eager step (the warm-up, or one before it when compiling);
    compile: the model as train.py --compile compiles it, the warm-up step its compile."""
    dev = batch[0].device
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16) if dev.type == "cuda" else torch.autocast(
        "cpu", enabled=False)
    gen, fed = torch.Generator(dev).manual_seed(0), []
    hook = model.register_forward_pre_hook(lambda m, args, kw:
                                           fed.append(tuple((args or (kw["idx"],))[0].shape)),
                                           with_kwargs=True)
    try:
        warm = timed(dev, train_step, model, opt, method, batch, gen, autocast)[1]
    finally:
        hook.remove()
    if compile:
        torch._dynamo.reset()
        run = torch.compile(model, dynamic=True)                    # as train.py --compile
        warm = timed(dev, train_step, run, opt, method, batch, gen, autocast)[1]
    else:
        run = model
    secs = [timed(dev, train_step, run, opt, method, batch, gen, autocast)[1] for _ in range(steps)]
    sec = statistics.median(secs)
    flops = sum(flops_per_forward(model.cfg, model.num_params(), B, T) for B, T in fed)
    tokens = int((~batch[2]).sum())
    return {"method": method, "compiled": compile, "batch": batch[0].shape[0], "seq_len": batch[0].shape[1],
            "tokens": tokens, "fed_tokens": sum(B * T for B, T in fed), "ms_per_step": 1000 * sec,
            "tokens_per_s": tokens / sec, "fed_tokens_per_s": sum(B * T for B, T in fed) / sec,
            "tflops_per_step": flops / 1e12, "tflops_per_s": flops / sec / 1e12,
            "mfu": flops / sec / peak if peak else None, "warmup_s": warm, "seconds": secs}


# ----------------------------------------------------------------------------- tables

def decode_table(rows: list) -> str:
    head = ["method", "batch", "mode", "ms/step", "tokens/step", "tokens/s", "warm-up s",
            "implied tokens/s at the paper's tokens/step", "paper tokens/s (H100, batch 1)"]
    cells = [[NAMES[r["method"]], r["batch"], r["mode"], f"{r['ms_per_step']:.2f}",
              f"{r['tokens_per_step']:.2f}", f"{r['tokens_per_s']:.1f}", f"{r['warmup_s']:.0f}",
              f"{r['implied_tokens_per_s']:.1f} (at {r['paper_tokens_per_step']:.2f})"
              if "implied_tokens_per_s" in r
              else "", f"{r['paper_tokens_per_s']:.1f}" if "paper_tokens_per_s" in r else ""] for r in rows]
    return markdown_table(head, cells)


def train_table(rows: list) -> str:
    head = ["method", "batch x L", "ms/step", "tokens/s", "fed tokens/s", "TFLOP/s", "MFU", "warm-up s"]
    cells = [[NAMES[r["method"]], f"{r['batch']} x {r['seq_len']}", f"{r['ms_per_step']:.1f}",
              f"{r['tokens_per_s']:.0f}", f"{r['fed_tokens_per_s']:.0f}", f"{r['tflops_per_s']:.1f}",
              f"{100 * r['mfu']:.1f} %" if r["mfu"] is not None else "n/a",
              f"{r['warmup_s']:.0f}"] for r in rows]
    return markdown_table(head, cells)


# ----------------------------------------------------------------------------- the run

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --tiny for a smoke run)")
    p.add_argument("--tiny", action="store_true", help="a tiny 2-layer model instead of Qwen3-1.7B's shape")
    p.add_argument("--parts", default="decode,train", help="decode, train or both (comma-separated)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated, run in this order")
    p.add_argument("--modes", default="eager,compiled", help=f"decode modes, comma-separated, of {MODES}")
    p.add_argument("--train-compile", action="store_true", help="train with the model compiled as train.py "
                   "--compile does (torch.compile(model, dynamic=True)); the warm-up step is its compile")
    p.add_argument("--batch", default="1,8", help="decode batch sizes, comma-separated")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prompt", type=int, default=150, help="decode prompt length in tokens")
    p.add_argument("--threshold", type=float, default=0.9, help="the diffusion samplers' tau")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per decode case, after one warm-up")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="decode weights")
    p.add_argument("--train-batch", type=int, default=8, help="rows per training step")
    p.add_argument("--train-len", type=int, default=1024, help="training row length L (GSM8K: 1024)")
    p.add_argument("--train-prompt", type=int, default=150, help="prompt tokens per training row")
    p.add_argument("--train-answer", type=int, default=250, help="answer tokens per training row")
    p.add_argument("--train-steps", type=int, default=3,
                   help="timed training steps per method, after one warm-up")
    p.add_argument("--peak-tflops", type=float, default=0, help="the GPU's peak dense bf16 TFLOP/s for MFU "
                                                               "(0: from its name, PEAK_BF16)")
    p.add_argument("--budget", type=float, default=math.inf,
                   help="seconds: start no case that would pass them")
    p.add_argument("--train-reserve", type=float, default=0,
                   help="with --parts decode,train: seconds of the budget "
                        "that decoding leaves to training")
    p.add_argument("--json", default=None, help="write the results here (rewritten after every result)")
    return p.parse_args(argv)


def check(args) -> dict:
    """The parsed lists {parts, methods, modes, batch}, or a ValueError saying what to do."""
    lists = {k: getattr(args, k).split(",") for k in ("parts", "methods", "modes", "batch")}
    for key, allowed in (("parts", ["decode", "train"]), ("methods", METHODS), ("modes", MODES)):
        if bad := [x for x in lists[key] if x not in allowed]:
            raise ValueError(f"unknown {key[:-1]}(s) {bad} in --{key}: choose from {','.join(allowed)}")
    if not all(b.isdigit() and int(b) > 0 for b in lists["batch"]):
        raise ValueError(f"--batch takes positive whole numbers, got {args.batch!r}")
    lists["batch"] = [int(b) for b in lists["batch"]]
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise ValueError("CUDA is not available: run on a CUDA GPU, or pass --device cpu (with --tiny)")
    if "cudagraphs" in lists["modes"] and not cuda:
        raise ValueError("--modes cudagraphs needs --device cuda")
    counts = (args.new_tokens, args.prompt, args.repeats, args.train_batch, args.train_steps,
              args.train_prompt)
    if min(counts) < 1 or args.train_answer < 0:
        raise ValueError("--new-tokens, --prompt, --repeats, --train-batch, --train-steps and --train-prompt "
                         "must be >= 1 (--train-answer >= 0)")
    if args.train_prompt + args.train_answer > args.train_len:
        raise ValueError(f"--train-prompt + --train-answer must fit in --train-len {args.train_len}")
    return lists


def attempt(out: dict, part: str, case: dict, fn, mode_cost: dict, start: float, budget: float):
    """Run one case: its row appended to out[part], or one line for a failure, or skipped past the budget."""
    label = " ".join(str(v) for v in case.values())
    key = case.get("mode", part)
    if time.perf_counter() - start + mode_cost.get(key, 0) > budget:
        out["skipped"].append({"part": part, **case, "reason": f"the --budget of {budget:g} s"})
        print(f"{part} {label}: skipped (--budget {budget:g} s)", flush=True)
        return
    t0 = time.perf_counter()
    try:
        row = fn()
        out[part].append(row)
        print(f"{part} {label}: {row['ms_per_step']:.2f} ms/step, {row['tokens_per_s']:.1f} tokens/s "
              f"({time.perf_counter() - t0:.0f} s with warm-up)", flush=True)
    except Exception as e:                          # one line, and on to the next case
        first = (str(e).strip().splitlines() or [""])[0][:200]
        out["failures"].append({"part": part, **case, "error": f"{type(e).__name__}: {first}",
                                "traceback": traceback.format_exc()})
        print(f"{part} {label}: FAILED ({type(e).__name__}: {first})", flush=True)
    mode_cost[key] = max(mode_cost.get(key, 0), time.perf_counter() - t0)


def save(out: dict, path):
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            json_dump(out, f, indent=1)


def run_decode(out, args, lists, dev, start):
    torch.manual_seed(0)
    with torch.device(dev):                                 # init on the device: seconds, not minutes on CPU
        model = Transformer(ModelConfig(**(TINY if args.tiny else QWEN3_1_7B))).to(
            getattr(torch, args.dtype)).eval()
    out["params"], cost = model.num_params(), {}
    budget = args.budget - (args.train_reserve if "train" in lists["parts"] else 0)
    for B in lists["batch"]:                                # batch 1 in every mode first: the paper's setting
        prompt = torch.randint(0, model.cfg.vocab_size - 1, (B, args.prompt), device=dev)  # (B, P), no [MASK]
        for mode in lists["modes"]:
            set_mode(model, mode)
            for method in lists["methods"]:
                attempt(out, "decode", {"mode": mode, "batch": B, "method": method}, lambda: decode_row(
                    method, mode, B, *time_decode(model, method, prompt, args.new_tokens, args.repeats,
                                                  args.threshold)), cost, start, budget)
                out["sd_over_ar"] = sd_over_ar(out["decode"])
                save(out, args.json)
            c = torch._dynamo.utils.counters
            out["graphs"][f"{mode}, batch {B}"] = {"graphs": c["stats"]["unique_graphs"],
                                                   "cudagraph_skips": c["inductor"]["cudagraph_skips"]}
    model.static = None
    torch._dynamo.reset()


def run_train(out, args, lists, dev, start):
    from common.runs import flex_on
    torch.manual_seed(0)
    with torch.device(dev):
        model = Transformer(ModelConfig(**(TINY if args.tiny else QWEN3_1_7B))).train()   # float32 weights
    model.flex = flex_on("auto", str(dev))                  # FlexAttention masks on CUDA, as train.py
    opt = make_optimizer(model, lr=1e-5, weight_decay=0.1, beta2=0.98)
    batch = gsm8k_batch(args.train_batch, args.train_len, args.train_prompt, args.train_answer,
                        model.cfg.vocab_size, dev)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    peak = args.peak_tflops * 1e12 or peak_flops(name)
    out["train_peak_flops"], out["train_params"], cost = peak, model.num_params(), {}
    for method in lists["methods"]:
        attempt(out, "train", {"method": method},
                lambda: time_train(model, opt, method, batch, args.train_steps, peak, args.train_compile),
                cost, start, args.budget)
        save(out, args.json)


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    try:
        lists = check(args)
    except ValueError as e:
        sys.exit(f"error: {e}")
    start, dev = time.perf_counter(), torch.device(args.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    out = {"argv": argv, "device": name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "environment": environment(args.device),
           "dtype": args.dtype, "tiny": args.tiny, "prompt": args.prompt, "new_tokens": args.new_tokens,
           "threshold": args.threshold, "repeats": args.repeats, "decode": [], "train": [], "failures": [],
           "skipped": [], "graphs": {}, "sd_over_ar": {}, "paper": PAPER}
    print(f"{name}, torch {torch.__version__}, parts {args.parts}", flush=True)
    if "decode" in lists["parts"]:
        run_decode(out, args, lists, dev, start)
        if dev.type == "cuda":
            torch.cuda.empty_cache()                       # the decode model is gone; training builds its own
        print(decode_table(out["decode"]))
    if "train" in lists["parts"]:
        run_train(out, args, lists, dev, start)
        print(train_table(out["train"]))
    save(out, args.json)
    return out


if __name__ == "__main__":
    main()
