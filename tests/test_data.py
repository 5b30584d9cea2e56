"""Tests of the tasks (data/arith.py, data/gsm8k.py): what each example holds, loading, answer scoring and the
stopping rules. Needs no optional package (the Hub loader of GSM8K is checked with a fake `datasets` module);
the Qwen3 tokenizer is tested in test_pretrained.py.

    python -m pytest -q tests/test_data.py
"""
import json
import re
import sys
import types

import pytest
import torch

from data import PlainText, arith, byte_tokenizer, encode, gsm8k


# ======================================================================== the arithmetic task (data/arith.py)
STEP = re.compile(r"(\d+)([+*-])(\d+)=(\d+)\.")


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


# ---- splits, lengths, targets ------------------------------------------------------------------------------
def test_arith_splits_deterministic_sized_disjoint():
    train, test = arith.load("train"), arith.load("test")
    assert train == arith.load("train") and test == arith.load("test")
    assert len(train) == 20_000 and len(test) == 500
    train_prompts = {ex["prompt"] for ex in train}
    test_prompts = {ex["prompt"] for ex in test}
    assert len(train_prompts) == len(train) and len(test_prompts) == len(test)
    assert not train_prompts & test_prompts
    assert all(set(ex) == {"prompt", "target", "answer"} for ex in train + test)


def test_arith_load_returns_fresh_lists_and_rejects_unknown_split():
    a = arith.load("test")
    a[0]["prompt"] = "changed"
    a.pop()
    assert arith.load("test")[0]["prompt"] != "changed" and len(arith.load("test")) == 500
    assert arith.load("test", data_dir="/nonexistent") == arith.load("test")
    with pytest.raises(ValueError, match="train"):
        arith.load("validation")


def test_arith_lengths_fit_and_encode():
    tok = byte_tokenizer()
    for ex in arith.load("train") + arith.load("test"):
        assert len(tok.encode(ex["prompt"] + ex["target"])) + 1 <= 128, ex
    test = arith.load("test")
    batch = encode(tok, test, 128)
    assert batch["x0"].shape == (500, 128)
    ex, row = test[0], batch["x0"][0].tolist()
    n = len(ex["prompt"] + ex["target"])
    assert tok.decode(row[:n]) == ex["prompt"] + ex["target"] and row[n] == tok.eos_id


def test_arith_targets_are_correct_chains():
    for ex in arith.load("train") + arith.load("test"):
        check_example(ex)
        assert arith.is_correct(ex["target"], ex["answer"])
        assert arith.is_finished(ex["target"] + "<|endoftext|>")


# ---- scoring and stopping ----------------------------------------------------------------------------------
def test_arith_extract_answer_and_is_correct():
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


def test_arith_is_finished():
    assert not arith.is_finished("")
    assert not arith.is_finished("12+7=19. 19-5=14.")
    assert not arith.is_finished("12+7=19. 19-5=14. ####")
    assert not arith.is_finished("12+7=19. 19-5=14. #### ")
    assert not arith.is_finished("12+7=19. 19-5=14. #### 14")          # 14 might still become 140
    assert arith.is_finished("12+7=19. 19-5=14. #### 14<|endoftext|>")
    assert arith.is_finished("12+7=19. 19-5=14. #### 14\n")
    assert arith.is_finished("12+7=19. 19-5=14. #### 14 ")
    assert arith.is_finished("12+7=19.<|endoftext|>")                  # EOS always stops


# ============================================================================= GSM8K (data/gsm8k.py)
# GSM8K train example 0, verbatim.
QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
            "How many clips did Natalia sell altogether in April and May?")
SOLUTION = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
            "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


# ---- prompt, target, loading -------------------------------------------------------------------------------
def test_gsm8k_prompt_is_the_paper_eval_prompt():
    assert gsm8k.make_prompt("What is 2+3?") == (
        "<|im_start|>user\nPlease reason step by step, and put your final answer within $\\boxed{}$. "
        "What is 2+3?<|im_end|>\n<|im_start|>assistant\n")


def test_gsm8k_target_rewrites_the_solution():
    target = gsm8k.make_target(SOLUTION)
    assert target == ("Natalia sold 48/2 = 24 clips in May.\n"
                      "Natalia sold 48+24 = 72 clips altogether in April and May.\n"
                      "The final answer is $\\boxed{72}$.<|im_end|>")
    assert gsm8k.gold_answer(SOLUTION) == "72"
    assert gsm8k.is_correct(target, "72") and gsm8k.strict_match(target, "72")
    tok = byte_tokenizer()
    assert gsm8k.stop(tok.encode(gsm8k.make_prompt("q") + target), tok)


