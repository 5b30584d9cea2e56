"""Batch-1 throughput of several checkpoints and thresholds measured together, so that their tokens/s compare
(make pareto's speed column):

    python -m paper.speed out/pareto/ar out/pareto/setdiffusion@0.9 out/pareto/setdiffusion@0.8 \
        --limit 55 --rounds 3 --out results/pareto

Each RUN is CKPT (its config.json's threshold) or CKPT@TAU. On a shared machine, runs timed one after the
other see different loads (this repo once read Set Diffusion at 1137 tokens/s at tau 0.8 and 737 at tau 0.9,
the opposite of their tokens/step), so common/throughput.py decodes every measured prompt with every run in
turn, `--rounds` times over, and each run reports its median round with the rounds' range. Each run is
written as <out>/<checkpoint folder>-<tau>-tput.json in eval.py --task throughput's format (python -m
paper.results --pareto reads it; with the environment that measured it); the table is printed.
"""
import argparse
import math
import os
import sys

from common import checkpoint
from common.cli import check_nonnegative, check_positive, pick_device
from data import get_task, get_tokenizer, is_corpus, sampler_preset
from sampling import PaperMode, Settings, check_threshold
from common.metrics import markdown_table, run_record, window_used
from common.runs import environment
from common.throughput import interleaved_throughput


def parse_run(spec: str) -> tuple[str, float | None]:
    """CKPT or CKPT@TAU -> (ckpt, tau or None); a bad tau is a ValueError naming the run."""
    ckpt, _, tau = spec.rpartition("@") if "@" in spec else (spec, "", "")
    if not tau:
        return ckpt, None
    try:
        return ckpt, check_threshold(float(tau), f"run {spec}: threshold")
    except ValueError as e:
        raise ValueError(f"run {spec}: the part after @ must be a threshold in (0, 1] or inf ({e})") from None


def build_runs(specs: list[str], device: str, max_new: int) -> tuple[dict, dict]:
    """({name: run for interleaved_throughput}, {name: the eval.py JSON fields of that run}); each checkpoint
    is loaded once, however many thresholds it runs at. All runs must share one task (the same prompts)."""
    loaded, runs, records = {}, {}, {}
    for spec in specs:
        ckpt, tau = parse_run(spec)
        if ckpt not in loaded:
            loaded[ckpt] = checkpoint.load(ckpt, device)
        model, method, cfg, config = loaded[ckpt]
        if is_corpus(config["data"]):
            raise ValueError(f"{ckpt} was trained on the corpus {config['data']}: "
                             f"throughput needs a task's prompts")
        tau = tau if tau is not None else config.get("sampler", {}).get("threshold", math.inf)
        tok = get_tokenizer(config["tokenizer"])
        window = window_used(0, method, cfg)
        settings = Settings(max_new, tau, setdiffusion_window=window,
                            paper=PaperMode(seq_len=config["seq_len"],
                                            options=sampler_preset(config["data"], tok, method)))
        name = f"{os.path.basename(os.path.normpath(ckpt))}-{tau:g}"
        if name in runs:
            raise ValueError(f"run {spec} is given twice")
        runs[name] = {"model": model.eval(), "method": method, "cfg": cfg, "tok": tok, "task": config["data"],
                      "data_options": config.get("data_options"), "settings": settings}
        records[name] = run_record(config, ckpt, "throughput", tau, window)
    if len({r["task"] for r in runs.values()}) > 1:
        raise ValueError("the runs' checkpoints were trained on different tasks: compare runs of one task")
    return runs, records


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="CKPT or CKPT@TAU")
    p.add_argument("--limit", type=int, default=55,
                   help="the first N test prompts (the first --warmup untimed)")
    p.add_argument("--warmup", type=int, default=5, help="prompts decoded by every run before timing")
    p.add_argument("--rounds", type=int, default=3, help="times every run decodes the measured prompts")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--device", default="auto", help="cuda, mps, cpu or auto")
    p.add_argument("--data-dir", default=None, help="local folder with the task's train/test .jsonl")
    p.add_argument("--out", default=None, help="folder for one eval.py-format JSON per run")
    args = p.parse_args(argv)
    try:
        for flag in ("limit", "rounds", "max_new_tokens"):
            check_positive("--" + flag.replace("_", "-"), getattr(args, flag))
        check_nonnegative("--warmup", args.warmup)
        if args.out and not os.path.isdir(args.out):
            raise ValueError(f"--out {args.out} is not a folder: create it first")
        device = pick_device(args.device)
        runs, records = build_runs(args.runs, device, args.max_new_tokens)
        first = next(iter(runs.values()))
        task = get_task(first["task"], first["data_options"])
        prompts = [e["prompt"] for e in task.load("test", args.data_dir)[:args.limit]]
        for r in runs.values():
            r["task"] = task
        m = interleaved_throughput(runs, prompts, device, args.warmup, args.rounds)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    head = ["run", "tokens/s (median round)", "range over rounds", "tokens/step", "rounds", "prompts"]
    print(markdown_table(head, [[n, f"{r['tokens_per_s']:.1f}", f"[{r['tokens_per_s_min']:.1f}, "
                                 f"{r['tokens_per_s_max']:.1f}]", f"{r['tokens_per_step']:.2f}", r["rounds"],
                                 r["n"]]
                                for n, r in m.items()]))
    for name, r in m.items():
        if args.out:
            with open(os.path.join(args.out, f"{name}-tput.json"), "w") as f:
                checkpoint.json_dump({**records[name], **r, "environment": environment(device)}, f,
                                     indent=2)
    return m


if __name__ == "__main__":
    main()
