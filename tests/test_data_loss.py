"""Nothing lost, nothing silently wrong: symlinked --out-dirs, an older version's leftovers, a full disk;
results files and figures whole or not at all, never written over an input or empty; corpus caches checked
and built once; Ctrl-C one line, exit 130 (folders train.py did not write: test_safety.py)."""
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

import train
from common import checkpoint
from data import byte_tokenizer, corpus, textfile
from helpers import ROOT, TINY, error_of, leftovers, snapshot, write_runs

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task

AR = ["--model", "ar", *TINY]
DATES = ["--data", f"jsonl:{ROOT}/data/examples/dates.jsonl"]     # 500 lines: quick to encode in a subprocess


@pytest.fixture
def base(one_step):
    return one_step / "ar"                       # conftest's AR checkpoint (step 1): copied, never changed


# ---------------------------------------------------------------------- symlinks, leftovers, a full disk

def test_a_symlinked_out_dir_stays_a_link_and_is_locked_at_its_target(tmp_path):
    """Two runs of several saves through a link: still a link to the same folder, holding the newest
    checkpoint, nothing beside either; a run through the link and one on the target exclude each other."""
    target, link = tmp_path / "disk" / "run", tmp_path / "run"
    target.mkdir(parents=True)
    link.symlink_to(target)
    train.main([*AR, "--max-iters", "2", "--save-every", "1", "--out-dir", str(link)])
    train.main([*AR, "--max-iters", "3", "--out-dir", str(link), "--resume"])
    assert os.path.islink(link) and os.readlink(link) == str(target)
    assert checkpoint.step_of(str(target)) == 3 and sorted(os.listdir(target)) == sorted(checkpoint.FILES)
    assert leftovers(target) == [] and sorted(os.listdir(tmp_path)) == ["disk", "run"]
    lock = checkpoint.claim(str(target), resume=True)
    with pytest.raises(ValueError, match=f"another train.py is writing {target}"):
        checkpoint.claim(str(link), resume=True)
    lock.close()


def test_what_an_older_version_left_of_a_symlinked_out_dir_is_repaired_and_named(base, tmp_path, capsys):
    """An older train.py turned a symlinked --out-dir into a folder, moved the link to <out>.old.deleting and
    left its marked <out>.old: the run resumes, the marked .old goes, the link is named in a note and kept."""
    users, out = tmp_path / "users", tmp_path / "run"
    for d in (users, out, tmp_path / "run.old"):
        shutil.copytree(base, d)
    (tmp_path / "run.old" / checkpoint.SWAP_MARK).write_text("")
    (tmp_path / "run.old.deleting").symlink_to(users)
    kept = snapshot(users)
    train.main([*AR, "--max-iters", "2", "--out-dir", str(out), "--resume"])
    assert checkpoint.step_of(str(out)) == 2 and not os.path.exists(tmp_path / "run.old")
    assert os.readlink(tmp_path / "run.old.deleting") == str(users) and snapshot(users) == kept
    assert [line for line in capsys.readouterr().err.splitlines() if "run.old.deleting" in line] == [
        f"note: {tmp_path}/run.old.deleting is a link an older train.py left (to {users}); nothing uses it "
        f"now: remove the link once that folder is safe"]


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_last_checkpoint(base, tmp_path, monkeypatch):
    """torch.save fails as on a full disk (a RuntimeError raised while handling another): one line naming the
    folder and the checkpoint kept (the previous one, whole, nothing half-written left); --resume goes on."""
    out = tmp_path / "ck"
    shutil.copytree(base, out)
    before, real = snapshot(out), torch.save

    def full(*a, **k):
        try:
            raise RuntimeError("basic_ios::clear: iostream error")
        except RuntimeError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    monkeypatch.setattr(checkpoint.torch, "save", full)
    message = error_of(train.main, [*AR, "--max-iters", "2", "--out-dir", str(out), "--resume"])
    assert message.startswith(f"error: cannot save step 2 to {out} ([enforce fail at "
                              f"inline_container.cc:672]")
    assert message.endswith(f"MiB free there); the last complete checkpoint (step 1) is in {out}: make room, "
                            f"then --resume")
    assert snapshot(out) == before and leftovers(out) == []
    monkeypatch.setattr(checkpoint.torch, "save", real)
    train.main([*AR, "--max-iters", "2", "--out-dir", str(out), "--resume"])
    assert checkpoint.step_of(str(out)) == 2


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
KEPT = "(File too large): the earlier file, if any, is as it was"


