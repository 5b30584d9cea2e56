"""The rehearsal of the paper's make targets (paper/rehearse.py, paper/standins.py), a cheap subset of each:
every target of paper/reproduce.mk with one or two checkpoints of its lists, its exact command lines recorded
from make and replayed in one offline Python process against the stand-ins (tiny models in the released
formats in a fake Hugging Face cache, tiny data in each loader's layout); the rehearsal's own pieces (the
folder, the report naming a failing target) and what it found (each a test of its fix). `make rehearse`
runs every target whole, one process per command line."""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from helpers import error_of, snapshot
from paper import rehearse, standins

# target -> its variables here beside the rehearsal's (rehearse.TARGETS): one or two checkpoints of each list,
# 4 new tokens at the lines' own batch sizes, ROCStories' one story and one sentence count (MDLM's 1024-wide
# steps over GPT-2's vocabulary are slow), 2 unconditional samples of 8 tokens as drawn (top-p sorts GPT-2's
# vocabulary at every query); each training target with another method, in float32 (bf16 autocast is slow on
# a CPU)
FEW = {"EVAL_EXTRA": "--device cpu --threads 1 --max-new-tokens 4"}
FP32 = {"TRAIN_EXTRA": rehearse.TRAIN + " --dtype float32"}
SMALL = {
    "smoke-gsm8k": {"GSM8K_CKPTS": "gsm8k:ar", "SMOKE_N": "1", **FEW},
    "reproduce-gsm8k": {"GSM8K_CKPTS": "gsm8k:setdlm-smax8", "GSM8K_TAUS": "0.9", **FEW},
    "finetune-gsm8k": {"TRAIN_EXTRA": rehearse.FINETUNE + " --dtype float32"},
    "train-cnndm": {"M": "bd3lm", **FP32},
    "reproduce-cnndm": {"CNNDM_CKPTS": "cnndm:bd3lm-s4", **FEW},
    "reproduce-infill": {"INFILL_CKPTS": "owt:setdlm-smax32 owt:mdlm", "TIMED_EXTRA": "--warmup 0 --limit 1",
                         "INFILL_LIMIT": "1", "INFILL_SENTENCES": "1"},
    "reproduce-unconditional": {"UNCOND_CKPTS": "owt:setdlm-smax32", "LM1B_UNCOND_CKPTS": "lm1b:ar",
                                "UNCOND_N": "2",
                                "EVAL_EXTRA": rehearse.EVAL + " --max-new-tokens 8 --no-redraw"},
    "reproduce-likelihood": {"OWT_CKPTS": "owt:ar owt:setdlm-smax8",                  # both recipes
                             "LM1B_CKPTS": "lm1b:mdlm lm1b:setdlm-smax8"},
    "reproduce-mcqa": {"OWT_CKPTS": "owt:bd3lm-s4"},
    "train-owt": {"NGPU": "1", "M": "ar", **FP32},
    "train-lm1b": {"NGPU": "1", "M": "mdlm", **FP32},
}
WHISPER = importlib.util.find_spec("whisper") is not None       # GPT-2's ranks offline (the OWT targets)
GPT2 = {"reproduce-infill", "reproduce-likelihood", "reproduce-mcqa", "train-owt", "reproduce-unconditional"}
SCORERS = all(importlib.util.find_spec(m) for m in ("transformers", "mauve"))    # Table 4's (test-only)

