"""Any UTF-8 text as a training corpus: `--data text:PATH`, a .txt file or a folder of them (nanoGPT's
Shakespeare-char setting, for any text).

A file is one document; a folder's *.txt files (searched recursively, in sorted path order) are one document
each. Every document is encoded as ordinary text (PlainText: "<|endoftext|>" written in it stays those
characters), followed by EOS, and the stream is cut into rows of [BOS] + L-1 tokens by data/corpus.py's
builder, BOS being the tokenizer's EOS (GPT-2's convention). Position 0, the BOS, is context and never
predicted (the official keep_clean_bos), so every token of the stream is a target exactly once, and a row
starts as an unconditional sample starts (eval.py --task unconditional, sample.py without a prompt: from BOS
alone).

Splits: the rows in stream order; the last VALID_FRACTION of them (at least one) are "validation" (also
"test"), the rest "train": a held-out tail, the same on every run.

Tokenizer: "bytes" by default (256 byte tokens, exact for any text, L = SEQ_LEN = 256); any other tokenizer of
data.get_tokenizer works too (--tokenizer gpt2).

Cache: the rows are built once into <dir>/text-<name>-<tokenizer>-<key>_all_L<L>.bin (data/corpus.py; <dir> is
--data-dir, else ~/.cache/setdiffusion), under a lock, and checked on every use; the key hashes the files'
paths, sizes and modification times, so an edited text is built again.

Errors are one line (FileNotFoundError / ValueError) that says what to do: a missing path, a folder with no
.txt file, a named pipe, device or socket (which might never give its data: refused before it is opened), an
empty text, a file that is not UTF-8 (a binary file), a text too short for two rows.
"""
import hashlib
import os
import re
import stat
from types import SimpleNamespace

from data import PlainText, corpus

PREFIX = "text:"
TOKENIZER = "bytes"
SEQ_LEN = 256
VALID_FRACTION = 0.05            # the held-out tail: this fraction of the rows, at least one


def files_of(path: str) -> list[str]:
    """The text files of path: the file itself, or a folder's *.txt files (recursive, sorted), each a regular
    file."""
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        found = sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names
                       if f.endswith(".txt"))
        if not found:
            raise FileNotFoundError(f"text:{path}: the folder holds no .txt file; put the text in "
                                    f"files ending .txt")
    elif os.path.exists(path):
        found = [path]
    else:
        raise FileNotFoundError(f"text:{path}: no such file or folder; give a UTF-8 text file or a folder of "
                                f".txt files")
    for f in found:                     # before any is opened: a pipe nothing writes blocks open() for ever
        where = f"text:{path}" + ("" if f == path else f": {f}")
        try:
            mode = os.stat(f).st_mode
        except OSError as e:                                   # a link to nothing, a folder we may not enter
            raise ValueError(f"{where}: cannot read it ({e.strerror}): remove it, or give another text") \
                from None
        if not stat.S_ISREG(mode):
            raise ValueError(f"{where} is {not_regular(mode)}, not a regular file, and may never give its "
                             f"data: give regular text files (save the text to a file first)")
    return found


def not_regular(mode: int) -> str:
    """What a file of this st_mode is, when it is no regular file: 'a named pipe (FIFO)', ..."""
    kinds = [(stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]
    return next((k for test, k in kinds if test(mode)), "not a file")


def read_text(path: str) -> str:
    """The text of one file, checked: UTF-8 (a leading byte-order mark dropped) and not empty."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}): is it "
                         f"a binary file? Give a text file saved as UTF-8") from None
    if "\x00" in text:
        raise ValueError(f"{path} holds NUL bytes, so it is a binary file, not text: give a UTF-8 text file")
    return text


def read_documents(path: str) -> list[PlainText]:
    """The documents of path (one per file), every one checked; an error if they hold no text at all."""
    docs = [PlainText(read_text(f)) for f in files_of(path)]
    if not any(d.strip() for d in docs):
        raise ValueError(f"text:{path} is empty: give a file (or folder of .txt files) with some text in it")
    return docs


def cache_name(path: str, tok_name: str) -> str:
    """text-<file or folder name>-<tokenizer>-<hash of the files' paths, sizes and mtimes>."""
    h = hashlib.sha1()
    for f in files_of(path):
        st = os.stat(f)
        h.update(f"{os.path.abspath(f)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    stem = os.path.splitext(os.path.basename(os.path.abspath(os.path.expanduser(path))))[0]
    safe = lambda s: re.sub(r"[^A-Za-z0-9._-]+", "_", s)[:40]
    return f"text-{safe(stem)}-{safe(tok_name)}-{h.hexdigest()[:12]}"


def split_rows(rows, split: str):
    """The train rows or the held-out tail of rows (N, L)."""
    n = len(rows)
    if n < 2:
        raise ValueError(f"the text gives {n} row(s) of {rows.shape[1]} tokens, too few to hold out a "
                         f"validation tail: give more text or a smaller --seq-len")
    n_valid = max(1, round(n * VALID_FRACTION))
    return rows[:n - n_valid] if split == "train" else rows[n - n_valid:]


def load(split: str, path: str, data_dir: str | None = None, tok=None, L: int = SEQ_LEN):
    """Token rows (N, L) of "train" or "validation" (also "test") of the text at path, built and cached on
    first use (tokenized with tok, default "bytes")."""
    from data import get_tokenizer
    split = "validation" if split == "test" else split
    if split not in ("train", "validation"):
        raise ValueError(f"a text corpus has the splits train and validation, not {split!r}")
    tok = tok or get_tokenizer(TOKENIZER)
    cached = corpus.cache_path(cache_name(path, tok.name), "all", L, data_dir)
    if not os.path.exists(cached):
        docs = read_documents(path)                      # checked first: a bad text is one line
        short = (f"text:{path} has {sum(len(d) for d in docs)} characters, fewer than one row of {L} tokens: "
                 f"give more text or a smaller --seq-len")
        return split_rows(corpus.cached(cached, tok, L, lambda: docs, bos=bos(tok), close=False, short=short),
                          split)
    return split_rows(corpus.rows(cached, L, tok), split)


def bos(tok) -> int:
    """The token every row starts with (prompts on a text checkpoint start with it too): BOS = EOS."""
    return tok.eos_id


def make_corpus(path: str) -> SimpleNamespace:
    """The corpus of `--data text:PATH`, with the interface of data/owt.py (NAME, TOKENIZER, SEQ_LEN, load,
    batch, bos). NAME is text:<absolute path>, what config.json stores, so eval.py finds the text from
    anywhere."""
    if not path:
        raise ValueError("--data text:PATH needs a path: a UTF-8 text file or a folder of .txt files")
    path = os.path.abspath(os.path.expanduser(path))
    return SimpleNamespace(NAME=PREFIX + path, TOKENIZER=TOKENIZER, SEQ_LEN=SEQ_LEN, batch=corpus.batch,
                           bos=bos, load=lambda split, data_dir=None, tok=None, L=SEQ_LEN:
                           load(split, path, data_dir, tok, L))
