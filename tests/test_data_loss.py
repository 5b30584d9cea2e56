"""Nothing lost, nothing silently wrong: train.py never overwrites a folder whose config.json it did not write
(whatever its file names), never deletes a folder it did not create (a user's <out>.old.deleting survives
every save), keeps a symlinked --out-dir a link (lock and swaps on the real folder), repairs what an older
version's symlink bug left, and a full disk during a save is one line that keeps the last checkpoint. Results
files (eval.py --json, paper.results' tables and plots) are written whole or not at all. Corpus caches are
checked when reused. Ctrl-C in eval.py and sample.py is one line, exit code 130, no partial file.
python -m pytest -q tests/test_data_loss.py
"""
import contextlib
import errno
import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import train
from common import saving
from helpers import error_of

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task

TINY = ["--model", "ar", "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--batch-size", "2",
        "--eval-limit", "1", "--max-new-tokens", "4", "--warmup", "1"]


def snapshot(root) -> dict:
    """Every file and link under root -> its bytes or its target (nothing changed, moved or deleted)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            if os.path.islink(p):
                out[os.path.relpath(p, root)] = "-> " + os.readlink(p)
            elif os.path.isfile(p):
                out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def leftovers(out) -> list[str]:
    """What a save left beside out besides out and its lock: scratch folders of its own."""
    parent, name = os.path.split(str(out))
    return sorted(n for n in os.listdir(parent) if n.startswith(name + ".") and n != name + ".lock")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny AR checkpoint (step 1) written by train.py; tests copy it, never change it."""
    d = tmp_path_factory.mktemp("base") / "ar"
    train.main([*TINY, "--max-iters", "1", "--out-dir", str(d)])
    return d


# ----------------------------------------------------------------------------- folders train.py did not write

def test_a_downloaded_model_folder_as_out_dir_is_refused_whatever_its_file_names(base, tmp_path):
    """A Hugging Face model folder holds config.json and model.safetensors, the names train.py writes: it is
    refused in one line, byte for byte untouched, because its config.json is not one train.py writes; so is
    our own checkpoint whose config.json was edited into something train.py cannot read. A checkpoint of an
    older version (no sampler, no predict_padding in config.json) is still ours and resumes."""
    hf = tmp_path / "Qwen3-0.6B"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                "hidden_size": 1024, "vocab_size": 151936}))
    save_file({"model.embed_tokens.weight": torch.ones(4, 2)}, str(hf / "model.safetensors"))
    edited = tmp_path / "edited"
    shutil.copytree(base, edited)
    config = json.loads((edited / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps({**config, "method": "gpt"}))
    before = snapshot(tmp_path)
    for out, why in [(hf, "its config.json has no 'model': it was not written by train.py, or was edited"),
                     (edited, "its config.json: unknown method 'gpt' (one of ar, mdlm, bd3lm, "
                              "setdiffusion)")]:
        for resume in ([], ["--resume"]):
            assert error_of(train.main, [*TINY, "--max-iters", "2", "--out-dir", str(out), *resume]) == (
                f"error: {out} is not a checkpoint directory written by train.py ({why}), and train.py "
                f"replaces that directory at every save: choose another --out-dir")
            assert snapshot(tmp_path) == before
    older = tmp_path / "older"
    shutil.copytree(base, older)
    config = json.loads((older / "config.json").read_text())
    (older / "config.json").write_text(json.dumps({k: v for k, v in config.items()
                                                   if k not in ("sampler", "predict_padding")}))
    train.main([*TINY, "--max-iters", "2", "--out-dir", str(older), "--resume"])
    assert saving.step_of(str(older)) == 2 and leftovers(older) == []


def test_folders_named_like_a_saves_scratch_are_never_deleted(base, tmp_path):
    """A user's <out>.old.deleting, <out>.tmp.deleting (older versions' trash names) and <out>.tmp-<8 hex> (a
    name of the new scratch pattern, but not made by a save: no mark) survive saves and resumes byte for
    byte; each save leaves nothing of its own behind."""
    out = tmp_path / "ck"
    shutil.copytree(base, out)
    for name in ("ck.old.deleting", "ck.tmp.deleting", "ck.tmp-0123abcd", "ck.old-89abcdef"):
        shutil.copytree(base, tmp_path / name)
        (tmp_path / name / "mine.txt").write_text("precious")
    (tmp_path / "ck.tmp-deadbeef").mkdir()
    (tmp_path / "ck.tmp-deadbeef" / "model.safetensors").write_text("a user's file of that name")
    mine = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith(("ck/", "ck.lock"))}
    train.main([*TINY, "--max-iters", "3", "--save-every", "1", "--out-dir", str(out), "--resume"])
    train.main([*TINY, "--max-iters", "4", "--out-dir", str(out), "--resume"])
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith(("ck/", "ck.lock"))} == mine
    assert saving.step_of(str(out)) == 4 and sorted(os.listdir(out)) == sorted(saving.FILES)
    assert leftovers(out) == sorted(["ck.old.deleting", "ck.tmp.deleting", "ck.tmp-0123abcd",
                                     "ck.old-89abcdef", "ck.tmp-deadbeef"])


