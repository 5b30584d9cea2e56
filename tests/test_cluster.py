"""cluster/slurm.py without a scheduler: SLURM's variables -> the exact torchrun command (dry run), host
lists, --grad-accum from a global batch, --resume once the run's folder holds a checkpoint (a requeued job),
train.py's arguments read by train.py's own parser in every form, bad input one line; train.sbatch and the
exec."""
import importlib.util
import os
import subprocess
import sys

import pytest

import train
from helpers import ROOT, error_of

spec = importlib.util.spec_from_file_location("slurm", os.path.join(ROOT, "cluster", "slurm.py"))
slurm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slurm)

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_NUM_NODES": "2",
       "SLURM_GPUS_ON_NODE": "8"}


@pytest.fixture
def job(monkeypatch):
    """job(env): the SLURM variables are env alone."""
    def set_env(env):
        for k in list(os.environ):
            if k.startswith("SLURM_"):
                monkeypatch.delenv(k)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
    return set_env


@pytest.mark.parametrize("spec, hosts", [
    ("gpu07", ["gpu07"]), ("gpu[01-03,07],cpu5", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]),
    ("node[8-11]", ["node8", "node9", "node10", "node11"]),
    ("r[1-2]-n[01-02]", ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]),
])
def test_hostlists_expand(spec, hosts):
    assert slurm.expand_hostlist(spec) == hosts


@pytest.mark.parametrize("env, extra, expect", [
    (JOB, [], ["--nnodes", "2", "--nproc-per-node", "8", "--rdzv-endpoint", "gpu07:29500", "--rdzv-id",
               "4242"]),
    ({**JOB, "SLURM_GPUS_ON_NODE": "", "SLURM_GPUS_PER_NODE": "h100:4", "SLURM_JOB_NUM_NODES": "",
      "SLURM_NNODES": "3", "SLURM_JOB_NODELIST": "a[3-5]"}, [],
     ["--nnodes", "3", "--nproc-per-node", "4", "--rdzv-endpoint", "a3:29500"]),
    (JOB, ["--gpus-per-node", "2", "--port", "31000"], ["--nproc-per-node", "2", "--rdzv-endpoint",
                                                        "gpu07:31000"]),
])
def test_dry_run_renders_the_exact_torchrun_command(job, capsys, env, extra, expect, tmp_path):
    job(env)
    args = ["--model", "ar", "--out-dir", str(tmp_path / "none")]
    cmd = slurm.main(["--dry-run", *extra, "--", *args])
    assert cmd[0] == "torchrun" and cmd[-len(args) - 1:] == ["train.py", *args]
    flags = dict(zip(cmd[1:-len(args) - 1:2], cmd[2:-len(args) - 1:2]))
    assert flags["--rdzv-backend"] == "c10d" and all(flags[k] == v for k, v in zip(expect[::2], expect[1::2]))
    assert capsys.readouterr().out.strip() == " ".join(cmd)


@pytest.mark.parametrize("args, accum", [
    (["--model", "ar", "--batch-size", "16"], "2"),         # 512 = 2 nodes x 8 GPUs x 16 x 2
    (["--model", "ar", "--batch-size=8"], "4"), (["--model=ar", "--batch-size", "32"], "1"),
    (["--model=ar"], "2"),                                  # train.py's default --batch-size 16
])
def test_global_batch_sets_grad_accum_whatever_form_the_batch_size_takes(args, accum):
    assert slurm.command([*args, "--out-dir", "/nonexistent"], JOB, global_batch=512)[-2:] == ["--grad-accum",
                                                                                                 accum]
    with pytest.raises(ValueError, match="not a multiple of 16 processes x --batch-size 16"):
        slurm.command(["--model", "ar", "--batch-size", "16", "--out-dir", "/nonexistent"], JOB,
                      global_batch=100)


