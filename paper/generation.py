"""The paper's open-generation metrics (eval.py --task unconditional): samples from BOS alone
(common/unconditional.py, with the official OWT options and stop rules) scored as the paper's Table
4 scores them: a sample whose unigram entropy is < 4 nats or whose length is <= 50 tokens is redrawn
(official_keep, the official uncond_gen_ppl.py filter; --no-redraw keeps them, `redrawn` counts them), and the
scored text is the official's tokenizer.decode of its output, <|endoftext|> (the BOS) first and the
<|endoftext|> that ended it last.

    evaluate_unconditional(...)   generative perplexity under a reference AR checkpoint, unigram entropy,
                                  tokens/step, tokens/s (batch 1), and the texts (MAUVE and generative
                                  perplexity under Hugging Face models: paper/hf_metrics.py)
    check_reference(...)          the reference checkpoint must be AR, of the samples' data and tokenizer,
                                  long enough
    load_scorers(args, ...)       every scorer given, loaded and checked before sampling
    run(args, ...)                eval.py --task unconditional: the samples scored by every scorer given
"""
import dataclasses
import math
from collections import Counter

import torch

from common import checkpoint
from common.eval_args import unconditional_tokens
from common.unconditional import Refused, unconditional
from data import PRESETS, get_corpus, get_tokenizer, is_corpus, sampler_preset
from sampling import Settings
from paper import hf_metrics


# ----------------------------------------------------------------------------- scoring unconditional samples

def unigram_entropy(ids) -> float:
    """Entropy (nats) of the unigram distribution of one sample's tokens, -sum_v p_v log p_v with p_v = count
    of v / len(ids): low when a sample repeats itself (0 for one token repeated; 0 for an empty sample)."""
    n = len(ids)
    return -sum(c / n * math.log(c / n) for c in Counter(ids).values()) if n else 0.0


def check_reference(config: dict, ref_config: dict, ref_path: str, max_new: int) -> None:
    """The --ref-ckpt that scores the samples must be AR (an exact likelihood), trained on the samples' data
    with their tokenizer, and hold the BOS and max_new tokens in its context (ValueError: one line)."""
    if not checkpoint.METHODS[ref_config["method"]].EXACT_NLL:
        raise ValueError(f"--ref-ckpt {ref_path} is a {ref_config['method']} checkpoint: generative "
                         f"perplexity needs an AR model (its likelihood is exact); give an AR checkpoint "
                         f"trained on the same data")
    if ref_config["tokenizer"] != config["tokenizer"]:
        raise ValueError(f"--ref-ckpt {ref_path} uses the {ref_config['tokenizer']} tokenizer, the samples "
                         f"are {config['tokenizer']} tokens: give an AR checkpoint trained with the "
                         f"{config['tokenizer']} tokenizer")
    if ref_config["data"] != config["data"]:
        raise ValueError(f"--ref-ckpt {ref_path} was trained on {ref_config['data']}, the samples' "
                         f"checkpoint on {config['data']}: give an AR checkpoint trained on {config['data']}")
    if 1 + max_new > ref_config["seq_len"]:
        raise ValueError(f"--ref-ckpt {ref_path} has a context of {ref_config['seq_len']} tokens, fewer than "
                         f"the BOS and {max_new} new tokens: pass --max-new-tokens "
                         f"{ref_config['seq_len'] - 1} or less")


@torch.no_grad()
def reference_nll(ref, bos: int, ids: list, device) -> tuple[float, int]:
    """(summed NLL in nats, number of tokens) of ids after BOS under ref = (model, method, cfg), an AR model:
    its exact nll(), position 0 (the BOS) context only."""
    model, method, cfg = ref
    x0 = torch.tensor([[bos] + list(ids)], device=device)                     # (1, 1 + n)
    prompt_mask = torch.zeros_like(x0, dtype=torch.bool)
    prompt_mask[:, 0] = True
    nll, n = method.nll(model, x0, cfg, prompt_mask, torch.zeros_like(prompt_mask))
    return float(nll.sum()), int(n.sum())


REDRAW_ENTROPY, REDRAW_LENGTH = 4.0, 50     # the official filter: a sample with entropy < 4 or length <= 50


def official_keep(sample: dict, eos_id: int) -> bool:
    """The official uncond_gen_ppl.py filter (_should_reject_generated_sample), negated: a sample is kept when
    the unigram entropy of its raw tokens, EOS left out (its _compute_entropy drops pad = EOS), is >= 4 nats
    and its scored sequence (BOS, the kept tokens, the EOS that ended it) is longer than 50 tokens."""
    entropy = unigram_entropy([i for i in sample["raw"] if i != eos_id])
    return entropy >= REDRAW_ENTROPY and 1 + len(sample["ids"]) + sample["eos"] > REDRAW_LENGTH


