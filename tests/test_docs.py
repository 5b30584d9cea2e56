"""The README and docs/ against the tree: the reading order's line counts are `wc -l`, every relative link
and #anchor resolves, every cited file and test exists, the README keeps CI's command and stays short."""
import os
import re

import pytest

from helpers import ROOT

DOCS = ["README.md", "tests/README.md"] + sorted(f"docs/{f}" for f in os.listdir(os.path.join(ROOT, "docs"))
                                                 if f.endswith(".md"))
OFFICIAL = {"robust_mauve_bootstrap.py", "harness_eval.py"}     # files of the official code the docs cite


def read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def test_readme_line_counts_are_wc_l_and_it_keeps_ci_test_command():
    """A reading-order row's count is the file's newline count; the README is at most 200 lines, runs
    .ci/run's `python -m pytest -q`, keeps its decoding picture within its first 50 lines, and every time it
    gives says the cores it was measured on (2 idle cores: a shared machine is slower)."""
    rows = {path: int(n) for path, n in re.findall(r"^\| `([\w/.]+\.py)` \| (\d+) \|", read("README.md"),
                                                   re.M)}
    assert {"model.py", "ar.py", "mdlm.py", "bd3lm.py", "setdiffusion.py"} <= set(rows)
    wrong = {path: (n, read(path).count("\n")) for path, n in rows.items() if n != read(path).count("\n")}
    assert not wrong, f"README reading order (stated, wc -l): {wrong}"
    text = read("README.md")
    assert text.count("\n") <= 200 and "<!-- decoding picture -->" in text.split("\n")[:50]
    for block in re.split(r"\n\s*\n", text):                # a paragraph, or a line of a code block
        for part in block.split("\n") if block.startswith("```") else [block]:
            if re.search(r"\b\d+ s\b|\bmin\b|\bminutes?\b", part):
                assert "2 idle cores" in " ".join(part.split()), part
    assert re.search(r"^python -m pytest -q$", text, re.M) and re.search(r"^python -m pytest -q$",
                                                                          read(".ci/run"), re.M)


def anchors(markdown: str) -> set:
    """GitHub's heading anchors: lower case, punctuation dropped (- and _ kept), spaces to hyphens; a repeated
    heading gets -1, -2, ..."""
    out, seen = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", re.sub(r"```.*?```", "", markdown, flags=re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_links_anchors_and_cited_python_files_resolve(doc):
    """A `name.py` in backticks is a path from the root, the doc's folder or tests/ (a bare name must be at
    the root, so a file that moved is caught)."""
    text, bad = read(doc), []
    for target in re.findall(r"\]\(([^)\s]+)\)|<img src=\"([^\"]+)\"", text):
        target = target[0] or target[1]
        if re.match(r"[a-z]+:", target):                                    # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), path or os.path.basename(doc)))
        if not os.path.exists(full) or anchor and full.endswith(".md") and \
                anchor not in anchors(open(full, encoding="utf-8").read()):
            bad.append(target)
    assert not bad, f"{doc}: links that lead nowhere: {bad}"
    missing = [path for path in set(re.findall(r"`([\w./-]+\.py)\b", text)) if path not in OFFICIAL
               and not any(
        os.path.isfile(os.path.join(ROOT, p)) for p in (path, os.path.join(os.path.dirname(doc), path),
                                                         os.path.join("tests", path)))]
    assert not missing, f"{doc} cites files that are not there: {sorted(missing)}"


def test_cited_tests_exist_and_anchor_slugs_follow_github():
    text = "## Quick start: `make demo`\n## How far right can Set Diffusion see: `make smax`\n# A\n# A"
    assert anchors(text) == {"quick-start-make-demo", "how-far-right-can-set-diffusion-see-make-smax", "a",
                             "a-1"}
    defined = set()
    for path in ["test_all.py"] + [f"tests/{f}" for f in os.listdir(os.path.join(ROOT, "tests"))
                                   if f.startswith("test_") and f.endswith(".py")]:
        defined |= set(re.findall(r"^def (test_\w+)", read(path), re.M))
    cited = {name for doc in DOCS for name in re.findall(r"`(test_\w+)(?:\[[^\]]*\])?`", read(doc))}
    assert cited and not cited - defined, f"tests the docs name that do not exist: {sorted(cited - defined)}"
