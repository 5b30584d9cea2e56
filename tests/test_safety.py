"""Nothing lost: train.py never replaces what it did not write, a kill or fault during a save leaves a usable
checkpoint, a second run is locked out, non-finite weights never reach a checkpoint, a signal saves and
resumes exactly; bad flags, train states, config.json files and distributed environments are one line."""
import errno
import json
import math
import os
import re
import shutil
import signal
import socket
import sys
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from common import checkpoint, weights
import setdiffusion as sd
import train
from helpers import TINY, error_of, leftovers, snapshot

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task

SD = ["--model", "setdiffusion", *TINY]          # the flags of the shared checkpoint
SEQ_LEN = 128                                    # the arith task's context


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny Set Diffusion checkpoint (step 2), written by train.py; tests copy it, never change it."""
    d = tmp_path_factory.mktemp("base") / "sd"
    train.main([*SD, "--max-iters", "2", "--out-dir", str(d)])
    return d


@pytest.fixture(scope="module")
def parts(base):
    """(model, config, optimizer state) of the shared checkpoint, to save checkpoints of any step."""
    model, _, _, config = checkpoint.load(str(base))
    return model, config, checkpoint.load_train_state(str(base))["optimizer"]


def save_at(path, step, parts):
    model, config, opt = parts
    checkpoint.save(str(path), model, {**config, "step": step}, {"optimizer": opt, "step": step})


def no_training(monkeypatch):
    """A refusal that is due before training must come before the model sees a batch."""
    monkeypatch.setattr(train, "loop", lambda *a, **k: pytest.fail("training started"))


def clean(path) -> bool:
    """path holds one checkpoint of train.py's files only, and no sibling .tmp / .old / .deleting."""
    return not leftovers(path) and sorted(os.listdir(path)) == sorted(checkpoint.FILES)


def all_finite(d) -> bool:
    state = torch.load(os.path.join(d, "train_state.pt"), weights_only=True)["model"]
    return all(bool(torch.isfinite(t).all()) for w in (load_file(os.path.join(d, "model.safetensors")), state)
               for t in w.values())


# ------------------------------------------------------------------------ 1. folders train.py did not write

