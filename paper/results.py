"""Tables (and a plot) of eval.py --json files: what the Makefile's experiments write to results/.

    python -m paper.results results/likelihood-arith.md results/likelihood-arith/*.json     # one row per file
    python -m paper.results results/pareto.md results/pareto/*.json --pareto --plot results/pareto.png
    python -m paper.results results/gsm8k.md results/gsm8k/*.json --pareto --paper gsm8k
    python -m paper.results results/smax.md results/smax/*.json --sweep --plot results/smax.png
    python -m paper.results results/shakespeare.md results/shakespeare/*.json --generation \
        --plot results/shakespeare.png

`table` lists each file's metrics, one row per file (sampler settings left out); `summarize` (--pareto) merges
the accuracy and throughput files of a threshold sweep into a Pareto table, with the paper's numbers beside
ours (--paper gsm8k: the official printed accuracy beside the paper's, the other scorers labelled; its plot:
accuracy against tokens/step, the paper's points beside ours); `sweep` (--sweep) tabulates Set Diffusion's
smax sweep; `generation` (--generation) puts a corpus run's likelihood files (bits/char) and unconditional
files (generative perplexity under an AR checkpoint or a Hugging Face LM, MAUVE, entropy and speed per
threshold: the paper's OWT generation table) into two tables.

Under each table, the environments the runs were measured in and their checkpoints trained in (their JSON's
"environment" and "ckpt_environment": common/runs.py), with how many runs each. Runs from different
commits are never merged into one row (seeds, or a Pareto point's accuracy and speed files) unless
--mixed-commits says so; a file given twice, or a copy of another, counts once.
"""
import argparse
import json
import math
import os
import sys

from common.checkpoint import METHODS, json_dumps, json_load
from data import get_corpus, get_task
from data.files import figure_format, replaced
from common.metrics import markdown_table

NOT_SHOWN = ("threshold", "window", "commit_order", "stop_on_im_end", "method_config",   # sampler/method
             "file", "environment", "ckpt_environment")         # settings; where it came from (the note)
ORDER = ["ar", "mdlm", "bd3lm", "setdiffusion"]                           # the methods' order in a table


def write(text: str, out_md: str, runs=()) -> str:
    """Write the tables text to out_md whole (a temporary file renamed: a full disk or Ctrl-C leaves the
    earlier file as it was), with the environments of the runs behind it under it (environments); text
    without a table (a header, its rule and a row) is refused, never written."""
    lines = text.splitlines()
    if not any(rule.startswith("|---") and row.startswith("|") for rule, row in zip(lines[1:], lines[2:])):
        raise ValueError(f"no table to write to {out_md}: the files give no row")
    text += f"\n\n{environments(runs)}" if runs else ""
    try:
        os.makedirs(os.path.dirname(out_md) or ".", exist_ok=True)
        with replaced(out_md) as f:
            f.write(text + "\n")
    except OSError as e:
        raise ValueError(f"cannot write {out_md} ({e.strerror or e}): the earlier file, if any, is as it "
                         f"was") from None
    return text


def read_run(path: str, needs=()) -> dict:
    """One eval.py --json file as a dict; a ValueError naming the file (one line) when it cannot be read, is
    not JSON, not a JSON object, or lacks one of the keys `needs`."""
    try:
        with open(path, encoding="utf-8") as f:
            m = json_load(f)                 # tau = inf as "inf" (or an older file's Infinity)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}): pass the files eval.py "
                         f"--json wrote") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e.msg}, line {e.lineno} column {e.colno}): pass the "
                         f"files eval.py --json wrote") from None
    except RecursionError:
        raise ValueError(f"{path} is not an eval.py --json file (nested too deeply)") from None
    if not isinstance(m, dict):
        raise ValueError(f"{path} holds a JSON {type(m).__name__}, not the object eval.py --json writes")
    m["file"] = path                                  # the note under the table, a refusal, a figure's title
    return check_keys(path, m, needs)


def distinct(paths: list[str]) -> list[str]:
    """paths without a file given twice (under any name: a link, ./x) or a copy of an earlier one (the same
    JSON): each run counts once; a note on stderr names each one left out."""
    contents, kept = {}, []
    for path in paths:
        try:
            with open(path, "rb") as f:
                key = json_dumps(json.loads(f.read()), sort_keys=True)
        except (OSError, ValueError, RecursionError):
            kept.append(path)                         # read_run names what is wrong with it
            continue
        same = next((p for p in contents.values() if os.path.samefile(p, path)), None)
        if same or key in contents:
            what = f"the same file as {same}" if same else f"a copy of {contents[key]}"
            print(f"note: {path} is {what}: counted once", file=sys.stderr)
            continue
        contents[key] = path
        kept.append(path)
    return kept


OLDER = "a tree older than the environment record"        # an eval.py --json file without one: its commit


def commit(env) -> str | None:
    return env.get("commit") if isinstance(env, dict) else None


def short(commit: str) -> str:
    return commit if commit == OLDER else commit[:7]


def one_commit(rows, mixed: bool = False):
    """rows: (a row's name, the runs merged into it). Runs measured at two commits, or whose checkpoints were
    trained at two, are refused in one line unless mixed (--mixed-commits). A file with no "environment" was
    written by a tree older than the record, so at another commit than a file that has one; a checkpoint
    without the record (a released one, an older one) cannot be told apart and is only counted in the note."""
    if mixed:
        return
    for name, runs in rows:
        for key, verb in (("environment", "measured"), ("ckpt_environment", "trained")):
            found = {}
            for m in runs:
                older = key == "environment" and key not in m
                found.setdefault(OLDER if older else commit(m.get(key)), m["file"])
            found.pop(None, None)
            if len(found) > 1:
                (a, fa), (b, fb) = list(found.items())[:2]
                what = "were measured" if verb == "measured" else "have checkpoints trained"
                raise ValueError(f"{fa} and {fb} make one row ({name}) but {what} at different commits "
                                 f"({short(a)} and {short(b)}): rerun one at the other's commit, or pass "
                                 f"--mixed-commits to merge them")


