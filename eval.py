"""Evaluate a checkpoint; prints one markdown table row (and writes the same metrics with --json).

    python eval.py --ckpt out/setdiffusion                       # accuracy on the task it was trained on
    python eval.py --ckpt out/setdiffusion --threshold 0.9       # decode every token with p >= 0.9 too
    python eval.py --ckpt out/setdiffusion --task likelihood     # NLL / perplexity (a bound for diffusion)
    python eval.py --ckpt out/ar --task throughput               # tokens/s at batch 1 (paper) and batched

    python eval.py --ckpt owt:setdlm-smax16 --task likelihood --data owt   # OWT/LM1B perplexity (zeroshot.py)
    python eval.py --ckpt owt:setdlm-smax16 --task piqa             # zero-shot multiple choice (zeroshot.py)

Tasks: arith, gsm8k (accuracy of the generated answers), cnndm (ROUGE), rocstories --sentences 1|3 and infill
(fill a masked span: generation.py), likelihood, throughput, hellaswag, piqa, siqa.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

import checkpoint
import generation
import results
import zeroshot
from data import encode, encode_prompts, get_task, get_tokenizer
from model import static_decoding

TASKS = ["arith", "gsm8k", "cnndm", "rocstories", "infill", "likelihood", "throughput", *zeroshot.MCQA]


def sampler_kwargs(method_name, threshold=math.inf, window=0, temperature=0.0, mdlm_block=32, commit_order="l2r",
                   options=None, seq_len=None, official_blocks=False):
    """The generate() keyword arguments each method takes. seq_len: the model's context L (Set Diffusion's FHT
    commit order uses the L-long schedule; MDLM's official canvas is L wide); official_blocks: MDLM and BD3-LM
    count the N new tokens from the start of the prompt's last block, as the official align_inputs_to_blocks."""
    kw = {"temperature": temperature, **({"options": options} if options else {})}
    if method_name != "ar":
        kw["threshold"] = threshold
    if method_name == "setdiffusion":
        kw.update(commit_order=commit_order, seq_len=seq_len)
        if window:
            kw["window"] = window
    if method_name == "mdlm":
        kw.update(block=mdlm_block, official_blocks=official_blocks, seq_len=seq_len)
    if method_name == "bd3lm":
        kw["official_blocks"] = official_blocks
    return kw


def completion_ids(tok, row):
    """Generated ids of one row after the prompt: [MASK]s removed, cut at the first EOS."""
    ids = [i for i in row.tolist() if i != tok.mask_id]
    return ids[:ids.index(tok.eos_id)] if tok.eos_id in ids else ids


def stop_rule(tok, task, prompt_mask, eos=False, **opts):
    """The samplers' stopping hook stop(tokens, end) -> (B,) bool, where tokens (B, P + N) is [left-padded
    prompt | canvas] and end (B,) the column each row is decided up to (a window's or block's end).
    A task with `stop(ids, tok, **opts)` (GSM8K: the official criteria) sees the whole sequence so far,
    [MASK]s included; otherwise `is_finished` sees the decoded reply before its first [MASK]. eos=True also
    stops a row at <|endoftext|>, as Hugging Face generate does for the official AR runs."""
    P = prompt_mask.shape[1]
    first = (~prompt_mask).sum(1).tolist()                        # each row's first real column

    def stop(tokens, end):
        done = []
        for row, s, e in zip(tokens.tolist(), first, end.tolist()):
            reply = row[P:e]
            if eos and tok.eos_id in reply:
                done.append(True)
            elif hasattr(task, "stop"):
                done.append(task.stop(row[s:e], tok, **opts))
            else:
                reply = reply[:reply.index(tok.mask_id)] if tok.mask_id in reply else reply
                done.append(task.is_finished(tok.enc.decode([i for i in reply if i < tok.vocab_size])))
        return torch.tensor(done, device=tokens.device)
    return stop