def test_a_results_file_cut_by_a_full_disk_leaves_the_earlier_one_whole(tmp_path):
    """eval.py --json and a paper.results table, written as the disk fills: one line, the earlier file as it
    was, no temporary file."""
    import eval as evaluate
    from paper import results
    (tmp_path / "runs").mkdir()
    big = {"task": "arith", "model": "ar", "ckpt": "out/ar", "accuracy": 0.5, "samples": ["x" * 100] * 2000}
    (tmp_path / "runs" / "a.json").write_text(json.dumps({**{k: v for k, v in big.items() if k != "samples"},
                                                        "note": "y" * 9000}))
    for name in ("m.json", "t.md", "r.jsonl"):
        (tmp_path / name).write_bytes(EARLIER)
    with disk_fills_after(4096):
        with pytest.raises(SystemExit) as e:
            evaluate.write_json(SimpleNamespace(json=str(tmp_path / "m.json"), device="cpu"), big)
        with pytest.raises(SystemExit) as t:
            results.main([str(tmp_path / "t.md"), str(tmp_path / "runs" / "a.json")])
        with pytest.raises(SystemExit) as r:                # eval.py --replies: the same
            evaluate.write_replies(SimpleNamespace(replies=str(tmp_path / "r.jsonl")),
                                   [{"index": i, "reply": "x" * 100} for i in range(2000)])
    assert str(e.value.code) == (f"error: cannot write --json {tmp_path / 'm.json'} (File too large); the "
                                 f"table above holds the same metrics")
    assert str(t.value.code) == f"error: cannot write {tmp_path / 't.md'} {KEPT}"
    assert str(r.value.code) == (f"error: cannot write --replies {tmp_path / 'r.jsonl'} (File too large); "
                                 f"the earlier file, if any, is as it was")
    assert (tmp_path / "m.json").read_bytes() == EARLIER == (tmp_path / "t.md").read_bytes()
    assert (tmp_path / "r.jsonl").read_bytes() == EARLIER
    assert sorted(os.listdir(tmp_path)) == ["m.json", "r.jsonl", "runs", "t.md"]


@pytest.mark.parametrize("saver", ["paper.results", "sample.py --plot"])
def test_a_figure_cut_by_a_full_disk_leaves_the_earlier_one_whole(tmp_path, saver):
    """The same for a figure; and a picture is written in the format its suffix names (.pdf, .svg)."""
    pytest.importorskip("matplotlib")
    from common import order_plot
    from paper import results
    plt = results.pyplot()
    save = results.save_figure if saver == "paper.results" else lambda fig, p: order_plot.save(fig, p, plt)
    (tmp_path / "f.png").write_bytes(EARLIER)
    fig = plt.figure()
    fig.gca().plot(range(100), [i * i for i in range(100)])
    with disk_fills_after(4096):
        with pytest.raises(ValueError) as f:
            save(fig, str(tmp_path / "f.png"))
    plt.close(fig)
    flag = "--plot " if saver == "sample.py --plot" else ""
    assert str(f.value) == f"cannot write {flag}{tmp_path / 'f.png'} {KEPT}"
    assert (tmp_path / "f.png").read_bytes() == EARLIER and os.listdir(tmp_path) == ["f.png"]
    for suffix, magic in ((".pdf", b"%PDF"), (".svg", b"<?xml")):
        save(plt.figure(), str(tmp_path / f"f{suffix}"))
        assert (tmp_path / f"f{suffix}").read_bytes().startswith(magic)