def environment_summary(env: dict | None) -> str:
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


def environments(runs) -> str:
    """The note under a table: each environment its runs were measured in, then each one their checkpoints
    were trained in, with how many runs (environment_summary)."""
    lines = []
    for key, verb in (("environment", "measured"), ("ckpt_environment", "trained")):
        groups = {}
        for m in runs:
            groups[environment_summary(m.get(key))] = groups.get(environment_summary(m.get(key)), 0) + 1
        lines += [f"- {verb}: {n} run{'s' if n > 1 else ''}, {env}" for env, n in groups.items()]
    return "Environments (docs/usage.md#reproducing-a-result):\n" + "\n".join(lines)


METRICS = {"accuracy", "tokens_per_step", "tokens_per_s", "tokens_per_s_std", "nll", "perplexity", "tokens",
           "entropy", "n"}                            # what check_keys' callers compute with: numbers


def check_keys(path: str, m: dict, keys, kind: str = "") -> dict:
    """m must hold keys; else a ValueError naming the file and the kind of run it should be (default: a
    throughput or an accuracy run, by its task)."""
    missing = [k for k in keys if k not in m]
    if missing:
        kind = kind or ("a throughput" if m.get("task") == "throughput" else "an accuracy")
        raise ValueError(f"{path} lacks {', '.join(map(repr, missing))}: not the eval.py --json file of "
                         f"{kind} run")
    for k in set(keys) & METRICS:                     # a hand-edited value would sort or plot as nonsense
        if isinstance(m[k], bool) or not isinstance(m[k], (int, float)):
            raise ValueError(f"{path}: {k} is {json_dumps(m[k])}, not a number: pass the files "
                             f"eval.py --json wrote")
    return m


def table(paths: list[str], out_md: str) -> str:
    """One markdown row per eval.py --json file, in the given order; columns = the union of their keys."""
    runs = [read_run(p) for p in paths]
    keys = [k for k in dict.fromkeys(k for m in runs for k in m) if k not in NOT_SHOWN]
    if not keys:
        raise ValueError(f"{', '.join(paths)}: no metric to tabulate (eval.py --json writes the task, the "
                         f"model and its metrics)")
    return write(markdown_table(keys, [[m.get(k, "") for k in keys] for m in runs]) + recipes_note(runs),
                 out_md, runs)


def recipes_note(runs: list[dict]) -> str:
    """Under a table of likelihood runs that name an official recipe (eval.py --recipe; make
    reproduce-likelihood runs OWT's Set Diffusion under both): what each recipe is (its corpus' RECIPES)."""
    named = dict.fromkeys((r.get("data"), r["recipe"]) for r in runs
                          if r.get("task") == "likelihood" and "recipe" in r)
    if not named:
        return ""
    about = []
    for data, recipe in named:
        recipes = get_corpus(data).RECIPES if data in ("owt", "lm1b") else {}
        if recipe not in recipes:
            raise ValueError(f"a likelihood run of {data!r} names the recipe {recipe!r}, not one of that "
                             f"corpus' official recipes: pass the files eval.py --json wrote")
        about.append(f"- {recipe} ({data}): {recipes[recipe]['about']}")
    return ("\n\nrecipe: the official code's two likelihood recipes, which differ in Set Diffusion's orders "
            "alone; the paper does not say which gave its numbers.\n" + "\n".join(about))


OFFICIAL = "official_accuracy"                   # the accuracy a --paper table compares with the paper's
OTHERS = [("accuracy", "lenient: first \\boxed{}, as a number"), ("strict_match", "lm-eval strict-match"),
          ("flexible_match", "lm-eval flexible-extract")]     # GSM8K's other scorers, beside it, labelled


