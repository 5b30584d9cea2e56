"""The paper's make targets (paper/reproduce.mk) rehearsed on a CPU, offline, before a GPU is rented: each
target runs its exact command lines end to end against stand-ins in the released formats (paper/standins.py)
and says PASS or FAIL.

    make rehearse                                          # every target: python -m paper.rehearse
    python -m paper.rehearse reproduce-gsm8k train-owt     # some of them
    python -m paper.rehearse reproduce-gsm8k GSM8K_TAUS="inf 0.8"    # NAME=VALUE: a make variable
    python -m paper.rehearse --print reproduce-gsm8k       # the exact command lines, run nothing

What stands in for what:
- The Hugging Face Hub: a cache in DIR/hf (HF_HOME, HF_HUB_OFFLINE=1) holding, under their Hub names, every
  released checkpoint the targets' lists name, as tiny random models in the released formats: the Qwen3 ones
  (gsm8k:*, cnndm:*) as the official push code writes them (pytorch_model.bin with backbone.model.model.*
  names, a release config.json, tokenizer.json), the DiT ones (owt:*, lm1b:*) with backbone.* names (adaLN on
  where the releases have it); Qwen/Qwen3-1.7B-Base (config.json, model.safetensors, tokenizer.json: what
  finetune-gsm8k starts from), Qwen/Qwen3-0.6B-Base (CNN/DM's tokenizer), google-bert/bert-base-uncased
  (LM1B's vocab.txt), openai/gsm8k in the datasets cache (read by reproduce-gsm8k and its lm-eval lines), and,
  with transformers installed, gpt2-large and answerdotai/ModernBERT-large (Table 4's scorers: tiny random
  models, GPT-2's own tokenizer).
- Tokenizers: Qwen3's tokenizer.json with its 26 special tokens at their real ids and 151,643 BPE entries
  without merges (text encodes byte by byte); BERT's vocab.txt of 30,522 entries; GPT-2's own files, rebuilt
  byte for byte from the ranks the test-only package openai-whisper ships (tiktoken checks their sha256) into
  DIR/tiktoken (TIKTOKEN_CACHE_DIR); without that package tiktoken uses its own cache, or downloads them.
- Data, in the local layouts the loaders read (the *_DIR variables): GSM8K's jsonl files (GSM8K_DIR, read by
  finetune-gsm8k), CNN/DM parquet (CNNDM_DIR), the Story Cloze CSV (ROCSTORIES_DIR), OWT's one split as
  parquet (OWT_DIR: 100,200 short documents, as its validation split is the last 100,000), LM1B's train and
  test parquet (LM1B_DIR), HellaSwag as the Hub's parquet, PIQA and SIQA as their original jsonl + labels
  files (MCQA_DIR/<name>).

How a target runs: make -C DIR/work TARGET NEED_GPU=: ..., DIR/work holding links to the repository's files
but results/ and out/, so what a target writes lands in DIR, never in the repository. EVAL_EXTRA, TIMED_EXTRA
and TRAIN_EXTRA (appended to the eval.py / timed eval.py / train.py lines; argparse keeps a flag's last value)
make each run small: --device cpu, batch 2, 8 new tokens, 1 warm-up example and 2 timed, a 1-layer model in
place of a --preset (a fine-tuning run keeps its stand-in's shape), 2 steps. NGPU=2: the torchrun lines start
two CPU processes (gloo). GSM8K_TAUS is cut to inf 0.9, Table 4 to 4 samples of 60 tokens (1 timed after
1); the lists of checkpoints are the Makefile's. A target that refuses by design (REFUSES:
reproduce-gsm8k-likelihood, whose eval data was never released) passes when it fails with its line. Each
target's output goes to DIR/logs/TARGET.log.
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = ".rehearsal"                      # marks a folder this module built (and may empty again)

CPU = "--device cpu --threads 1"
EVAL = CPU + " --batch-size 2"             # batch 2: a CPU's memory holds the logits of a Qwen3 vocabulary
GENERATE = EVAL + " --max-new-tokens 8"
TIMED = "--warmup 1 --limit 3"             # the timed lines (throughput, infilling): 1 warm-up, 2 timed
FINETUNE = CPU + " --batch-size 1 --grad-accum 1 --max-iters 2 --eval-limit 2 --max-new-tokens 8"
TRAIN = FINETUNE + ' --preset "" --n-layer 1 --n-embd 16 --n-head 2'   # from scratch: a 1-layer model
# (a fine-tuning run takes its shape from --init-from, which refuses shape flags: its stand-in is tiny)
# target -> the make variables it runs with here ({data}: DIR/data)
TARGETS = {
    "smoke-gsm8k": {"EVAL_EXTRA": GENERATE, "TIMED_EXTRA": TIMED, "SMOKE_N": "2"},
    "reproduce-gsm8k": {"EVAL_EXTRA": GENERATE, "TIMED_EXTRA": TIMED, "GSM8K_TAUS": "inf 0.9"},
    "finetune-gsm8k": {"TRAIN_EXTRA": FINETUNE, "GSM8K_DIR": "{data}/gsm8k"},   # reproduce-gsm8k: the Hub's
    "train-cnndm": {"TRAIN_EXTRA": TRAIN, "CNNDM_DIR": "{data}/cnndm"},
    "reproduce-cnndm": {"EVAL_EXTRA": GENERATE, "TIMED_EXTRA": TIMED, "CNNDM_DIR": "{data}/cnndm"},
    "reproduce-infill": {"EVAL_EXTRA": CPU, "TIMED_EXTRA": TIMED, "ROCSTORIES_DIR": "{data}/rocstories"},
    # 4 samples of 60 tokens scored (the official filter redraws 50 or fewer), throughput runs of 1 after 1
    "reproduce-unconditional": {"EVAL_EXTRA": EVAL + " --max-new-tokens 60", "TIMED_EXTRA": "--warmup 1 -n 1",
                                "UNCOND_N": "4", "OWT_DIR": "{data}/owt"},
    "reproduce-gsm8k-likelihood": {},
    "reproduce-likelihood": {"EVAL_EXTRA": EVAL, "LIMIT": "2", "OWT_DIR": "{data}/owt",
                             "LM1B_DIR": "{data}/lm1b"},
    "reproduce-mcqa": {"EVAL_EXTRA": EVAL, "LIMIT": "2", "MCQA_DIR": "{data}/mcqa"},
    "train-owt": {"TRAIN_EXTRA": TRAIN, "NGPU": "2", "OWT_DIR": "{data}/owt"},
    "train-lm1b": {"TRAIN_EXTRA": TRAIN, "NGPU": "2", "LM1B_DIR": "{data}/lm1b"},
}
LISTS = ("GSM8K_CKPTS", "CNNDM_CKPTS", "INFILL_CKPTS", "OWT_CKPTS", "LM1B_CKPTS", "UNCOND_CKPTS",
         "LM1B_UNCOND_CKPTS")                                                       # the released keys used
# A target that refuses by design, in one line that starts so (its reason: docs/paper.md): passes if it does
REFUSES = {"reproduce-gsm8k-likelihood": "error: the paper's GSM8K likelihood is measured on the official "
                                         "distillation eval split"}


# ----------------------------------------------------------------------------- the folder and the environment

def prepare(root: str, held: list | None = None) -> str:
    """root emptied (when this module built it, or new; the folder itself stays: a link stays a link), with
    root/work linking to the repository; returns root/work. held: a list that gets root's mark, open and
    locked while a rehearsal runs there (another is refused, told what runs: busy). A target's make inherits
    the lock (make(lock=)), so a make that outlives its rehearsal (a SIGKILL) keeps the folder from being
    emptied under it. A file, a folder it did not build and a place it cannot write are a ValueError (one
    line), before anything is touched."""
    if os.path.lexists(root) and not os.path.isdir(root):
        raise ValueError(f"--dir {root} is a file or a link to no folder: give a new or an empty folder")
    if os.path.isdir(root) and os.listdir(root) and not os.path.isfile(os.path.join(root, MARK)):
        raise ValueError(f"--dir {root} exists and is not a rehearsal folder: give a new or an empty "
                         f"folder")
    try:
        os.makedirs(root, exist_ok=True)
        mark = open(os.path.join(root, MARK), "a")
        if held is None:
            mark.close()
        else:                            # a second rehearsal here would empty this one's folder
            import fcntl
            held.append(mark)
            fcntl.flock(mark, fcntl.LOCK_EX | fcntl.LOCK_NB)     # BlockingIOError when another holds it
            record(mark, pid=os.getpid())
        for name in set(os.listdir(root)) - {MARK}:                # its own folder: emptied
            path = os.path.join(root, name)
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
        work = os.path.join(root, "work")
        os.makedirs(work)
        for name in os.listdir(REPO):    # the code and data files; what the targets write stays in root
            if not name.startswith((".", "out", "results")):
                os.symlink(os.path.join(REPO, name), os.path.join(work, name))
    except BlockingIOError:
        raise ValueError(busy(root)) from None
    except OSError as e:
        raise ValueError(f"cannot write the rehearsal folder {root} ({e.strerror or e}): give another "
                         f"--dir") from None
    return work


def record(mark, **running):
    """What runs under the lock, written in the mark (its pid; a target's make, its process group), for
    busy."""
    mark.truncate(0)
    mark.write(json.dumps(running, allow_nan=False))
    mark.flush()


def busy(root: str) -> str:
    """The line refusing a rehearsal in root while the lock is held: by another rehearsal, or by the make of
    one that was killed (its python gone, the lock inherited by the make, which runs on)."""
    try:
        with open(os.path.join(root, MARK)) as f:
            held = json.load(f)
        os.kill(held["pid"], 0)                      # ProcessLookupError: the rehearsal itself has ended
    except ProcessLookupError:
        if "make" in held:
            return (f"the make {held['target']} of a rehearsal that was killed still runs in {root} (process "
                    f"group {held['make']}): wait for it to end, or stop it (kill -- -{held['make']}), then "
                    f"rehearse again; or give another --dir")
    except (OSError, ValueError, KeyError, TypeError):  # a mark of an older version, or none readable
        pass
    return f"another rehearsal is running in {root}: wait for it, or give another --dir"


def offline_env(root: str) -> dict:
    """The environment of every command: the stand-in Hub cache, offline, no credentials, GPT-2's files."""
    # a target runs as from a shell, not as a part of make rehearse
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TIKTOKEN"))
           and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(HF_HOME=os.path.join(root, "hf"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if os.path.isdir(os.path.join(root, "tiktoken")):
        env["TIKTOKEN_CACHE_DIR"] = os.path.join(root, "tiktoken")
    return env


def variables(args: list[str]) -> dict:
    """The NAME=VALUE arguments as {NAME: VALUE}; a NAME that neither the Makefile nor paper/reproduce.mk
    reads would do nothing, and is refused (ValueError, one line)."""
    text = "".join(open(os.path.join(REPO, *f)).read() for f in (["Makefile"], ["paper", "reproduce.mk"]))
    known = set(re.findall(r"\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]", text))
    for arg in args:
        if arg.split("=", 1)[0] not in known:
            raise ValueError(f"{arg}: the Makefile and paper/reproduce.mk read no variable "
                             f"{arg.split('=', 1)[0]!r} (it would do nothing): check its spelling")
    return dict(a.split("=", 1) for a in args)


def make_variables(target: str, root: str, given: dict) -> dict:
    """The make variables of target in this rehearsal, the NAME=VALUE arguments (given) last."""
    data = os.path.join(root, "data")
    return {**{k: v.format(data=data) for k, v in TARGETS[target].items()}, **given}


def make(work: str, goal: str, variables: dict, *makefiles: str, stdin: str | None = None, lock=None,
         **popen) -> subprocess.CompletedProcess:
    """make GOAL in work with these variables, past the GPU check (NEED_GPU=:); make echoes each line. It runs
    in a process group of its own, ended whole when this process stops first (Ctrl-C, SIGTERM): no command of
    a target outlives the rehearsal to write into a folder the next one empties. lock (the folder's locked
    mark): make and its commands inherit its descriptor, so the lock lasts while they run, even when this
    process is killed (SIGKILL, which ends nothing else). A make that fails with stderr captured is a
    ValueError (one line: its last error line but make's own)."""
    argv = ["make", "--no-print-directory", "-C", work, *makefiles, goal, "NEED_GPU=:",
            *[f"{k}={v}" for k, v in variables.items()]]
    proc = subprocess.Popen(argv, start_new_session=True, text=True,
                            stdin=None if stdin is None else subprocess.PIPE,
                            pass_fds=() if lock is None else (lock.fileno(),), **popen)
    if lock is not None:
        record(lock, pid=os.getpid(), make=proc.pid, target=goal)
    try:
        out, err = proc.communicate(stdin)
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    if proc.returncode and err is not None:
        lines = [line.strip() for line in err.splitlines() if line.strip()] or [""]   # make's "***" last
        last = next((line for line in reversed(lines) if not line.startswith("make")), lines[-1])
        raise ValueError(f"make {goal} failed ({last[:200]}): check the NAME=VALUE arguments")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def listed_keys(work: str, given: dict) -> list[str]:
    """The released checkpoint keys the targets' lists hold (the Makefile's values, or the given ones)."""
    printer = "print-lists:\n\t@echo " + " ".join(f"$({v})" for v in LISTS) + "\n"
    proc = make(work, "print-lists", given, "-s", "-f", "Makefile", "-f", "-", stdin=printer,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return sorted(set(proc.stdout.split()))


# ----------------------------------------------------------------------------- running, or recording, targets

def run_target(target: str, root: str, variables: dict, lock=None) -> tuple[bool, float, str]:
    """make TARGET in root/work, offline: (passed, seconds, its last error line, else its last line but make's
    own). The output, each command line and what it printed, goes to root/logs/TARGET.log. lock: the folder's
    (prepare's held), which the make inherits."""
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    log = os.path.join(root, "logs", target + ".log")
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = make(os.path.join(root, "work"), target, {"PY": sys.executable, **variables},
                    env=offline_env(root), stdout=f, stderr=subprocess.STDOUT, lock=lock)
    seconds = time.perf_counter() - start
    with open(log, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    last = next((line for line in reversed(lines) if line.startswith("error:")), None) or \
        next((line for line in reversed(lines) if not line.startswith("make")), "")
    if target in REFUSES:                         # passes by refusing, in its own line
        return proc.returncode != 0 and last.startswith(REFUSES[target]), seconds, last
    return proc.returncode == 0, seconds, last


def commands(target: str, work: str, variables: dict) -> list[list[str]]:
    """The exact command lines make TARGET runs with these variables: every $(PY) and torchrun line (its
    arguments after PY; a torchrun line from "torchrun" on), loops expanded by the shell, recorded in place of
    running them (make's own lines, mkdir, run)."""
    with tempfile.TemporaryDirectory() as tmp:
        log, record = os.path.join(tmp, "lines"), os.path.join(tmp, "record")
        for path, text in ((record, f'for a in "$@"; do printf "%s\\037" "$a"; done >> {shlex.quote(log)}\n'
                                    f'echo >> {shlex.quote(log)}\n'),
                           (os.path.join(tmp, "torchrun"), f'exec {shlex.quote(record)} torchrun "$@"\n')):
            with open(path, "w") as f:
                f.write("#!/bin/sh\n" + text)             # arguments end with \037 (no argument holds one)
            os.chmod(path, 0o755)
        open(log, "w").close()
        make(work, target, {**variables, "PY": record}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
             env={**os.environ, "PATH": f"{tmp}:{os.environ['PATH']}"})
        with open(log) as f:
            return [line.rstrip("\n").split("\037")[:-1] for line in f]


def report(results: dict, root: str) -> tuple[list[str], int]:
    """The lines of {target: (passed, seconds, last line)}, one per target and a summary naming the failing
    ones, and the exit status (1 if any failed)."""
    lines = []
    for target, (ok, seconds, last) in results.items():
        log = os.path.join(root, "logs", target + ".log")
        lines.append(f"{'PASS' if ok else 'FAIL'}  {target:26s} {seconds:6.0f} s" +
                     (f"  (refuses, as it should: {last.removeprefix('error: ')[:110]}...)"
                      if ok and target in REFUSES else
                      "" if ok else f"  {last[:200]}  (log: {log})"))
    failed = [t for t, (ok, _, _) in results.items() if not ok]
    lines.append(f"rehearsal: {len(results) - len(failed)} of {len(results)} targets pass" +
                 (f"; failing: {', '.join(failed)}" if failed else ""))
    return lines, 1 if failed else 0


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="*", help=f"targets (default: all: {' '.join(TARGETS)}) and NAME=VALUE "
                   "make variables")
    p.add_argument("--dir", default=os.path.join(REPO, "out", "rehearsal"),
                   help="the rehearsal's folder (emptied first; default out/rehearsal)")
    p.add_argument("--print", action="store_true", help="print each target's exact command lines, run "
                   "nothing")
    args = p.parse_args(argv)
    targets = [a for a in args.targets if "=" not in a] or list(TARGETS)
    held = []                            # the folder's lock, held until the rehearsal ends
    try:
        given = variables([a for a in args.targets if "=" in a])
        if unknown := [t for t in targets if t not in TARGETS]:
            raise ValueError(f"unknown target {unknown[0]!r}: choose from {', '.join(TARGETS)}")
        if shutil.which("make") is None:
            raise ValueError("the rehearsal runs the targets with GNU make, which is not on PATH")
        if args.print:                   # in a folder of its own: nothing is built, nothing emptied
            with tempfile.TemporaryDirectory() as tmp:
                for target in targets:
                    lines = commands(target, prepare(os.path.join(tmp, target)),
                                     make_variables(target, args.dir, given))
                    print(f"# make {target}", *(shlex.join(a if a[0] == "torchrun" else ["python", *a])
                                                 for a in lines), sep="\n")
            return 0
        work = prepare(args.dir, held)
        from paper import standins
        print(f"building the stand-ins in {args.dir} ...", flush=True)
        standins.build(args.dir, listed_keys(work, given))
    except ValueError as e:
        sys.exit(f"error: {e}")
    results = {}
    for target in targets:
        results[target] = run_target(target, args.dir, make_variables(target, args.dir, given), held[0])
        print(report({target: results[target]}, args.dir)[0][0], flush=True)
    lines, status = report(results, args.dir)
    print(lines[-1])
    return status


def stopped(signum, frame):
    """SIGTERM (a job scheduler, kill): the running target's process group ended (make), one line."""
    sys.exit("paper.rehearse: stopped (SIGTERM); what it built stays in its --dir (the next rehearsal there "
             "empties it)")


if __name__ == "__main__":
    from common.cli import run
    signal.signal(signal.SIGTERM, stopped)
    run(lambda: sys.exit(main()), "paper.rehearse", "what it built stays in its --dir (the next rehearsal "
        "there empties it)")