# Each recorded command line run as its process would run it, in one process: a script as __main__ with its
# argv, python -m, python -c, a torchrun line as its train.py alone (one process; make rehearse starts two);
# a glob the shell would expand at run time (paper.results' results/*.json) expanded. A target stops at its
# first failing line, as make does (|| exit 1); its error: the exit message, or the traceback's last lines.
# lm-eval indexes only its own gsm8k folder here (the whole index of its ~14k task files takes ~15 s).
REPLAY = r"""
import glob, json, os, runpy, shlex, sys, time, traceback
import lm_eval.tasks
whole = lm_eval.tasks.TaskManager
gsm8k = os.path.join(os.path.dirname(lm_eval.tasks.__file__), "gsm8k")
lm_eval.tasks.TaskManager = lambda include_path=None, **k: whole(include_path=include_path or gsm8k,
                                                                 include_defaults=False)
given, out, results = sys.argv[1], sys.argv[2], {}
for target, lines in json.load(open(given)).items():
    error, start = None, time.perf_counter()
    for argv in lines:
        argv = argv[argv.index("train.py"):] if argv[0] == "torchrun" else argv
        argv = [a for arg in argv for a in (sorted(glob.glob(arg)) or [arg] if "*" in arg else [arg])]
        try:
            if argv[0] == "-c":
                sys.argv = ["-c"]
                exec(argv[1], {"__name__": "__main__"})
            elif argv[0] == "-m":
                sys.argv = argv[1:]
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = argv
                runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as e:
            error = None if e.code in (None, 0) else f"{shlex.join(argv)}: {e.code}"
        except Exception as e:
            error = f"{shlex.join(argv)}: " + "".join(traceback.format_exception(e)[-4:])
        if error:
            break
    results[target] = {"error": error, "lines": len(lines), "seconds": time.perf_counter() - start}
json.dump(results, open(out, "w"))
"""


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """(folder, {target: its recorded command lines}, {target: {"error", "lines"}}): the stand-ins of SMALL's
    checkpoints built, every target's lines recorded, then replayed offline in one process."""
    root = str(tmp_path_factory.mktemp("rehearsal") / "r")
    work = rehearse.prepare(root)
    keys = sorted({k for v in SMALL.values() for name, value in v.items() if name.endswith("_CKPTS")
                   for k in value.split()})
    standins.build(root, keys + ["gsm8k:setdlm-smax9", "out/mine"])      # no release: no stand-in, no error
    lines = {t: rehearse.commands(t, work, rehearse.make_variables(t, root, v)) for t, v in SMALL.items()
             if (WHISPER or t not in GPT2) and (SCORERS or t != "reproduce-unconditional")}
    with open(os.path.join(root, "lines.json"), "w") as f:
        json.dump(lines, f)
    proc = subprocess.run([sys.executable, "-c", REPLAY, os.path.join(root, "lines.json"),
                           os.path.join(root, "results.json")], cwd=work, env=rehearse.offline_env(root),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(root, "results.json")) as f:
        return root, lines, json.load(f)


@pytest.mark.parametrize("target", list(SMALL))
def test_every_target_runs_its_exact_lines_on_the_stand_ins(rehearsal, target):
    """The target's command lines, as make expands them with the rehearsal's variables, all run to the end."""
    if target in GPT2 and not WHISPER:
        pytest.skip("the test-only package openai-whisper ships GPT-2's ranks")
    if target == "reproduce-unconditional" and not SCORERS:
        pytest.skip("Table 4's scorers need the test-only packages transformers and mauve-text")
    _, lines, results = rehearsal
    error = results[target]["error"]
    assert error is None, error
    assert results[target]["lines"] == len(lines[target]) >= 1


