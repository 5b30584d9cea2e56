"""CNN/DM, ROCStories infilling, the shipped task's infill spans and unconditional samples, end to end on tiny
checkpoints (conftest's random_ckpts) and tiny data files in the real formats."""
import importlib.util
import json
import math
import os
import sys

import pytest

import eval as evaluate
import train
from data import arith, byte_tokenizer, cnndm, rocstories, sampler_preset
from helpers import METHODS, STORY, TINY, error_of, eval_json, write_cloze
from sampling import PaperMode, Settings
from paper import infill

TOK = byte_tokenizer()
needs_rouge = pytest.mark.skipif(importlib.util.find_spec("rouge_score") is None,
                                 reason="rouge-score (test-only) is not installed")
ARTICLE = "The council voted on Monday to build a new bridge over the river, officials said."
HIGHLIGHTS = "Council votes for a new bridge."


# ----------------------------------------------------------------------------- CNN/DailyMail

def write_cnndm(d, n=2):
    import datasets
    rows = {"article": [ARTICLE * (i + 1) for i in range(n)], "highlights": [HIGHLIGHTS] * n,
            "id": [str(i) for i in range(n)]}
    os.makedirs(d / "3.0.0", exist_ok=True)
    for split in ("train", "test"):
        datasets.Dataset.from_dict(rows).to_parquet(str(d / "3.0.0" / f"{split}-00000-of-00001.parquet"))


def test_cnndm_example_layout_truncation_preset_and_official_options(monkeypatch):
    """The prompt cut to MAX_SOURCE tokens, the official model shape, and the official sampler options
    threaded per method (HF-generate AR penalises the prompt too)."""
    from model import PRESETS, ModelConfig
    monkeypatch.setattr(cnndm, "MAX_SOURCE", 20)
    ex = cnndm.make_example(TOK, ARTICLE, HIGHLIGHTS * 20)
    assert (ex["prompt"] == "<|endoftext|>" + ARTICLE[:18] + "<|endoftext|>"
            and len(TOK.encode(ex["prompt"])) == 20)
    assert ex["target"].startswith("Summary: Council") and len(TOK.encode(ex["target"])) == 179  # + EOS = 180
    test = cnndm.make_example(TOK, ARTICLE, HIGHLIGHTS, eval_prompt=True)
    assert test["prompt"].endswith("<|endoftext|>Summary:") and test["target"] == " " + HIGHLIGHTS
    c = ModelConfig(**PRESETS["cnndm"])
    assert (c.n_layer, c.n_embd, c.intermediate_size, c.n_head, c.head_dim, c.n_kv_head, c.vocab_size) == \
        (28, 256, 768, 16, 128, 8, 151936) and c.tie_embeddings and c.rope_theta == 1e6
    opt = sampler_preset("cnndm", TOK, METHODS["setdiffusion"][0])
    assert (opt.repetition_penalty, opt.length_penalty, opt.eos_id, opt.penalize_context) == (
        1.2, (80, 1.1), 256, False)
    assert sampler_preset("cnndm", TOK, METHODS["ar"][0]).penalize_context
    owt = sampler_preset("owt", TOK, METHODS["ar"][0]), sampler_preset("owt", TOK, METHODS["bd3lm"][0])
    assert [(o.top_p, o.repetition_penalty, o.stop_confidence) for o in owt] == [(0.9, 1.0, 0.005),
                                                                                 (0.95, 1.05, 0.01)]


@needs_rouge
def test_cnndm_stop_rule_and_rouge():
    # the official pattern r'<|endoftext|>' (a YAML plain scalar) is r'< | endoftext | >': one "endoftext" in
    # the reply is the third match once the prompt's BOS and EOS gave two
    assert not cnndm.is_finished("Summary: a bridge <b> is")
    assert cnndm.is_finished("Summary: a bridge.<|endoftext|>")
    assert cnndm.is_finished("it's r'<")
    prompt = TOK.encode(cnndm.make_example(TOK, ARTICLE, HIGHLIGHTS, eval_prompt=True)["prompt"])
    assert not cnndm.stop(prompt + TOK.encode(" a bridge") + [TOK.mask_id] * 3, TOK)
    assert cnndm.stop(prompt + TOK.encode(" a bridge") + [TOK.eos_id, TOK.mask_id], TOK)
    assert cnndm.strip_target_prompt(" Summary: a b<|endoftext|>c") == "a b"
    pred = "Summary: council votes for bridge"
    r1, r2, rl = (cnndm.SCORES[k](pred, HIGHLIGHTS) for k in ("rouge1", "rouge2", "rougeL"))
    assert r1 == pytest.approx(2 * 1 * 4 / 6 / (1 + 4 / 6))      # all 4 unigrams in the 6 of the reference
    # 2 of 3 bigrams
    assert r2 == pytest.approx(2 * 2 / 3 * 2 / 5 / (2 / 3 + 2 / 5)) and rl == pytest.approx(r1)
    with pytest.raises(FileNotFoundError, match="parquet"):
        cnndm.load("test", "/nonexistent", TOK)