def hf_folder(path):
    """A Hugging Face model folder: config.json and model.safetensors, the names train.py writes."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 8}))
    save_file({"model.embed_tokens.weight": torch.ones(4, 2)}, str(path / "model.safetensors"))


HF = "its config.json has no 'model': it was not written by train.py, or was edited"
NOT_OURS = "which is not a checkpoint directory written by train.py ({}): move it away, or choose another " \
           "--out-dir"
REPLACED = "{t}/%s is not a checkpoint directory written by train.py (%s), and train.py replaces that " \
           "directory at every save: choose another --out-dir"
GPT = "its config.json: unknown method 'gpt' (one of ar, mdlm, bd3lm, setdiffusion)"
CLAIMED = [   # (--out-dir, flags, the line: {t} the folder); each refused before training, nothing touched
    ("mydata", "", REPLACED % ("mydata", "it holds important.txt, sub")),
    *[(out, resume, REPLACED % (out, why)) for out, why in (("Qwen3-0.6B", HF), ("edited", GPT))
      for resume in ("", "--resume")],
    ("afile.txt", "", "--out-dir {t}/afile.txt is a file, not a checkpoint directory: choose another "
                      "--out-dir"),
    ("afile.txt/ck", "", "cannot write checkpoints to --out-dir {t}/afile.txt/ck: File exists"),
    ("run", "--keep-every 1", "--keep-every 1 writes step 1 to {t}/run-step1, " + NOT_OURS.format(HF)),
    ("run2", "--keep-every 1", "--keep-every 1 writes step 1 to {t}/run2-step1, "
                               + NOT_OURS.format("it is a file, not a folder")),
    ("run4", "--keep-every 1", "--keep-every 1 writes step 1 to {t}/run4-step1, "
                               + NOT_OURS.format("it leads into {t}/missing, which does not exist")),
    ("run5", "--keep-every 2", "--keep-every 2 keeps no snapshot: this run trains steps 1 to 1 "
                               "(--max-iters), none a multiple of 2: lower --keep-every, or drop it"),
    ("run3", "--keep-every 1 --seed 2", "{t}/run3-step2 holds a snapshot of another run (run.seed: 1 in the "
     "checkpoint, 2 from the flags), which --keep-every would mix with this run's: move the {t}/run3-step* "
     "folders away, or choose another --out-dir"),
]


def test_folders_train_py_did_not_write_are_refused_or_never_touched(base, tmp_path, monkeypatch):
    """--out-dir (with --resume too), or a name --keep-every writes (<out>-stepN), that is a user's folder, a
    file, a Hugging Face folder, our checkpoint with an edited config.json, a link into a missing folder or
    another run's snapshot: one line before training, every byte as it was. A user's <out>.tmp, <out>.old
    (copies of a checkpoint), <out>-step03 and folders named as a save's scratch (an older version's
    <out>.old.deleting / .tmp.deleting, <out>.tmp-<8 hex> with no swap mark) are never read, moved or
    deleted by a run that resumes from <out> and saves; no save leaves its own. <out> is an older version's
    (no sampler, predict_padding, infill_len or later run entry, a no-op --infill-added: missing = default,
    none compared). An empty folder is accepted, given as folder/ too."""
    (tmp_path / "mydata" / "sub").mkdir(parents=True)
    (tmp_path / "mydata" / "important.txt").write_text("precious")
    (tmp_path / "afile.txt").write_text("my notes")
    hf_folder(tmp_path / "run-step1")
    hf_folder(tmp_path / "Qwen3-0.6B")
    shutil.copytree(base, tmp_path / "edited")
    config = json.loads((base / "config.json").read_text())
    (tmp_path / "edited" / "config.json").write_text(json.dumps({**config, "method": "gpt"}))
    (tmp_path / "run2-step1").write_text("a file")
    (tmp_path / "run4-step1").symlink_to(tmp_path / "missing" / "x")
    shutil.copytree(base, tmp_path / "run3-step2")               # seed 1's snapshot; this run's is seed 2
    before = snapshot(tmp_path)
    no_training(monkeypatch)
    for out, flags, message in CLAIMED:
        argv = [*SD, "--max-iters", "1", *flags.split(), "--out-dir", str(tmp_path / out)]
        assert error_of(train.main, argv) == "error: " + message.format(t=tmp_path)
        assert {k: v for k, v in snapshot(tmp_path).items() if not k.endswith(".lock")} == before
    monkeypatch.undo()
    users = ("ck.old", "ck.tmp", "ck.old.deleting", "ck.tmp.deleting", "ck.tmp-0123abcd", "ck.old-89abcdef")
    for name in ("ck", *users):                                     # cp -r of checkpoints: no swap mark
        shutil.copytree(base, tmp_path / name)
    (tmp_path / "ck.tmp" / "config.json").write_text(json.dumps({**config, "step": 9,
                                                                "run": {**config["run"], "seed": 7}}))
    (tmp_path / "ck.old" / "notes.md").write_text("mine")
    (tmp_path / "ck.tmp-deadbeef").mkdir()
    (tmp_path / "ck.tmp-deadbeef" / "model.safetensors").write_text("a user's file of that name")
    shutil.copytree(tmp_path / "mydata", tmp_path / "ck-step03")    # not a name train.py writes (ck-step3)
    older = {k: v for k, v in config.items() if k not in ("sampler", "predict_padding")}
    del older["run"]["ema"], older["method_config"]["infill_len"]
    older["method_config"]["infill_added"] = True
    (tmp_path / "ck" / "config.json").write_text(json.dumps(older))
    users += ("ck.tmp-deadbeef", "ck-step03")
    users = tuple(u + "/" for u in users)
    mine = {k: v for k, v in snapshot(tmp_path).items() if k.startswith(users)}
    train.main([*SD, "--max-iters", "3", "--keep-every", "1", "--out-dir", str(tmp_path / "ck"), "--resume"])
    assert checkpoint.step_of(str(tmp_path / "ck")) == 3 == checkpoint.step_of(str(tmp_path / "ck-step3"))
    assert {k: v for k, v in snapshot(tmp_path).items() if k.startswith(users)} == mine
    assert sorted(os.listdir(tmp_path / "ck")) == sorted(checkpoint.FILES)
    assert leftovers(tmp_path / "ck") == sorted(u[:-1] for u in users[:-1])
    (tmp_path / "empty").mkdir()
    train.main([*SD, "--max-iters", "1", "--keep-every", "1", "--out-dir", f"{tmp_path}/empty/"])
    assert checkpoint.load_train_state(str(tmp_path / "empty"))["step"] == 1 and clean(tmp_path / "empty")
    assert checkpoint.step_of(str(tmp_path / "empty-step1")) == 1


def test_a_folder_that_appears_during_the_run_is_never_replaced(tmp_path, monkeypatch):
    """A user's folder made at a --keep-every name after the start-up checks stops the run with one line."""
    out, real_loss = tmp_path / "ck", sd.loss

    def loss(*a, **k):
        if not (tmp_path / "ck-step2").exists():
            hf_folder(tmp_path / "ck-step2")
        return real_loss(*a, **k)
    monkeypatch.setattr(sd, "loss", loss)
    with pytest.raises(SystemExit) as e:
        train.main([*SD, "--max-iters", "2", "--keep-every", "2", "--out-dir", str(out)])
    assert e.value.code == (f"error: cannot save step 2 to {out}-step2: it was not written by train.py "
                            f"({HF}), so it is not replaced; move it away, then --resume")
    monkeypatch.undo()
    hf_folder(tmp_path / "theirs")
    assert snapshot(tmp_path / "ck-step2") == snapshot(tmp_path / "theirs")


