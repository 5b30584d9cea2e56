"""Saving a checkpoint so that nothing is lost: train.py's writes to --out-dir, and what a kill leaves.

    claim(out_dir, resume)     before training: refuse a folder train.py did not write, lock it, finish a swap
    save(out_dir, model, ...)  a complete checkpoint, written whole and swapped in by renames
    newest / resolve           the newest complete checkpoint written to out_dir (after a kill too)
    SaveError, cannot_save     a save that failed (a full disk): one line naming the last checkpoint kept
    weights(model)             the state dict a checkpoint stores (FSDP shards gathered)
"""
import contextlib
import json
import os
import re
import secrets
import shutil
import sys

import torch

from common import standard_json
from common.schema import check_config

# A save writes a fresh scratch folder <out_dir>.tmp-XXXXXXXX (made by that save, holding SWAP_MARK) whole,
# config.json last (so one holding config.json is complete); then it marks out_dir, renames it onto a fresh
# <out_dir>.old-XXXXXXXX, renames the .tmp to out_dir and deletes the .old. A kill at any moment leaves a
# complete checkpoint in out_dir or in one of those folders: `newest` finds it, and the next save (or `claim`)
# finishes the interrupted swap first. Nothing train.py did not write is ever removed: only folders of those
# names that hold the mark, and in them only train.py's file names (config.json first, the mark last), then
# the folder once that left it empty. A symlinked out_dir is resolved (`resolved`): the lock and the renames
# act on the folder it points to, and the link stays. Older versions swapped through the fixed names
# <out_dir>.tmp and <out_dir>.old: what a kill left there is recovered the same way, but a <out_dir>.tmp only
# when it is that version's half-save of the run in out_dir (`legacy_tmp`): a folder of yours of that name
# (a copy, another run) is never moved or deleted.
FILES = ("config.json", "model.safetensors", "train_state.pt")    # what a checkpoint directory holds
SWAP_MARK = ".swapping"                                          # "this folder is train.py's scratch"
PART = "config.json.part"                                         # config.json while it is written
OURS = {*FILES, SWAP_MARK, PART}                                  # every name train.py writes in a folder


class SaveError(OSError):
    """A checkpoint that could not be written (a full disk, an unwritable folder): its one line names the
    folder and the last complete checkpoint, which is kept."""


def resolved(out_dir: str) -> str:
    """out_dir as given, or the real path it leads to when it (or a folder above it, in the path as given) is
    a symbolic link."""
    out_dir = out_dir.rstrip("/") or "/"
    real = os.path.realpath(out_dir)
    return out_dir if os.path.normpath(os.path.join(os.path.realpath("."), out_dir)) == real else real


def same_run(a: str, b: str) -> bool:
    """Whether the checkpoints in folders a and b have the same config.json but for the step and the
    environment (the saves of one run)."""
    def config(d):
        try:
            with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
                c = standard_json.load(f)
        except (OSError, ValueError):
            return None
        return {k: v for k, v in c.items() if k not in ("step", "environment", "earlier_environments")} \
            if isinstance(c, dict) else None
    return config(a) is not None and config(a) == config(b)


def legacy(d: str) -> tuple[str | None, str | None]:
    """(<d>.tmp, <d>.old) of an older train.py's interrupted swap, each None unless it is one: that .old
    holds the version's swap mark (a copy of yours never does) and train.py's files only; that .tmp holds
    train.py's files only, while a swap was under way (d, or that .old, holds the mark), and a complete one
    is of the same run. A folder of those names that is not is yours: train.py never reads, moves or deletes
    it (load reads an unmarked .old when d holds no checkpoint: reading loses nothing)."""
    tmp, old = d + ".tmp", d + ".old"
    marked = [x for x in (d, old) if os.path.isfile(os.path.join(x, SWAP_MARK)) and not os.path.islink(x)
              and not foreign(x)]
    old = old if old in marked else None
    if not os.path.isdir(tmp) or os.path.islink(tmp) or foreign(tmp, partial=True) or not any(
            not complete(tmp) or complete(x) and same_run(x, tmp) for x in marked):
        tmp = None
    return tmp, old


