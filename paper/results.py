"""Tables (and a plot) of eval.py --json files: what the Makefile's experiments write to results/.

    python -m paper.results results/likelihood-arith.md results/likelihood-arith/*.json     # one row per file
    python -m paper.results results/pareto.md results/pareto/*.json --pareto --plot results/pareto.png
    python -m paper.results results/gsm8k.md results/gsm8k/*.json --pareto --paper gsm8k
    python -m paper.results results/smax.md results/smax/*.json --sweep --plot results/smax.png
    python -m paper.results results/shakespeare.md results/shakespeare/*.json --generation \
        --plot results/shakespeare.png

`table` lists each file's metrics, one row per file (sampler settings left out); `summarize` (--pareto) merges
the accuracy and throughput files of a threshold sweep into a Pareto table, with the paper's numbers beside ours
(its plot: accuracy against tokens/step); `sweep` (--sweep) tabulates Set Diffusion's smax sweep;
`generation` (--generation) puts a corpus run's likelihood files (bits/char) and unconditional files (generative
perplexity under an AR checkpoint or a Hugging Face LM, MAUVE, entropy and speed per threshold: the paper's OWT
generation table) into two tables.
"""
import argparse
import json
import math
import os
import sys

from data import get_task
from common.metrics import markdown_table

NOT_SHOWN = ("threshold", "window", "commit_order", "stop_on_im_end", "method_config")    # sampler/method settings
ORDER = ["ar", "mdlm", "bd3lm", "setdiffusion"]                           # the methods' order in a table


def write(text: str, out_md: str) -> str:
    os.makedirs(os.path.dirname(out_md) or ".", exist_ok=True)
    with open(out_md, "w") as f:
        f.write(text + "\n")
    return text


def read_run(path: str, needs=()) -> dict:
    """One eval.py --json file as a dict; a ValueError naming the file (one line) when it cannot be read, is not
    JSON, not a JSON object, or lacks one of the keys `needs`."""
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}): pass the files eval.py --json "
                         f"wrote") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e.msg}, line {e.lineno} column {e.colno}): pass the files "
                         f"eval.py --json wrote") from None
    except RecursionError:
        raise ValueError(f"{path} is not an eval.py --json file (nested too deeply)") from None
    if not isinstance(m, dict):
        raise ValueError(f"{path} holds a JSON {type(m).__name__}, not the object eval.py --json writes")
    return check_keys(path, m, needs)


def check_keys(path: str, m: dict, keys, kind: str = "") -> dict:
    """m must hold keys; else a ValueError naming the file and the kind of run it should be (default: a throughput
    or an accuracy run, by its task)."""
    missing = [k for k in keys if k not in m]
    if missing:
        kind = kind or ("a throughput" if m.get("task") == "throughput" else "an accuracy")
        raise ValueError(f"{path} lacks {', '.join(map(repr, missing))}: not the eval.py --json file of {kind} run")
    return m


def table(paths: list[str], out_md: str) -> str:
    """One markdown row per eval.py --json file, in the given order; columns = the union of their keys."""
    runs = [read_run(p) for p in paths]
    keys = [k for k in dict.fromkeys(k for m in runs for k in m) if k not in NOT_SHOWN]
    return write(markdown_table(keys, [[m.get(k, "") for k in keys] for m in runs]), out_md)


