"""Tasks, tokenizers and batching: everything between text and the (x0, prompt_mask, pad_mask) tensors.

A task module (data/arith.py, data/gsm8k.py, ...) exposes
    NAME                                   the --data / --task value
    load(split, data_dir=None)             -> list of {"prompt": str, "target": str, "answer": str}
                                              prompt = what the model is given, target = the full reply it
                                              is trained to write, answer = the gold final answer
    is_correct(completion, answer) -> bool score one generated reply
    SCORES                                 {metric name: scorer(completion, answer) -> bool}, "accuracy" first
    ANSWERS (optional)                     {metric name: the answer its scorer extracts from a reply}
    is_finished(completion) -> bool        the stopping rule: True once a (partial) reply is complete
    TOKENIZER                              the tokenizer name the task trains with by default
    SEQ_LEN                                the default context length L of the task
(your own data, --data jsonl:PATH or hf:ORG/NAME, is an object with the same interface, built by
data/custom.py: get_task(name, options)), and every tokenizer is a `Tokenizer` below: a tiktoken.Encoding
plus the special ids the methods need.
Corpora are not tasks: data/owt.py, data/lm1b.py, data/shakespeare.py and any text (`text:PATH`,
data/textfile.py) are wrapped token rows, whose load(split, data_dir, tok, L) returns an array (N, L) and
whose batch() makes the methods' batches (data/corpus.py); `get_corpus` finds them (train.py --data, eval.py
--task likelihood). data/mcqa.py holds HellaSwag, PIQA and SIQA (eval.py --task hellaswag|piqa|siqa). The
corpora's tokenizers (gpt2, bert-base-uncased) are in data/text.py.
"""
import importlib
import itertools
from dataclasses import dataclass

import numpy as np
import tiktoken
import torch

TASKS = ("arith", "gsm8k", "cnndm")


class PlainText(str):
    """Text read from a user's data file (data/custom.py): always encoded as ordinary text, so "<|endoftext|>"
    or "<|mask|>" written in it stays those characters. Special tokens come only from the code: the EOS that
    data.encode appends, the [MASK]s the methods place, the templates a task module writes (plain str)."""
    __slots__ = ()


@dataclass
class Tokenizer:
    """Three ways to encode, by who wrote the text:
        encode(text)         text the code built (a task's template, e.g. GSM8K's chat turns): the text of a
                             special token ("<|endoftext|>", "<|im_end|>", ...) becomes that token; a
                             PlainText is encoded as encode_text does
        encode_text(text)    data text: ordinary text only, no special token ever
    (sample.py's typed prompts, where only [MASK] text is special, go through data/prompts.py.)
    """
    enc: tiktoken.Encoding
    name: str          # how to rebuild it: "bytes" or "qwen3:<repo id or local dir>"
    mask_id: int       # the absorbing [MASK] token of the diffusion methods
    eos_id: int        # appended to every target; ends generation
    pad_id: int        # fills the tail of short sequences (never attended to, never a target)

    @property
    def vocab_size(self) -> int:
        return self.enc.n_vocab

    @property
    def mask_text(self) -> str:
        """The text of the [MASK] token ("<|mask|>" for bytes, "<|fim_middle|>" for Qwen3 and GPT-2)."""
        return self.enc.decode([self.mask_id])

    def normalize(self, text: str) -> str:
        """What every encode applies first (Qwen3: Unicode NFC)."""
        return text

    def encode(self, text: str) -> list[int]:
        if isinstance(text, PlainText):
            return self.encode_text(text)
        return self.enc.encode(self.normalize(text), allowed_special="all")

    def encode_text(self, text: str) -> list[int]:
        return self.enc.encode_ordinary(self.normalize(text))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """[encode(t) for t in texts]. A plain loop: tiktoken's threaded encode_batch spends more on its
        thread pool than on short texts (the shipped task's 40,000 strings: 1.0 s threaded, 0.16 s in this
        loop)."""
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        # an id past the tokenizer's (a --preset's larger vocabulary, e.g. a padded one) is no text: U+FFFD
        ids = [int(i) for i in ids if int(i) not in (self.mask_id, self.pad_id)]
        runs = itertools.groupby(ids, lambda i: i < self.vocab_size)          # a character's bytes stay whole
        return "".join(self.enc.decode(list(run), errors="replace") if ok else "\ufffd" * len(list(run))
                       for ok, run in runs)