def check_redraw(max_new: int) -> None:
    """A run whose every sample the filter would refuse, before any sampling (ValueError: one line): entropy
    >= 4 nats needs more than e^4 (54.6) distinct tokens."""
    need = math.ceil(math.exp(REDRAW_ENTROPY))
    if max_new < need:
        raise ValueError(f"--max-new-tokens {max_new}: every sample would be redrawn (the official filter "
                         f"redraws a sample whose unigram entropy is < {REDRAW_ENTROPY:g} nats, which needs "
                         f"{need} distinct tokens, or that holds <= {REDRAW_LENGTH} tokens): pass "
                         f"--max-new-tokens {need} or more, or --no-redraw to score the samples as drawn")


def scored_text(tok, ids: list, eos: bool) -> str:
    """The text the official scores (tokenizer.decode of its output): <|endoftext|> (the BOS), the sample with
    any EOS inside it written out, and the <|endoftext|> that ended it (eos)."""
    eos_text = tok.enc.decode([tok.eos_id])
    pieces, piece = [], []
    for i in ids:
        if i == tok.eos_id:
            pieces.append(tok.decode(piece))
            piece = []
        else:
            piece.append(i)
    return eos_text + eos_text.join([*pieces, tok.decode(piece)]) + eos_text * eos


def evaluate_unconditional(model, method, cfg, tok, ref, n, settings: Settings, device, seed=0, warmup=0,
                           redraw=True, stops=True) -> dict:
    """eval.py --task unconditional: warmup + n samples from BOS at batch 1 (the first warmup only time the
    start), the last n scored, each redrawn until the official filter keeps it (official_keep; redraw=False:
    as drawn). Scored as the official scores them: the BOS, the sample and the EOS that ended it (ids + [EOS],
    scored_text). Generative perplexity = exp(the reference model's NLL summed over all their tokens / their
    number) when ref is given (None: none; paper/hf_metrics.py scores under Hugging Face models); the mean
    unigram entropy per sample, tokens/step, tokens/s (batch 1), the texts and their ids (sample_ids), and
    each sample as eval.py --replies writes it ("records"). stops=False: no stop rule (a throughput run)."""
    keep = (lambda s: official_keep(s, tok.eos_id)) if redraw else None
    try:
        samples = unconditional(model, method, cfg, tok, warmup + n, settings, device, seed, keep,
                                stops)[warmup:]
    except Refused as e:
        raise ValueError(f"{e} by the official filter (unigram entropy < {REDRAW_ENTROPY:g} nats or <= "
                         f"{REDRAW_LENGTH} tokens, made for GPT-2 tokens of OpenWebText): pass --no-redraw "
                         f"to score the samples as drawn") from None
    ids = [s["ids"] + [tok.eos_id] * s["eos"] for s in samples]
    count = sum(map(len, ids))
    if count == 0:
        raise ValueError(f"the {n} samples hold no token to score (each stopped at once): raise -n or "
                         f"--max-new-tokens")
    ppl, nlls = {}, [None] * n
    if ref is not None:
        nlls = [reference_nll(ref, tok.eos_id, x, device)[0] for x in ids]
        ppl = {"gen_ppl": math.exp(sum(nlls) / count), "gen_nll": sum(nlls) / count}
    rates = [s["tokens_per_s"] for s in samples]
    mean = sum(rates) / n
    texts = [scored_text(tok, s["ids"], s["eos"]) for s in samples]
    records = [{"index": k, "prompt": tok.enc.decode([tok.eos_id]), "reply": text, "tokens": len(x),
                "eos": s["eos"], "redrawn": s["redrawn"],
                "scores": {"entropy": unigram_entropy(s["ids"]), "tokens_per_s": s["tokens_per_s"],
                           **({"gen_nll": nll / max(len(x), 1)} if nll is not None else {})}}
               for k, (s, x, text, nll) in enumerate(zip(samples, ids, texts, nlls))]
    return {**ppl, "entropy": sum(unigram_entropy(s["ids"]) for s in samples) / n,
            "tokens_per_step": sum(s["tokens_per_step"] for s in samples) / n, "tokens_per_s": mean,
            "tokens_per_s_std": (sum((r - mean) ** 2 for r in rates) / n) ** 0.5,
            "sample_tokens": count / n, "nfe": sum(s["nfe"] for s in samples), "n": n, "redraw": redraw,
            "redrawn": sum(s["redrawn"] for s in samples), "samples": texts, "sample_ids": ids,
            "records": records}


# ----------------------------------------------------------------------------- eval.py --task unconditional