def test_the_lines_are_the_makefiles_with_the_extras_last_writing_in_the_folder(rehearsal):
    """EVAL_EXTRA / TRAIN_EXTRA come last on every eval.py / train.py line, after the recipe's own flags, and
    TIMED_EXTRA after them on the timed lines (--task throughput, --throughput-run); the train-owt/train-lm1b
    lines carry their own smax and block size (not make smax's list), and finetune-gsm8k starts from
    Qwen3-1.7B-Base. What the targets write stays in the rehearsal's folder."""
    root, lines, _ = rehearsal
    for target, cmds in lines.items():
        given = rehearse.make_variables(target, root, SMALL[target])
        for argv in cmds:
            if "train.py" in argv:
                assert " ".join(argv).endswith(given["TRAIN_EXTRA"].replace('""', "")), (target, argv)
            elif "eval.py" in argv:
                timed = argv[argv.index("--task") + 1] == "throughput" or "--throughput-run" in argv
                extra = given["EVAL_EXTRA"] + (" " + given["TIMED_EXTRA"] if timed else "")
                assert " ".join(argv).endswith(extra), (target, argv)
    tail = lambda t: next(a for a in lines[t] if "train.py" in a)                  # noqa: E731
    assert "--smax" not in tail("train-owt") and "--block-size" not in tail("train-lm1b")   # AR, MDLM
    assert tail("finetune-gsm8k")[tail("finetune-gsm8k").index("--init-from") + 1] == "Qwen/Qwen3-1.7B-Base"
    flag = lambda name: tail("finetune-gsm8k")[tail("finetune-gsm8k").index(name) + 1]    # noqa: E731 (first)
    assert (flag("--lr"), flag("--batch-size")) == ("1e-5", "1")        # the release's run names' recipe
    work = os.path.join(root, "work")
    assert os.path.isfile(os.path.join(work, "results", "gsm8k.md"))
    assert os.path.isfile(os.path.join(work, "out", "gsm8k-setdiffusion", "config.json"))
    assert os.path.islink(os.path.join(work, "eval.py")) and not os.path.islink(os.path.join(work, "results"))


def test_the_report_names_a_failing_target(tmp_path):
    """run_target through make with a Python that fails on the second line: FAIL, its error line, the log; the
    summary names it and the exit status is 1."""
    work = rehearse.prepare(str(tmp_path / "r"))
    fake = tmp_path / "py"
    fake.write_text('#!/bin/sh\ncase "$*" in *tput*) echo "error: no GPU here" >&2; exit 1;; esac\n')
    fake.chmod(0o755)
    ok, seconds, last = rehearse.run_target("reproduce-gsm8k", str(tmp_path / "r"),
                                            {"PY": str(fake), "GSM8K_CKPTS": "gsm8k:ar"})
    assert (ok, last) == (False, "error: no GPU here") and seconds > 0
    lines, status = rehearse.report({"reproduce-gsm8k": (ok, seconds, last), "train-owt": (True, 3.0, "")},
                                    str(tmp_path / "r"))
    assert lines[0].startswith("FAIL  reproduce-gsm8k") and "error: no GPU here" in lines[0] and \
        lines[0].endswith(f"(log: {tmp_path / 'r' / 'logs' / 'reproduce-gsm8k.log'})")
    assert lines[1].startswith("PASS  train-owt")
    assert (lines[2], status) == ("rehearsal: 1 of 2 targets pass; failing: reproduce-gsm8k", 1)
    assert os.path.isdir(work)


def test_a_target_that_refuses_passes_by_its_line(tmp_path):
    """make reproduce-gsm8k-likelihood refuses (its eval data was never released): the rehearsal passes it
    when it fails with that line, and fails it when it runs."""
    rehearse.prepare(str(tmp_path / "r"))
    ok, _, last = rehearse.run_target("reproduce-gsm8k-likelihood", str(tmp_path / "r"), {})
    assert ok and last.startswith(rehearse.REFUSES["reproduce-gsm8k-likelihood"]) and "never released" in last
    lines, status = rehearse.report({"reproduce-gsm8k-likelihood": (ok, 0.0, last)}, str(tmp_path / "r"))
    assert "refuses, as it should: the paper's GSM8K likelihood" in lines[0] and status == 0
    rehearse.REFUSES["smoke-gsm8k"] = "error: a refusal"         # a target that should refuse and does not
    try:
        ok, _, _ = rehearse.run_target("smoke-gsm8k", str(tmp_path / "r"), {"PY": "true"})
    finally:
        del rehearse.REFUSES["smoke-gsm8k"]
    assert not ok


