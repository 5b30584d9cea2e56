"""Infilling: fill a [MASK] span between a left and a right context, one example at a time (batch 1, as the
official infill runs), each method as the official runs it: Set Diffusion caches every visible token (left and
right of the span) and fills the span with its window; MDLM decodes the block holding the span
bidirectionally; BD3-LM decodes block-aligned (a block sees only the blocks to its left, plus the visible
tokens of its own; with --official the official's algorithm instead, bd3lm.official_infill); AR continues
the left context for the span's length (it cannot see a right context).

    eval.py --task infill --span step      the shipped task's middle reasoning step: decided by the LEFT
                                           context
    eval.py --task infill --span number    the shipped task's starting amount, masked in the problem statement
                                           with the whole reply visible: decided by the RIGHT context (the
                                           reply's first step starts with it), 40-90 positions to the span's
                                           right
    eval.py --task infill --span operand   the amount of the problem's last action: decided by the reply's
                                           step that uses it, farther right than the starting amount's
    eval.py --task infill --span verb      the verb of the first action, a word: the reply's first step
                                           decides its operation (op_right), not the word (exact)
    eval.py --task rocstories              ROCStories' middle sentence(s) (data/rocstories.py): ROUGE
    eval.py --task infill --span word      a corpus checkpoint (shakespeare, text:PATH, owt, lm1b): one whole
                                           word of
    eval.py --task infill --span line      each held-out row, or one whole line, masked (text_items): exact,
                                           char_accuracy and ROUGE-L of the filled text (TEXT_SCORES)

    infill(...) / evaluate_infill(...)     fill one item / score a list of items: the mean of each scorer,
                                           tokens/step and tokens/s at batch 1 after warm-up
    arith_items(examples, tok, span)       the shipped task's items of one span kind, SPAN_SCORES their
                                           scorers
    text_items(tok, rows, span, limit)     a corpus' items: the word or line nearest each row's middle
    evaluate_text(...)                     eval.py --task infill on a corpus checkpoint
"""
import dataclasses
import importlib.util
import re

import torch

from common.metrics import timed
from data import arith
from sampling import Settings

ARITH_SPANS = ("step", "number", "operand", "verb")


def infill(model, method, cfg, tok, ex, device, settings: Settings, right: bool = True):
    """Fill ex's span between ex["left"] and ex["right"] (token id lists). Returns span ids, stats, seconds.
    A method that cannot infill (AR) continues from the left context for len(span) tokens (as the
    official); so does one whose sampler caches the visible context first (Set Diffusion: a window in its
    KNOBS) when right is False, the official's cache_full_infill_context=false (its suite runner's infilling
    rows), where the right context is cached only once the span is decoded, so the span never sees it."""
    left, n = ex["left"], len(ex["span"])
    sees_right = method.CAN_INFILL and (right or "setdiffusion_window" not in method.KNOBS)
    ids = left + [tok.mask_id] * n + ex["right"] if sees_right else left
    settings = dataclasses.replace(settings, max_new_tokens=0 if sees_right else n)
    prompt = torch.tensor([ids], device=device)
    (tokens, stats), seconds = timed(device, method.generate, model, prompt, cfg, settings)
    return tokens[0, len(left):len(left) + n].tolist(), stats, seconds


def evaluate_infill(model, method, cfg, tok, items, config, device, scores, settings: Settings, warmup=0,
                    right: bool = True):
    """Mean of each scorer(filled text, ex) over items, tokens/step, and tokens/s at batch 1 after warm-up;
    "records": each scored item as eval.py --replies writes it (its left and right context, the filled text,
    the reference, each scorer's value). right: infill's."""
    if not method.CAN_INFILL:
        print("note: AR cannot infill: it continues from the left context only, for the span's length")
    for ex in items:
        if len(ex["left"]) + len(ex["span"]) + len(ex["right"]) > config["seq_len"]:
            raise ValueError(f"an example has {len(ex['left']) + len(ex['span']) + len(ex['right'])} tokens "
                             f"with its span, more than the model's context (seq_len={config['seq_len']}): "
                             f"drop it")
    if len(items) <= warmup:
        raise ValueError(f"--warmup {warmup} leaves no example to score: only {len(items)} example(s) are "
                         f"evaluated; raise --limit above --warmup (or lower --warmup)")
    for ex in items[:warmup]:
        infill(model, method, cfg, tok, ex, device, settings, right)
    totals, rates, steps, records = dict.fromkeys(scores, 0.0), [], [], []
    for k, ex in enumerate(items[warmup:], warmup):
        span, stats, sec = infill(model, method, cfg, tok, ex, device, settings, right)
        text = tok.decode([t for t in span if t != tok.mask_id])
        verdicts = {key: float(score(text, ex)) for key, score in scores.items()}
        for key, value in verdicts.items():
            totals[key] += value
        rates.append(len(span) / sec)
        steps.append(stats["tokens_per_step"])
        records.append({"index": k, "left": tok.decode(ex["left"]), "right": tok.decode(ex["right"]),
                        "reply": text, "answer": ex["answer"], "scores": verdicts})
    n = max(len(rates), 1)
    return {**{k: v / n for k, v in totals.items()}, "tokens_per_step": sum(steps) / n,
            "tokens_per_s": sum(rates) / n, "n": len(rates), "warmup": warmup, "records": records}


