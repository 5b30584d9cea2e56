"""The paper's generation metrics under Hugging Face models (eval.py --task unconditional --ppl-model /
--mauve-ref): generative perplexity under any causal LM (the paper's GPT-2 Large) and MAUVE against reference
texts with an encoder's features (the paper's ModernBERT-large), bootstrapped over reference subsets as the
official Table 4.

    hf_gen_ppl(texts, model_name, ...)       exp(mean NLL per token) of the samples under a causal LM, batched
    mauve_score(texts, references, ...)      MAUVE mean and std over n_subsets reference subsets of `subset`
                                             texts
    read_texts(path)                         reference texts: .txt (one a line), .jsonl or .json (str or
                                             {"text"})
    check_installed(...)                     the optional packages (transformers, mauve-text), one error line

transformers and mauve-text are optional (imported here, lazily); a model is a local directory or a Hub id,
loaded without remote code (trust_remote_code stays off), and one that cannot be loaded (offline, a typo), or
a --ppl-model that is not a trained causal LM (check_causal: an encoder such as BERT), is one ValueError line;
eval.py loads both before it samples. A reference file over 256 MiB, or a text over 10^6 characters, is one
line too (read_texts).

Generative perplexity: each sample is scored after the model's BOS (its EOS if it has none), as --ref-ckpt
scores it after ours; a sample longer than the model's context is scored in pieces of context - 1 tokens, each
after a BOS. The samples' own token ids are scored when the model's tokenizer reads every one of them as the
same string as ours (same_tokens: a GPT-2 sample under gpt2-large), else their texts are re-tokenised by the
model's tokenizer (`ppl_retokenised` says which; a text's leading <|endoftext|>, the official's BOS, read as
the model's BOS is the one the text is scored after). The official code has no generative-perplexity evaluator
(official_code_spec.md); this is the usual MDLM / BD3-LM protocol.

MAUVE: the official robust_mauve_bootstrap.py draws n_subsets = 5 subsets of subset = 1000 reference texts
(numpy default_rng(20260701), without replacement within a subset), compares each with the first n =
min(subset size, samples) samples by mauve.compute_mauve (p = references, q = samples, seed 1234 + subset
index, the package's defaults otherwise) and reports the mean and std (ddof 0) of the 5 scores. Features are
mauve-text's own: the encoder's last hidden state (hidden_states[-1]) at the last token of each text,
tokenised with the tokenizer's special tokens and truncated to 1024 tokens (or the encoder's context).
Official fact: the code calls compute_mauve(p_text, q_text) without featurize_model_name, i.e. mauve-text's
default gpt2-large, while its docstring and the paper say ModernBERT-large; the default here is the paper's,
`--mauve-encoder gpt2-large` gives the code's. A reference file with fewer than `subset` texts gives subsets
of all of them (reordered).
"""
import json
import math

import numpy as np
import torch

from data.files import read_capped

MAUVE_ENCODER = "answerdotai/ModernBERT-large"
REFERENCE_SEED, MAUVE_SEED = 20260701, 1234          # the official Table 4 bootstrap seeds


# ----------------------------------------------------------------------------- loading (optional packages)

def check_installed(ppl: bool, mauve: bool) -> None:
    """ValueError (one line) when a metric asked for lacks its optional package."""
    needs = ([("generative perplexity", "transformers")] * ppl
             + [("MAUVE", "mauve"), ("MAUVE", "transformers")] * mauve)
    for metric, module in needs:
        try:
            __import__(module)
        except ImportError:
            package = "mauve-text" if module == "mauve" else module
            raise ValueError(f"{metric} needs the optional package {package}: pip install "
                             f"{package}") from None