def test_the_folder_is_never_one_it_did_not_build(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(ValueError, match="is not a rehearsal folder"):
        rehearse.prepare(str(tmp_path))
    assert (tmp_path / "mine.txt").read_text() == "keep"
    rehearse.prepare(str(tmp_path / "r"))
    (tmp_path / "r" / "stale").write_text("")
    rehearse.prepare(str(tmp_path / "r"))                        # its own: emptied and built again
    assert not (tmp_path / "r" / "stale").exists()


SUITE = "likelihood/owt-setdlm-smax8-suite.json"


# skipped: the --json files whose lines it skips, or the file its refusal names
@pytest.mark.parametrize("target, finished, resume, skipped", [
    ("reproduce-gsm8k", ["gsm8k/setdlm-smax8-0.9.json"], "", "gsm8k/setdlm-smax8-0.9.json"),  # interrupted
    ("reproduce-gsm8k", ["gsm8k/ar-inf.json", "gsm8k/ar-inf.jsonl"], "1", ["gsm8k/ar-inf.json"]),
    ("reproduce-gsm8k", ["gsm8k/ar-inf.json"], "1", []),          # its replies never written: measured again
    ("smoke-gsm8k", ["gsm8k-smoke/setdlm-smax8-tput.json"], "", "gsm8k-smoke/setdlm-smax8-tput.json"),
    ("reproduce-cnndm", ["cnndm/ar.jsonl"], "", "cnndm/ar.json"),      # replies whose JSON is gone
    ("reproduce-infill", ["infill/ar-1-h100-tput.json"], "1", ["infill/ar-1-h100-tput.json"]),
    ("reproduce-likelihood", [SUITE], "", SUITE),
    ("reproduce-mcqa", ["mcqa/ar-piqa.json"], "1", ["mcqa/ar-piqa.json"]),
    ("reproduce-unconditional", ["unconditional/lm1b-ar-tput.json"], "", "unconditional/lm1b-ar-tput.json"),
])
def test_a_rerun_of_a_paper_target_replaces_no_finished_result(tmp_path, target, finished, resume, skipped):
    """Where an earlier run finished an eval.py line (its --json, and its --replies where kept, exist), the
    target run again stops in one line naming the file before its first eval.py line (PY=false: one would fail
    first); RESUME=1 keeps those files and runs only the other lines (make's eval.py lines recorded)."""
    root = str(tmp_path / "r")
    work = rehearse.prepare(root)
    lines = lambda: [a for a in rehearse.commands(target, work, rehearse.make_variables(     # noqa: E731
        target, root, {"RESUME": resume})) if a[0] == "eval.py"]
    every = lines()
    for name in finished:
        (tmp_path / "r" / "work" / "results" / name).write_text("{}")
    if isinstance(skipped, str):
        with pytest.raises(ValueError) as e:
            rehearse.make(work, target, {**rehearse.make_variables(target, root, {}), "PY": "false"},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert str(e.value).startswith(f"make {target} failed (error: results/{skipped} holds a result an "
                                       f"earlier run finished, which a rerun would replace")
        return
    json_of = lambda argv: argv[argv.index("--json") + 1] if "--json" in argv else None     # noqa: E731
    assert lines() == [a for a in every if json_of(a) not in {f"results/{n}" for n in skipped}]
    assert len(every) - len(lines()) == len(skipped)


@pytest.mark.parametrize("argv, message", [
    (["nosuch"], "unknown target 'nosuch': choose from " + ", ".join(rehearse.TARGETS)),
    (["--print", "nosuch"], "unknown target 'nosuch': choose from " + ", ".join(rehearse.TARGETS)),
    (["--print", "reproduce-gsm8k", "GSM8K_TAU=inf"], "GSM8K_TAU=inf: the Makefile and paper/reproduce.mk "
     "read no variable 'GSM8K_TAU' (it would do nothing): check its spelling"),
    (["reproduce-gsm8k", "=inf"], "=inf: the Makefile and paper/reproduce.mk read no variable '' (it would "
     "do nothing): check its spelling"),
    (["--print", "reproduce-gsm8k", "NEED_GPU=echo no GPU here >&2; false"],
     "make reproduce-gsm8k failed (no GPU here): check the NAME=VALUE arguments"),
    (["--dir", "{d}/file"], "--dir {d}/file is a file or a link to no folder: give a new or an empty folder"),
    (["--dir", "{d}/loop"], "--dir {d}/loop is a file or a link to no folder: give a new or an empty folder"),
    (["--dir", "{d}/file/r"], "cannot write the rehearsal folder {d}/file/r (Not a directory): give another "
                              "--dir"),
    (["--dir", "{d}/mine"], "--dir {d}/mine exists and is not a rehearsal folder: give a new or an empty "
                            "folder"),
    (["--dir", "{d}/busy"], "another rehearsal is running in {d}/busy: wait for it, or give another --dir"),
    (["--dir", "{d}/orphan"], "the make reproduce-gsm8k of a rehearsal that was killed still runs in "
     "{d}/orphan (process group {make}): wait for it to end, or stop it (kill -- -{make}), then rehearse "
     "again; or give another --dir"),
])
def test_bad_input_is_one_line_and_touches_nothing(tmp_path, monkeypatch, argv, message):
    """Before any stand-in is built: what is in the way stays as it was (a file, your folder, a link, the
    folder of a rehearsal that is running, or of one killed (SIGKILL) while its make runs on)."""
    monkeypatch.setattr(standins, "build", lambda *a: pytest.fail("got as far as building the stand-ins"))
    (tmp_path / "file").write_text("keep")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    held = []
    rehearse.prepare(str(tmp_path / "busy"), held)
    make = orphan_make(tmp_path) if "{d}/orphan" in argv else None
    try:
        before = snapshot(tmp_path)
        got = error_of(rehearse.main, [a.format(d=tmp_path) for a in argv])
        assert got == "error: " + message.format(d=tmp_path, make=make)
        assert snapshot(tmp_path) == before
    finally:
        if make is not None:
            os.killpg(make, signal.SIGKILL)


def orphan_make(tmp_path) -> int:
    """A rehearsal in tmp_path/orphan killed (SIGKILL) while its target's command runs (a 30 s sleep): its
    make runs on, in a process group of its own; returns that group."""
    fake = tmp_path / "py"
    fake.write_text(f'#!/bin/sh\necho $$ > {tmp_path / "started"}\nexec sleep 30\n')
    fake.chmod(0o755)
    code = (f"from paper import rehearse; held = []; d = {str(tmp_path / 'orphan')!r}; "
            f"rehearse.prepare(d, held); rehearse.run_target('reproduce-gsm8k', d, {{'PY': {str(fake)!r}}}, "
            f"held[0])")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=rehearse.REPO)
    for _ in range(500):
        if (tmp_path / "started").exists():
            break
        time.sleep(0.02)
    proc.kill()
    proc.wait()                                     # reaped: its pid is no process's
    return os.getpgid(int((tmp_path / "started").read_text()))


def test_a_stopped_rehearsal_leaves_no_command_of_its_target_running(tmp_path):
    """Ctrl-C or SIGTERM (rehearse.stopped) in the middle of a target ends the target's whole process group:
    nothing keeps writing into a folder the next rehearsal empties."""
    pids = tmp_path / "pids"
    fake = tmp_path / "py"
    fake.write_text(f'#!/bin/sh\necho $$ >> {pids}\nexec sleep 30\n')
    fake.chmod(0o755)
    rehearse.prepare(str(tmp_path / "r"))
    old = signal.signal(signal.SIGALRM, rehearse.stopped)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(SystemExit, match="stopped"):
            rehearse.run_target("reproduce-gsm8k", str(tmp_path / "r"), {"PY": str(fake)})
    finally:
        signal.signal(signal.SIGALRM, old)
    pid = int(pids.read_text().split()[0])
    for _ in range(50):                             # killed: gone, or a zombie until init reaps it
        if not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]:
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"the target's command {pid} still runs")


