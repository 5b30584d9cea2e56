"""make finetune-mini's table and figure: each method fine-tuned from one pretrained AR model (the paper's
recipe, in miniature) beside the same method trained from scratch, over seeds.

    python -m paper.finetune results/finetune.md results/finetune/*.json --logs out/finetune \
        --plot results/finetune.png

A run is named <method>-<start>-s<seed>, its start one of STARTS: `pretrained` (train.py --init-from, the
paper's fine-tuning recipe), `pretrained-samelr` (--init-from, the scratch runs' recipe) or `scratch`. It has
an eval.py --json file <run>.json (held-out accuracy and tokens per step at one threshold), optionally
<run>-nll.json (eval.py --task likelihood: the held-out NLL, AR's exact, the others' a bound), and a train.py
log <logs>/<run>.log, whose progress lines ("step N/T | loss X | ...", one every 10 steps off a terminal) give
the mean training loss of each interval. The table: per method and start, the seeds' accuracy, tokens/step,
NLL and last logged loss as mean [min, max]; on each pretrained row, what that start changes, seed by seed
(minus scratch of the same seed). The figure: one panel per method, the training loss against the fine-tuning
steps, a line per start (the seeds' mean) and its seeds' band (min to max). A run whose log stops before its
last step (step N/T with N < T: killed, or interrupted and never resumed; make finetune-mini resumes one that
saved) is not a finished run: it is left out of the means, the gains and the figure, and its row names it.
"""
import argparse
import math
import os
import re
import sys

from paper.results import (ORDER, check_outputs, finish_axes, pyplot, read_run, save_figure, spread, title,
                           write)

STARTS = ("pretrained", "pretrained-samelr", "scratch")
RUN = re.compile(r"(?P<method>[a-z0-9]+)-(?P<start>" + "|".join(sorted(STARTS, key=len, reverse=True)) +
                 r")-s(?P<seed>\d+)(?P<nll>-nll)?")
PROGRESS = re.compile(r"step (\d+)/(\d+) \| loss (\S+) \|")


