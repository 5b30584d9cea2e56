"""CNN/DailyMail summarization (`abisee/cnn_dailymail` 3.0.0), as the official seq2seq set-up.

    prompt: <|endoftext|> + article + <|endoftext|>            (BOS + source + EOS, at most 512 tokens)
    target: "Summary: " + highlights                           (+ EOS from encode(), at most 180 tokens)
    answer: highlights                                         (the ROUGE reference)

L = 768 (SEQ_LEN); the Qwen3-0.6B-Base tokenizer (BOS = EOS = pad = <|endoftext|>). Truncation is done in
tokens and the cut text decoded back, so re-encoding the cut word may move a boundary by a token (the budget,
512 + 180 < 768, leaves room). At eval the prompt ends with "Summary:" (the official
cnndm_generate_target_prompt = false path) and a generated "Summary:" is stripped before scoring, as
`strip_generated_target_prompt` does.

Scores: ROUGE-1/2/L/Lsum F-measures per example (SCORES: the `rouge-score` package, the one Hugging Face
`evaluate`'s "rouge" wraps, no stemming as its default), averaged over examples by eval.py. The official
seq2seq_eval reports corpus-level numbers, which `corpus_scores` computes over all completions: ROUGE as
`evaluate`'s "rouge" (rouge_score's BootstrapAggregator, mid F-measure: the median of 1000 bootstrap means,
close to the per-example mean), BLEU as its "sacrebleu" (sacrebleu.corpus_bleu, 13a tokens, exp smoothing,
0-100; an optional package). The official METEOR (nltk with its WordNet data, a download) is not computed.
Stop rule: the official regex stop uses the YAML value `r'<|endoftext|>'`, a plain scalar, so the pattern is
the string r'<|endoftext|>' itself: the alternation of `r'<`, `endoftext` and `>'`; with num_matches 3 over
prompt + reply and the prompt's BOS and EOS giving two "endoftext" matches, it fires at the first generated
<|endoftext|> (or at a literal `r'<` or `>'` in the reply). `is_finished` counts the same matches in the
reply.
"""
import glob
import os
import re

from sampling import SamplerOptions

NAME = "cnndm"
SEQ_LEN = 768
TOKENIZER = "qwen3:Qwen/Qwen3-0.6B-Base"
MAX_SOURCE, MAX_TARGET = 512, 180            # tokens, each with its EOS
BOS = EOS = "<|endoftext|>"
TARGET_PROMPT = "Summary: "
STOP_PATTERN = r"r'<|endoftext|>'"           # the official YAML value, read as a regex
SPLITS = ("train", "validation", "test")


def rows_from_dir(data_dir: str, split: str):
    """The Hub's parquet files of `split` under data_dir (3.0.0/test-00000-of-00001.parquet or flat)."""
    files = sorted(glob.glob(os.path.join(data_dir, "**", f"{split}-*.parquet"), recursive=True))
    if not files:
        raise FileNotFoundError(f"no {split}-*.parquet under {data_dir}: download abisee/cnn_dailymail 3.0.0 "
                                f"(huggingface-cli download abisee/cnn_dailymail --repo-type dataset)")
    import datasets
    return datasets.load_dataset("parquet", data_files=files, split="train")


def cut(tok, text: str, n: int) -> str:
    """text cut to its first n tokens."""
    ids = tok.encode(text)
    return text if len(ids) <= n else tok.decode(ids[:n])


def make_example(tok, article: str, highlights: str, eval_prompt: bool = False) -> dict:
    """One example, truncated as the official: source <= MAX_SOURCE tokens, target <= MAX_TARGET."""
    prompt = BOS + cut(tok, article, MAX_SOURCE - 2) + EOS
    target = cut(tok, TARGET_PROMPT + highlights, MAX_TARGET - 1)
    if eval_prompt:
        prompt, target = prompt + TARGET_PROMPT.rstrip(), target[len(TARGET_PROMPT.rstrip()):]
    return {"prompt": prompt, "target": target, "answer": highlights}