# ----------------------------------------------------------------------------- the stand-ins' formats

@pytest.mark.skipif(not WHISPER, reason="the test-only package openai-whisper ships GPT-2's ranks")
def test_gpt2_files_are_tiktokens_own(tmp_path):
    """The rebuilt vocab.bpe and encoder.json pass tiktoken's sha256 checks: gpt2 loads offline from them."""
    standins.gpt2_files(str(tmp_path))
    code = "import tiktoken; print(tiktoken.get_encoding('gpt2').encode('Hello world'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path)})
    assert out.stdout.strip() == "[15496, 995]", out.stderr[-500:]


# ----------------------------------------------------------------------------- what the rehearsal found

def test_the_qwen3_stand_in_has_the_real_ids_and_lm_eval_takes_its_padded_vocabulary(tmp_path):
    """The stand-in tokenizer's special ids are Qwen3's and every id decodes; a model of Qwen3's 151936
    embedding rows for the 151669 ids (make reproduce-gsm8k's lm-eval lines) is taken, one with fewer rows
    than ids still refused."""
    from data.qwen import qwen3_tokenizer
    from paper.zeroshot import checked_tokenizer
    standins.write_json(str(tmp_path / "tokenizer.json"), standins.qwen3_tokenizer_json())
    tok = qwen3_tokenizer(str(tmp_path))
    assert (tok.mask_id, tok.eos_id, tok.vocab_size) == (151660, 151643, 151669)
    assert tok.encode("<|im_start|>hi<|im_end|>") == [151644, 104, 105, 151645]
    assert tok.decode(list(range(250, 260))) and tok.decode([151900]) == ""     # every id decodes
    config = {"tokenizer": f"qwen3:{tmp_path}"}
    model = lambda rows: type("M", (), {"cfg": type("C", (), {"vocab_size": rows})})  # noqa: E731
    for rows in (151936, 151669):
        assert checked_tokenizer(config, model(rows), config["tokenizer"], "--task lm-eval").vocab_size == \
            151669
    with pytest.raises(ValueError, match="vocabulary has 151000 tokens but"):
        checked_tokenizer(config, model(151000), config["tokenizer"], "--task lm-eval")


