"""What produced a result: the code, the packages and the machine. train.py's config.json (common/saving.py)
and every results file (eval.py --json, python -m paper.speed, paper.infill_curve, the benchmarks) hold
`"environment": record(device)`, and python -m paper.results prints it under each table (summary), so that two
tables made months apart can be told apart and either can be made again (docs/usage.md#reproducing-a-result).

    {"commit": "ed7a066...",      git's HEAD of this tree, None outside a git clone (or without git)
     "dirty": false,              tracked files changed since that commit, outside results/ (what runs write):
     "changed": [],               their names (the first 20), when dirty
     "python": "3.11.7", "torch": "2.13.0+cpu",
     "cuda": null,                the CUDA version torch was built with (null: a CPU build)
     "device": "cpu: AMD EPYC 7B13", "threads": 2,
     "lock": "lock/cpu-test.txt", the lock (lock/) whose every pin this Python's packages match, the largest
     "lock_sha256": "...",        tier first (test, extras, runtime), and that file's sha256;
     "lock_differs": []}          when none matches: the runtime lock of torch's build and the packages that
                                  differ from it ("numpy 2.4.5, locked 2.4.6"; the first 10)

Git is asked only about this tree's own folder: a copy of the files inside another repository records no
commit rather than that repository's. Everything but the device is read once per process.
"""
import functools
import hashlib
import os
import platform
import re
import subprocess

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))         # the tree: common/..
TIERS = ("-test", "-extras", "")                           # lock/<build><tier>.txt, the largest first


def git(*args: str) -> str | None:
    """git's output in ROOT, or None where there is no git, no repository or it fails (never raises)."""
    try:
        out = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def source() -> dict:
    """The commit, and whether (and where) the tracked files differ from it; Nones outside a git clone."""
    top = git("rev-parse", "--show-toplevel")
    commit = git("rev-parse", "HEAD")
    if top is None or commit is None or os.path.realpath(top.strip()) != os.path.realpath(ROOT):
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    changed = [line[3:] for line in (status or "").splitlines() if line.strip()]
    return {"commit": commit.strip(), "dirty": bool(changed) if status is not None else None,
            **({"changed": changed[:20]} if changed else {})}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(path: str) -> list[tuple[str, str, str]]:
    """(name, version, marker) of each pin of a lock file (uv's format: name==version ; marker \\)."""
    pins = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;([^\\]*))?", line)
            if m:
                pins.append((canonical(m[1]), m[2], (m[3] or "").strip()))
    return pins


def differences(path: str, installed: dict) -> list[str]:
    """The pins of a lock that apply here (their markers, read with packaging where it is installed) and
    that the installed packages do not match: "name installed, locked version"."""
    try:
        from packaging.markers import Marker
    except ImportError:                                   # packaging absent: the pins without a marker only
        Marker = None
    out = []
    for name, version, marker in locked(path):
        if marker and (Marker is None or not Marker(marker).evaluate()):
            continue
        if installed.get(name) != version:
            out.append(f"{name} {installed.get(name, 'absent')}, locked {version}")
    return out


def installed_versions() -> dict:
    """{canonical name: version} of the packages this Python imports (the first of a name on sys.path)."""
    from importlib import metadata
    installed = {}
    for d in metadata.distributions():
        installed.setdefault(canonical(d.metadata["Name"] or ""), d.version)
    return installed


def lock(installed: dict | None = None) -> dict:
    """The lock this Python's packages (installed: installed_versions()) match (see the module docstring)."""
    installed = installed_versions() if installed is None else installed
    builds = ("cpu", "cuda") if torch.version.cuda is None else ("cuda", "cpu")
    files = [os.path.join("lock", f"{b}{t}.txt") for b in builds for t in TIERS]
    files = [f for f in files if os.path.isfile(os.path.join(ROOT, f))]
    if not files:
        return {"lock": None}
    found = {}
    for f in files:
        found[f] = differences(os.path.join(ROOT, f), installed)
        if not found[f]:
            break
    name = f if not found[f] else os.path.join("lock", f"{builds[0]}.txt")
    with open(os.path.join(ROOT, name), "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    differs = found.get(name)
    if differs is None:
        differs = differences(os.path.join(ROOT, name), installed)
    return {"lock": name, "lock_sha256": digest, "lock_differs": differs[:10]}


@functools.lru_cache(maxsize=None)
def fixed() -> dict:
    """What stays the same for the whole process: the source, the versions and the lock."""
    return {**source(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, **lock()}


@functools.lru_cache(maxsize=None)
def device_name(device: str) -> str:
    """"cuda: NVIDIA H100 80GB HBM3", "cpu: AMD EPYC 7B13", "mps: arm64": the kind, then the model."""
    kind = torch.device(device).type
    if kind == "cuda" and torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(torch.device(device))}"
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{kind}: {model or platform.processor() or platform.machine()}"


def record(device="cpu") -> dict:
    """The environment of a result measured (or a checkpoint trained) on `device`, as the docstring shows."""
    return {**fixed(), "device": device_name(str(device)), "threads": torch.get_num_threads()}


def summary(env: dict | None) -> str:
    """One line: "commit ed7a066 (changed: eval.py), Python 3.11.7, torch 2.13.0+cpu (CPU build), cpu: AMD
    EPYC 7B13, 2 threads, lock lock/cpu-test.txt (sha256 1a2b3c4d)"; "not recorded" for None."""
    if not isinstance(env, dict):
        return "not recorded"
    commit = env.get("commit")
    parts = [f"commit {commit[:7]}" + (f" (changed: {', '.join(env.get('changed') or ['?'])})"
                                       if env.get("dirty") else "") if commit else "no git commit"]
    cuda = env.get("cuda")
    parts += [f"Python {env.get('python')}",
              f"torch {env.get('torch')} ({f'CUDA {cuda}' if cuda else 'CPU build'})",
              str(env.get("device")), f"{env.get('threads')} threads"]
    if env.get("lock"):
        differs = "; ".join(env.get("lock_differs") or [])
        parts.append(f"lock {env['lock']} (sha256 {str(env.get('lock_sha256'))[:8]}"
                     + (f"; differs: {differs}" if differs else "") + ")")
    else:
        parts.append("no lock")
    return ", ".join(parts)


def earlier(saved: dict, current: dict) -> dict:
    """A resumed run's {"earlier_environments": [...]}: the saved checkpoint's own list, then its environment
    with the step it reached ("until_step") where that differs from the current one; {} when there is none."""
    past = list(saved.get("earlier_environments") or [])
    env = saved.get("environment")
    if isinstance(env, dict) and env != current:
        past.append({**env, "until_step": saved.get("step")})
    return {"earlier_environments": past} if past else {}