def byte_tokenizer() -> Tokenizer:
    """256 byte tokens + <|endoftext|> (256) + <|mask|> (257): offline, tiny, exact round trip."""
    ranks = {bytes([i]): i for i in range(256)}
    enc = tiktoken.Encoding("bytes", pat_str=r"[\s\S]", mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 256, "<|mask|>": 257})
    return Tokenizer(enc, "bytes", mask_id=257, eos_id=256, pad_id=256)


def get_tokenizer(name: str) -> Tokenizer:
    if name == "bytes":
        return byte_tokenizer()
    if name.startswith("qwen3:"):
        from data.qwen import qwen3_tokenizer
        return qwen3_tokenizer(name.split(":", 1)[1])
    if name == "gpt2":                          # OWT (data/text.py)
        from data.text import gpt2_tokenizer
        return gpt2_tokenizer()
    if name == "bert-base-uncased" or name.startswith("bert:"):  # LM1B (data/text.py)
        from data.text import BERT_REPO, bert_tokenizer
        return bert_tokenizer(BERT_REPO if name == "bert-base-uncased" else name.split(":", 1)[1])
    raise ValueError(f"unknown tokenizer {name!r}: use 'bytes', 'qwen3:<repo id or directory>', 'gpt2', "
                     f"'bert-base-uncased' or 'bert:<repo id or directory>'")


EVAL_TASKS = ("rocstories",)     # evaluation only (no train split)
CORPORA = ("owt", "lm1b", "shakespeare")     # wrapped token rows; also text:PATH (data/textfile.py)


def is_corpus(name: str) -> bool:
    """Whether a --data value names a corpus of token rows rather than a task of prompt/target examples."""
    return name in CORPORA or name.startswith("text:")


def get_corpus(name: str):
    """The corpus module (owt, lm1b, shakespeare), or for "text:PATH" the corpus data/textfile.py makes: NAME
    (what config.json stores), TOKENIZER, SEQ_LEN, load(split, data_dir, tok, L) -> rows (N, L), where split
    is "train" or "test" (the held-out split: OWT's and a text's validation tail, LM1B's test), batch, and
    bos(tok), the token a row (and a prompt on such a checkpoint) starts with."""
    if name.startswith("text:"):
        from data.textfile import make_corpus
        return make_corpus(name.split(":", 1)[1])
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; choose one of {', '.join(CORPORA)} or text:PATH")
    return importlib.import_module(f"data.{name}")


def get_task(name: str, options: dict | None = None):
    """A shipped task module, or for "jsonl:PATH" / "hf:ORG/NAME" the task data/custom.py builds from options
    (train.py stores them in config.json as "data_options"; None = the defaults)."""
    if name.startswith(("jsonl:", "hf:")):
        from data.custom import make_task
        return make_task(name, options)
    if name not in TASKS + EVAL_TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}, jsonl:PATH "
                         f"or hf:ORG/NAME")
    return importlib.import_module(f"data.{name}")


def encode(tok: Tokenizer, examples: list[dict], seq_len: int) -> dict:
    """Tokenize examples into right-padded tensors of length seq_len.

    x0[b] = prompt + target + eos, then pad_id.  prompt_mask: True on the prompt (kept clean, no loss);
    pad_mask: True on padding (not attended to, no loss).
    """
    B = len(examples)
    prompts = tok.encode_batch([ex["prompt"] for ex in examples])
    targets = tok.encode_batch([ex["target"] for ex in examples])
    x0 = np.full((B, seq_len), tok.pad_id, dtype=np.int64)                 # (B, L)
    prompt_mask = np.zeros((B, seq_len), dtype=bool)                        # (B, L)
    pad_mask = np.ones((B, seq_len), dtype=bool)                            # (B, L)
    for b, (p, t) in enumerate(zip(prompts, targets)):
        ids = p + t + [tok.eos_id]
        if len(ids) > seq_len:
            raise ValueError(f"example {b} has {len(ids)} tokens, more than seq_len={seq_len}: "
                             f"raise --seq-len or drop long examples")
        x0[b, :len(ids)] = ids
        pad_mask[b, :len(ids)] = False
        prompt_mask[b, :len(p)] = True
    return {"x0": torch.from_numpy(x0), "prompt_mask": torch.from_numpy(prompt_mask),
            "pad_mask": torch.from_numpy(pad_mask)}


PRESETS = ("cnndm", "rocstories", "owt", "lm1b")    # the data modules with the paper's sampler options


def sampler_preset(name: str, tok, method):
    """The paper's decoding options for data `name` (its module's sampler_options(tok, method): CNN/DM,
    ROCStories, OWT and LM1B samples), or None: plain greedy decoding."""
    if name not in PRESETS:
        return None
    return importlib.import_module(f"data.{name}").sampler_options(tok, method)
