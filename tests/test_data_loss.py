"""Nothing lost, nothing silently wrong: train.py never overwrites a folder whose config.json it did not write
(whatever its file names), never deletes a folder it did not create (a user's <out>.old.deleting survives
every save), keeps a symlinked --out-dir a link (lock and swaps on the real folder), repairs what an older
version's symlink bug left, and a full disk during a save is one line that keeps the last checkpoint. Results
files (eval.py --json, paper.results' tables and plots) are written whole or not at all. Corpus caches are
checked when reused. Ctrl-C in eval.py and sample.py is one line, exit code 130, no partial file.
python -m pytest -q tests/test_data_loss.py
"""
import json
import os
import shutil

import pytest
import torch
from safetensors.torch import save_file

import train
from common import checkpoint
from helpers import error_of

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task

TINY = ["--model", "ar", "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--batch-size", "2", "--eval-limit",
        "1", "--max-new-tokens", "4", "--warmup", "1"]


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
                     (edited, "its config.json: unknown method 'gpt' (one of ar, mdlm, bd3lm, setdiffusion)")]:
        for resume in ([], ["--resume"]):
            assert error_of(train.main, [*TINY, "--max-iters", "2", "--out-dir", str(out), *resume]) == (
                f"error: {out} is not a checkpoint directory written by train.py ({why}), and train.py replaces "
                f"that directory at every save: choose another --out-dir")
            assert snapshot(tmp_path) == before
    older = tmp_path / "older"
    shutil.copytree(base, older)
    config = json.loads((older / "config.json").read_text())
    (older / "config.json").write_text(json.dumps({k: v for k, v in config.items()
                                                   if k not in ("sampler", "predict_padding")}))
    train.main([*TINY, "--max-iters", "2", "--out-dir", str(older), "--resume"])
    assert checkpoint.step_of(str(older)) == 2 and leftovers(older) == []


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
    assert checkpoint.step_of(str(out)) == 4 and sorted(os.listdir(out)) == sorted(checkpoint.FILES)
    assert leftovers(out) == sorted(["ck.old.deleting", "ck.tmp.deleting", "ck.tmp-0123abcd", "ck.old-89abcdef",
                                     "ck.tmp-deadbeef"])


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
    assert checkpoint.step_of(str(target)) == 3 and sorted(os.listdir(target)) == sorted(checkpoint.FILES)
    assert leftovers(target) == [] and sorted(os.listdir(tmp_path)) == ["disk", "run"]
    lock = checkpoint.claim(str(target), resume=True)
    with pytest.raises(ValueError, match=f"another train.py is writing {target}"):
        checkpoint.claim(str(link), resume=True)
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
    (tmp_path / "run.old" / checkpoint.SWAP_MARK).write_text("")
    (tmp_path / "run.old.deleting").symlink_to(users)
    kept = snapshot(users)
    train.main([*TINY, "--max-iters", "2", "--out-dir", str(out), "--resume"])
    assert checkpoint.step_of(str(out)) == 2 and not os.path.exists(tmp_path / "run.old")
    assert os.readlink(tmp_path / "run.old.deleting") == str(users) and snapshot(users) == kept
    notes = [line for line in capsys.readouterr().err.splitlines() if "run.old.deleting" in line]
    assert notes == [f"note: {tmp_path}/run.old.deleting is a link an older train.py left (to {users}); nothing "
                     f"uses it now: remove the link once that folder is safe"]


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
    monkeypatch.setattr(checkpoint.torch, "save", full)
    message = error_of(train.main, [*TINY, "--max-iters", "2", "--out-dir", str(out), "--resume"])
    assert message.startswith(f"error: cannot save step 2 to {out} ([enforce fail at inline_container.cc:672]")
    assert message.endswith(f"MiB free there); the last complete checkpoint (step 1) is in {out}: make room, "
                            f"then --resume")
    assert snapshot(out) == before and leftovers(out) == []
    monkeypatch.setattr(checkpoint.torch, "save", real)
    train.main([*TINY, "--max-iters", "2", "--out-dir", str(out), "--resume"])
    assert checkpoint.step_of(str(out)) == 2
