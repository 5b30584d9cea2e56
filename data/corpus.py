"""Wrapped text corpora for likelihood evaluation (data/owt.py, data/lm1b.py): documents -> one token stream
-> rows of L tokens, tokenized once and cached as a numpy memmap (nanoGPT style).

The rows are built as the official data builder builds its `*_wrapped*.dat` files (the BD3-LM/MDLM dataloader,
`get_dataset(wrap=True)`; setdlms evaluates those files): every document is tokenized without special tokens
and followed by EOS; `datasets.map(batched=True)` hands over 1000 documents at a time, whose tokens are
concatenated and cut into rows, the remainder of each 1000 being dropped. With `special` (LM1B) a row is [BOS]
+ L-2 tokens + [EOS]; without (OWT's `_specialFalse` files) it is L tokens of the stream. Text files
(data/textfile.py) take a third form, [BOS] + L-1 tokens: every token of the stream is a target once, and a
row starts as an unconditional sample does (from BOS alone).

A row's position 0 is kept clean (the official `keep_clean_bos`): `batch` marks it as context (prompt_mask),
so no method predicts it and the likelihood counts the L-1 tokens after it. Rows have no padding.

Cache: <dir>/<name>_<split>_L<L>.bin (<dir> is --data-dir when given, else ~/.cache/setdiffusion): a header of
HEADER_BYTES (what built the rows: the tokenizer, its vocabulary, L, the number of rows and bytes, their
largest id and their sha256), then the rows, uint16 tokens (uint32 for vocabularies over 65536). `cached`
builds it once, under a lock (<path>.lock: a second run waits, then reads the first one's), into a fresh
temporary file beside it (two builders never share one) whose header is written last, then renamed: a kill
leaves no cache at all. `rows` checks it on every use: the header (a file without one, from an older version
or not a cache, is refused), the tokenizer, the size (a cache cut short by a full disk or a killed copy), the
largest id against the vocabulary, and the checksum of caches up to FULL_CHECK bytes. A cache that fails is
one line naming the file: delete it, and it is built again.
"""
import contextlib
import glob
import hashlib
import json
import os
import sys

import numpy as np
import torch

from data.files import replaced

MAP_BATCH = 1000                 # documents per datasets.map batch in the official builder
# a cache's first bytes; its JSON header follows, padded to HEADER_BYTES
MAGIC = b"setdiffusion token rows 1\n"
HEADER_BYTES = 1024
FULL_CHECK = 1 << 30             # caches up to this many bytes are checksummed on every use (about a second)


def wrap(docs: list[list[int]], L: int, eos: int, bos: int | None = None,
         close: bool = True) -> list[list[int]]:
    """Rows of one batch of tokenized documents (each followed by eos); with bos, [bos] + L-2 + [eos] per row
    (close) or [bos] + L-1 (not close)."""
    stream = [t for doc in docs for t in doc + [eos]]
    head, tail = ([bos], [eos] if close else []) if bos is not None else ([], [])
    n = L - len(head) - len(tail)
    return [head + stream[i:i + n] + tail for i in range(0, len(stream) - n + 1, n)]


def read_texts(data_dir: str | None, hub: tuple, split: str, column: str = "text"):
    """A datasets.Dataset of the texts: the *.parquet / *.jsonl / *.json files of data_dir (the Hub's formats;
    one split per folder, or files named <split>*), else the Hub dataset hub = (repo id, config, split
    name)."""
    import datasets
    if data_dir is not None:
        if not os.path.isdir(data_dir):
            raise FileNotFoundError(f"--data-dir {data_dir}: no such folder")
        for ext, kind in (("parquet", "parquet"), ("jsonl", "json"), ("json", "json")):
            files = sorted(glob.glob(os.path.join(data_dir, f"{split}*.{ext}"))) or \
                sorted(glob.glob(os.path.join(data_dir, f"*.{ext}")))
            if files:
                ds = datasets.load_dataset(kind, data_files=files, split="train")
                break
        else:
            raise FileNotFoundError(f"--data-dir {data_dir} holds no .parquet, .jsonl or .json files")
    else:
        # the Hub's parquet conversion: these datasets are loading scripts, which datasets no longer runs
        try:
            ds = datasets.load_dataset(hub[0], hub[1], split=hub[2], revision="refs/convert/parquet")
        except Exception as e:
            raise FileNotFoundError(f"cannot load {hub[0]} from the Hugging Face Hub ({type(e).__name__}): "
                                    f"check the network, or pass --data-dir with a local copy "
                                    f"(parquet or jsonl)") from None
    if column not in ds.column_names:
        raise ValueError(f"the {split} data has no {column!r} column (found {ds.column_names})")
    return ds