def test_gsm8k_load_from_folder(tmp_path):
    write_jsonl(tmp_path / "test.jsonl", [{"question": QUESTION, "answer": SOLUTION},
                                          {"question": "How big?", "answer": "It is 1000+80.\n#### 1,080"}])
    rows = gsm8k.load("test", str(tmp_path))
    assert [r["answer"] for r in rows] == ["72", "1,080"]
    assert rows[0]["prompt"] == gsm8k.make_prompt(QUESTION)
    assert rows[0]["target"] == gsm8k.make_target(SOLUTION)
    assert rows[1]["target"] == "It is 1000+80.\nThe final answer is $\\boxed{1,080}$.<|im_end|>"
    assert gsm8k.is_correct(rows[1]["target"], rows[1]["answer"])
    with pytest.raises(FileNotFoundError, match="train.jsonl"):
        gsm8k.load("train", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        gsm8k.load("test", str(tmp_path / "missing"))


def test_gsm8k_folder_with_a_bad_line_names_the_file_and_line(tmp_path):
    good = json.dumps({"question": QUESTION, "answer": SOLUTION})
    (tmp_path / "test.jsonl").write_text(good + '\n{"question": 1}\n')
    with pytest.raises(ValueError) as e:
        gsm8k.load("test", str(tmp_path))
    assert str(e.value) == (f'{tmp_path / "test.jsonl"} line 2: expected {{"question": "...", "answer": '
                            f'"..."}} '
                            f"(GSM8K's own format)")


def test_gsm8k_load_from_hub_with_fake_datasets(monkeypatch):
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name, config, split: [{"question": QUESTION, "answer": SOLUTION}]
    monkeypatch.setitem(sys.modules, "datasets", fake)
    assert gsm8k.load("train")[0]["answer"] == "72"

    def offline(*args, **kwargs):
        raise ConnectionError("no network")
    fake.load_dataset = offline
    with pytest.raises(RuntimeError, match="--data-dir"):
        gsm8k.load("test")


# ---- scoring: the first \boxed{} (accuracy) and lm-eval's strict / flexible matches ------------------------
BOXED = "She sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\nThe final answer is $\\boxed{18}$."


def test_gsm8k_boxed_answer():
    assert gsm8k.extract_answer(BOXED) == "18"
    assert gsm8k.is_correct(BOXED, "18") and gsm8k.strict_match(BOXED, "18") \
        and gsm8k.flexible_match(BOXED, "18")
    assert not gsm8k.is_correct(BOXED, "19") and not gsm8k.strict_match(BOXED, "19")
    assert gsm8k.is_correct("first \\boxed{5}, then \\boxed{7}", "5")      # the first box counts


def test_gsm8k_unboxed_answer():
    text = "She makes 9 * 2 = 18 dollars a day, so the answer is 18."
    assert gsm8k.extract_answer(text) is None and not gsm8k.is_correct(text, "18")
    assert not gsm8k.strict_match(text, "18")            # no "#### n"
    assert gsm8k.flexible_match(text, "18")              # the last number
    assert not gsm8k.flexible_match("It is 18, not 17.", "18")


def test_gsm8k_dollars_and_commas():
    text = "The total is $\\boxed{\\$1,234}$."
    assert gsm8k.extract_answer(text) == "1234"
    assert gsm8k.is_correct(text, "1234") and gsm8k.is_correct(text, "1,234")
    assert gsm8k.flexible_match(text, "1,234")
    assert not gsm8k.strict_match(text, "1234")          # harness quirk: '#### \$1,234' is no strict number
    assert gsm8k.strict_match("The total is $\\boxed{1,234}$.", "1234")
    assert gsm8k.harness_rewrite("The total is $\\boxed{1,234}$. Done") == "The total is #### 1,234"


def test_gsm8k_negative_and_decimals():
    assert gsm8k.is_correct("\\boxed{-3}", "-3") and not gsm8k.is_correct("\\boxed{3}", "-3")
    assert gsm8k.strict_match("\\boxed{-3}", "-3")
    assert gsm8k.extract_answer("\\boxed{12.50}") == "12.5" and gsm8k.is_correct("\\boxed{12.50}", "12.5")
    assert gsm8k.extract_answer("\\boxed{18.00}") == "18" and gsm8k.is_correct("\\boxed{18.0}", "18")
    assert gsm8k.extract_answer("\\boxed{18.}") == "18"
    assert not gsm8k.strict_match("\\boxed{12.50}", "12.5")   # lm-eval compares strings
    assert gsm8k.extract_answer("\\boxed{10}") == "10" and gsm8k.extract_answer("\\boxed{100}") == "100"


def test_gsm8k_nested_braces_and_latex():
    assert gsm8k.extract_answer("so $\\boxed{\\frac{1}{2}}$") == "1/2"
    assert gsm8k.is_correct("so $\\boxed{\\frac{1}{2}}$", "0.5")
    assert gsm8k.extract_answer("\\boxed{25\\%}") == "25"
    assert gsm8k.extract_answer("\\boxed{\\text{18}}") == "18"


def test_gsm8k_no_answer():
    for text in ("I am not sure.", "", "\\boxed{7", "no box<|im_end|>\\boxed{72}"):
        assert gsm8k.extract_answer(text) is None and not gsm8k.is_correct(text, "72")
    assert not gsm8k.strict_match("I am not sure.", "72") and not gsm8k.flexible_match("I am not sure.", "72")


# ---- stopping ----------------------------------------------------------------------------------------------
def test_gsm8k_stop_rules_on_token_ids():
    """The official criteria on prompt + reply ids up to the window's end, [MASK]s included."""
    tok = byte_tokenizer()
    M, prompt = tok.mask_id, tok.encode(gsm8k.make_prompt("What is 2+3?"))
    stop = lambda reply, **kw: gsm8k.stop(prompt + reply, tok, **kw)
    assert stop(tok.encode("so $\\boxed{5}$"))                        # second box (the prompt's is the first)
    assert stop(tok.encode("$\\boxed{}$"))                              # an empty box is a complete match
    assert not stop(tok.encode("so 2+3 = 5."))
    assert not stop(tok.encode("so $\\boxed{") + [M, M] + tok.encode("}$"))    # a box still holding [MASK]
    assert not stop(tok.encode("so $\\boxed{5"))                         # not closed yet
    assert stop(tok.encode("a ") + [M] + tok.encode(" then \\boxed{5}") + [M])  # complete only after a [MASK]
    assert stop(tok.encode("a") + [7] * 8) and not stop(tok.encode("a") + [7] * 7)   # 8 identical ids
    assert stop(tok.encode("a") + [7] * 8 + [M, M])                      # trailing [MASK]s dropped
    assert not stop(tok.encode("a") + [7] * 4 + [M] + [7] * 4)           # a [MASK] breaks the run
    assert not stop(tok.encode("done<|im_end|>")) and stop(tok.encode("done<|im_end|>"), im_end=True)
    assert not stop(tok.encode("done<|endoftext|>"))                     # EOS is not an official GSM8K rule


def test_gsm8k_repeating_tokens():
    M = 151660
    assert gsm8k.repeating_tokens([1, 2] + [5] * 8) and not gsm8k.repeating_tokens([1] + [5] * 7)
    assert gsm8k.repeating_tokens([5] * 8 + [M, M], mask_id=M)                 # trailing masks dropped
    assert not gsm8k.repeating_tokens([5] * 4 + [M] + [5] * 4, mask_id=M)      # a mask breaks the run
    assert gsm8k.repeating_tokens(torch.tensor([3] * 10)) and gsm8k.repeating_tokens([3, 3], n=2)


# ============================================================================= the Tokenizer's three encodes
def qwen_format_tokenizer(tmp_path):
    """A Qwen3-format tokenizer.json: 256 byte tokens (id = byte), <|endoftext|>, <|fim_middle|>,
    <|im_end|>."""
    from data.qwen import gpt2_byte_alphabet, qwen3_tokenizer
    added = [{"id": 256, "content": "<|endoftext|>"}, {"id": 257, "content": "<|fim_middle|>"},
             {"id": 258, "content": "<|im_end|>"}]
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": gpt2_byte_alphabet()},
                                                         "added_tokens": added}))
    return qwen3_tokenizer(str(tmp_path))