def fresh(d: str, kind: str) -> str:
    """A new empty folder <d>.<kind>-XXXXXXXX, made by this call (never one that was there)."""
    while True:
        path = f"{d}.{kind}-{secrets.token_hex(4)}"
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def scratch(d: str, kind: str = "tmp|old", empty: bool = False) -> list[str]:
    """The scratch folders of saves to d that hold train.py's mark (with empty, also those left empty by a
    kill): <d>.tmp-XXXXXXXX and <d>.old-XXXXXXXX."""
    parent, name = os.path.split(d)
    pattern = re.compile(re.escape(name) + rf"\.({kind})-[0-9a-f]{{8}}")
    try:
        names = [n for n in os.listdir(parent or ".") if pattern.fullmatch(n)]
    except OSError:
        return []
    found = []
    for x in (os.path.join(parent, n) for n in sorted(names)):
        if os.path.isdir(x) and not os.path.islink(x) and (
                os.path.isfile(os.path.join(x, SWAP_MARK)) or empty and not os.listdir(x)):
            found.append(x)
    return found


def complete(d: str) -> bool:
    return os.path.isfile(os.path.join(d, "config.json")) and \
        os.path.isfile(os.path.join(d, "model.safetensors"))


def step_of(d: str) -> int:
    try:
        with open(os.path.join(d, "config.json")) as f:
            step = json.load(f).get("step", 0)
        return step if isinstance(step, int) else 0
    except (OSError, ValueError, AttributeError, RecursionError):     # unreadable: the oldest
        return -1


def newest(out_dir: str) -> str | None:
    """The newest complete checkpoint of out_dir: out_dir itself, or a save's .tmp (killed before its swap,
    newer), or its .old (killed between its two renames); None if there is none."""
    d = resolved(out_dir)
    tmp, old = legacy(d)
    found = [x for x in (d, tmp, *scratch(d, "tmp")) if x and complete(x)] or \
        [x for x in (old, *scratch(d, "old")) if x and complete(x)]
    return max(found, key=step_of) if found else None       # max keeps out_dir on a tie


def resolve(out_dir: str) -> str:
    """The directory holding the newest complete checkpoint written to out_dir, or a clear error."""
    d = newest(out_dir)
    if d is None:
        tmp = resolved(out_dir) + ".tmp"
        hint = f" ({tmp} holds one, not marked as a save of train.py's: if it is, mv {tmp} {out_dir})" \
            if complete(tmp) else ""
        raise FileNotFoundError(f"no checkpoint at {out_dir}: expected a directory with config.json and "
                                f"model.safetensors (written by train.py --out-dir){hint}")
    return d


def foreign(d: str, partial: bool = False) -> str:
    """Why directory d is not one train.py wrote, for a one-line refusal; "" when it is: empty, or train.py's
    file names only with a config.json that passes check_config (older checkpoints do). partial: a save's
    folder, which may lack config.json (killed while writing it)."""
    names = sorted(os.listdir(d))
    other = [n for n in names if n not in OURS]
    if other:
        return f"it holds {', '.join(other[:3])}{', ...' if len(other) > 3 else ''}"
    if not os.path.isfile(os.path.join(d, "config.json")):
        return "" if partial or not set(names) - {SWAP_MARK} else \
            f"it holds {', '.join(names)} but no config.json"
    try:
        with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
            check_config(json.load(f), "its config.json")
    except (OSError, ValueError, RecursionError) as e:   # json's and UTF-8's errors are ValueErrors
        return str(e).splitlines()[0][:200]
    return ""


def not_ours(d: str) -> str:
    """Why train.py may not write a checkpoint to d, for a one-line refusal; "" when it may: d is absent, an
    empty folder, or a checkpoint folder of train.py's."""
    if os.path.lexists(d) and not os.path.isdir(d):
        return "it is a file, not a folder"
    return foreign(d) if os.path.isdir(d) else ""


def remove(d: str):
    """Delete a folder train.py wrote: its files by their names (config.json first, so that a kill half-way
    never leaves it complete; the mark last, so that the next save still knows it), then the folder if that
    left it empty. Anything else in it stays, and so does the folder."""
    for name in ("config.json", PART, "model.safetensors", "train_state.pt", SWAP_MARK):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(d, name))
    with contextlib.suppress(OSError):
        os.rmdir(d)


def swap_in(d: str, src: str):
    """Make the complete folder src (a save's .tmp) the checkpoint d: d -> a fresh .old -> deleted."""
    old = None
    if os.path.isdir(d):
        open(os.path.join(d, SWAP_MARK), "w").close()
        old = fresh(d, "old")
        os.replace(d, old)                               # onto the empty folder made for it
    os.replace(src, d)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(d, SWAP_MARK))
    if old is not None:
        remove(old)