def summarize(paths, out_md, out_png=None, paper=None, mixed=False):
    """Merge accuracy and throughput JSONs (one per eval.py run) into one table (and plot) of accuracy vs
    speed per checkpoint and threshold. With paper = {ckpt: {tau: (tokens/step, tokens/s, acc %)}} (GSM8K)
    the accuracy is the official printed rule's (official_accuracy: the one the paper's compares with), each
    of ours beside the paper's, speed vs AR too (the ratio, comparable across GPUs where tokens/s is not),
    then the other scorers, labelled; the plot draws the paper's points beside ours. A row's files come from
    one commit unless mixed (one_commit)."""
    acc = OFFICIAL if paper else "accuracy"
    rows = {}
    for path in paths:
        m = read_run(path, ("task", "model", "ckpt"))
        check_keys(path, m, ("tokens_per_s", "tokens_per_s_std") if m["task"] == "throughput"
                   else (acc, "tokens_per_step"))
        tau = m.get("threshold", math.inf)
        if m["model"] not in ORDER or not isinstance(m["ckpt"], str) or not isinstance(tau, (int, float)):
            raise ValueError(f"{path}: model {m['model']!r}, ckpt {m['ckpt']!r}, threshold {tau!r}: not an "
                             f"eval.py --json file of an accuracy or throughput run")
        label = label_of(m["ckpt"])
        row = rows.setdefault((label, tau), {"ckpt": label, "model": m["model"], "tau": tau, "runs": []})
        row["runs"].append(m)
        if m["task"] == "throughput":
            row.update(tokens_per_s=m["tokens_per_s"], std=m["tokens_per_s_std"],
                       lo=m.get("tokens_per_s_min"), hi=m.get("tokens_per_s_max"))
        else:
            row.update(accuracy=m[acc], tokens_per_step=m["tokens_per_step"], task=m["task"],
                       n=m.get("n"), file=path, others={k: m.get(k) for k, _ in OTHERS})
    rows = sorted(rows.values(), key=lambda r: (ORDER.index(r["model"]), r["ckpt"], -r["tau"]))
    one_commit([(f"{r['ckpt']} at τ {r['tau']:g}", r["runs"]) for r in rows], mixed)
    ar_speed = next((r["tokens_per_s"] for r in rows if "threshold" not in METHODS[r["model"]].KNOBS   # AR:
                     and "tokens_per_s" in r), None)                                      # one token a step
    paper_ar = next((pts[math.inf][1] for c, pts in (paper or {}).items()
                     if c.endswith(":ar") and math.inf in pts), None)
    nan = float("nan")
    head = (["checkpoint", "tau", "accuracy (official rule)", "paper: accuracy", "tokens/step",
             "paper: tokens/step", "tokens/s (batch 1)", "paper: tokens/s", "speed vs AR",
             "paper: speed vs AR", *(name for _, name in OTHERS)] if paper else
            ["checkpoint", "tau", "accuracy", "tokens/step", "tokens/s (batch 1)", "speed vs AR"])
    body = []
    for r in rows:
        speed = r.get("tokens_per_s", nan)
        ours = [f"{r.get('accuracy', nan):.3f}", f"{r.get('tokens_per_step', nan):.2f}", spread_of(r),
                f"{speed / ar_speed if ar_speed else nan:.2f}x"]
        if not paper:
            body.append([r["ckpt"], f"{r['tau']:g}", *ours])
            continue
        x, tput, pacc = paper.get(r["ckpt"], {}).get(r["tau"], (nan, nan, nan))
        theirs = [f"{pacc / 100:.3f}", f"{x:.2f}", f"{tput:.1f}",
                  f"{tput / paper_ar if paper_ar else nan:.2f}x"]
        others = [f"{v:.3f}" if isinstance(v, (int, float)) else "" for v in r.get("others", {}).values()]
        body.append([r["ckpt"], f"{r['tau']:g}", *[c for pair in zip(ours, theirs) for c in pair], *others])
    if out_png and not any("accuracy" in r for r in rows):
        raise ValueError(f"--plot {out_png} draws accuracy against tokens/step: none of the files is an "
                         f"accuracy run (add them, or drop --plot)")
    text = markdown_table(head, body)
    if paper:
        text = ("Accuracy: the official printed rule (data/gsm8k.py official_match: the text after the first "
                "`boxed{` up to the next `}`, string-equal to the gold), the one beside the paper's; the "
                "other scorers, labelled, last. Speed vs AR: each run's tokens/s over AR's, ours and the "
                "paper's (its GPU is unconfirmed: compare the ratios).\n\n" + text)
    print(write(text, out_md, [m for r in rows for m in r["runs"]]))
    plt = pyplot() if out_png else None
    if plt:
        plot_pareto(plt, rows, out_png, paper)


def spread_of(r: dict) -> str:
    """A throughput cell: the median round and the rounds' range (interleaved_throughput), or, for a file of
    one round, the mean ± the per-sample standard deviation."""
    nan = float("nan")
    if r.get("lo") is not None:
        return f"{r['tokens_per_s']:.1f} [{r['lo']:.1f}, {r['hi']:.1f}]"
    return f"{r.get('tokens_per_s', nan):.1f} ± {r.get('std', nan):.1f}"


