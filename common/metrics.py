"""What the scripts measure: replies to prompts, a task's scores, the likelihood of held-out text, and the
markdown table every result is printed as. The samplers live in the method files and the logits -> tokens
rules in sampling.py; this file connects them to prompts, tasks and clocks.

    respond(model, method, cfg, tok, task, prompts, device, settings)
                                             replies to a batch of prompts, left-padded, decoded by the
                                             method's generate with the task's stop rule
    evaluate_accuracy(...)                   the task's scores (accuracy first), tokens/step and tokens/s
    evaluate_likelihood(model, method, ...)  NLL per token of a task's targets or a corpus' rows
    run_record(config, ckpt, task, ...)      the settings every result JSON starts with
    markdown_table(head, rows)               one table format for eval.py, paper/results.py and bench/

Throughput at batch 1 (the paper's protocol): common/throughput.py; samples from BOS alone:
common/unconditional.py.
"""
import math
import time

import torch

from data import encode
from sampling import Settings


# ----------------------------------------------------------------------------- replies to prompts

def pad_prompts(tok, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt batch for the samplers: (prompt (B, P), prompt_mask (B, P) True = real token)."""
    P = max(len(i) for i in ids)
    prompt = torch.full((len(ids), P), tok.pad_id, dtype=torch.long)
    prompt_mask = torch.zeros(len(ids), P, dtype=torch.bool)
    for b, row in enumerate(ids):
        if row:
            prompt[b, P - len(row):], prompt_mask[b, P - len(row):] = torch.tensor(row), True
    return prompt, prompt_mask


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
            decided = reply[:reply.index(tok.mask_id)] if tok.mask_id in reply else reply   # before its
                                                                                            # first [MASK]
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


def respond(model, method, cfg, tok, task, prompts, device, settings: Settings, seed=0, stop_opts=None):
    """Replies to a list of prompts: strings (special-token text encoded as the token), or token id lists
    (sample.py's, encoded as it chose), decoded with method.generate under settings. task: the stop rule's
    (stop_rule; None: stop at EOS). Returns completions, stats and seconds."""
    ids = prompts if prompts and not isinstance(prompts[0], str) else tok.encode_batch(prompts)
    prompt, prompt_mask = (t.to(device) for t in pad_prompts(tok, ids))
    stop = stop_rule(tok, task, prompt_mask, eos=method.HF_GENERATE, **(stop_opts or {})) \
        if settings.max_new_tokens else None    # only [MASK]s to fill: nothing to stop (MDLM/BD3-LM's needs
                                                # N > 0)
    g = torch.Generator(device=device).manual_seed(seed)
    (tokens, stats), seconds = timed(device, method.generate, model, prompt, cfg, settings, prompt_mask,
                                     stop, g)
    texts = [tok.decode(completion_ids(tok, row)) for row in tokens[:, prompt.shape[1]:]]
    return texts, {**stats, "tokens": tokens}, seconds


# ----------------------------------------------------------------------------- scores and likelihood

def evaluate_accuracy(model, method, cfg, tok, task, examples, device, settings: Settings, batch_size=32,
                      seed=0, stop_opts=None):
    """The task's scores (accuracy first), mean tokens per step and tokens/s over the examples; with the
    replies ("completions") and, per example, what eval.py --replies writes ("records": reply_record)."""
    completions, records, tps, n_tok, seconds, nfe = [], [], 0.0, 0, 0.0, 0
    hits = dict.fromkeys(task.SCORES, 0)
    for i in range(0, len(examples), batch_size):
        chunk = examples[i:i + batch_size]
        texts, stats, sec = respond(model, method, cfg, tok, task, [e["prompt"] for e in chunk], device,
                                    settings, seed + i, stop_opts)
        completions += texts
        for text, e in zip(texts, chunk):
            verdicts = {name: score(text, e["answer"]) for name, score in task.SCORES.items()}
            for name, v in verdicts.items():
                hits[name] += v
            records.append(reply_record(task, len(records), e, text, verdicts))
        tps += stats["tokens_per_step"] * len(chunk)
        n_tok, seconds, nfe = n_tok + int(stats["n_gen"].sum()), seconds + sec, nfe + stats["nfe"]
    n = len(examples)
    return {**{k: v / n for k, v in hits.items()}, "tokens_per_step": tps / n,
            "tokens_per_s": n_tok / seconds, "nfe": nfe, "n": n, "completions": completions,
            "records": records}


def reply_record(task, index: int, example: dict, reply: str, verdicts: dict) -> dict:
    """One example as eval.py --replies writes it (lm-eval's --log_samples): its prompt, the reply, the gold
    answer, what each scorer extracted from the reply (the task's ANSWERS, where it has them) and each
    scorer's verdict (bools; ROUGE's F-measures)."""
    extracted = {name: get(reply) for name, get in getattr(task, "ANSWERS", {}).items()}
    return {"index": index, "prompt": example["prompt"], "reply": reply, "answer": example["answer"],
            **({"extracted": extracted} if extracted else {}), "scores": verdicts}


@torch.no_grad()
def evaluate_likelihood(model, method, cfg, tok, examples, seq_len, device, batch_size=32, seed=0,
                        exclusions="none", encode_fn=encode):
    """Per-token negative log-likelihood of the targets (exact for AR, an upper bound for the others).
    exclusions="official" (a method with OFFICIAL_EXCLUDES: Set Diffusion, as the official eval): pad-id
    targets (EOS when pad = EOS) are not counted, nor position 0 (keep_clean_bos); "none" counts every target.
    encode_fn(tok, examples[i:j], seq_len) makes a batch (e.g. a corpus' token rows: data/corpus.batch)."""
    total, count = 0.0, 0
    g = torch.Generator(device=device).manual_seed(seed)
    for i in range(0, len(examples), batch_size):
        batch = {k: v.to(device) for k, v in encode_fn(tok, examples[i:i + batch_size], seq_len).items()}
        x0, extra = batch["x0"], {}
        if exclusions == "official" and method.OFFICIAL_EXCLUDES:
            extra["exclude"] = (x0 == tok.pad_id) | (torch.arange(x0.shape[1], device=device) == 0)
        nll, n = method.nll(model, x0, cfg, batch["prompt_mask"], batch["pad_mask"], generator=g, **extra)
        total, count = total + nll.sum().item(), count + n.sum().item()
    return {"nll": total / count, "perplexity": math.exp(total / count), "n": len(examples), "tokens": count,
            "exclusions": exclusions}


def bits_per_char(nll: float, tok) -> float | None:
    """Nats per token as bits per character, for a byte-level tokenizer (a byte is a character of ASCII text);
    None for any other tokenizer."""
    return nll / math.log(2) if tok.name == "bytes" else None


# ----------------------------------------------------------------------------- results as JSON and markdown

def window_used(window: int, method, cfg) -> int:
    """The Set Diffusion window a run decodes with: the one given, else smax / 2; 0 for the other methods."""
    return cfg.window(window) if "setdiffusion_window" in method.KNOBS else 0


def run_record(config: dict, ckpt: str, task: str, threshold=math.inf, window=0, commit_order="l2r",
               stop_on_im_end=False, official=False) -> dict:
    """The fields every result JSON starts with: what was measured, on which checkpoint, with which sampler
    settings, the method's own settings (smax, S, ...; the mask id left out), and the environment that trained
    the checkpoint (its config.json's: None for a released one or an older one)."""
    return {"task": task, "model": config["method"], "ckpt": ckpt, "threshold": threshold, "window": window,
            "commit_order": commit_order, "stop_on_im_end": stop_on_im_end,
            "official": official,
            "method_config": {k: v for k, v in config["method_config"].items() if k != "mask_id"},
            "ckpt_environment": config.get("environment")}


def markdown_table(head: list, rows: list) -> str:
    """A markdown table: the header, its rule, one line per row. A float cell shows 4 significant digits, any
    other cell as str (callers format the cells that want another precision)."""
    def line(cells):
        return "| " + " | ".join(f"{c:.4g}" if isinstance(c, float) else str(c) for c in cells) + " |"
    return "\n".join([line(head), "|" + "---|" * len(head), *map(line, rows)])