def read_log(path: str) -> tuple[list[tuple[int, float]], int]:
    """(step, the mean loss of the interval ending there) of every progress line of a train.py log (a step
    logged twice, by a run and its resumption, once: the later line), and the run's last step T (its "step
    N/T"); a log that has none is a ValueError (one line)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            found = [(int(m[1]), int(m[2]), float(m[3])) for line in f if (m := PROGRESS.match(line))]
    except OSError as e:
        raise ValueError(f"cannot read the training log {path}: {e.strerror or e}") from None
    if not found:
        raise ValueError(f"{path} has no progress line (step N/T | loss X | ...): not the log of a train.py "
                         f"run written to a file")
    return sorted({step: loss for step, _, loss in found}.items()), found[-1][1]


def gather(paths: list[str], logs: str) -> dict:
    """(method, start) -> {seed: the run's eval.py --json dict, with its held-out NLL as "nll" where its
    likelihood file is given, and its loss curve as "curve"}. A likelihood file without its accuracy file is
    refused (one line)."""
    runs, nlls = {}, {}
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        m = RUN.fullmatch(name)
        if m is None:
            raise ValueError(f"{path}: not named <method>-<{'|'.join(STARTS)}>-s<seed>[-nll].json as make "
                             f"finetune-mini names its runs")
        key = (m["method"], m["start"]), int(m["seed"])
        if m["nll"]:
            nlls[key] = (path, read_run(path, ("nll",))["nll"])
            continue
        run = read_run(path, ("accuracy", "tokens_per_step", "model", "threshold"))
        run["curve"], run["total"] = read_log(os.path.join(logs, name + ".log"))
        runs.setdefault(key[0], {})[key[1]] = run
    for (group, seed), (path, nll) in nlls.items():
        if seed not in runs.get(group, {}):
            raise ValueError(f"{path}: no accuracy file of that run ({path.removesuffix('-nll.json')}.json) "
                             f"is given")
        runs[group][seed]["nll"] = nll
    return runs


def methods_of(runs: dict) -> list[str]:
    return sorted({m for m, _ in runs}, key=lambda m: ORDER.index(m) if m in ORDER else len(ORDER))


def finished(seeds: dict) -> dict:
    """The runs of a start that reached their last step (a log whose last progress line is step T/T)."""
    return {s: r for s, r in seeds.items() if r["curve"][-1][0] >= r["total"]}


def stopped(seeds: dict) -> str:
    """The runs of a start that stopped early: "s3 at step 410/800", comma-separated; "" if none."""
    return ", ".join(f"s{s} at step {r['curve'][-1][0]}/{r['total']}" for s, r in sorted(seeds.items())
                     if s not in finished(seeds))


def gain(runs: dict, method: str, start: str, key: str, scale: float) -> str:
    """A pretrained start minus scratch of one metric, seed by seed (the finished seeds both have): mean [min,
    max]."""
    a, b = finished(runs.get((method, start), {})), finished(runs.get((method, "scratch"), {}))
    diffs = [{key: scale * (a[s][key] - b[s][key])} for s in sorted(set(a) & set(b))]
    return spread(diffs, key, "+.1f") if diffs else ""


def table(runs: dict) -> str:
    """One row per method and start: its finished seeds, accuracy % and tokens/step at the runs' threshold,
    the held-out NLL, the last logged training loss; on a pretrained row, its accuracy gain over scratch in
    points, seed by seed; and, when a run stopped early, a last column naming it (left out of the rest)."""
    taus = sorted({r["threshold"] for seeds in runs.values() for r in seeds.values()})
    tau = ", ".join("∞" if math.isinf(t) else f"{t:g}" for t in taus)
    early = any(stopped(seeds) for seeds in runs.values())
    lines = [f"| method | start | seeds | accuracy % (τ = {tau}) | tokens/step | held-out NLL (nats/token) "
             "| last training loss | pretrained − scratch, accuracy points (same seed) |"
             + " stopped early (left out) |" * early, "|---" * (8 + early) + "|"]
    for method in methods_of(runs):
        for start in STARTS:
            seeds = runs.get((method, start))
            if not seeds:
                continue
            done = finished(seeds)
            rows = [{**r, "accuracy": 100 * r["accuracy"], "loss": r["curve"][-1][1]} for r in done.values()]
            lines.append(f"| {method} | {start} | {','.join(map(str, sorted(done)))} | "
                         f"{spread(rows, 'accuracy', '.1f')} | {spread(rows, 'tokens_per_step', '.2f')} | "
                         f"{spread(rows, 'nll', '.3f')} | {spread(rows, 'loss', '.3f')} | "
                         f"{gain(runs, method, start, 'accuracy', 100) if start != 'scratch' else ''} |"
                         + f" {stopped(seeds)} |" * early)
    return "\n".join(lines)


def plot(runs: dict, out_png: str):
    """One panel per method: training loss (log scale) against fine-tuning steps, per start the seeds' mean
    (line) and min-max (band), at the steps every seed logged."""
    plt = pyplot()
    methods = methods_of(runs)
    runs = {k: finished(of) for k, of in runs.items()}                 # a run that stopped early: not drawn
    seeds = {st: sorted({s for (_, start), of in runs.items() if start == st for s in of}) for st in STARTS}
    fig, axes = plt.subplots(1, len(methods), figsize=(3.2 * len(methods), 3.6), layout="constrained",
                             squeeze=False)
    for ax, method in zip(axes[0], methods):
        for i, start in enumerate(STARTS):
            curves = [dict(r["curve"]) for r in runs.get((method, start), {}).values()]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(c) for c in curves)))
            ys = [[c[s] for c in curves] for s in steps]
            ax.plot(steps, [sum(y) / len(y) for y in ys], color=f"C{i}", lw=1.2,
                    label=f"{start} (seed{'s' if len(seeds[start]) > 1 else ''} "
                          f"{', '.join(map(str, seeds[start]))})")
            ax.fill_between(steps, [min(y) for y in ys], [max(y) for y in ys], color=f"C{i}", alpha=0.25,
                            lw=0)
        ax.set_yscale("log")
        ax.set_title(method, fontsize=9)
        finish_axes(ax, "fine-tuning step", "training loss (nats, 10-step mean)" if ax is axes[0][0] else "")
    title(fig, "the shipped task: each method's training loss from the AR model pretrained on Shakespeare "
               "(pretrained: the paper's fine-tuning recipe in miniature;",
          "pretrained-samelr: the scratch runs' recipe) or from random weights (scratch)",
          "lines: the mean over a start's seeds; bands: min to max (make finetune-mini)")
    save_figure(fig, out_png)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", metavar="OUT.md", help="the markdown table to write")
    p.add_argument("runs", nargs="+", metavar="RUN.json",
                   help="eval.py --json files named <method>-<start>-s<seed>.json")
    p.add_argument("--logs", required=True, help="the folder of the runs' train.py logs, <run>.log")
    p.add_argument("--plot", default=None, help="the loss-curve figure to write (needs matplotlib)")
    args = p.parse_args(argv)
    try:
        check_outputs(args.out, args.plot, args.runs)   # before any file is written: no input written over
        runs = gather(args.runs, args.logs)
        print(write(table(runs), args.out, [r for seeds in runs.values() for r in seeds.values()]))
        if args.plot:
            plot(runs, args.plot)
    except (OSError, ValueError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