def load(split: str, data_dir: str | None = None, tok=None) -> list[dict]:
    """CNN/DM `split` as {"prompt", "target", "answer"}: from data_dir (the Hub's parquet files) or the Hub.
    tok: the tokenizer that counts the truncation (default TOKENIZER). Test prompts end with "Summary:"."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} for cnndm; choose one of {', '.join(SPLITS)}")
    if split != "train":
        require_rouge()
    if tok is None:
        from data import get_tokenizer
        tok = get_tokenizer(TOKENIZER)
    if data_dir is not None:
        rows = rows_from_dir(data_dir, split)
    else:
        try:
            import datasets
            rows = datasets.load_dataset("abisee/cnn_dailymail", "3.0.0", split=split)
        except Exception as e:   # no network, no cache, ...
            raise FileNotFoundError(f"could not load abisee/cnn_dailymail 3.0.0 from the Hugging Face Hub "
                                    f"({type(e).__name__}): pass --data-dir with its parquet files") from None
    return [make_example(tok, r["article"], r["highlights"], eval_prompt=split != "train") for r in rows]


def strip_target_prompt(completion: str) -> str:
    """The summary alone: cut at the first EOS, a generated leading "Summary:" removed, stripped."""
    text = completion.split(EOS, 1)[0].lstrip()
    prefix = TARGET_PROMPT.rstrip()
    return (text[len(prefix):] if text.startswith(prefix) else text).strip()


SCORERS = {}                                 # kind -> rouge_scorer.RougeScorer, built once


def require_rouge():
    """A ValueError with one line when the optional ROUGE package is missing (checked before any
    generation)."""
    try:
        import rouge_score  # noqa: F401
    except ImportError:
        raise ValueError("ROUGE needs the rouge-score package: pip install rouge-score") from None


def rouge(kind: str):
    """A scorer completion, reference -> ROUGE F-measure of `kind` (rouge1, rouge2, rougeL, rougeLsum)."""
    def score(completion: str, answer: str) -> float:
        require_rouge()
        from rouge_score import rouge_scorer
        scorer = SCORERS.setdefault(kind, rouge_scorer.RougeScorer([kind]))
        return scorer.score(answer, strip_target_prompt(completion))[kind].fmeasure
    return score


def is_correct(completion: str, answer: str) -> bool:
    """No exact answer to match in summarization: a summary 'counts' if it shares any word (ROUGE-1 > 0)."""
    return rouge("rouge1")(completion, answer) > 0


def stop(ids, tok, **opts) -> bool:
    """The official stop on the whole sequence so far (prompt + canvas, [MASK]s included): 3 matches of the
    regex r'<|endoftext|>' in its text (a match holding the [MASK] text would not count; none can here)."""
    return len(re.findall(STOP_PATTERN, tok.enc.decode([i for i in ids if i < tok.vocab_size]))) >= 3


def is_finished(completion: str) -> bool:
    """The official stop: the regex r'<|endoftext|>' matched 3 times over prompt (2 matches) + reply."""
    return len(re.findall(STOP_PATTERN, completion)) >= 1


SCORES = {"rouge1": rouge("rouge1"), "rouge2": rouge("rouge2"), "rougeL": rouge("rougeL"),
          "rougeLsum": rouge("rougeLsum")}
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def corpus_scores(completions: list[str], answers: list[str], seed: int = 0) -> dict:
    """The official seq2seq_eval metrics over a whole test set (completions as generated, answers the
    references): {"rouge1", "rouge2", "rougeL", "rougeLsum"} as Hugging Face evaluate's "rouge" (no stemmer,
    rouge_score's BootstrapAggregator, mid F-measure; its numpy resampling seeded with `seed` here, unseeded
    in the official), and "bleu" as its "sacrebleu" (corpus BLEU, 0-100), left out without the sacrebleu
    package. Summaries are cut as SCORES cuts them (strip_target_prompt). METEOR is not computed."""
    if not completions:
        return {}
    require_rouge()
    import numpy as np
    from rouge_score import rouge_scorer, scoring
    predictions = [strip_target_prompt(c) for c in completions]
    scorer, aggregator = rouge_scorer.RougeScorer(list(ROUGE_TYPES)), scoring.BootstrapAggregator()
    for pred, ref in zip(predictions, answers):
        aggregator.add_scores(scorer.score(ref, pred))
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        result = {k: float(v.mid.fmeasure) for k, v in aggregator.aggregate().items()}
    finally:
        np.random.set_state(state)
    try:
        import sacrebleu
    except ImportError:
        return result
    return {**result, "bleu": float(sacrebleu.corpus_bleu(predictions, [list(answers)],
                                                          smooth_method="exp").score)}


# ----------------------------------------------------------------------------- the paper's sampler preset

def sampler_options(tok, method) -> SamplerOptions:
    """The official CNN/DM decoding options: repetition penalty 1.2 and the exponential length penalty (80,
    1.1). The diffusion samplers penalise the reply (running_generation); the official AR runs decode with
    Hugging Face generate (method.HF_GENERATE), which penalises the prompt too."""
    return SamplerOptions(repetition_penalty=1.2, length_penalty=(80, 1.1), eos_id=tok.eos_id,
                          penalize_context=method.HF_GENERATE,
                          pad_id=-1 if method.HF_GENERATE else tok.pad_id)
