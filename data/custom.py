"""Your own data as a task: `--data jsonl:PATH` or `--data hf:ORG/NAME[:CONFIG]`, no Python file per dataset.

Records are {"prompt": ..., "target": ...} (other names with --prompt-field / --target-field), or
{"text": ...} for plain language modelling (--text-field names another field). A text example has no
prompt of its own: its prompt is the tokenizer's end-of-text token, the document start (GPT-2's
convention), so every method, AR included, has a token to start from and every text token is a target.

Splits. jsonl:PATH is a file or a folder. A folder holds <split>.jsonl files, an hf: dataset has named
splits; --split TRAIN[,TEST] picks them (default: train; test, else validation). With no held-out split
(a single file, or a dataset with train only) a fixed cut is held out: the examples at the first
max(1, n // 10) indices of random.Random(0).sample(range(n), n); training gets the rest, order kept.

Scoring ("accuracy"): the reply, cut at EOS, equals the target after stripping both; with --answer-regex
the regex's first match (its group 1 if it has a group) is compared instead, taken from both the reply
and the gold target. The reply ends at EOS (is_finished). Likelihood: eval.py --task likelihood.

Length. prompt + target + EOS must fit in seq_len tokens (--seq-len; 0 = the longest example of both
splits, rounded up to a multiple of 16, and an error above AUTO_SEQ_LEN_MAX = 4096). Longer examples are an
error naming how many and the longest, or, with --drop-long, dropped and reported (an error if none is left).

Text. The fields are data, not code: they are PlainText (data/__init__.py), encoded as ordinary text, so
"<|endoftext|>" or "<|mask|>" written in a target is those characters, never EOS or [MASK].

make_task(spec, options) returns an object with the interface of data/arith.py (NAME, load, is_correct,
is_finished, SCORES, TOKENIZER, SEQ_LEN) plus OPTIONS, the dict train.py stores in config.json
("data_options") so that sample.py and eval.py rebuild the same task from the checkpoint alone.
"""
import argparse
import json
import os
import random
import re
import sys
from dataclasses import asdict, dataclass
from types import SimpleNamespace

from data import PlainText

PREFIXES = ("jsonl:", "hf:")
AUTO_SEQ_LEN_MAX = 4096   # --seq-len 0 fits the longest example, up to this (Set Diffusion's masks are L x L)


@dataclass
class Options:
    prompt_field: str = "prompt"
    target_field: str = "target"
    text_field: str = ""          # set: plain language modelling on this field ("" = detect "text")
    split: str = ""               # "TRAIN" or "TRAIN,TEST" ("" = train; test, else validation)
    answer_regex: str = ""        # compare this regex's match instead of the whole reply
    drop_long: bool = False       # drop examples longer than seq_len instead of stopping
    tokenizer: str = "bytes"
    seq_len: int = 0              # 0 = fit the longest example


def add_args(parser):
    """The command-line options of this module (train.py's "your own data" group)."""
    g = parser.add_argument_group("your own data (--data jsonl:PATH or hf:ORG/NAME[:CONFIG], see "
                                  "data/custom.py)")
    g.add_argument("--prompt-field", default="prompt", help="field holding the prompt")
    g.add_argument("--target-field", default="target", help="field holding the reply to learn")
    g.add_argument("--text-field", default="", help="plain language modelling on this field (no prompt)")
    g.add_argument("--split", default="",
                   help="TRAIN[,TEST] split names (default: train; test, else validation)")
    g.add_argument("--answer-regex", default="", help="score the regex match (group 1 if any) instead of the "
                                                      "whole reply, e.g. '#### (\\S+)'")
    g.add_argument("--drop-long", action="store_true",
                   help="drop examples longer than --seq-len (else an error)")


def options_from_args(args) -> dict:
    return asdict(Options(args.prompt_field, args.target_field, args.text_field, args.split,
                          args.answer_regex, args.drop_long, args.tokenizer or "bytes", args.seq_len))


def check_spec(spec: str) -> str:
    """argparse type of --data: a shipped task name, jsonl:PATH or hf:ORG/NAME (ArgumentTypeError
    otherwise)."""
    from data import TASKS
    if spec in TASKS or (spec.startswith(PREFIXES) and spec.split(":", 1)[1]):
        return spec
    raise argparse.ArgumentTypeError(f"invalid choice: {spec!r} (choose {', '.join(TASKS)}, jsonl:PATH "
                                     f"or hf:ORG/NAME)")


# ----------------------------------------------------------------------------- reading records

