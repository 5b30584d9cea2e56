"""Decoding as the scripts share it (train.py, sample.py, eval.py, bench/, paper/): flag checks, the sampler
settings each method takes, prompts to token ids, batched generation with the task's stop rule, timing, the
accuracy and throughput evaluations, and the markdown table every result is printed as.

    sampler_kwargs(method, threshold, ...)   the settings method.generate takes, read from its signature
    generate(model, method, ...)             replies to a batch of prompts, stats and seconds
    evaluate_accuracy / evaluate_throughput  the task's scores / tokens/s at batch 1 (the paper's protocol)
    evaluate_likelihood(model, method, ...)  NLL per token of a task's targets or a corpus' rows (train.py, eval.py)
    timed(device, fn, ...)                   fn's result and seconds, CUDA work synchronised
    markdown_table(head, rows)               one table format for eval.py, paper/results.py and bench/
"""
import inspect
import math
import os
import re
import sys
import time

import torch

from data import encode, encode_prompts
from model import static_decoding

# ----------------------------------------------------------------------------- range checks of shared flags
# Each raises ValueError with one line that names the flag (the scripts print it as `error: ...`, exit code 1).


def check_threshold(tau: float, name: str = "--threshold") -> float:
    """A confidence threshold must be in (0, 1] or inf (one token per step). name: where the value came from."""
    if not (0 < tau <= 1 or tau == math.inf):
        raise ValueError(f"{name} {tau}: a confidence threshold must be in (0, 1], or inf for one token per step")
    return tau


def check_window(window: int, method, cfg, name: str = "--window") -> int:
    """A sampling window must be in [1, smax] (0 = the default smax / 2); a method whose generate takes no
    window (all but Set Diffusion) refuses one."""
    if window and "window" not in takes(method.generate):
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


# ----------------------------------------------------------------------------- model settings

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


def takes(fn) -> set:
    """The names of fn's parameters: which settings a method's generate or nll accepts."""
    return set(inspect.signature(fn).parameters)


def sampler_kwargs(method, threshold=math.inf, window=0, temperature=0.0, mdlm_block=32, commit_order="l2r",
                   options=None, seq_len=None, official_blocks=False):
    """The settings among these that method.generate takes, by its parameter names (AR: temperature and options
    only). seq_len: the model's context L (Set Diffusion's FHT commit order uses the L-long schedule; MDLM's
    official canvas is L wide); official_blocks: MDLM and BD3-LM count the N new tokens from the start of the
    prompt's last block, as the official align_inputs_to_blocks. window 0 and options None leave the method's
    defaults (smax / 2; plain sampling)."""
    given = {"temperature": temperature, "threshold": threshold, "window": window or None, "block": mdlm_block,
             "commit_order": commit_order, "seq_len": seq_len, "official_blocks": official_blocks,
             "options": options or None}
    accepted = takes(method.generate)
    return {k: v for k, v in given.items() if k in accepted and v is not None}


# ----------------------------------------------------------------------------- prompts to token ids

MAX_PROMPT_FILE = 4 << 20          # bytes: a prompt file is read whole, so a larger one (or /dev/zero) is refused
MASKS = re.compile(r"<\|mask\|>|\{mask:(\d+)\}")