@needs_rouge
def test_cnndm_corpus_scores_on_literal_strings():
    """corpus_scores = the official seq2seq_eval metrics, by hand. ROUGE (bootstrap mid F over 2 examples =
    their mean): "the cat sat" vs "the cat sat on the mat": P 1, R 1/2 -> F 2/3 (ROUGE-1, L, Lsum); bigrams
    P 1, R 2/5 -> F 4/7; the other pair shares nothing. Lsum splits sentences at newlines: "a b\nc d" vs
    "c d\na b" has LCS 2 of 4 (L: F 1/2) but every sentence matched (Lsum: F 1). BLEU is corpus-level: all
    n-gram precisions 1, brevity penalty exp(1 - 11/10) over both pairs (the per-pair mean would be higher);
    the first corpus has no 4-gram in its predictions, so BLEU 0 (no effective order, as evaluate's
    default)."""
    preds = ["Summary: the cat sat<|endoftext|>junk", "x y"]
    refs = ["the cat sat on the mat", "a b c"]
    got = cnndm.corpus_scores(preds, refs)
    want = {"rouge1": (2 / 3) / 2, "rouge2": (4 / 7) / 2, "rougeL": (2 / 3) / 2, "rougeLsum": (2 / 3) / 2}
    assert {k: got[k] for k in want} == pytest.approx(want)
    lsum = cnndm.corpus_scores(["c d\na b"], ["a b\nc d"])
    assert (lsum["rougeL"], lsum["rougeLsum"]) == pytest.approx((0.5, 1.0))
    assert cnndm.SCORES["rougeLsum"]("c d\na b", "a b\nc d") == pytest.approx(1.0)       # per example too
    bleu = cnndm.corpus_scores(["the cat sat on the mat", "x y z w"],
                               ["the cat sat on the mat today", "x y z w"])
    if importlib.util.find_spec("sacrebleu") is None:                                     # optional package
        assert "bleu" not in bleu and "bleu" not in got
        return
    assert bleu["bleu"] == pytest.approx(100 * math.exp(1 - 11 / 10))
    one = cnndm.corpus_scores(["the cat sat on the mat"], ["the cat sat on the mat today"])["bleu"]
    assert one == pytest.approx(100 * math.exp(1 - 7 / 6)) and got["bleu"] == pytest.approx(0.0)
    assert cnndm.corpus_scores([], []) == {}



@needs_rouge
def test_cnndm_train_and_eval_end_to_end(tmp_path, monkeypatch, capsys):
    write_cnndm(tmp_path / "cnn")
    monkeypatch.setattr(cnndm, "TOKENIZER", "bytes")
    ckpt = str(tmp_path / "ck")
    train.main(["--model", "setdiffusion", "--data", "cnndm", "--data-dir", str(tmp_path / "cnn"),
                "--seq-len", "224", "--out-dir", ckpt, *TINY, "--eval-limit", "2", "--max-iters", "2"])
    m = eval_json(tmp_path, ["--ckpt", ckpt, "--task", "cnndm", "--data-dir", str(tmp_path / "cnn"),
                             "--max-new-tokens", "8"])
    assert m["task"] == "cnndm" and m["n"] == 2 and all(0 <= m[k] <= 1 for k in ("rouge1", "rouge2",
                                                                                 "rougeL"))
    assert "held-out rouge1" in capsys.readouterr().out
    assert eval_json(tmp_path, ["--ckpt", ckpt, "--task", "throughput", "--data-dir", str(tmp_path / "cnn"),
                                "--warmup", "1", "--max-new-tokens", "8"])["n"] == 1   # 2 articles, 1 warm-up


# ----------------------------------------------------------------------------- ROCStories

@needs_rouge
def test_rocstories_load_and_spans(tmp_path):
    """BOS + left + span + right + EOS is the whole story, the span 1 or 3 middle sentences."""
    write_cloze(tmp_path)
    stories = rocstories.load("test", str(tmp_path))
    assert stories == [STORY, STORY]
    one, three = (rocstories.examples(TOK, stories, s)[0] for s in (1, 3))
    assert one["answer"] == STORY[2] and three["answer"] == " ".join(STORY[1:4])
    for ex in (one, three):
        assert TOK.decode(ex["left"] + ex["span"] + ex["right"]) == " ".join(STORY)
        assert ex["left"][0] == ex["right"][-1] == TOK.eos_id


