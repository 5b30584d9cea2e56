"""The prepared GPU check, `make gpu-check`: <= 8 minutes on one H100-class GPU, nothing downloaded.

    python -m bench.gpu_check                              # make gpu-check: writes results/gpu.md
    python -m bench.gpu_check --dry-run   # the same driver on the CPU, tiny shapes (seconds): its report in
                                          # out/gpu-dry-run.md, never results/gpu.md

Two subprocesses, whose exact commands results/gpu.md prints above their numbers, within one time budget
(--budget seconds, default 480):
1. python -m pytest -v tests/test_gpu.py (at most --test-time seconds): each test's outcome and seconds;
2. python -m bench.bench_gpu --parts decode,train with the seconds left: decode tokens/s per method at
   Qwen3-1.7B's shape (random bf16 weights), batch 1 and 8, eager and compiled (eval.py --compile on CUDA:
   static shapes, torch.compile, CUDA graphs), beside the paper's H100 tokens/s; then training tokens/s and
   MFU at GSM8K's shape, for which decoding leaves --train-reserve seconds. A decode case that would pass its
   share of the budget (compiles are slow) is skipped and listed.
A subprocess past its time is killed with the processes it started; gpu.md is rewritten after each, so a run
cut short keeps what it measured, and the benchmark's JSON (every number, the failures' tracebacks) lies
beside it (gpu-bench.json). --dry-run runs all of it on the CPU with CUDA hidden (the tests skip, the
benchmarks time a tiny model): the check of this driver that tests/test_bench_gpu.py runs.
"""
import argparse
import datetime
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

import torch

from bench.bench_gpu import decode_table, train_table
from common.checkpoint import json_load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = ["-m", "pytest", "-n", "0", "-v", "-p", "no:cacheprovider", "-rfE", "--durations=0",
         "--durations-min=0", "tests/test_gpu.py"]                  # -n 0: one process (pytest.ini's is 2)
BENCH = ["-m", "bench.bench_gpu", "--parts", "decode,train", "--modes", "eager,cudagraphs", "--batch", "1,8",
         "--repeats", "2", "--train-batch", "8", "--train-steps", "3", "--train-compile"]
DRY = ["-m", "bench.bench_gpu", "--parts", "decode,train", "--device", "cpu", "--tiny", "--new-tokens", "3",
       "--prompt", "4", "--repeats", "1", "--dtype", "float32", "--modes", "eager", "--batch", "1,2",
       "--train-len", "32", "--train-prompt", "8", "--train-answer", "12", "--train-batch", "2",
       "--train-steps", "1"]


def run(cmd: list, timeout: float, env: dict) -> dict:
    """cmd from the repository root, its output streamed here and kept; past `timeout` seconds its process
    group (it and the processes it started) is killed. {rc (None: killed), output, seconds}."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines = []

    def pump():
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None
    reader.join(10)
    return {"rc": rc, "output": "".join(lines), "seconds": time.perf_counter() - t0}


def pytest_results(output: str) -> dict:
    """From `pytest -v -rfE --durations=0` output: {tests: [(id, outcome, seconds)], counts, failures:
    [line]}."""
    outcomes = dict(re.findall(r"^(tests/\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)", output, re.M))
    seconds = {}
    for sec, test in re.findall(r"^([\d.]+)s (?:setup|call|teardown)\s+(\S+)", output, re.M):
        seconds[test] = seconds.get(test, 0.0) + float(sec)
    tail = [line for line in output.splitlines() if line.startswith("=") and " in " in line][-1:]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)",
                                                 tail[0])} if tail else {}
    failures = [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return {"tests": [(t, o, seconds.get(t)) for t, o in outcomes.items()], "counts": counts,
            "failures": failures}


def environment() -> dict:
    """GPU, driver, torch, CUDA, cuDNN, Python and the commit this check ran at."""
    def out(cmd):
        try:
            return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    cuda = torch.cuda.is_available()
    dirty = " + uncommitted changes" if out(["git", "status", "--porcelain", "--untracked-files=no"]) else ""
    return {"gpu": torch.cuda.get_device_name(0) if cuda else "none (CPU)",
            "gpus": torch.cuda.device_count() if cuda else 0,
            "driver": out(["nvidia-smi", "--query-gpu=driver_version",
                           "--format=csv,noheader"]).split("\n")[0],
            "torch": torch.__version__, "cuda": torch.version.cuda or "none",
            "cudnn": torch.backends.cudnn.version(),
            "python": platform.python_version(),
            "commit": (out(["git", "rev-parse", "--short", "HEAD"]) or "?") + dirty,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def command(argv: list) -> str:
    return "python " + " ".join(shlex.quote(a) for a in argv)


def shown(path: str) -> str:
    """A path relative to the repository root when it lies inside it."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def status(phase: dict) -> str:
    if "seconds" not in phase:
        return "not run: no time left"
    if phase["rc"] is None:
        return f"killed after {phase['seconds']:.0f} s, past its time; what it measured before is kept"
    return f"{phase['seconds']:.0f} s" + (f", exit status {phase['rc']}" if phase["rc"] else "")


def render_tests(phase: dict) -> list:
    r = pytest_results(phase.get("output", ""))
    counts = ", ".join(f"{n} {k}" for k, n in r["counts"].items()) or "no summary"
    lines = [f"## Tests: {counts}", "", f"`{phase['command']}` ({status(phase)})", ""]
    if r["tests"]:
        lines += ["| test | outcome | seconds |", "|---|---|---|"]
        lines += [f"| `{t.split('::', 1)[1]}` | {o} | " + (f"{s:.1f} |" if s is not None else "|")
                  for t, o, s in r["tests"]]
    if r["failures"]:
        lines += ["", "Failures (the whole output: rerun the command):", ""] + [f"- {f[:400]}"
                                                                                 for f in r["failures"]]
    return lines


