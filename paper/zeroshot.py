"""Zero-shot multiple choice: HellaSwag, PIQA and SIQA with the paper's OWT models (eval.py --task
hellaswag|piqa|siqa), as the official scripts/eval/mcqa_eval.py scores them (data/mcqa.py loads them).

For each option, x0 = prompt tokens (no BOS, cut from the left to fit L) + the option's tokens (" " + option),
then pad; the prompt is context (prompt_mask) and the option's tokens the targets; score = the method's
NLL/NELBO of the option (averaged over --mc-samples draws of t or of the order; the official uses 1, its
num_importance_samples) / its number of tokens; the lowest score wins. A request's noise is seeded from its
own tokens (option_scores), so scores and accuracy do not move with --batch-size or the order of the questions
(the official draws MDLM/BD3-LM's t from the global generator, one t shared by a question's options).
The diffusion methods see the row padded to the model's L (the order schedule and t blocks span L), AR to the
longest row of the batch. Accuracy is reported with its standard error
sqrt(acc (1 - acc) / n). Tables of the eval.py --json files: python -m paper.results results/mcqa.md ...
"""
import hashlib
import math
import sys

import torch

from data import get_tokenizer, mcqa

MCQA = mcqa.NAMES


def family(tokenizer: str) -> str:
    return "bert" if tokenizer.startswith("bert") else tokenizer.split(":")[0]


def checked_tokenizer(config: dict, model, want: str, what: str):
    """The checkpoint's tokenizer when it is `want`'s family and the model scores all its ids, else a
    ValueError. The model may have more rows than the tokenizer has ids: Qwen3's 151936 for 151669 ids."""
    if family(config["tokenizer"]) != family(want):
        raise ValueError(f"{what} needs a model with the {want} tokenizer, but this checkpoint uses "
                         f"{config['tokenizer']} (a model of another family: use an OWT model for owt and "
                         f"MCQA, an LM1B model for lm1b)")
    tok = get_tokenizer(config["tokenizer"])
    if tok.vocab_size > model.cfg.vocab_size:
        raise ValueError(f"the model's vocabulary has {model.cfg.vocab_size} tokens but the "
                         f"{config['tokenizer']} tokenizer {tok.vocab_size}: wrong tokenizer for this "
                         f"checkpoint")
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


MC_CHUNK = 16     # NELBO draws of one request scored in one forward (a fixed size: batching moves nothing)


def request_seed(seed: int, prompt: list, answer: list, chunk: int = 0) -> int:
    """The noise seed of one scored request: a hash (blake2b) of the run's seed, the request's token ids and
    the chunk of draws, so that a request draws the same noise alone, in any batch and in any order (the
    official harness_eval.py seeds its generations from a hash of the prompt the same way)."""
    payload = f"{seed}|{','.join(map(str, prompt))}|{','.join(map(str, answer))}|{chunk}".encode()
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little") >> 1


@torch.no_grad()
def option_scores(model, method, cfg, tok, pairs, width: int, device, samples: int = 1, seed: int = 0,
                  exclusions="none") -> torch.Tensor:
    """NLL of each option given its prompt / its number of tokens: (R,). AR (EXACT_NLL): exact, the rows in
    one forward. The diffusion bounds: the mean of `samples` NELBO draws (of t, or of the order; the official
    mcqa_eval.py's num_importance_samples, 1), drawn for each request from its own generators (request_seed),
    MC_CHUNK copies of its row per forward: a request's score does not depend on its batch, its neighbours or
    its place. exclusions="official": a method with OFFICIAL_EXCLUDES (Set Diffusion) does not count pad-id
    (EOS) answer tokens, as the official eval."""
    R = len(pairs)
    x0 = torch.full((R, width), tok.pad_id, dtype=torch.long)                 # (R, width)
    prompt_mask = torch.zeros(R, width, dtype=torch.bool)
    pad_mask = torch.ones(R, width, dtype=torch.bool)
    for r, (p, a) in enumerate(pairs):
        x0[r, :len(p) + len(a)] = torch.tensor(p + a)
        prompt_mask[r, :len(p)], pad_mask[r, :len(p) + len(a)] = True, False
    x0, prompt_mask, pad_mask = x0.to(device), prompt_mask.to(device), pad_mask.to(device)
    extra = {"exclude": x0 == tok.pad_id} if exclusions == "official" and method.OFFICIAL_EXCLUDES else {}
    if method.EXACT_NLL:                                       # no noise: every draw is the same
        total = method.nll(model, x0, cfg, prompt_mask, pad_mask, **extra)[0].double()
    else:
        total = torch.zeros(R, device=device, dtype=torch.float64)
        for r, (p, a) in enumerate(pairs):
            for c in range(0, samples, MC_CHUNK):                            # draws c.. in one forward
                k = min(MC_CHUNK, samples - c)
                g = torch.Generator(device=device).manual_seed(request_seed(seed, p, a, c // MC_CHUNK))
                x, pm, pd = (t[r:r + 1].repeat(k, 1) for t in (x0, prompt_mask, pad_mask))
                more = {name: t[r:r + 1].repeat(k, 1) for name, t in extra.items()}
                total[r] += method.nll(model, x, cfg, pm, pd, generator=g, **more)[0].double().sum()
        total /= samples
    return total.cpu() / torch.tensor([len(a) for _, a in pairs], dtype=torch.float64)


def evaluate_mcqa(model, method, cfg, tok, examples, seq_len: int, device, pad_to_length=True, batch_size=32,
                  samples=1, seed=0, exclusions="none") -> dict:
    """Accuracy (argmin of the length-normalised option NLL) and its standard error over the examples."""
    rows = [(i, pair) for i, ex in enumerate(examples)
            for pair in encode_options(tok, ex["prompt"], ex["options"], seq_len)]
    from tqdm import tqdm
    scores = []
    for s in tqdm(range(0, len(rows), batch_size), desc="options", unit="batch", file=sys.stderr,
                  disable=None, dynamic_ncols=True):
        pairs = [pair for _, pair in rows[s:s + batch_size]]
        width = seq_len if pad_to_length else max(len(p) + len(a) for p, a in pairs)
        scores += option_scores(model, method, cfg, tok, pairs, width, device, samples, seed,
                                exclusions).tolist()
    per_example = [[] for _ in examples]
    for (i, _), score in zip(rows, scores):
        per_example[i].append(score)
    hits = [min(range(len(sc)), key=sc.__getitem__) == ex["label"] for sc, ex in zip(per_example, examples)]
    n, acc = len(hits), sum(hits) / max(len(hits), 1)
    return {"accuracy": acc, "stderr": math.sqrt(acc * (1 - acc) / max(n, 1)), "n": n, "samples": samples,
            "options": len(rows), "batch_size": batch_size}


def evaluate(args, task_name: str, model, method, cfg, config: dict, device, exclusions: str) -> dict:
    """eval.py --task hellaswag|piqa|siqa: accuracy of the checkpoint on the task's validation questions."""
    tok = checked_tokenizer(config, model, "gpt2", f"--task {task_name} (zero-shot, on the OWT models)")
    examples = mcqa.load(task_name, args.data_dir)
    examples = examples[:args.limit] if args.limit else examples
    print(f"{task_name}: {len(examples)} questions, batch size {args.batch_size} options, {args.samples} "
          f"sample(s) per option, dtype {next(model.parameters()).dtype}")
    return evaluate_mcqa(model, method, cfg, tok, examples, config["seq_len"], device,
                         not method.EXACT_NLL, args.batch_size, args.samples, args.seed, exclusions)
