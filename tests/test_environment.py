"""What produced a result (common/runs.py) and how it is written (common/checkpoint.py's standard JSON):
config.json and eval.py --json record the commit (dirty or not), Python, torch, CUDA, the device and the lock
the installed packages match; git is read without failing where there is no git or no repository; a resumed
run keeps the environments of its earlier steps; tau = inf is the string "inf" (no Infinity token), read back
as inf, and an older checkpoint's Infinity still loads."""
import hashlib
import json
import math
import platform
import shutil
import subprocess

import numpy as np
import pytest
import torch

import eval as evaluate
import train
from common import checkpoint, runs
from paper import results
from helpers import TINY

pytestmark = pytest.mark.usefixtures("train_encodes_once")   # conftest.py: one encoding of the task
HEAD = runs.git("rev-parse", "HEAD")        # None outside a git clone: no commit to record then


def strict(text: str):
    """JSON as jq or a browser's JSON.parse reads it: Infinity and NaN are refused."""
    def refuse(token):
        raise AssertionError(f"non-standard JSON: {token}")
    return json.loads(text, parse_constant=refuse)


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_a_checkpoint_and_its_results_record_their_environment(one_step, tmp_path):
    """train.py's config.json: this tree's commit, the versions, the device, a lock of lock/ with its sha256
    (and what differs from it); eval.py --json: its own environment beside the checkpoint's; both standard
    JSON with tau = inf as "inf", which the readers take as inf."""
    text = (one_step / "ar" / "config.json").read_text()
    config = strict(text)
    env = config["environment"]
    assert env["commit"] == (HEAD.strip() if HEAD else None) and isinstance(env["dirty"], (bool, type(None)))
    assert (env["python"], env["torch"], env["cuda"]) == (platform.python_version(), torch.__version__,
                                                           torch.version.cuda)
    assert env["device"].startswith("cpu: ") and env["threads"] >= 1
    assert env["lock"].startswith("lock/") and len(env["lock_sha256"]) == 64
    assert isinstance(env["lock_differs"], list)
    assert config["sampler"]["threshold"] == "inf" and "Infinity" not in text
    assert checkpoint.load(str(one_step / "ar"))[3]["sampler"]["threshold"] == math.inf
    out = tmp_path / "m.json"
    evaluate.main(["--ckpt", str(one_step / "ar"), "--limit", "2", "--max-new-tokens", "4", "--json",
                   str(out)])
    m = strict(out.read_text())
    assert m["threshold"] == "inf" and m["ckpt_environment"] == env
    results.main([str(tmp_path / "t.md"), str(out), "--pareto"])                # read back: tau = inf
    assert "\n| ar | inf | " in (tmp_path / "t.md").read_text()
    assert {k: v for k, v in m["environment"].items() if k != "threads"} == \
        {k: v for k, v in env.items() if k != "threads"}


def test_an_older_checkpoint_with_infinity_still_loads(one_step, tmp_path):
    """A config.json of an older version (`"threshold": Infinity`, no environment) loads with tau = inf, and
    eval.py's JSON says its training environment was not recorded."""
    shutil.copytree(one_step / "ar", tmp_path / "old")
    config = json.loads((one_step / "ar" / "config.json").read_text())
    del config["environment"]
    config["sampler"]["threshold"] = math.inf
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))          # Python's json: Infinity
    assert "Infinity" in (tmp_path / "old" / "config.json").read_text()
    assert checkpoint.load(str(tmp_path / "old"))[3]["sampler"]["threshold"] == math.inf
    evaluate.main(["--ckpt", str(tmp_path / "old"), "--limit", "1", "--max-new-tokens", "4", "--json",
                   str(tmp_path / "m.json")])
    m = strict((tmp_path / "m.json").read_text())
    assert m["ckpt_environment"] is None and m["threshold"] == "inf"


