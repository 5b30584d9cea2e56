"""lm1b: the One Billion Word benchmark, bert-base-uncased WordPiece rows of L = 128, for likelihood
(eval.py --task likelihood --data lm1b).

As the official files (`lm1b_{train,test}_bs128_wrapped.dat`, made by the BD3-LM/MDLM dataloader): the
sentences go through its LM1B detokenizer (below), each is followed by [SEP], and the stream is cut, per 1000
sentences, into rows of [CLS] + 126 tokens + [SEP] (data/corpus.py; the builder's BOS is BERT's [CLS], its EOS
[SEP]). Splits: "test" (the evaluation split) and "train". Source: the Hub's billion-word-benchmark/lm1b (its
parquet conversion) or --data-dir with a local copy (<split>*.parquet / *.jsonl, or any such file, with a
"text" column). Rows are cached per tokenizer name: lm1b_<split>_L128.bin for bert-base-uncased, and e.g.
lm1b-bert-kuleshov-group-lm1b-mdlm_<split>_L128.bin for a release's own copy of it (each release's rows are
checked against its own tokenizer, so the 8 releases of make reproduce-likelihood each build theirs).

Of the task interface: NAME, SEQ_LEN, TOKENIZER, and load(split, data_dir), which returns the token rows (N,
L); batch() makes the methods' batch. No generation: no SCORES, is_correct or is_finished. RECIPES: the
official likelihood's two recipes (eval.py --recipe), which agree on LM1B.
"""
import os
import re

from data import corpus
from sampling import SamplerOptions

NAME = "lm1b"
SEQ_LEN = 128
TOKENIZER = "bert-base-uncased"
HUB = ("billion-word-benchmark/lm1b", "plain_text")


def detokenize(x: str) -> str:
    """The official lm1b_detokenizer: undo the corpus' spaces around punctuation."""
    x = x.replace("http : / / ", "http://").replace("https : / / ", "https://")
    x = re.sub(r" \'(\w+)", r"'\1", x)
    x = re.sub(r" (\w+) \. ", r" \1. ", x)
    x = re.sub(r" (\w+) \.$", r" \1.", x)
    x = x.replace(" ? ", "? ")
    x = re.sub(r" \?$", "?", x)
    x = x.replace(" ! ", "! ")
    x = re.sub(r" \!$", "!", x)
    x = x.replace(" , ", ", ").replace(" : ", ": ").replace(" ; ", "; ").replace(" / ", "/")
    x = re.sub(r"\" ([^\"]+) \"", r'"\1"', x)
    x = re.sub(r"\' ([^\']+) \'", r"'\1'", x)
    x = re.sub(r"\( ([^\(\)]+) \)", r"(\1)", x)
    x = re.sub(r"\[ ([^\[\]]+) \]", r"[\1]", x)
    return x.replace("$ ", "$").replace("£ ", "£")


def load(split: str, data_dir: str | None = None, tok=None, L: int = SEQ_LEN):
    """Token rows (N, SEQ_LEN) of "test" or "train", built and cached on first use
    (tokenized with tok, default TOKENIZER; rows of L, default SEQ_LEN)."""
    from data import get_tokenizer
    if split not in ("train", "test"):
        raise ValueError(f"lm1b has the splits train and test, not {split!r}")
    if data_dir is not None and not os.path.isdir(data_dir):
        corpus.cache_dir(data_dir)                        # a file: one line that says so
        raise FileNotFoundError(f"--data-dir {data_dir}: no such folder")
    tok = tok or get_tokenizer(TOKENIZER)
    # a release's own copy of the WordPiece (bert:<repo>) caches its rows apart: one name per cache file
    name = NAME if tok.name == TOKENIZER else NAME + "-" + re.sub(r"[^A-Za-z0-9._-]+", "-", tok.name)
    path = corpus.cache_path(name, split, L, data_dir)
    return corpus.cached(path, tok, L, lambda: corpus.read_texts(data_dir, (*HUB, split), split)["text"],
                         bos=bos(tok), detokenize=detokenize)


def bos(tok) -> int:
    """The token every row starts with: BERT's [CLS] (prompts on an LM1B checkpoint start with it too)."""
    return tok.enc.token_to_id("[CLS]")


batch = corpus.batch


# ----------------------------------------------------------------------------- the likelihood's recipes

# data/owt.py's two recipes, which agree on LM1B: the suite runner's LM1B rows (build_lm1b_ppl_env) pass no
# MAX_BLOCK_SIZE, so both run run_likelihood_eval_lm1b.sh's default, Set Diffusion's smax = 2d.
RECIPES = {
    "script": {"smax": "2d", "about": "the official likelihood script (run_likelihood_eval_lm1b.sh): Set "
                                      "Diffusion's orders at smax = 2d, the paper's schedule"},
    "suite": {"smax": "2d", "about": "the official suite runner's rows (repro_suite_runner.py), which on "
                                     "LM1B pass the script no MAX_BLOCK_SIZE: smax = 2d, as the script"},
}


# ----------------------------------------------------------------------------- the paper's sampler preset

def sampler_options(tok, method) -> SamplerOptions:
    """The official unconditional LM1B samples (repro_suite_runner.py build_lm1b_uncond_env, delegating to
    run_uncond_gen_ppl_owt.sh): repetition penalty 1.05 for every method, no top-p (NUCLEUS_P 1.0), the
    low-confidence stop 0.005 with 4 strikes after 128 tokens and the entropy stop (which 127 new tokens after
    the BOS never reach). Its throughput runs (the only LM1B rows the paper reports) drop every stop rule."""
    return SamplerOptions(repetition_penalty=1.05, stop_confidence=0.005, stop_patience=4,
                          stop_min_tokens=128, stop_entropy=4.0, stop_entropy_window=128)
