"""Infilling a text corpus (eval.py --task infill --span word|line; paper/infill.py): items rebuild each
held-out row around one whole word or line, the scorers' math, every method's eval run, the --infill table
(seeds merged), bad input one line."""
import importlib.util
import json

import pytest
import tiktoken

import eval as evaluate
from data import Tokenizer, byte_tokenizer, textfile
from helpers import METHODS, error_of, text_checkpoints
from paper import infill, results

WORDS = "to be or not that is the question whether tis nobler in mind suffer slings and arrows".split()
LINES = [" ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(1 + i % 5)).capitalize() + ",."[i % 3 == 0]
         for i in range(300)]                                     # 300 lines of 2 to 40 characters, ASCII
TEXT = "\n".join(LINES) + "\n"
TINY = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--seq-len", "64", "--max-iters", "2",
        "--batch-size", "2", "--eval-limit", "2", "--seed", "1"]
TOK = byte_tokenizer()
HAS_ROUGE = importlib.util.find_spec("rouge_score") is not None


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The text, its token cache and one tiny checkpoint per method trained on it (2 steps, context 64)."""
    return text_checkpoints(tmp_path_factory, "verse.txt", TEXT, TINY)


def held_out(run):
    return textfile.load("test", str(run / "verse.txt"), str(run / "cache"), TOK, 64)


# ----------------------------------------------------------------------------- the items

@pytest.mark.parametrize("span", ["word", "line"])
def test_items_rebuild_each_row_and_mask_one_whole_word_or_line(run, span):
    rows = held_out(run)
    items, read = infill.text_items(TOK, rows, span)
    assert read == len(rows) and 0 < len(items) <= len(rows)
    for it in items:
        row = next(r.tolist() for r in rows if r.tolist() == it["left"] + it["span"] + it["right"])
        left, mid, right = it["text"]
        assert row[0] == TOK.eos_id and it["left"][0] == TOK.eos_id                # the row's BOS stays
        assert left + mid + right == bytes(row[1:]).decode()
        assert it["answer"] == mid and TOK.decode(it["span"]) == mid
        assert len(TOK.encode(left)) >= infill.MIN_CONTEXT <= len(it["right"])
        if span == "word":
            assert infill.WORD.fullmatch(mid) and not any(infill.WORD.match(c) for c in (left[-1], right[0]))
        else:
            assert mid in LINES and left.endswith("\n") and right.startswith("\n")
    assert infill.text_items(TOK, rows, span, limit=2)[0] == items[:2]


def test_the_span_is_the_one_nearest_the_rows_middle_and_the_row_stays_as_it_is():
    """Blank lines and edge words left out; a row cut inside a character and a second document stay as they
    are; a subword tokenizer keeps the leading space on the span's side."""
    text = "aa bb cc dd ee ff gg hh\nii jj\nkk ll mm\n"
    row = [TOK.eos_id] + list(text.encode())                 # 40 tokens: gg sits at 19-20
    words = infill.row_item(TOK, row, "word")
    assert words["text"][1] == "gg" and words["left"] + words["span"] + words["right"] == row
    assert infill.row_item(TOK, row, "line")["text"][1] == "ii jj"
    assert infill.text_spans("a-b\nc\n\n d\ne", "line") == [(4, 5), (7, 9)]        # blank lines and edges out
    assert infill.text_spans("x it's 42, y", "word") == [(2, 6), (7, 9)]              # edge words out
    assert infill.row_item(TOK, [TOK.eos_id] + list(b"one two"), "word") is None   # no context of 4 each side
    text = "é, voilà: the\ncafé is open\nnow and "
    row = [TOK.eos_id] + list(text.encode())[1:] + [TOK.eos_id] + list(b"next doc")     # starts inside 'é'
    assert infill.segments(TOK, row) == [(2, 38), (39, 47)]          # the cut byte and the EOS are left out
    for span, parts in (("word", (", voilà: the\ncafé ", "is", " open\nnow and ")),
                        ("line", (", voilà: the\n", "café is open", "\nnow and "))):
        it = infill.row_item(TOK, row, span)
        assert it["text"] == parts and it["left"] + it["span"] + it["right"] == row
    base = byte_tokenizer().enc
    ranks = {**base._mergeable_ranks, b" t": 256, b" th": 257, b" the": 258}
    enc = tiktoken.Encoding("toy", pat_str=r" ?\w+|\s+|[^\w\s]+", mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 259, "<|mask|>": 260})
    tok = Tokenizer(enc, "toy", mask_id=260, eos_id=259, pad_id=259)
    row = [259] + tok.encode_text("xx yy zz ww the ww zz yy xx")
    it = infill.row_item(tok, row, "word")
    assert it["text"][1] == " the" and it["span"] == [258] and it["answer"] == " the"
    assert tok.decode(it["left"] + it["span"] + it["right"]) == tok.decode(row)


