"""Where right-determined infilling turns on, and what makes it turn on at the demo's budget (make
infill-curve, docs/results.md): train.py runs that keep their weights every few hundred steps (--keep-every),
then, at each kept step, the held-out accuracy and the right-determined `number` infill of the shipped task,
and at the last step every span kind of make infill (step, number, operand, verb).

    python -m paper.infill_curve                                    # all RUNS, seeds 1-3 (CPU: hours)
    python -m paper.infill_curve --runs b16,b32 --seeds 1 --jobs 2  # a part
    python -m paper.infill_curve --device cuda --jobs 12 --deadline 300

A run is train.py's flags (RUNS) at one seed; --out-dir/<run>-s<seed> holds its checkpoint and
--out-dir/<run>-s<seed>-step<N> its kept weights. A run whose last checkpoint is there is not trained again,
and a step already evaluated (<run>-s<seed>.json beside it) is not evaluated again. --jobs runs go side by
side, each in its own process; past --deadline seconds the unfinished ones are stopped, keeping what they
measured. Then every run's JSON is gathered into --json, a table (--md) and a plot (--plot): mean [min, max]
over the seeds. --tabulate does only that, with the JSON of runs measured elsewhere (another machine) copied
into --out-dir.
"""
import argparse
import glob
import math
import os
import shlex
import subprocess
import sys
import time

from common import cli  # first, before torch loads OpenMP (common/cli.py)
from common import checkpoint, runs

SET = "--model setdiffusion --smax 8"
DEMO, SMAX_BUDGET = "--batch-size 16 --max-iters 3000", "--batch-size 32 --max-iters 2000"
RUNS = {   # name: (train.py flags, what it is for); every run also gets --seed and COMMON
    "b16": (f"{SET} --infill 0.5 {DEMO}", "the curve at the demo's budget (3,000 steps x 16 rows)"),
    "b32": (f"{SET} --infill 0.5 {SMAX_BUDGET}", "the curve at make smax's budget (2,000 steps x 32 rows)"),
    "b16-6k": (f"{SET} --infill 0.5 --batch-size 16 --max-iters 6000", "twice the demo's steps, its batch"),
    "f1": (f"{SET} --infill 1.0 {DEMO}", "a recipe: every row in an infilling order"),
    "log": (f"{SET} --infill 0.5 --infill-len loguniform {DEMO}", "a recipe: span lengths ~ 1/n"),
    "f1-log": (f"{SET} --infill 1.0 --infill-len loguniform {DEMO}", "a recipe: every row, log-uniform span "
                                                                     "lengths"),
    "added": (f"{SET} --infill 1.0 --infill-added {DEMO}", "a recipe: every row also once more, infilling"),
    "none": (f"{SET} {DEMO}", "no --infill: the held-out accuracy the recipes must keep"),
    # make pareto's four checkpoints (its flags and budget), zero-shot: every span kind at seeds 1-3
    "ar": (f"--model ar {SMAX_BUDGET}", "make pareto's AR"),
    "mdlm": (f"--model mdlm --predict-padding {SMAX_BUDGET}", "make pareto's MDLM"),
    "bd3lm": (f"--model bd3lm --block-size 4 {SMAX_BUDGET}", "make pareto's BD3-LM"),
    "sd": (f"{SET} {SMAX_BUDGET}", "make pareto's Set Diffusion"),
}
COMMON = "--eval-limit 50 --save-every 100000"
SPANS = ("step", "number", "operand", "verb")


def flags(run: str, seed: int, out: str, keep: int, extra: str) -> list[str]:
    return shlex.split(f"{RUNS[run][0]} {COMMON} {extra} --seed {seed} --keep-every {keep} --out-dir {out}")


def kept(out: str) -> list[tuple[int, str]]:
    """(step, folder) of a run's kept weights, by step."""
    found = [(int(d.rsplit("-step", 1)[1]), d) for d in glob.glob(glob.escape(out) + "-step*")
             if d.rsplit("-step", 1)[1].isdigit() and os.path.isfile(os.path.join(d, "config.json"))]
    return sorted(found)


def evaluate(folder: str, device: str, limit: int, spans) -> dict:
    """Held-out accuracy (greedy, tau = inf) and the exact-match rate of each infill span kind of one
    checkpoint, the first `limit` test problems each (evaluate_accuracy, paper.infill.evaluate_infill)."""
    from common.checkpoint import load
    from common.metrics import evaluate_accuracy
    from data import get_task, get_tokenizer
    from paper import infill
    from sampling import PaperMode, Settings
    model, method, cfg, config = load(folder, device)
    task, tok = get_task(config["data"]), get_tokenizer(config["tokenizer"])
    examples = task.load("test")[:limit]
    settings = Settings(64, math.inf, paper=PaperMode(seq_len=config["seq_len"]))
    m = {"accuracy": evaluate_accuracy(model, method, cfg, tok, task, examples, device, settings)["accuracy"]}
    for span in spans:
        items = infill.arith_items(examples, tok, span)
        r = infill.evaluate_infill(model, method, cfg, tok, items, config, device, infill.SPAN_SCORES[span],
                                   settings)
        m[f"infill_{span}"] = r["exact"]
        if span == "verb":
            m["infill_verb_op"] = r["op_right"]
    return m