def read_jsonl(path: str) -> list[tuple[str, dict]]:
    """[(where, record)] of a JSONL file, where = "PATH line N"; blank lines skipped."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: expected a .jsonl file, one JSON object per line")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:                                   # unreadable: permissions, I/O error, ...
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    rows = []
    for n, raw in enumerate(data.splitlines(), 1):         # \n, \r\n or \r, as text mode would
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path} line {n} is not valid UTF-8 (byte 0x{raw[e.start]:02x} at column "
                             f"{e.start + 1}): save the file as UTF-8") from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} line {n} is not valid JSON ({e.msg}, column {e.colno}): "
                             f"{line.strip()[:60]!r}") from None
        except RecursionError:
            raise ValueError(f"{path} line {n} is nested too deeply to read (thousands of [ or {{): "
                             f"expected one flat JSON object per line") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path} line {n} is not a JSON object: {line.strip()[:60]!r}")
        rows.append((f"{path} line {n}", record))
    if not rows:
        raise ValueError(f'{path} is empty: expected one JSON object per line, e.g. {{"prompt": "...", '
                         f'"target": "..."}} or {{"text": "..."}}')
    return rows


def jsonl_splits(path: str) -> dict:
    """{split name: loader} of a jsonl: source (a folder of <split>.jsonl, or one file = "train")."""
    if os.path.isdir(path):
        names = sorted(f[:-len(".jsonl")] for f in os.listdir(path) if f.endswith(".jsonl"))
        return {n: (lambda n=n: read_jsonl(os.path.join(path, n + ".jsonl"))) for n in names}
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: jsonl:PATH needs a .jsonl file or a folder "
                                f"of <split>.jsonl")
    return {"train": lambda: read_jsonl(path)}


def hf_splits(name: str) -> dict:
    """{split name: loader} of a Hugging Face dataset (Hub id or local folder), optional ":CONFIG"."""
    repo, _, config = name.partition(":")
    try:
        import datasets
        dd = datasets.load_dataset(repo, config or None)
    except Exception as e:   # no network, unknown dataset, bad files, ...: one line, whatever datasets raised
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise ValueError(f"could not load the Hugging Face dataset {name!r} "
                         f"({type(e).__name__}: {first})") from None
    return {s: (lambda s=s: [(f"{name} split {s} row {i}", dict(r)) for i, r in enumerate(dd[s])])
            for s in dd}


def pick_splits(available: dict, split: str, source: str):
    """(train loader, test loader or None) from --split TRAIN[,TEST]; a clear error for a missing split."""
    asked = [s.strip() for s in split.split(",")] if split else []
    if len(asked) > 2 or any(not s for s in asked):
        raise ValueError(f"--split {split!r}: give TRAIN or TRAIN,TEST")
    for s in asked:
        if s not in available:
            raise ValueError(f"{source} has no split {s!r}; its splits: {', '.join(available) or 'none'}")
    train = asked[0] if asked else "train"
    if train not in available:
        raise ValueError(f"{source} has no split 'train'; its splits: {', '.join(available) or 'none'}: "
                         f"name one with --split")
    test = asked[1] if len(asked) > 1 else next((s for s in ("test", "validation") if s in available), None)
    return available[train], (available[test] if test and test != train else None)


def held_out(n: int) -> set:
    """The indices held out when there is no test split: the first max(1, n // 10) of a seed-0 permutation."""
    if n < 2:
        raise ValueError(f"only {n} example: need at least 2 to hold some out (or give a test split)")
    return set(random.Random(0).sample(range(n), n)[:max(1, n // 10)])


# ----------------------------------------------------------------------------- records -> examples

def field_names(record: dict, opts: Options):
    """(prompt field or None, target field) from the options and the first record."""
    if opts.text_field:
        return None, opts.text_field
    if opts.prompt_field in record or opts.target_field in record or "text" not in record:
        return opts.prompt_field, opts.target_field
    return None, "text"


def field(record: dict, name: str, where: str, flag: str) -> PlainText:
    """The text of record[name]: a PlainText, so special-token text in the data is never a special token."""
    if name not in record:
        raise ValueError(f"{where} has no field {name!r} (its fields: "
                         f"{', '.join(map(str, record)) or 'none'}): name the right one with {flag}")
    value = record[name]
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ValueError(f"{where}: field {name!r} is {type(value).__name__}, not text")
    return PlainText(value)


def to_examples(rows, prompt_f, target_f, regex, start: str) -> list[dict]:
    """{"prompt", "target", "answer", "where"} per record; answer = the regex match of the target, or the
    target."""
    out = []
    for where, r in rows:
        prompt = field(r, prompt_f, where, "--prompt-field") if prompt_f else start
        target = field(r, target_f, where, "--target-field" if prompt_f else "--text-field")
        answer = target.strip()
        if regex is not None:
            answer = extract(regex, target)
            if answer is None:
                raise ValueError(f"{where}: --answer-regex {regex.pattern!r} does not match the target "
                                 f"{target[:60]!r}")
        out.append({"prompt": prompt, "target": target, "answer": answer, "where": where})
    return out


def extract(regex, text: str):
    m = regex.search(text)
    return None if m is None else (m.group(1) if regex.groups else m.group(0)).strip()


def lengths(tok, examples) -> list[int]:
    """Tokens of prompt + target + EOS per example (encoded as data.encode encodes them)."""
    prompts = tok.encode_batch([e["prompt"] for e in examples])
    targets = tok.encode_batch([e["target"] for e in examples])
    return [len(p) + len(t) + 1 for p, t in zip(prompts, targets)]


def fit(examples, tok, seq_len: int, drop: bool, what: str) -> list[dict]:
    """The examples that fit in seq_len; the others are an error, or dropped and reported with drop."""
    n = lengths(tok, examples)
    long = [i for i, k in enumerate(n) if k > seq_len]
    if not long:
        return examples
    worst = max(long, key=lambda i: n[i])
    msg = (f"{len(long)} of {len(examples)} {what} examples are longer than seq_len={seq_len} tokens "
           f"(the longest, {examples[worst]['where']}, has {n[worst]})")
    if not drop:
        raise ValueError(msg + ": raise --seq-len or pass --drop-long")
    if len(long) == len(examples):
        raise ValueError(f"all {len(examples)} {what} examples are longer than seq_len={seq_len} tokens (the "
                         f"shortest has {min(n)}): raise --seq-len")
    if os.environ.get("RANK", "0") == "0":
        print(msg + ": dropped (--drop-long)", file=sys.stderr)
    long = set(long)
    return [e for i, e in enumerate(examples) if i not in long]


# ----------------------------------------------------------------------------- the task

def make_task(spec: str, options: dict | None = None) -> SimpleNamespace:
    """The task object of a jsonl:/hf: spec (see the module docstring). Reads the data once to check it."""
    from data import get_tokenizer
    try:
        opts = Options(**(options or {}))
    except TypeError as e:
        raise ValueError(f"bad data options for {spec}: {e}") from None
    kind, _, source = spec.partition(":")
    if kind + ":" not in PREFIXES or not source:
        raise ValueError(f"unknown data {spec!r}: use jsonl:PATH or hf:ORG/NAME")
    try:
        regex = re.compile(opts.answer_regex) if opts.answer_regex else None
    except re.error as e:
        raise ValueError(f"--answer-regex {opts.answer_regex!r} is not a valid regular "
                         f"expression: {e}") from None
    tok = get_tokenizer(opts.tokenizer)
    eos = tok.enc.decode([tok.eos_id])                     # ends every reply; also a text example's prompt

    def read(data_dir=None):
        """{"train": examples, "test": examples} before the length check."""
        if kind == "hf" and data_dir is not None:
            raise ValueError("--data-dir does not apply to hf: data (name the dataset in --data hf:...)")
        available = jsonl_splits(data_dir or source) if kind == "jsonl" else hf_splits(source)
        train_rows, test_rows = pick_splits(available, opts.split, data_dir or source)
        train_rows = train_rows()
        test_rows = test_rows() if test_rows is not None else None
        if test_rows is None:
            cut = held_out(len(train_rows))
            train_rows, test_rows = ([r for i, r in enumerate(train_rows) if i not in cut],
                                     [r for i, r in enumerate(train_rows) if i in cut])
        if kind == "hf":
            for name, rows in (("train", train_rows), ("test", test_rows)):
                if not rows:
                    raise ValueError(f"the {name} split of {source} is empty")
        prompt_f, target_f = field_names(train_rows[0][1], opts)
        return {s: to_examples(rows, prompt_f, target_f, regex, eos)
                for s, rows in (("train", train_rows), ("test", test_rows))}

    splits = read()
    if not opts.seq_len:
        examples = splits["train"] + splits["test"]
        n = lengths(tok, examples)
        longest = max(range(len(n)), key=n.__getitem__)
        if n[longest] > AUTO_SEQ_LEN_MAX:
            raise ValueError(f"{examples[longest]['where']} has {n[longest]} tokens, more than the automatic "
                             f"--seq-len allows ({AUTO_SEQ_LEN_MAX}): pass --seq-len, and --drop-long to "
                             f"drop the longer examples")
        opts.seq_len = -(-n[longest] // 16) * 16

    def load(split: str, data_dir=None) -> list[dict]:
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r} for {spec}; choose train or test")
        examples = splits[split] if data_dir is None else read(data_dir)[split]
        return [{k: e[k] for k in ("prompt", "target", "answer")}
                for e in fit(examples, tok, opts.seq_len, opts.drop_long, split)]

    def is_correct(completion: str, answer: str) -> bool:
        got = extract(regex, completion) if regex is not None else completion.split(eos, 1)[0].strip()
        return got == answer.strip()

    def is_finished(completion: str) -> bool:
        return eos in completion

    return SimpleNamespace(NAME=spec, TOKENIZER=opts.tokenizer, SEQ_LEN=opts.seq_len, OPTIONS=asdict(opts),
                           load=load, is_correct=is_correct, is_finished=is_finished,
                           SCORES={"accuracy": is_correct})