def summarize(paths, out_md, out_png=None, paper=None):
    """Merge accuracy and throughput JSONs (one per eval.py run) into one table (and plot) of accuracy vs
    speed per checkpoint and threshold; with paper = {ckpt: {tau: (tokens/step, tokens/s, acc %)}} the paper's
    numbers stand beside ours."""
    rows = {}
    for path in paths:
        m = read_run(path, ("task", "model", "ckpt"))
        check_keys(path, m, ("tokens_per_s", "tokens_per_s_std") if m["task"] == "throughput"
                   else ("accuracy", "tokens_per_step"))
        tau = m.get("threshold", math.inf)
        if m["model"] not in ORDER or not isinstance(m["ckpt"], str) or not isinstance(tau, (int, float)):
            raise ValueError(f"{path}: model {m['model']!r}, ckpt {m['ckpt']!r}, threshold {tau!r}: not an eval.py "
                             f"--json file of an accuracy or throughput run")
        label = label_of(m["ckpt"])
        row = rows.setdefault((label, tau), {"ckpt": label, "model": m["model"], "tau": tau})
        if m["task"] == "throughput":
            row.update(tokens_per_s=m["tokens_per_s"], std=m["tokens_per_s_std"],
                       lo=m.get("tokens_per_s_min"), hi=m.get("tokens_per_s_max"))
        else:
            row.update(accuracy=m["accuracy"], tokens_per_step=m["tokens_per_step"])
    rows = sorted(rows.values(), key=lambda r: (ORDER.index(r["model"]), r["ckpt"], -r["tau"]))
    ar_speed = next((r["tokens_per_s"] for r in rows if r["model"] == "ar" and "tokens_per_s" in r), None)
    nan = float("nan")
    head = ["checkpoint", "tau", "accuracy", "tokens/step", "tokens/s (batch 1)", "speed vs AR"]
    head += ["paper: accuracy", "tokens/step", "tokens/s"] if paper else []
    body = []
    for r in rows:
        speed = r.get("tokens_per_s", nan)
        cells = [r["ckpt"], f"{r['tau']:g}", f"{r.get('accuracy', nan):.3f}", f"{r.get('tokens_per_step', nan):.2f}",
                 spread_of(r), f"{speed / ar_speed if ar_speed else nan:.2f}x"]
        if paper:
            x, tput, acc = paper.get(r["ckpt"], {}).get(r["tau"], (nan, nan, nan))
            cells += [f"{acc / 100:.3f}", f"{x:.2f}", f"{tput:.1f}"]
        body.append(cells)
    print(write(markdown_table(head, body), out_md))
    plt = pyplot() if out_png else None
    if plt:
        plot_pareto(plt, rows, out_png)


def spread_of(r: dict) -> str:
    """A throughput cell: the median round and the rounds' range (interleaved_throughput), or, for a file of
    one round, the mean ± the per-sample standard deviation."""
    nan = float("nan")
    if r.get("lo") is not None:
        return f"{r['tokens_per_s']:.1f} [{r['lo']:.1f}, {r['hi']:.1f}]"
    return f"{r.get('tokens_per_s', nan):.1f} ± {r.get('std', nan):.1f}"