def test_set_diffusion_stand_ins_carry_the_mask_buffer_the_loader_skips(rehearsal, tmp_path):
    """As the official push code writes a Set Diffusion release: its static_attention_mask buffer, the (2L,
    2L) two-stream mask (setdiffusion.attention_mask), beside the weights; MDLM's, BD3-LM's and AR's leave it
    out. The loader skips it by name (common/pretrained.py RELEASE_BUFFERS) and refuses the same tensor under
    a name it does not know."""
    import setdiffusion
    from common import checkpoint
    from common.pretrained import RELEASED
    root = rehearsal[0]
    def folder(key):
        return os.path.join(root, "hf", "hub", "models--" + RELEASED[key].replace("/", "--"), "snapshots",
                            standins.REV)
    for key, L in (("gsm8k:setdlm-smax8", 1024), ("owt:setdlm-smax32", 1024), ("lm1b:setdlm-smax8", 128),
                   ("lm1b:mdlm", None), ("cnndm:bd3lm-s4", None), ("gsm8k:ar", None)):
        state = torch.load(os.path.join(folder(key), "pytorch_model.bin"), weights_only=True)
        if L is None:
            assert "static_attention_mask" not in state, key
        else:
            assert torch.equal(state["static_attention_mask"], setdiffusion.attention_mask(None, L)), key
    mine = shutil.copytree(folder("lm1b:setdlm-smax8"), tmp_path / "lm1b-setdlm-smax8")
    assert checkpoint.load(str(mine))[3]["method_config"]["smax"] == 8            # the buffer skipped
    state = torch.load(mine / "pytorch_model.bin", weights_only=True)
    state["attention_mask"] = state.pop("static_attention_mask")
    torch.save(state, mine / "pytorch_model.bin")
    with pytest.raises(ValueError, match="unknown tensor 'attention_mask'"):
        checkpoint.load(str(mine))


