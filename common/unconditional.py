"""Samples from BOS alone (eval.py --task unconditional, paper/generation.py): drawn one at a time at batch 1
as the official uncond_gen_ppl.py draws them, with its stop rules (EOS, then low entropy) and its redraws.

    unconditional(model, method, cfg, tok, n, settings, device)   n samples, each a dict (ids, text, ...)
    eos_stop(eos_id, start, mask_id)     the official EOS stop of a sample (EosStop)
"""
import dataclasses
import sys

import torch

from common.metrics import timed
from sampling import EntropyStop, Settings


MAX_REDRAWS = 20        # draws in a row that `keep` refuses before unconditional gives up (Refused)


class Refused(ValueError):
    """MAX_REDRAWS + 1 draws in a row refused by unconditional's keep."""


def unconditional(model, method, cfg, tok, n, settings: Settings, device, seed=0, keep=None,
                  stops=True) -> list[dict]:
    """n samples from BOS alone, one at a time (batch 1), at temperature 1 with settings' options, as the
    official uncond_gen_ppl.py draws them (the official EntropyEosStoppingCriteria: EosStop, then the entropy
    rule; stops=False: no stop rule, as its throughput runs). keep(sample) -> bool, when given: a sample it
    refuses is drawn again (the official redraws a sample whose entropy is < 4 or whose length is <= 50), at
    most MAX_REDRAWS times in a row (then Refused). Per sample (draw): ids, eos, raw, text, tokens_per_s,
    tokens_per_step, nfe, redrawn (draws refused before it)."""
    from tqdm import tqdm
    samples, g = [], torch.Generator(device=device).manual_seed(seed)
    settings = dataclasses.replace(settings, temperature=1.0)
    for k in tqdm(range(n), desc="samples", unit="sample", file=sys.stderr, disable=None, dynamic_ncols=True):
        for redrawn in range(MAX_REDRAWS + 1):
            sample = draw(model, method, cfg, tok, settings, device, g, stops)
            if keep is None or keep(sample):
                break
        else:
            raise Refused(f"sample {k}: {MAX_REDRAWS + 1} draws in a row were refused")
        samples.append({**sample, "redrawn": redrawn})
    return samples


def draw(model, method, cfg, tok, settings: Settings, device, generator, stops=True) -> dict:
    """One sample from BOS alone. ids: the new tokens the official keeps ([MASK]s removed): up to the EOS its
    stop rule ended the sample at (eos True: the official keeps that EOS), else the legacy cut of a sample the
    entropy rule ended (sampling.EntropyStop.cut: its last window dropped), else every generated token (an EOS
    before the first start columns stays). raw: every generated token up to where the sampler stopped,
    [MASK]s removed (what the official measures a sample's entropy on). text: ids decoded. stops=False: no
    stop hook (the official throughput runs': every token drawn; the options' own stops are the caller's)."""
    options = settings.paper.options
    prompt = torch.tensor([[tok.eos_id]], device=device)              # BOS = EOS (GPT-2, Qwen3, bytes)
    start = max(options.stop_min_tokens if options else 0, 1)           # EOS before start does not stop a row
    eos = eos_stop(tok.eos_id, start, tok.mask_id)
    stop = EntropyStop(eos) if options and options.stop_entropy > 0 else eos   # reads the entropy cut
    stop = stop if stops else None
    (tokens, stats), sec = timed(device, method.generate, model, prompt, cfg, settings, None, stop, generator)
    row = tokens[0].tolist()
    raw = [i for i in row[1:] if i != tok.mask_id]
    cut = stop.cut(0) if isinstance(stop, EntropyStop) and stop.ends else None
    if 0 in eos.at:                          # stopped at an EOS with no [MASK] before it: keep up to it
        ids = row[1:eos.at[0]]
    elif cut is not None:                 # stopped by low entropy: the official legacy cut, [MASK]s out first
        ids = [i for i in row if i != tok.mask_id][1:cut]
    else:
        ids = raw
    return {"ids": ids, "eos": 0 in eos.at, "raw": raw, "text": tok.decode(ids),
            "tokens_per_s": int(stats["n_gen"].sum()) / sec, "tokens_per_step": stats["tokens_per_step"],
            "nfe": stats["nfe"]}


class EosStop:
    """A sampler stop hook for a 1-token (BOS) prompt, the official EntropyEosStoppingCriteria's EOS rule
    (var_length, ignore_prompt_eos, num_matches 1): a row decided up to column end stops at its first EOS in a
    column >= min(start, end - 1) (start - 1 = confidence_min_tokens new tokens; the official floor is capped
    by the sequence so far, so an EOS in its last column counts at once: every EOS an AR model writes) once no
    [MASK] is left before that EOS; while one is, it goes on decoding. at: {row: the column of that EOS}."""

    def __init__(self, eos_id: int, start: int = 1, mask_id: int = -1):
        self.eos_id, self.start, self.mask_id, self.at = eos_id, start, mask_id, {}

    def __call__(self, tokens, end):
        done = []
        for b, (row, e) in enumerate(zip(tokens, end.tolist())):
            lo = max(min(self.start, e - 1), 1)
            hits = (row[lo:e] == self.eos_id).nonzero()
            p = lo + int(hits[0]) if len(hits) else -1
            done.append(p >= 0 and not bool((row[1:p] == self.mask_id).any()))
            if done[-1]:
                self.at.setdefault(b, p)
        return torch.tensor(done, device=tokens.device)


def eos_stop(eos_id: int, start: int = 1, mask_id: int = -1) -> EosStop:
    """The EOS stop of unconditional samples (EosStop)."""
    return EosStop(eos_id, start, mask_id)
