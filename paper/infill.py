"""Infilling: fill a [MASK] span between a left and a right context, one example at a time (batch 1, as the
official infill runs), each method as the official runs it: Set Diffusion caches every visible token (left and
right of the span) and fills the span with its window; MDLM decodes the block holding the span bidirectionally;
BD3-LM decodes block-aligned (a block sees only the blocks to its left, plus the visible tokens of its own);
AR continues the left context for the span's length (it cannot see a right context).

    eval.py --task infill --span step      the shipped task's middle reasoning step: decided by the LEFT context
    eval.py --task infill --span number    the shipped task's starting amount, masked in the problem statement with
                                           the whole reply visible: decided by the RIGHT context (the reply's
                                           first step starts with it), 40-90 positions to the span's right
    eval.py --task rocstories              ROCStories' middle sentence(s) (data/rocstories.py): ROUGE

    infill(...) / evaluate_infill(...)     fill one item / score a list of items: the mean of each scorer,
                                           tokens/step and tokens/s at batch 1 after warm-up
    arith_items(examples, tok, span)       the shipped task's items of one span kind, SPAN_SCORES their scorers
"""
import re

import torch

from decoding import timed

ARITH_SPANS = ("step", "number")


def infill(model, method, cfg, tok, method_name, ex, device, options=None, **kw):
    """Fill ex's span between ex["left"] and ex["right"] (token id lists). Returns span ids, stats, seconds.
    AR cannot see a right context: it continues from the left one for len(span) tokens (as the official)."""
    left, n, right = ex["left"], len(ex["span"]), ex["right"]
    ids = left if method_name == "ar" else left + [tok.mask_id] * n + right
    prompt = torch.tensor([ids], device=device)
    (tokens, stats), seconds = timed(device, method.generate, model, prompt, cfg,
                                     max_new_tokens=n if method_name == "ar" else 0, options=options, **kw)
    return tokens[0, len(left):len(left) + n].tolist(), stats, seconds


def evaluate_infill(model, method, cfg, tok, items, config, device, scores, warmup=0, options=None, **kw):
    """Mean of each scorer(filled text, ex) over items, tokens/step, and tokens/s at batch 1 after warm-up."""
    name = config["method"]
    if name == "ar":
        print("note: AR cannot infill: it continues from the left context only, for the span's length")
    for ex in items:
        if len(ex["left"]) + len(ex["span"]) + len(ex["right"]) > config["seq_len"]:
            raise ValueError(f"an example has {len(ex['left']) + len(ex['span']) + len(ex['right'])} tokens with "
                             f"its span, more than the model's context (seq_len={config['seq_len']}): drop it")
    if len(items) <= warmup:
        raise ValueError(f"--warmup {warmup} leaves no example to score: only {len(items)} example(s) are "
                         f"evaluated; raise --limit above --warmup (or lower --warmup)")
    for ex in items[:warmup]:
        infill(model, method, cfg, tok, name, ex, device, options, **kw)
    totals, rates, steps = dict.fromkeys(scores, 0.0), [], []
    for ex in items[warmup:]:
        span, stats, sec = infill(model, method, cfg, tok, name, ex, device, options, **kw)
        text = tok.decode([i for i in span if i != tok.mask_id])
        for key, score in scores.items():
            totals[key] += float(score(text, ex))
        rates.append(len(span) / sec)
        steps.append(stats["tokens_per_step"])
    n = max(len(rates), 1)
    return {**{k: v / n for k, v in totals.items()}, "tokens_per_step": sum(steps) / n,
            "tokens_per_s": sum(rates) / n, "n": len(rates)}


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
    """Every step is a true equation starting from the previous result, and '#### n' repeats the last result."""
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
    """Each arith test problem with its starting amount masked in the problem statement ("has [MASK][MASK] eggs"),
    the rest of the problem and the whole reply visible: only the right context says it (the reply's first step
    starts from it, "16*2=32."). left = the statement up to the number, span = its digits (oracle length),
    right = the rest of the problem + the reply + EOS."""
    out = []
    for ex in examples:
        m = re.search(r"has (\d+) ", ex["prompt"])
        left, number, rest = ex["prompt"][:m.start(1)], m[1], ex["prompt"][m.end(1):]
        out.append({"left": tok.encode(left), "span": tok.encode(number),
                    "right": tok.encode(rest + ex["target"]) + [tok.eos_id], "answer": number, "step": number})
    return out


def arith_items(examples: list[dict], tok, span: str) -> list[dict]:
    """The shipped task's infilling items of one span kind: "step" (left-determined) or "number" (right-determined)."""
    if span not in ARITH_SPANS:
        raise ValueError(f"--span {span}: the shipped arith task masks a reasoning step or a number of the problem "
                         f"({' or '.join(ARITH_SPANS)})")
    return arith_infill(examples, tok) if span == "step" else arith_number(examples, tok)


SPAN_SCORES = {   # exact: the filled span equals the reference; answer_right: the completed chain is still valid
    "step": {"exact": lambda text, ex: text == ex["step"],
             "answer_right": lambda text, ex: chain_ok(ex["before"] + [text] + ex["after"], ex["answer"])},
    "number": {"exact": lambda text, ex: text == ex["step"]},
}




def evaluate(task_name, data, examples, model, method, cfg, tok, config, device, sentences=1, warmup=0,
             span="step", **kw):
    """eval.py --task rocstories | infill on a task: the infilling items of the task, then evaluate_infill. The
    metrics carry the span kind."""
    if task_name == "rocstories":
        items, scores = data.examples(tok, examples, sentences), rouge_scores()
    elif config["data"] != "arith":
        raise ValueError(f"--task infill masks a span of the shipped arith task or of a text corpus; this checkpoint "
                         f"was trained on {config['data']}")
    else:
        items, scores = arith_items(examples, tok, span), SPAN_SCORES[span]
    m = evaluate_infill(model, method, cfg, tok, items, config, device, scores, warmup=warmup, **kw)
    return m if task_name == "rocstories" else {"span": span, **m}
