"""lm-eval-harness (EleutherAI's lm-evaluation-harness, 0.4.x) on any checkpoint of any method:

    python eval.py --ckpt CKPT --task lm-eval --tasks NAME[,NAME] [--include-path DIR] [--num-fewshot K]
        [--limit N]

lm-eval is optional: it is imported only here, only for --task lm-eval (pip install "lm-eval>=0.4.9,<0.5").
The harness asks a model three things (lm_eval.api.model.LM); each runs through the checkpoint's own method:

    loglikelihood(context, continuation) -> (log p, is_greedy). The context's trailing whitespace moves to the
        continuation (as lm-eval's HF model does); context ids (a BOS = EOS when empty, cut from the left to
        fit L) and continuation ids are scored by zeroshot.option_scores exactly as the official zero-shot
        MCQA scores an option: AR exact (rows padded to the batch's longest), MDLM/BD3-LM the NELBO, Set
        Diffusion one order (rows padded to L); --mc-samples NELBO draws averaged (default 1, the official
        zero-shot's), each request's noise seeded from its own tokens (zeroshot.request_seed: the same log p
        alone, in any batch, in any order); log p = -(NLL per token x tokens). is_greedy: AR, whether
        every continuation token is the argmax; the diffusion bounds name no greedy string: False.
    loglikelihood_rolling(text) -> log p: the text after a BOS, in disjoint windows of L - 1 targets each
        after the token before it (the last window after as many as fit L: lm-eval's
        get_rolling_token_windows with context 1, as its HF model), each window a (context, continuation)
        pair scored as above; AR's is the exact NLL of those windows.
    generate_until(context, {until, max_gen_toks}) -> reply: generate.generate, the batched samplers with
        --threshold, --window, --commit-order, --temperature, --mdlm-block, --official, and a stop rule
        that ends a row once its decided reply holds an `until` string (or EOS); the reply is cut there. N =
        the task's max_gen_toks (else --max-new-tokens, config.json's sampler entry, 64); the prompt keeps its
        last L - min(N, L/2) tokens and N is cut to L - prompt (the official GSM8K accuracy runner:
        N = L - P).

GSM8K as the official harness_eval.py runs it: a checkpoint trained on gsm8k, on lm-eval's `gsm8k` task, gets
the paper's chat prompt rebuilt from the document's question (data/gsm8k.make_prompt; the harness's few-shot
context is not used), the official stop rule (data/gsm8k.stop, --stop-on-im-end) and its reply rewritten as
the official script rewrites it (data/gsm8k.harness_rewrite) before lm-eval's strict-match / flexible-extract
filters score it.

    check_args(args)                        the flags, before anything is loaded
    run(args, model, method, ...)           lm_eval.simple_evaluate on the checkpoint -> table head, rows,
                                            metrics
    harness_lm(setup)                       the lm_eval LM over a Setup (a loaded checkpoint and its settings)
"""
import os
import sys
import dataclasses
from dataclasses import dataclass, field
from importlib.metadata import version
from types import SimpleNamespace

import torch

from common.cli import check_nonnegative
from data import gsm8k
from common.metrics import respond
from sampling import Settings
from paper import zeroshot

MISSING = "--task lm-eval needs lm-eval 0.4.x, an optional dependency: pip install \"lm-eval>=0.4.9,<0.5\""
HEAD = ["model", "task", "filter", "metric", "value", "stderr", "n"]


@dataclass
class Setup:
    """A loaded checkpoint and the settings the harness's requests run with."""
    model: object
    method: object                   # ar, mdlm, bd3lm or setdiffusion (the module)
    cfg: object                      # its config dataclass
    tok: object
    config: dict                     # the checkpoint's config.json
    device: object = "cpu"
    batch_size: int = 32             # requests scored / generated at once
    samples: int = 1                 # NELBO draws (t or orders) per continuation (--mc-samples); the
                                     # official: 1
    seed: int = 0
    exclusions: str = "none"         # "official": Set Diffusion's NLL skips pad-id targets
                                     # (zeroshot.option_scores)
    settings: Settings = field(default_factory=Settings)   # the sampler's; its max_new_tokens when a task
                                                           # gives none
    stop_opts: dict = field(default_factory=dict)   # GSM8K's stop rule options ({"im_end": True})
    official: dict = field(default_factory=dict)    # (task, doc_id) -> (raw reply, official_match) of each
                                                    # official GSM8K request (its printed accuracy)


# ----------------------------------------------------------------------------- flags and lm-eval itself