def build(texts, tok, L: int, path: str, bos: int | None = None, detokenize=None, close: bool = True,
          short: str = "") -> None:
    """Tokenize texts (a sequence of str) into wrapped rows of L (with bos: [bos] + L-2 + [eos], or
    [bos] + L-1 when not close) and write them to path as a flat memmap after its header, 1000 documents at a
    time (tiktoken's threads), straight to disk: memory stays that of one batch, whatever the corpus' size.
    The file is written to a fresh temporary name and renamed when whole (data/files.replaced). ValueError
    (one line): documents that give no row (short: what to say then), or a write that fails (a full disk;
    nothing of the file is left)."""
    from tqdm import tqdm
    dtype = np.uint16 if tok.vocab_size <= 65536 else np.uint32
    n, top, digest = 0, -1, hashlib.sha256()
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with replaced(path, "wb") as f:
            f.write(bytes(HEADER_BYTES))                  # no header until the rows are all there
            for i in tqdm(range(0, len(texts), MAP_BATCH), desc=f"tokenizing {os.path.basename(path)}",
                          unit="k docs"):
                batch = texts[i:i + MAP_BATCH]
                docs = tok.encode_batch([detokenize(t) for t in batch] if detokenize else list(batch))
                rows_ = np.array(wrap(docs, L, tok.eos_id, bos, close),
                                 dtype=dtype).reshape(-1, L)   # (rows, L)
                data = rows_.tobytes()
                f.write(data)
                digest.update(data)
                n, top = n + len(rows_), max(top, int(rows_.max()) if len(rows_) else -1)
            if n == 0:
                raise ValueError(short or f"{len(texts)} documents give no full row of {L} tokens")
            f.seek(0)
            f.write(header({"tokenizer": tok.name, "vocab_size": tok.vocab_size,
                            "dtype": np.dtype(dtype).name,
                            "L": L, "rows": n, "bytes": n * L * np.dtype(dtype).itemsize, "max_id": top,
                            "sha256": digest.hexdigest()}))
    except OSError as e:
        raise ValueError(f"cannot write the token cache {path} ({e.strerror or e}): make room there, or give "
                         f"--data-dir a folder with room") from None


def header(meta: dict) -> bytes:
    text = MAGIC + json.dumps(meta, allow_nan=False).encode()
    return text + b" " * (HEADER_BYTES - 1 - len(text)) + b"\n"


def read_header(path: str) -> tuple[dict | None, int]:
    """(the header of the cache at path, or None when it has none; the file's size in bytes)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise ValueError(f"cannot read the token cache {path}: {e.strerror or e}") from None
    if len(head) < HEADER_BYTES or not head.startswith(MAGIC):
        return None, size
    try:
        meta = json.loads(head[len(MAGIC):])
    except ValueError:
        return None, size
    return (meta if isinstance(meta, dict) else None), size


def checksum(path: str) -> str:
    """sha256 of the rows of the cache at path (everything after its header)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(HEADER_BYTES)
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cache_dir(data_dir: str | None) -> str:
    """Where corpora are cached: --data-dir when given (a folder; a file is a ValueError), else
    ~/.cache/setdiffusion."""
    if data_dir is not None and os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise ValueError(f"--data-dir {data_dir} is a file: give a folder (the corpus' local copy and its "
                         f"token cache)")
    return data_dir or os.path.expanduser("~/.cache/setdiffusion")


def cache_path(name: str, split: str, L: int, data_dir: str | None) -> str:
    return os.path.join(cache_dir(data_dir), f"{name}_{split}_L{L}.bin")