def load_scorers(args, config: dict, device, max_new: int) -> dict:
    """Every scorer eval.py --task unconditional was given, loaded and checked before any sample is drawn (a
    bad one is one ValueError line): the --ref-ckpt AR model (check_reference), the --ppl-model causal LM, the
    --mauve-ref texts and the --mauve-encoder. Returns {"ref", "ppl", "references", "encoder"}, None if not
    given."""
    out = dict.fromkeys(("ref", "ppl", "references", "encoder"))
    if args.mauve_ref and is_corpus(args.mauve_ref):
        out["references"] = corpus_references(args.mauve_ref, args.data_dir)
    elif args.mauve_ref:
        out["references"] = hf_metrics.read_texts(args.mauve_ref)
    if args.ref_ckpt:
        try:
            ref_model, ref_method, ref_cfg, ref_config = checkpoint.load(args.ref_ckpt, device)
        except (FileNotFoundError, ValueError) as e:
            raise ValueError(f"--ref-ckpt: {e}") from None
        check_reference(config, ref_config, args.ref_ckpt, max_new)
        out["ref"] = (ref_model, ref_method, ref_cfg)
    if args.ppl_model:
        out["ppl"] = hf_metrics.load("causal", args.ppl_model, device, "--ppl-model")
    if args.mauve_ref:
        out["encoder"] = hf_metrics.load("encoder", args.mauve_encoder or hf_metrics.MAUVE_ENCODER, device,
                                         "--mauve-encoder")
    return out


class RowTexts:
    """A corpus' held-out rows as MAUVE's reference texts, each decoded when it is read (the official Table 4
    reads its OWT validation rows, GPT-2 tokens of the wrapped `.dat` file, decoded with special tokens)."""

    def __init__(self, rows, tok):
        self.rows, self.tok = rows, tok

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.tok.enc.decode([int(t) for t in self.rows[i]])


def corpus_references(name: str, data_dir) -> RowTexts:
    """--mauve-ref owt (a corpus): its held-out rows in its own tokenizer, from --data-dir or the Hub, as the
    references the official Table 4 bootstrap draws its subsets from (hf_metrics.mauve_score)."""
    corpus = get_corpus(name)
    tok = get_tokenizer(corpus.TOKENIZER)
    return RowTexts(corpus.load("test", data_dir, tok, corpus.SEQ_LEN), tok)


def run(args, model, method, cfg, config: dict, device, settings: Settings) -> dict:
    """eval.py --task unconditional (its args): every scorer loaded first (load_scorers), then -n samples from
    BOS alone at batch 1 with the official OWT sampler options, redrawn by the official filter unless
    --no-redraw, scored by the --ref-ckpt AR model (evaluate_unconditional), a Hugging Face causal LM
    (--ppl-model) and MAUVE against --mauve-ref (paper/hf_metrics.py), each when given; sample 0 printed.
    Returns the metrics."""
    max_new = unconditional_tokens(args.max_new_tokens, config["seq_len"])
    redraw = not (args.no_redraw or args.throughput_run)
    if redraw:
        check_redraw(max_new)
    scorers = load_scorers(args, config, device, max_new)
    tok = get_tokenizer(config["tokenizer"])
    corpus = config["data"] if is_corpus(config["data"]) and config["data"] in PRESETS else "owt"
    options = sampler_preset(corpus, tok, method)             # LM1B's own options, else OWT's (Table 4)
    if args.throughput_run:                 # the official throughput runs: no stopping criteria at all
        options = dataclasses.replace(options, stop_confidence=0.0, stop_entropy=0.0)
    settings = dataclasses.replace(settings, max_new_tokens=max_new,
                                   paper=dataclasses.replace(settings.paper, options=options))
    m = evaluate_unconditional(model, method, cfg, tok, scorers["ref"], args.n, settings, device, args.seed,
                               args.warmup, redraw=redraw, stops=not args.throughput_run)
    ids = m.pop("sample_ids")
    if args.ppl_model:
        m.update(hf_metrics.hf_gen_ppl(m["samples"], args.ppl_model, args.batch_size, device, ids, tok,
                                       loaded=scorers["ppl"]))
    if args.mauve_ref:
        m.update(hf_metrics.mauve_score(m["samples"], scorers["references"],
                                        args.mauve_encoder or hf_metrics.MAUVE_ENCODER, device=device,
                                        batch_size=args.batch_size, loaded=scorers["encoder"]))
    print(f"--- sample 0 of {args.n}{' (all in --json)' if args.json else ''}\n{m['samples'][0]}\n---")
    return {**m, "ref_ckpt": args.ref_ckpt, "max_new_tokens": max_new, "warmup": args.warmup,
            **({"throughput_run": True} if args.throughput_run else {})}
