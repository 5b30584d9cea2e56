"""The tasks (data/arith.py, data/gsm8k.py): what each example holds, loading, answer scoring and stopping;
the tokenizers' three encodes. GSM8K's Hub loader runs on a fake `datasets` module."""
import re
import sys
import types

import pytest
import torch

from data import PlainText, arith, byte_tokenizer, encode, gsm8k
from data.qwen import qwen3_tokenizer
from data.prompts import prompt_ids
from fakehub import qwen_format_tokenizer
from helpers import write_jsonl

TOK = byte_tokenizer()
STEP = re.compile(r"(\d+)([+*-])(\d+)=(\d+)\.")


def test_arith_splits_are_deterministic_sized_disjoint_and_fresh():
    train, test = arith.load("train"), arith.load("test")
    assert train == arith.load("train") and test == arith.load("test")
    assert len(train) == 20_000 and len(test) == 500
    assert all(set(ex) == {"prompt", "target", "answer"} for ex in train + test)
    prompts = {ex["prompt"] for ex in train}, {ex["prompt"] for ex in test}
    assert len(prompts[0]) == len(train) and len(prompts[1]) == len(test) and not prompts[0] & prompts[1]
    test[0]["prompt"] = "changed"                           # a caller's edits never reach the next load
    test.pop()
    assert arith.load("test")[0]["prompt"] != "changed" and len(arith.load("test")) == 500
    assert arith.load("test", data_dir="/nonexistent") == arith.load("test")
    with pytest.raises(ValueError, match="train"):
        arith.load("validation")


def test_arith_targets_are_correct_chains_that_fit_and_encode():
    """Each target is 2-4 well-formed steps, each from the previous result (in [0, 1000)), then the answer;
    the prompt states the start, the +/- amounts and the doublings/triplings in order; prompt + target + EOS
    fit 128 bytes."""
    for ex in arith.load("train") + arith.load("test"):
        steps = STEP.findall(ex["target"])
        assert 2 <= len(steps) <= 4 and len(TOK.encode(ex["prompt"] + ex["target"])) + 1 <= 128, ex
        assert ex["target"] == " ".join(f"{a}{op}{b}={c}." for a, op, b, c in steps) + f" #### {ex['answer']}"
        prev = None
        for a, op, b, c in steps:
            a, b, c = int(a), int(b), int(c)
            assert prev in (None, a) and c == {"+": a + b, "-": a - b, "*": a * b}[op] and 0 <= c < 1000
            prev = c
        assert ex["answer"] == str(prev) and arith.is_correct(ex["target"], ex["answer"])
        assert arith.is_finished(ex["target"] + "<|endoftext|>")
        assert re.findall(r"\d+|doubles|triples", ex["prompt"]) == [steps[0][0]] + [
            b if op in "+-" else {"2": "doubles", "3": "triples"}[b] for _, op, b, _ in steps], ex
    test = arith.load("test")
    batch = encode(TOK, test, 128)
    row, n = batch["x0"][0].tolist(), len(test[0]["prompt"] + test[0]["target"])
    assert batch["x0"].shape == (500, 128) and TOK.decode(row[:n]) == test[0]["prompt"] + test[0]["target"]
    assert row[n] == TOK.eos_id
    # ids past the tokenizer's (a --preset's larger vocabulary) decode as U+FFFD, a character's bytes whole
    assert TOK.decode([*"é".encode(), 300, 9000, *b"ab"]) == "\u00e9\ufffd\ufffdab"


def test_arith_answers_and_stopping():
    """The first #### counts; 14 might still become 140 until a space, newline or EOS ends it."""
    for text, answer in [("12+7=19. 19-5=14. #### 14", "14"), ("#### 14<|endoftext|>", "14"), ("#### ", None),
                         ("####14 and more text #### 99", "14"), ("####   7. done", "7"), ("#### abc", None),
                         ("12+7=19. 19-5=14.", None)]:
        assert arith.extract_answer(text) == answer, text
    for text, gold, right in [("3+4=7. #### 7", "7", True), ("3+4=7. ####  7 \n", " 7", True),
                              ("3+4=8. #### 8", "7", False), ("3+4=7. #### 77", "7", False),
                              ("3+4=7. #### 7.5", "7", False), ("3+4=7. 7", "7", False)]:
        assert arith.is_correct(text, gold) == right, text
    ends = [("", False), (".", False), (". ####", False), (". #### ", False), (". #### 14", False),
            (". #### 14<|endoftext|>", True), (". #### 14\n", True), (". #### 14 ", True)]
    for end, finished in ends:
        assert arith.is_finished("12+7=19. 19-5=14" + end if end else "") == finished, end
    assert arith.is_finished("12+7=19.<|endoftext|>")                  # EOS always stops


# ----------------------------------------------------------------------------- GSM8K (data/gsm8k.py)

QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
            "How many clips did Natalia sell altogether in April and May?")        # GSM8K train example 0