TITLES = {"decode": "Decode tokens/s at Qwen3-1.7B's shape (random bf16 weights, 150-token prompt, 128 new "
                    "tokens, greedy, diffusion methods at tau 0.9; cudagraphs = eval.py --compile on CUDA)",
          "train": "Training tokens/s and MFU at GSM8K's shape (Qwen3-1.7B's shape, rows of 1024: a "
                   "150-token prompt, a 250-token answer, padding; bf16 autocast, FlexAttention, AdamW)"}


def render_bench(phase: dict, part: str) -> list:
    if "command" not in phase:
        return [f"## {TITLES[part]}", "", "Not run yet."]
    lines = [f"## {TITLES[part]}", "", f"`{phase['command']}` ({status(phase)})", ""]
    res = phase.get("result")
    if not res:
        return lines + ["No results (see the command's output)."]
    if part == "decode":
        lines += [decode_table(res["decode"]), "", "Set Diffusion ms/step / AR ms/step: "
                  + ", ".join(f"{k}: {v:.2f}" for k, v in res["sd_over_ar"].items()) + ".",
                  "Compiled graphs (one per method expected; in brackets CUDA-graph skips, 0 expected): "
                  + ", ".join(f"{m}: {g['graphs']} ({g['cudagraph_skips']})"
                              for m, g in res["graphs"].items()) + "."]
    else:
        peak = res.get("train_peak_flops")
        lines += [train_table(res["train"]), "",
                  f"{res.get('train_params', 0) / 1e9:.2f}B parameters; MFU against "
                  + (f"{peak / 1e12:.0f} TFLOP/s, the peak dense bf16" if peak
                     else "no known peak (--peak-tflops)")]
    for key, what in (("skipped", "Skipped"), ("failures", "Failed")):
        lines += [f"- {what}: {' '.join(str(c[k]) for k in ('mode', 'batch', 'method') if k in c)}: "
                  f"{c.get('reason') or c.get('error')}" for c in res.get(key, []) if c["part"] == part]
    return lines


def render(state: dict) -> str:
    e = state["env"]
    lines = ["# GPU check", "",
             f"`{state['command']}`: {e['date']}, commit {e['commit']}, {state['elapsed']:.0f} s "
             f"of a {state['budget']:.0f} s budget" + (" (dry run on the CPU at tiny shapes: no GPU numbers)"
                                                      if state["dry_run"] else "") + ".", "",
             "| GPU | driver | torch | CUDA | cuDNN | Python |", "|---|---|---|---|---|---|",
             f"| {e['gpu']} (x{e['gpus']}) | {e['driver'] or '-'} | {e['torch']} | {e['cuda']} | "
             f"{e['cudnn']} | {e['python']} |", ""]
    lines += render_tests(state["tests"]) + [""]
    for part in ("decode", "train"):
        lines += render_bench(state["bench"], part) + [""]
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="the markdown results file, the JSON beside it (default results/gpu.md; "
                   "with --dry-run out/gpu-dry-run.md, so a dry run never replaces a GPU run's report)")
    p.add_argument("--budget", type=float, default=480, help="seconds for the whole check")
    p.add_argument("--test-time", type=float, default=270, help="seconds the tests may take at most")
    p.add_argument("--train-reserve", type=float, default=150, help="seconds decoding leaves to training")
    p.add_argument("--dry-run", action="store_true",
                   help="on the CPU (CUDA hidden), tiny shapes: checks this driver")
    args = p.parse_args(argv)
    args.out = args.out or ("out/gpu-dry-run.md" if args.dry_run else "results/gpu.md")
    start, out_dir = time.perf_counter(), os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"} | ({"CUDA_VISIBLE_DEVICES": ""} if args.dry_run else {})
    state = {"command": command(["-m", "bench.gpu_check", *(sys.argv[1:] if argv is None else argv)]),
             "env": environment(), "budget": args.budget, "dry_run": args.dry_run, "elapsed": 0.0,
             "tests": {"command": command(TESTS)}, "bench": {}}
    left = lambda: args.budget - (time.perf_counter() - start)          # noqa: E731

    def write():
        state["elapsed"] = time.perf_counter() - start
        with open(args.out, "w") as f:
            f.write(render(state))

    state["tests"] |= run([sys.executable, *TESTS], min(args.test_time, left() - args.train_reserve), env)
    write()
    path = os.path.join(out_dir, "gpu-bench.json")
    bench_budget = max(left() - 20, 0)
    reserve = min(args.train_reserve, bench_budget / 2)          # a short --budget: decoding keeps half of it
    cmd = (DRY if args.dry_run else BENCH) + ["--budget", f"{bench_budget:.0f}", "--train-reserve",
                                              f"{reserve:.0f}", "--json", shown(path)]
    state["bench"] = {"command": command(cmd)}
    if left() > 30:
        if os.path.exists(path):
            os.remove(path)
        state["bench"] |= run([sys.executable, *cmd], left(), env)
        if os.path.exists(path):
            with open(path) as f:
                state["bench"]["result"] = json_load(f)
    write()
    print(f"\nwrote {args.out} ({state['elapsed']:.0f} s)")
    return state


if __name__ == "__main__":
    main()