def test_code_text_data_text_and_typed_prompts_encode_differently(tmp_path):
    """encode: the code's templates (special-token text -> the token); encode_text and PlainText: ordinary
    text; encode_prompt: only the [MASK] text is a special token."""
    for tok in (byte_tokenizer(), qwen_format_tokenizer(tmp_path)):
        eos, mask, m = tok.eos_id, tok.mask_id, tok.mask_text
        special = f"a<|endoftext|>b{m}"
        assert tok.encode(special) == [ord("a"), eos, ord("b"), mask]                   # as before
        assert tok.encode_text(special) == list(special.encode())
        assert tok.encode(PlainText(special)) == tok.encode_text(special)
        assert tok.encode_prompt(special + m) == list(b"a<|endoftext|>b") + [mask, mask]
        assert tok.encode_batch([special, PlainText(special)]) == [tok.encode(special),
                                                                   tok.encode_text(special)]
        for f in (tok.encode, tok.encode_text, tok.encode_prompt):                    # normal text: unchanged
            assert f("Hello, world 12") == list(b"Hello, world 12")
        batch = encode(tok, [{"prompt": PlainText(m), "target": PlainText("<|endoftext|>")},
                             {"prompt": m, "target": "<|endoftext|>"}], 32)
        assert batch["x0"][0, :len(m) + 14].tolist() == list((m + "<|endoftext|>").encode()) + [eos]
        assert batch["x0"][1, :3].tolist() == [mask, eos, eos]
    qwen = qwen_format_tokenizer(tmp_path)
    assert qwen.mask_text == "<|fim_middle|>" and qwen.encode("done<|im_end|>") == list(b"done") + [258]
    assert qwen.encode_text("cafe\u0301") == qwen.encode("caf\u00e9") == list("café".encode())   # NFC first
    assert encode(qwen, [{"prompt": PlainText("cafe\u0301"), "target": ""}], 8)["x0"][0, :6].tolist() == \
        list("café".encode()) + [qwen.eos_id]