def one(run: str, seed: int, args):
    """Train one run (unless its last checkpoint is there), then evaluate each kept step not yet in its
    JSON."""
    from data.files import replaced
    cli.set_threads(args.threads)
    out = os.path.join(args.out_dir, f"{run}-s{seed}")
    cmd = [sys.executable, "train.py", *flags(run, seed, out, args.keep_every, args.train_flags),
           "--device", args.device, "--threads", str(args.threads)]
    iters = int(cmd[len(cmd) - 1 - cmd[::-1].index("--max-iters") + 1])        # the last one given wins
    if checkpoint.step_of(out) != iters:                                        # -1: none there yet
        os.makedirs(args.out_dir, exist_ok=True)
        with open(out + ".log", "a") as log:
            failed = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        if failed:
            sys.exit(f"error: {shlex.join(cmd)} failed: see {out}.log")
    path = out + ".json"
    rows = read_rows(path) if os.path.isfile(path) else []
    have = {r["step"] for r in rows}
    for step, folder in kept(out):
        if step in have:
            continue
        last = step == iters
        m = evaluate(folder, args.device, args.limit if last else args.curve_limit,
                     SPANS if last else ("number",))
        rows.append({"run": run, "seed": seed, "step": step, "flags": RUNS[run][0], "device": args.device,
                     "n": args.limit if last else args.curve_limit, **m,
                     "environment": runs.environment(args.device)})
        with replaced(path) as f:
            checkpoint.json_dump(sorted(rows, key=lambda r: r["step"]), f, indent=1)
        print(f"{run} seed {seed} step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in m.items()),
              flush=True)


def side_by_side(jobs: list[tuple[str, int]], args):
    """Each (run, seed) in its own process (python -m paper.infill_curve --one ...), --jobs at a time, in the
    order given; none starts after --start-by seconds, and past --deadline seconds the unfinished are killed.
    Returns the jobs never started."""
    start, waiting, running, skipped = time.time(), list(jobs), [], []
    base = [sys.executable, "-m", "paper.infill_curve", "--out-dir", args.out_dir, "--device", args.device,
            "--limit", str(args.limit), "--curve-limit", str(args.curve_limit), "--keep-every",
            str(args.keep_every), "--threads", str(args.threads), "--train-flags", args.train_flags]
    while waiting or running:
        late = args.deadline and time.time() - start > args.deadline
        if args.start_by and time.time() - start > args.start_by:
            waiting, skipped = [], skipped + waiting
        for p, job in list(running):
            if p.poll() is not None or late:
                if p.poll() is None:
                    p.kill()
                    print(f"stopped {job[0]} seed {job[1]} at the deadline", flush=True)
                running.remove((p, job))
        if late:
            return skipped + waiting
        while waiting and len(running) < args.jobs:
            run, seed = waiting.pop(0)
            running.append((subprocess.Popen(base + ["--one", run, str(seed)]), (run, seed)))
        time.sleep(1)
    return skipped


# ----------------------------------------------------------------------------- the table and the plot

def read_rows(path: str) -> list[dict]:
    with open(path) as f:
        return checkpoint.json_load(f)


def gather(out_dir: str) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(os.path.join(glob.escape(out_dir), "*-s*.json"))):
        rows += read_rows(path)
    return rows


def mean_range(xs) -> str:
    xs = [100 * x for x in xs]
    return f"{sum(xs) / len(xs):.1f} [{min(xs):.1f}, {max(xs):.1f}]" if len(xs) > 1 else f"{xs[0]:.1f}"