def lm_eval_version() -> str:
    """The installed lm-eval's version, checked to be 0.4.x (ValueError: one line naming the install
    command)."""
    try:
        import lm_eval
    except ImportError:
        raise ValueError(MISSING) from None
    found = getattr(lm_eval, "__version__", None) or version("lm_eval")
    if not found.startswith("0.4."):
        raise ValueError(f"{MISSING} (found lm-eval {found})")
    return found


def task_names(tasks: str) -> list[str]:
    return [n.strip() for n in (tasks or "").split(",") if n.strip()]


def check_args(args):
    """eval.py's lm-eval flags, before anything is loaded (ValueError: one line); lm-eval installed, 0.4.x."""
    flags = {"--tasks": args.tasks, "--include-path": args.include_path, "--num-fewshot": args.num_fewshot}
    if args.task != "lm-eval":
        given = [f for f, v in flags.items() if v is not None]
        if given:
            raise ValueError(f"{given[0]} goes with --task lm-eval")
        return
    if not task_names(args.tasks):
        raise ValueError("--task lm-eval needs --tasks NAME[,NAME]: lm-eval task names, or those of the task "
                         "YAML files in --include-path DIR")
    if args.include_path is not None and not os.path.isdir(args.include_path):
        raise ValueError(f"--include-path {args.include_path} is not a folder (it should hold lm-eval task "
                         f"YAML files)")
    if args.num_fewshot is not None:
        check_nonnegative("--num-fewshot", args.num_fewshot)
    lm_eval_version()


def task_manager(names: list[str], include_path: str | None):
    """lm-eval's TaskManager knowing every name: the --include-path folder alone when its YAML files define
    them all (indexing lm-eval's ~15k built-in tasks takes seconds), else lm-eval's tasks and the folder. An
    unknown name is a ValueError naming it."""
    from lm_eval.tasks import TaskManager
    if include_path:
        tm = TaskManager(include_path=include_path, include_defaults=False)
        if all(tm.match_tasks([n]) for n in names):
            return tm
    tm = TaskManager(include_path=include_path)
    unknown = [n for n in names if not tm.match_tasks([n])]
    if unknown:
        where = (f" nor in --include-path {include_path}" if include_path
                 else " (local YAML tasks: --include-path DIR)")
        raise ValueError(f"--tasks: {', '.join(unknown)} is not an lm-eval task: not among lm-eval's "
                         f"{len(tm.all_tasks)} tasks and groups{where}")
    return tm


def expand(names: list[str], tm) -> list[str]:
    """--tasks as lm-eval is to run them: a glob pattern (tiny_*, which lm-eval's own command line takes)
    replaced by the names it matches, in order, each once."""
    out = []
    for n in names:
        for m in [n] if n in tm.all_tasks else sorted(tm.match_tasks([n])):
            out += [m] if m not in out else []
    return out


def leaf_tasks(tasks: dict):
    """The Task objects of get_task_dict's result (groups are dicts of their tasks)."""
    for v in tasks.values():
        yield from leaf_tasks(v) if isinstance(v, dict) else [v] if hasattr(v, "OUTPUT_TYPE") else []


def check_targets(names: list[str], tm, limit: int):
    """Refuse (ValueError, one line) a multiple-choice task with a document whose target is none of its
    choices (an index outside them, or a text not among them), in the documents --limit evaluates: lm-eval
    would count it wrong with a warning lost in its log, or fail."""
    from lm_eval.tasks import get_task_dict
    try:
        tasks = get_task_dict(names, tm)
    except IndexError:      # lm-eval reads a task's first document as it builds it: its target, an int,
        bad = ", ".join(failing(names, tm, IndexError) or names)        # indexes the choices unchecked
        raise ValueError(f"lm-eval task {bad}: document 0's target is an index outside its choices "
                         f"(lm-eval's IndexError as it builds the task from that document): fix its data or "
                         f"its doc_to_target (--include-path)") from None
    for task in leaf_tasks(tasks):
        if task.OUTPUT_TYPE != "multiple_choice" or task.multiple_input:
            continue
        for i, doc in enumerate(task.eval_docs):
            if limit and i >= limit:
                break
            choices, gold = task.doc_to_choice(doc), task.doc_to_target(doc)
            ok = range(len(choices))
            bad = [g for g in (gold if isinstance(gold, list) else [gold])
                   if not (isinstance(g, int) and g in ok or isinstance(g, str) and g in choices)]
            if bad:
                raise ValueError(f"lm-eval task {task.config.task}: document {i}'s target {bad[0]!r} is none "
                                 f"of its {len(choices)} choices (an index in [0, {len(choices)}) or a "
                                 f"choice's text): fix its data or its doc_to_target (--include-path)")