def load(kind: str, name: str, device, flag: str):
    """(model, tokenizer) of a Hub id or local directory: kind "causal" (AutoModelForCausalLM) or "encoder"
    (AutoModel), float32, eval mode, on device. No remote code. A failure is one ValueError line naming flag;
    so is a "causal" model that is not one (check_causal)."""
    check_installed(kind == "causal", kind != "causal")
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer
    auto = AutoModelForCausalLM if kind == "causal" else AutoModel
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        model, info = auto.from_pretrained(name, dtype=torch.float32, output_loading_info=True)
    except (OSError, ValueError, KeyError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(f"{flag} {name}: cannot load it ({first[:200]}); give a local directory or a Hub id "
                         f"(the Hub needs the network)") from None
    model = model.to(device).eval()
    if kind == "causal":
        check_causal(model, sorted(info.get("missing_keys") or []), name, flag)
    return model, tokenizer


@torch.no_grad()
def check_causal(model, missing: list, name: str, flag: str) -> None:
    """A generative-perplexity scorer must be a causal LM whose head was trained (ValueError, one line): no
    weight left out of its checkpoint (transformers initialises those at random: an encoder's missing LM
    head), and each position's prediction blind to later tokens (changing the last of 8 tokens moves no
    earlier logit: a BERT loaded as BertLMHeadModel attends both ways)."""
    if missing:
        raise ValueError(f"{flag} {name}: not a trained causal LM ({len(missing)} weights, e.g. "
                         f"{missing[0]}, are not in its checkpoint and would be random); give a causal LM "
                         f"such as gpt2-large")
    V = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else 2
    device = next(model.parameters()).device
    x = (torch.arange(1, 9, device=device) % V)[None]                          # (1, 8)
    y = x.clone()
    y[0, -1] = (y[0, -1] + 1) % V
    a, b = (model(input_ids=t, attention_mask=torch.ones_like(t)).logits[0, :-1].float() for t in (x, y))
    if not torch.allclose(a, b, atol=1e-4, rtol=1e-4):
        raise ValueError(f"{flag} {name}: not a causal LM (its predictions see the tokens after them: an "
                         f"encoder such as BERT); give a causal LM such as gpt2-large")


MAX_REF_BYTES = 256 << 20      # a --mauve-ref file: 256 MiB (OWT's validation texts are ~40 MB)
MAX_TEXT_CHARS = 1_000_000     # a reference text (MAUVE reads its first 1024 tokens)


def read_texts(path: str) -> list[str]:
    """Reference texts, blank ones dropped (the official _load_text_corpus): .jsonl (one string or {"text":
    ...} a line), .json (a list of those, or eval.py --json output: its "samples"), else one text a line. A
    file over MAX_REF_BYTES (or endless: /dev/zero) or a text over MAX_TEXT_CHARS is one ValueError line."""
    raw = read_capped(path, MAX_REF_BYTES, "--mauve-ref", "MAUVE compares 5 subsets of 1000 texts: give a "
                      "file of a few thousand texts")
    try:
        if path.endswith(".jsonl"):
            items = [json.loads(line) for line in raw.splitlines() if line.strip()]
        elif path.endswith(".json"):
            items = json.loads(raw)
            items = items["samples"] if isinstance(items, dict) and "samples" in items else items
        else:
            items = raw.splitlines()
        texts = [x["text"] if isinstance(x, dict) else x for x in items]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--mauve-ref {path}: not a list of texts or {{\"text\": ...}} objects "
                         f"({e})") from None
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        raise ValueError(f"--mauve-ref {path} holds no text")
    longest = max(range(len(texts)), key=lambda i: len(texts[i]))
    if len(texts[longest]) > MAX_TEXT_CHARS:
        raise ValueError(f"--mauve-ref {path}: text {longest + 1} holds {len(texts[longest]):,} characters, "
                         f"more than {MAX_TEXT_CHARS:,} (MAUVE reads a text's first 1024 tokens): one "
                         f"document a line")
    return texts


# ----------------------------------------------------------------------------- generative perplexity

def same_tokens(tok, hf_tok, ids: list[list[int]]) -> bool:
    """Whether hf_tok reads every token id of the samples as our tokenizer tok does: the same EOS id, and
    every other id present decodes to the same string under both (then the ids are scored as generated)."""
    if hf_tok.eos_token_id != tok.eos_id:
        return False
    used = {i for row in ids for i in row} - {tok.eos_id}
    n = len(hf_tok)
    return all(i < n and hf_tok.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
               == tok.decode([i]) for i in sorted(used))


@torch.no_grad()
def batch_nll(model, rows: list[list[int]], pad: int, device) -> tuple[float, int]:
    """(summed NLL in nats, tokens scored) of rows of ids, each token after the first given the ones before
    it, in one right-padded forward (padding masked out and never scored)."""
    T = max(len(r) for r in rows)
    x = torch.tensor([r + [pad] * (T - len(r)) for r in rows], device=device)                  # (B, T)
    real = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows], device=device)
    logits = model(input_ids=x, attention_mask=real).logits.float()[:, :-1]
    logp = torch.log_softmax(logits, -1)   # (B, T-1, V)
    nll = -logp.gather(-1, x[:, 1:, None]).squeeze(-1) * real[:, 1:]
    return float(nll.sum()), int(real[:, 1:].sum())


