"""owt: OpenWebText, GPT-2 tokens wrapped into rows of L = 1024, for likelihood (eval.py --task likelihood
--data owt).

The split as the official code builds it: the OWT release has only a train split; "validation" is its last
100,000 documents (`openwebtext-valid`, train[-100000:]), "train" the rest. The texts go in as they are (no
detokenizer); every document is followed by <|endoftext|> and the stream is cut into rows of 1024 with no BOS
inserted (the `_specialFalse` files), per 1000 documents (data/corpus.py). Source: the Hub's
Skylion007/openwebtext (its parquet conversion), or --data-dir with a local copy (*.parquet / *.jsonl with a
"text" column, all of OWT's train split). Token rows are cached once (data/corpus.py).

Of the task interface: NAME, SEQ_LEN, TOKENIZER, and load(split, data_dir), which returns the token rows (N,
L) instead of prompt/target examples; batch() turns rows into the methods' (x0, prompt_mask, pad_mask). There
is no generation here, so no SCORES, is_correct or is_finished (train.py and generation accuracy do not
apply). RECIPES: the official likelihood's two recipes (eval.py --recipe), which differ in Set Diffusion's
orders.
"""
import os

from data import corpus
from sampling import SamplerOptions

NAME = "owt"
SEQ_LEN = 1024
TOKENIZER = "gpt2"
HUB = ("Skylion007/openwebtext", "plain_text", "train")
VALID_DOCS = 100_000             # the last documents of the train split form the validation split


def load(split: str, data_dir: str | None = None, tok=None, L: int = SEQ_LEN):
    """Token rows (N, SEQ_LEN) of "validation" (also "test") or "train", built and cached on first use
    (tokenized with tok, default TOKENIZER; rows of L, default SEQ_LEN)."""
    from data import get_tokenizer
    split = "validation" if split == "test" else split
    if split not in ("train", "validation"):
        raise ValueError(f"owt has the splits train and validation, not {split!r}")
    tok = tok or get_tokenizer(TOKENIZER)
    path = corpus.cache_path(NAME, split, L, data_dir)
    if data_dir is not None and not os.path.isdir(data_dir):
        raise FileNotFoundError(f"--data-dir {data_dir}: no such folder")

    def texts():
        ds = corpus.read_texts(data_dir, HUB, "train")
        n = len(ds)
        keep = range(max(0, n - VALID_DOCS), n) if split == "validation" else range(0, max(0, n - VALID_DOCS))
        return ds.select(keep)["text"]
    return corpus.cached(path, tok, L, texts)


def bos(tok) -> int:
    """What a prompt starts after: rows have no BOS, and in the stream every document follows an EOS."""
    return tok.eos_id


batch = corpus.batch


# ----------------------------------------------------------------------------- the likelihood's recipes

# The official code holds two OWT likelihood recipes, and the paper does not say which gave its OWT
# perplexities: make reproduce-likelihood runs both (eval.py --recipe). They differ in Set Diffusion's order
# schedule alone (the official passes MAX_BLOCK_SIZE to its Set Diffusion models only), "smax" the official
# max_block_size: "2d", the paper's schedule (setdiffusion.order), or "d", the schedule's other branch (k = 1,
# b = 2A = d / L: setdiffusion.suite_nll). "about": the recipe in the likelihood table's note
# (paper/results.py).
RECIPES = {
    # bash_scripts/run_likelihood_eval_owt.sh run by itself: MAX_BLOCK_SIZE unset, so 2d
    "script": {"smax": "2d", "about": "the official likelihood script (run_likelihood_eval_owt.sh): Set "
                                      "Diffusion's orders at smax = 2d, the paper's schedule"},
    # scripts/eval/repro_suite_runner.py's OWT rows (build_owt_ppl_env): MAX_BLOCK_SIZE = the target's
    # max_window_size, which its Set Diffusion targets set to d
    "suite": {"smax": "d", "about": "the official suite runner's rows (repro_suite_runner.py): Set "
                                    "Diffusion's orders at max_block_size = d (k = 1, b = d / L)"},
}


# ----------------------------------------------------------------------------- the paper's sampler preset

def sampler_options(tok, method) -> SamplerOptions:
    """The official unconditional OWT samples (Table 4): AR (Hugging Face generate, method.HF_GENERATE) top-p
    0.90, no penalty, low-confidence stop 0.005; the diffusion samplers top-p 0.95, repetition penalty 1.05,
    stop 0.01; all: 4 strikes after 128 tokens, and the entropy stop (the last 128 tokens < 4 nats)."""
    ar = method.HF_GENERATE
    return SamplerOptions(top_p=0.90 if ar else 0.95, repetition_penalty=1.0 if ar else 1.05,
                          stop_confidence=0.005 if ar else 0.01, stop_patience=4, stop_min_tokens=128,
                          stop_entropy=4.0, stop_entropy_window=128)
