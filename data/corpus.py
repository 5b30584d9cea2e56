"""Wrapped text corpora for likelihood evaluation (data/owt.py, data/lm1b.py): documents -> one token stream ->
rows of L tokens, tokenized once and cached as a numpy memmap (nanoGPT style).

The rows are built as the official data builder builds its `*_wrapped*.dat` files (the BD3-LM/MDLM dataloader,
`get_dataset(wrap=True)`; setdlms evaluates those files): every document is tokenized without special tokens and
followed by EOS; `datasets.map(batched=True)` hands over 1000 documents at a time, whose tokens are concatenated
and cut into rows, the remainder of each 1000 being dropped. With `special` (LM1B) a row is [BOS] + L-2 tokens +
[EOS]; without (OWT's `_specialFalse` files) it is L tokens of the stream. Text files (data/textfile.py) take a
third form, [BOS] + L-1 tokens: every token of the stream is a target once, and a row starts as an unconditional
sample does (from BOS alone).

A row's position 0 is kept clean (the official `keep_clean_bos`): `batch` marks it as context (prompt_mask), so
no method predicts it and the likelihood counts the L-1 tokens after it. Rows have no padding.

Cache: <dir>/<name>_<split>_L<L>.bin, uint16 tokens (uint32 for vocabularies over 65536), written to a .tmp
file and renamed when complete; <dir> is --data-dir when given, else ~/.cache/setdiffusion.
"""
import glob
import os

import numpy as np
import torch

MAP_BATCH = 1000                 # documents per datasets.map batch in the official builder


def wrap(docs: list[list[int]], L: int, eos: int, bos: int | None = None, close: bool = True) -> list[list[int]]:
    """Rows of one batch of tokenized documents (each followed by eos); with bos, [bos] + L-2 + [eos] per row
    (close) or [bos] + L-1 (not close)."""
    stream = [t for doc in docs for t in doc + [eos]]
    head, tail = ([bos], [eos] if close else []) if bos is not None else ([], [])
    n = L - len(head) - len(tail)
    return [head + stream[i:i + n] + tail for i in range(0, len(stream) - n + 1, n)]


def read_texts(data_dir: str | None, hub: tuple, split: str, column: str = "text"):
    """A datasets.Dataset of the texts: the *.parquet / *.jsonl / *.json files of data_dir (the Hub's formats;
    one split per folder, or files named <split>*), else the Hub dataset hub = (repo id, config, split name)."""
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
        try:    # the Hub's parquet conversion: these datasets are loading scripts, which datasets no longer runs
            ds = datasets.load_dataset(hub[0], hub[1], split=hub[2], revision="refs/convert/parquet")
        except Exception as e:
            raise FileNotFoundError(f"cannot load {hub[0]} from the Hugging Face Hub ({type(e).__name__}): check "
                                    f"the network, or pass --data-dir with a local copy (parquet or jsonl)") from None
    if column not in ds.column_names:
        raise ValueError(f"the {split} data has no {column!r} column (found {ds.column_names})")
    return ds


def build(texts, tok, L: int, path: str, bos: int | None = None, detokenize=None, close: bool = True) -> None:
    """Tokenize texts (a sequence of str) into wrapped rows of L (with bos: [bos] + L-2 + [eos], or
    [bos] + L-1 when not close) and write them to path as a flat memmap, 1000 documents at a time (tiktoken's
    threads), straight to disk: memory stays that of one batch, whatever the corpus' size."""
    from tqdm import tqdm
    dtype = np.uint16 if tok.vocab_size <= 65536 else np.uint32
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    n = 0
    with open(path + ".tmp", "wb") as f:
        for i in tqdm(range(0, len(texts), MAP_BATCH), desc=f"tokenizing {os.path.basename(path)}", unit="k docs"):
            batch = texts[i:i + MAP_BATCH]
            docs = tok.encode_batch([detokenize(t) for t in batch] if detokenize else list(batch))
            rows_ = np.array(wrap(docs, L, tok.eos_id, bos, close), dtype=dtype).reshape(-1, L)   # (rows, L)
            f.write(rows_.tobytes())
            n += len(rows_)
    if n == 0:
        os.remove(path + ".tmp")
        raise ValueError(f"{len(texts)} documents give no full row of {L} tokens")
    os.replace(path + ".tmp", path)


def cache_dir(data_dir: str | None) -> str:
    """Where corpora are cached: --data-dir when given, else ~/.cache/setdiffusion."""
    return data_dir or os.path.expanduser("~/.cache/setdiffusion")


def cache_path(name: str, split: str, L: int, data_dir: str | None) -> str:
    return os.path.join(cache_dir(data_dir), f"{name}_{split}_L{L}.bin")


def rows(path: str, L: int, vocab_size: int) -> np.memmap:
    """The cached rows (N, L) of path."""
    dtype = np.uint16 if vocab_size <= 65536 else np.uint32
    return np.memmap(path, dtype=dtype, mode="r").reshape(-1, L)


def batch(tok, rows_: np.ndarray, seq_len: int) -> dict:
    """A batch of rows (B, L) -> x0, prompt_mask (position 0 only: the clean BOS), pad_mask (none)."""
    x0 = torch.from_numpy(np.asarray(rows_, dtype=np.int64))                # (B, L)
    if x0.shape[1] != seq_len:
        raise ValueError(f"rows of {x0.shape[1]} tokens, but the checkpoint's context is {seq_len}")
    prompt_mask = torch.zeros_like(x0, dtype=torch.bool)
    prompt_mask[:, 0] = True
    return {"x0": x0, "prompt_mask": prompt_mask, "pad_mask": torch.zeros_like(prompt_mask)}
