"""Replies to prompts, as the scripts get them: prompts (strings or token ids) are left-padded into one batch, run
through a method's own sampler (`generate` in ar.py, mdlm.py, bd3lm.py, setdiffusion.py, all with one signature)
with the task's stop rule, and come back as reply texts, the sampler's stats and the seconds it took. The
samplers live in the method files and the logits -> tokens rules in sampling.py; this file only connects them
to prompts, tasks and clocks.

    respond(model, method, cfg, tok, task, prompts, device, settings)   replies to a batch of prompts
    unconditional(model, method, cfg, tok, n, settings, device)          samples from BOS alone at batch 1
    timed(device, fn, ...)                   fn's result and seconds, CUDA work synchronised
"""
import dataclasses
import time

import torch

from data import encode_prompts
from sampling import EntropyStop, Settings


# ----------------------------------------------------------------------------- batched generation

def pad_prompts(tok, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt batch of token id lists, as data.encode_prompts makes of strings."""
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


def respond(model, method, cfg, tok, task, prompts, device, settings: Settings, seed=0, stop_opts=None):
    """Replies to a list of prompts: strings (special-token text encoded as the token), or token id lists
    (sample.py's, encoded as it chose), decoded with method.generate under settings. task: the stop rule's
    (stop_rule; None: stop at EOS). Returns completions, stats and seconds."""
    batch = pad_prompts(tok, prompts) if prompts and not isinstance(prompts[0], str) else encode_prompts(tok, prompts)
    prompt, prompt_mask = (t.to(device) for t in batch)
    stop = stop_rule(tok, task, prompt_mask, eos=method.HF_GENERATE, **(stop_opts or {})) \
        if settings.max_new_tokens else None    # only [MASK]s to fill: nothing to stop (MDLM/BD3-LM's needs N > 0)
    g = torch.Generator(device=device).manual_seed(seed)
    (tokens, stats), seconds = timed(device, method.generate, model, prompt, cfg, settings, prompt_mask, stop, g)
    texts = [tok.decode(completion_ids(tok, row)) for row in tokens[:, prompt.shape[1]:]]
    return texts, {**stats, "tokens": tokens}, seconds


# ----------------------------------------------------------------------------- samples from BOS alone

def unconditional(model, method, cfg, tok, n, settings: Settings, device, seed=0) -> list[dict]:
    """n samples from BOS alone, one at a time (batch 1), at temperature 1 with settings' options. Per sample: ids (the new tokens up to its stop, the
    first EOS after the first start - 1; [MASK]s of columns never generated dropped; a sample the entropy stop
    ended loses its last window, the official legacy truncation: sampling.EntropyStop.cut), text, tokens_per_s,
    tokens_per_step, nfe."""
    samples, options = [], settings.options
    settings = dataclasses.replace(settings, temperature=1.0)
    g = torch.Generator(device=device).manual_seed(seed)
    for _ in range(n):
        prompt = torch.tensor([[tok.eos_id]], device=device)          # BOS = EOS (GPT-2, Qwen3, bytes)
        start = max(options.stop_min_tokens if options else 0, 1)       # EOS before start does not stop a row
        stop = eos_stop(tok.eos_id, start)
        stop = EntropyStop(stop) if options and options.stop_entropy > 0 else stop   # reads the entropy cut
        (tokens, stats), sec = timed(device, method.generate, model, prompt, cfg, settings, None, stop, g)
        ids = tokens[0].tolist()
        ends = [j for j in range(start, len(ids)) if ids[j] == tok.eos_id]
        new = [i for i in ids[1:ends[0] if ends else len(ids)] if i != tok.mask_id]
        cut = stop.cut(0) if isinstance(stop, EntropyStop) and stop.ends else None
        if cut is not None:              # stopped by low entropy: the official legacy cut, [MASK]s removed first
            new = [i for i in ids if i != tok.mask_id][1:cut]
        samples.append({"ids": new, "text": tok.decode(new), "tokens_per_s": int(stats["n_gen"].sum()) / sec,
                        "tokens_per_step": stats["tokens_per_step"], "nfe": stats["nfe"]})
    return samples


def eos_stop(eos_id: int, start: int = 1):
    """A sampler stop hook for a 1-token (BOS) prompt: a row stops at an EOS in column >= start, i.e. after the
    first start - 1 new tokens (the official EntropyEosStoppingCriteria: ignore_prompt_eos, confidence_min_tokens)."""
    return lambda tokens, end: torch.stack([(row[start:e] == eos_id).any() for row, e in zip(tokens, end.tolist())])