def finish_swap(out_dir: str):
    """Bring out_dir to a clean state after a kill: the newest complete checkpoint in out_dir itself, and no
    scratch folder of train.py's left (any other folder is never touched)."""
    d = resolved(out_dir)
    tmp, old = legacy(d)
    best = newest(d)
    if best is not None and best != d:
        swap_in(d, best)
    if tmp is not None and os.path.isdir(tmp) and not complete(tmp):
        remove(tmp)                                      # an older version's save killed half-way
    if old is not None and os.path.isdir(old):
        remove(old)
    for x in scratch(d, empty=True):
        remove(x)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(d, SWAP_MARK))            # killed after marking out_dir, before its rename


def claim(out_dir: str, resume: bool, lock: bool = True):
    """Before training: check that out_dir can hold our checkpoints, lock it against a second train.py, and
    finish a swap a kill interrupted. Refuses (ValueError, one line) a file, a directory train.py did not
    write (any config.json that fails check_config, whatever the file names) or a link that leads nowhere; an
    unwritable place fails here, not at the first save. A symlinked out_dir is locked and written through the
    real path. Returns the open lock file: keep it open while training. lock=False (train.py --no-lock, for a
    file system without locks) trains on where locking fails (the user keeps other runs off out_dir); where
    it works, a train.py holding it is still refused."""
    d = resolved(out_dir)
    if os.path.islink(d):
        raise ValueError(f"--out-dir {out_dir} is a symbolic link that leads to no folder (a loop?): choose "
                         f"another --out-dir")
    if os.path.exists(d) and not os.path.isdir(d):
        raise ValueError(f"--out-dir {d} is a file, not a checkpoint directory: choose another --out-dir")
    why = not_ours(d)
    if why:
        raise ValueError(f"{d} is not a checkpoint directory written by train.py ({why}), and train.py "
                         f"replaces that directory at every save: choose another --out-dir")
    if resume and newest(d) is None:
        resolve(out_dir)                                 # the "no checkpoint at" error
    try:
        os.makedirs(os.path.dirname(os.path.abspath(d)), exist_ok=True)
        held = open(d + ".lock", "a")
    except OSError as e:
        raise ValueError(f"cannot write checkpoints to --out-dir {d}: {e.strerror or e}") from None
    try:
        import fcntl
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:                                  # no fcntl (Windows): no lock
        pass
    except BlockingIOError:                              # with --no-lock too: a lock that works is held
        held.close()
        raise ValueError(f"another train.py is writing {d} (it holds {d}.lock): wait for it to finish, or "
                         f"choose another --out-dir") from None
    except OSError as e:                                 # ENOLCK, EOPNOTSUPP: NFS without lockd, Lustre
        if not lock:
            return held                                  # --no-lock: the user keeps other runs off out_dir
        held.close()
        raise ValueError(f"{d}.lock cannot be locked on this file system ({e.strerror}), so train.py cannot "
                         f"keep a second run off {d}: choose an --out-dir on a file system with locks, or "
                         f"add --no-lock and start one train.py per --out-dir yourself") from None
    try:
        finish_swap(d)
    except OSError as e:
        held.close()
        raise ValueError(f"cannot finish the save a kill interrupted in {d}: {e.strerror or e}") from None
    for line in older_leftovers(d):
        print(line, file=sys.stderr)
    return held


def locked(d: str) -> bool:
    """Whether a train.py trains in folder d now: it holds d.lock (claim's; opened read-only here, so none is
    made). This process's own --out-dir counts too."""
    try:
        import fcntl
        with open(resolved(d) + ".lock") as f:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except (OSError, ImportError):                       # no lock file, no locks here (Windows, some NFS)
        return False
    return False


def older_leftovers(d: str) -> list[str]:
    """Notes naming what an older version's interrupted delete left beside d (it renamed a folder to
    <d>.old.deleting or <d>.tmp.deleting first; a symlinked --out-dir left the link itself there). Nothing
    reads those names now, and nothing deletes them: they may hold the only copy of something."""
    notes = []
    for x in (d + ".old.deleting", d + ".tmp.deleting"):
        if os.path.islink(x):
            notes.append(f"note: {x} is a link an older train.py left (to {os.path.realpath(x)}); nothing "
                         f"uses it now: remove the link once that folder is safe")
        elif os.path.isfile(os.path.join(x, SWAP_MARK)):
            notes.append(f"note: {x} is a half-deleted checkpoint an older train.py left; nothing uses it "
                         f"now: delete it")
    return notes