def test_a_snapshot_that_cannot_be_written_names_the_runs_checkpoint(parts, tmp_path, monkeypatch):
    """A full disk at a --keep-every snapshot (weights only): the line points at --out-dir's checkpoint."""
    import safetensors.torch

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(safetensors.torch, "save_file", full)
    model, config, _ = parts
    with pytest.raises(checkpoint.SaveError) as e:
        checkpoint.save(str(tmp_path / "ck-step4"), model, {**config, "step": 4})
    assert str(e.value).startswith(f"cannot save step 4 to {tmp_path}/ck-step4 (No space left on device; ")
    assert str(e.value).endswith("; the run's last checkpoint is in --out-dir: fix this, then --resume")
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    held = checkpoint.claim(str(tmp_path / "ck-step5"), resume=False)   # another train.py's --out-dir
    with pytest.raises(checkpoint.SaveError,
                       match=f"to {tmp_path}/ck-step5: another train.py is training there"):
        checkpoint.save(str(tmp_path / "ck-step5"), model, {**config, "step": 5})
    held.close()


# -------------------------------------------------------------------------- 2. kills and faults during a save

def kill_state(out, kind, parts):
    """out as a kill during a save leaves it; returns the step of the newest complete checkpoint there."""
    scratch, mark = out.parent / "scratch", lambda d: open(os.path.join(d, checkpoint.SWAP_MARK), "w").close()
    if kind in ("old+tmp", "complete tmp"):  # an older version killed after writing out.tmp and marking out,
        save_at(out, 2, parts)               # (old+tmp: and after out -> out.old)
        save_at(scratch, 4, parts)
        os.rename(scratch, str(out) + ".tmp")
        mark(out)
        if kind == "old+tmp":
            os.rename(out, str(out) + ".old")
        return 4
    if kind == "partial tmp":           # killed while writing its .tmp-XXXXXXXX: no config.json yet
        save_at(out, 2, parts)
        tmp = checkpoint.fresh(str(out), "tmp")
        mark(tmp)
        tmp = out.parent / os.path.basename(tmp)
        (tmp / "model.safetensors").write_bytes((out / "model.safetensors").read_bytes()[:1000])
        (tmp / "config.json.part").write_text('{"model": {')
        return 2
    save_at(scratch, 2 if kind == "marked old" else 4, parts)
    mark(scratch)
    if kind == "marked old":            # an older version killed after out.tmp -> out, before deleting .old
        os.rename(scratch, str(out) + ".old")
        save_at(out, 4, parts)
    else:                               # only tmp: killed after its .old-XXXXXXXX went, before .tmp -> out
        os.rename(scratch, checkpoint.fresh(str(out), "tmp"))
    return 4


@pytest.mark.parametrize("kind", ["old+tmp", "only tmp", "partial tmp", "marked old", "complete tmp"])
def test_a_kill_during_a_save_never_leaves_no_usable_checkpoint(parts, tmp_path, capsys, kind):
    """newest/resolve/load pick the newest complete checkpoint; --resume continues and leaves out clean."""
    out = tmp_path / "kb"
    step = kill_state(out, kind, parts)
    d = checkpoint.resolve(str(out))
    assert d == checkpoint.newest(str(out)) and checkpoint.step_of(d) == step
    scratch = [str(x) for x in out.parent.glob("kb.tmp-*")]         # a save's own, fresh name
    legacy = [str(out) + ".tmp"]                    # an older version's fixed name, its swap marked
    assert [d] == {"old+tmp": legacy, "complete tmp": legacy, "only tmp": scratch}.get(kind, [str(out)])
    model, method, cfg, config = checkpoint.load(str(out))
    assert config["step"] == step and method is sd and checkpoint.load_train_state(str(out))["step"] == step
    capsys.readouterr()
    train.main([*SD, "--max-iters", str(step + 1), "--out-dir", str(out), "--resume"])
    assert f"resuming from step {step} of {out}" in capsys.readouterr().out
    assert checkpoint.load_train_state(str(out))["step"] == step + 1 == checkpoint.step_of(str(out))
    assert clean(out) and all_finite(out)