@pytest.mark.parametrize("where", ["no repository", "no git", "a copy inside another repository"])
def test_git_is_read_without_failing_where_there_is_none(tmp_path, monkeypatch, where):
    """No commit and no dirty flag (None) outside a git clone of this tree, and the rest recorded as ever: a
    folder that is no repository, a machine without git, these files copied into another repository."""
    tree = tmp_path / "outer" / "setdiffusion"
    tree.mkdir(parents=True)
    if where == "no git":
        git(tree, "init", "-q")
        git(tree, "commit", "-q", "--allow-empty", "-m", "x")
        monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    if where == "a copy inside another repository":
        (tree / "eval.py").write_text("")
        git(tmp_path / "outer", "init", "-q")
        git(tmp_path / "outer", "add", "-A")
        git(tmp_path / "outer", "commit", "-q", "-m", "x")
    monkeypatch.setattr(runs, "ROOT", str(tree))
    assert runs.source() == {"commit": None, "dirty": None}
    assert results.environment_summary(runs.source()).startswith("no git commit, ")


def test_dirty_names_the_changed_tracked_files_outside_results(tmp_path, monkeypatch):
    """A clone at its commit is clean; a changed results file (what runs write) or a new untracked file
    leaves it clean; a changed tracked file makes it dirty, named."""
    for name in ("eval.py", "results/pareto.md"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("a\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "x")
    monkeypatch.setattr(runs, "ROOT", str(tmp_path))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert runs.source() == {"commit": head.strip(), "dirty": False}
    (tmp_path / "results" / "pareto.md").write_text("b\n")
    (tmp_path / "notes.txt").write_text("mine\n")
    assert runs.source()["dirty"] is False
    (tmp_path / "eval.py").write_text("b\n")
    assert runs.source() == {"commit": head.strip(), "dirty": True, "changed": ["eval.py"]}
    assert "commit " + head[:7] + " (changed: eval.py)" in results.environment_summary(runs.source())


def test_the_lock_recorded_is_the_largest_one_every_installed_pin_matches(tmp_path, monkeypatch):
    """lock/<build>-test.txt, then -extras, then the runtime lock: the first whose every pin that applies
    here (its marker) is the installed version; none: the runtime lock and the pins that differ."""
    numpy, pytest_v = np.__version__, pytest.__version__
    (tmp_path / "lock").mkdir()

    def locks(test: str, runtime: str):
        (tmp_path / "lock" / "cpu-test.txt").write_text(test)
        (tmp_path / "lock" / "cpu.txt").write_text(runtime)
    monkeypatch.setattr(runs, "ROOT", str(tmp_path))
    installed = runs.installed_versions()
    elsewhere = "numpy==0.1 ; sys_platform == 'nowhere' \\\n"          # a marker that does not apply here
    locks(f"numpy=={numpy} \\\n{elsewhere}pytest=={pytest_v} \\\n", f"numpy=={numpy} \\\n")
    found = runs.lock(installed)
    assert (found["lock"], found["lock_differs"]) == ("lock/cpu-test.txt", [])
    assert found["lock_sha256"] == hashlib.sha256((tmp_path / "lock" / "cpu-test.txt").read_bytes()
                                                  ).hexdigest()
    locks(f"numpy=={numpy} \\\npytest==0.1 \\\n", f"numpy=={numpy} \\\n")
    found = runs.lock(installed)
    assert (found["lock"], found["lock_differs"]) == ("lock/cpu.txt", [])
    locks("pytest==0.1 \\\n", "numpy==0.1 \\\nnot-installed-here==1.0 \\\n")
    assert runs.lock(installed)["lock_differs"] == [f"numpy {numpy}, locked 0.1",
                                                  "not-installed-here absent, locked 1.0"]
    shutil.rmtree(tmp_path / "lock")
    assert runs.lock(installed) == {"lock": None}


def test_a_resumed_run_keeps_the_environments_of_its_earlier_steps(tmp_path, monkeypatch):
    """--resume under another commit: config.json's environment is the new one and earlier_environments
    holds the old one with the step it reached; resuming again in the same environment adds nothing."""
    out = str(tmp_path / "ck")
    train.main(["--model", "ar", *TINY, "--max-iters", "1", "--out-dir", out])
    first = checkpoint.load(out)[3]["environment"]
    fixed = runs.fixed()
    monkeypatch.setattr(runs, "fixed", lambda: {**fixed, "commit": "f" * 40, "dirty": False})
    for steps in (2, 3):
        train.main(["--model", "ar", *TINY, "--max-iters", str(steps), "--out-dir", out, "--resume"])
        config = checkpoint.load(out)[3]
        assert config["environment"]["commit"] == "f" * 40
        assert config["earlier_environments"] == [{**first, "until_step": 1}]
