"""cluster/slurm.py without a scheduler: SLURM's variables -> the exact torchrun command (dry run), host
lists, --grad-accum from a global batch, --resume added when the run's folder holds a complete checkpoint (a
requeued job), train.py's arguments read by train.py's own parser in every form, one line for what is missing
or out of range. python -m pytest -q tests/test_cluster.py"""
import importlib.util
import os
import subprocess
import sys
import time

import pytest

import train
from helpers import error_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("slurm", os.path.join(ROOT, "cluster", "slurm.py"))
slurm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slurm)

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_NUM_NODES": "2",
       "SLURM_GPUS_ON_NODE": "8"}
ONE_GPU = {**JOB, "SLURM_JOB_NODELIST": "gpu07", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "1"}


@pytest.mark.parametrize("spec, count, first", [
    ("gpu07", 1, "gpu07"), ("gpu[01-03,07],cpu5", 5, "gpu01"), ("node[8-11]", 4, "node8"),
    ("r[1-2]-n[01-02]", 4, "r1-n01"), ("node[1-100000000]", 100_000_000, "node1"),   # read, never listed
])
def test_hostlists_read(spec, count, first):
    start = time.perf_counter()
    assert slurm.read_hostlist(spec) == (count, first)
    assert time.perf_counter() - start < 0.1


def slurm_env(monkeypatch, env):
    """The environment holds env's SLURM variables, no other."""
    for k in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("env, extra, expect", [
    (JOB, "", "--nnodes 2 --nproc-per-node 8 --rdzv-endpoint gpu07:29500 --rdzv-id 4242"),
    ({**JOB, "SLURM_GPUS_ON_NODE": "", "SLURM_GPUS_PER_NODE": "h100:4", "SLURM_JOB_NUM_NODES": "",
      "SLURM_NNODES": "3", "SLURM_JOB_NODELIST": "a[3-5]"}, "",
     "--nnodes 3 --nproc-per-node 4 --rdzv-endpoint a3:29500"),
    (JOB, "--gpus-per-node 2 --port 31000", "--nproc-per-node 2 --rdzv-endpoint gpu07:31000"),
])
def test_dry_run_renders_the_exact_torchrun_command(monkeypatch, capsys, env, extra, expect, tmp_path):
    slurm_env(monkeypatch, env)
    args = ["--model", "ar", "--out-dir", str(tmp_path / "none")]
    cmd = slurm.main(["--dry-run", *extra.split(), "--", *args])
    assert cmd[0] == "torchrun" and cmd[-len(args) - 1:] == ["train.py", *args]
    flags = dict(zip(cmd[1:-len(args) - 1:2], cmd[2:-len(args) - 1:2]))
    assert flags["--rdzv-backend"] == "c10d"
    expect = expect.split()
    assert {k: flags[k] for k in expect[::2]} == dict(zip(expect[::2], expect[1::2]))
    assert capsys.readouterr().out.strip() == " ".join(cmd)