def plot_pareto(plt, rows: list[dict], out_png: str, paper: dict | None = None):
    """Accuracy vs tokens/step (exact, unlike tokens/s), one line per checkpoint, tau beside each point; with
    paper (GSM8K), the paper's points of each checkpoint as a dashed line of open markers in its colour, and
    the accuracy the official printed rule's. A checkpoint whose best accuracy is more than 0.3 below the best
    one's (MDLM on the shipped task) gets its own panel, so that the y range of the main panel separates the
    others. The title names the task, the scorer and the runs."""
    curves, runs = {}, {}
    for r in rows:
        if "accuracy" in r:
            curves.setdefault(r["ckpt"], []).append((r["tokens_per_step"], r["accuracy"], r["tau"]))
            runs.setdefault(r["ckpt"], set()).add(r["file"])
    panels = pareto_panels(curves)
    fig, axes = plt.subplots(1, len(panels), figsize=(7 + 3 * (len(panels) - 1), 4.6), squeeze=False, dpi=DPI,
                             width_ratios=[2] + [1] * (len(panels) - 1), layout="constrained")
    colours = dict(zip(curves, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
    labels = []
    for k, (ax, names) in enumerate(zip(axes[0], panels)):
        ax.set_title("accuracy far below: own y scale" if k else "", fontsize=8)
        labels.append([])
        for c in names:
            xs, ys, taus = zip(*sorted(curves[c]))
            ax.plot(xs, ys, "o-", label=c, color=colours[c])
            labels[-1].append([(x, y, tau_text(tau)) for x, y, tau in zip(xs, ys, taus)])
            theirs = sorted((x, acc / 100) for x, _, acc in (paper or {}).get(c, {}).values())
            if theirs:               # a label starting "_" has no legend entry: PAPER_LINE's grey one
                ax.plot(*zip(*theirs), "o--", color=colours[c], markerfacecolor="none", alpha=0.8,
                        label=f"_paper: {c}")
        if paper and k == 0:
            ax.plot([], [], "o--", color="0.4", markerfacecolor="none", label=PAPER_LINE)
        finish_axes(ax, "tokens/step", "accuracy (official rule)" if paper else "accuracy")
    task, n = next((r["task"], r["n"]) for r in rows if "accuracy" in r)
    scorer = ([f"scorer: {task}'s official_match (the official printed accuracy) on {n} held-out problems "
               f"(the other scorers: the table)", "dashed, open: the paper's points in each checkpoint's "
               "colour (the official plotting script's; its tokens/step from throughput runs)"]
              if paper else [f"scorer: {task}'s is_correct on {n} held-out problems"])
    title(fig, f"{task}: accuracy against tokens per step, τ (the confidence threshold) beside each point",
          *scorer, seeds_note(runs))
    for ax, series in zip(axes[0], labels):
        place_labels(ax, series)
    save_figure(fig, out_png)


PAPER_LINE = "the paper's (dashed, open)"        # the legend entry of the paper's points


def tau_text(tau: float) -> str:
    return "τ=∞" if tau == math.inf else f"{tau:g}"


def pareto_panels(curves: dict) -> list[list]:
    """The checkpoints of each panel: those within 0.3 of the best accuracy, then (if any) the rest."""
    best = max(a for pts in curves.values() for _, a, _ in pts)
    low = [c for c, pts in curves.items() if max(a for _, a, _ in pts) < best - 0.3]
    return [[c for c in curves if c not in low]] + ([low] if low else [])


def pyplot():
    """matplotlib.pyplot with the file-only backend; without matplotlib a ValueError (one line): a plot that
    was asked for is never dropped in silence."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install matplotlib, or drop --plot") from None
    return plt


DPI = 120          # the figures' resolution: labels are placed in pixels at this resolution, and saved at it


def finish_axes(ax, xlabel: str, ylabel: str):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def title(fig, *lines: str):
    """What a figure shows, above it: the task and the quantity plotted, the scorer, the runs (seeds). The
    legend goes below, outside the axes, so that it covers no point and no label; then the layout is frozen so
    that the labels placed next (in pixels) stay where they were placed."""
    fig.suptitle("\n".join(lines), fontsize=8)
    handles = {}
    for ax in fig.axes:
        for h, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, h)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=min(len(handles), 4),
               fontsize=8)
    fig.canvas.draw()
    fig.set_layout_engine("none")


def seeds_note(runs: dict) -> str:
    """runs: a curve's or a point's name -> the eval.py --json files behind it. The Makefile writes each
    training seed's files to its own folder (results/shakespeare, results/shakespeare-s2, ...), so the folders
    name the seeds: "seeds: one run each (results/pareto)", or "seeds: mean of 3 runs (results/shakespeare,
    results/shakespeare-s2, results/shakespeare-s3), bars min-max", per group of names where they differ."""
    groups = {}
    for name, files in runs.items():
        groups.setdefault(tuple(sorted({os.path.dirname(f) or "." for f in files})), []).append(name)
    parts = []
    for folders, names in sorted(groups.items(), key=lambda g: -len(g[0])):
        what = (f"mean of {len(folders)} runs ({', '.join(folders)}), bars min-max" if len(folders) > 1
                else f"one run each ({folders[0]})" if len(groups) == 1 else f"one run ({folders[0]})")
        parts.append(what if len(groups) == 1 else f"{', '.join(names)}: {what}")
    return "seeds: " + "; ".join(parts)


def place_labels(ax, series: list[list[tuple]], fontsize: int = 7) -> list:
    """Write each point's label beside it where it covers no other label, no marker, no line and nothing
    outside the axes: the first free spot on rings of offsets around the point, ring after ring outwards
    (beyond the first ring a thin line joins label and point). series: lists of (x, y, text), one per curve,
    drawn as lines through its points; the points of one curve that fall on the same pixels share one label
    ("0.9, 0.7"). Call it once the layout is final (title() freezes it). Returns the Annotations."""
    from matplotlib.transforms import Bbox
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = []                                  # pixel boxes a label must not cover: markers, lines, labels
    for curve in series:
        px = [ax.transData.transform((x, y)) for x, y, _ in sorted(curve)]
        taken += [Bbox.from_bounds(x - 4, y - 4, 8, 8) for x, y in px]
        for (x0, y0), (x1, y1) in zip(px, px[1:]):
            steps = max(1, int(math.hypot(x1 - x0, y1 - y0) // 3))
            taken += [Bbox.from_bounds(x0 + (x1 - x0) * i / steps - 1, y0 + (y1 - y0) * i / steps - 1, 2, 2)
                      for i in range(steps + 1)]
    placed = []
    for curve in series:
        for (x, y), text in merge_close(ax, curve, 8):
            ann = None
            for ring, (dx, dy) in offsets():
                if ann is not None:
                    ann.remove()
                ha = "left" if dx > 0.3 * abs(dy) else "right" if dx < -0.3 * abs(dy) else "center"
                va = "bottom" if dy > 0.3 * abs(dx) else "top" if dy < -0.3 * abs(dx) else "center"
                line = dict(arrowstyle="-", lw=0.5, color="0.5", shrinkA=0, shrinkB=3) if ring else None
                ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points",
                                  fontsize=fontsize, ha=ha, va=va, annotation_clip=False, arrowprops=line)
                box = label_box(ann, renderer).padded(1)
                inside = frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
                if inside and not any(box.overlaps(t) for t in taken):
                    break
            taken.append(label_box(ann, renderer))
            placed.append(ann)
    return placed


def label_box(ann, renderer):
    """The pixels an Annotation's text covers (its leader line left out)."""
    from matplotlib.text import Text
    ann.update_positions(renderer)
    return Text.get_window_extent(ann, renderer)


def merge_close(ax, curve: list[tuple], pixels: float) -> list[tuple]:
    """One curve's labels: (x, y) -> text, where points closer than `pixels` on screen share one label."""
    out = []
    for x, y, text in curve:
        px = ax.transData.transform((x, y))
        near = next((o for o in out if abs(o[2][0] - px[0]) < pixels and abs(o[2][1] - px[1]) < pixels), None)
        if near:
            near[1] += f", {text}"
        else:
            out.append([(x, y), text, px])
    return [(xy, text) for xy, text, _ in out]


def offsets():
    """(ring, (dx, dy)) in points: right, left, above, below, then 12 more directions, ring by ring."""
    first = [0, 180, 90, 270]
    angles = first + [a for a in range(0, 360, 30) if a not in first]
    for ring, r in enumerate((4, 8, 13, 19, 26, 34, 43, 53, 64)):
        for a in angles:
            yield ring, (round(r * math.cos(math.radians(a)), 2), round(r * math.sin(math.radians(a)), 2))


def save_figure(fig, out_png: str):
    """Write the figure to out_png whole (a temporary file renamed), in the format its extension names."""
    try:
        os.makedirs(os.path.dirname(out_png) or ".", exist_ok=True)
        with replaced(out_png, "wb") as f:
            fig.savefig(f, format=figure_format(out_png, "--plot"), dpi=DPI)
    except OSError as e:
        raise ValueError(f"cannot write {out_png} ({e.strerror or e}): the earlier file, if any, is as it "
                         f"was") from None


def generation(paths, out_md, out_png=None, mixed=False) -> str:
    """A corpus run's eval.py --json files (make shakespeare) as two markdown tables: the likelihood runs (NLL
    in nats/token, bits/char for a byte-level model, exact for AR and a bound for the others) and the
    unconditional runs (per checkpoint and threshold: the scores the runs have, generative perplexity under
    the --ref-ckpt AR model and under the --ppl-model Hugging Face LM and MAUVE, then mean unigram entropy per
    sample, tokens/step, tokens/s at batch 1), AR, MDLM, BD3-LM, Set Diffusion in that order, tau from inf
    down. Runs of several seeds (checkpoints of one name in several folders) make one row each: the mean, with
    [min, max] over the seeds. With out_png, generative perplexity and tokens/step against tau, one line per
    checkpoint name (the seeds' range as error bars; needs matplotlib)."""
    likelihood, samples = {}, {}
    for path in paths:
        m = read_run(path, ("task", "model", "ckpt"))
        if m["model"] not in ORDER or not isinstance(m["ckpt"], str):
            raise ValueError(f"{path}: model {m['model']!r}, ckpt {m['ckpt']!r}: not an eval.py --json file")
        m["file"] = path                                   # the figure names the folders its runs came from
        if m["task"] == "unconditional":
            check_keys(path, m, ("entropy", "tokens_per_step", "tokens_per_s", "n"), "an unconditional")
            if not any(s[0] in m for s in SCORERS) and not m.get("throughput_run"):
                raise ValueError(f"{path} holds none of {', '.join(s[0] for s in SCORERS)}: an unconditional "
                                 f"run scored by --ref-ckpt, --ppl-model or --mauve-ref (or a "
                                 f"--throughput-run)")
            tau = m.get("threshold", math.inf)
            if not isinstance(tau, (int, float)):
                raise ValueError(f"{path}: threshold {tau!r} is not a number")
            samples.setdefault((ORDER.index(m["model"]), label_of(m["ckpt"]), -tau), []).append(m)
        else:
            check_keys(path, m, ("nll", "perplexity", "tokens"), "a likelihood")
            likelihood.setdefault((ORDER.index(m["model"]), label_of(m["ckpt"])), []).append(m)
    if not likelihood and not samples:
        raise ValueError("no eval.py --json file given")
    one_commit([(key[1], runs) for key, runs in likelihood.items()]
               + [(f"{key[1]} at τ {-key[2]:g}", runs) for key, runs in samples.items()], mixed)
    head = ["checkpoint", "NLL (nats/token)", "bits/char", "perplexity", "estimate", "tokens", "seeds"]
    body = [[label, spread(runs, "nll", ".4f"), spread(runs, "bits_per_char", ".4f"),
             spread(runs, "perplexity", ".3f"),
             "exact" if METHODS[ORDER[i]].EXACT_NLL else "bound", spread(runs, "tokens", ".0f"), len(runs)]
            for (i, label), runs in sorted(likelihood.items())]
    text = "Validation likelihood\n\n" + markdown_table(head, body) if likelihood else ""
    if samples:
        text += ("\n\n" if text else "") + unconditional_table(samples)
    if out_png and perplexity_key(samples) is None:
        raise ValueError(f"--plot {out_png} draws one generative perplexity (gen_ppl or gen_ppl_hf) that "
                         f"every unconditional run has: "
                         f"{'some lack it' if samples else 'there is no unconditional run'} (score them all "
                         f"with one --ref-ckpt or --ppl-model, or drop --plot)")
    text = write(text, out_md, [m for group in (likelihood, samples) for runs in group.values()
                                for m in runs])
    print(text)
    plt = pyplot() if out_png and samples else None
    if plt:
        corpus = ", ".join(dict.fromkeys(str(r["data"]) for runs in likelihood.values() for r in runs
                                         if "data" in r))
        plot_generation(plt, samples, out_png, corpus)
    return text


SCORERS = [("gen_ppl", "gen. perplexity", "ref_ckpt", "generative perplexity under {}"),      # --ref-ckpt
           ("gen_ppl_hf", "gen. perplexity (HF)", "ppl_model",
            "gen. perplexity (HF) under {}"),  # --ppl-model
           ("mauve", "MAUVE", "mauve_encoder", "MAUVE on {} features")]                         # --mauve-ref


def unconditional_table(samples: dict) -> str:
    """The unconditional runs' table: a column per score that some run has (generative perplexity under the
    --ref-ckpt AR model, under the --ppl-model Hugging Face LM, MAUVE; a single run's MAUVE with its std over
    the 5 subsets), then entropy and speed; the caption names the scoring models. A throughput run
    (--throughput-run: the official's, samples drawn whole and scored by nothing) gives its row's tokens/step
    and tokens/s ("timed n" its samples); the scores and entropy come from the scored runs."""
    parts = {k: split_timed(runs) for k, runs in samples.items()}
    every = [r for scored, _ in parts.values() for r in scored]
    scores = [s for s in SCORERS if any(s[0] in r for r in every)]
    timed = any(t for _, t in parts.values())
    head = ["checkpoint", "tau", *(name for _, name, _, _ in scores), "entropy", "tokens/step",
            "tokens/s (batch 1)", "samples", *["timed n"] * timed, "seeds"]
    body = []
    order = lambda kv: (not kv[1][0], corpus_of(kv[0][1]), kv[0])   # noqa: E731 (scored rows first)
    for (_, label, tau), (scored, t) in sorted(parts.items(), key=order):
        fast = t or scored
        body.append([label, f"{-tau:g}",
                     *(spread(scored, k, ".3f") + (f" ± {scored[0]['mauve_std']:.3f}" if k == "mauve"
                                                   and len(scored) == 1 and "mauve_std" in scored[0] else "")
                       for k, _, _, _ in scores),
                     spread(scored or t, "entropy", ".3f"), spread(fast, "tokens_per_step", ".2f"),
                     spread(fast, "tokens_per_s", ".1f")
                     + (f" ± {fast[0].get('tokens_per_s_std', float('nan')):.1f}" if len(fast) == 1 else ""),
                     spread(scored, "n", ".0f"), *[spread(t, "n", ".0f")] * timed, len(scored or t)])
    caption = [phrase.format(", ".join(dict.fromkeys(str(r.get(source, "?")) for r in every if k in r)))
               for k, _, source, phrase in scores]
    timing = ("; tokens/s from the throughput runs (timed n after their warm-up, drawn whole, unscored) "
              "where a row has one" if timed else "")
    return (f"Unconditional samples from BOS ({'; '.join(caption) or 'unscored'}; entropy in nats"
            f"{timing})\n\n" + markdown_table(head, body))


def corpus_of(label: str) -> str:
    """The corpus of a released key ("owt" of owt:ar), which groups a table's rows; "" for a folder."""
    return label.split(":", 1)[0] if ":" in label else ""


def split_timed(runs: list[dict]) -> tuple[list, list]:
    """(the runs that scored, the throughput runs: eval.py --throughput-run, timed and scored by nothing)."""
    return [r for r in runs if not r.get("throughput_run")], [r for r in runs if r.get("throughput_run")]


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


def sweep(paths: list[str], out_md: str, out_png=None, mixed=False) -> str:
    """Set Diffusion's smax sweep (make smax): one row per checkpoint name, ordered by smax then the --infill
    fraction, with the accuracy at tau = inf and 0.9, tokens/step at 0.9, the likelihood bound and the exact
    match of both infilling spans; runs of one name in several folders (seeds) give the mean [min, max]. With
    out_png: those against smax (log scale), one panel each for accuracy, tokens/step and infilling."""
    runs = {}
    for path in paths:
        m = read_run(path, ("task", "model", "ckpt", "method_config"))
        m["file"] = path                                   # the figure names the folders its runs came from
        if "smax" not in m["method_config"]:                # Set Diffusion's knob
            raise ValueError(f"{path}: a run of {m['model']}; the smax sweep takes Set Diffusion runs only")
        row = runs.setdefault(label_of(m["ckpt"]), {"smax": m["method_config"]["smax"],
                                                    "infill": m["method_config"].get("infill", 0.0)})
        row.setdefault(sweep_kind(path, m), []).append(m)
    rows = sorted(runs.items(), key=lambda kv: (kv[1]["smax"], kv[1]["infill"], kv[0]))
    merged = [(label, [m for k, v in r.items() if isinstance(v, list) for m in v]) for label, r in rows]
    one_commit(merged, mixed)
    head = ["checkpoint", "smax", "--infill"] + [name for name, _, _ in SWEEP] + ["seeds"]
    body = [[label, r["smax"], f"{r['infill']:g}"]
            + [spread(r.get(kind, []), key,
                      ".4f" if key == "nll" else ".3f" if key != "tokens_per_step" else ".2f")
               for _, kind, key in SWEEP]
            + [max(len(v) for k, v in r.items() if isinstance(v, list))] for label, r in rows]
    text = write(markdown_table(head, body), out_md, [m for _, group in merged for m in group])
    print(text)
    plt = pyplot() if out_png else None
    if plt:
        plot_sweep(plt, dict(rows), out_png)
    return text


def plot_sweep(plt, rows: dict, out_png: str):
    """Accuracy, tokens/step and infilling exact match against smax: a line per setting over the paper's
    models (--infill 0), the --infill checkpoints as stars; the seeds' range as error bars. The title names
    the task, the scorers and the runs."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.4), dpi=DPI, layout="constrained")
    panels = [(axes[0], [SWEEP[0], SWEEP[1]], "accuracy"), (axes[1], [SWEEP[2]], "tokens/step"),
              (axes[2], [SWEEP[4], SWEEP[5]], "infilling exact match")]
    smaxes = sorted({r["smax"] for r in rows.values()})
    for ax, series, ylabel in panels:
        for j, (name, kind, key) in enumerate(series):
            for infill, style in ((False, "o-"), (True, "*")):
                pts = []
                for r in rows.values():
                    xs = [m[key] for m in r.get(kind, []) if key in m]
                    if xs and (r["infill"] > 0) == infill:
                        mean, lo, hi = mean_range(xs)
                        # the --infill stars of a panel's series side by side, not on top of each other
                        shift = 2 ** (0.1 * (j - (len(series) - 1) / 2)) if infill else 1
                        pts.append((r["smax"] * shift, mean, mean - lo, hi - mean))
                if pts:
                    x, y, lo, hi = zip(*sorted(pts))
                    ax.errorbar(x, y, yerr=[lo, hi], fmt=style, capsize=3, markersize=10 if infill else 6,
                                label=name.split(": ")[-1] + (", --infill" if infill else ""))
        ax.set_xscale("log", base=2)
        ax.set_xticks(smaxes, [str(s) for s in smaxes])
        ax.minorticks_off()
        finish_axes(ax, "smax", ylabel)
        ax.legend(fontsize=8)
    accuracy = [m for r in rows.values() for kind in ("acc-inf", "acc-0.9") for m in r.get(kind, [])]
    infills = [m for r in rows.values() for kind in ("infill-step", "infill-number") for m in r.get(kind, [])]
    task = accuracy[0]["task"] if accuracy else "?"
    runs = {f"smax {r['smax']}" + (f" --infill {r['infill']:g}" if r["infill"] else ""):
            [m["file"] for k, v in r.items() if isinstance(v, list) for m in v] for r in rows.values()}
    fig.suptitle("\n".join([
        f"{task}: Set Diffusion against smax (the orders' reach; window smax/2)",
        f"scorers: accuracy = {task}'s is_correct on {counts(accuracy)} held-out problems; tokens/step "
        f"at τ = 0.9; infilling = exact match of the masked span on {counts(infills)} problems (zero-shot, "
        f"oracle length)",
        seeds_note(runs)]), fontsize=8)
    save_figure(fig, out_png)


def counts(runs: list[dict]) -> str:
    """The runs' numbers of problems: "500", or "495-500" where they differ."""
    ns = sorted({m["n"] for m in runs if "n" in m})
    return "?" if not ns else f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"


def spread(runs: list[dict], key: str, fmt: str) -> str:
    """One table cell: the runs' (seeds') value of key, or their mean and [min, max] where they differ; ''
    when absent."""
    xs = [r[key] for r in runs if key in r]
    if not xs:
        return ""
    mean, lo, hi = mean_range(xs)
    return f"{mean:{fmt}}" if lo == hi else f"{mean:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def mean_range(xs: list[float]) -> tuple[float, float, float]:
    """(mean, min, max) of the seeds' values."""
    return sum(xs) / len(xs), min(xs), max(xs)


def plot_generation(plt, samples: dict, out_png: str, corpus: str = ""):
    """Two panels against tau, one line per checkpoint: generative perplexity (under the reference AR model,
    else under the Hugging Face LM, whichever every run has: perplexity_key) and tokens/step; the mean over
    seeds, their range as error bars, each checkpoint's points shifted a little sideways so that no bar hides
    another. tau is the x axis, so no point needs a label. The title names the corpus, the scorer and the
    runs."""
    every = [r for runs in samples.values() for r in runs]
    key = perplexity_key(samples)
    taus = sorted({-tau for _, _, tau in samples}, reverse=True)                 # inf first
    names = list(dict.fromkeys(label for _, label, _ in sorted(samples)))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), dpi=DPI, layout="constrained")
    runs = {}
    for i, label in enumerate(names):
        shift = (i - (len(names) - 1) / 2) * 0.06
        for ax, y in zip(axes, (key, "tokens_per_step")):
            pts = []
            for (_, name, tau), group in sorted(samples.items(), key=lambda kv: -kv[0][2], reverse=True):
                if name == label:
                    mean, lo, hi = mean_range([r[y] for r in group])
                    pts.append((taus.index(-tau) + shift, mean, mean - lo, hi - mean))
                    runs.setdefault(label, set()).update(r["file"] for r in group)
            xs, ys, lo, hi = zip(*pts)
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", capsize=3, markersize=5, label=label)
    for ax, ylabel in zip(axes, ("generative perplexity" + (" (HF)" if key == "gen_ppl_hf" else "")
                                 + ", lower is better", "tokens per step")):
        ax.set_xticks(range(len(taus)), ["∞" if t == math.inf else f"{t:g}" for t in taus])
        finish_axes(ax, "τ (confidence threshold)", ylabel)
    what = f"unconditional samples from BOS ({counts(every)} per point, batch 1)"
    title(fig, f"{corpus or 'a text corpus'}: {what}", f"scorer: {scorer_of(key, every)}", seeds_note(runs))
    save_figure(fig, out_png)