@pytest.mark.parametrize("fault", ["config.json rename", "out -> out.old", "out.tmp -> out"])
def test_a_fault_during_a_save_keeps_the_previous_checkpoint(parts, tmp_path, monkeypatch, fault):
    """An OSError at any rename of a save leaves the previous checkpoint complete; load reads the newest
    complete one, and the next save cleans up (a full disk: test_data_loss.py)."""
    out = tmp_path / "ck"
    save_at(out, 2, parts)
    previous = snapshot(out)
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append((src, dst))
        if len(calls) == {"config.json rename": 1, "out -> out.old": 2, "out.tmp -> out": 3}[fault]:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)
    monkeypatch.setattr(checkpoint.os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        save_at(out, 4, parts)
    monkeypatch.undo()
    scratch = re.escape(str(out)) + r"\.(tmp|old)-[0-9a-f]{8}"      # the save's own folders, fresh names
    if fault == "out -> out.old":
        assert calls[-1][0] == str(out) and re.fullmatch(scratch, calls[-1][1]) and "old" in calls[-1][1]
    if fault == "out.tmp -> out":
        assert re.fullmatch(scratch, calls[-1][0]) and "tmp" in calls[-1][0] and calls[-1][1] == str(out)
    kept = [d for d in (out, *out.parent.glob("ck.old-*")) if checkpoint.complete(d)]
    assert len(kept) == 1 and \
        {k: v for k, v in snapshot(kept[0]).items() if k != checkpoint.SWAP_MARK} == previous
    assert checkpoint.load_ours(str(kept[0]))[3]["step"] == 2 and all_finite(kept[0])
    newer = 2 if fault == "config.json rename" else 4                     # the new one was whole in ck.tmp
    assert checkpoint.load(str(out))[3]["step"] == newer == checkpoint.load_train_state(str(out))["step"]
    save_at(out, 6, parts)
    assert checkpoint.step_of(str(out)) == 6 and clean(out)


# ----------------------------------------------------------------------------- 3. one train.py per --out-dir

def test_a_second_train_py_on_the_same_out_dir_is_refused(tmp_path, monkeypatch):
    """While a run holds the lock (during training, released however it ends) a second claim is one line; a
    file system without locks is one line saying so, and --no-lock trains there."""
    out = str(tmp_path / "cc")
    busy = (f"another train.py is writing {out} (it holds {out}.lock): wait for it to finish, or choose "
            f"another --out-dir")
    lock = checkpoint.claim(out, resume=False)
    with pytest.raises(ValueError) as e:
        checkpoint.claim(out, resume=False)
    assert str(e.value) == busy
    assert error_of(train.main, [*SD, "--max-iters", "1", "--out-dir", out]) == "error: " + busy
    assert error_of(train.main, [*SD, "--max-iters", "1", "--out-dir", out, "--no-lock"]) == "error: " + busy
    lock.close()
    assert error_of(train.main, [*SD, "--max-iters", "1", "--max-new-tokens", "999", "--out-dir", out]) == \
        f"error: --max-new-tokens 999 is more than the sequence length {SEQ_LEN}"     # after the claim
    checkpoint.claim(out, resume=False).close()                       # released by the failed run
    refused, real_loss = [], sd.loss

    def loss(*a, **k):                                                # a second run during training
        try:
            checkpoint.claim(out, resume=False).close()
        except ValueError as e:
            refused.append(str(e))
        return real_loss(*a, **k)
    monkeypatch.setattr(sd, "loss", loss)
    train.main([*SD, "--max-iters", "2", "--out-dir", out])
    assert refused == [busy, busy]
    checkpoint.claim(out, resume=False).close()
    assert checkpoint.step_of(out) == 2 and clean(out)
    monkeypatch.undo()
    import fcntl

    def no_locks(*a):                                                 # NFS without lockd, Lustre
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(fcntl, "flock", no_locks)
    nfs = str(tmp_path / "nfs")
    assert error_of(train.main, [*SD, "--max-iters", "1", "--out-dir", nfs]) == (
        f"error: {nfs}.lock cannot be locked on this file system (No locks available), so train.py cannot "
        f"keep a second run off {nfs}: choose an --out-dir on a file system with locks, or add --no-lock and "
        f"start one train.py per --out-dir yourself")
    train.main([*SD, "--max-iters", "1", "--out-dir", nfs, "--no-lock"])
    assert checkpoint.step_of(nfs) == 1 and clean(nfs)



def test_a_checkpoint_saved_over_while_it_is_read_is_read_again(one_step, tmp_path, monkeypatch):
    """eval.py --ckpt on the folder of a running train.py: a save that lands between reading config.json and
    the weights makes load read the folder again, so one step's config never goes with another's weights;
    the same change with no train.py holding the folder is one line."""
    out = tmp_path / "run"
    shutil.copytree(one_step / "ar", out)
    first = (out / "config.json").read_text()
    real, reads = weights.load_safetensors, []

    def saved_meanwhile(f):                                       # a save's swap, during the first read
        reads.append(f)
        if len(reads) == 1:
            (out / "config.json").write_text(json.dumps({**json.loads(first), "step": 2}))
        return real(f)
    monkeypatch.setattr(weights, "load_safetensors", saved_meanwhile)
    with pytest.raises(ValueError, match="config.json changed while the weights were read"):
        checkpoint.load(str(out))
    (out / "config.json").write_text(first)
    reads.clear()
    with checkpoint.claim(str(out), resume=True):
        assert checkpoint.load(str(out))[3]["step"] == 2 and len(reads) == 2

# ----------------------------------------------------------------------------- 4. non-finite weights

@pytest.mark.parametrize("save_every, stops_at", [
    ("1", "the weights are not finite after step 3"),                 # caught before the step-3 save
    ("2", r"loss is (nan|inf) at step 4"),                            # caught by the next step's loss
])
def test_non_finite_weights_never_reach_a_checkpoint(tmp_path, monkeypatch, capsys, save_every, stops_at):
    """The optimizer makes the weights inf at step 3 while that step's loss is finite: exit 1, one line naming
    the last good checkpoint (step 2), whose weights (EMA and raw) are all finite."""
    out, real, real_loss, losses = str(tmp_path / "nan"), train.make_optimizer, sd.loss, []

    def poisoned(model, *settings):
        opt, steps = real(model, *settings), []
        step = opt.step

        def poisoned_step(*a, **k):
            result = step(*a, **k)
            steps.append(1)
            if len(steps) == 3:
                with torch.no_grad():
                    next(model.parameters()).fill_(math.inf)
            return result
        opt.step = poisoned_step
        return opt
    monkeypatch.setattr(train, "make_optimizer", poisoned)
    monkeypatch.setattr(sd, "loss", lambda *a, **k: losses.append(real_loss(*a, **k)) or losses[-1])
    with pytest.raises(SystemExit) as e:
        train.main([*SD, "--max-iters", "6", "--warmup", "0", "--save-every", save_every, "--ema", "0.5",
                    "--out-dir", out])
    assert e.value.code == 1 and all(math.isfinite(loss.item()) for loss, _ in losses[:3])
    lines = [line for line in capsys.readouterr().err.splitlines() if "stopping" in line]
    assert len(lines) == 1 and re.fullmatch(
        rf"{stops_at}: stopping; the last good checkpoint \(step 2\) is in {re.escape(out)}", lines[0]), lines
    assert checkpoint.resolve(out) == out and checkpoint.load_train_state(out)["step"] == 2
    assert checkpoint.step_of(out) == 2 and all_finite(out) and clean(out)


# ----------------------------------------------------------------------------- 5. SIGINT / SIGTERM

RESUMABLE = [*SD, "--max-iters", "6", "--save-every", "3", "--ema", "0.9"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return train.main([*RESUMABLE, "--out-dir", str(tmp_path_factory.mktemp("full") / "ckpt")])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_the_step_and_resume_repeats_the_run(uninterrupted, tmp_path, monkeypatch, signum):
    """Ctrl-C or SIGTERM during step 4 ends the run after it with one line; the checkpoint holds step 4, the
    handlers are put back, and --resume gives the uninterrupted run's losses exactly."""
    out, calls, real_loss = str(tmp_path / "kint"), [], sd.loss

    def loss(*a, **k):
        calls.append(1)
        if len(calls) == 4:
            os.kill(os.getpid(), signum)
        return real_loss(*a, **k)
    monkeypatch.setattr(sd, "loss", loss)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as e:
        train.main([*RESUMABLE, "--out-dir", out])
    assert e.value.code == f"interrupted after step 4: saved it to {out}; --resume continues from there"
    monkeypatch.undo()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert checkpoint.load_train_state(out)["step"] == 4 and checkpoint.step_of(out) == 4 and clean(out)
    assert train.main([*RESUMABLE, "--out-dir", out, "--resume"]) == uninterrupted[4:]


# ----------------------------------------------------------------------------- 6. train.py flags

THRESHOLD = "a confidence threshold must be in (0, 1], or inf for one token per step"
NO_EFFECT = "does not apply to --model {}: it goes with --model {}"
FLAGS = [   # (train.py flags, the line), each before any work, no folder (a run larger than memory:
            # test_inputs_cli.py's test_train_refuses_a_run_larger_than_memory_before_allocating)
    ("--batch-size 0", "--batch-size must be at least 1, got 0"),
    ("--save-every 0", "--save-every must be at least 1, got 0"),
    ("--max-iters 0", "--max-iters must be at least 1, got 0"),
    ("--grad-accum 0", "--grad-accum must be at least 1, got 0"),
    ("--eval-limit 0", "--eval-limit must be at least 1, got 0"),
    ("--max-new-tokens -5", "--max-new-tokens must be at least 1, got -5"),
    ("--seq-len -1", "--seq-len must be 0 or more (0 = the task's), got -1"),
    ("--smax 1", "--smax must be at least 2, got 1"),
    ("--window -1", "--window -1: the window must be in [1, smax=8]"),
    ("--infill 1.5", "--infill must be a fraction in [0, 1], got 1.5"),
    ("--infill nan", "--infill must be a fraction in [0, 1], got nan"),
    ("--model ar --window 9", "--window " + NO_EFFECT.format("ar", "setdiffusion")),
    ("--model bd3lm --infill 0.5", "--infill " + NO_EFFECT.format("bd3lm", "setdiffusion")),
    ("--model ar --threshold 0.9", "--threshold " + NO_EFFECT.format("ar", "bd3lm, mdlm, setdiffusion")),
    ("--model ar --smax 4", "--smax " + NO_EFFECT.format("ar", "setdiffusion")),
    ("--model mdlm --block-size 8", "--block-size " + NO_EFFECT.format("mdlm", "bd3lm")),
    ("--nelbo", "--nelbo " + NO_EFFECT.format("setdiffusion", "bd3lm, mdlm")),
    ("--infill-added", "--infill-added does nothing without --infill: add --infill, or drop --infill-added"),
    ("--model ar --infill-len loguniform",
     "--infill-len does nothing without --infill: add --infill, or drop --infill-len"),
    ("--window 9", "--window 9: the window must be in [1, smax=8]"),
    ("--model bd3lm --block-size 0", "--block-size must be at least 1, got 0"),
    ("--preset cnndm --n-kv-head 3", "n_head=2 must be a multiple of n_kv_head=3"),   # flags replace fields
    ("--n-embd 30 --n-head 4", "n_embd=30 must be a multiple of n_head=4"),
    ("--n-embd 28 --n-head 4", "head_dim=7 (n_embd / n_head) must be even: rotary embeddings rotate pairs"),
    ("--lr nan", "--lr must be a finite number > 0, got nan"),
    ("--lr 0", "--lr must be a finite number > 0, got 0.0"),
    ("--final-lr nan", "--final-lr must be a finite number >= 0, got nan"),
    ("--ema 1.5", "--ema must be a finite number in [0, 1) (0 = off), got 1.5"),
    ("--grad-clip inf", "--grad-clip must be a finite number >= 0 (0 = off), got inf"),
    ("--dist-timeout 0", "--dist-timeout must be a finite number > 0, got 0.0"),
    ("--threshold nan", "--threshold nan: " + THRESHOLD),
    ("--threshold 0", "--threshold 0.0: " + THRESHOLD),
    ("--device foo", "--device foo: not a device name; use auto, cpu, cuda, cuda:N or mps"),
    ("--attention flex", "--attention flex needs a CUDA device, not cpu (FlexAttention has no backward on "
                         "CPU): use --attention sdpa or auto"),
    ("--device cuda:99", f"--device cuda:99: this torch sees {torch.cuda.device_count()} CUDA GPU(s) (a "
                         f"CPU-only build or no driver?): use --device cpu or auto"),
    # checked once the task is known (after the --out-dir claim, still before any training)
    ("--model bd3lm --block-size 999", f"--block-size 999 is larger than the sequence length {SEQ_LEN}"),
    ("--max-new-tokens 999", f"--max-new-tokens 999 is more than the sequence length {SEQ_LEN}"),
    ("--wandb x", "--wandb needs the wandb package: pip install wandb (or drop --wandb)"),
    ("--resume", "no checkpoint at {out}: expected a directory with config.json and model.safetensors "
                 "(written by train.py --out-dir)"),
]


@pytest.mark.parametrize("flags, message", FLAGS)
def test_a_train_flag_out_of_range_is_one_line_before_any_work(tmp_path, monkeypatch, capsys, flags, message):
    monkeypatch.setitem(sys.modules, "wandb", None)                  # as if not installed
    no_training(monkeypatch)
    out = tmp_path / "ck"
    got = error_of(train.main, [*SD, "--max-iters", "3", "--device", "cpu", *flags.split(),
                                "--out-dir", str(out)])
    assert got == "error: " + message.replace("{out}", str(out))
    assert capsys.readouterr().out == ""
    assert not any(os.path.exists(str(out) + s) for s in ("", ".tmp", ".old"))


# ----------------------------------------------------------------------------- 7. --resume failures

class Evil:
    """A pickle that runs a shell command when it is loaded without weights_only."""
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


AGAIN = r"start again without --resume"
NOT_STATE = r"{f} is not a train state written by train.py \(it needs model, optimizer and step\): " + AGAIN


def test_resume_from_a_damaged_or_foreign_train_state_is_one_line(base, tmp_path, capsys):
    """An empty, truncated, code-carrying or key-less train_state.pt, and another run's checkpoint (method,
    settings or shape), are one line that never suggests weights_only=False; no code runs and the checkpoint
    is left as it was; a run already at --max-iters has nothing to train."""
    marker, good = tmp_path / "PWNED", (base / "train_state.pt").read_bytes()
    state = torch.load(base / "train_state.pt", weights_only=True)
    cases = {
        "empty": (b"", r"{f} is damaged \(.+\); " + AGAIN),
        "truncated": (good[:len(good) // 2], r"{f} is damaged \(.+\); " + AGAIN),
        "code": ({"model": Evil(marker), "optimizer": {}, "step": 2},
                 r"{f} holds objects other than tensors and numbers, so it was not loaded \(only plain "
                 r"weights are read from \.pt/\.bin files\); " + AGAIN),
        "no optimizer": ({"model": state["model"], "step": 2}, NOT_STATE),
        "a list": ([1, 2], NOT_STATE),
        "other weights": ({**state, "model": torch.nn.Linear(3, 5).state_dict()},
                          r"cannot resume from {d}: its train state does not fit \(weights do not fit the "
                          r"model: missing .+\); " + AGAIN),
        "missing": (None, r"{d} holds no train_state.pt, so training cannot resume from it"),
    }
    for name, (content, pattern) in cases.items():
        d = tmp_path / name.replace(" ", "_")
        shutil.copytree(base, d)
        f = d / "train_state.pt"
        if content is None:
            f.unlink()
        elif isinstance(content, bytes):
            f.write_bytes(content)
        else:
            torch.save(content, f)
        before = snapshot(d)
        got = error_of(train.main, [*SD, "--max-iters", "4", "--out-dir", str(d), "--resume"])
        assert re.fullmatch("error: " + pattern.format(f=re.escape(str(f)), d=re.escape(str(d))), got), name
        assert snapshot(d) == before, name
    assert not marker.exists()                                       # the pickle's code did not run
    other = tmp_path / "other"
    shutil.copytree(base, other)
    before = snapshot(other)
    for flags, diff in [
        (["--model", "ar", *TINY], "method: 'setdiffusion' in the checkpoint, 'ar' from the flags; "
                                   "method_config.infill: 0.0 in the checkpoint, None from the flags; "
                                   "method_config.infill_added: False in the checkpoint, None from the "
                                   "flags"),
        ([*SD, "--smax", "4"], "method_config.smax: 8 in the checkpoint, 4 from the flags"),
        ([*SD, "--seed", "2", "--lr", "1e-3"], "run.lr: 0.002 in the checkpoint, 0.001 from the flags; "
                                              "run.seed: 1 in the checkpoint, 2 from the flags"),
        ([*SD, "--n-embd", "64"], "model.head_dim: 16 in the checkpoint, 32 from the flags; "
                                  "model.intermediate_size: 128 in the checkpoint, 256 from the flags; "
                                  "model.n_embd: 32 in the checkpoint, 64 from the flags"),
    ]:
        assert error_of(train.main, [*flags, "--max-iters", "4", "--out-dir", str(other), "--resume"]) == (
            f"error: --resume: {other} holds another run ({diff}): pass the flags that wrote it (see its "
            f"config.json), or choose another --out-dir")
        assert snapshot(other) == before
    assert error_of(train.main, [*SD, "--max-iters", "2", "--out-dir", str(other), "--resume"]) == (
        f"error: --resume: {other} is at step 2, so --max-iters 2 leaves nothing to train: raise --max-iters "
        f"above 2, or evaluate it with eval.py --ckpt {other}")
    assert "resuming" not in capsys.readouterr().out


# -------------------------------------------------------------------------- 8. config.json of the wrong shape

def edit(config, path, value):
    """Set the dotted path of config to value (KeyError: delete it)."""
    *outer, last = path.split(".")
    for k in outer:
        config = config.setdefault(k, {})
    if value is KeyError:
        del config[last]
    else:
        config[last] = value


class TooSlow(BaseException):
    """Not an OSError/ValueError, so checkpoint.load cannot turn it into its one line."""


W = "{d}/config.json"
EDITED = W + " has no '{}': it was not written by train.py, or was edited"


@pytest.mark.parametrize("change, message", [
    ([1, 2], W + " holds list, not an object: it was not written by train.py"),
    (None, W + " holds NoneType, not an object: it was not written by train.py"),
    ({"data": KeyError}, EDITED.replace("{}", "data")),
    ({"tokenizer": KeyError}, EDITED.replace("{}", "tokenizer")),
    ({"method_config.mask_id": 100000}, W + ": method_config.mask_id must be a token id in [0, 258), got "
                                            "100000"),
    ({"method_config.mask_id": -1}, W + ": method_config.mask_id must be a token id in [0, 258), got -1"),
    ({"method_config.smax": "8"}, W + ": method_config.smax must be int, got '8'"),
    ({"method_config.smax": 0}, "--smax must be at least 2, got 0"),         # the method config's own rule
    ({"seq_len": "128"}, W + ": seq_len must be int, got '128'"),
    ({"sampler.max_new_tokens": "16"}, W + ": sampler must be an object with a threshold number and "
     "window / max_new_tokens integers >= 0, got {{'threshold': inf, 'window': 0, 'max_new_tokens': '16'}}"),
    ({"model.rope_theta": math.nan}, W + ": model.rope_theta must be a finite number, got nan"),
    ({"model.n_layer": "1"}, W + ": model.n_layer must be int, got '1'"),
    ({"run": [1, 2]}, W + ": run must be an object, got [1, 2]"),
    ({"model.n_layer": 1000000000}, "weights do not fit the model: the weights hold 1 layers, the config "
                                    "n_layer=1000000000"),
    ("int64", "weights do not fit the model: embed_tokens.weight is stored as torch.int64, not floating "
              "point"),
])
def test_a_config_json_of_the_wrong_shape_is_one_line(base, tmp_path, change, message):
    """checkpoint.load refuses a config.json of the wrong type, shape or range, or integer weights, with one
    ValueError line, within 10 s (n_layer 1e9 builds nothing), and changes no file."""
    d = tmp_path / "bad"
    shutil.copytree(base, d)
    config = json.loads((d / "config.json").read_text())
    if change == "int64":                                            # 2-D weights stored as integers
        w = load_file(d / "model.safetensors")
        w["embed_tokens.weight"] = (w["embed_tokens.weight"] * 100).long()
        save_file(w, d / "model.safetensors")
    else:
        for path, value in change.items() if isinstance(change, dict) else ():
            edit(config, path, value)
        (d / "config.json").write_text(json.dumps(config if isinstance(change, dict) else change,
                                                  allow_nan=True))
    before = snapshot(d)

    def too_slow(*a):
        raise TooSlow("checkpoint.load took more than 10 s")
    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(10)
    try:
        with pytest.raises(ValueError) as e:
            checkpoint.load(str(d))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert str(e.value) == f"cannot read the checkpoint at {d}: " + message.format(d=d)
    assert snapshot(d) == before


# ----------------------------------------------------------------------------- 9. distributed environment

def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


NEED = "need WORLD_SIZE >= 1 and 0 <= RANK < WORLD_SIZE (torchrun --nproc_per_node=N train.py ... sets them)"


@pytest.mark.parametrize("env, message", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE, RANK and LOCAL_RANK must be whole numbers (torchrun sets them)"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0, RANK=0: " + NEED),
    ({"WORLD_SIZE": "2", "RANK": "2"}, "WORLD_SIZE=2, RANK=2: " + NEED),
    ({"WORLD_SIZE": "2", "RANK": "0"}, "WORLD_SIZE=2 needs MASTER_ADDR and MASTER_PORT: start the processes "
                                       "with torchrun --nproc_per_node=2 train.py ..., which sets them"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "free"}, None),
])
def test_a_distributed_environment_without_peers_is_one_line(tmp_path, monkeypatch, env, message):
    """A bad WORLD_SIZE/RANK, a missing MASTER_ADDR, or peers that never come (within --dist-timeout): one
    line, within seconds, before the --out-dir is touched."""
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, free_port() if v == "free" else v)
    no_training(monkeypatch)
    t0 = time.time()
    got = error_of(train.main, [*SD, "--max-iters", "2", "--device", "cpu", "--dist-timeout", "1",
                                "--out-dir", str(tmp_path / "ck")])
    assert time.time() - t0 < 15
    if message is None:
        assert re.fullmatch(r"error: WORLD_SIZE=2: the other processes did not join within 1 s \(.+\): start "
                            r"all of them, e.g. with torchrun --nproc_per_node=2, or unset WORLD_SIZE",
                            got), got
    else:
        assert got == "error: " + message
    assert os.listdir(tmp_path) == []
