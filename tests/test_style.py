"""The house rule a machine can check: every tracked Python line within 110 columns (characters)."""
import os
import subprocess

from helpers import ROOT

COLUMNS = 110


def python_files() -> list[str]:
    """The tracked .py files; outside a git checkout, every .py file but those in hidden folders and out/."""
    try:
        return subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, dirs, files in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "out"]
            found += [os.path.relpath(os.path.join(d, f), ROOT) for f in files if f.endswith(".py")]
        return found


def test_python_lines_fit_110_columns():
    files, long = python_files(), []
    assert "model.py" in files and "tests/test_style.py" in files
    for path in files:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            long += [f"{path}:{n}" for n, line in enumerate(f, 1) if len(line.rstrip("\n")) > COLUMNS]
    assert not long, f"lines over {COLUMNS} columns: {long[:20]}"