def test_a_results_path_that_is_no_regular_file_is_written_in_place(tmp_path, monkeypatch):
    """--json /dev/stdout appended to a log, a named pipe, a terminal: written in place, never renamed over
    (the log keeps what it held); a pipe no process reads is an OSError, not a hang; a file this user may not
    write (os.access, as for a chmod 444 file) is refused as open() would, and stays as it was."""
    from data import files
    log = tmp_path / "all.log"
    log.write_bytes(EARLIER)
    inode = os.stat(log).st_ino
    code = ("from data.files import replaced\nwith replaced('/dev/stdout') as f:\n    f.write('{}\\n')\n"
            "import eval, types\n"
            "eval.write_replies(types.SimpleNamespace(replies='/dev/stdout'), [{'i': 1}])\n")
    with open(log, "ab") as out:                         # --json and --replies /dev/stdout alike
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdout=out, check=True, timeout=60)
    assert log.read_bytes() == EARLIER + b'{}\n{"i": 1}\n' and os.stat(log).st_ino == inode
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
    with pytest.raises(OSError, match="no process reads this pipe"):
        with files.replaced(str(fifo)) as f:
            f.write("nobody reads this")
    assert sorted(os.listdir(tmp_path)) == ["all.log", "pipe"]
    locked = tmp_path / "m.json"
    locked.write_bytes(EARLIER)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: real(p, m) and not (p == str(locked) and m & os.W_OK))
    with pytest.raises(PermissionError):
        with files.replaced(str(locked)) as f:
            f.write("new")
    import eval as evaluate
    assert error_of(evaluate.main, ["--ckpt", "x", "--json", str(locked)]) == (
        f"error: --json {locked} is write-protected: make it writable (chmod u+w) or give another file")
    assert locked.read_bytes() == EARLIER and sorted(os.listdir(tmp_path)) == ["all.log", "m.json", "pipe"]


RUN = {"model": "setdiffusion", "ckpt": "out/smax/setdiffusion-smax8", "method_config": {"smax": 8}}
SAMPLED = {**RUN, "task": "unconditional", "entropy": 5.0, "tokens_per_step": 1.5, "tokens_per_s": 3.0,
           "n": 4}
INFILL = {"task": "infill", "model": "ar", "ckpt": "out/ar", "tokens_per_step": 1, "tokens_per_s": 1, "n": 1}


def test_paper_results_never_writes_over_an_input(tmp_path):
    """A forgotten OUT.md (the first run would be the table), a table or --plot that is one of the runs: one
    line before anything is written; T.MD is a table name too."""
    pytest.importorskip("matplotlib")
    from paper import results
    a, b = write_runs(tmp_path, [{**SAMPLED, "gen_ppl": 9.0}] * 2)
    (tmp_path / "t.md").symlink_to(a)
    (tmp_path / "p.png").symlink_to(b)
    before = snapshot(tmp_path)
    first = f"{a}: the first argument is the markdown table to write (OUT.md), then the eval.py --json " \
            f"files: add the table's name first"
    over = "give it another name, so that no input is written over"
    for argv, message in [([a, b, "--generation"], first), ([a, b, "--pareto"], first), ([a, b], first),
                          ([f"{tmp_path}/t.md", a, b],
                           f"the table {tmp_path}/t.md is also a run to read ({a}): {over}"),
                          ([f"{tmp_path}/o.md", a, b, "--generation", "--plot", f"{tmp_path}/p.png"],
                           f"--plot {tmp_path}/p.png is also a run to read ({b}): {over}")]:
        assert error_of(results.main, argv) == "error: " + message
        assert snapshot(tmp_path) == before
    results.main([f"{tmp_path}/T.MD", a])
    assert (tmp_path / "T.MD").read_text().startswith("| model | ckpt | task |")


NO_METRIC = "{0}: no metric to tabulate (eval.py --json writes the task, the model and its metrics)"
NO_TABLE = "--plot draws a --pareto, --sweep or --generation table's runs: add one, or drop --plot"
PPL = "--plot {png} draws one generative perplexity (gen_ppl or gen_ppl_hf) that every unconditional run " \
      "has: "