def hf_gen_ppl(texts: list[str], model_name: str, batch_size: int = 8, device="cpu", ids=None, tok=None,
               loaded=None) -> dict:
    """Generative perplexity of the samples (texts, and their token ids under tok when given) under the causal
    LM model_name (loaded: its (model, tokenizer) from load, else loaded here): exp(summed NLL / tokens) over
    all samples, batch_size pieces per forward (module docstring)."""
    model, hf_tok = loaded or load("causal", model_name, device, "--ppl-model")
    bos = hf_tok.bos_token_id if hf_tok.bos_token_id is not None else hf_tok.eos_token_id
    if bos is None:
        raise ValueError(f"--ppl-model {model_name}: its tokenizer has no BOS or EOS token to score a sample "
                         f"after")
    own = ids is not None and tok is not None and same_tokens(tok, hf_tok, ids)
    seqs = [list(r) for r in ids] if own else [hf_tok(t, add_special_tokens=False)["input_ids"]
                                               for t in texts]
    seqs = [s[1:] if s[:1] == [bos] and not own else s for s in seqs]    # a text's own BOS: the one scored
                                                                         # after
    ctx = getattr(model.config, "max_position_embeddings", None) or 1024
    pieces = [[bos] + s[k:k + ctx - 1] for s in seqs for k in range(0, len(s), ctx - 1)]
    nll, count = 0.0, 0
    for k in range(0, len(pieces), batch_size):
        a, b = batch_nll(model, pieces[k:k + batch_size], bos, device)
        nll, count = nll + a, count + b
    if count == 0:
        raise ValueError("the samples hold no token to score under --ppl-model")
    return {"gen_ppl_hf": math.exp(nll / count), "gen_nll_hf": nll / count, "ppl_model": model_name,
            "ppl_retokenised": not own, "ppl_tokens": count}


# ----------------------------------------------------------------------------- MAUVE

@torch.no_grad()
def features(model, tokenizer, texts: list[str], batch_size: int, device,
             max_length: int = 1024) -> np.ndarray:
    """mauve-text's features (its featurize_tokens_from_model): the last hidden state at each text's last
    token, the text tokenised with special tokens and truncated to max_length (or the model's context).
    (n, d)"""
    max_length = min(max_length, getattr(model.config, "max_position_embeddings", None) or max_length)
    ids = [tokenizer(t, truncation=True, max_length=max_length)["input_ids"] for t in texts]
    out = []
    for k in range(0, len(ids), batch_size):
        rows = ids[k:k + batch_size]
        T = max(len(r) for r in rows)
        x = torch.tensor([r + [0] * (T - len(r)) for r in rows], device=device)
        real = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows], device=device)
        h = model(input_ids=x, attention_mask=real, output_hidden_states=True).hidden_states[-1]   # (B, T, d)
        out.append(h[torch.arange(len(rows)), torch.tensor([len(r) - 1 for r in rows])].float().cpu())
    return torch.cat(out).numpy()


def mauve_score(texts: list[str], references: list[str], encoder: str = MAUVE_ENCODER, n_subsets: int = 5,
                subset: int = 1000, device="cpu", batch_size: int = 8, reference_seed: int = REFERENCE_SEED,
                seed: int = MAUVE_SEED, loaded=None) -> dict:
    """MAUVE of the samples against n_subsets reference subsets (the official bootstrap, module docstring):
    {"mauve": mean, "mauve_std": std (ddof 0), "mauve_scores": per subset, "mauve_n": texts compared, ...}."""
    check_installed(False, True)
    import mauve
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ValueError("MAUVE: every sample is empty")
    rng = np.random.default_rng(reference_seed)
    size = min(subset, len(references))
    subsets = [rng.choice(len(references), size=size, replace=False).tolist() for _ in range(n_subsets)]
    n = min(size, len(texts))
    model, tokenizer = loaded or load("encoder", encoder, device, "--mauve-encoder")
    used = sorted({i for s in subsets for i in s[:n]})
    ref_feats = dict(zip(used, features(model, tokenizer, [references[i] for i in used], batch_size, device)))
    q = features(model, tokenizer, texts[:n], batch_size, device)
    scores = []
    for k, s in enumerate(subsets):
        p = np.stack([ref_feats[i] for i in s[:n]])
        scores.append(float(mauve.compute_mauve(p_features=p, q_features=q, seed=seed + k,
                                                verbose=False).mauve))
    return {"mauve": float(np.mean(scores)), "mauve_std": float(np.std(scores)), "mauve_scores": scores,
            "mauve_n": n, "mauve_encoder": encoder, "mauve_subsets": n_subsets}