def plot_pareto(plt, rows: list[dict], out_png: str):
    """Accuracy vs tokens/step (exact, unlike tokens/s), one line per checkpoint, tau at each point. A checkpoint
    whose best accuracy is more than 0.3 below the best one's (MDLM on the shipped task) gets its own panel, so
    that the y range of the main panel separates the others."""
    curves = {}
    for r in rows:
        if "accuracy" in r:
            curves.setdefault(r["ckpt"], []).append((r["tokens_per_step"], r["accuracy"], r["tau"]))
    panels = pareto_panels(curves)
    fig, axes = plt.subplots(1, len(panels), figsize=(6 + 3 * (len(panels) - 1), 4), squeeze=False,
                             gridspec_kw={"width_ratios": [2] + [1] * (len(panels) - 1)})
    colours = dict(zip(curves, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
    for k, (ax, names) in enumerate(zip(axes[0], panels)):
        ax.set_title("accuracy far below: own y scale" if k else "", fontsize=8)
        for c in names:
            xs, ys, taus = zip(*sorted(curves[c]))
            ax.plot(xs, ys, "o-", label=c, color=colours[c])
            for x, y, tau in zip(xs, ys, taus):
                ax.annotate("τ=∞" if tau == math.inf else f"{tau:g}", (x, y), fontsize=7,
                            textcoords="offset points", xytext=(3, -9))
        save_plot(fig, ax, "tokens/step", "accuracy", out_png)


def pareto_panels(curves: dict) -> list[list]:
    """The checkpoints of each panel: those within 0.3 of the best accuracy, then (if any) the rest."""
    best = max(a for pts in curves.values() for _, a, _ in pts)
    low = [c for c, pts in curves.items() if max(a for _, a, _ in pts) < best - 0.3]
    return [[c for c in curves if c not in low]] + ([low] if low else [])


def pyplot():
    """matplotlib.pyplot with the file-only backend, or None (a line says so) when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    return plt


def save_plot(fig, ax, xlabel: str, ylabel: str, out_png: str):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(out_png) or ".", exist_ok=True)
    fig.savefig(out_png, dpi=120)


def generation(paths, out_md, out_png=None) -> str:
    """A corpus run's eval.py --json files (make shakespeare) as two markdown tables: the likelihood runs (NLL in
    nats/token, bits/char for a byte-level model, exact for AR and a bound for the others) and the unconditional
    runs (per checkpoint and threshold: the scores the runs have, generative perplexity under the --ref-ckpt AR
    model and under the --ppl-model Hugging Face LM and MAUVE, then mean unigram entropy per sample, tokens/step,
    tokens/s at batch 1), AR, MDLM, BD3-LM, Set Diffusion in that order, tau from inf
    down. Runs of several seeds (checkpoints of one name in several folders) make one row each: the mean, with
    [min, max] over the seeds. With out_png, generative perplexity vs tokens/step, one line per checkpoint name
    (the seeds' range as error bars; needs matplotlib)."""
    likelihood, samples = {}, {}
    for path in paths:
        m = read_run(path, ("task", "model", "ckpt"))
        if m["model"] not in ORDER or not isinstance(m["ckpt"], str):
            raise ValueError(f"{path}: model {m['model']!r}, ckpt {m['ckpt']!r}: not an eval.py --json file")
        if m["task"] == "unconditional":
            check_keys(path, m, ("entropy", "tokens_per_step", "tokens_per_s", "n"), "an unconditional")
            if not any(s[0] in m for s in SCORERS):
                raise ValueError(f"{path} holds none of {', '.join(s[0] for s in SCORERS)}: an unconditional run "
                                 f"scored by --ref-ckpt, --ppl-model or --mauve-ref")
            tau = m.get("threshold", math.inf)
            if not isinstance(tau, (int, float)):
                raise ValueError(f"{path}: threshold {tau!r} is not a number")
            samples.setdefault((ORDER.index(m["model"]), label_of(m["ckpt"]), -tau), []).append(m)
        else:
            check_keys(path, m, ("nll", "perplexity", "tokens"), "a likelihood")
            likelihood.setdefault((ORDER.index(m["model"]), label_of(m["ckpt"])), []).append(m)
    if not likelihood and not samples:
        raise ValueError("no eval.py --json file given")
    head = ["checkpoint", "NLL (nats/token)", "bits/char", "perplexity", "estimate", "tokens", "seeds"]
    body = [[label, spread(runs, "nll", ".4f"), spread(runs, "bits_per_char", ".4f"), spread(runs, "perplexity", ".3f"),
             "exact" if ORDER[i] == "ar" else "bound", spread(runs, "tokens", ".0f"), len(runs)]
            for (i, label), runs in sorted(likelihood.items())]
    text = "Validation likelihood\n\n" + markdown_table(head, body) if likelihood else ""
    if samples:
        text += ("\n\n" if text else "") + unconditional_table(samples)
    print(write(text, out_md))
    plt = pyplot() if out_png and samples else None
    if plt:
        plot_generation(plt, samples, out_png)
    return text


SCORERS = [("gen_ppl", "gen. perplexity", "ref_ckpt", "generative perplexity under {}"),      # --ref-ckpt
           ("gen_ppl_hf", "gen. perplexity (HF)", "ppl_model", "gen. perplexity (HF) under {}"),  # --ppl-model
           ("mauve", "MAUVE", "mauve_encoder", "MAUVE on {} features")]                         # --mauve-ref


def unconditional_table(samples: dict) -> str:
    """The unconditional runs' table: a column per score that some run has (generative perplexity under the
    --ref-ckpt AR model, under the --ppl-model Hugging Face LM, MAUVE; a single run's MAUVE with its std over the
    5 subsets), then entropy and speed; the caption names the scoring models."""
    every = [r for runs in samples.values() for r in runs]
    scores = [s for s in SCORERS if any(s[0] in r for r in every)]
    head = ["checkpoint", "tau", *(name for _, name, _, _ in scores), "entropy", "tokens/step", "tokens/s (batch 1)",
            "samples", "seeds"]
    body = [[label, f"{-tau:g}",
             *(spread(runs, k, ".3f") + (f" ± {runs[0]['mauve_std']:.3f}" if k == "mauve" and len(runs) == 1
                                        and "mauve_std" in runs[0] else "") for k, _, _, _ in scores),
             spread(runs, "entropy", ".3f"), spread(runs, "tokens_per_step", ".2f"), spread(runs, "tokens_per_s", ".1f")
             + (f" ± {runs[0].get('tokens_per_s_std', float('nan')):.1f}" if len(runs) == 1 else ""),
             spread(runs, "n", ".0f"), len(runs)] for (_, label, tau), runs in sorted(samples.items())]
    caption = [phrase.format(", ".join(dict.fromkeys(str(r.get(source, "?")) for r in every if k in r)))
               for k, _, source, phrase in scores]
    return (f"Unconditional samples from BOS ({'; '.join(caption)}; entropy in nats)\n\n"
            + markdown_table(head, body))


SWEEP = [("accuracy, τ=∞", "acc-inf", "accuracy"), ("accuracy, τ=0.9", "acc-0.9", "accuracy"),
         ("tokens/step, τ=0.9", "acc-0.9", "tokens_per_step"), ("NLL (nats/token)", "nll", "nll"),
         ("infill: step (left-determined)", "infill-step", "exact"),
         ("infill: number (right-determined)", "infill-number", "exact")]


def sweep_kind(path: str, m: dict) -> str:
    """Which cell of the smax sweep a run fills: acc-<tau> (an accuracy run), nll, or infill-<span>."""
    if m["task"] == "likelihood":
        return "nll"
    if m["task"] == "infill":
        return f"infill-{m.get('span', 'step')}"
    check_keys(path, m, ("accuracy", "tokens_per_step"))
    return f"acc-{m.get('threshold', math.inf):g}"


def sweep(paths: list[str], out_md: str, out_png=None) -> str:
    """Set Diffusion's smax sweep (make smax): one row per checkpoint name, ordered by smax then the --infill
    fraction, with the accuracy at tau = inf and 0.9, tokens/step at 0.9, the likelihood bound and the exact
    match of both infilling spans; runs of one name in several folders (seeds) give the mean [min, max]. With
    out_png: those against smax (log scale), one panel each for accuracy, tokens/step and infilling."""
    runs = {}
    for path in paths:
        m = read_run(path, ("task", "model", "ckpt", "method_config"))
        if m["model"] != "setdiffusion" or "smax" not in m["method_config"]:
            raise ValueError(f"{path}: a run of {m['model']}; the smax sweep takes Set Diffusion runs only")
        row = runs.setdefault(label_of(m["ckpt"]), {"smax": m["method_config"]["smax"],
                                                    "infill": m["method_config"].get("infill", 0.0)})
        row.setdefault(sweep_kind(path, m), []).append(m)
    rows = sorted(runs.items(), key=lambda kv: (kv[1]["smax"], kv[1]["infill"], kv[0]))
    head = ["checkpoint", "smax", "--infill"] + [name for name, _, _ in SWEEP] + ["seeds"]
    body = [[label, r["smax"], f"{r['infill']:g}"]
            + [spread(r.get(kind, []), key, ".4f" if key == "nll" else ".3f" if key != "tokens_per_step" else ".2f")
               for _, kind, key in SWEEP]
            + [max(len(v) for k, v in r.items() if isinstance(v, list))] for label, r in rows]
    text = write(markdown_table(head, body), out_md)
    print(text)
    plt = pyplot() if out_png else None
    if plt:
        plot_sweep(plt, dict(rows), out_png)
    return text


def plot_sweep(plt, rows: dict, out_png: str):
    """Accuracy, tokens/step and infilling exact match against smax: a line per setting over the paper's models
    (--infill 0), the --infill checkpoints as stars; the seeds' range as error bars."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    panels = [(axes[0], [SWEEP[0], SWEEP[1]], "accuracy"), (axes[1], [SWEEP[2]], "tokens/step"),
              (axes[2], [SWEEP[4], SWEEP[5]], "infilling exact match")]
    for ax, series, ylabel in panels:
        for name, kind, key in series:
            for infill, style in ((False, "o-"), (True, "*")):
                pts = []
                for r in rows.values():
                    xs = [m[key] for m in r.get(kind, []) if key in m]
                    if xs and (r["infill"] > 0) == infill:
                        mean, lo, hi = mean_range(xs)
                        pts.append((r["smax"], mean, mean - lo, hi - mean))
                if pts:
                    x, y, lo, hi = zip(*sorted(pts))
                    ax.errorbar(x, y, yerr=[lo, hi], fmt=style, capsize=3, markersize=10 if infill else 6,
                                label=name.split(": ")[-1] + (", --infill" if infill else ""))
        ax.set_xscale("log", base=2)
        save_plot(fig, ax, "smax", ylabel, out_png)


def spread(runs: list[dict], key: str, fmt: str) -> str:
    """One table cell: the runs' (seeds') value of key, or their mean and [min, max] where they differ; '' when
    absent."""
    xs = [r[key] for r in runs if key in r]
    if not xs:
        return ""
    mean, lo, hi = mean_range(xs)
    return f"{mean:{fmt}}" if lo == hi else f"{mean:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def mean_range(xs: list[float]) -> tuple[float, float, float]:
    """(mean, min, max) of the seeds' values."""
    return sum(xs) / len(xs), min(xs), max(xs)


def plot_generation(plt, samples: dict, out_png: str):
    """Generative perplexity (mean over seeds, their range as error bars) vs tokens/step, a line per checkpoint:
    under the reference AR model, else under the Hugging Face LM, whichever every run has (neither: no plot)."""
    every = [r for runs in samples.values() for r in runs]
    key = next((k for k in ("gen_ppl", "gen_ppl_hf") if all(k in r for r in every)), None)
    if key is None:
        print(f"note: no plot: {out_png} plots one generative perplexity that every run has", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for label in dict.fromkeys(label for _, label, _ in sorted(samples)):
        pts = []
        for (_, name, tau), runs in samples.items():
            if name == label:
                mean, lo, hi = mean_range([r[key] for r in runs])
                pts.append((mean_range([r["tokens_per_step"] for r in runs])[0], mean, mean - lo, hi - mean, -tau))
        pts.sort()
        xs, ys, lo, hi, taus = zip(*pts)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", capsize=3, label=label)
        for x, y, tau in zip(xs, ys, taus):
            ax.annotate(f"{tau:g}", (x, y), fontsize=7, textcoords="offset points", xytext=(3, 3))
    save_plot(fig, ax, "tokens/step", "generative perplexity" + (" (HF)" if key == "gen_ppl_hf" else ""), out_png)


def infill(paths, out_md) -> str:
    """eval.py --task infill and rocstories runs (make infill, make infill-shakespeare) as one markdown table: a row
    per span kind and checkpoint name (spans step, number, word, line, then ROCStories; methods in ORDER), with
    exact match, answer_right (the shipped task's step span), char accuracy and ROUGE-L (text spans), tokens/step
    and tokens/s at batch 1; a metric column no run has is left out. Runs of one checkpoint name in several
    folders (seeds) make one row: the mean, with [min, max] where the seeds differ."""
    spans = ["step", "number", "operand", "verb", "word", "line", "rocstories"]   # the spans' order in the table
    metrics = [("exact", "exact", ".3f"), ("answer_right", "answer_right", ".3f"), ("op_right", "op_right", ".3f"),
               ("char acc.", "char_accuracy", ".3f"), ("ROUGE-L", "rougeL", ".3f"),
               ("tokens/step", "tokens_per_step", ".2f"), ("tokens/s (batch 1)", "tokens_per_s", ".1f"),
               ("n", "n", ".0f")]
    groups = {}
    for path in paths:
        m = read_run(path, ("task", "model", "ckpt"))
        if m["task"] not in ("infill", "rocstories"):
            raise ValueError(f"{path}: a {m['task']} run, not an infill or rocstories run (eval.py --task infill)")
        check_keys(path, m, ("tokens_per_step", "tokens_per_s", "n"), "an infill")
        span = m.get("span", "step") if m["task"] == "infill" else "rocstories"
        if m["model"] not in ORDER or not isinstance(m["ckpt"], str) or span not in spans:
            raise ValueError(f"{path}: model {m['model']!r}, ckpt {m['ckpt']!r}, span {span!r}: not an eval.py "
                             f"--json file of an infill run")
        key = (spans.index(span), ORDER.index(m["model"]), label_of(m["ckpt"]))
        groups.setdefault(key, []).append(m)
    if not groups:
        raise ValueError("no eval.py --json file given")
    columns = [c for c in metrics if any(c[1] in r for runs in groups.values() for r in runs)]
    head = ["span", "checkpoint"] + [name for name, _, _ in columns] + ["seeds"]
    body = [[spans[span], label] + [spread(runs, key, fmt) for _, key, fmt in columns] + [len(runs)]
            for (span, _, label), runs in sorted(groups.items())]
    text = write(markdown_table(head, body), out_md)
    print(text)
    return text


def label_of(ckpt: str) -> str:
    """A checkpoint's name in a table: a released key as it is, a folder by its last part."""
    return ckpt if ":" in ckpt else os.path.basename(ckpt.rstrip("/"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", metavar="OUT.md", help="the markdown table to write")
    p.add_argument("runs", nargs="+", metavar="RUN.json", help="eval.py --json files")
    p.add_argument("--pareto", action="store_true",
                   help="merge the accuracy and throughput runs of a threshold sweep into a Pareto table")
    p.add_argument("--generation", action="store_true",
                   help="a corpus run: likelihood (bits/char) and unconditional (generative perplexity) tables")
    p.add_argument("--infill", action="store_true",
                   help="infilling runs (eval.py --task infill, rocstories): exact match, char accuracy, ROUGE-L, "
                        "speed per span and checkpoint, seeds merged")
    p.add_argument("--sweep", action="store_true",
                   help="Set Diffusion's smax sweep: accuracy, tokens/step, likelihood and infilling per checkpoint")
    p.add_argument("--plot", default=None, help="--pareto: accuracy vs tokens/step plot; --sweep: accuracy, "
                   "tokens/step and infilling vs smax; --generation: generative perplexity vs tokens/step (needs "
                   "matplotlib)")
    p.add_argument("--paper", choices=["gsm8k"], default=None, help="--pareto: add the paper's numbers")
    args = p.parse_args(argv)
    try:
        if args.pareto + args.generation + args.infill + args.sweep > 1:
            raise ValueError("give one of --pareto, --generation, --infill and --sweep")
        if args.generation:
            return generation(args.runs, args.out, args.plot)
        if args.infill:
            return infill(args.runs, args.out)
        if args.sweep:
            return sweep(args.runs, args.out, args.plot)
        if args.pareto:
            paper = get_task(args.paper).PAPER_RESULTS if args.paper else None
            return summarize(args.runs, args.out, args.plot, paper)
        print(table(args.runs, args.out))
    except (OSError, ValueError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