def test_scorers_math_and_without_rouge_score_rougeL_left_out_with_a_note(monkeypatch, capsys):
    scores = infill.text_scores()
    ex = {"answer": "abcd"}
    assert scores["exact"]("abcd", ex) and not scores["exact"]("abce", ex)
    assert scores["char_accuracy"]("abcd", ex) == 1 and scores["char_accuracy"]("abxy", ex) == 0.5
    assert scores["char_accuracy"]("ab", ex) == 0.5 and scores["char_accuracy"]("xabcd", ex) == 0
    if HAS_ROUGE:
        line = {"answer": "the slings and arrows"}
        assert scores["rougeL"]("the slings and arrows", line) == 1
        assert scores["rougeL"]("the slings", line) == pytest.approx(2 / 3)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "rouge_score" else real(name, *a))
    assert set(infill.text_scores()) == {"exact", "char_accuracy"}
    assert capsys.readouterr().out.count("note: rouge-score is not installed") == 1


# ----------------------------------------------------------------------------- eval.py --task infill

@pytest.mark.parametrize("method", list(METHODS))
def test_eval_infill_word_and_line_on_a_text_checkpoint(run, tmp_path, method, capsys):
    for span in ("word", "line"):
        out = tmp_path / f"{method}-{span}.json"
        evaluate.main(["--ckpt", str(run / method), "--task", "infill", "--span", span, "--limit", "3",
                       "--warmup", "1", "--threshold", "0.9", "--data-dir", str(run / "cache"),
                       "--device", "cpu", "--json", str(out)])
        m = json.loads(out.read_text())
        assert m["task"] == "infill" and m["span"] == span and m["n"] == 2 and m["model"] == method
        assert 0 <= m["exact"] <= m["char_accuracy"] <= 1 and m["tokens_per_step"] >= 1
        assert m["tokens_per_s"] > 0
        assert ("rougeL" in m) == HAS_ROUGE and m["ckpt"] == str(run / method)
        assert m["threshold"] == 0.9 and m["data"] == f"text:{run / 'verse.txt'}"
    default = tmp_path / "default.json"
    evaluate.main(["--ckpt", str(run / method), "--task", "infill", "--limit", "2", "--warmup", "1",
                   "--data-dir", str(run / "cache"), "--device", "cpu", "--json", str(default)])
    assert json.loads(default.read_text())["span"] == "word"
    assert ("AR cannot infill" in capsys.readouterr().out) == (method == "ar")


@pytest.mark.parametrize("extra, message", [
    (["--span", "step"], "--span step: a text corpus masks one whole word or one whole line of a held-out "
     "row (--span word or line)"),
    (["--span", "number"], "--span number: a text corpus masks one whole word or one whole line"),
    (["--limit", "2"], "--warmup 5 leaves no example to score: only 2 example(s) are evaluated"),
    (["--window", "9"], "--window 9: the window must be in [1, smax=8]"),
    (["--span", "line", "--data", "text:{short}"], "none of the 1 held-out rows has a whole line with 4 "
     "tokens of text on each side"),
    (["--span", "word", "arith"], "--span word: the shipped arith task masks a reasoning step, a number, an "
     "operand or a verb of the problem"),
])
def test_eval_infill_bad_input_is_one_line(run, random_ckpts, tmp_path, extra, message):
    short = tmp_path / "short.txt"
    short.write_text("ab cd " * 100, encoding="utf-8")                          # no newline: no line
    ckpt = random_ckpts / "mdlm" if "arith" in extra else run / "setdiffusion"      # the shipped task's
    argv = ["--ckpt", str(ckpt), "--task", "infill", "--data-dir", str(tmp_path / "cache"),
            "--device", "cpu", *[a.format(short=short) for a in extra if a != "arith"]]
    assert message in error_of(evaluate.main, argv)