def perplexity_key(samples: dict) -> str | None:
    """The generative perplexity every unconditional run has (under the reference AR model first, else under
    the Hugging Face LM), or None."""
    every = [r for runs in samples.values() for r in runs]
    return next((k for k in ("gen_ppl", "gen_ppl_hf") if every and all(k in r for r in every)), None)


def scorer_of(key: str, runs: list[dict]) -> str:
    """Who scored the samples: the Hugging Face model, one AR checkpoint, or each run's own AR checkpoint."""
    if key == "gen_ppl_hf":
        return "generative perplexity under " + ", ".join(dict.fromkeys(str(r.get("ppl_model"))
                                                                        for r in runs))
    refs = list(dict.fromkeys(str(r.get("ref_ckpt")) for r in runs))
    beside = all(os.path.dirname(str(r.get("ref_ckpt"))) == os.path.dirname(r["ckpt"]) for r in runs)
    if len(refs) > 1 and beside:
        return f"generative perplexity under the AR checkpoint of the same training run ({', '.join(refs)})"
    return "generative perplexity under " + ", ".join(refs)


def infill(paths, out_md, mixed=False) -> str:
    """eval.py --task infill and rocstories runs (make infill, make infill-shakespeare, make reproduce-infill)
    as one markdown table: a row per span kind and checkpoint name (spans step, number, word, line, then
    ROCStories per sentences and recipe; methods in ORDER), with exact match, answer_right (the shipped
    task's step span), char accuracy and ROUGE (text spans, ROCStories), tokens/step and tokens/s at batch 1;
    a metric column no run has is left out. Runs of one checkpoint name in several folders (seeds) make one
    row: the mean, with [min, max] where the seeds differ. A ROCStories throughput run (eval.py
    --throughput-run, the official's timed run, scored by nothing) gives its row's tokens/step and tokens/s
    ("timed n" its count); the scores come from the runs that scored them (make reproduce-infill: all
    stories, untimed). A row's runs come from one commit unless mixed (one_commit)."""
    spans = ["step", "number", "operand", "verb", "word", "line", "rocstories"]   # the spans' order in the
                                                                                  # table
    scores = [("exact", "exact", ".3f"), ("answer_right", "answer_right", ".3f"),
              ("op_right", "op_right", ".3f"), ("char acc.", "char_accuracy", ".3f"),
              ("ROUGE-1", "rouge1", ".3f"), ("ROUGE-2", "rouge2", ".3f"), ("ROUGE-L", "rougeL", ".3f")]
    speed = [("tokens/step", "tokens_per_step", ".2f"), ("tokens/s (batch 1)", "tokens_per_s", ".1f")]
    groups = {}
    for path in paths:
        m = read_run(path, ("task", "model", "ckpt"))
        if m["task"] not in ("infill", "rocstories"):
            raise ValueError(f"{path}: a {m['task']} run, not an infill or rocstories run (eval.py --task "
                             f"infill)")
        check_keys(path, m, ("tokens_per_step", "tokens_per_s", "n"), "an infill")
        span = m.get("span", "step") if m["task"] == "infill" else "rocstories"
        if m["model"] not in ORDER or not isinstance(m["ckpt"], str) or span not in spans:
            raise ValueError(f"{path}: model {m['model']!r}, ckpt {m['ckpt']!r}, span {span!r}: not an "
                             f"eval.py --json file of an infill run")
        kind = (f"rocstories-{m.get('sentences', 1)} ({m.get('recipe', 'h100')})" if span == "rocstories"
                else span)
        key = (spans.index(span), kind, ORDER.index(m["model"]), label_of(m["ckpt"]))
        groups.setdefault(key, []).append(m)
    if not groups:
        raise ValueError("no eval.py --json file given")
    one_commit([(f"{kind} {label}", runs) for (_, kind, _, label), runs in groups.items()], mixed)
    parts = {k: split_timed(runs) for k, runs in groups.items()}
    columns = [c for c in scores if any(c[1] in r for scored, _ in parts.values() for r in scored)]
    timed = any(t for _, t in parts.values())
    head = (["span", "checkpoint"] + [name for name, _, _ in columns + speed] + ["n"] + ["timed n"] * timed
            + ["seeds"])
    body = [[kind, label] + [spread(scored, key, fmt) for _, key, fmt in columns]
            + [spread(t or scored, key, fmt) for _, key, fmt in speed] + [spread(scored, "n", ".0f")]
            + [spread(t, "n", ".0f")] * timed + [len(scored or t)]
            for (_, kind, _, label), (scored, t) in sorted(parts.items())]
    text = write(markdown_table(head, body), out_md, [m for runs in groups.values() for m in runs])
    print(text)
    return text


