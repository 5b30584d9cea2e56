"""The lock (lock/, `make lock`) against requirements*.txt: every requirement pinned at a version it allows,
no pin the requirements no longer ask for, every pin hashed; the tiers and the two torch builds at the same
versions. CI installs from the lock (.ci/run), so a requirement changed without `make lock` fails here. A lock
file missing is one line from make install."""
import os
import re
import shutil
import subprocess

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from helpers import ROOT

LOCKS = {   # lock/<file>: the requirement files make lock compiles into it
    "cpu.txt": ["requirements.txt"], "cuda.txt": ["requirements.txt"],
    "cpu-extras.txt": ["requirements.txt", "requirements-extras.txt"],
    "cuda-extras.txt": ["requirements.txt", "requirements-extras.txt"],
    "cpu-test.txt": ["requirements.txt", "requirements-test.txt"],
    "cuda-test.txt": ["requirements.txt", "requirements-test.txt"],
    "test-nodeps.txt": ["requirements-test-nodeps.txt"]}
GPU_ONLY = re.compile(r"nvidia-.*|cuda-.*|triton")         # PyPI's Linux torch needs them; the CPU wheel not


def requirements(name: str) -> dict[str, Requirement]:
    """A requirements file's requirements by canonical name, its -r includes followed."""
    found = {}
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        for line in f:
            line = re.sub(r"(^|\s)#.*", "", line).strip()
            if line.startswith("-r "):
                found.update(requirements(line[3:].strip()))
            elif line:
                req = Requirement(line)
                found[canonicalize_name(req.name)] = req
    return found


def pins(name: str) -> dict[str, list[dict]]:
    """A uv lock file's pins by canonical name: each {version, marker, hashes, via} (one per marker)."""
    found, pin = {}, None
    with open(os.path.join(ROOT, "lock", name), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?: ; ([^\\]+?))? \\$", line.rstrip("\n"))
            if m:
                pin = {"version": m[2], "marker": m[3], "hashes": [], "via": []}
                found.setdefault(canonicalize_name(m[1]), []).append(pin)
            elif line.strip().startswith("--hash=sha256:"):
                pin["hashes"].append(line.split(":", 1)[1].strip(" \\\n"))
            elif line.strip().startswith("# via"):
                pin["via"] = [v.strip() for v in line.strip()[len("# via"):].split(",")]
    return found


@pytest.mark.parametrize("lock", LOCKS)
def test_every_requirement_is_pinned_at_a_version_it_allows_and_every_pin_is_hashed(lock):
    """Each requirement of the lock's files is pinned (every marker's pin) at a version its specifier
    allows; the pins uv marks as asked for (via -r FILE) are exactly the requirements; each pin carries a
    sha256 of 64 hex digits."""
    wanted = {}
    for name in LOCKS[lock]:
        wanted.update(requirements(name))
    locked = pins(lock)
    for name, req in wanted.items():
        assert name in locked, f"{req} is not in lock/{lock}: run make lock"
        for pin in locked[name]:
            assert req.specifier.contains(pin["version"], prereleases=True), \
                f"lock/{lock} pins {name}=={pin['version']}, requirements ask {req}: run make lock"
    direct = {name for name, found in locked.items() for pin in found if any(v.startswith("-r ")
                                                                             for v in pin["via"])}
    assert direct == set(wanted), f"lock/{lock} pins what requirements*.txt no longer ask: run make lock"
    for name, found in locked.items():
        assert all(p["hashes"] and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in p["hashes"])
                   for p in found), f"lock/{lock}: {name} has no sha256"


def test_the_tiers_and_the_two_torch_builds_pin_the_same_versions():
    """Each build's runtime pins are its extras' and its test lock's; the CPU build (torch ...+cpu) and PyPI's
    (plain torch, with its CUDA libraries) agree on every other package."""
    for build in ("cpu", "cuda"):
        test = pins(f"{build}-test.txt")
        for tier in (f"{build}.txt", f"{build}-extras.txt"):
            for name, found in pins(tier).items():
                assert {p["version"] for p in found} <= {p["version"] for p in test[name]}, \
                    f"lock/{tier}: {name}"                   # (markers may differ: who needs it where)
    cpu, cuda = pins("cpu-test.txt"), pins("cuda-test.txt")
    assert len(cpu["torch"]) == len(cuda["torch"]) == 1
    assert cpu["torch"][0]["version"] == cuda["torch"][0]["version"] + "+cpu"
    assert not [n for n in cpu if GPU_ONLY.fullmatch(n)] and any(GPU_ONLY.fullmatch(n) for n in cuda)
    others = {n for n in cuda if n != "torch" and not GPU_ONLY.fullmatch(n)}
    assert others == set(cpu) - {"torch"}
    assert all([p["version"] for p in cpu[n]] == [p["version"] for p in cuda[n]] for n in others)


@pytest.mark.parametrize("target, torch, missing", [
    ("install", "cpu", "cpu.txt"), ("install", "cuda", "cuda.txt"), ("install-extras", "cpu", "cpu.txt"),
    ("install-extras", "cuda", "cuda-extras.txt"), ("install-test", "cpu", "test-nodeps.txt")])
def test_make_install_without_its_lock_file_is_one_line(tmp_path, target, torch, missing):
    """A lock file gone (a partial copy of the tree): one line naming it and how to get it back, before pip
    reads it (pip's own error, then a hint about wheels and platforms, was beside the point)."""
    shutil.copytree(os.path.join(ROOT, "lock"), tmp_path / "lock")
    (tmp_path / "paper").mkdir()
    for name in ("Makefile", "paper/reproduce.mk"):
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    (tmp_path / "lock" / missing).unlink()
    proc = subprocess.run(["make", "-s", "-C", str(tmp_path), target, f"TORCH={torch}", "PY=false"],
                          capture_output=True, text=True, timeout=60)
    assert proc.stderr.splitlines()[0] == (f"error: lock/{missing} is missing: git checkout lock/ restores "
                                           f"the lock, make lock writes it again")
