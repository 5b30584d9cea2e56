"""Zero-shot multiple choice: HellaSwag, PIQA and SIQA with the paper's OWT models (eval.py --task
hellaswag|piqa|siqa), as the official scripts/eval/mcqa_eval.py scores them (data/mcqa.py loads them).

For each option, x0 = prompt tokens (no BOS, cut from the left to fit L) + the option's tokens (" " + option),
then pad; the prompt is context (prompt_mask) and the option's tokens the targets; score = the method's NLL/NELBO
of the option (averaged over `samples` draws of t or of the order; the official uses 1) / its number of tokens;
the lowest score wins. The diffusion methods see the row padded to the model's L (the order schedule and t
blocks span L), AR to the longest row of the batch. Accuracy is reported with its standard error
sqrt(acc (1 - acc) / n). Tables of the eval.py --json files: python -m paper.results results/mcqa.md ...
"""
import math

import torch

from data import get_tokenizer, mcqa

MCQA = mcqa.NAMES


def family(tokenizer: str) -> str:
    return "bert" if tokenizer.startswith("bert") else tokenizer.split(":")[0]


def checked_tokenizer(config: dict, model, want: str, what: str):
    """The checkpoint's tokenizer when it is `want`'s family and matches the model's vocabulary, else a ValueError."""
    if family(config["tokenizer"]) != family(want):
        raise ValueError(f"{what} needs a model with the {want} tokenizer, but this checkpoint uses "
                         f"{config['tokenizer']} (a model of another family: use an OWT model for owt and MCQA, "
                         f"an LM1B model for lm1b)")
    tok = get_tokenizer(config["tokenizer"])
    if tok.vocab_size != model.cfg.vocab_size:
        raise ValueError(f"the model's vocabulary has {model.cfg.vocab_size} tokens but the {config['tokenizer']} "
                         f"tokenizer {tok.vocab_size}: wrong tokenizer for this checkpoint")
    return tok


def encode_options(tok, prompt: str, options: list[str], L: int) -> list[tuple[list, list]]:
    """(prompt ids cut from the left to fit, option ids) per option."""
    p, pairs = tok.encode(prompt), []
    for o in options:
        a = tok.encode(o if prompt.endswith((" ", "\n", "\t")) else " " + o)
        if not 0 < len(a) < L:
            raise ValueError(f"option {o[:40]!r} has {len(a)} tokens: it must have 1 to {L - 1}")
        pairs.append((p[len(p) - (L - len(a)):] if len(p) + len(a) > L else p, a))
    return pairs


@torch.no_grad()
def option_scores(model, method, cfg, tok, pairs, width: int, device, samples: int, generator,
                  exclusions="none") -> torch.Tensor:
    """NLL of each option given its prompt, averaged over `samples` draws, / its number of tokens: (R,).
    exclusions="official": a method with OFFICIAL_EXCLUDES (Set Diffusion) does not count pad-id (EOS) answer
    tokens, as the official eval."""
    R = len(pairs)
    x0 = torch.full((R, width), tok.pad_id, dtype=torch.long)                 # (R, width)
    prompt_mask = torch.zeros(R, width, dtype=torch.bool)
    pad_mask = torch.ones(R, width, dtype=torch.bool)
    for r, (p, a) in enumerate(pairs):
        x0[r, :len(p) + len(a)] = torch.tensor(p + a)
        prompt_mask[r, :len(p)], pad_mask[r, :len(p) + len(a)] = True, False
    x0, prompt_mask, pad_mask = x0.to(device), prompt_mask.to(device), pad_mask.to(device)
    extra = {"exclude": x0 == tok.pad_id} if exclusions == "official" and method.OFFICIAL_EXCLUDES else {}
    total = torch.zeros(R, device=device, dtype=torch.float64)
    for _ in range(samples):
        nll, _ = method.nll(model, x0, cfg, prompt_mask, pad_mask, generator=generator, **extra)
        total += nll.double()
    return total.cpu() / samples / torch.tensor([len(a) for _, a in pairs], dtype=torch.float64)


def evaluate_mcqa(model, method, cfg, tok, examples, seq_len: int, device, pad_to_length=True, batch_size=32,
                  samples=1, seed=0, exclusions="none") -> dict:
    """Accuracy (argmin of the length-normalised option NLL) and its standard error over the examples."""
    rows = [(i, pair) for i, ex in enumerate(examples)
            for pair in encode_options(tok, ex["prompt"], ex["options"], seq_len)]
    g = torch.Generator(device=device).manual_seed(seed)
    scores = []
    for s in range(0, len(rows), batch_size):
        pairs = [pair for _, pair in rows[s:s + batch_size]]
        width = seq_len if pad_to_length else max(len(p) + len(a) for p, a in pairs)
        scores += option_scores(model, method, cfg, tok, pairs, width, device, samples, g, exclusions).tolist()
    per_example = [[] for _ in examples]
    for (i, _), score in zip(rows, scores):
        per_example[i].append(score)
    hits = [min(range(len(sc)), key=sc.__getitem__) == ex["label"] for sc, ex in zip(per_example, examples)]
    n, acc = len(hits), sum(hits) / max(len(hits), 1)
    return {"accuracy": acc, "stderr": math.sqrt(acc * (1 - acc) / max(n, 1)), "n": n, "samples": samples,
            "options": len(rows), "batch_size": batch_size}


def evaluate(args, task_name: str, model, method, cfg, config: dict, device, exclusions: str) -> dict:
    """eval.py --task hellaswag|piqa|siqa: accuracy of the checkpoint on the task's validation questions."""
    if args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}")
    tok = checked_tokenizer(config, model, "gpt2", f"--task {task_name} (zero-shot, on the OWT models)")
    examples = mcqa.load(task_name, args.data_dir)
    examples = examples[:args.limit] if args.limit else examples
    print(f"{task_name}: {len(examples)} questions, batch size {args.batch_size} options, {args.samples} "
          f"sample(s) per option, dtype {next(model.parameters()).dtype}")
    return evaluate_mcqa(model, method, cfg, tok, examples, config["seq_len"], device,
                         not method.EXACT_NLL, args.batch_size, args.samples, args.seed, exclusions)