NOT_INFILL = "{0}: model '%s', ckpt 'out/ar', span '%s': not an eval.py --json file of an infill run"
MIXED = "rerun one at the other's commit, or pass --mixed-commits to merge them"


@pytest.mark.parametrize("runs, flags, message", [   # (files: dict, text or None = missing; flags; line)
    ([{}], "", NO_METRIC),
    ([{"threshold": 0.9, "window": 4}], "", NO_METRIC),
    ([{**RUN, "task": "arith", "accuracy": 0.9}], "--plot {png}", NO_TABLE),
    ([{**RUN, "task": "infill", "exact": 0.5, "tokens_per_step": 1.0, "tokens_per_s": 2.0, "n": 3}],
     "--infill --plot {png}", NO_TABLE),
    ([{**RUN, "task": "throughput", "tokens_per_s": 5.0, "tokens_per_s_std": 0.1}], "--pareto --plot {png}",
     "--plot {png} draws accuracy against tokens/step: none of the files is an accuracy run (add them, or "
     "drop --plot)"),
    ([{**SAMPLED, "gen_ppl": 9.0}, {**SAMPLED, "threshold": 0.9, "mauve": 0.5}], "--generation --plot {png}",
     PPL + "some lack it (score them all with one --ref-ckpt or --ppl-model, or drop --plot)"),
    ([{**RUN, "task": "likelihood", "nll": 1.0, "perplexity": 2.7, "tokens": 9}], "--generation --plot {png}",
     PPL + "there is no unconditional run (score them all with one --ref-ckpt or --ppl-model, or drop "
           "--plot)"),
    ([{**RUN, "task": "likelihood", "nll": 1.0}], "--sweep --plot {png} no-matplotlib",
     "--plot needs matplotlib: pip install matplotlib, or drop --plot"),
    (["garbage{"], "--pareto", "{0} is not valid JSON (Expecting value, line 1 column 1): pass the files "
                               "eval.py --json wrote"),
    ([{"task": "arith"}], "--pareto", "{0} lacks 'model', 'ckpt': not the eval.py --json file of an accuracy "
                                      "run"),
    ([[1, 2]], "--pareto", "{0} holds a JSON list, not the object eval.py --json writes"),
    ([{**RUN, "task": "arith", "accuracy": "abc", "tokens_per_step": 2.0}], "--pareto",
     '{0}: accuracy is "abc", not a number: pass the files eval.py --json wrote'),
    ([None], "--pareto", "cannot read {0}: No such file or directory"),
    ([{"task": "infill", "model": "ar", "ckpt": "out/ar"}], "--infill",
     "{0} lacks 'tokens_per_step', 'tokens_per_s', 'n': not the eval.py --json file of an infill run"),
    ([{"task": "likelihood", "model": "ar", "ckpt": "out/ar", "nll": 1.0}], "--infill",
     "{0}: a likelihood run, not an infill or rocstories run (eval.py --task infill)"),
    ([{**INFILL, "model": "gpt"}], "--infill", NOT_INFILL % ("gpt", "step")),
    ([{**INFILL, "span": "page"}], "--infill", NOT_INFILL % ("ar", "page")),
    ([{**INFILL, "span": "word", "exact": 0.5}], "--infill --sweep",
     "give one of --pareto, --generation, --infill and --sweep"),
    ([{"task": "unconditional", "model": "bd3lm", "ckpt": "x"}], "--generation",
     "{0} lacks 'entropy', 'tokens_per_step', 'tokens_per_s', 'n': not the eval.py --json file of an "
     "unconditional run"),
    ([{"task": "unconditional", "model": "bd3lm", "ckpt": "x", "entropy": 3.0, "tokens_per_step": 1.0,
       "tokens_per_s": 5.0, "n": 4}], "--generation",
     "{0} holds none of gen_ppl, gen_ppl_hf, mauve: an unconditional run scored by --ref-ckpt, --ppl-model "
     "or --mauve-ref (or a --throughput-run)"),
    ([{**INFILL, "environment": {"commit": "a" * 40}},
      {**INFILL, "ckpt": "s2/ar", "environment": {"commit": "b" * 40}}],
     "--infill", "{0} and {1} make one row (step ar) but were measured at different commits (aaaaaaa and "
                 "bbbbbbb): " + MIXED),
    ([{**INFILL}, {**INFILL, "ckpt": "s2/ar", "environment": {"commit": "b" * 40}}],    # the first: older
     "--infill", "{0} and {1} make one row (step ar) but were measured at different commits (a tree older "
                 "than the environment record and bbbbbbb): " + MIXED),
    ([{**RUN, "task": "arith", "accuracy": 0.9, "tokens_per_step": 2.0,
       "ckpt_environment": {"commit": "a" * 40}},
      {**RUN, "task": "throughput", "tokens_per_s": 5.0, "tokens_per_s_std": 0.1,
       "ckpt_environment": {"commit": "c" * 40}}], "--pareto",
     "{0} and {1} make one row (setdiffusion-smax8 at τ inf) but have checkpoints trained at different "
     "commits (aaaaaaa and ccccccc): " + MIXED),
])
def test_paper_results_refuses_in_one_line_and_writes_nothing(tmp_path, monkeypatch, runs, flags, message):
    """Files that give no table, are no run of the table's kind, and a plot asked for that cannot be drawn
    (no run of its kind, no scorer every run has, no matplotlib): one line, and neither table nor plot."""
    from paper import results
    paths = [str(tmp_path / f"run{i}.json") for i in range(len(runs))]
    for path, run in zip(paths, runs):
        if run is not None:
            with open(path, "w") as f:
                f.write(run if isinstance(run, str) else json.dumps(run))
    if "no-matplotlib" in flags:
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = str(tmp_path / "out" / "p.png")
    flags = flags.replace("no-matplotlib", "").format(png=png).split()
    argv = [str(tmp_path / "out" / "t.md"), *paths, *flags]
    assert error_of(results.main, argv) == "error: " + message.format(*paths, png=png)
    assert not os.path.exists(tmp_path / "out")


