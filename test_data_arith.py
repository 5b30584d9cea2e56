"""Tests for the generated arithmetic task (data/arith.py): splits, lengths, arithmetic, scoring."""
import re

import pytest

from data import arith, byte_tokenizer, encode

STEP = re.compile(r"(\d+)([+*-])(\d+)=(\d+)\.")
MUL_WORDS = {"doubles": 2, "triples": 3}


def check_example(ex):
    """Recompute the chain in the target and match it against the numbers in the prompt."""
    steps = STEP.findall(ex["target"])
    assert 2 <= len(steps) <= 4, ex
    rebuilt = " ".join(f"{a}{op}{b}={c}." for a, op, b, c in steps) + f" #### {ex['answer']}"
    assert ex["target"] == rebuilt, ex                 # nothing but well-formed steps and the answer
    prev = None
    for a, op, b, c in steps:
        a, b, c = int(a), int(b), int(c)
        assert prev is None or a == prev, ex           # each step starts from the previous result
        assert c == {"+": a + b, "-": a - b, "*": a * b}[op], ex
        assert 0 <= c < 1000, ex
        prev = c
    assert ex["answer"] == str(prev)
    # the prompt states the start, the +/- amounts and the doublings/triplings, in order
    words = re.findall(r"\d+|doubles|triples", ex["prompt"])
    expected = [steps[0][0]] + [b if op in "+-" else {"2": "doubles", "3": "triples"}[b]
                                for _, op, b, _ in steps]
    assert words == expected, ex


def test_splits_deterministic_sized_disjoint():
    train, test = arith.load("train"), arith.load("test")
    assert train == arith.load("train") and test == arith.load("test")
    assert len(train) == 20_000 and len(test) == 500
    train_prompts = {ex["prompt"] for ex in train}
    test_prompts = {ex["prompt"] for ex in test}
    assert len(train_prompts) == len(train) and len(test_prompts) == len(test)
    assert not train_prompts & test_prompts
    assert all(set(ex) == {"prompt", "target", "answer"} for ex in train + test)


def test_load_returns_fresh_lists_and_rejects_unknown_split():
    a = arith.load("test")
    a[0]["prompt"] = "changed"
    a.pop()
    assert arith.load("test")[0]["prompt"] != "changed" and len(arith.load("test")) == 500
    assert arith.load("test", data_dir="/nonexistent") == arith.load("test")
    with pytest.raises(ValueError, match="train"):
        arith.load("validation")


def test_lengths_fit_and_encode():
    tok = byte_tokenizer()
    for ex in arith.load("train") + arith.load("test"):
        assert len(tok.encode(ex["prompt"] + ex["target"])) + 1 <= 128, ex
    test = arith.load("test")
    batch = encode(tok, test, 128)
    assert batch["x0"].shape == (500, 128)
    ex, row = test[0], batch["x0"][0].tolist()
    n = len(ex["prompt"] + ex["target"])
    assert tok.decode(row[:n]) == ex["prompt"] + ex["target"] and row[n] == tok.eos_id


def test_targets_are_correct_chains():
    for ex in arith.load("train") + arith.load("test"):
        check_example(ex)
        assert arith.is_correct(ex["target"], ex["answer"])
        assert arith.is_finished(ex["target"] + "<|endoftext|>")


def test_extract_answer_and_is_correct():
    assert arith.extract_answer("12+7=19. 19-5=14. #### 14") == "14"
    assert arith.extract_answer("#### 14<|endoftext|>") == "14"
    assert arith.extract_answer("####14 and more text #### 99") == "14"   # the first #### counts
    assert arith.extract_answer("####   7. done") == "7"
    assert arith.extract_answer("12+7=19. 19-5=14.") is None
    assert arith.extract_answer("#### ") is None
    assert arith.extract_answer("#### abc") is None
    assert arith.is_correct("3+4=7. #### 7", "7")
    assert arith.is_correct("3+4=7. ####  7 \n", " 7")
    assert not arith.is_correct("3+4=8. #### 8", "7")
    assert not arith.is_correct("3+4=7. #### 77", "7")
    assert not arith.is_correct("3+4=7. #### 7.5", "7")
    assert not arith.is_correct("3+4=7. 7", "7")


def test_is_finished():
    assert not arith.is_finished("")
    assert not arith.is_finished("12+7=19. 19-5=14.")
    assert not arith.is_finished("12+7=19. 19-5=14. ####")
    assert not arith.is_finished("12+7=19. 19-5=14. #### ")
    assert not arith.is_finished("12+7=19. 19-5=14. #### 14")          # 14 might still become 140
    assert arith.is_finished("12+7=19. 19-5=14. #### 14<|endoftext|>")
    assert arith.is_finished("12+7=19. 19-5=14. #### 14\n")
    assert arith.is_finished("12+7=19. 19-5=14. #### 14 ")
    assert arith.is_finished("12+7=19.<|endoftext|>")                  # EOS always stops