@needs_rouge
@pytest.mark.parametrize("name, sentences, recipe", [
    ("ar", 3, "h100"), ("mdlm", 1, "suite"), ("bd3lm", 3, "h100"), ("setdiffusion", 1, "h100"),
    ("setdiffusion", 3, "suite")])
def test_rocstories_eval_every_method(tmp_path, random_ckpts, capsys, name, sentences, recipe):
    """MDLM and BD3-LM in paper mode (--official: their official infilling fills the whole span); each of the
    official's two recipes; --replies holds each scored story (its ROUGE == the metric's mean)."""
    write_cloze(tmp_path)
    official = ["--official"] if name in ("mdlm", "bd3lm") else []
    m = eval_json(tmp_path, ["--ckpt", str(random_ckpts / name), "--task", "rocstories", "--sentences",
                             str(sentences), "--data-dir", str(tmp_path), "--warmup", "1", *official,
                             "--recipe", recipe, "--replies", str(tmp_path / "r.jsonl")])
    assert m["n"] == 1 and 0 <= m["rougeL"] <= 1 and m["tokens_per_s"] > 0 and m["official"] == bool(official)
    assert (m["recipe"], m["sentences"], m["warmup"]) == (recipe, sentences, 1)
    assert ("AR cannot infill: it continues from the left context only" in capsys.readouterr().out) == (
        name == "ar")
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [1]
    assert records[0]["answer"] == (STORY[2] if sentences == 1 else " ".join(STORY[1:4]))
    assert records[0]["scores"] == {k: m[k] for k in ("rouge1", "rouge2", "rougeL")}


def test_rocstories_recipes_are_the_officials_two(random_ckpts, monkeypatch):
    """h100 (the H100 wrapper): penalty 1.2, the visible context counted (the pad id by AR alone); suite (the
    suite runner's rows): 1.1 for one sentence, 1.5 for three, the right context neither counted nor, for Set
    Diffusion, seen: its sampler is given the left context alone and fills the span's length after it, where
    the h100 recipe's and MDLM's under the suite's get the whole story with the span's [MASK]s."""
    from common import checkpoint
    want = {("h100", 1): 1.2, ("h100", 3): 1.2, ("suite", 1): 1.1, ("suite", 3): 1.5}
    ex = rocstories.examples(TOK, [STORY], 1)[0]
    story = ex["left"] + [TOK.mask_id] * len(ex["span"]) + ex["right"]
    for name in ("ar", "mdlm", "setdiffusion"):
        model, method, cfg, _ = checkpoint.load(str(random_ckpts / name))
        for (recipe, sentences), penalty in want.items():
            o = rocstories.sampler_options(TOK, method, sentences, recipe)
            context = recipe == "h100" or name in ("ar", "setdiffusion")        # the left context counted
            pad = -1 if name == "ar" or (recipe, name) == ("suite", "setdiffusion") else TOK.pad_id
            assert (o.repetition_penalty, o.penalize_context, o.pad_id) == (penalty, context, pad)
        given, real = [], method.generate
        monkeypatch.setattr(method, "generate", lambda m, p, c, s, *a, **k: (given.append(
            (p[0].tolist(), s.max_new_tokens)), real(m, p, c, s, *a, **k))[1])
        for recipe in ("h100", "suite"):
            options = rocstories.sampler_options(TOK, method, 1, recipe)
            settings = Settings(0, math.inf, paper=PaperMode(options=options))
            infill.infill(model, method, cfg, TOK, ex, "cpu", settings,
                          rocstories.RECIPES[recipe]["right_cached"])
        alone = (ex["left"], len(ex["span"]))
        assert given == [alone, alone] if name == "ar" else [(story, 0), alone] if name == "setdiffusion" \
            else [(story, 0), (story, 0)], name


@needs_rouge
@pytest.mark.parametrize("case, message", [
    ("no csv", "rochester.edu"),                                        # no CSV: where to get it
    ("long", "more than the model's context (seq_len=128)"),            # the span does not fit the canvas
    ("no rouge", "error: ROUGE needs the rouge-score package: pip install rouge-score")])   # the whole line
def test_rocstories_bad_input_is_one_line(tmp_path, random_ckpts, monkeypatch, case, message):
    if case != "no csv":
        write_cloze(tmp_path)
    if case == "long":
        text = (tmp_path / rocstories.FILE).read_text().replace("She fed it fish.", "She fed it fish. " * 20)
        (tmp_path / rocstories.FILE).write_text(text)
    if case == "no rouge":
        monkeypatch.setitem(sys.modules, "rouge_score", None)              # as if not installed
    got = error_of(evaluate.main, ["--ckpt", str(random_ckpts / "mdlm"), "--task", "rocstories", "--data-dir",
                                   str(tmp_path)])
    assert message in got and (case != "no csv" or rocstories.FILE in got)
    assert case != "no rouge" or got == message