def test_paper_results_counts_each_run_once_and_names_the_environments_under_the_table(tmp_path, capsys):
    """A file given twice, through a link, or copied elsewhere counts once (a note names each); two seeds
    measured at two commits make one row only with --mixed-commits, and the note under the table names each
    environment with its number of runs."""
    from paper import results
    env = {"commit": "a" * 40, "dirty": False, "python": "3.11.7", "torch": "2.13.0+cpu", "cuda": None,
           "device": "cpu: x", "threads": 2, "lock": "lock/cpu-test.txt", "lock_sha256": "0123abcd" * 8,
           "lock_differs": []}
    (s1,) = write_runs(tmp_path / "s1", [{**INFILL, "exact": 0.5, "environment": env}])
    (s2,) = write_runs(tmp_path / "s2", [{**INFILL, "ckpt": "s2/ar", "exact": 0.7,
                                          "environment": {**env, "commit": "b" * 40, "dirty": True,
                                                          "changed": ["eval.py"]}}])
    (tmp_path / "link.json").symlink_to(s1)
    shutil.copy(s1, tmp_path / "copy.json")
    out = str(tmp_path / "t.md")
    argv = [out, s1, s2, s1, str(tmp_path / "link.json"), str(tmp_path / "copy.json"), "--infill"]
    assert error_of(results.main, argv).startswith(f"error: {s1} and {s2} make one row (step ar)")
    capsys.readouterr()
    results.main(argv + ["--mixed-commits"])
    assert capsys.readouterr().err.splitlines() == [
        f"note: {s1} is the same file as {s1}: counted once",
        f"note: {tmp_path / 'link.json'} is the same file as {s1}: counted once",
        f"note: {tmp_path / 'copy.json'} is a copy of {s1}: counted once"]
    lines = open(out).read().splitlines()
    assert lines[2].startswith("| step | ar | 0.600 [0.500, 0.700] |") and lines[2].endswith("| 2 |")
    same = "Python 3.11.7, torch 2.13.0+cpu (CPU build), cpu: x, 2 threads, lock lock/cpu-test.txt (sha256 " \
           "0123abcd)"
    assert lines[3:] == ["", "Environments (docs/usage.md#reproducing-a-result):",
                         f"- measured: 1 run, commit aaaaaaa, {same}",
                         f"- measured: 1 run, commit bbbbbbb (changed: eval.py), {same}",
                         "- trained: 2 runs, not recorded"]


