"""The README and docs/ against the tree they describe: the reading order's line counts are `wc -l` of each
file, every relative link and #anchor resolves, every file path and test name they cite exists, and the README
keeps CI's test command and stays a five-minute read. python -m pytest -q tests/test_docs.py"""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "tests/README.md"] + sorted(f"docs/{f}" for f in os.listdir(os.path.join(ROOT, "docs"))
                                                 if f.endswith(".md"))
OFFICIAL = {"robust_mauve_bootstrap.py", "harness_eval.py"}     # files of the official code the docs cite


def read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def wc_l(path: str) -> int:
    """`wc -l`: the number of newline characters."""
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read().count(b"\n")


def reading_order() -> dict:
    """The README's reading-order rows: file -> the line count it states."""
    rows = re.findall(r"^\| `([\w/.]+\.py)` \| (\d+) \|", read("README.md"), re.M)
    return {path: int(n) for path, n in rows}


def test_readme_line_counts_are_wc_l_of_each_file():
    rows = reading_order()
    assert {"model.py", "ar.py", "mdlm.py", "bd3lm.py", "setdiffusion.py"} <= set(rows)
    wrong = {path: (n, wc_l(path)) for path, n in rows.items() if n != wc_l(path)}
    assert not wrong, f"README reading order (stated, wc -l): {wrong}"


def test_readme_is_a_five_minute_read_and_keeps_ci_test_command():
    text = read("README.md")
    assert text.count("\n") <= 200
    assert re.search(r"^python -m pytest -q$", text, re.M)                  # the line .ci/run runs
    assert re.search(r"^python -m pytest -q$", read(".ci/run"), re.M)
    assert "<!-- decoding picture -->" in text


def anchors(markdown: str) -> set:
    """GitHub's heading anchors: lower case, punctuation dropped (hyphens and underscores kept), spaces to
    hyphens; a repeated heading gets -1, -2, ..."""
    out, seen = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", re.sub(r"```.*?```", "", markdown, flags=re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def test_anchor_slugs_follow_github():
    assert anchors("## Quick start: `make demo`\n## How far right can Set Diffusion see: `make smax`\n"
                   "# A\n# A") \
        == {"quick-start-make-demo", "how-far-right-can-set-diffusion-see-make-smax", "a", "a-1"}


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_and_anchors_resolve(doc):
    text = read(doc)
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)|<img src=\"([^\"]+)\"", text):
        target = target[0] or target[1]
        if re.match(r"[a-z]+:", target):                                    # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), path)) if path \
            else os.path.join(ROOT, doc)
        if not os.path.exists(full):
            bad.append(target)
        elif anchor and full.endswith(".md") and anchor not in anchors(open(full, encoding="utf-8").read()):
            bad.append(target)
    assert not bad, f"{doc}: links that lead nowhere: {bad}"


@pytest.mark.parametrize("doc", DOCS)
def test_cited_python_files_exist(doc):
    """A `name.py` in backticks is a path from the repository root (or from the doc's folder, or tests/ for a
    test file); a bare name must be at the root, so a file that moved (checkpoint.py to common/) is caught."""
    missing = []
    for path in set(re.findall(r"`([\w./-]+\.py)\b", read(doc))):
        places = [path, os.path.join(os.path.dirname(doc), path), os.path.join("tests", path)]
        if path not in OFFICIAL and not any(os.path.isfile(os.path.join(ROOT, p)) for p in places):
            missing.append(path)
    assert not missing, f"{doc} cites files that are not there: {sorted(missing)}"


def test_cited_tests_exist():
    defined = set()
    for path in ["test_all.py"] + [f"tests/{f}" for f in os.listdir(os.path.join(ROOT, "tests"))
                                   if f.startswith("test_") and f.endswith(".py")]:
        defined |= set(re.findall(r"^def (test_\w+)", read(path), re.M))
    cited = {name for doc in DOCS for name in re.findall(r"`(test_\w+)(?:\[[^\]]*\])?`", read(doc))}
    assert cited and not cited - defined, f"tests the docs name that do not exist: {sorted(cited - defined)}"