# ----------------------------------------------------------------------------- loglikelihood

def encode_pair(tok, context: str, continuation: str, L: int) -> tuple[list, list]:
    """(context ids, continuation ids) of one request: the context's trailing whitespace moved to the
    continuation (lm-eval's HF model does the same), both encoded as data text (no special tokens), an empty
    context a BOS (EOS), the context cut from the left so that both fit L."""
    n = len(context) - len(context.rstrip())
    context, continuation = context[:len(context) - n], context[len(context) - n:] + continuation
    p, a = tok.encode_text(context) or [tok.eos_id], tok.encode_text(continuation)
    if not 0 < len(a) < L:
        raise ValueError(f"continuation {continuation[:40]!r} has {len(a)} tokens: it must have 1 to {L - 1}")
    return p[max(len(p) + len(a) - L, 0):], a


def pair_nll(setup: Setup, pairs: list) -> torch.Tensor:
    """The NLL (AR exact, else the method's bound) of each pair's continuation given its context, summed over
    its tokens: (R,) float64. zeroshot.option_scores in batches of batch_size (AR's rows padded to the batch's
    longest, the diffusion methods' to L, as zeroshot.evaluate_mcqa), each request's noise from its own
    seed."""
    from tqdm import tqdm
    out = [torch.zeros(0, dtype=torch.float64)]
    for s in tqdm(range(0, len(pairs), setup.batch_size), desc="loglikelihood", unit="batch", file=sys.stderr,
                  disable=None, dynamic_ncols=True):
        batch = pairs[s:s + setup.batch_size]
        width = max(len(p) + len(a) for p, a in batch) if setup.method.EXACT_NLL else setup.config["seq_len"]
        per_token = zeroshot.option_scores(setup.model, setup.method, setup.cfg, setup.tok, batch, width,
                                           setup.device, setup.samples, setup.seed, setup.exclusions)   # (b,)
        out.append(per_token * torch.tensor([len(a) for _, a in batch], dtype=torch.float64))
    return torch.cat(out)


@torch.no_grad()
def ar_greedy(setup: Setup, pairs: list) -> list[bool]:
    """AR: whether greedy decoding from each pair's context gives its whole continuation."""
    greedy = []
    for s in range(0, len(pairs), setup.batch_size):
        batch = pairs[s:s + setup.batch_size]
        x = torch.full((len(batch), max(len(p) + len(a) for p, a in batch)), setup.tok.pad_id)    # (b, W)
        for r, (p, a) in enumerate(batch):
            x[r, :len(p) + len(a)] = torch.tensor(p + a)
        # (b, W - 1): column j predicts j + 1
        pred = setup.model(x[:, :-1].to(setup.device)).argmax(-1).cpu()
        greedy += [pred[r, len(p) - 1:len(p) + len(a) - 1].tolist() == a for r, (p, a) in enumerate(batch)]
    return greedy


def loglikelihood(setup: Setup, requests) -> list[tuple[float, bool]]:
    """lm-eval's loglikelihood: (log p of the continuation, is_greedy) per (context, continuation) request."""
    pairs = [encode_pair(setup.tok, *r.args, setup.config["seq_len"]) for r in requests]
    nll = pair_nll(setup, pairs)
    greedy = ar_greedy(setup, pairs) if setup.method.EXACT_NLL and pairs else [False] * len(pairs)
    return [(-float(x), bool(gr)) for x, gr in zip(nll, greedy)]


