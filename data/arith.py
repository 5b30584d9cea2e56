"""arith: multi-step arithmetic word problems, generated procedurally from fixed seeds (no downloads).

A problem starts from a number and applies 2 to 4 operations in order (add, remove, double = *2,
triple = *3); the reply writes each step as an equation starting from the previous result, then the
final answer after "####" (GSM8K style). Later steps need the earlier results, so it is a true chain.

    prompt: "Mia has 12 shells. She finds 7, gives 5, doubles them. How many?\n"
    target: "12+7=19. 19-5=14. 14*2=28. #### 28"
    answer: "28"

Two templates (a person and their things / someone filling a container) with varied names, objects and
verbs. Numbers: start 2..40, amounts added or removed 1..25, *2/*3 only on values <= 30; every value is
a positive integer below 200 (about 90% below 100). Byte tokenized (one character = one token):
prompt + target + EOS <= MAX_LEN = 128 bytes, ensured by redrawing the few longer 4-step problems
(mean about 99). Splits: "train" = 20,000 problems from random.Random(1234); "test" = 500 from
random.Random(5678); prompts are unique within a split and no test prompt occurs in train.
"""
import functools
import random
import re

NAME = "arith"
SEQ_LEN = 128                                             # default context length L
TOKENIZER = "bytes"
MAX_LEN = 128                                             # prompt + target + EOS, in bytes
SPLITS = {"train": (20_000, 1234), "test": (500, 5678)}   # split -> (size, seed)

NAMES = [("Mia", "She"), ("Tom", "He"), ("Ana", "She"), ("Ben", "He"), ("Lily", "She"), ("Sam", "He"),
         ("Zoe", "She"), ("Max", "He"), ("Eva", "She"), ("Leo", "He"), ("Ivy", "She"), ("Omar", "He"),
         ("Nina", "She"), ("Raj", "He"), ("Ella", "She"), ("Jack", "He")]
OBJECTS = ["shells", "apples", "coins", "marbles", "cards", "books", "pens", "eggs", "stamps", "beads",
           "nuts", "plums"]
BOXES = ["box", "jar", "bag", "tin", "cup", "bin"]
# phrases per operation: a person acting on their own things, or someone filling a container
PERSON = {"+": ["finds {b}", "buys {b}", "gets {b}", "wins {b}"],
          "-": ["loses {b}", "gives {b}", "sells {b}", "uses {b}"],
          "*2": ["doubles them"], "*3": ["triples them"]}
BOX = {"+": ["adds {b}", "puts in {b}"], "-": ["takes {b}", "removes {b}"],
       "*2": ["doubles them"], "*3": ["triples them"]}


def make_problem(rng: random.Random) -> dict:
    """One random problem; redrawn until prompt + target + EOS fits in MAX_LEN bytes."""
    while True:
        a = start = rng.randint(2, 40)
        steps = []                                   # (op, operand, result)
        for _ in range(rng.randint(2, 4)):
            op = rng.choice(["+", "+"] + (["-", "-"] if a >= 2 else []) + (["*2", "*3"] if a <= 30 else []))
            if op == "+":
                b = rng.randint(1, 25); c = a + b
            elif op == "-":
                b = rng.randint(1, min(a - 1, 25)); c = a - b
            else:
                b = int(op[1]); c = a * b
            steps.append((op, b, c))
            a = c
        name, pronoun = rng.choice(NAMES)
        obj = rng.choice(OBJECTS)
        if rng.random() < 0.5:                       # a person and their own things
            phrases, head = PERSON, f"{name} has {start} {obj}. {pronoun}"
        else:                                        # someone filling a container
            phrases, head = BOX, f"A {rng.choice(BOXES)} has {start} {obj}. {name}"
        acts = ", ".join(rng.choice(phrases[op]).format(b=b) for op, b, _ in steps)
        prompt = f"{head} {acts}. How many?\n"
        prev = [start] + [c for _, _, c in steps]   # each step starts from the previous result
        answer = str(prev[-1])
        target = " ".join(f"{p}{op[0]}{b}={c}." for p, (op, b, c) in zip(prev, steps)) + f" #### {answer}"
        if len(prompt) + len(target) + 1 <= MAX_LEN:
            return {"prompt": prompt, "target": target, "answer": answer}


@functools.lru_cache(maxsize=None)
def _generate(split: str) -> tuple:
    size, seed = SPLITS[split]
    rng = random.Random(seed)
    seen = {ex["prompt"] for ex in _generate("train")} if split == "test" else set()
    out = []
    while len(out) < size:
        ex = make_problem(rng)
        if ex["prompt"] in seen:
            continue                             # prompts are unique, and test ones unseen in train
        seen.add(ex["prompt"])
        out.append(ex)
    return tuple(out)


def load(split: str, data_dir=None) -> list[dict]:
    """Examples of `split` ("train" or "test"); data_dir is ignored (the data is generated)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} for arith; choose one of {', '.join(SPLITS)}")
    return [dict(ex) for ex in _generate(split)]


def extract_answer(completion: str) -> str | None:
    """The number right after the first "####" (spaces allowed), or None."""
    if "####" not in completion:
        return None
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", completion.split("####", 1)[1])
    return m.group(1) if m else None


def is_correct(completion: str, answer: str) -> bool:
    return extract_answer(completion) == answer.strip()


def is_finished(completion: str) -> bool:
    """Stop once "####" is followed by a complete number (a non-digit after it) or EOS appears."""
    return "<|endoftext|>" in completion or re.search(r"####\s*-?\d+\D", completion) is not None


SCORES = {"accuracy": is_correct}          # metric name -> scorer(completion, answer), reported by eval.py
ANSWERS = {"accuracy": extract_answer}     # what the scorer compared (eval.py --replies)