def rouge_scores():
    """ROUGE-1/2/L F-measures of a filled span against ex["answer"] (the rouge-score package)."""
    from data.cnndm import rouge
    return {k: (lambda text, ex, f=rouge(k): f(text, ex["answer"])) for k in ("rouge1", "rouge2", "rougeL")}


# ----------------------------------------------------------------------------- the shipped task's middle step

STEP = re.compile(r"(-?\d+)([+\-*])(\d+)=(-?\d+)\.")


def arith_infill(examples: list[dict], tok) -> list[dict]:
    """Each arith test problem with its middle reasoning step masked (step n // 2 of n: the 2nd of 2 or 3,
    the 3rd of 4): left = prompt + the steps before, span = that step, right = the rest + EOS."""
    out = []
    for ex in examples:
        steps = ex["target"].split(" ")
        eqs = [i for i, s in enumerate(steps) if STEP.fullmatch(s)]
        k = eqs[len(eqs) // 2]
        left = ex["prompt"] + "".join(s + " " for s in steps[:k])
        out.append({"left": tok.encode(left), "span": tok.encode(steps[k]),
                    "right": tok.encode(" " + " ".join(steps[k + 1:])) + [tok.eos_id],
                    "answer": ex["answer"], "step": steps[k], "before": steps[:k], "after": steps[k + 1:]})
    return out


def chain_ok(steps: list[str], answer: str) -> bool:
    """Every step is a true equation starting from the previous result, and '#### n' repeats the last
    result."""
    prev = None
    for s in steps[:-2]:
        m = STEP.fullmatch(s)
        if not m:
            return False
        a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
        if (prev is not None and a != prev) or {"+": a + b, "-": a - b, "*": a * b}[op] != c:
            return False
        prev = c
    return steps[-2:] == ["####", str(prev)] and str(prev) == answer


def arith_number(examples: list[dict], tok) -> list[dict]:
    """Each arith test problem with its starting amount masked in the problem statement ("has [MASK][MASK]
    eggs"), the rest of the problem and the whole reply visible: only the right context says it (the reply's
    first step starts from it, "16*2=32."). left = the statement up to the number, span = its digits (oracle
    length), right = the rest of the problem + the reply + EOS."""
    out = []
    for ex in examples:
        m = re.search(r"has (\d+) ", ex["prompt"])
        left, number, rest = ex["prompt"][:m.start(1)], m[1], ex["prompt"][m.end(1):]
        out.append({"left": tok.encode(left), "span": tok.encode(number),
                    "right": tok.encode(rest + ex["target"]) + [tok.eos_id], "answer": number})
    return out


# The verbs of the shipped task's problems, by the operation they stand for (data/arith.py's templates).
VERB_OP = {phrase.split(" {b}")[0].replace(" them", ""): op
           for table in (arith.PERSON, arith.BOX) for op, phrases in table.items() for phrase in phrases}
ACT = re.compile(r"\b(" + "|".join(sorted(VERB_OP, key=len, reverse=True)) + r")\b( (\d+))?")


def arith_acts(prompt: str) -> list[re.Match]:
    """The actions of a problem statement, in order: each match's group 1 is the verb, group 3 its amount
    (None for "doubles them" / "triples them")."""
    return list(ACT.finditer(prompt, prompt.index(".") + 1))


def arith_operand(examples: list[dict], tok) -> list[dict]:
    """Each arith test problem with the amount of its last action that has one masked ("takes [MASK]"), the
    reply visible: the reply's step with that action says it ("14-6=8."), farther to the right than the
    starting amount's step. A problem whose actions are all doublings or triplings has no such span and no
    item."""
    out = []
    for ex in examples:
        acts = [m for m in arith_acts(ex["prompt"]) if m[3]]
        if not acts:
            continue
        a, b = acts[-1].span(3)
        out.append({"left": tok.encode(ex["prompt"][:a]), "span": tok.encode(ex["prompt"][a:b]),
                    "right": tok.encode(ex["prompt"][b:] + ex["target"]) + [tok.eos_id],
                    "answer": ex["prompt"][a:b]})
    return out


def arith_verb(examples: list[dict], tok) -> list[dict]:
    """Each arith test problem with the verb of its first action masked ("She [MASK] 7, gives 5"), a word
    rather than a number: the reply's first step says its operation ("12+7=19." is a +), not the word itself,
    so besides exact it is scored by op_right, whether the filled verb stands for that operation."""
    out = []
    for ex in examples:
        first = arith_acts(ex["prompt"])[0]
        a, b = first.span(1)
        out.append({"left": tok.encode(ex["prompt"][:a]), "span": tok.encode(first[1]),
                    "right": tok.encode(ex["prompt"][b:] + ex["target"]) + [tok.eos_id], "answer": first[1],
                    "op": VERB_OP[first[1]]})
    return out


def arith_items(examples: list[dict], tok, span: str) -> list[dict]:
    """The shipped task's infilling items of one span kind: "step" (left-determined), or "number", "operand",
    "verb" (right-determined: only the reply says them)."""
    if span not in ARITH_SPANS:
        raise ValueError(f"--span {span}: the shipped arith task masks a reasoning step, a number, an "
                         f"operand or a verb of the problem ({', '.join(ARITH_SPANS)})")
    return {"step": arith_infill, "number": arith_number, "operand": arith_operand, "verb": arith_verb}[span](
        examples, tok)


SPAN_SCORES = {   # exact: the filled span equals the reference; answer_right: the completed chain is still
                  # valid
    "step": {"exact": lambda text, ex: text == ex["step"],
             "answer_right": lambda text, ex: chain_ok(ex["before"] + [text] + ex["after"], ex["answer"])},
    "number": {"exact": lambda text, ex: text == ex["answer"]},
    "operand": {"exact": lambda text, ex: text == ex["answer"]},
    "verb": {"exact": lambda text, ex: text == ex["answer"],
             "op_right": lambda text, ex: VERB_OP.get(text) == ex["op"]},
}


def evaluate(task_name, data, examples, model, method, cfg, tok, config, device, settings: Settings,
             sentences=1, warmup=0, span="step", recipe="h100", throughput_run=False):
    """eval.py --task rocstories | infill on a task: the infilling items of the task, then evaluate_infill.
    The metrics carry the span kind; ROCStories' the sentences and the official recipe (data/rocstories.py
    RECIPES: its sampler options, and whether the right context is cached); a throughput run (the
    official's, timed after warmup) is scored by nothing (no ROUGE)."""
    if task_name == "rocstories":
        options = data.sampler_options(tok, method, sentences, recipe)
        settings = dataclasses.replace(settings, paper=dataclasses.replace(settings.paper, options=options))
        m = evaluate_infill(model, method, cfg, tok, data.examples(tok, examples, sentences), config, device,
                            {} if throughput_run else rouge_scores(), settings, warmup,
                            data.RECIPES[recipe]["right_cached"])
        return {"sentences": sentences, "recipe": recipe, **m,
                **({"throughput_run": True} if throughput_run else {})}
    if config["data"] != "arith":
        raise ValueError(f"--task infill masks a span of the shipped arith task or of a text corpus; this "
                         f"checkpoint was trained on {config['data']}")
    m = evaluate_infill(model, method, cfg, tok, arith_items(examples, tok, span), config, device,
                        SPAN_SCORES[span], settings, warmup)
    return {"span": span, **m}


# ---------------------------------------------------------------------------- a text corpus: a word or a line

TEXT_SPANS = ("word", "line")
WORD = re.compile(r"(?:[^\W_]|['’])+")     # a maximal run of letters, digits and apostrophes
MIN_CONTEXT = 4                            # tokens of text each side of the span, at least


def text_spans(text: str, span: str) -> list[tuple[int, int]]:
    """(start, end) character ranges of the whole words (span "word": maximal runs of letters, digits and
    apostrophes, at least one letter or digit) or whole lines (span "line": the non-blank text between two
    newlines, without them) of text. A run that touches either end of text is left out: the row may cut it."""
    if span == "word":
        return [m.span() for m in WORD.finditer(text)
                if 0 < m.start() and m.end() < len(text) and any(c.isalnum() for c in m[0])]
    breaks = [i for i, c in enumerate(text) if c == "\n"]
    return [(i + 1, j) for i, j in zip(breaks, breaks[1:]) if text[i + 1:j].strip()]


def segments(tok, row: list[int]) -> list[tuple[int, int]]:
    """[a, b) index ranges of row after its position 0 (the BOS) holding ordinary tokens only (between EOS /
    padding / [MASK]), each shrunk until its text neither starts nor ends with a character the row's edges cut
    (a partial UTF-8 byte sequence: U+FFFD once decoded)."""
    special, out, a = {tok.eos_id, tok.pad_id, tok.mask_id}, [], 1
    for b in range(1, len(row) + 1):
        if b == len(row) or row[b] in special:
            while a < b and tok.decode(row[a:b]).startswith("\ufffd"):
                a += 1
            while a < b and tok.decode(row[a:b]).endswith("\ufffd"):
                b -= 1
            if a < b:
                out.append((a, b))
            a = b + 1
    return out


def row_item(tok, row: list[int], span: str) -> dict | None:
    """One row's infilling item: the word or line whose middle is nearest the row's middle (position estimated
    in tokens, ties to the left) that leaves at least MIN_CONTEXT tokens of text on each side and fits the
    row's length once its three parts are tokenized; None when no span does. The tokens outside the chosen
    segment (the row's leading BOS, other documents, their EOS) stay as they are on the left and right; the
    segment's text is cut at the span and each part tokenized alone. A tokenizer other than bytes keeps a
    word's leading space on the span side (GPT-2's " word" token). left + span + right is the row again
    (token for token with bytes); "text" holds the three text parts, "answer" the span as a perfect fill
    decodes."""
    candidates = []
    for a, b in segments(tok, row):
        text = tok.decode(row[a:b])
        scale = (b - a) / max(len(text), 1)
        candidates += [(abs(a + (s + e) / 2 * scale - len(row) / 2), a + s * scale, a, b, text, s, e)
                       for s, e in text_spans(text, span)]
    for *_, a, b, text, s, e in sorted(candidates, key=lambda c: c[:2]):
        if span == "word" and tok.name != "bytes" and text[s - 1] == " ":
            s -= 1
        parts = text[:s], text[s:e], text[e:]
        left, mid, right = (tok.encode_text(t) for t in parts)
        if min(len(left), len(right)) >= MIN_CONTEXT and len(left + mid + right) <= b - a:
            return {"left": row[:a] + left, "span": mid, "right": right + row[b:], "text": parts,
                    "answer": tok.decode(mid)}
    return None


def text_items(tok, rows, span: str, limit: int = 0) -> tuple[list[dict], int]:
    """The infilling items of a corpus' held-out rows (N, L), one per row that has a usable span (row_item),
    in row order, the first `limit` (0 = all); and how many rows were read. ValueError: a span kind of the
    shipped task, or no row with a usable span."""
    if span not in TEXT_SPANS:
        raise ValueError(f"--span {span}: a text corpus masks one whole word or one whole line of a held-out "
                         f"row (--span {' or '.join(TEXT_SPANS)})")
    items, read = [], 0
    for row in rows:
        if limit and len(items) == limit:
            break
        read += 1
        item = row_item(tok, [int(t) for t in row], span)
        if item is not None:
            items.append(item)
    if not items:
        raise ValueError(f"none of the {read} held-out rows has a whole {span} with {MIN_CONTEXT} tokens of "
                         f"text on each side: try --span word, or a checkpoint with a longer context")
    return items, read


def char_accuracy(text: str, ref: str) -> float:
    """The fraction of the reference's characters filled right, position by position (a missing one is
    wrong)."""
    return sum(a == b for a, b in zip(text, ref)) / max(len(ref), 1)


def text_scores() -> dict:
    """The scorers of a corpus span: exact, char_accuracy and (with the rouge-score package) rougeL; without
    rouge-score, a note line and no rougeL."""
    scores = {"exact": lambda text, ex: text == ex["answer"],
              "char_accuracy": lambda text, ex: char_accuracy(text, ex["answer"])}
    if importlib.util.find_spec("rouge_score") is None:
        print("note: rouge-score is not installed, so no rougeL (pip install rouge-score)")
        return scores
    from data.cnndm import rouge
    scores["rougeL"] = lambda text, ex, f=rouge("rougeL"): f(text, ex["answer"])
    return scores


def evaluate_text(model, method, cfg, tok, rows, config, device, settings: Settings, name: str,
                  span: str = "word", limit: int = 0, warmup: int = 0) -> dict:
    """eval.py --task infill on a corpus checkpoint: the word or line items of the held-out rows (text_items),
    scored by text_scores at batch 1 (evaluate_infill). The metrics carry the span kind and the corpus
    name."""
    items, read = text_items(tok, rows, span, limit)
    print(f"{name} held-out split: a whole {span} masked in {len(items)} of the first {read} of its "
          f"{len(rows)} rows (the first {warmup} of them warm-up)")
    m = evaluate_infill(model, method, cfg, tok, items, config, device, text_scores(), settings, warmup)
    return {"span": span, **m, "data": name}