def save(out_dir: str, model, config: dict, train_state: dict | None = None, eval_model=None, write=True):
    """Write a complete checkpoint atomically. eval_model (e.g. the EMA copy) goes to model.safetensors.
    With FSDP every rank calls it (the shards are gathered into one file) and only the one with write=True
    writes. A write that fails (a full disk) removes its own .tmp and raises SaveError (one line); the last
    complete checkpoint stays."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file
    shown = weights(eval_model or model)
    train_state = None if train_state is None else {"model": weights(model), **unsharded(train_state)}
    if not write:
        return
    d = resolved(out_dir)
    why = not_ours(d)
    if train_state is None and locked(d):             # a snapshot's name another train.py trains in
        raise SaveError(f"cannot save step {config.get('step', '?')} to {d}: another train.py is training "
                        f"there (it holds {d}.lock), so it is not replaced; this run stops: move that run to "
                        f"another --out-dir, then --resume this one from its last save in --out-dir, if any")
    if why:                                           # a folder that appeared since train.py started
        raise SaveError(f"cannot save step {config.get('step', '?')} to {d}: it was not written by train.py "
                        f"({why}), so it is not replaced; move it away, then --resume")
    finish_swap(d)
    tmp = None
    try:
        tmp = fresh(d, "tmp")
        open(os.path.join(tmp, SWAP_MARK), "w").close()
        save_file(shown, os.path.join(tmp, "model.safetensors"))
        if train_state is not None:
            torch.save(train_state, os.path.join(tmp, "train_state.pt"))
        with open(os.path.join(tmp, PART), "w") as f:
            standard_json.dump(config, f, indent=2)      # tau = inf as "inf": standard JSON
        os.replace(os.path.join(tmp, PART), os.path.join(tmp, "config.json"))   # last: complete
    except BaseException as e:                        # a full disk, Ctrl-C, ...: only this save's folder goes
        if tmp is not None:
            remove(tmp)
        if isinstance(e, (OSError, RuntimeError, SafetensorError)):  # torch.save's write errors: RuntimeError
            raise SaveError(cannot_save(d, config, e, train_state is not None)) from None
        raise
    try:
        swap_in(d, tmp)
    except OSError as e:                              # the new checkpoint is complete in tmp: newest finds it
        raise SaveError(cannot_save(d, config, e, train_state is not None)) from None


def cannot_save(d: str, config: dict, e: BaseException, resumable: bool = True) -> str:
    """The one line of a save that failed: the folder, why, its free space, and where the last checkpoint
    is (of a weights-only save, not resumable: --keep-every's snapshot, the run's own is in --out-dir)."""
    why = (getattr(e, "strerror", None) or (str(e).splitlines() or [type(e).__name__])[0])[:120]
    try:
        free = f"{shutil.disk_usage(os.path.dirname(os.path.abspath(d))).free / 2**20:,.1f} MiB free there"
    except OSError:
        free = "its free space unknown"
    last = newest(d) if resumable else None
    kept = (f"the last complete checkpoint (step {step_of(last)}) is in {last}: make room, then --resume"
            if last else "no checkpoint was saved yet" if resumable else
            "the run's last checkpoint is in --out-dir: fix this, then --resume")
    return f"cannot save step {config.get('step', '?')} to {d} ({why}; {free}); {kept}"


def weights(model) -> dict:
    """State dict without the tied lm_head (safetensors refuses shared tensors); an FSDP-sharded model's
    tensors gathered whole (unsharded: every rank calls it)."""
    sd = unsharded(model.state_dict())
    if model.cfg.tie_embeddings:
        sd.pop("lm_head.weight", None)
    return {k: v.detach().contiguous() for k, v in sd.items()}


def unsharded(x):
    """x (a state dict: nested dicts and lists) with every FSDP2 DTensor gathered whole. A DTensor's gather is
    a collective, so with train.py --fsdp every rank calls it, in the same order; without FSDP it is x."""
    from torch.distributed.tensor import DTensor
    if isinstance(x, DTensor):
        return x.full_tensor()
    if isinstance(x, dict):
        return {k: unsharded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [unsharded(v) for v in x]
    return x