def test_make_smax_elsewhere_never_rewrites_the_tracked_table(tmp_path):
    """make smax SMAX_RESULTS=elsewhere tabulates its own folder, never results/smax.md; make smax-seed2 still
    merges into results/smax.md; a table that would not hold this run's files is one line."""
    def make(*args):
        return subprocess.run(["make", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    tables = [line for line in make("-n", "smax", f"SMAX_RESULTS={tmp_path}/elsewhere").stdout.splitlines()
              if "paper.results" in line]
    assert tables == [f"python -m paper.results {tmp_path}/elsewhere.md {tmp_path}/elsewhere*/*.json --sweep "
                      f"--plot {tmp_path}/elsewhere.png"]
    assert [line for line in make("-n", "smax-seed2").stdout.splitlines() if "paper.results" in line] == [
        "python -m paper.results results/smax.md results/smax*/*.json --sweep --plot results/smax.png"]
    r = make("smax", f"SMAX_RESULTS={tmp_path}/x", "SMAX_TABLE=results/smax", "PY=false")
    assert r.returncode != 0 and r.stderr.splitlines()[0] == (
        f"error: SMAX_TABLE=results/smax would not tabulate SMAX_RESULTS={tmp_path}/x: give a prefix of it")
    assert not os.path.exists(tmp_path / "x")


# ----------------------------------------------------------------------------- corpus caches

TEXT = "".join(f"{i}. To be, or not to be, that is the question.\n" for i in range(60))       # ~2.8 kB


def text_run(tmp_path, *extra) -> list[str]:
    """train.py's flags for one step on a tiny text, its cache in tmp_path/cache."""
    (tmp_path / "play.txt").write_text(TEXT)
    return [*AR, "--data", f"text:{tmp_path / 'play.txt'}", "--data-dir", str(tmp_path / "cache"),
            "--seq-len", "32", "--max-iters", "1", "--out-dir", str(tmp_path / "ck"), *extra]


def load_text(tmp_path, cache="cache"):
    return textfile.load("train", str(tmp_path / "play.txt"), str(tmp_path / cache), byte_tokenizer(), 32)


@pytest.mark.parametrize("damage, why", [
    ("cut", "holds {got} bytes of rows where its header says {want}: it was cut short (a full disk, a killed "
            "copy) or changed"),
    ("flipped", "does not match its checksum: it is damaged"),
    ("headerless", "is not a token cache of this version (no header: an older version's, or another file)"),
    ("other ids", "its largest token id 999 is outside the bytes vocabulary of 258"),
    ("tokenizer", "holds rows of 32 tokens built with the gpt2 tokenizer (50258 ids), not 32 with bytes "
                  "(258): pass --tokenizer gpt2, or another --data-dir"),
])
def test_a_damaged_or_foreign_corpus_cache_is_one_line_naming_it_never_reused(tmp_path, damage, why):
    """A cache cut short, with a byte changed, without a header (an older version's rows), holding ids outside
    the vocabulary, or built with another tokenizer (its header agreeing): corpus.rows and train.py stop in
    one line naming the file, before any training, and leave it as it was."""
    argv = text_run(tmp_path)
    load_text(tmp_path)
    (path,) = (tmp_path / "cache").glob("*.bin")
    data = path.read_bytes()
    head, rows = data[:corpus.HEADER_BYTES], np.frombuffer(data[corpus.HEADER_BYTES:], dtype=np.uint16).copy()
    meta = json.loads(head[len(corpus.MAGIC):])
    if damage == "cut":
        data = data[:len(data) // 2]
    elif damage == "flipped":
        data = data[:-3] + bytes([data[-3] ^ 1]) + data[-2:]
    elif damage == "headerless":
        data = data[corpus.HEADER_BYTES:]
    elif damage == "tokenizer":
        data = corpus.header({**meta, "tokenizer": "gpt2", "vocab_size": 50258}) + data[corpus.HEADER_BYTES:]
    else:
        rows[40] = 999
        meta.update(max_id=999, sha256=hashlib.sha256(rows.tobytes()).hexdigest())
        data = corpus.header(meta) + rows.tobytes()
    path.write_bytes(data)
    why = why.format(got=len(data) - corpus.HEADER_BYTES, want=len(rows) * 2)
    with pytest.raises(ValueError) as e:
        corpus.rows(str(path), 32, byte_tokenizer())
    end = "" if damage == "tokenizer" else ": delete it, and it is built again"
    assert str(e.value) == f"{path}{':' if damage == 'other ids' else ''} {why}{end}"
    assert error_of(train.main, argv) == "error: " + str(e.value)
    assert path.read_bytes() == data and not (tmp_path / "ck").exists()


def test_two_runs_building_one_cache_share_no_temporary_file(tmp_path, monkeypatch):
    """A second run that needs the cache while the first builds it waits on the cache's lock and reads the
    first one's (built once); a <cache>.tmp left there by anyone is never written into nor removed."""
    text_run(tmp_path)
    (tmp_path / "cache").mkdir()
    tmp = tmp_path / "cache" / f"{textfile.cache_name(str(tmp_path / 'play.txt'), 'bytes')}_all_L32.bin.tmp"
    tmp.write_text("another run's")
    started, finish, builds, real, out = threading.Event(), threading.Event(), [], corpus.build, {}

    def slow_build(*a, **k):
        builds.append(1)
        started.set()
        assert finish.wait(30)
        return real(*a, **k)
    monkeypatch.setattr(corpus, "build", slow_build)
    first = threading.Thread(target=lambda: out.update(first=load_text(tmp_path)))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=lambda: out.update(second=load_text(tmp_path)))
    second.start()
    second.join(0.5)
    assert second.is_alive() and "second" not in out                 # waiting on the lock, not building
    finish.set()
    first.join(30)
    second.join(30)
    assert builds == [1] and np.array_equal(out["first"], out["second"]) and len(out["first"]) > 1
    assert tmp.read_text() == "another run's"


def test_a_cache_that_cannot_be_built_is_one_line_and_leaves_no_file(tmp_path, monkeypatch, capsys):
    """A full disk while the rows are written: one line naming the cache, no file of it left. A file system
    without locks (ENOLCK: Lustre, NFS without lockd): built anyway, after a note. A folder that cannot be
    written (EROFS when the lock is made): one line saying what to do."""
    import fcntl
    text_run(tmp_path)
    with disk_fills_after(2048):
        with pytest.raises(ValueError) as e:
            load_text(tmp_path)
    (lock,) = os.listdir(tmp_path / "cache")
    assert str(e.value) == (f"cannot write the token cache {tmp_path / 'cache' / lock[:-len('.lock')]} (File "
                            f"too large): make room there, or give --data-dir a folder with room")

    def fails(code, why):
        def call(*a, **k):
            raise OSError(code, why)
        return call
    monkeypatch.setattr(fcntl, "flock", fails(errno.ENOLCK, "No locks available"))
    assert len(load_text(tmp_path, "nolock")) > 1
    assert "cannot be locked on this file system (No locks available): building the cache without the lock" \
        in capsys.readouterr().err
    monkeypatch.setattr(corpus, "open", fails(errno.EROFS, "Read-only file system"), raising=False)
    with pytest.raises(ValueError) as e:
        load_text(tmp_path, "ro")
    assert str(e.value).startswith(f"cannot build the token cache {tmp_path / 'ro'}")
    assert str(e.value).endswith("(Read-only file system): give --data-dir a folder you can write, or build "
                                 "the cache once where you can and copy it there")


# ---------------------------------------------------------------------------- Ctrl-C in the scripts

# where Ctrl-C lands: train.py at start-up or in its first step, eval.py half-way through writing --json,
# sample.py while loading the checkpoint, each while it imports torch (as torch finds its C extension)
IMPORTING = "import sys\nclass Interrupt:\n    def find_spec(self, name, path=None, target=None):\n" \
            "        if name == 'torch._C':\n            os.kill(os.getpid(), signal.SIGINT)\n" \
            "sys.meta_path.insert(0, Interrupt())\n"
CTRL_C = {
    "train.py": "from common import checkpoint\ndef claim(*a, **k):\n    raise KeyboardInterrupt\n"
                "checkpoint.claim = claim\n",
    "train.py in a step": "import ar, os, signal\nreal = ar.loss\ndef loss(*a, **k):\n"
                          "    os.kill(os.getpid(), signal.SIGINT)\n    return real(*a, **k)\n"
                          "ar.loss = loss\n",
    "eval.py": "import json\ndef dump(obj, f, **k):\n    f.write('{\"half\": ')\n"
               "    raise KeyboardInterrupt\njson.dump = dump\n",
    "sample.py": "from common import checkpoint\ndef load(*a, **k):\n    raise KeyboardInterrupt\n"
                 "checkpoint.load = load\n",
    **{f"{script} importing torch": IMPORTING for script in ("train.py", "eval.py", "sample.py")},
}


def test_ctrl_c_twice_is_one_line_exit_130_and_no_partial_file(base, tmp_path):
    """Each script run as from a shell (side by side), Ctrl-C landing mid-run or while it imports torch
    (common/cli.py answers it then) and a second one while it exits (an atexit handler, where torch's
    run): one line on stderr, no traceback, exit code 130 (a step Ctrl-C lands in is saved first: exit 1),
    eval.py's earlier --json as it was, no temporary file."""
    ckpt = ["--ckpt", str(base), "--device", "cpu", "--max-new-tokens", "4"]
    procs = {}
    for script, code in CTRL_C.items():
        d = tmp_path / script.replace(" ", "_")
        d.mkdir()
        (d / "m.json").write_text('{"accuracy": 0.5}')
        argvs = {"train.py": ["--model", "ar", "--out-dir", str(d / "ck")],
                 "train.py in a step": [*AR, *DATES, "--out-dir", str(d / "ck")],
                 "eval.py": [*ckpt, "--limit", "1", "--json", str(d / "m.json")],
                 "sample.py": [*ckpt, "--prompt", "1+1="]}
        argv = [script.split()[0], *argvs.get(script, argvs[script.split()[0]])]
        code = "import atexit, os, signal\natexit.register(os.kill, os.getpid(), signal.SIGINT)\n" + code + \
            f"import runpy, sys\nsys.argv = {argv!r}\nrunpy.run_path({argv[0]!r}, run_name='__main__')\n"
        procs[script] = d, subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True,
                                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    for script, (d, proc) in procs.items():
        err = proc.communicate(timeout=120)[1]
        saved = script == "train.py in a step"                      # the step is saved, then it exits (1)
        assert proc.returncode == (1 if saved else 130), (script, err[-2000:])
        why = "nothing was saved" if script == "train.py" else "no file was written"
        assert err.strip().splitlines()[-1] == (
            f"interrupted after step 1: saved it to {d / 'ck'}; --resume continues from there" if saved
            else f"{script.split()[0]}: interrupted (Ctrl-C) while starting; nothing was written"
            if script.endswith("importing torch") else f"{script}: interrupted (Ctrl-C); {why}"), script
        assert "Traceback" not in err and "Exception ignored" not in err, script
        assert (d / "m.json").read_text() == '{"accuracy": 0.5}'
        assert sorted(os.listdir(d)) == (["ck", "ck.lock", "m.json"] if saved else ["m.json"]), script
