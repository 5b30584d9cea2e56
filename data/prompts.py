"""Prompts a person types (sample.py --prompt, --prompt-file) to token ids: plain text, except the [MASK]
spans (<|mask|>, {mask:N} and the tokenizer's own [MASK] text) that the diffusion samplers fill in place.
Every problem is a ValueError of one line that names the prompt or the file.
"""
import os
import re

from data.files import read_capped

MAX_PROMPT_FILE = 4 << 20      # bytes: a prompt file is read whole, so a larger one (or /dev/zero) is refused
MASKS = re.compile(r"<\|mask\|>|\{mask:(\d+)\}")


def plain_ids(tok, text: str, raw: bool) -> list[int]:
    """Token ids of text with no special tokens: special-token text such as <|endoftext|> stays plain text.
    raw: text came from the command line, where bytes that are not UTF-8 arrive as surrogate escapes; a
    byte-level tokenizer gets those bytes back (os.fsencode), another tokenizer refuses them."""
    if tok.name == "bytes":
        return list(os.fsencode(text) if raw else text.encode("utf-8"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = os.fsencode(text[e.start:e.end])
        raise ValueError(f"--prompt holds bytes that are not UTF-8 text ({bad.hex(' ')}): the {tok.name} "
                         f"tokenizer reads text; pass UTF-8") from None
    if hasattr(tok, "encode_text"):     # data.Tokenizer's ordinary-text encoding (Qwen3: NFC first)
        return tok.encode_text(text)
    if hasattr(tok.enc, "encode_ordinary"):
        return tok.enc.encode_ordinary(text)
    return tok.encode(text)             # a WordPiece tokenizer: its own rules for special-token text


def prompt_ids(tok, prompt: str, seq_len: int, k: int, raw: bool = False) -> list[int]:
    """Token ids of prompt k: <|mask|>, the tokenizer's own [MASK] text and {mask:N} become N [MASK] tokens
    (N checked against the context before any is made); all other text is plain text."""
    own = getattr(tok, "mask_text", None) or (tok.enc.decode([tok.mask_id])
                                              if hasattr(tok.enc, "encode_ordinary") else "")
    pattern = re.compile(MASKS.pattern + (f"|{re.escape(own)}" if own and own != "<|mask|>" else ""))
    ids, at = [], 0
    for m in pattern.finditer(prompt):
        ids += plain_ids(tok, prompt[at:m.start()], raw)
        at = m.end()
        n = 1 if m[1] is None else int(m[1]) if len(m[1]) <= 12 else seq_len + 1
        if len(ids) + n > seq_len:
            raise ValueError(f"prompt {k} has more than {seq_len} tokens with its {m[0]}: more than the "
                             f"model's context (seq_len={seq_len}); shorten it")
        ids += [tok.mask_id] * n
    return ids + plain_ids(tok, prompt[at:], raw)


def fit(k: int, n: int, max_new: int, seq_len: int):
    """Prompt k (n tokens) and max_new new tokens must fit the model's context (ValueError: one line)."""
    if n > seq_len:
        raise ValueError(f"prompt {k} has {n} tokens, more than the model's context "
                         f"(seq_len={seq_len}); shorten it")
    if n + max_new > seq_len:
        flag = f"--max-new-tokens {max_new}"
        raise ValueError(f"prompt {k} has {n} tokens, and with {flag} that is {n + max_new}, more than the "
                         f"model's context (seq_len={seq_len}): at most {seq_len - n} new tokens fit; pass "
                         f"--max-new-tokens {seq_len - n} or less, or shorten the prompt")


def read_prompts(path: str) -> list[str]:
    """One prompt per line of a UTF-8 text file of at most MAX_PROMPT_FILE bytes; a literal \\n in a line
    stands for a newline. Every problem is a ValueError naming the file."""
    text = read_capped(path, MAX_PROMPT_FILE, "--prompt-file", "give a text file of prompts, one per line")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    prompts = [line.replace("\\n", "\n") for line in lines if line.strip()]
    if not prompts:
        raise ValueError(f"{path} holds no prompt: write one prompt per line")
    return prompts


def prompt_texts(prompt, prompt_file, task) -> tuple[list[str], bool]:
    """sample.py's prompts and whether they came from the command line (raw: bytes that are not UTF-8 kept):
    --prompt, each line of --prompt-file, else the task's first held-out problem, or on a corpus (task None)
    the empty text, so that the sample continues BOS alone."""
    if prompt is not None:
        return [prompt.replace("\\n", "\n")], True
    if prompt_file:
        return read_prompts(prompt_file), False
    return [task.load("test")[0]["prompt"] if task is not None else ""], False


def encode_prompts(tok, prompts: list[str], raw: bool, head: list[int], seq_len: int, max_new: int,
                   can_infill: bool, method_name: str) -> list[list[int]]:
    """Token ids of each prompt after head (a corpus checkpoint's BOS), each checked against the context with
    max_new new tokens, and [MASK]s only for a method that can fill them (ValueError: one line)."""
    ids = []
    for k, prompt in enumerate(prompts, 1):
        ids.append(head + prompt_ids(tok, prompt, seq_len, k, raw))
        fit(k, len(ids[-1]), max_new, seq_len)
        if tok.mask_id in ids[-1] and not can_infill:
            raise ValueError(f"prompt {k} has [MASK]s to fill, and {method_name.upper()} cannot fill masks "
                             f"inside the prompt (it continues the left context only): use a Set Diffusion, "
                             f"BD3-LM or MDLM checkpoint")
    return ids


def batches(ids: list[list[int]], batch_size: int, max_new: int, seq_len: int, default: bool):
    """(index of the first prompt, prompts, new tokens) per batch, in order. An explicit max_new is every
    batch's (fit checked it); the checkpoint's default shrinks to what fits beside each prompt, and a prompt
    that would shorten the replies of the batch before it starts a new batch."""
    out = []
    for k, row in enumerate(ids):
        room = min(max_new, seq_len - len(row)) if default else max_new
        if out and len(out[-1][1]) < batch_size and out[-1][2] == room:
            out[-1][1].append(row)
        else:
            out.append((k, [row], room))
    return out