def test_lm1b_releases_each_cache_their_own_rows(tmp_path):
    """Two LM1B releases' own copies of the WordPiece (bert:<repo>) and bert-base-uncased share one LM1B_DIR:
    each gets its own cache file of the same rows (make reproduce-likelihood's 8 checkpoints in a row)."""
    pytest.importorskip("tokenizers")
    from data import get_tokenizer, lm1b
    for name in ("a", "b"):
        os.makedirs(tmp_path / name)
        (tmp_path / name / "vocab.txt").write_text("\n".join(standins.bert_vocab()) + "\n")
    data = tmp_path / "lm1b"
    standins.lm1b(str(data), standins.random.Random(0))
    rows = [lm1b.load("test", str(data), get_tokenizer(f"bert:{tmp_path / name}")) for name in ("a", "b")]
    assert rows[0].shape[1] == 128 and len(rows[0]) > 1 and (rows[0] == rows[1]).all()
    assert len([f for f in os.listdir(data) if f.endswith(".bin")]) == 2


def test_a_fine_tuned_checkpoint_is_evaluated_as_the_released_ones(tmp_path):
    """make reproduce-gsm8k GSM8K_CKPTS=out/gsm8k-mdlm (the runbook's last step): its results are named by the
    checkpoint's folder, in results/gsm8k/ beside the released ones'."""
    own = rehearse.commands("reproduce-gsm8k", rehearse.prepare(str(tmp_path / "r")),
                            {"GSM8K_CKPTS": "out/gsm8k-mdlm", "GSM8K_TAUS": "inf"})
    assert [a[a.index("--json") + 1] for a in own if "--json" in a] == [
        "results/gsm8k/gsm8k-mdlm-inf.json", "results/gsm8k/gsm8k-mdlm-inf-tput.json",
        "results/gsm8k-harness/gsm8k-mdlm.json"]


def test_train_owt_and_lm1b_keep_their_smax_beside_make_smax(tmp_path):
    """The Makefile's SMAX (make smax's list 4 8 16 32) no longer reaches make train-owt / train-lm1b: their
    own CORPUS_SMAX / CORPUS_S do, each only for the method that has it (train.py refuses the others)."""
    work = rehearse.prepare(str(tmp_path / "r"))
    def line(target, method, **variables):
        return " ".join(rehearse.commands(target, work, {"NGPU": "1", "M": method, **variables})[-1]) + " "
    assert "--smax 32 " in line("train-owt", "setdiffusion", CORPUS_SMAX="32", CORPUS_S="8")
    assert "--block-size 8 " in line("train-owt", "bd3lm", CORPUS_SMAX="32", CORPUS_S="8")
    assert "--smax 8 " in line("train-lm1b", "setdiffusion")
    assert "--block-size 4 " in line("train-lm1b", "bd3lm")
    assert "--block-size" not in line("train-owt", "setdiffusion")
    assert "--smax" not in line("train-lm1b", "ar")


def test_the_runbooks_paper_numbers_are_data_gsm8k():
    """docs/paper.md's table of the paper's GSM8K points (accuracy · tokens/s · tokens/step per τ and
    checkpoint) is data/gsm8k.py's PAPER_RESULTS, which results/gsm8k.md prints beside ours."""
    import re
    from data.gsm8k import PAPER_RESULTS
    with open(os.path.join(rehearse.REPO, "docs", "paper.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| τ | `gsm8k:"))
    end = next(i for i in range(head, len(lines)) if not lines[i].startswith("|"))
    keys, shown = re.findall(r"`(gsm8k:[\w-]+)`", lines[head]), {}
    for row in lines[head + 2:end]:
        tau, *cells = [c.strip() for c in row.strip().strip("|").split("|")]
        for key, cell in zip(keys, cells):
            if cell:
                acc, tps, per_step = re.fullmatch(r"([\d.]+) % · ([\d.]+) · ([\d.]+)", cell).groups()
                shown.setdefault(key, {})[float("inf") if tau == "∞" else float(tau)] = \
                    (float(per_step), float(tps), float(acc))
    assert shown == PAPER_RESULTS