# ----------------------------------------------------------------------------- the shipped task's spans

def test_arith_step_and_number_items_rebuild_the_problem_and_score():
    """step: the 2nd of 2 or 3 steps, the 3rd of 4 (the right answer scored apart); number: the starting
    amount, which only the reply reveals."""
    examples = arith.load("test")[:50]
    items, scores = infill.arith_items(examples, TOK, "step"), infill.SPAN_SCORES["step"]
    for ex, it in zip(examples, items):
        assert TOK.decode(it["left"] + it["span"] + it["right"][:-1]) == ex["prompt"] + ex["target"]
        assert scores["exact"](it["step"], it) and scores["answer_right"](it["step"], it)
        a, rest = it["step"].split("=")
        assert not scores["answer_right"](a + "=" + str(int(rest[:-1]) + 1) + ".", it)
    assert {len(it["before"]) for it in items} == {1, 2}
    for ex, it in zip(examples, infill.arith_items(examples, TOK, "number")):
        assert TOK.decode(it["left"] + it["span"] + it["right"][:-1]) == ex["prompt"] + ex["target"]
        number, left = TOK.decode(it["span"]), TOK.decode(it["left"])
        assert it["right"][-1] == TOK.eos_id and left.endswith(" has ") and number.isdigit()
        assert ex["target"].startswith(number) and number not in left
        assert infill.SPAN_SCORES["number"]["exact"](number, it)
        assert not infill.SPAN_SCORES["number"]["exact"](str(int(number) + 1), it)
    with pytest.raises(ValueError, match="--span word: the shipped arith task masks a reasoning step, a "
                                         "number, an operand or a verb"):
        infill.arith_items(examples, TOK, "word")


def test_arith_operand_and_verb_items_mask_what_only_the_reply_reveals():
    """operand: the last action's amount, which the reply's step with that action repeats; verb: the first
    action's verb, whose operation the reply's first step shows. The scorers accept the reference (for the
    verb, any verb of its operation) and refuse another."""
    examples = arith.load("test")[:40]
    operands, verbs = infill.arith_items(examples, TOK, "operand"), infill.arith_items(examples, TOK, "verb")
    assert len(verbs) == 40 and 30 <= len(operands) <= 40         # all-doubling problems have no operand
    for it in operands + verbs:
        text = TOK.decode(it["left"] + it["span"] + it["right"][:-1])
        assert any(text == ex["prompt"] + ex["target"] for ex in examples) and it["right"][-1] == TOK.eos_id
    for it in operands:
        reply = TOK.decode(it["right"]).split("\n")[1]
        assert TOK.decode(it["span"]).isdigit() and any(f"{op}{it['answer']}=" in reply for op in "-+")
        assert infill.SPAN_SCORES["operand"]["exact"](it["answer"], it)
    for it in verbs:
        first_step = TOK.decode(it["right"]).split("\n")[1].split(" ")[0]            # "16*2=32."
        assert first_step[len(first_step.split(it["op"][0])[0])] == it["op"][0]   # its operator is the verb's
        same = next(v for v, op in infill.VERB_OP.items() if op == it["op"] and v != it["answer"]) \
            if it["op"] in "+-" else it["answer"]
        other = next(v for v, op in infill.VERB_OP.items() if op != it["op"])
        score = infill.SPAN_SCORES["verb"]
        assert score["exact"](it["answer"], it) and score["op_right"](same, it)
        assert not score["op_right"](other, it)


@pytest.mark.parametrize("name", ["ar", "mdlm", "bd3lm", "setdiffusion"])
def test_make_infill_rows_on_tiny_checkpoints(tmp_path, random_ckpts, name):
    """The default span (step, with answer_right) and --span number (MDLM and BD3-LM in paper mode: their
    official infilling), each scored on 2 problems."""
    for span in ("step", "number"):
        flags = [] if span == "step" else ["--span", span] + ["--official"] * (name in ("mdlm", "bd3lm"))
        m = eval_json(tmp_path, ["--ckpt", str(random_ckpts / name), "--task", "infill", "--limit", "3",
                                 "--warmup", "1", "--threshold", "0.9", *flags])
        assert m["task"] == "infill" and m["n"] == 2 and m["span"] == span and 0 <= m["exact"] <= 1
        assert m["tokens_per_s"] > 0 and ("answer_right" in m) == (span == "step")
        assert m["official"] == ("--official" in flags)
    with pytest.raises(ValueError, match="shipped arith task or of a text corpus; this checkpoint was "
                                         "trained on gsm8k"):
        infill.evaluate("infill", arith, [], None, None, None, TOK, {"data": "gsm8k"}, "cpu", Settings())