# ----------------------------------------------------------------------------- the table

def infill_run(folder, model, span, **metrics) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model}-{span}.json"
    path.write_text(json.dumps({"task": "infill", "model": model, "ckpt": f"out/{folder.name}/{model}",
                                "span": span, "tokens_per_step": 1.0, "tokens_per_s": 10.0,
                                "n": 20, **metrics}))
    return str(path)


def test_infill_table_merges_seed_folders_orders_spans_and_methods_drops_empty_columns(tmp_path, capsys):
    paths = []
    for seed, exact in (("s1", 0.2), ("s2", 0.4)):
        d = tmp_path / seed
        paths += [infill_run(d, "setdiffusion", "line", exact=exact, char_accuracy=0.5, rougeL=0.6),
                  infill_run(d, "ar", "line", exact=0.1, char_accuracy=0.3, rougeL=0.4),
                  infill_run(d, "setdiffusion", "word", exact=exact + 0.1, char_accuracy=0.7, rougeL=0.7)]
    paths.append(infill_run(tmp_path / "arith", "bd3lm", "step", exact=0.9, answer_right=0.95))
    results.main([str(tmp_path / "t.md"), *paths, "--infill"])
    lines = (tmp_path / "t.md").read_text().splitlines()
    assert capsys.readouterr().out.strip() == "\n".join(lines)
    assert lines[0] == ("| span | checkpoint | exact | answer_right | char acc. | ROUGE-L | tokens/step | "
                        "tokens/s (batch 1) | n | seeds |")
    assert lines[2] == "| step | bd3lm | 0.900 | 0.950 |  |  | 1.00 | 10.0 | 20 | 1 |"
    assert lines[3] == ("| word | setdiffusion | 0.400 [0.300, 0.500] |  | 0.700 | 0.700 | 1.00 | 10.0 | "
                        "20 | 2 |")
    assert lines[4] == "| line | ar | 0.100 |  | 0.300 | 0.400 | 1.00 | 10.0 | 20 | 2 |"
    assert lines[5] == ("| line | setdiffusion | 0.300 [0.200, 0.400] |  | 0.500 | 0.600 | 1.00 | 10.0 | "
                        "20 | 2 |")
    paths = [infill_run(tmp_path / "a", "mdlm", "word", exact=0.5, char_accuracy=0.6)]
    head = results.infill(paths, str(tmp_path / "t.md")).splitlines()[0]
    assert head == "| span | checkpoint | exact | char acc. | tokens/step | tokens/s (batch 1) | n | seeds |"


def test_the_rocstories_rows_are_per_sentences_and_recipe_with_tokens_per_s_of_the_timed_run(tmp_path):
    """make reproduce-infill: a row per sentences and recipe (never the seeds of one another); its ROUGE from
    the untimed run over every story, its tokens/s from the throughput run (timed, scored by nothing)."""
    def story(name, sentences, recipe, timed, n, tps, **rouge):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"task": "rocstories", "model": "setdiffusion",
                                    "ckpt": "owt:setdlm-smax32", "sentences": sentences, "recipe": recipe,
                                    "tokens_per_step": 1.0, "tokens_per_s": tps, "n": n,
                                    **({"throughput_run": True} if timed else {}), **rouge}))
        return str(path)
    paths = [story("1", 1, "h100", False, 1871, 5.0, rouge1=0.3, rouge2=0.1, rougeL=0.2),
             story("1-tput", 1, "h100", True, 1000, 40.0),
             story("3-suite", 3, "suite", False, 1871, 6.0, rouge1=0.4, rouge2=0.2, rougeL=0.3)]
    lines = results.infill(paths, str(tmp_path / "t.md")).splitlines()
    assert lines[0] == ("| span | checkpoint | ROUGE-1 | ROUGE-2 | ROUGE-L | tokens/step | "
                        "tokens/s (batch 1) | n | timed n | seeds |")
    assert lines[2:4] == ["| rocstories-1 (h100) | owt:setdlm-smax32 | 0.300 | 0.100 | 0.200 | 1.00 | 40.0 | "
                         "1871 | 1000 | 1 |",
                         "| rocstories-3 (suite) | owt:setdlm-smax32 | 0.400 | 0.200 | 0.300 | 1.00 | 6.0 | "
                         "1871 |  | 1 |"]