def rolling_windows(tok, text: str, L: int) -> list[tuple[list, list]]:
    """The text's (context, targets) windows: a BOS (EOS) then the text, L - 1 targets per window, each
    window's context the one token before it, the last window's as many as fit (lm-eval's rolling windows,
    context length 1): every row fits L."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
    windows = get_rolling_token_windows(token_list=tok.encode_text(text), prefix_token=tok.eos_id,
                                        max_seq_len=L - 1, context_len=1)
    return [make_disjoint_window(w) for w in windows]


def loglikelihood_rolling(setup: Setup, requests) -> list[float]:
    """lm-eval's loglikelihood_rolling: log p of each whole text, the sum over its windows (perplexity
    tasks)."""
    windows = [rolling_windows(setup.tok, r.args[0], setup.config["seq_len"]) for r in requests]
    nll = pair_nll(setup, [w for ws in windows for w in ws]).tolist()
    out, k = [], 0
    for ws in windows:
        out.append(-sum(nll[k:k + len(ws)]))
        k += len(ws)
    return out


# ----------------------------------------------------------------------------- generate_until

def official_gsm8k(setup: Setup, request) -> bool:
    """A GSM8K checkpoint on lm-eval's gsm8k task: prompt, stop rule and reply as the official
    harness_eval.py."""
    return (setup.config["data"] == "gsm8k" and request.task_name == "gsm8k"
            and "question" in (request.doc or {}))


def until_rule(tok, until: tuple):
    """A stop rule for generate.stop_rule: a row is finished once its decided reply holds an `until` string or
    the EOS text."""
    stops = (*until, tok.enc.decode([tok.eos_id]))
    return SimpleNamespace(is_finished=lambda text: any(u in text for u in stops))


def cut(text: str, until: tuple) -> str:
    """The reply before the first occurrence of each until string (as lm-eval's HF model cuts it)."""
    for u in until:
        text = text.split(u, 1)[0]
    return text


def generation_requests(setup: Setup, requests) -> dict:
    """The requests grouped by (official GSM8K?, until strings, new tokens N): {key: [(index, prompt ids)]}.
    N = max_gen_toks (else setup.settings.max_new_tokens); the prompt keeps its last L - min(N, L/2) tokens;
    N <= L - prompt."""
    L, groups = setup.config["seq_len"], {}
    for i, r in enumerate(requests):
        context, kw = r.args
        until = kw.get("until") or []
        until = (until,) if isinstance(until, str) else tuple(until)
        max_new = int(kw.get("max_gen_toks") or setup.settings.max_new_tokens)
        gsm = official_gsm8k(setup, r)
        ids = setup.tok.encode(gsm8k.make_prompt(r.doc["question"])) if gsm else \
            (setup.tok.encode_text(context) or [setup.tok.eos_id])
        ids = ids[max(len(ids) - (L - min(max_new, L // 2)), 0):]
        groups.setdefault((gsm, until, min(max_new, L - len(ids))), []).append((i, ids))
    return groups


def generate_until(setup: Setup, requests) -> list[str]:
    """lm-eval's generate_until: one reply per (context, gen_kwargs) request, through the method's batched
    sampler, stopped at (and cut before) the request's until strings; official GSM8K replies rewritten."""
    replies = [""] * len(requests)
    for (gsm, until, n), items in generation_requests(setup, requests).items():
        rule = gsm8k if gsm else until_rule(setup.tok, until)
        for s in range(0, len(items), setup.batch_size):
            chunk = items[s:s + setup.batch_size]
            settings = dataclasses.replace(setup.settings, max_new_tokens=n)
            texts, _, _ = respond(setup.model, setup.method, setup.cfg, setup.tok, rule,
                                  [ids for _, ids in chunk],
                                  setup.device, settings, setup.seed + s, setup.stop_opts if gsm else None)
            for (i, _), text in zip(chunk, texts):
                replies[i] = gsm8k.harness_rewrite(text) if gsm else cut(text, until)
                if gsm:                 # the official printed accuracy, on the reply before its rewrite
                    r = requests[i]
                    setup.official[(r.task_name, r.doc_id)] = (
                        text, gsm8k.official_match(text, gsm8k.gold_answer(r.doc["answer"])))
    return replies


# ----------------------------------------------------------------------------- lm-eval's model and run

def harness_lm(setup: Setup):
    """An lm_eval.api.model.LM whose three request types run through setup's checkpoint (lm-eval imported
    here)."""
    from lm_eval.api.model import LM

    class Checkpoint(LM):
        def loglikelihood(self, requests, disable_tqdm=False):
            return loglikelihood(setup, requests)

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            return loglikelihood_rolling(setup, requests)

        def generate_until(self, requests, disable_tqdm=False):
            return generate_until(setup, requests)
    return Checkpoint()


def plain(v):
    """A result value as JSON and the table take it: numpy scalars as Python numbers."""
    return v.item() if hasattr(v, "item") else v


def result_rows(out: dict, model_name: str) -> list[list]:
    """One row per task, filter and metric of simple_evaluate's results (HEAD: model, task, filter, metric,
    value, stderr, n)."""
    rows = []
    for task, res in out["results"].items():
        n = out.get("n-samples", {}).get(task, {}).get("effective", "")
        for key, value in res.items():
            if "," not in key or "_stderr," in key:
                continue
            metric, filt = key.split(",", 1)
            rows.append([model_name, task, filt, metric, plain(value),
                         plain(res.get(f"{metric}_stderr,{filt}", "")), n])
    return rows


def failing(names: list[str], tm, error: type) -> list[str]:
    """The tasks of names whose building alone raises error (lm-eval renders a task's first document as it
    builds it)."""
    from lm_eval.tasks import get_task_dict
    bad = []
    for name in names:
        try:
            get_task_dict([name], tm)
        except error:
            bad.append(name)
    return bad


def template_error(names: list[str], tm, error) -> str:
    """The line for a task YAML whose Jinja template fails on a document (jinja2's TemplateError: a field the
    documents lack): the task (lm-eval renders a document when it builds a task) and jinja2's message, which
    names the field."""
    from jinja2 import TemplateError
    bad = failing(names, tm, TemplateError)
    return (f"lm-eval task {', '.join(bad or names)}: its YAML template fails on a document "
            f"({error.message or error}): a field the template names is not in the task's data; fix the YAML "
            f"(--include-path) or the data")


def run(args, model, method, cfg, config: dict, device, exclusions: str, settings: Settings) -> tuple:
    """eval.py --task lm-eval: lm_eval.simple_evaluate of args.tasks on the checkpoint (--num-fewshot, --limit
    per task, --batch-size, --mc-samples, --seed, the sampler flags). Returns (HEAD, rows, metrics for
    --json)."""
    version = lm_eval_version()
    from jinja2 import TemplateError                  # lm-eval's templates are Jinja (a dependency of
                                                      # lm-eval)
    from lm_eval.evaluator import simple_evaluate
    tm = task_manager(task_names(args.tasks), args.include_path)
    names = expand(task_names(args.tasks), tm)
    tok = zeroshot.checked_tokenizer(config, model, config["tokenizer"], "--task lm-eval")
    setup = Setup(model, method, cfg, tok, config, device, args.batch_size, args.samples, args.seed,
                  exclusions, settings, {"im_end": True} if args.stop_on_im_end else {})
    print(f"lm-eval {version}: {', '.join(names)}, batch size {args.batch_size}, "
          f"dtype {next(model.parameters()).dtype}")
    try:
        check_targets(names, tm, args.limit)
        out = simple_evaluate(model=harness_lm(setup), tasks=names, num_fewshot=args.num_fewshot,
                              limit=args.limit or None, task_manager=tm, batch_size=args.batch_size,
                              log_samples=bool(args.replies))
    except OSError as e:          # the Hub unreachable, a data file missing (datasets' errors are OSErrors)
        first = (str(e).splitlines() or [""])[0][:200]
        raise RuntimeError(f"lm-eval could not load the data of {', '.join(names)} ({type(e).__name__}: "
                           f"{first}); a task reads the Hugging Face Hub unless its YAML names local "
                           f"files") from None
    except TemplateError as e:    # a doc_to_text / doc_to_target / doc_to_choice naming a missing field
        raise ValueError(template_error(names, tm, e)) from None
    results = {t: {k: plain(v) for k, v in res.items()} for t, res in out["results"].items()}
    official = {}                                  # the official printed accuracy of each official GSM8K task
    for (task, _), (_, right) in setup.official.items():
        official.setdefault(task, []).append(right)
    m = {"tasks": names, "lm_eval": version, "num_fewshot": args.num_fewshot, "limit": args.limit,
         "samples": args.samples, "threshold": settings.threshold, "window": settings.setdiffusion_window,
         "max_new_tokens": settings.max_new_tokens,
         "results": results, "n_samples": out.get("n-samples", {}),
         **({"official_accuracy": {t: sum(v) / len(v) for t, v in official.items()}} if official else {}),
         "records": sample_records(out.get("samples", {}), setup.official)}
    return HEAD, result_rows(out, config["method"]), m


def sample_records(samples: dict, official: dict) -> list[dict]:
    """lm-eval's logged samples (simple_evaluate's log_samples) as eval.py --replies writes them, one per
    document of each task: its prompt (the request's context; an official GSM8K one, the reply before the
    official rewrite and its printed-accuracy verdict too), the replies lm-eval scored, its filtered answers
    and its metrics (one record per filter of a document, as lm-eval logs them)."""
    records = []
    for task, docs in samples.items():
        for d in docs:
            args = d.get("arguments") or [[""]]
            raw = official.get((task, d.get("doc_id")))
            records.append({"task": task, "index": d.get("doc_id"), "filter": d.get("filter"),
                            "prompt": args[0][0],
                            **({"reply": raw[0]} if raw else {}),
                            "resps": d.get("resps"), "filtered": d.get("filtered_resps"),
                            "answer": d.get("target"),
                            "scores": {**{k: plain(d[k]) for k in d.get("metrics", []) if k in d},
                                       **({"official_accuracy": raw[1]} if raw else {})}})
    return records
