"""ROCStories infilling (the paper's Table 2): five-sentence stories from the Story Cloze validation set
(spring 2016), the middle sentence (sentences=1) or sentences 2-4 (sentences=3) masked, with the oracle span
length, filled zero-shot by a model trained on OpenWebText (GPT-2 tokens), scored by ROUGE against the
reference sentence(s).

    file:  <data_dir>/cloze_test_val__spring2016.csv (the official eval_datasets/ file name). The set needs a
           form to download: https://cs.rochester.edu/nlp/rocstories/ ("Story Cloze Test Spring 2016 val").
    row:   InputStoryid, InputSentence1..4, RandomFifthSentenceQuiz1, RandomFifthSentenceQuiz2,
           AnswerRightEnding
           -> the story = sentences 1-4 + the right fifth sentence.
    input: [BOS] + left + [MASK] * |middle tokens| + right + [EOS]   (official), sentences joined by spaces.

Tokenizer-agnostic: `examples(tok, ...)` returns token ids for whatever tokenizer the checkpoint uses.
"""
import csv
import os

from sampling import SamplerOptions

NAME = "rocstories"
FILE = "cloze_test_val__spring2016.csv"
WHERE = "https://cs.rochester.edu/nlp/rocstories/ (Story Cloze Test, Spring 2016 validation set; a form)"


def load(split: str = "test", data_dir: str | None = None) -> list[list[str]]:
    """The stories (five sentences each) of the CSV in data_dir; split is ignored (there is one set)."""
    path = os.path.join(data_dir or ".", FILE)
    if data_dir is None or not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: pass --data-dir with the Story Cloze CSV "
                                f"{FILE}, from {WHERE}")
    from data.cnndm import require_rouge
    require_rouge()
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    try:
        return [[r[f"InputSentence{i}"].strip() for i in range(1, 5)]
                + [r[f"RandomFifthSentenceQuiz{r['AnswerRightEnding'].strip()}"].strip()] for r in rows]
    except KeyError as e:
        raise ValueError(f"{path}: not the Story Cloze format (no column {e}); expected InputSentence1..4, "
                         f"RandomFifthSentenceQuiz1/2, AnswerRightEnding") from None


def split_story(story: list[str], sentences: int) -> tuple[str, str, str]:
    """(left, middle, right) text: the middle sentence (1) or sentences 2-4 (3) masked."""
    if sentences not in (1, 3):
        raise ValueError(f"--sentences must be 1 or 3, got {sentences}")
    lo, hi = (2, 3) if sentences == 1 else (1, 4)
    return " ".join(story[:lo]), " " + " ".join(story[lo:hi]), " " + " ".join(story[hi:])


def examples(tok, stories: list[list[str]], sentences: int) -> list[dict]:
    """Token ids per story: left (with BOS), span (the reference middle), right (with EOS), and its text."""
    out = []
    for story in stories:
        left, middle, right = split_story(story, sentences)
        out.append({"left": [tok.eos_id] + tok.encode(left), "span": tok.encode(middle),
                    "right": tok.encode(right) + [tok.eos_id], "answer": middle.strip()})
    return out


# ----------------------------------------------------------------------------- the paper's sampler presets

# The official code holds two ROCStories recipes and the paper does not say which gave its Table 2; make
# reproduce-infill runs both. Each: the repetition penalty for 1 and for 3 sentences, whether the penalty
# counts the visible right context (INFILL_REPETITION_PENALTY_INCLUDE_RIGHT_CONTEXT), and whether Set
# Diffusion caches the right context before it fills the span (CACHE_FULL_INFILL_CONTEXT: without it the
# official caches the left context only and the right one once the span is decoded, so the span never sees
# it; the flag is its Set Diffusion sampler's alone, paper/infill.py infill).
RECIPES = {
    # bash_scripts/repro_paper_infill_rouge_tput_h100.sh ("Paper Table 2 ... on one H100")
    "h100": {"penalty": {1: 1.2, 3: 1.2}, "penalize_right": True, "right_cached": True},
    # scripts/eval/repro_suite_runner.py's infilling rows (INFILL1/INFILL3_REPEAT_PENALTY, legacy env), the
    # defaults of bash_scripts/run_seq2seq_eval_infill_nlp.sh's penalty
    "suite": {"penalty": {1: 1.1, 3: 1.5}, "penalize_right": False, "right_cached": False},
}


def sampler_options(tok, method, sentences: int = 1, recipe: str = "h100") -> SamplerOptions:
    """The official ROCStories infilling options of a recipe (RECIPES): its repetition penalty for that many
    sentences, and what the penalty counts besides the reply (penalize_context): the visible context, right
    context included, in the H100 wrapper's; in the suite's, the left context where the official counts it
    (AR: Hugging Face generate's input, method.HF_GENERATE; Set Diffusion, a window in its KNOBS: its cached
    left context, the prompt it fills from), else what the sampler counts without the right-context flag. The
    diffusion samplers leave the pad id (GPT-2's EOS, the story's BOS and EOS) out of it; the official AR
    counts it."""
    r = RECIPES[recipe]
    left_only = not r["right_cached"] and "setdiffusion_window" in method.KNOBS
    return SamplerOptions(repetition_penalty=r["penalty"][sentences],
                          penalize_context=r["penalize_right"] or method.HF_GENERATE or left_only,
                          pad_id=-1 if method.HF_GENERATE or left_only else tok.pad_id)