def test_a_requeued_job_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    """No checkpoint yet: no --resume; after a (1-step) run saved one: --resume, once. A relative --out-dir is
    looked up where torchrun runs train.py (the repository root), not in the launcher's working folder."""
    out = tmp_path / "run"
    dates = os.path.join(ROOT, "data", "examples", "dates.jsonl")             # small: encoded in no time
    args = ["--model", "ar", "--data", f"jsonl:{dates}", "--n-layer", "1", "--n-embd", "32", "--n-head", "2",
            "--batch-size", "2", "--eval-limit", "1", "--max-new-tokens", "4", "--max-iters", "1",
            "--out-dir", str(out)]
    assert "--resume" not in slurm.command(args, JOB)
    train.main(args)
    assert slurm.command(args, JOB)[-1] == "--resume"
    assert slurm.command([*args, "--resume"], JOB).count("--resume") == 1
    assert slurm.out_dir_of(["--model", "mdlm"]) == os.path.join("out", "mdlm")
    monkeypatch.setattr(slurm, "ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path / "run")
    assert slurm.command(["--model", "ar", "--out-dir", "run"], JOB)[-1] == "--resume"
    assert "--resume" not in slurm.command(["--model", "ar", "--out-dir", "elsewhere"], JOB)


@pytest.mark.parametrize("args", [
    "--model=ar",                                           # the default --out-dir out/ar
    "--model ar --data=arith --lr=3e-4", "--model=ar --out-dir=out/ar",
    "--mod ar --out out/ar",                                # abbreviations argparse accepts
])
def test_a_requeued_job_resumes_whatever_form_its_arguments_take(tmp_path, monkeypatch, args):
    """train.py's own parser reads every form of --model and --out-dir (and the default out/<model>): the
    requeued job finds the preempted run's checkpoint and adds --resume once, never starting over it."""
    args = args.split()
    monkeypatch.setattr(slurm, "ROOT", str(tmp_path))
    assert slurm.command(args, JOB)[-len(args):] == args
    (tmp_path / "out" / "ar").mkdir(parents=True)                   # a preempted run's checkpoint
    (tmp_path / "out" / "ar" / "config.json").write_text('{"step": 500}')
    (tmp_path / "out" / "ar" / "model.safetensors").write_bytes(b"")
    assert slurm.command(args, JOB)[-len(args) - 1:] == [*args, "--resume"]
    assert slurm.command([*args, "--res"], JOB)[-1] == "--res"


@pytest.mark.parametrize("args, global_batch, tail", [
    ("--batch-size 16", 512, "--grad-accum 2"),            # --global-batch 512 = 2 nodes x 8 GPUs x 16 x 2
    ("--batch-size=8", 512, "--grad-accum 4"), ("--model=ar --batch-size 32", 512, "--grad-accum 1"),
    ("--model=ar", 512, "--grad-accum 2"),                 # train.py's default --batch-size 16
    # without --global-batch (GLOBAL_BATCH unset) a --data with a recipe in paper/reproduce.mk keeps its batch
    ("--data owt --batch-size 16", None, "--grad-accum 2"),      # 512 = 16 processes x 16 x 2
    ("--data lm1b --batch-size 32", None, "--grad-accum 1"),
    ("--data cnndm --batch-size 4", None, "--grad-accum 2"),      # 128 = 16 x 4 x 2
    ("--data=owt --batch-size 8 --grad-accum 4", None, ""),        # as given: 16 x 8 x 4 = 512
    ("--data gsm8k --batch-size 1 one-gpu", None, "--grad-accum 1"),  # the recipe: one GPU
    ("--data arith --batch-size 8", None, ""),                    # no recipe: as given
])
def test_the_global_batch_sets_grad_accum_reading_the_batch_size_in_every_form(args, global_batch, tail):
    env = ONE_GPU if "one-gpu" in args else JOB
    argv = ["--model", "ar", *args.replace("one-gpu", "").split(), "--out-dir", "/nonexistent"]
    given = {} if global_batch is None else {"global_batch": global_batch}
    assert slurm.command(argv, env, **given)[-len(argv) - len(tail.split()):] == [*argv, *tail.split()]


@pytest.mark.parametrize("args, message", [
    ("--data gsm8k --batch-size 1", "--data gsm8k's recipe (make finetune-gsm8k) trains at a global batch of "
                                    "1, not 16 processes x --batch-size 1 = 16"),
    ("--data owt --batch-size 16 --grad-accum 4", "--data owt's recipe (make train-owt) trains at a global "
     "batch of 512, not 16 processes x --batch-size 16 x --grad-accum 4 = 1024"),
    ("--data cnndm --batch-size 32", "global batch of 128, not 16 processes x --batch-size 32 = 512"),
])
def test_a_recipe_batch_that_cannot_be_kept_is_refused_naming_it(args, message):
    """Never another batch unasked: one line naming the recipe; GLOBAL_BATCH=0 (--global-batch 0) trains as
    given, GLOBAL_BATCH=N at N."""
    argv = ["--model", "ar", *args.split(), "--out-dir", "/nonexistent"]
    with pytest.raises(ValueError, match="set GLOBAL_BATCH") as e:
        slurm.command(argv, JOB)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert slurm.command(argv, JOB, global_batch=0)[-len(argv):] == argv
    if "--grad-accum" not in args:
        accum = str(32 // int(argv[-3]))                   # 16 processes x --batch-size x accum = 512
        assert slurm.command(argv, JOB, global_batch=16 * 32)[-2:] == ["--grad-accum", accum]


def test_the_recipes_global_batches_are_the_makefiles():
    """RECIPES holds what paper/reproduce.mk's training lines train at: processes x --batch-size x
    --grad-accum, read from the exact lines make runs (any NGPU)."""
    from paper import rehearse
    for ngpu in ("1", "4"):
        for target in ("finetune-gsm8k", "train-cnndm", "train-owt", "train-lm1b"):
            argv = [a for a in rehearse.commands(target, ROOT, {"NGPU": ngpu}) if "train.py" in a][0]
            procs = int(argv[2].split("=")[1]) if argv[0] == "torchrun" else 1
            args = train.get_args(argv[argv.index("train.py") + 1:])
            assert slurm.RECIPES[args.data] == (f"make {target}", procs * args.batch_size * args.grad_accum)


AR = "-- --model ar"


@pytest.mark.parametrize("env, argv, message", [   # env: changes to JOB (None: no job)
    (None, AR, "SLURM_JOB_ID and SLURM_JOB_NODELIST not set: run this inside a SLURM job"),
    ({"SLURM_GPUS_ON_NODE": ""}, AR, "no GPU count: request GPUs"),
    ({"SLURM_JOB_NUM_NODES": ""}, AR, "SLURM_JOB_NUM_NODES (or SLURM_NNODES) not set"),
    ({"SLURM_JOB_NUM_NODES": "two"}, AR, "SLURM_JOB_NUM_NODES='two' is not a node count"),
    ({"SLURM_JOB_NODELIST": "gpu[01-"}, AR, "is not a SLURM host list"),
    ({"SLURM_JOB_NODELIST": "node[]"}, AR, "'node[]' is not a SLURM host list"),
    ({"SLURM_JOB_NODELIST": "node[5-2]"}, AR, "has a range that is not numbers"),
    ({"SLURM_JOB_NODELIST": "node[1-100000000]"}, AR,
     "SLURM_JOB_NODELIST='node[1-100000000]' names 100000000 hosts, but SLURM_JOB_NUM_NODES=2"),
    ({}, "--gpus-per-node -1 " + AR, "--gpus-per-node must be 1 or more (0 = SLURM's GPU count), got -1"),
    ({}, "--port 99999 " + AR, "--port must be a TCP port, 1 to 65535, got 99999"),
    ({}, "--global-batch -512 " + AR, "--global-batch must be a positive number of sequences (0 = off: "
                                      "--grad-accum as given), got -512"),
    ({}, "--global-batch 100 -- --model ar --batch-size 16",
     "--global-batch 100 is not a multiple of 16 processes x --batch-size 16"),
    ({}, "--global-batch 512 -- --model=ar --grad-accum=3", "--global-batch sets --grad-accum: leave "
                                                            "--grad-accum out"),
    ({}, AR + " --batch-szie 8", "train.py's arguments: unrecognized arguments: --batch-szie"),
    ({}, "", "give train.py's arguments after --"),
    ({}, AR + " --data owt --batch-size 0", "train.py's arguments: --batch-size must be at least 1, got 0"),
    ({}, AR + " --data owt --grad-accum 0", "train.py's arguments: --grad-accum must be at least 1, got 0"),
    ({}, AR + " --data gsm8k --batch-size 1",
     "--data gsm8k's recipe (make finetune-gsm8k) trains at a global batch of 1, not 16 processes"),
])
def test_bad_input_is_one_line(monkeypatch, env, argv, message):
    slurm_env(monkeypatch, {} if env is None else {**JOB, **env})
    start = time.perf_counter()
    assert message in error_of(slurm.main, ["--dry-run", *argv.split()])
    assert time.perf_counter() - start < 2                      # a host list of any length reads at once


def stand_in(folder, name, script):
    """An executable shell script folder/name (a stand-in for srun or torchrun that records how it ran)."""
    (folder / name).write_text("#!/bin/sh\n" + script)
    (folder / name).chmod(0o755)


@pytest.mark.parametrize("global_batch, flags", [("256", ["--global-batch", "256"]), (None, [])])
def test_the_sbatch_template_runs_one_launcher_per_node(tmp_path, global_batch, flags):
    """train.sbatch with a stand-in srun: one task per node, requeue on, the launcher given train.py's
    arguments unchanged, and GLOBAL_BATCH when set; unset, none: the launcher keeps the recipe's (no default
    of another recipe's 512)."""
    text = open(os.path.join(ROOT, "cluster", "train.sbatch")).read().splitlines()
    assert "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --requeue" in text
    stand_in(tmp_path, "srun", 'printf "%s\\n" "$@" > "$RECORD"\n')
    env = {k: v for k, v in os.environ.items() if k != "GLOBAL_BATCH"}
    env.update(PATH=f"{tmp_path}:{os.environ['PATH']}", RECORD=str(tmp_path / "args"), SLURM_SUBMIT_DIR=ROOT,
               SLURM_CPUS_PER_TASK="32", **({"GLOBAL_BATCH": global_batch} if global_batch else {}))
    subprocess.run(["bash", os.path.join(ROOT, "cluster", "train.sbatch"), "--model", "ar", "--lr", "3e-4"],
                   env=env, check=True, timeout=30)
    assert (tmp_path / "args").read_text().split("\n")[:-1] == [
        "--cpus-per-task=32", "--kill-on-bad-exit=1", "python", "cluster/slurm.py", *flags,
        "--", "--model", "ar", "--lr", "3e-4"]


def test_without_dry_run_the_launcher_execs_torchrun_from_the_repository_root(tmp_path):
    """A stand-in torchrun records its working folder and arguments: the launcher replaces itself with it."""
    stand_in(tmp_path, "torchrun", 'pwd > "$RECORD"\nprintf "%s\\n" "$@" >> "$RECORD"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(JOB, PATH=f"{tmp_path}:{os.environ['PATH']}", RECORD=str(tmp_path / "args"))
    subprocess.run([sys.executable, os.path.join(ROOT, "cluster", "slurm.py"), "--", "--model", "ar",
                    "--out-dir", str(tmp_path / "none")], env=env, cwd=tmp_path, check=True, timeout=60)
    where, *args = (tmp_path / "args").read_text().split("\n")[:-1]
    assert os.path.realpath(where) == os.path.realpath(ROOT)
    assert args == ["--nnodes", "2", "--nproc-per-node", "8", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                    "gpu07:29500", "--rdzv-id", "4242", "train.py", "--model", "ar", "--out-dir",
                    str(tmp_path / "none")]