# ----------------------------------------------------------------------------- a symlinked --out-dir

def test_a_symlinked_out_dir_stays_a_link_and_is_locked_at_its_target(tmp_path):
    """Two runs of several saves through a link: the link is still a link to the same folder, which holds the
    newest checkpoint, and nothing is left beside either; the lock is the target's, so a run through the link
    and one on the target exclude each other."""
    target = tmp_path / "disk" / "run"
    target.mkdir(parents=True)
    link = tmp_path / "run"
    link.symlink_to(target)
    train.main([*TINY, "--max-iters", "2", "--save-every", "1", "--out-dir", str(link)])
    train.main([*TINY, "--max-iters", "3", "--out-dir", str(link), "--resume"])
    assert os.path.islink(link) and os.readlink(link) == str(target)
    assert saving.step_of(str(target)) == 3 and sorted(os.listdir(target)) == sorted(saving.FILES)
    assert leftovers(target) == [] and sorted(os.listdir(tmp_path)) == ["disk", "run"]
    lock = saving.claim(str(target), resume=True)
    with pytest.raises(ValueError, match=f"another train.py is writing {target}"):
        saving.claim(str(link), resume=True)
    lock.close()


def test_what_an_older_version_left_of_a_symlinked_out_dir_is_repaired_and_named(base, tmp_path, capsys):
    """An older train.py turned a symlinked --out-dir into a folder, moved the link to <out>.old.deleting and
    left its marked <out>.old, so every later save crashed. Now: the run resumes, the marked .old goes, and
    the link (to the user's folder) is named in one line and left as it is."""
    users = tmp_path / "users"
    shutil.copytree(base, users)
    out = tmp_path / "run"
    shutil.copytree(base, out)
    shutil.copytree(base, tmp_path / "run.old")
    (tmp_path / "run.old" / saving.SWAP_MARK).write_text("")
    (tmp_path / "run.old.deleting").symlink_to(users)
    kept = snapshot(users)
    train.main([*TINY, "--max-iters", "2", "--out-dir", str(out), "--resume"])
    assert saving.step_of(str(out)) == 2 and not os.path.exists(tmp_path / "run.old")
    assert os.readlink(tmp_path / "run.old.deleting") == str(users) and snapshot(users) == kept
    notes = [line for line in capsys.readouterr().err.splitlines() if "run.old.deleting" in line]
    assert notes == [f"note: {tmp_path}/run.old.deleting is a link an older train.py left (to {users}); "
                     f"nothing uses it now: remove the link once that folder is safe"]


# ----------------------------------------------------------------------------- a full disk during a save

