"""The house rules a machine can check: every tracked Python line within 110 columns (characters); every JSON
the project writes is standard (no Infinity or NaN token)."""
import os
import re
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


def test_every_json_the_project_writes_is_standard():
    """Every json.dump / json.dumps outside tests/ goes through common/checkpoint.py's json_dump (tau = inf as
    "inf") or refuses non-finite numbers (allow_nan=False): no Infinity or NaN token in a file we write."""
    loose = []
    for path in python_files():
        if path.startswith("tests/") or path == "common/checkpoint.py":
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r"\bjson\.dumps?\(", text):
            call = text[m.end():text.find("\n\n", m.end())]
            depth, end = 1, 0
            while depth and end < len(call):
                depth += {"(": 1, ")": -1}.get(call[end], 0)
                end += 1
            if "allow_nan=False" not in call[:end]:
                loose.append(f"{path}:{text.count(chr(10), 0, m.start()) + 1}")
    assert not loose, f"json written without common/checkpoint.py or allow_nan=False: {loose}"