def pad_prompts(tok, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt batch of token id lists, as data.encode_prompts makes of strings."""
    P = max(len(i) for i in ids)
    prompt = torch.full((len(ids), P), tok.pad_id, dtype=torch.long)
    prompt_mask = torch.zeros(len(ids), P, dtype=torch.bool)
    for b, row in enumerate(ids):
        if row:
            prompt[b, P - len(row):], prompt_mask[b, P - len(row):] = torch.tensor(row), True
    return prompt, prompt_mask


def generate(model, method, cfg, tok, task, prompts, device, max_new_tokens, seed=0, stop_opts=None, **kw):
    """Generate replies to a list of prompts: strings (special-token text encoded as the token), or token id
    lists (sample.py's, encoded as it chose). Returns completions, stats and seconds."""
    batch = pad_prompts(tok, prompts) if prompts and not isinstance(prompts[0], str) else encode_prompts(tok, prompts)
    prompt, prompt_mask = (t.to(device) for t in batch)
    stop = stop_rule(tok, task, prompt_mask, eos=method.__name__ == "ar", **(stop_opts or {}))
    g = torch.Generator(device=device).manual_seed(seed)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    tokens, stats = method.generate(model, prompt, cfg, prompt_mask, max_new_tokens=max_new_tokens,
                                    generator=g, stop=stop, **kw)
    sync()
    seconds = time.perf_counter() - t0
    texts = [tok.decode(completion_ids(tok, row)) for row in tokens[:, prompt.shape[1]:]]
    return texts, {**stats, "tokens": tokens}, seconds


def evaluate_accuracy(model, method, cfg, tok, task, examples, config, device, threshold=math.inf, window=0,
                      max_new_tokens=64, batch_size=32, temperature=0.0, seed=0, mdlm_block=32, commit_order="l2r",
                      stop_opts=None, options=None, official_blocks=False):
    """The task's scores (accuracy first), mean tokens per step and tokens/s over the examples."""
    kw = sampler_kwargs(config["method"], threshold, window, temperature, mdlm_block, commit_order, options,
                        config["seq_len"], official_blocks)
    completions, hits, tps, n_tok, seconds, nfe = [], dict.fromkeys(task.SCORES, 0), 0.0, 0, 0.0, 0
    for i in range(0, len(examples), batch_size):
        chunk = examples[i:i + batch_size]
        texts, stats, sec = generate(model, method, cfg, tok, task, [e["prompt"] for e in chunk], device,
                                     max_new_tokens, seed + i, stop_opts, **kw)
        completions += texts
        for name, score in task.SCORES.items():
            hits[name] += sum(score(t, e["answer"]) for t, e in zip(texts, chunk))
        tps += stats["tokens_per_step"] * len(chunk)
        n_tok, seconds, nfe = n_tok + int(stats["n_gen"].sum()), seconds + sec, nfe + stats["nfe"]
    n = len(examples)
    return {**{k: v / n for k, v in hits.items()}, "tokens_per_step": tps / n, "tokens_per_s": n_tok / seconds,
            "nfe": nfe, "n": n, "completions": completions}


@torch.no_grad()
def evaluate_likelihood(model, method, cfg, tok, examples, seq_len, device, batch_size=32, seed=0,
                        exclusions="none", encode_fn=encode):
    """Per-token negative log-likelihood of the targets (exact for AR, an upper bound for the others).
    exclusions="official" (Set Diffusion only, as the official eval): pad-id targets (EOS when pad = EOS)
    are not counted, nor position 0 (keep_clean_bos); "none" counts every target.
    encode_fn(tok, examples[i:j], seq_len) makes a batch (e.g. a corpus' token rows: data/corpus.batch)."""
    total, count = 0.0, 0
    g = torch.Generator(device=device).manual_seed(seed)
    for i in range(0, len(examples), batch_size):
        batch = {k: v.to(device) for k, v in encode_fn(tok, examples[i:i + batch_size], seq_len).items()}
        x0, extra = batch["x0"], {}
        if exclusions == "official" and method.__name__ == "setdiffusion":
            extra["exclude"] = (x0 == tok.pad_id) | (torch.arange(x0.shape[1], device=device) == 0)
        nll, n = method.nll(model, x0, cfg, batch["prompt_mask"], batch["pad_mask"], generator=g, **extra)
        total, count = total + nll.sum().item(), count + n.sum().item()
    return {"nll": total / count, "perplexity": math.exp(total / count), "n": len(examples), "tokens": count,
            "exclusions": exclusions}


def evaluate_throughput(model, method, cfg, tok, task, examples, config, device, warmup=5, batch_size=16,
                        max_new_tokens=64, stop_opts=None, **kw):
    """Tokens/s at batch size 1 after `warmup` examples (the paper's protocol), then at batch_size.
    A progress bar on stderr when it is a terminal (the run takes a minute or so)."""
    from tqdm import tqdm
    kw = {**sampler_kwargs(config["method"], seq_len=config["seq_len"], **kw), "stop_opts": stop_opts}
    prompts = [e["prompt"] for e in examples]
    if len(prompts) <= warmup:
        raise ValueError(no_examples_left(warmup, len(prompts)))
    rates, steps, nfe = [], [], 0
    measured = prompts[warmup:]
    with tqdm(total=len(prompts) + 2, desc="throughput", unit="run", file=sys.stderr, disable=None,
              dynamic_ncols=True) as bar:
        for p in prompts[:warmup]:
            generate(model, method, cfg, tok, task, [p], device, max_new_tokens, **kw)
            bar.update()
        for j, p in enumerate(measured):
            _, stats, sec = generate(model, method, cfg, tok, task, [p], device, max_new_tokens, seed=j, **kw)
            rates.append(int(stats["n_gen"].sum()) / sec)
            steps.append(stats["tokens_per_step"])
            nfe += stats["nfe"]
            bar.update()
        for _ in range(2):                      # the first batched call warms up (and compiles) that shape
            _, stats, sec = generate(model, method, cfg, tok, task, measured[:batch_size], device, max_new_tokens,
                                     **kw)
            bar.update()
    mean = sum(rates) / len(rates)
    return {"tokens_per_s": mean, "tokens_per_s_std": (sum((r - mean) ** 2 for r in rates) / len(rates)) ** 0.5,
            "tokens_per_step": sum(steps) / len(steps), "nfe": nfe, "n": len(rates),
            "tokens_per_s_batched": int(stats["n_gen"].sum()) / sec, "batch_size": len(measured[:batch_size])}


# ----------------------------------------------------------------------------- range checks of shared flags
# One place for the checks of the sampler and batch flags that eval.py, sample.py and train.py share. Each
# raises ValueError with one line that names the flag (the scripts print it as `error: ...`, exit code 1).

def check_threshold(tau: float, name: str = "--threshold") -> float:
    """A confidence threshold must be in (0, 1] or inf (one token per step). name: where the value came from."""
    if not (0 < tau <= 1 or tau == math.inf):
        raise ValueError(f"{name} {tau}: a confidence threshold must be in (0, 1], or inf for one token per step")
    return tau


def check_window(window: int, method_name: str, cfg, name: str = "--window") -> int:
    """Set Diffusion's window must be in [1, smax] (0 = the default smax / 2); other methods have none."""
    if window and method_name != "setdiffusion":
        raise ValueError(f"{name} {window}: only Set Diffusion has a window")
    if window and not 1 <= window <= cfg.smax:
        raise ValueError(f"{name} {window}: the window must be in [1, smax={cfg.smax}]")
    return window


def check_positive(name: str, value: int) -> int:
    """A count that must be at least 1: --batch-size, -n, --mdlm-block, --max-new-tokens of an evaluation, ..."""
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def check_nonnegative(name: str, value: int, zero: str = "") -> int:
    """A count that may be 0 (zero: what 0 means, shown in the message, e.g. "0 = all")."""
    if value < 0:
        raise ValueError(f"{name} must be 0 or more{f' ({zero})' if zero else ''}, got {value}")
    return value


def check_temperature(t: float, name: str = "--temperature") -> float:
    """A sampling temperature: a finite number >= 0 (0 = greedy)."""
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"{name} {t}: the temperature must be a finite number >= 0 (0 = greedy)")
    return t


def check_output_file(path: str, flag: str = "--json") -> str:
    """An output file that will be written at the end: its folder must exist and be writable now."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path} is a folder: give a file name in it")
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {path}: the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{flag} {path}: the folder {folder} is not writable")
    return path


def no_examples_left(warmup: int, n: int) -> str:
    return (f"--warmup {warmup} leaves no example to measure: only {n} example(s) are evaluated; "
            f"raise --limit above --warmup (or lower --warmup)")


def speed_args(p):
    """--compile and --dtype, shared by eval.py and sample.py."""
    p.add_argument("--compile", action="store_true", help="static-shape decoding compiled with torch.compile "
                   "(CUDA graphs on CUDA); the first calls pay the compile time")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="weights and activations (the official evaluation runs float32)")


def prepare(model, args, device):
    """The loaded model in --dtype, with --compile's static-shape decoding."""
    model = model.to(getattr(torch, args.dtype))
    if args.compile:
        static_decoding(model, compile=True, mode="reduce-overhead" if device.startswith("cuda") else None)
    return model


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", help="checkpoint directory (written by train.py)")
    p.add_argument("--task", choices=TASKS, default=None, help="what to measure (default: the checkpoint's task)")
    p.add_argument("--data-dir", default=None, help="local folder with the task's train/test .jsonl")
    p.add_argument("--data", default=None, help="likelihood on a corpus: owt or lm1b (zeroshot.py)")
    p.add_argument("--samples", type=int, default=1, help="hellaswag/piqa/siqa: NELBO draws per option (1 = official)")
    p.add_argument("--limit", type=int, default=0, help="evaluate the first N held-out examples (0 = all)")
    p.add_argument("--batch-size", type=int, default=32, help="problems generated at once")
    p.add_argument("--device", default="auto", help="cuda, mps, cpu or auto")
    p.add_argument("--threshold", type=float, default=None, help="confidence threshold tau (inf = 1 token/step)")
    p.add_argument("--window", type=int, default=None, help="Set Diffusion window W (default smax / 2)")
    p.add_argument("--commit-order", choices=["l2r", "fht"], default="l2r",
                   help="Set Diffusion: commit a step's tokens left to right (the official throughput runs) or by "
                        "first-hitting time (the official accuracy runs)")
    p.add_argument("--stop-on-im-end", action="store_true", help="GSM8K: also stop at <|im_end|> (official option)")
    p.add_argument("--nll-exclusions", choices=["official", "none"], default=None,
                   help="likelihood: 'official' drops pad-id (EOS) targets and position 0 from Set Diffusion's "
                        "NLL as the official eval does (default for released checkpoints), 'none' counts all")
    p.add_argument("--mdlm-block", type=int, default=32, help="MDLM sampler block length")
    p.add_argument("--official-blocks", action="store_true",
                   help="MDLM/BD3-LM: count the new tokens from the start of the prompt's last block and (MDLM) pad "
                        "the canvas to seq_len with [MASK], as the official align_inputs_to_blocks (released models)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens to generate per problem")
    p.add_argument("--sentences", type=int, default=1, choices=[1, 3], help="rocstories: sentences to infill")
    p.add_argument("--warmup", type=int, default=5, help="throughput: warm-up examples before timing")
    p.add_argument("--seed", type=int, default=0, help="seed of sampling, noise and orders")
    speed_args(p)
    p.add_argument("--json", default=None, help="also write the metrics to this JSON file")
    p.add_argument("--summarize", nargs="+", default=None, metavar="JSON",
                   help="instead of evaluating: merge these --json files into a Pareto table (--out, --plot)")
    p.add_argument("--out", default="results/pareto.md", help="--summarize: markdown table path")
    p.add_argument("--plot", default=None, help="--summarize: accuracy vs tokens/s plot (needs matplotlib)")
    p.add_argument("--paper", choices=["gsm8k"], default=None, help="--summarize: add the paper's numbers")
    args = p.parse_args(argv)
    if not args.summarize and not args.ckpt:
        p.error("--ckpt is required (or --summarize)")
    return args


def check_args(args):
    """The range checks of eval.py's flags, before anything is loaded (ValueError: one line)."""
    check_positive("--batch-size", args.batch_size)
    check_positive("--mdlm-block", args.mdlm_block)
    check_nonnegative("--limit", args.limit, "0 = all")
    check_nonnegative("--warmup", args.warmup)
    check_temperature(args.temperature)
    if args.max_new_tokens is not None:
        check_positive("--max-new-tokens", args.max_new_tokens)
    if args.threshold is not None:
        check_threshold(args.threshold)
    if args.json:
        check_output_file(args.json)


def main(argv=None):
    args = get_args(argv)
    if args.summarize:
        try:
            paper = get_task(args.paper).PAPER_RESULTS if args.paper else None
            return results.summarize(args.summarize, args.out, args.plot, paper)
        except (OSError, ValueError) as e:
            sys.exit(f"error: {e}")
    try:
        check_args(args)
        device = checkpoint.pick_device(args.device)   # ValueError: a device not here
        model, method, cfg, config = checkpoint.load(args.ckpt, device)
        model = prepare(model, args, device)
        task_name = args.task or config["data"]
        corpus = config["data"] in zeroshot.CORPORA and task_name != "rocstories"    # ROCStories: OWT models too
        if args.data or task_name in zeroshot.MCQA or corpus:
            m = zeroshot.evaluate(args, task_name, model, method, cfg, config, device, evaluate_likelihood)
            return report(args, config, task_name, m)
        data_name = config["data"] if task_name in ("likelihood", "throughput", "infill") else task_name
        data = get_task(data_name, config.get("data_options") if data_name == config["data"] else None)
        tok = get_tokenizer(config["tokenizer"])
        examples = data.load("test", args.data_dir)
        sampler = config.get("sampler", {})
        threshold = check_threshold(args.threshold if args.threshold is not None else
                                    sampler.get("threshold", math.inf),
                                    "--threshold" if args.threshold is not None else
                                    "config.json's sampler.threshold")
        window = check_window(args.window if args.window is not None else sampler.get("window", 0), config["method"],
                              cfg, "--window" if args.window is not None else
                              "config.json's sampler.window")
        max_new = args.max_new_tokens if args.max_new_tokens is not None else sampler.get("max_new_tokens", 64)
        examples = examples[:args.limit] if args.limit else examples
        if task_name == "throughput" and len(examples) <= args.warmup:
            raise ValueError(no_examples_left(args.warmup, len(examples)))
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    kw = dict(threshold=threshold, window=window, temperature=args.temperature, mdlm_block=args.mdlm_block,
              commit_order=args.commit_order, options=generation.options_for(data_name, tok, config["method"]),
              official_blocks=args.official_blocks)
    stop_opts = {"im_end": True} if args.stop_on_im_end else {}
    if task_name in ("rocstories", "infill"):
        try:
            m = generation.evaluate_task(task_name, data, examples, model, method, cfg, tok, config, device,
                                         args.sentences, args.warmup,
                                         **sampler_kwargs(config["method"], seq_len=config["seq_len"], **kw))
        except ValueError as e:
            sys.exit(f"error: {e}")
    elif task_name == "likelihood":
        exclusions = args.nll_exclusions or ("official" if "source" in config else "none")   # released: official
        m = evaluate_likelihood(model, method, cfg, tok, examples, config["seq_len"], device, args.batch_size,
                                args.seed, exclusions)
    elif task_name == "throughput":
        m = evaluate_throughput(model, method, cfg, tok, data, examples, config, device, args.warmup,
                                args.batch_size, max_new, stop_opts, **kw)
    else:
        m = evaluate_accuracy(model, method, cfg, tok, data, examples, config, device, batch_size=args.batch_size,
                              max_new_tokens=max_new, seed=args.seed, stop_opts=stop_opts, **kw)
        completions = m.pop("completions")
        if data_name == "cnndm":            # the official corpus-level ROUGE (bootstrap) and sacreBLEU, beside ours
            from data.cnndm import corpus_scores
            scores = corpus_scores(completions, [e["answer"] for e in examples], seed=args.seed)
            m.update({f"corpus_{k}": v for k, v in scores.items()})
    window = window or (cfg.smax // 2 if config["method"] == "setdiffusion" else 0)     # the one it ran with
    report(args, config, task_name, m, threshold, window, sampled=task_name != "likelihood",
           im_end=data_name == "gsm8k" and task_name not in ("rocstories", "infill"))


def report(args, config, task_name, m, threshold=math.inf, window=0, sampled=False, im_end=False):
    """Print the metrics as a markdown row (and write them with --json). The row shows only the sampler settings
    that apply: none without sampling (sampled=False: likelihood, zero-shot), the threshold for the diffusion
    methods, window and commit order for Set Diffusion, stop_on_im_end where the task stops on it (im_end).
    The JSON holds every setting, as before."""
    m = {"task": task_name, "model": config["method"], "ckpt": args.ckpt, "threshold": threshold, "window": window,
         "commit_order": args.commit_order, "stop_on_im_end": args.stop_on_im_end,
         "official_blocks": args.official_blocks, **m}
    method = config["method"]
    applies = {"threshold": sampled and method != "ar", "window": sampled and method == "setdiffusion",
               "commit_order": sampled and method == "setdiffusion", "stop_on_im_end": sampled and im_end,
               "official_blocks": sampled and method in ("mdlm", "bd3lm")}
    keys = [k for k in m if k != "ckpt" and applies.get(k, True)]
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    print("| " + " | ".join(f"{m[k]:.4g}" if isinstance(m[k], float) else str(m[k]) for k in keys) + " |")
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(m, f, indent=2)
        except OSError as e:
            sys.exit(f"error: cannot write --json {args.json} ({e.strerror}); the row above holds the same metrics")


if __name__ == "__main__":
    main()