def label_of(ckpt: str) -> str:
    """A checkpoint's name in a table: a released key as it is, a folder by its last part."""
    return ckpt if ":" in ckpt else os.path.basename(ckpt.rstrip("/"))


def check_outputs(out_md: str, out_png: str | None, runs: list[str]):
    """Before any file is read or written: the table is a .md file (a forgotten OUT.md would make the first
    run the table), the plot's suffix a format matplotlib writes (matplotlib installed), and neither is one of
    the runs (ValueError, one line)."""
    if not out_md.lower().endswith(".md"):
        raise ValueError(f"{out_md}: the first argument is the markdown table to write (OUT.md), then the "
                         f"eval.py --json files: add the table's name first")
    if out_png:
        pyplot()
        figure_format(out_png, "--plot")
    for out, what in ((out_md, "the table"), (out_png, "--plot")):
        same = [r for r in runs
                if out and os.path.exists(out) and os.path.exists(r) and os.path.samefile(r, out)]
        if same:
            raise ValueError(f"{what} {out} is also a run to read ({same[0]}): give it another name, so that "
                             f"no input is written over")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", metavar="OUT.md", help="the markdown table to write")
    p.add_argument("runs", nargs="+", metavar="RUN.json", help="eval.py --json files")
    p.add_argument("--pareto", action="store_true",
                   help="merge the accuracy and throughput runs of a threshold sweep into a Pareto table")
    p.add_argument("--generation", action="store_true",
                   help="a corpus run: likelihood (bits/char) and unconditional (generative perplexity) "
                        "tables")
    p.add_argument("--infill", action="store_true",
                   help="infilling runs (eval.py --task infill, rocstories): exact match, char accuracy, "
                        "ROUGE-L, speed per span and checkpoint, seeds merged")
    p.add_argument("--sweep", action="store_true",
                   help="Set Diffusion's smax sweep: accuracy, tokens/step, likelihood and infilling per "
                        "checkpoint")
    p.add_argument("--plot", default=None, help="--pareto: accuracy vs tokens/step plot; --sweep: accuracy, "
                   "tokens/step and infilling vs smax; --generation: generative perplexity and tokens/step "
                   "vs tau (needs matplotlib)")
    p.add_argument("--paper", choices=["gsm8k"], default=None, help="--pareto: add the paper's numbers")
    p.add_argument("--mixed-commits", action="store_true",
                   help="merge into one row runs measured (or checkpoints trained) at different commits")
    args = p.parse_args(argv)
    try:
        if args.pareto + args.generation + args.infill + args.sweep > 1:
            raise ValueError("give one of --pareto, --generation, --infill and --sweep")
        if args.plot and not (args.pareto or args.generation or args.sweep):
            raise ValueError("--plot draws a --pareto, --sweep or --generation table's runs: add one, or "
                             "drop --plot")
        check_outputs(args.out, args.plot, args.runs)
        paths, mixed = distinct(args.runs), args.mixed_commits           # each run once
        if args.generation:
            return generation(paths, args.out, args.plot, mixed)
        if args.infill:
            return infill(paths, args.out, mixed)
        if args.sweep:
            return sweep(paths, args.out, args.plot, mixed)
        if args.pareto:
            paper = get_task(args.paper).PAPER_RESULTS if args.paper else None
            return summarize(paths, args.out, args.plot, paper, mixed)
        print(table(paths, args.out))
    except (OSError, ValueError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
