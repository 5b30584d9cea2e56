"""The Qwen3 tokenizer, rebuilt as a tiktoken.Encoding from a Hugging Face `tokenizer.json`.

Qwen2/Qwen3 use byte-level BPE (like GPT-2): every vocab string is written in GPT-2's "byte to unicode"
alphabet, and a token's id is also its merge rank. So tiktoken can run it directly:
    mergeable ranks = {bytes of vocab string: id}, pattern = the pre-tokenizer's Split regex,
    special tokens  = every entry of "added_tokens" (<|endoftext|> 151643 ... </think> 151668).
The "merges" list is not needed (rank = id) and is ignored.

Vocabulary size. For Qwen3 the tokenizer knows 151643 BPE tokens + 26 added tokens, so
`Tokenizer.vocab_size` (tiktoken's n_vocab = max id + 1) is 151669, while the model's embedding has
151936 rows (the padding rows carry no text). Size the model from the model config, not from
vocab_size. Ids the tokenizer does not know (151669..151935) decode to nothing instead of raising.

Like the Hugging Face tokenizer, every encode (encode, encode_text, data.encode) first applies
Unicode NFC normalisation (Qwen's "normalizer").
"""
import json
import os
import unicodedata
from dataclasses import dataclass

import tiktoken

from data import Tokenizer
from data.hub import hub_dir

# Qwen2/Qwen3 pre-tokenisation regex (GPT-4 style, but digits are split one per token: `\p{N}`).
# Used only when tokenizer.json has no Split pattern of its own.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def gpt2_byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: {unicode char: the byte it stands for}.

    Printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes
    (control chars, space, ...) are given the code points 256, 257, ... in byte order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    char_of, extra = {}, 0
    for b in range(256):
        if b in printable:
            char_of[b] = chr(b)
        else:
            char_of[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in char_of.items()}


@dataclass
class QwenTokenizer(Tokenizer):
    """A data.Tokenizer that NFC-normalises before encoding and skips unknown ids when decoding."""

    def normalize(self, text: str) -> str:
        return unicodedata.normalize("NFC", text)

    def decode(self, ids) -> str:
        return super().decode([i for i in ids if int(i) < self.enc.n_vocab])


def find_tokenizer_json(name_or_path: str) -> str:
    """Path of tokenizer.json: the file itself, in a local directory, else from the Hub / its cache
    (data/hub.py)."""
    if os.path.isfile(os.path.expanduser(name_or_path)):
        return os.path.expanduser(name_or_path)
    file = os.path.join(hub_dir(name_or_path, ["tokenizer.json"]), "tokenizer.json")
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{file} not found: pass a directory holding Qwen3's tokenizer.json")
    return file


def split_pattern(pre_tokenizer) -> str | None:
    """The first Split regex inside a tokenizer.json "pre_tokenizer" (possibly nested in a Sequence)."""
    if not isinstance(pre_tokenizer, dict):
        return None
    if pre_tokenizer.get("type") == "Split" and "Regex" in pre_tokenizer.get("pattern", {}):
        return pre_tokenizer["pattern"]["Regex"]
    for child in pre_tokenizer.get("pretokenizers", []):
        if (pattern := split_pattern(child)) is not None:
            return pattern
    return None


def qwen3_tokenizer(name_or_path: str) -> Tokenizer:
    """Qwen3's tokenizer from a local directory / tokenizer.json path or a Hub repo id.

    mask = <|fim_middle|> (151660), eos = pad = <|endoftext|> (151643), as in the official code.
    """
    with open(find_tokenizer_json(name_or_path), encoding="utf-8") as f:
        spec = json.load(f)
    specials = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    for needed in ("<|endoftext|>", "<|fim_middle|>"):
        if needed not in specials:
            raise ValueError(f"tokenizer.json of {name_or_path} has no added token {needed}: not a "
                             f"Qwen3 tokenizer")

    byte_of = gpt2_byte_alphabet()
    special_ids = set(specials.values())
    ranks = {bytes(byte_of[c] for c in token): i                       # rank = id
             for token, i in spec["model"]["vocab"].items() if i not in special_ids}
    pattern = split_pattern(spec.get("pre_tokenizer")) or QWEN2_PATTERN
    enc = tiktoken.Encoding("qwen3", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    eos = specials["<|endoftext|>"]
    return QwenTokenizer(enc, name="qwen3:" + name_or_path, mask_id=specials["<|fim_middle|>"],
                         eos_id=eos, pad_id=eos)