@contextlib.contextmanager
def building(path: str):
    """Hold <path>.lock while the cache at path is built: a second process building it waits here. A folder
    that cannot be written is a ValueError of one line; a file system without locks (some NFS, Lustre) builds
    without one, after a note: each builder writes its own temporary file and renames it whole, so two at
    once cost time, never a mixed cache."""
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        lock = open(path + ".lock", "a")
    except OSError as e:
        raise ValueError(f"cannot build the token cache {path} ({e.strerror or e}): give --data-dir a folder "
                         f"you can write, or build the cache once where you can and copy it there") from None
    with lock:
        try:
            import fcntl
        except ImportError:                               # no fcntl (Windows): no lock
            yield
            return
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process to finish building {path}", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError as e:
            print(f"note: {path}.lock cannot be locked on this file system ({e.strerror}): building the "
                  f"cache without the lock", file=sys.stderr)
        yield


def cached(path: str, tok, L: int, texts, **how) -> np.memmap:
    """The checked rows (N, L) of the cache at path, built first when it is not there (under its lock; texts()
    gives the documents, how the rest of build's arguments)."""
    if not os.path.exists(path):
        with building(path):
            if not os.path.exists(path):                  # not built meanwhile by the run we waited for
                build(texts(), tok, L, path, **how)
    return rows(path, L, tok)


def rows(path: str, L: int, tok) -> np.memmap:
    """The cached rows (N, L) of path, checked against its header and the tokenizer tok (the module
    docstring); a cache that fails is a ValueError naming the file."""
    meta, size = read_header(path)
    again = "delete it, and it is built again"
    if meta is None:
        raise ValueError(f"{path} is not a token cache of this version (no header: an older version's, or "
                         f"another file): {again}")
    want = {"tokenizer": tok.name, "vocab_size": tok.vocab_size, "L": L}
    if any(meta.get(k) != v for k, v in want.items()):
        raise ValueError(f"{path} holds rows of {meta.get('L')} tokens built with the "
                         f"{meta.get('tokenizer')} tokenizer ({meta.get('vocab_size')} ids), not {L} with "
                         f"{tok.name} ({tok.vocab_size}): pass --tokenizer {meta.get('tokenizer')}, or "
                         f"another --data-dir")
    dtype = np.dtype(np.uint16 if tok.vocab_size <= 65536 else np.uint32)
    expected = meta.get("rows", -1) * L * dtype.itemsize
    if meta.get("dtype") != dtype.name or meta.get("bytes") != expected or size != HEADER_BYTES + expected:
        raise ValueError(f"{path} holds {size - HEADER_BYTES} bytes of rows where its header says "
                         f"{expected}: it was cut short (a full disk, a killed copy) or changed: {again}")
    if not isinstance(meta.get("max_id"), int) or not 0 <= meta["max_id"] < tok.vocab_size:
        raise ValueError(f"{path}: its largest token id {meta.get('max_id')!r} is outside the {tok.name} "
                         f"vocabulary of {tok.vocab_size}: {again}")
    if expected <= FULL_CHECK and checksum(path) != meta.get("sha256"):
        raise ValueError(f"{path} does not match its checksum: it is damaged: {again}")
    return np.memmap(path, dtype=dtype, mode="r", offset=HEADER_BYTES).reshape(-1, L)


def batch(tok, rows_: np.ndarray, seq_len: int) -> dict:
    """A batch of rows (B, L) -> x0, prompt_mask (position 0 only: the clean BOS), pad_mask (none)."""
    x0 = torch.from_numpy(np.asarray(rows_, dtype=np.int64))                # (B, L)
    if x0.shape[1] != seq_len:
        raise ValueError(f"rows of {x0.shape[1]} tokens, but the checkpoint's context is {seq_len}")
    prompt_mask = torch.zeros_like(x0, dtype=torch.bool)
    prompt_mask[:, 0] = True
    return {"x0": x0, "prompt_mask": prompt_mask, "pad_mask": torch.zeros_like(prompt_mask)}