def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_last_checkpoint(base, tmp_path, monkeypatch):
    """torch.save fails as it does on a full disk (a RuntimeError raised while handling another): train.py
    exits with one line naming the folder and the checkpoint kept, which is the previous one, whole; the
    half-written save is gone and --resume continues once there is room."""
    out = tmp_path / "ck"
    shutil.copytree(base, out)
    before = snapshot(out)
    real = torch.save

    def full(*a, **k):
        try:
            raise RuntimeError("basic_ios::clear: iostream error")
        except RuntimeError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    monkeypatch.setattr(saving.torch, "save", full)
    message = error_of(train.main, [*TINY, "--max-iters", "2", "--out-dir", str(out), "--resume"])
    assert message.startswith(f"error: cannot save step 2 to {out} ([enforce fail at "
                              f"inline_container.cc:672]")
    assert message.endswith(f"MiB free there); the last complete checkpoint (step 1) is in {out}: make room, "
                            f"then --resume")
    assert snapshot(out) == before and leftovers(out) == []
    monkeypatch.setattr(saving.torch, "save", real)
    train.main([*TINY, "--max-iters", "2", "--out-dir", str(out), "--resume"])
    assert saving.step_of(str(out)) == 2


# ----------------------------------------------------------------------------- results files

@contextlib.contextmanager
def disk_fills_after(nbytes: int):
    """Writes past nbytes into any file fail as on a full disk (RLIMIT_FSIZE: EFBIG, its signal ignored)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


EARLIER = b"the earlier results\n"


def test_a_results_file_cut_by_a_full_disk_leaves_the_earlier_one_whole(tmp_path):
    """eval.py --json and a paper.results table, each written when the disk fills half-way: one line, the
    earlier file byte for byte as it was, and no temporary file left."""
    import eval as evaluate
    from paper import results
    runs = tmp_path / "runs"
    runs.mkdir()
    big = {"task": "arith", "model": "ar", "ckpt": "out/ar", "accuracy": 0.5, "samples": ["x" * 100] * 2000}
    (runs / "a.json").write_text(json.dumps({k: v for k, v in big.items() if k != "samples"}
                                            | {"note": "y" * 9000}))
    for name in ("m.json", "t.md"):
        (tmp_path / name).write_bytes(EARLIER)
    with disk_fills_after(4096):
        with pytest.raises(SystemExit) as e:
            evaluate.write_json(SimpleNamespace(json=str(tmp_path / "m.json")), big)
        with pytest.raises(SystemExit) as t:
            results.main([str(tmp_path / "t.md"), str(runs / "a.json")])
    assert str(e.value.code) == (f"error: cannot write --json {tmp_path / 'm.json'} (File too large); the "
                                 f"table above holds the same metrics")
    assert str(t.value.code) == (f"error: cannot write {tmp_path / 't.md'} (File too large): the earlier "
                                 f"file, if any, is as it was")
    assert (tmp_path / "m.json").read_bytes() == EARLIER and (tmp_path / "t.md").read_bytes() == EARLIER
    assert sorted(os.listdir(tmp_path)) == ["m.json", "runs", "t.md"]


@pytest.mark.parametrize("saver", ["paper.results", "sample.py --plot"])
def test_a_figure_cut_by_a_full_disk_leaves_the_earlier_one_whole(tmp_path, saver):
    """paper.results' figures and sample.py --plot's the same way: one line, the earlier picture as it was;
    and a picture is written in the format its suffix names (a .pdf is a PDF, not PNG bytes)."""
    pytest.importorskip("matplotlib")
    from common import order_plot
    from paper import results
    save = {"paper.results": lambda fig, path: results.save_figure(fig, path),
            "sample.py --plot": lambda fig, path: order_plot.save(fig, path, plt)}[saver]
    plt = results.pyplot()
    (tmp_path / "f.png").write_bytes(EARLIER)
    fig = plt.figure()
    fig.gca().plot(range(100), [i * i for i in range(100)])
    with disk_fills_after(4096):
        with pytest.raises(ValueError) as f:
            save(fig, str(tmp_path / "f.png"))
    plt.close(fig)
    flag = "--plot " if saver == "sample.py --plot" else ""
    assert str(f.value) == (f"cannot write {flag}{tmp_path / 'f.png'} (File too large): the earlier file, if "
                            f"any, is as it was")
    assert (tmp_path / "f.png").read_bytes() == EARLIER and os.listdir(tmp_path) == ["f.png"]
    for suffix, magic in ((".pdf", b"%PDF"), (".svg", b"<?xml")):
        fig = plt.figure()
        save(fig, str(tmp_path / f"f{suffix}"))
        assert (tmp_path / f"f{suffix}").read_bytes().startswith(magic)


def test_a_results_path_that_is_no_regular_file_is_written_in_place(tmp_path, monkeypatch):
    """--json /dev/stdout while the shell appends stdout to a log, a named pipe and a device (a terminal):
    written in place (the log keeps what it held, the pipe and the device stay what they are), never renamed
    over, as a device node (/dev/null as root) was; a pipe no process reads is one OSError, not a hang at
    open(); a file this user may not write (as
    os.access answers for a chmod 444 file of a non-root user) is refused as open() would refuse it, and
    stays as it was."""
    from data import files
    log = tmp_path / "all.log"
    log.write_bytes(EARLIER)
    inode = os.stat(log).st_ino
    code = "from data.files import replaced\nwith replaced('/dev/stdout') as f:\n    f.write('{}\\n')\n"
    with open(log, "ab") as out:
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdout=out, check=True, timeout=60)
    assert log.read_bytes() == EARLIER + b"{}\n" and os.stat(log).st_ino == inode
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)               # a process reading it
    with files.replaced(str(fifo)) as f:
        f.write("through the pipe")
    assert os.read(reader, 100) == b"through the pipe" and stat.S_ISFIFO(os.stat(fifo).st_mode)
    os.close(reader)
    master, slave = os.openpty()                                      # a device: a terminal's /dev/pts/N
    with files.replaced(os.ttyname(slave)) as f:
        f.write("to the terminal")
    assert os.read(master, 100).replace(b"\r", b"") == b"to the terminal"
    assert stat.S_ISCHR(os.stat(os.ttyname(slave)).st_mode)
    os.close(master)
    os.close(slave)
    with pytest.raises(OSError, match="no process reads this pipe"):   # not a hang at open()
        with files.replaced(str(fifo)) as f:
            f.write("nobody reads this")
    assert sorted(os.listdir(tmp_path)) == ["all.log", "pipe"]
    locked = tmp_path / "m.json"
    locked.write_bytes(EARLIER)
    real = os.access
    monkeypatch.setattr(os, "access",
                        lambda p, mode: real(p, mode) and not (p == str(locked) and mode & os.W_OK))
    with pytest.raises(PermissionError):
        with files.replaced(str(locked)) as f:
            f.write("new")
    import eval as evaluate
    assert error_of(evaluate.main, ["--ckpt", "x", "--json", str(locked)]) == (
        f"error: --json {locked} is write-protected: make it writable (chmod u+w) or give another file")
    assert locked.read_bytes() == EARLIER and sorted(os.listdir(tmp_path)) == ["all.log", "m.json", "pipe"]


def test_paper_results_never_writes_over_an_input(tmp_path):
    """A forgotten OUT.md (the first run would be the table), a table or --plot that is one of the runs: one
    line before anything is written, every file as it was; T.MD is a table name too."""
    pytest.importorskip("matplotlib")
    from paper import results
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    for path in (a, b):
        with open(path, "w") as f:
            json.dump({**SAMPLED, "gen_ppl": 9.0}, f)
    (tmp_path / "t.md").symlink_to(a)
    (tmp_path / "p.png").symlink_to(b)
    before = snapshot(tmp_path)
    first = (f"{a}: the first argument is the markdown table to write (OUT.md), then the eval.py --json "
             f"files: add the table's name first")
    over = "give it another name, so that no input is written over"
    for argv, message in [([a, b, "--generation"], first), ([a, b, "--pareto"], first), ([a, b], first),
                          ([f"{tmp_path}/t.md", a, b],
                           f"the table {tmp_path}/t.md is also a run to read ({a}): {over}"),
                          ([f"{tmp_path}/o.md", a, b, "--generation", "--plot", f"{tmp_path}/p.png"],
                           f"--plot {tmp_path}/p.png is also a run to read ({b}): {over}")]:
        assert error_of(results.main, argv) == "error: " + message
        assert snapshot(tmp_path) == before
    results.main([f"{tmp_path}/T.MD", a])                            # .md in any case
    assert (tmp_path / "T.MD").read_text().startswith("| model | ckpt | task |")


RUN = {"model": "setdiffusion", "ckpt": "out/smax/setdiffusion-smax8", "method_config": {"smax": 8}}
SAMPLED = {**RUN, "task": "unconditional", "entropy": 5.0, "tokens_per_step": 1.5, "tokens_per_s": 3.0,
           "n": 4}


@pytest.mark.parametrize("runs, flags, message", [
    ([{}], [], "{0}: no metric to tabulate (eval.py --json writes the task, the model and its metrics)"),
    ([{"threshold": 0.9, "window": 4}], [], "{0}: no metric to tabulate (eval.py --json writes the task, the "
                                            "model and its metrics)"),
    ([{**RUN, "task": "arith", "accuracy": 0.9}], ["--plot", "{png}"],
     "--plot draws a --pareto, --sweep or --generation table's runs: add one, or drop --plot"),
    ([{**RUN, "task": "infill", "exact": 0.5, "tokens_per_step": 1.0, "tokens_per_s": 2.0, "n": 3}],
     ["--infill", "--plot", "{png}"], "--plot draws a --pareto, --sweep or --generation table's runs: add "
                                      "one, or drop --plot"),
    ([{**RUN, "task": "throughput", "tokens_per_s": 5.0, "tokens_per_s_std": 0.1}],
     ["--pareto", "--plot", "{png}"],
     "--plot {png} draws accuracy against tokens/step: none of the files is an accuracy run (add them, or "
     "drop --plot)"),
    ([{**SAMPLED, "gen_ppl": 9.0}, {**SAMPLED, "threshold": 0.9, "mauve": 0.5}],
     ["--generation", "--plot", "{png}"],
     "--plot {png} draws one generative perplexity (gen_ppl or gen_ppl_hf) that every unconditional run has: "
     "some lack it (score them all with one --ref-ckpt or --ppl-model, or drop --plot)"),
    ([{**RUN, "task": "likelihood", "nll": 1.0, "perplexity": 2.7, "tokens": 9}],
     ["--generation", "--plot", "{png}"],
     "--plot {png} draws one generative perplexity (gen_ppl or gen_ppl_hf) that every unconditional run has: "
     "there is no unconditional run (score them all with one --ref-ckpt or --ppl-model, or drop --plot)"),
    ([{**RUN, "task": "likelihood", "nll": 1.0}], ["--sweep", "--plot", "{png}", "no matplotlib"],
     "--plot needs matplotlib: pip install matplotlib, or drop --plot"),
])
def test_paper_results_never_writes_an_empty_table_or_drops_a_plot(tmp_path, monkeypatch, runs, flags,
                                                                   message):
    """Files that give no table, and a plot that was asked for but cannot be drawn (no run of the kind it
    draws, no scorer every run has, matplotlib missing, a table kind without a plot) are one line, exit 1, and
    no file is written: neither the table nor the plot."""
    from paper import results
    paths = []
    for i, run in enumerate(runs):
        paths.append(str(tmp_path / f"run{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(run, f)
    png = str(tmp_path / "out" / "p.png")
    if "no matplotlib" in flags:
        flags = flags[:-1]
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    argv = [str(tmp_path / "out" / "t.md"), *paths, *(f.format(png=png) for f in flags)]
    assert error_of(results.main, argv) == "error: " + message.format(*paths, png=png)
    assert not os.path.exists(tmp_path / "out")


def test_make_smax_elsewhere_never_rewrites_the_tracked_table(tmp_path):
    """make smax SMAX_RESULTS=elsewhere tabulates its own folder (elsewhere.md from elsewhere*/*.json), never
    results/smax.md from the old files; make smax-seed2 still merges its seed into results/smax.md; a table
    that would not hold this run's files is refused in one line."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def make(*args):
        return subprocess.run(["make", "-n", *args], cwd=root, capture_output=True, text=True, timeout=60)
    tables = [line for line in make("smax", f"SMAX_RESULTS={tmp_path}/elsewhere").stdout.splitlines()
              if "paper.results" in line]
    assert tables == [f"python -m paper.results {tmp_path}/elsewhere.md {tmp_path}/elsewhere*/*.json --sweep "
                      f"--plot {tmp_path}/elsewhere.png"]
    assert [line for line in make("smax-seed2").stdout.splitlines() if "paper.results" in line] == [
        "python -m paper.results results/smax.md results/smax*/*.json --sweep --plot results/smax.png"]
    r = subprocess.run(["make", "smax", f"SMAX_RESULTS={tmp_path}/x", "SMAX_TABLE=results/smax", "PY=false"],
                       cwd=root, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and r.stderr.splitlines()[0] == (
        f"error: SMAX_TABLE=results/smax would not tabulate SMAX_RESULTS={tmp_path}/x: give a prefix of it")
    assert not os.path.exists(tmp_path / "x")


# ----------------------------------------------------------------------------- corpus caches

TEXT = "".join(f"{i}. To be, or not to be, that is the question.\n" for i in range(60))       # ~2.8 kB


def text_run(tmp_path, *extra) -> list[str]:
    """train.py's flags for one step on a tiny text, its cache in tmp_path/cache."""
    (tmp_path / "play.txt").write_text(TEXT)
    return [*TINY, "--data", f"text:{tmp_path / 'play.txt'}", "--data-dir", str(tmp_path / "cache"),
            "--seq-len", "32", "--max-iters", "1", "--out-dir", str(tmp_path / "ck"), *extra]


def the_cache(tmp_path):
    from data import byte_tokenizer, textfile
    textfile.load("train", str(tmp_path / "play.txt"), str(tmp_path / "cache"), byte_tokenizer(), 32)
    (path,) = (tmp_path / "cache").glob("*.bin")
    return path


@pytest.mark.parametrize("damage, why", [
    ("cut", "holds {got} bytes of rows where its header says {want}: it was cut short (a full disk, a killed "
            "copy) or changed"),
    ("flipped", "does not match its checksum: it is damaged"),
    ("headerless", "is not a token cache of this version (no header: an older version's, or another file)"),
    ("other ids", "its largest token id 999 is outside the bytes vocabulary of 258"),
])
def test_a_damaged_corpus_cache_is_one_line_naming_it_never_reused(tmp_path, damage, why):
    """A cache cut short, with a byte changed, without a header (the raw rows an older version wrote) or
    holding ids outside the vocabulary (with a header that agrees): train.py stops in one line naming the file
    and what to do, before any training, and leaves the file as it was."""
    from data import corpus
    argv = text_run(tmp_path)
    path = the_cache(tmp_path)
    data = path.read_bytes()
    head, rows_ = data[:corpus.HEADER_BYTES], np.frombuffer(data[corpus.HEADER_BYTES:],
                                                            dtype=np.uint16).copy()
    if damage == "cut":
        data = data[:len(data) // 2]
    elif damage == "flipped":
        data = data[:-3] + bytes([data[-3] ^ 1]) + data[-2:]
    elif damage == "headerless":
        data = data[corpus.HEADER_BYTES:]
    else:
        rows_[40] = 999
        meta = json.loads(head[len(corpus.MAGIC):])
        meta.update(max_id=999, sha256=hashlib.sha256(rows_.tobytes()).hexdigest())
        data = corpus.header(meta) + rows_.tobytes()
    path.write_bytes(data)
    got, want = len(data) - corpus.HEADER_BYTES, len(rows_) * 2
    assert error_of(train.main, argv) == (f"error: {path}{':' if damage == 'other ids' else ''} "
                                          f"{why.format(got=got, want=want)}: delete it, and it is built "
                                          f"again")
    assert path.read_bytes() == data and not (tmp_path / "ck").exists()


def test_a_cache_built_with_another_tokenizer_is_one_line(tmp_path):
    """The rows' tokenizer is in the cache's header: rows of other ids are never read as this one's."""
    from data import corpus, get_tokenizer
    argv = text_run(tmp_path)
    path = the_cache(tmp_path)
    meta = json.loads(path.read_bytes()[len(corpus.MAGIC):corpus.HEADER_BYTES])
    path.write_bytes(corpus.header({**meta, "tokenizer": "gpt2", "vocab_size": 50258})
                     + path.read_bytes()[corpus.HEADER_BYTES:])
    with pytest.raises(ValueError) as e:
        corpus.rows(str(path), 32, get_tokenizer("bytes"))
    assert str(e.value) == (f"{path} holds rows of 32 tokens built with the gpt2 tokenizer (50258 ids), not "
                            f"32 with bytes (258): pass --tokenizer gpt2, or another --data-dir")
    assert error_of(train.main, argv).startswith(f"error: {path} holds rows of 32 tokens built with the gpt2")


def test_two_runs_building_one_cache_share_no_temporary_file(tmp_path, monkeypatch):
    """A second run that needs the cache while the first builds it waits on the cache's lock and then reads
    the first one's (built once); a <cache>.tmp left there by anyone is never written into nor removed."""
    from data import byte_tokenizer, corpus, textfile
    text_run(tmp_path)
    tok, cache = byte_tokenizer(), tmp_path / "cache"
    cache.mkdir()
    name = textfile.cache_name(str(tmp_path / "play.txt"), tok.name)
    (cache / f"{name}_all_L32.bin.tmp").write_text("another run's")
    started, finish, builds, real = threading.Event(), threading.Event(), [], corpus.build

    def slow_build(*a, **k):
        builds.append(1)
        started.set()
        assert finish.wait(30)
        return real(*a, **k)
    monkeypatch.setattr(corpus, "build", slow_build)
    out = {}

    def load(who):
        out[who] = textfile.load("train", str(tmp_path / "play.txt"), str(cache), tok, 32)
    first = threading.Thread(target=load, args=("first",))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=load, args=("second",))
    second.start()
    second.join(0.5)
    assert second.is_alive() and "second" not in out                 # waiting on the lock, not building
    finish.set()
    first.join(30)
    second.join(30)
    assert builds == [1] and np.array_equal(out["first"], out["second"]) and len(out["first"]) > 1
    assert (cache / f"{name}_all_L32.bin.tmp").read_text() == "another run's"


def test_a_full_disk_while_building_a_cache_is_one_line_and_leaves_no_file(tmp_path):
    """The disk fills while the rows are written: one line naming the cache, and no file of it (whole or
    part) left to be read as a cache next time."""
    from data import byte_tokenizer, textfile
    text_run(tmp_path)
    with disk_fills_after(2048):
        with pytest.raises(ValueError) as e:
            textfile.load("train", str(tmp_path / "play.txt"), str(tmp_path / "cache"), byte_tokenizer(), 32)
    (lock,) = os.listdir(tmp_path / "cache")
    path = tmp_path / "cache" / lock[:-len(".lock")]
    assert str(e.value) == (f"cannot write the token cache {path} (File too large): make room there, or give "
                            f"--data-dir a folder with room")


def test_a_cache_folder_without_locks_or_writes_is_a_note_or_one_line(tmp_path, monkeypatch, capsys):
    """A file system without locks (flock fails: ENOLCK, as on Lustre or NFS without lockd): the cache is
    built anyway, after a note, never refused as "another run"; a folder that cannot be written (EROFS when
    the lock is made): one line naming the cache and what to do, not an OSError."""
    import fcntl
    from data import byte_tokenizer, corpus, textfile
    text_run(tmp_path)

    def fails(code, why):
        def call(*a, **k):
            raise OSError(code, why)
        return call
    monkeypatch.setattr(fcntl, "flock", fails(errno.ENOLCK, "No locks available"))
    load = [str(tmp_path / "play.txt"), str(tmp_path / "cache"), byte_tokenizer(), 32]
    assert len(textfile.load("train", *load)) > 1
    assert "cannot be locked on this file system (No locks available): building the cache without the lock" \
        in capsys.readouterr().err
    monkeypatch.setattr(corpus, "open", fails(errno.EROFS, "Read-only file system"), raising=False)
    load[1] = str(tmp_path / "ro")
    with pytest.raises(ValueError) as e:
        textfile.load("train", *load)
    assert str(e.value).startswith(f"cannot build the token cache {tmp_path / 'ro'}")
    assert str(e.value).endswith("(Read-only file system): give --data-dir a folder you can write, or build "
                                 "the cache once where you can and copy it there")


@pytest.mark.parametrize("data", ["text", "shakespeare"])
def test_data_dir_naming_a_file_is_one_line(tmp_path, data):
    argv = text_run(tmp_path, "--data-dir", str(tmp_path / "play.txt"))
    if data == "shakespeare":
        argv += ["--data", "shakespeare"]
    assert error_of(train.main, argv) == (f"error: --data-dir {tmp_path / 'play.txt'} is a file: give a "
                                          f"folder (the corpus' local copy and its token cache)")


# ---------------------------------------------------------------------------- Ctrl-C in eval.py and sample.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# where Ctrl-C lands: eval.py half-way through writing --json, sample.py while loading the checkpoint
CTRL_C = {
    "train.py": "from common import saving\ndef claim(*a, **k):\n    raise KeyboardInterrupt\n"
                "saving.claim = claim\n",
    "train.py in a step": "import ar, os, signal\nreal = ar.loss\ndef loss(*a, **k):\n"
                          "    os.kill(os.getpid(), signal.SIGINT)\n    return real(*a, **k)\n"
                          "ar.loss = loss\n",
    "eval.py": "import json\ndef dump(obj, f, **k):\n    f.write('{\"half\": ')\n"
               "    raise KeyboardInterrupt\njson.dump = dump\n",
    "sample.py": "from common import checkpoint\ndef load(*a, **k):\n    raise KeyboardInterrupt\n"
                 "checkpoint.load = load\n",
}


@pytest.mark.parametrize("script", ["train.py", "train.py in a step", "eval.py", "sample.py"])
def test_ctrl_c_twice_is_one_line_exit_130_and_no_partial_file(base, tmp_path, script):
    """The script run as from a shell, Ctrl-C (KeyboardInterrupt) landing mid-run (train.py: at start-up),
    and a second one while it exits (in an atexit handler, where torch's run): one line on stderr, no
    traceback, exit code 130, and eval.py's earlier --json file byte for byte as it was, no temporary file."""
    (tmp_path / "m.json").write_text('{"accuracy": 0.5}')
    ckpt = ["--ckpt", str(base), "--device", "cpu", "--max-new-tokens", "4"]
    argv = [script.split()[0], *{"train.py": ["--model", "ar", "--out-dir", str(tmp_path / "ck")],
                          "train.py in a step": [*TINY, "--out-dir", str(tmp_path / "ck")],
                      "eval.py": [*ckpt, "--limit", "1", "--json", str(tmp_path / "m.json")],
                      "sample.py": [*ckpt, "--prompt", "1+1="]}[script]]
    second = "import atexit, os, signal\natexit.register(os.kill, os.getpid(), signal.SIGINT)\n"
    code = second + CTRL_C[script] \
        + f"import runpy, sys\nsys.argv = {argv!r}\nrunpy.run_path({argv[0]!r}, run_name='__main__')\n"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    saved = script == "train.py in a step"                          # the step is saved, then it exits (1)
    assert r.returncode == (1 if saved else 130), r.stderr[-2000:]
    why = "nothing was saved" if script == "train.py" else "no file was written"
    assert r.stderr.strip().splitlines()[-1] == (
        f"interrupted after step 1: saved it to {tmp_path / 'ck'}; --resume continues from there" if saved
        else f"{script}: interrupted (Ctrl-C); {why}")
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr
    assert (tmp_path / "m.json").read_text() == '{"accuracy": 0.5}'
    assert sorted(os.listdir(tmp_path)) == (["ck", "ck.lock", "m.json"] if saved else ["m.json"])