def table(rows: list[dict]) -> str:
    """One line per run and kept step: the seeds, held-out accuracy and each span's exact match, in %, as the
    mean [min, max] over the seeds measured; the last step of a run carries every span kind."""
    keys = ["accuracy", *(f"infill_{k}" for k in SPANS), "infill_verb_op"]
    lines = ["| run | flags | device | step | seeds | problems | held-out accuracy % | " + " | ".join(
        f"infill {k} %" if k != "verb_op" else "verb's operation %" for k in SPANS + ("verb_op",)) + " |",
        "|---" * (7 + len(SPANS) + 1) + "|"]
    for run in [r for r in RUNS if any(x["run"] == r for x in rows)]:
        for step in sorted({x["step"] for x in rows if x["run"] == run}):
            at = [x for x in rows if x["run"] == run and x["step"] == step]
            cells = [mean_range([x[k] for x in at if k in x]) if any(k in x for x in at) else ""
                     for k in keys]
            seeds = ",".join(str(x["seed"]) for x in sorted(at, key=lambda x: x["seed"]))
            same = lambda k: ",".join(sorted({str(x.get(k, "")) for x in at}))     # noqa: E731
            lines.append(f"| {run} | `{RUNS[run][0].replace(SET + ' ', '')}` | {same('device')} | {step} | "
                         f"{seeds} | {same('n')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def rows_per_step(run: str) -> int:
    words = RUNS[run][0].split()
    return int(words[words.index("--batch-size") + 1]) * (2 if "--infill-added" in words else 1)


def curves(rows: list[dict], runs: list[str]) -> list[str]:
    """The runs measured at more than one step: the plot's lines."""
    return [r for r in runs if len({x["step"] for x in rows if x["run"] == r}) > 1]


def plot(rows: list[dict], out_png: str, runs: list[str]):
    """Two panels against the training rows seen (steps x rows per step, an added infilling copy counted): the
    right-determined number's infill, and held-out accuracy. One line per run, the seeds' mean, with each
    seed's point. A run measured at one step only (make pareto's checkpoints, zero-shot) is a row of the
    table, not a line."""
    from paper.results import finish_axes, pyplot, save_figure
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), layout="constrained")
    seeds = sorted({x["seed"] for x in rows})
    for i, run in enumerate(curves(rows, runs)):
        steps = sorted({x["step"] for x in rows if x["run"] == run})
        own = sorted({x["seed"] for x in rows if x["run"] == run})
        label = f"{run}: {RUNS[run][1]}" + ("" if own == seeds else f" (seed {', '.join(map(str, own))})")
        seen = [s * rows_per_step(run) / 1000 for s in steps]
        for ax, key in zip(axes, ("infill_number", "accuracy")):
            ys = [[100 * x[key] for x in rows if x["run"] == run and x["step"] == s] for s in steps]
            every = max(map(len, ys))                         # a point of the line: every seed measured
            full = [(r, sum(y) / len(y)) for r, y in zip(seen, ys) if len(y) == every]
            ax.plot(*zip(*full), "-o", color=f"C{i}", ms=3, label=label)
            for r, y in zip(seen, ys):
                ax.scatter([r] * len(y), y, color=f"C{i}", s=7, alpha=0.35)
    finish_axes(axes[0], "training rows seen (thousands)", "right-determined number filled, % exact")
    finish_axes(axes[1], "training rows seen (thousands)", "held-out accuracy, % (tau = inf)")
    fig.suptitle("Set Diffusion smax 8 on the shipped task: infilling orders (--infill) against training\n"
                 f"lines: the mean over seeds {', '.join(map(str, seeds))} where every seed was measured; "
                 "dots: each seed (make infill-curve)",
                 fontsize=8)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=7)
    save_figure(fig, out_png)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default=",".join(RUNS), help="comma-separated names of RUNS")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--out-dir", default="out/infill-curve")
    p.add_argument("--device", default="cpu")
    p.add_argument("--jobs", type=int, default=1, help="runs side by side, each its own process")
    p.add_argument("--deadline", type=float, default=0, help="seconds; 0 = none")
    p.add_argument("--start-by", type=float, default=0, help="seconds after which no run starts; 0 = none")
    p.add_argument("--keep-every", type=int, default=500, help="train.py --keep-every: the curve's points")
    p.add_argument("--limit", type=int, default=500, help="test problems per evaluation at a run's last step")
    p.add_argument("--curve-limit", type=int, default=200,
                   help="test problems per evaluation at the other steps")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per run (0 = the free cores)")
    p.add_argument("--train-flags", default="",
                   help="more train.py flags for every run (e.g. --dtype float32)")
    p.add_argument("--tabulate", action="store_true", help="train and evaluate nothing: only the table and "
                   "plot of what --out-dir holds (runs measured elsewhere: copy their <run>-s<seed>.json "
                   "there)")
    p.add_argument("--one", nargs=2, metavar=("RUN", "SEED"), help=argparse.SUPPRESS)
    p.add_argument("--json", default="results/infill-curve.json")
    p.add_argument("--md", default="results/infill-curve.md")
    p.add_argument("--plot", default="results/infill-curve.png")
    args = p.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    bad = [r for r in runs if r not in RUNS]
    if bad:
        sys.exit(f"error: --runs {','.join(bad)}: the runs are {', '.join(RUNS)}")
    if args.one:
        return one(args.one[0], int(args.one[1]), args)
    seeds = [int(s) for s in args.seeds.split(",")]
    left = [] if args.tabulate else side_by_side([(r, s) for r in runs for s in seeds], args)
    from data.files import replaced
    rows = gather(args.out_dir)
    if not rows:
        sys.exit("error: nothing was measured")
    for path, text in ((args.json, checkpoint.json_dumps(rows, indent=1)), (args.md, table(rows))):
        with replaced(path) as f:
            f.write(text)
    plot(rows, args.plot, runs)
    print(table(rows) + (f"not started before the deadline: {left}\n" if left else "") + f"wrote {args.md}")


if __name__ == "__main__":
    main()
