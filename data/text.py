"""The OWT and LM1B tokenizers, set up as the official code sets them up.

- "gpt2" (OWT): tiktoken's GPT-2 BPE (50257 tokens) plus the official [MASK], an added <|fim_middle|> = 50257,
  so the vocabulary is 50258 like the released DiTs; <|endoftext|> = 50256 is BOS, EOS and pad.
- "bert-base-uncased" (LM1B), or "bert:<repo id or folder>": WordPiece (30522 tokens) with [MASK] = 103,
  [PAD] = 0 and [SEP] = 102 as EOS (and BOS). It runs through Hugging Face's `tokenizers` library (optional,
  imported when needed): WordPiece needs BERT's normaliser (lower-casing, accent stripping, CJK and
  punctuation splitting) and greedy longest-match-first subwords, which that maintained library implements
  exactly as BERT does; it reads the repo's tokenizer.json, else its vocab.txt.

`WordPieceTokenizer` is the project's Tokenizer with
encode/encode_text/encode_batch/decode/vocab_size over a `tokenizers.Tokenizer` instead of a
tiktoken.Encoding; code that calls `tok.enc` directly (eval.py's stop rule) is tiktoken-only, and the LM1B
paths (data/lm1b.py, zeroshot.py) use encode/decode only.
"""
import os
from dataclasses import dataclass

import tiktoken

from data import PlainText, Tokenizer
from data.hub import hub_dir

GPT2_MASK = "<|fim_middle|>"                     # the official name of the added [MASK]
BERT_REPO = "google-bert/bert-base-uncased"


def gpt2_encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("gpt2")


def gpt2_tokenizer() -> Tokenizer:
    try:
        base = gpt2_encoding()
    except Exception as e:                      # the BPE files download once into tiktoken's cache
        raise FileNotFoundError(f"cannot load tiktoken's gpt2 encoding ({type(e).__name__}): it is "
                                f"downloaded once, so check the network or point TIKTOKEN_CACHE_DIR at a "
                                f"cache holding it") from None
    enc = tiktoken.Encoding("gpt2-mask", pat_str=base._pat_str, mergeable_ranks=base._mergeable_ranks,
                            special_tokens={**base._special_tokens, GPT2_MASK: 50257})
    return Tokenizer(enc, "gpt2", mask_id=50257, eos_id=50256, pad_id=50256)


@dataclass
class WordPieceTokenizer(Tokenizer):
    """Tokenizer over a `tokenizers.Tokenizer` (enc): no special tokens are added by encode."""

    @property
    def vocab_size(self) -> int:
        return self.enc.get_vocab_size(with_added_tokens=True)

    @property
    def mask_text(self) -> str:
        return self.enc.id_to_token(self.mask_id)

    def encode(self, text: str) -> list[int]:
        if isinstance(text, PlainText):
            return self.encode_text(text)
        return self.enc.encode(text, add_special_tokens=False).ids

    def encode_text(self, text: str) -> list[int]:
        """Ordinary text: the text "[MASK]" is not the [MASK] token (tokenizers' encode_special_tokens)."""
        self.enc.encode_special_tokens = True
        try:
            return self.enc.encode(text, add_special_tokens=False).ids
        finally:
            self.enc.encode_special_tokens = False

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        return self.enc.decode([int(i) for i in ids if int(i) not in (self.mask_id, self.pad_id)])


def bert_tokenizer(name_or_path: str = BERT_REPO) -> WordPieceTokenizer:
    """bert-base-uncased's WordPiece from a Hub repo id or a folder holding tokenizer.json or vocab.txt."""
    try:
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers.implementations import BertWordPieceTokenizer
    except ImportError:
        raise ValueError("the LM1B tokenizer needs the `tokenizers` package: "
                         "pip install tokenizers") from None
    d = hub_dir(name_or_path, ["tokenizer.json", "vocab.txt"])
    if os.path.isfile(os.path.join(d, "tokenizer.json")):
        enc = HFTokenizer.from_file(os.path.join(d, "tokenizer.json"))
    elif os.path.isfile(os.path.join(d, "vocab.txt")):
        enc = BertWordPieceTokenizer(os.path.join(d, "vocab.txt"), lowercase=True)._tokenizer
    else:
        raise FileNotFoundError(f"{d} holds neither tokenizer.json nor vocab.txt "
                                f"(bert-base-uncased's WordPiece)")
    ids = {t: enc.token_to_id(t) for t in ("[MASK]", "[PAD]", "[SEP]")}
    if None in ids.values():
        raise ValueError(f"{name_or_path}: not a BERT vocabulary, it lacks "
                         f"{[t for t, i in ids.items() if i is None]}")
    name = "bert-base-uncased" if name_or_path == BERT_REPO else "bert:" + name_or_path
    return WordPieceTokenizer(enc, name, mask_id=ids["[MASK]"], eos_id=ids["[SEP]"], pad_id=ids["[PAD]"])
