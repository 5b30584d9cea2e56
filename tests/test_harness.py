"""lm-eval-harness on our checkpoints (paper/harness.py, eval.py --task lm-eval) offline, on local task YAMLs
over JSONL and conftest's text checkpoints: loglikelihood == our zero-shot MCQA scoring (AR: the naive
log-probs); AR's rolling loglikelihood == its exact NLL; generate_until stops at its strings; the table and
--json; the official GSM8K prompt and rewrite; our GSM8K scores == lm-eval's filters; bad input one line."""
import json
import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from common import checkpoint
import eval as evaluate
from data import gsm8k
from sampling import PaperMode, Settings
from helpers import METHODS, error_of
from paper import harness, zeroshot

Instance = pytest.importorskip("lm_eval.api.instance").Instance        # lm-eval: requirements-test.txt

L = 32                                                      # conftest's corpus_ckpts: their context
MC = [{"question": f"{i}. Now is the winter of our", "choices": ["discontent", "summer", "York;"],
       "label": i % 3}
      for i in range(4)]
TEXTS = ["Now is the winter", "made glorious summer by this sun of York; " * 2]    # one window, three windows
YAML = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
  cache_dir: {cache}
output_type: {kind}
test_split: test
{rest}"""
TASKS = {
    "tiny_mc": ("multiple_choice", 'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\n'
                                   'doc_to_target: "{{label}}"\nmetric_list:\n  - metric: acc\n'),
    "tiny_gen": ("generate_until", 'doc_to_text: "{{prompt}}"\ndoc_to_target: "{{target}}"\n'
                                   'generation_kwargs:\n  until: ["ee"]\n  max_gen_toks: 12\n'
                                   'metric_list:\n  - metric: exact_match\n'),
    "tiny_txt": ("loglikelihood_rolling", 'doc_to_text: ""\ndoc_to_target: "{{text}}"\nmetric_list:\n'
                                          '  - metric: bits_per_byte\n'),
}


def setup_of(corpus_ckpts, m: str, batch_size=3, **kw) -> harness.Setup:
    model, method, cfg, config = checkpoint.load(str(corpus_ckpts / m))
    tok = zeroshot.checked_tokenizer(config, model, config["tokenizer"], "test")
    return harness.Setup(model, method, cfg, tok, config, "cpu", batch_size,
                         **{"settings": Settings(mdlm_block=4, paper=PaperMode(seq_len=L)), **kw})


def request(kind: str, *args, doc=None, task=None) -> Instance:
    return Instance(kind, doc or {}, args, 0, (task, 0, 1))


def lls(corpus_ckpts, m, reqs, **kw) -> list[float]:
    return [ll for ll, _ in harness.loglikelihood(setup_of(corpus_ckpts, m, **kw), reqs)]


@pytest.fixture
def no_builtin_tasks(monkeypatch):
    """lm-eval's TaskManager without its ~15k built-in tasks (seconds of indexing): only --include-path's."""
    import lm_eval.tasks
    real = lm_eval.tasks.TaskManager
    monkeypatch.setattr(lm_eval.tasks, "TaskManager",
                        lambda include_path=None, **k: real(include_path=include_path,
                                                            include_defaults=False))


def write_tasks(d, gen_docs: list[dict]) -> str:
    """The three local tasks (YAML + JSONL) in folder d."""
    rows = {"tiny_mc": MC, "tiny_gen": gen_docs, "tiny_txt": [{"text": t} for t in TEXTS]}
    d.mkdir(exist_ok=True)
    for name, (kind, rest) in TASKS.items():
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[name]))
        (d / f"{name}.yaml").write_text(YAML.format(name=name, data=d / f"{name}.jsonl", cache=d / "hf",
                                                    kind=kind, rest=rest))
    return str(d)


# ----------------------------------------------------------------------------- loglikelihood

REQUESTS = [("0. Now is the", " winter"), ("Now", " is the winter of our"), ("", "Now"),
            ("3. Now is the winter of", " our discontent"), ("made glorious", " summer by this sun of York;")]


@pytest.mark.parametrize("m", list(METHODS))
def test_loglikelihood_is_our_zero_shot_scoring_whatever_the_batch_or_the_order(corpus_ckpts, m):
    """Each (context, continuation) is scored as zeroshot.option_scores scores an MCQA option (same batches,
    same seed): log p = -(NLL per token x tokens); a too-long context is cut from the left, an empty one is
    BOS; AR's is also the naive sum of log-probs, and is_greedy the naive argmax check. The same requests at
    batch 1, at batch 4 and shuffled get the same log p each: the diffusion bounds' noise is seeded per
    request, so equal to the bit (AR to float rounding of its padded batches), and a request twice in one
    batch gets the same number twice; --mc-samples K averages K different NELBO draws (the mean of the
    request's own K draws), batch 1 == batch 4."""
    s = setup_of(corpus_ckpts, m)
    long = "x" * 60
    args = [("0. Now is the", " winter"), ("Now", " is the winter of our"), ("", "Now"), (long, " York"),
            ("1. Now is the ", "winter")]        # trailing space: moves to the continuation
    got = harness.loglikelihood(s, [request("loglikelihood", *a) for a in args])
    enc = s.tok.encode_text
    pairs = [(enc("0. Now is the"), enc(" winter")), (enc("Now"), enc(" is the winter of our")),
             ([s.tok.eos_id], enc("Now")), (enc(long)[-(L - 5):], enc(" York")),
             (enc("1. Now is the"), enc(" winter"))]
    want = []
    for b in range(0, len(pairs), 3):
        batch = pairs[b:b + 3]
        width = max(len(p) + len(a) for p, a in batch) if m == "ar" else L
        per_token = zeroshot.option_scores(s.model, s.method, s.cfg, s.tok, batch, width, "cpu", 1, 0)
        want += (-(per_token * torch.tensor([len(a) for _, a in batch], dtype=torch.float64))).tolist()
    assert [ll for ll, _ in got] == want
    if m == "ar":
        with torch.no_grad():
            for (p, a), (ll, greedy) in zip(pairs, got):
                x = torch.tensor([p + a])
                logp = F.log_softmax(s.model(x[:, :-1]).double(), -1)[0, len(p) - 1:]        # (len(a), V)
                assert ll == pytest.approx(logp[torch.arange(len(a)), torch.tensor(a)].sum().item(), abs=1e-4)
                assert greedy == (logp.argmax(-1).tolist() == a)
    else:
        assert not any(greedy for _, greedy in got)
    reqs, order = [request("loglikelihood", *a) for a in REQUESTS], [3, 0, 4, 2, 1]
    alone, batched = lls(corpus_ckpts, m, reqs, batch_size=1), lls(corpus_ckpts, m, reqs, batch_size=4)
    shuffled = lls(corpus_ckpts, m, [reqs[i] for i in order], batch_size=4)
    twice = lls(corpus_ckpts, m, [reqs[1], reqs[1]], batch_size=4)
    unshuffled = [shuffled[order.index(i)] for i in range(len(reqs))]
    assert len(set(alone)) == len(alone)
    if m == "ar":
        assert batched == pytest.approx(alone, abs=1e-4) and unshuffled == pytest.approx(alone, abs=1e-4)
        return
    assert batched == alone and unshuffled == alone and twice == [alone[1], alone[1]]
    four = lls(corpus_ckpts, m, reqs, batch_size=4, samples=4)
    assert four == lls(corpus_ckpts, m, reqs, batch_size=1, samples=4) and four != batched
    p, a = pairs[1]                              # K = 4: the mean of the request's 4 draws, per answer token
    x0 = torch.full((4, L), s.tok.pad_id)
    x0[:, :len(p) + len(a)] = torch.tensor(p + a)
    cols = torch.arange(L).expand(4, L)
    g = torch.Generator().manual_seed(zeroshot.request_seed(0, p, a, 0))
    with torch.no_grad():
        draws = s.method.nll(s.model, x0, s.cfg, cols < len(p), cols >= len(p) + len(a), generator=g)[0]
    assert len(set(draws.tolist())) == 4
    assert zeroshot.option_scores(s.model, s.method, s.cfg, s.tok, [(p, a)], L, "cpu", 4, 0).item() == \
        pytest.approx(draws.double().mean().item() / len(a), rel=1e-12)
    assert lls(corpus_ckpts, m, reqs, batch_size=4, seed=1) != batched       # another seed moves K = 1


def test_rolling_loglikelihood_of_ar_is_its_exact_nll(corpus_ckpts):
    """AR: log p of a text = sum over chunks of L - 1 targets (after a BOS) of the exact log-probs, each
    target seen from the window of up to L tokens that ends with its chunk (lm-eval's rolling windows)."""
    s = setup_of(corpus_ckpts, "ar")
    got = harness.loglikelihood_rolling(s, [request("loglikelihood_rolling", t) for t in TEXTS])
    with torch.no_grad():
        for text, ll in zip(TEXTS, got):
            ids = [s.tok.eos_id] + list(text.encode())
            want = 0.0
            for start in range(1, len(ids), L - 1):
                end = min(start + L - 1, len(ids))
                lo = max(end - L, 0)
                x = torch.tensor([ids[lo:end]])
                logp = F.log_softmax(s.model(x[:, :-1]).double(), -1)[0]                   # (end - lo - 1, V)
                want += sum(logp[j - lo - 1, ids[j]].item() for j in range(start, end))
            assert ll == pytest.approx(want, abs=1e-4)
    assert len(harness.rolling_windows(s.tok, TEXTS[1], L)) == 3


# ----------------------------------------------------------------------------- generate_until

@pytest.mark.parametrize("m", list(METHODS))
def test_generate_until_stops_at_the_until_strings(corpus_ckpts, m, monkeypatch):
    """A reply with `until` is the unstopped reply cut before the first until string, and its row stopped
    there (fewer new tokens than max_gen_toks)."""
    s = setup_of(corpus_ckpts, m)
    n_gen, real = [], harness.respond

    def spy(*a, **k):
        texts, stats, sec = real(*a, **k)
        n_gen.append(stats["n_gen"].tolist())
        return texts, stats, sec
    monkeypatch.setattr(harness, "respond", spy)
    prompts = ["0. Now is the", "1. Now is the winter"]
    free = harness.generate_until(s, [request("generate_until", p, {"until": [], "max_gen_toks": 16})
                                      for p in prompts])
    u = free[0][2:4]                                                # two characters the unstopped reply holds
    cut = harness.generate_until(s, [request("generate_until", p, {"until": ["never said", u],
                                                                   "max_gen_toks": 16})
                                     for p in prompts])
    assert cut == [r.split(u)[0] for r in free] and len(cut[0]) <= 2
    assert n_gen[0] == [16, 16] and n_gen[1][0] < 16


def test_generation_fits_the_context(corpus_ckpts, monkeypatch):
    """The prompt keeps its last L - min(N, L/2) tokens, N is cut to L - prompt, a task's max_gen_toks wins
    over setup.max_new, an empty context is a BOS."""
    s = setup_of(corpus_ckpts, "ar", settings=Settings(5, mdlm_block=4, paper=PaperMode(seq_len=L)))
    seen = []
    monkeypatch.setattr(harness, "respond",
                        lambda *a, **k: (seen.append((a[5], a[7].max_new_tokens)),
                                         ([""] * len(a[5]), {}, 0))[1])
    harness.generate_until(s, [request("generate_until", "y" * 100, {"until": ["\n"], "max_gen_toks": 40}),
                               request("generate_until", "y" * 100, {"until": ["\n"]}),
                               request("generate_until", "", {"until": "\n", "max_gen_toks": 3})])
    assert [(len(ids[0]), n) for ids, n in seen] == [(L - L // 2, L // 2), (L - 5, 5), (1, 3)]
    assert seen[2][0] == [[s.tok.eos_id]]


# ----------------------------------------------------------------------------- eval.py --task lm-eval

@pytest.mark.parametrize("m", list(METHODS))
def test_eval_lm_eval_equals_our_scores(corpus_ckpts, m, tmp_path, capsys, monkeypatch, no_builtin_tasks):
    """eval.py --task lm-eval --limit 3 --num-fewshot 0 (both handed to lm-eval) on a multiple-choice, a
    generate_until and a perplexity task: a table row per task and metric; acc == the argmax of our
    loglikelihoods on the first 3 documents, exact_match == 2/3 when two of the three targets are our replies,
    bits_per_byte == -(sum of our rolling log p) / bytes / ln 2; --tasks takes globs as lm-eval's CLI."""
    import lm_eval.evaluator
    import lm_eval.tasks
    seen, real = {}, lm_eval.evaluator.simple_evaluate
    monkeypatch.setattr(lm_eval.evaluator, "simple_evaluate", lambda **k: (seen.update(k), real(**k))[1])
    s = setup_of(corpus_ckpts, m, batch_size=2)
    prompts = [f"{i}. Now is the" for i in range(4)]
    replies = harness.generate_until(s, [request("generate_until", p, {"until": ["ee"], "max_gen_toks": 12})
                                         for p in prompts])
    include = write_tasks(tmp_path / "tasks", [{"prompt": p, "target": r if i < 2 else r + "#"}
                                               for i, (p, r) in enumerate(zip(prompts, replies))])
    tasks = ["--tasks", "tiny_mc,tiny_gen,tiny_txt", "--include-path", include]
    evaluate.main(["--ckpt", str(corpus_ckpts / m), "--task", "lm-eval", *tasks, "--batch-size", "2",
                   "--mdlm-block", "4", "--device", "cpu", "--limit", "3", "--num-fewshot", "0", "--json",
                   str(tmp_path / "m.json"), "--replies", str(tmp_path / "r.jsonl")])
    assert seen["limit"] == 3 and seen["num_fewshot"] == 0 and seen["log_samples"]
    logged = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]   # --replies:
    counts = json.loads((tmp_path / "m.json").read_text())["n_samples"]                      # each document
    assert sorted((r["task"], r["index"]) for r in logged) == [(t, i) for t in sorted(counts)
                                                                for i in range(counts[t]["effective"])]
    gen = [r for r in logged if r["task"] == "tiny_gen"]
    assert [r["resps"][0][0] for r in gen] == replies[:3] and [r["scores"]["exact_match"] for r in gen] == \
        [1.0, 1.0, 0.0]
    table = capsys.readouterr().out
    assert f"| {m} | tiny_mc | none | acc |" in table and f"| {m} | tiny_txt | none | bits_per_byte |" in \
        table
    out = json.loads((tmp_path / "m.json").read_text())
    res = out["results"]
    assert out["n_samples"]["tiny_mc"]["effective"] == 3
    ll = harness.loglikelihood(s, [request("loglikelihood", d["question"], " " + c)
                                   for d in MC[:3] for c in d["choices"]])
    hits = [max(range(3), key=lambda c: ll[3 * i + c][0]) == d["label"] for i, d in enumerate(MC[:3])]
    assert res["tiny_mc"]["acc,none"] == sum(hits) / 3 and res["tiny_gen"]["exact_match,none"] == 2 / 3
    rolling = harness.loglikelihood_rolling(s, [request("loglikelihood_rolling", t) for t in TEXTS])
    want = -sum(rolling) / sum(len(t.encode()) for t in TEXTS) / math.log(2)
    assert res["tiny_txt"]["bits_per_byte,none"] == pytest.approx(want, rel=1e-12)
    tm = lm_eval.tasks.TaskManager(include_path=include)
    assert harness.expand(["tiny_m*", "tiny_txt", "tiny_*"], tm) == ["tiny_mc", "tiny_txt", "tiny_gen"]


# ----------------------------------------------------------------------------- GSM8K

def test_official_gsm8k_prompt_stop_and_rewrite(corpus_ckpts, monkeypatch):
    """A GSM8K checkpoint on lm-eval's gsm8k: the paper's chat prompt from the document's question, GSM8K's
    own stop rule, the reply rewritten as the official script does; other tasks and checkpoints keep the
    context."""
    s = setup_of(corpus_ckpts, "ar")
    s.config = {**s.config, "data": "gsm8k", "seq_len": 1024}         # the prompt whole (generation is faked)
    seen = []

    def fake(model, method, cfg, tok, rule, prompts, *a, **k):
        seen.append((rule, prompts))
        return ["so $\\boxed{18}$. Question: next"] * len(prompts), {}, 0
    monkeypatch.setattr(harness, "respond", fake)
    doc = {"question": "Janet has 3 ducks.", "answer": "3 + 15 = 18\n#### 18"}
    got = harness.generate_until(s, [request("generate_until", "Question: Janet has 3 ducks.\nAnswer:",
                                             {"until": ["Question:"]}, doc=doc, task=t)
                                     for t in ("gsm8k", "other")])
    assert got == ["so #### 18", "so $\\boxed{18}$. "]
    assert s.official == {("gsm8k", 0): ("so $\\boxed{18}$. Question: next", True)}   # the printed accuracy
    assert seen[0][0] is gsm8k and seen[0][1] == [s.tok.encode(gsm8k.make_prompt(doc["question"]))]
    assert seen[1][1] == [s.tok.encode_text("Question: Janet has 3 ducks.\nAnswer:")]


REPLIES = ["so the answer is $\\boxed{18}$.", "#### 1,080", "The answer is 72.", "no number here",
           "\\boxed{-3}", "boxed{12.50} dollars", "$\\boxed{18.00}$", "It is 18.\nQuestion: what is 5?",
           "\\boxed{\\frac{1}{2}}", "costs $1,234 in total", "Answer: 7 then 8", "\\boxed{18",
           "<|im_end|> 18", "#### 72.", "-3 degrees"]
GOLDS = ["18", "1,080", "72", "5", "-3", "12.50", "18", "18", "0.5", "1234", "8", "18", "18", "72", "-3"]


def test_gsm8k_scores_equal_lm_eval_filters():
    """data/gsm8k.py's strict_match / flexible_match of a reply == lm-eval's gsm8k 'strict-match' /
    'flexible-extract' filters (read from lm-eval's own gsm8k.yaml) then its exact_match with the yaml's
    settings, on the official rewrite of the same reply, against GSM8K's whole solution."""
    import lm_eval.tasks
    import yaml
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.filters import build_filter_ensemble
    with open(os.path.join(os.path.dirname(lm_eval.tasks.__file__), "gsm8k", "gsm8k.yaml")) as f:
        spec = yaml.safe_load(f)
    metric = {k: v for k, v in spec["metric_list"][0].items() if k in ("regexes_to_ignore", "ignore_case",
                                                                         "ignore_punctuation")}
    solutions = [f"Some reasoning.\n#### {g}" for g in GOLDS]
    ours = {"strict-match": gsm8k.strict_match, "flexible-extract": gsm8k.flexible_match}
    assert [f["name"] for f in spec["filter_list"]] == list(ours)
    for f in spec["filter_list"]:
        ensemble = build_filter_ensemble(f["name"], [(c["function"],
                                                      {k: v for k, v in c.items() if k != "function"})
                                                     for c in f["filter"]])
        insts = [Instance("generate_until", {}, ("", {}), 0, ("gsm8k", i, 1)) for i in range(len(REPLIES))]
        for inst, r in zip(insts, REPLIES):
            inst.resps = [gsm8k.harness_rewrite(r)]
        ensemble.apply(insts)
        theirs = [bool(exact_match_hf_evaluate([i.filtered_resps[f["name"]]], [s], **metric)["exact_match"])
                  for i, s in zip(insts, solutions)]
        assert [ours[f["name"]](r, gsm8k.gold_answer(s)) for r, s in zip(REPLIES, solutions)] == theirs
        assert any(theirs) and not all(theirs)


def official_printed(result: str, doc_answer: str) -> bool:
    """The official printed accuracy, its lines transcribed (setdlms 549f0bb scripts/eval/harness_eval.py
    ~502-528; lm-eval's gsm8k `until`, then <|eot_id|> and the Qwen tokenizer's EOS)."""
    for until in ["Question:", "</s>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>"]:
        if until:
            result = result.split(until)[0]
    predicted_ans = None
    if "boxed{" in result:
        predicted_ans = result.split("boxed{")[1].split("}")[0]
    ground_truth_ans = doc_answer.split("### ")[1]
    return predicted_ans is not None and ground_truth_ans == predicted_ans


def test_gsm8k_official_match_is_the_printed_accuracy():
    """data/gsm8k.py's official_match == the official lines on every reply above and the three the lenient
    rule counts ('\\boxed{1,080}', '\\boxed{1080.00}', '\\boxed{\\$1080}' against 1080), against GSM8K's whole
    solution; the answer it compares is the one the official rewrite writes after '#### '."""
    replies = REPLIES + ["\\boxed{1,080}", "\\boxed{1080.00}", "\\boxed{\\$1080}", "$\\boxed{1080}$ dollars",
                         "\\boxed{72}<|endoftext|>\\boxed{5}"]
    golds = GOLDS + ["1080"] * 4 + ["72"]
    solutions = [f"Some reasoning.\n#### {g}" for g in golds]
    theirs = [official_printed(r, s) for r, s in zip(replies, solutions)]
    assert [gsm8k.official_match(r, gsm8k.gold_answer(s)) for r, s in zip(replies, solutions)] == theirs
    assert theirs[-5:] == [False, False, False, True, True] and any(theirs[:len(REPLIES)])
    assert [gsm8k.is_correct(r, "1080") for r in replies[-5:-2]] == [True] * 3      # ours counts them
    for r in replies:                                           # the rewrite: '#### ' + the compared text
        if "boxed{" in r.split("<|im_end|>")[0]:
            assert gsm8k.harness_rewrite(r).endswith("#### " + r.split("boxed{")[1].split("}")[0]
                                                     .replace("$\\", ""))


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("flags, case, message", [
    ("--task lm-eval", "", "needs --tasks"),
    ("--tasks x", "", "--tasks does not apply to the checkpoint's own task (no --task): it goes with --task "
                      "lm-eval"),
    ("--task lm-eval --tasks x --include-path {t}/f.yaml", "", "is not a folder"),
    ("--task lm-eval --tasks x --num-fewshot -1", "", "--num-fewshot"),
    ("--task lm-eval --tasks tiny_mc,nope --include-path {inc}", "", "nope is not an lm-eval task"),
    # a multiple-choice target outside its choices: lm-eval would count it wrong, quietly
    ("--task lm-eval --tasks tiny_* --include-path {inc}", "label 5", "=lm-eval task tiny_mc: document 1's "
     "target 5 is none of its 3 choices (an index in [0, 3) or a choice's text): fix its data or its "
     "doc_to_target (--include-path)"),
    ("--task lm-eval --tasks tiny_txt,tiny_mc --include-path {inc}", "label + 10", "=lm-eval task tiny_mc: "
     "document 0's target is an index outside its choices (lm-eval's IndexError as it builds the task from "
     "that document): fix its data or its doc_to_target (--include-path)"),
    ("--task lm-eval --tasks tiny_txt,tiny_mc --include-path "
     "{inc}", "typo", "^lm-eval task tiny_mc: its YAML "
                                                                             "template fails"),
    ("--task lm-eval --tasks tiny_mc", "no lm_eval", "pip install"),
])
def test_bad_lm_eval_input_is_one_line(corpus_ckpts, tmp_path, monkeypatch, no_builtin_tasks, flags, case,
                                       message):
    """(= the whole line; ^ its start, naming the task; else a part of it)"""
    (tmp_path / "f.yaml").write_text("")
    include = write_tasks(tmp_path / "tasks", [{"prompt": "a", "target": "b"}])
    if case == "label 5":                                          # document 1's label outside its choices
        (tmp_path / "tasks" / "tiny_mc.jsonl").write_text("".join(
            json.dumps({**r, "label": 5 if i == 1 else r["label"]}) + "\n" for i, r in enumerate(MC)))
    elif case in ("typo", "label + 10"):               # a misspelt field; an index built outside the choices
        yaml = tmp_path / "tasks" / "tiny_mc.yaml"     # (lm-eval's IndexError)
        yaml.write_text(yaml.read_text().replace(*{"typo": ("{{question}}", "{{questoin}}"),
                                                   "label + 10": ("{{label}}", "{{label + 10}}")}[case]))
    elif case == "no lm_eval":
        monkeypatch.setitem(sys.modules, "lm_eval", None)
    argv = ["--ckpt", str(corpus_ckpts / "ar"), "--device", "cpu",
            *flags.format(t=tmp_path, inc=include).split()]
    got = error_of(evaluate.main, argv)
    if message[0] == "=":
        assert got == "error: " + message[1:]
    elif message[0] == "^":
        assert got.startswith("error: " + message[1:]) and "questoin" in got
    else:
        assert message in got and "tiny_mc" not in got