SOLUTION = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
            "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")


def test_gsm8k_prompt_target_and_loading(tmp_path, monkeypatch):
    """The paper's eval prompt; the target rewrites the solution (calculator marks out, a boxed answer);
    loading from a folder (a bad line named by file and line) or from the Hub (offline: one line)."""
    assert gsm8k.make_prompt("What is 2+3?") == (
        "<|im_start|>user\nPlease reason step by step, and put your final answer within $\\boxed{}$. "
        "What is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    target = gsm8k.make_target(SOLUTION)
    assert target == ("Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in "
                      "April and May.\nThe final answer is $\\boxed{72}$.<|im_end|>")
    assert gsm8k.gold_answer(SOLUTION) == "72" and gsm8k.is_correct(target, "72")
    assert gsm8k.strict_match(target, "72")
    assert gsm8k.stop(TOK.encode(gsm8k.make_prompt("q") + target), TOK)
    assert gsm8k.harness_rewrite("The total is $\\boxed{1,234}$. Done") == "The total is #### 1,234"
    write_jsonl(tmp_path / "test.jsonl", [{"question": QUESTION, "answer": SOLUTION},
                                          {"question": "How big?", "answer": "It is 1000+80.\n#### 1,080"}])
    rows = gsm8k.load("test", str(tmp_path))
    assert [r["answer"] for r in rows] == ["72", "1,080"] and rows[0]["prompt"] == gsm8k.make_prompt(QUESTION)
    assert rows[0]["target"] == target and gsm8k.is_correct(rows[1]["target"], rows[1]["answer"])
    assert rows[1]["target"] == "It is 1000+80.\nThe final answer is $\\boxed{1,080}$.<|im_end|>"
    with pytest.raises(FileNotFoundError, match="train.jsonl"):
        gsm8k.load("train", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        gsm8k.load("test", str(tmp_path / "missing"))
    write_jsonl(tmp_path / "test.jsonl", [{"question": QUESTION, "answer": SOLUTION}, {"question": 1}])
    with pytest.raises(ValueError) as e:
        gsm8k.load("test", str(tmp_path))
    assert str(e.value) == (f'{tmp_path / "test.jsonl"} line 2: expected {{"question": "...", "answer": '
                            f'"..."}} (GSM8K\'s own format)')
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name, config, split: [{"question": QUESTION, "answer": SOLUTION}]
    monkeypatch.setitem(sys.modules, "datasets", fake)
    assert gsm8k.load("train")[0]["answer"] == "72"
    fake.load_dataset = lambda *a, **k: (_ for _ in ()).throw(ConnectionError("no network"))
    with pytest.raises(RuntimeError, match="--data-dir"):
        gsm8k.load("test")


BOXED = "She sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\nThe final answer is $\\boxed{18}$."
DOLLARS = "The total is $\\boxed{\\$1,234}$."
_ = ...                                                   # not checked
SCORES = [  # (reply, gold, extract_answer, is_correct (the first \boxed{}), lm-eval's strict, flexible match,
    #          official_match (the official printed accuracy: the text to the first '}', a string))
    (BOXED, "18", "18", True, True, True, True), (BOXED, "19", _, False, False, _, False),
    ("first \\boxed{5}, then \\boxed{7}", "5", _, True, _, _, True),          # the first box counts
    ("She makes 9 * 2 = 18 dollars a day, so the answer is 18.", "18", None, False, False, True, False),
    ("It is 18, not 17.", "18", _, _, _, False, False),                           # the last number
    (DOLLARS, "1234", "1234", True, False, _, False),     # harness quirk: '#### \$1,234' is no strict number
    (DOLLARS, "1,234", _, True, _, True, False),
    ("The total is $\\boxed{1,234}$.", "1234", _, _, True, _, False),
    ("\\boxed{-3}", "-3", _, True, True, _, True), ("\\boxed{3}", "-3", _, False, _, _, False),
    ("\\boxed{12.50}", "12.5", "12.5", True, False, _, False),                  # lm-eval compares strings
    ("\\boxed{18.00}", "18", "18", _, _, _, False), ("\\boxed{18.0}", "18", _, True, _, _, False),
    ("\\boxed{18.}", "18", "18", _, _, _, False), ("\\boxed{10}", "10", "10", _, _, _, True),
    ("\\boxed{100}", "100", "100", _, _, _, True),
    ("so $\\boxed{\\frac{1}{2}}$", "0.5", "1/2", True, _, _, False),
    ("\\boxed{25\\%}", "25", "25", _, _, _, False), ("\\boxed{\\text{18}}", "18", "18", _, _, _, False),
    ("I am not sure.", "72", None, False, False, False, False), ("", "72", None, False, _, _, False),
    ("\\boxed{7", "72", None, False, _, _, False),
    ("no box<|im_end|>\\boxed{72}", "72", None, False, _, _, False),
    # the three replies the lenient rule counts and the official does not (1080: GSM8K's own gold text)
    ("\\boxed{1,080}", "1080", "1080", True, _, _, False), ("\\boxed{1080.00}", "1080", _, True, _, _, False),
    ("\\boxed{\\$1080}", "1080", _, True, _, _, False), ("\\boxed{1,080}", "1,080", _, True, _, _, True),
    ("\\boxed{72} and \\boxed{7}", "72", _, True, _, _, True), ("$\\boxed{72 }$", "72", _, True, _, _, False),
]


@pytest.mark.parametrize("row", SCORES)
def test_gsm8k_scores(row):
    reply, gold, *want = row
    got = [gsm8k.extract_answer(reply), gsm8k.is_correct(reply, gold), gsm8k.strict_match(reply, gold),
           gsm8k.flexible_match(reply, gold), gsm8k.official_match(reply, gold)]
    assert [g if w is not _ else _ for g, w in zip(got, want)] == want


def test_gsm8k_stop_rules_on_token_ids():
    """The official criteria on prompt + reply ids up to the window's end, [MASK]s included."""
    M, prompt = TOK.mask_id, TOK.encode(gsm8k.make_prompt("What is 2+3?"))
    stop = lambda reply, **kw: gsm8k.stop(prompt + reply, TOK, **kw)             # noqa: E731
    e = TOK.encode
    assert stop(e("so $\\boxed{5}$"))                        # second box (the prompt's is the first)
    assert stop(e("$\\boxed{}$"))                              # an empty box is a complete match
    assert not stop(e("so 2+3 = 5."))
    assert not stop(e("so $\\boxed{") + [M, M] + e("}$"))    # a box still holding [MASK]
    assert not stop(e("so $\\boxed{5"))                         # not closed yet
    assert stop(e("a ") + [M] + e(" then \\boxed{5}") + [M])  # complete only after a [MASK]
    assert stop(e("a") + [7] * 8) and not stop(e("a") + [7] * 7)   # 8 identical ids
    assert stop(e("a") + [7] * 8 + [M, M])                      # trailing [MASK]s dropped
    assert not stop(e("a") + [7] * 4 + [M] + [7] * 4)           # a [MASK] breaks the run
    assert not stop(e("done<|im_end|>")) and stop(e("done<|im_end|>"), im_end=True)
    assert not stop(e("done<|endoftext|>"))                     # EOS is not an official GSM8K rule
    M = 151660
    assert gsm8k.repeating_tokens([1, 2] + [5] * 8) and not gsm8k.repeating_tokens([1] + [5] * 7)
    assert gsm8k.repeating_tokens([5] * 8 + [M, M], mask_id=M)                 # trailing masks dropped
    assert not gsm8k.repeating_tokens([5] * 4 + [M] + [5] * 4, mask_id=M)      # a mask breaks the run
    assert gsm8k.repeating_tokens(torch.tensor([3] * 10)) and gsm8k.repeating_tokens([3, 3], n=2)


def test_code_text_data_text_and_typed_prompts_encode_differently(tmp_path):
    """encode: the code's templates (special-token text -> the token); encode_text and PlainText: ordinary
    text; a typed prompt (data/prompts.py): only the [MASK] text is a special token."""
    qwen = qwen3_tokenizer(qwen_format_tokenizer(tmp_path))
    for tok in (TOK, qwen):
        eos, mask, m = tok.eos_id, tok.mask_id, tok.mask_text
        special = f"a<|endoftext|>b{m}"
        assert tok.encode(special) == [ord("a"), eos, ord("b"), mask]
        assert tok.encode_text(special) == list(special.encode()) == tok.encode(PlainText(special))
        assert prompt_ids(tok, special + m, 64, 1) == list(b"a<|endoftext|>b") + [mask, mask]
        assert tok.encode_batch([special, PlainText(special)]) == [tok.encode(special),
                                                                   tok.encode_text(special)]
        for f in (tok.encode, tok.encode_text, lambda t: prompt_ids(tok, t, 64, 1)):  # normal text: unchanged
            assert f("Hello, world 12") == list(b"Hello, world 12")
        batch = encode(tok, [{"prompt": PlainText(m), "target": PlainText("<|endoftext|>")},
                             {"prompt": m, "target": "<|endoftext|>"}], 32)
        assert batch["x0"][0, :len(m) + 14].tolist() == list((m + "<|endoftext|>").encode()) + [eos]
        assert batch["x0"][1, :3].tolist() == [mask, eos, eos]
    assert qwen.mask_text == "<|fim_middle|>" and qwen.encode("done<|im_end|>") == list(b"done") + [258]
    assert qwen.encode_text("cafe\u0301") == qwen.encode("caf\u00e9") == list("café".encode())   # NFC first
    assert encode(qwen, [{"prompt": PlainText("cafe\u0301"), "target": ""}], 8)["x0"][0, :6].tolist() == \
        list("café".encode()) + [qwen.eos_id]