def plain_ids(tok, text: str, raw: bool) -> list[int]:
    """Token ids of text with no special tokens: special-token text such as <|endoftext|> stays plain text.
    raw: text came from the command line, where bytes that are not UTF-8 arrive as surrogate escapes; a
    byte-level tokenizer gets those bytes back (os.fsencode), another tokenizer refuses them."""
    if tok.name == "bytes":
        return list(os.fsencode(text) if raw else text.encode("utf-8"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = os.fsencode(text[e.start:e.end])
        raise ValueError(f"--prompt holds bytes that are not UTF-8 text ({bad.hex(' ')}): the {tok.name} tokenizer "
                         f"reads text; pass UTF-8") from None
    if hasattr(tok, "encode_text"):     # data.Tokenizer's ordinary-text encoding (Qwen3: NFC first)
        return tok.encode_text(text)
    if hasattr(tok.enc, "encode_ordinary"):
        return tok.enc.encode_ordinary(text)
    return tok.encode(text)             # a WordPiece tokenizer: its own rules for special-token text


def prompt_ids(tok, prompt: str, seq_len: int, k: int, raw: bool = False) -> list[int]:
    """Token ids of prompt k: <|mask|>, the tokenizer's own [MASK] text and {mask:N} become N [MASK] tokens
    (N checked against the context before any is made); all other text is plain text."""
    own = getattr(tok, "mask_text", None) or (tok.enc.decode([tok.mask_id]) if hasattr(tok.enc, "encode_ordinary")
                                              else "")
    pattern = re.compile(MASKS.pattern + (f"|{re.escape(own)}" if own and own != "<|mask|>" else ""))
    ids, at = [], 0
    for m in pattern.finditer(prompt):
        ids += plain_ids(tok, prompt[at:m.start()], raw)
        at = m.end()
        n = 1 if m[1] is None else int(m[1]) if len(m[1]) <= 12 else seq_len + 1
        if len(ids) + n > seq_len:
            raise ValueError(f"prompt {k} has more than {seq_len} tokens with its {m[0]}: more than the model's "
                             f"context (seq_len={seq_len}); shorten it")
        ids += [tok.mask_id] * n
    return ids + plain_ids(tok, prompt[at:], raw)


def fit(k: int, n: int, max_new: int, seq_len: int):
    """Prompt k (n tokens) and max_new new tokens must fit the model's context (ValueError: one line)."""
    if n > seq_len:
        raise ValueError(f"prompt {k} has {n} tokens, more than the model's context (seq_len={seq_len}); shorten it")
    if n + max_new > seq_len:
        flag = f"--max-new-tokens {max_new}"
        raise ValueError(f"prompt {k} has {n} tokens, and with {flag} that is {n + max_new}, more than the "
                         f"model's context (seq_len={seq_len}): at most {seq_len - n} new tokens fit; pass "
                         f"--max-new-tokens {seq_len - n} or less, or shorten the prompt")


def expand_masks(tok, prompt: str) -> str:
    """{mask:N} and <|mask|> -> the tokenizer's own [MASK] text (N times), which encodes to tok.mask_id."""
    mask = tok.enc.decode([tok.mask_id])
    return re.sub(r"\{mask:(\d+)\}", lambda m: mask * int(m[1]), prompt.replace("<|mask|>", mask))


def read_prompts(path: str) -> list[str]:
    """One prompt per line of a UTF-8 text file of at most MAX_PROMPT_FILE bytes; a literal \\n in a line
    stands for a newline. Every problem is a ValueError naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PROMPT_FILE + 1)
    except OSError as e:
        raise ValueError(f"cannot read --prompt-file {path}: {e.strerror or e}") from None
    if len(data) > MAX_PROMPT_FILE:
        raise ValueError(f"--prompt-file {path} is larger than {MAX_PROMPT_FILE >> 20} MB: give a text file of "
                         f"prompts, one per line")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"--prompt-file {path} is not UTF-8 text ({e.reason} at byte {e.start}): give a text "
                         f"file of prompts, one per line") from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    prompts = [line.replace("\\n", "\n") for line in lines if line.strip()]
    if not prompts:
        raise ValueError(f"{path} holds no prompt: write one prompt per line")
    return prompts


def pad_prompts(tok, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt batch of token id lists, as data.encode_prompts makes of strings."""
    P = max(len(i) for i in ids)
    prompt = torch.full((len(ids), P), tok.pad_id, dtype=torch.long)
    prompt_mask = torch.zeros(len(ids), P, dtype=torch.bool)
    for b, row in enumerate(ids):
        if row:
            prompt[b, P - len(row):], prompt_mask[b, P - len(row):] = torch.tensor(row), True
    return prompt, prompt_mask


# ----------------------------------------------------------------------------- batched generation

def timed(device, fn, *args, **kw):
    """(fn(*args, **kw), its wall-clock seconds); on CUDA the device is synchronised before and after, so the
    seconds hold the queued kernels too."""
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    sync()
    return out, time.perf_counter() - t0


def completion_ids(tok, row):
    """Generated ids of one row after the prompt: [MASK]s removed, cut at the first EOS."""
    ids = [i for i in row.tolist() if i != tok.mask_id]
    return ids[:ids.index(tok.eos_id)] if tok.eos_id in ids else ids


def stop_rule(tok, task, prompt_mask, eos=False, **opts):
    """The samplers' stopping hook stop(tokens, end) -> (B,) bool, where tokens (B, P + N) is [left-padded
    prompt | canvas] and end (B,) the column each row is decided up to (a window's or block's end).
    A task with `stop(ids, tok, **opts)` (GSM8K: the official criteria) sees the whole sequence so far,
    [MASK]s included; otherwise `is_finished` sees the decoded reply before its first [MASK]. eos=True also
    stops a row at <|endoftext|>, as Hugging Face generate does for the official AR runs. task None (a corpus
    checkpoint in sample.py): a row stops at an EOS in its reply before the first [MASK]."""
    P = prompt_mask.shape[1]
    first = (~prompt_mask).sum(1).tolist()                        # each row's first real column

    def stop(tokens, end):
        done = []
        for row, s, e in zip(tokens.tolist(), first, end.tolist()):
            reply = row[P:e]
            decided = reply[:reply.index(tok.mask_id)] if tok.mask_id in reply else reply   # before its first [MASK]
            if eos and tok.eos_id in reply:
                done.append(True)
            elif task is None:
                done.append(tok.eos_id in decided)
            elif hasattr(task, "stop"):
                done.append(task.stop(row[s:e], tok, **opts))
            else:
                done.append(task.is_finished(tok.enc.decode([i for i in decided if i < tok.vocab_size])))
        return torch.tensor(done, device=tokens.device)
    return stop


def generate(model, method, cfg, tok, task, prompts, device, max_new_tokens, seed=0, stop_opts=None, **kw):
    """Generate replies to a list of prompts: strings (special-token text encoded as the token), or token id
    lists (sample.py's, encoded as it chose). task: the stop rule's (stop_rule; None: stop at EOS). Returns
    completions, stats and seconds."""
    batch = pad_prompts(tok, prompts) if prompts and not isinstance(prompts[0], str) else encode_prompts(tok, prompts)
    prompt, prompt_mask = (t.to(device) for t in batch)
    stop = stop_rule(tok, task, prompt_mask, eos=method.__name__ == "ar", **(stop_opts or {})) \
        if max_new_tokens else None          # only [MASK]s to fill: nothing to stop (MDLM/BD3-LM's hook needs N > 0)
    g = torch.Generator(device=device).manual_seed(seed)
    (tokens, stats), seconds = timed(device, method.generate, model, prompt, cfg, prompt_mask,
                                     max_new_tokens=max_new_tokens, generator=g, stop=stop, **kw)
    texts = [tok.decode(completion_ids(tok, row)) for row in tokens[:, prompt.shape[1]:]]
    return texts, {**stats, "tokens": tokens}, seconds


def evaluate_accuracy(model, method, cfg, tok, task, examples, config, device, threshold=math.inf, window=0,
                      max_new_tokens=64, batch_size=32, temperature=0.0, seed=0, mdlm_block=32, commit_order="l2r",
                      stop_opts=None, options=None, official_blocks=False):
    """The task's scores (accuracy first), mean tokens per step and tokens/s over the examples."""
    kw = sampler_kwargs(method, threshold, window, temperature, mdlm_block, commit_order, options, config["seq_len"],
                        official_blocks)
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


def evaluate_throughput(model, method, cfg, tok, task, examples, config, device, warmup=5, batch_size=16,
                        max_new_tokens=64, stop_opts=None, **kw):
    """Tokens/s at batch size 1 after `warmup` examples (the paper's protocol), then at batch_size.
    A progress bar on stderr when it is a terminal (the run takes a minute or so)."""
    from tqdm import tqdm
    kw = {**sampler_kwargs(method, seq_len=config["seq_len"], **kw), "stop_opts": stop_opts}
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


@torch.no_grad()
def evaluate_likelihood(model, method, cfg, tok, examples, seq_len, device, batch_size=32, seed=0,
                        exclusions="none", encode_fn=encode):
    """Per-token negative log-likelihood of the targets (exact for AR, an upper bound for the others).
    exclusions="official" (a method whose nll takes `exclude`: Set Diffusion, as the official eval): pad-id
    targets (EOS when pad = EOS) are not counted, nor position 0 (keep_clean_bos); "none" counts every target.
    encode_fn(tok, examples[i:j], seq_len) makes a batch (e.g. a corpus' token rows: data/corpus.batch)."""
    total, count = 0.0, 0
    g = torch.Generator(device=device).manual_seed(seed)
    for i in range(0, len(examples), batch_size):
        batch = {k: v.to(device) for k, v in encode_fn(tok, examples[i:i + batch_size], seq_len).items()}
        x0, extra = batch["x0"], {}
        if exclusions == "official" and "exclude" in takes(method.nll):
            extra["exclude"] = (x0 == tok.pad_id) | (torch.arange(x0.shape[1], device=device) == 0)
        nll, n = method.nll(model, x0, cfg, batch["prompt_mask"], batch["pad_mask"], generator=g, **extra)
        total, count = total + nll.sum().item(), count + n.sum().item()
    return {"nll": total / count, "perplexity": math.exp(total / count), "n": len(examples), "tokens": count,
            "exclusions": exclusions}


def bits_per_char(nll: float, tok) -> float | None:
    """Nats per token as bits per character, for a byte-level tokenizer (a byte is a character of ASCII text);
    None for any other tokenizer."""
    return nll / math.log(2) if tok.name == "bytes" else None


# ----------------------------------------------------------------------------- results as markdown

def markdown_table(head: list, rows: list) -> str:
    """A markdown table: the header, its rule, one line per row. A float cell shows 4 significant digits, any
    other cell as str (callers format the cells that want another precision)."""
    def line(cells):
        return "| " + " | ".join(f"{c:.4g}" if isinstance(c, float) else str(c) for c in cells) + " |"
    return "\n".join([line(head), "|" + "---|" * len(head), *map(line, rows)])