def test_a_requeued_job_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    """No checkpoint yet: no --resume; after a 1-step run saved one: --resume, once. A relative --out-dir is
    looked up where torchrun runs train.py (the repository root), not in the launcher's working folder."""
    out = tmp_path / "run"
    args = ["--model", "ar", "--data", f"jsonl:{ROOT}/data/examples/dates.jsonl", "--n-layer", "1",
            "--n-embd",
            "32", "--n-head", "2", "--batch-size", "2", "--eval-limit", "1", "--max-new-tokens", "4",
            "--max-iters", "1", "--out-dir", str(out)]
    assert "--resume" not in slurm.command(args, JOB)
    train.main(args)
    assert slurm.command(args, JOB)[-1] == "--resume" and slurm.command([*args, "--resume"], JOB).count(
        "--resume") == 1
    assert slurm.out_dir_of(["--model", "mdlm"]) == os.path.join("out", "mdlm")
    monkeypatch.setattr(slurm, "ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path / "run")
    assert slurm.command(["--model", "ar", "--out-dir", "run"], JOB)[-1] == "--resume"
    assert "--resume" not in slurm.command(["--model", "ar", "--out-dir", "elsewhere"], JOB)


@pytest.mark.parametrize("args", [
    ["--model=ar"],                                     # the default --out-dir out/ar
    ["--model", "ar", "--data=arith", "--lr=3e-4"], ["--model=ar", "--out-dir=out/ar"],
    ["--mod", "ar", "--out", "out/ar"],                 # abbreviations argparse accepts
])
def test_a_requeued_job_resumes_whatever_form_its_arguments_take(tmp_path, monkeypatch, args):
    """Every form of --model and --out-dir, and the default out/<model>, find the preempted run's checkpoint:
    the requeued job adds --resume (once) instead of starting at step 1 over it."""
    monkeypatch.setattr(slurm, "ROOT", str(tmp_path))
    assert slurm.command(args, JOB)[-len(args):] == args
    # what train.py's --resume and the launcher look for
    (tmp_path / "out" / "ar").mkdir(parents=True)
    (tmp_path / "out" / "ar" / "config.json").write_text('{"step": 500}')
    (tmp_path / "out" / "ar" / "model.safetensors").write_bytes(b"")
    assert slurm.command(args, JOB)[-len(args) - 1:] == [*args, "--resume"]
    assert slurm.command([*args, "--res"], JOB)[-1] == "--res"


@pytest.mark.parametrize("env, argv, message", [
    ({}, "-- --model ar", "SLURM_JOB_ID and SLURM_JOB_NODELIST not set: run this inside a SLURM job"),
    ({"SLURM_GPUS_ON_NODE": ""}, "-- --model ar", "no GPU count: request GPUs"),
    ({"SLURM_JOB_NUM_NODES": ""}, "-- --model ar", "SLURM_JOB_NUM_NODES (or SLURM_NNODES) not set"),
    ({"SLURM_JOB_NUM_NODES": "two"}, "-- --model ar", "SLURM_JOB_NUM_NODES='two' is not a node count"),
    ({"SLURM_JOB_NODELIST": "gpu[01-"}, "-- --model ar", "is not a SLURM host list"),
    ({"SLURM_JOB_NODELIST": "node[]"}, "-- --model ar", "'node[]' is not a SLURM host list"),
    ({"SLURM_JOB_NODELIST": "node[5-2]"}, "-- --model ar", "has a range that is not numbers"),
    (JOB, "--gpus-per-node -1 -- --model ar", "--gpus-per-node must be 1 or more (0 = SLURM's GPU count), "
                                              "got -1"),
    (JOB, "--port 99999 -- --model ar", "--port must be a TCP port, 1 to 65535, got 99999"),
    (JOB, "--global-batch -512 -- --model ar", "--global-batch must be a positive number of sequences (0 = "
                                               "off: --grad-accum as given), got -512"),
    (JOB, "--global-batch 512 -- --model=ar "
          "--grad-accum=3", "--global-batch sets --grad-accum: leave --grad-accum "
                                                             "out"),
    (JOB, "-- --model ar --batch-szie 8", "train.py's arguments: unrecognized arguments: --batch-szie"),
    (JOB, "", "give train.py's arguments after --"),
])
def test_bad_input_is_one_line(job, env, argv, message):
    job(env if env in ({}, JOB) else {**JOB, **env})
    assert message in error_of(slurm.main, ["--dry-run", *argv.split()])


def test_the_sbatch_template_runs_one_launcher_per_node(tmp_path):
    """train.sbatch with a stand-in srun (recording its arguments): one task per node, requeue on, the
    launcher given the global batch and train.py's arguments unchanged."""
    lines = open(os.path.join(ROOT, "cluster", "train.sbatch")).read().splitlines()
    assert "#SBATCH --ntasks-per-node=1" in lines and "#SBATCH --requeue" in lines
    (tmp_path / "srun").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD"\n')
    (tmp_path / "srun").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "RECORD": str(tmp_path / "args"),
           "SLURM_SUBMIT_DIR": ROOT, "SLURM_CPUS_PER_TASK": "32", "GLOBAL_BATCH": "256"}
    subprocess.run(["bash", os.path.join(ROOT, "cluster", "train.sbatch"), "--model", "ar", "--lr", "3e-4"],
                   env=env, check=True, timeout=30)
    assert (tmp_path / "args").read_text().split("\n")[:-1] == [
        "--cpus-per-task=32", "--kill-on-bad-exit=1", "python", "cluster/slurm.py", "--global-batch", "256",
        "--", "--model", "ar", "--lr", "3e-4"]


def test_without_dry_run_the_launcher_execs_torchrun_from_the_repository_root(tmp_path):
    """A stand-in torchrun records its working folder and arguments: the launcher replaces itself with it."""
    (tmp_path / "torchrun").write_text('#!/bin/sh\npwd > "$RECORD"\nprintf "%s\\n" "$@" >> "$RECORD"\n')
    (tmp_path / "torchrun").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(JOB, PATH=f"{tmp_path}:{os.environ['PATH']}", RECORD=str(tmp_path / "args"))
    subprocess.run([sys.executable, os.path.join(ROOT, "cluster", "slurm.py"), "--", "--model", "ar",
                    "--out-dir", str(tmp_path / "none")], env=env, cwd=tmp_path, check=True, timeout=60)
    where, *args = (tmp_path / "args").read_text().split("\n")[:-1]
    assert os.path.realpath(where) == os.path.realpath(ROOT)
    assert args == ["--nnodes", "2", "--nproc-per-node", "8", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                    "gpu07:29500", "--rdzv-id", "4242", "train.py", "--model", "ar", "--out-dir",
                    str(tmp_path / "none")]
