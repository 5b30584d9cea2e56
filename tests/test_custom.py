"""Your own data (data/custom.py): jsonl:/hf: tasks, their splits, scoring and length rules, prompt files and
[MASK] infilling in sample.py, end to end on tiny CPU models; bad input one line."""
import json
import os

import pytest
import torch

from sampling import Settings
from common import checkpoint
from data import prompts
import eval as evaluate
import sample
import setdiffusion as sd
import train
from data import byte_tokenizer, encode, get_task
from data.custom import AUTO_SEQ_LEN_MAX, held_out
from fakehub import qwen_format_tokenizer
from helpers import TINY, error_of, write_jsonl
from model import ModelConfig, Transformer

TOK = byte_tokenizer()


def pairs(n, start=0):
    return [{"prompt": f"{i} + 1 = ", "target": str(i + 1)} for i in range(start, start + n)]


def test_one_file_holds_out_a_fixed_tenth_and_a_folder_its_split_files(tmp_path):
    """Order kept, the same cut when sample.py / eval.py rebuild the task; --seq-len 0 fits the longest
    example ("29 + 1 = 30" + EOS = 12 -> 16); a folder's test.jsonl, or a fixed cut of train, or --split."""
    task = get_task(f"jsonl:{write_jsonl(tmp_path / 'd.jsonl', pairs(30))}")
    train_ex, test_ex, cut = task.load("train"), task.load("test"), held_out(30)
    assert len(test_ex) == 3 and len(train_ex) == 27 and held_out(30) == cut and len(held_out(2)) == 1
    assert [e["prompt"] for e in test_ex] == [e["prompt"] for i, e in enumerate(pairs(30)) if i in cut]
    assert [e["prompt"] for e in train_ex] == [e["prompt"] for i, e in enumerate(pairs(30)) if i not in cut]
    assert task.SEQ_LEN == 16 and task.TOKENIZER == "bytes"
    again = get_task(task.NAME, task.OPTIONS)
    assert again.load("test") == test_ex and again.SEQ_LEN == task.SEQ_LEN
    d = tmp_path / "folder"
    d.mkdir()
    write_jsonl(d / "train.jsonl", pairs(5))
    write_jsonl(d / "dev.jsonl", pairs(2, start=50))
    task = get_task(f"jsonl:{d}")
    assert len(task.load("train")) + len(task.load("test")) == 5
    task = get_task(f"jsonl:{d}", {"split": "train,dev"})
    assert [e["target"] for e in task.load("test")] == ["51", "52"] and len(task.load("train")) == 5
    write_jsonl(d / "test.jsonl", pairs(1, start=90))
    assert [e["target"] for e in get_task(f"jsonl:{d}").load("test")] == ["91"]


def test_exact_match_answer_regex_and_stop_at_eos(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "q", "target": f"so #### {i}"} for i in range(10)])
    exact = get_task(f"jsonl:{path}")
    assert exact.is_correct("  so #### 3 \n", "so #### 3") and not exact.is_correct("so #### 33", "so #### 3")
    assert exact.is_finished("so<|endoftext|>") and not exact.is_finished("so #### 3")
    regex = get_task(f"jsonl:{path}", {"answer_regex": r"#### (\d+)"})
    assert all(e["answer"] == e["target"].split()[-1] for e in regex.load("train"))   # gold answer extracted
    assert regex.is_correct("other words #### 7 and more", "7") and not regex.is_correct("#### 8", "7")
    assert not regex.is_correct("no answer", "7")


def test_long_examples_are_an_error_or_dropped_and_the_automatic_seq_len_is_capped(tmp_path, capsys):
    rows = pairs(18) + [{"prompt": "p", "target": "x" * 40}, {"prompt": "p", "target": "y" * 30}]
    spec = f"jsonl:{write_jsonl(tmp_path / 'd.jsonl', rows)}"
    assert not held_out(20) & {18, 19}                              # both long lines are training examples
    with pytest.raises(ValueError) as e:
        get_task(spec, {"seq_len": 16}).load("train")
    assert str(e.value).endswith("2 of 18 train examples are longer than seq_len=16 tokens (the longest, "
                                 f"{spec[6:]} line 19, has 42): raise --seq-len or pass --drop-long")
    dropped = get_task(spec, {"seq_len": 16, "drop_long": True})
    assert all(len(e["prompt"]) + len(e["target"]) + 1 <= 16 for e in dropped.load("train"))
    assert "dropped (--drop-long)" in capsys.readouterr().err
    with pytest.raises(ValueError) as e:                            # nothing left to train on
        get_task(spec, {"seq_len": 4, "drop_long": True}).load("train")
    assert str(e.value) == "all 18 train examples are longer than seq_len=4 tokens (the shortest has 10): " \
                           "raise --seq-len"
    path = write_jsonl(tmp_path / "e.jsonl", pairs(9) + [{"prompt": "p",
                                                          "target": "x" * (AUTO_SEQ_LEN_MAX + 1)}])
    with pytest.raises(ValueError) as e:                            # not one huge line (an L x L mask)
        get_task(f"jsonl:{path}")
    assert str(e.value) == (f"{path} line 10 has {AUTO_SEQ_LEN_MAX + 3} tokens, more than the automatic "
                            f"--seq-len allows ({AUTO_SEQ_LEN_MAX}): pass --seq-len, and --drop-long to drop "
                            f"the longer examples")
    task = get_task(f"jsonl:{path}", {"seq_len": 16, "drop_long": True})
    assert len(task.load("train")) + len(task.load("test")) == 9


def test_text_lines_start_at_a_document_start_and_special_token_text_is_ordinary_text(tmp_path):
    """{"text": ...} lines model the language from one start token (EOS); literal <|endoftext|> / <|mask|> in
    the data are those bytes: EOS and [MASK] come from the code."""
    task = get_task(f"jsonl:{write_jsonl(tmp_path / 'd.jsonl', [{'text': f'line {i}'} for i in range(10)])}")
    ex = task.load("train")[0]
    assert ex["prompt"] == "<|endoftext|>" and ex["target"].startswith("line ")
    batch = encode(TOK, [ex], task.SEQ_LEN)
    assert batch["x0"][0, 0] == TOK.eos_id and batch["prompt_mask"][0].sum() == 1      # one start token
    assert (~batch["pad_mask"][0]).sum() == 1 + len(ex["target"]) + 1                  # start + text + EOS
    assert get_task(task.NAME, {"text_field": "text"}).load("train") == task.load("train")
    rows = [{"prompt": "a<|mask|>", "target": f"{i}<|endoftext|><|mask|>"} for i in range(10)]
    task = get_task(f"jsonl:{write_jsonl(tmp_path / 'd.jsonl', rows)}")
    ex = task.load("train")[0]
    assert ex["target"].endswith("<|endoftext|><|mask|>") and ex["answer"] == ex["target"]
    batch = encode(TOK, [ex], task.SEQ_LEN)
    assert batch["x0"][0][~batch["pad_mask"][0]].tolist() == list((ex["prompt"] + ex["target"]).encode()) + [
        TOK.eos_id]
    assert task.SEQ_LEN == 32                                     # 9 + 22 + EOS = 32 bytes, not 2 special ids
    text = get_task(f"jsonl:{write_jsonl(tmp_path / 't.jsonl', [{'text': 'x<|endoftext|>'}] * 4)}")
    ids = encode(TOK, text.load("train")[:1], text.SEQ_LEN)["x0"][0].tolist()
    assert ids[:16] == [TOK.eos_id] + list(b"x<|endoftext|>") + [TOK.eos_id]    # the start token stays EOS


def test_hf_dataset_fields_splits_and_bad_names(tmp_path, monkeypatch):
    """A folder datasets.load_dataset reads with its json builder (offline, a private cache)."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "hub_data"
    d.mkdir()
    write_jsonl(d / "train.jsonl", [{"question": f"{i}?", "answer": f"{i}!"} for i in range(8)])
    write_jsonl(d / "validation.jsonl", [{"question": "9?", "answer": "9!"}])
    fields = {"prompt_field": "question", "target_field": "answer"}
    task = get_task(f"hf:{d}", fields)
    assert [e["target"] for e in task.load("test")] == ["9!"]                     # no test split: validation
    assert task.load("train")[3] == {"prompt": "3?", "target": "3!", "answer": "3!"}
    with pytest.raises(ValueError, match=r"has no field 'prompt' \(its fields: question, answer\): name the "
                                         r"right one with --prompt-field"):
        get_task(f"hf:{d}")
    with pytest.raises(ValueError, match=r"has no split 'test'; its splits: train, validation"):
        get_task(f"hf:{d}", {**fields, "split": "train,test"})


def test_train_eval_sample_and_infill_end_to_end(tmp_path, capsys):
    """Train on a jsonl file; eval.py its likelihood and accuracy, and another test set (--data-dir); a prompt
    file batched == each prompt alone; a gap filled in place."""
    words = ("abc", "hello", "set", "mask", "tiny", "byte", "dog", "cat", "sun", "moon", "tree", "leaf")
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": f"{w}>", "target": w[::-1]} for w in words])
    ckpt = str(tmp_path / "ckpt")
    train.main(["--model", "setdiffusion", "--data", f"jsonl:{data}", "--smax", "4", "--max-iters", "3",
                "--out-dir", ckpt, *TINY, "--eval-limit", "4", "--max-new-tokens", "6"])
    config = json.loads(open(os.path.join(ckpt, "config.json")).read())
    assert config["data"] == f"jsonl:{data}" and config["data_options"]["seq_len"] == config["seq_len"] == 16
    assert config["data_options"]["prompt_field"] == "prompt"
    for task in ("likelihood", None):
        out = tmp_path / f"{task}.json"
        evaluate.main(["--ckpt", ckpt, "--json", str(out), *(["--task", task] if task else
                                                             ["--max-new-tokens", "6"])])
        m = json.loads(out.read_text())
        assert m["n"] == 1 and ("perplexity" in m if task else 0 <= m["accuracy"] <= 1)
    (tmp_path / "other").mkdir()
    write_jsonl(tmp_path / "other" / "test.jsonl", [{"prompt": "ab>", "target": "ba"},
                                                   {"prompt": "c>", "target": "c"}])
    write_jsonl(tmp_path / "other" / "train.jsonl", [{"prompt": "x>", "target": "x"}])
    evaluate.main(["--ckpt", ckpt, "--data-dir", str(tmp_path / "other"), "--json", str(tmp_path / "o.json")])
    assert json.loads((tmp_path / "o.json").read_text())["n"] == 2
    lines = ["abc>", "hello>", "{mask:2}a>"]
    (tmp_path / "prompts.txt").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    sample.main(["--ckpt", ckpt, "--prompt-file", str(tmp_path / "prompts.txt"), "--batch-size", "2",
                 "--max-new-tokens", "6"])
    batched = capsys.readouterr().out.split("\n\n")[:3]
    for prompt, shown in zip(lines, batched):
        sample.main(["--ckpt", ckpt, "--prompt", prompt, "--max-new-tokens", "6"])
        assert capsys.readouterr().out.split("\n\n")[0] == shown
    assert batched[0].startswith("abc>") and "a>" in batched[2] and "<|mask|>" not in batched[2]  # gap filled


@torch.no_grad()
def test_a_gap_at_the_end_of_the_prompt_is_plain_generation():
    """Set Diffusion: prompt + {mask:N} with no new tokens decodes what N new tokens after it would."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=TOK.vocab_size, n_layer=1, n_head=2, n_kv_head=2,
                                    n_embd=32)).eval()
    cfg = sd.SetDiffusionConfig(mask_id=TOK.mask_id, smax=4)
    ids = prompts.prompt_ids(TOK, "ab{mask:5}", 64, 1)
    assert ids == TOK.encode("ab") + [TOK.mask_id] * 5
    assert prompts.prompt_ids(TOK, "<|mask|>x{mask:0}", 64, 1) == [TOK.mask_id, ord("x")]
    gap, _ = sd.generate(model, torch.tensor([ids]), cfg, Settings(0, threshold=0.3))
    new, _ = sd.generate(model, torch.tensor([TOK.encode('ab')]), cfg, Settings(5, threshold=0.3))
    assert torch.equal(gap, new) and (gap != TOK.mask_id).all()


BAD = [   # (the jsonl file's bytes, or None: a folder of 4 train pairs; train.py flags; a part of the line,
          # or =the line)
    (b'{"prompt": "a", "target": "b"}\n{"prompt": "a", "target": \n', "", "{f} line 2 is not valid JSON"),
    (b'{"prompt": "a", "target": "b"}\n["a", "b"]\n', "", "{f} line 2 is not a JSON object"),
    (b'{"prompt": "a", "target": "b"}\n{"prompt": "c"}\n', "",
     "{f} line 2 has no field 'target' (its fields: prompt): name the right one with --target-field"),
    (b'{"prompt": "a", "target": ["b"]}\n{"prompt": "c", "target": "d"}\n', "", "field 'target' is list, "
                                                                                "not text"),
    (b"\n\n", "", "is empty: expected one JSON object per line"),
    (b'{"prompt": "a", "target": "b"}\r\n{"prompt": "caf\xe9", "target": "x"}\n', "",
     "={f} line 2 is not valid UTF-8 (byte 0xe9 at column 16): save the file as UTF-8"),
    (b'{"prompt": "a", "target": "b"}\r\n' + b"[" * 100000 + b"]" * 100000 + b"\n", "",
     "={f} line 2 is nested too deeply to read (thousands of [ or {{): expected one flat JSON object per "
     "line"),
    (None, "--data jsonl:{t}/nope.jsonl", "nope.jsonl not found"),
    (None, "--split train,dev", "has no split 'dev'; its splits: train"),
    (None, "--answer-regex ((", "not a valid regular"),
    (None, "--answer-regex ####.(\\d+)", "does not match the target"),
    (None, "--data hf:nobody/no-such-dataset-here", "could not load the Hugging Face dataset"),
]


@pytest.mark.parametrize("content, flags, message", BAD)
def test_bad_data_is_one_line_and_writes_nothing(tmp_path, content, flags, message):
    if content is None:
        f = write_jsonl(tmp_path / "train.jsonl", pairs(4)).parent
    else:
        (f := tmp_path / "d.jsonl").write_bytes(content)
    ckpt = tmp_path / "ckpt"
    err = error_of(train.main, ["--model", "ar", "--data", f"jsonl:{f}", *flags.format(t=tmp_path).split(),
                                "--out-dir", str(ckpt)])
    assert message.format(f=f) in err if message[0] != "=" else err == "error: " + message[1:].format(f=f)
    assert not os.path.exists(ckpt) and not os.path.exists(str(ckpt) + ".tmp")


def test_a_qwen3_format_tokenizer_end_to_end(tmp_path, capsys):
    """--tokenizer qwen3:DIR: lengths, EOS and the [MASK] text (<|fim_middle|>) come from that tokenizer."""
    data, ckpt, tok = write_jsonl(tmp_path / "d.jsonl", pairs(10)), str(tmp_path / "ckpt"), tmp_path / "tok"
    qwen_format_tokenizer(tok)
    train.main(["--model", "setdiffusion", "--smax", "4", "--data", f"jsonl:{data}", "--tokenizer",
                f"qwen3:{tok}", "--max-iters", "1", "--out-dir", ckpt, *TINY])
    task = get_task(f"jsonl:{data}", checkpoint.load(ckpt)[3]["data_options"])
    assert task.TOKENIZER == f"qwen3:{tok}" and task.is_finished("7<|endoftext|>")
    capsys.readouterr()
    sample.main(["--ckpt", ckpt, "--prompt", "3 + 1 = {mask:1}", "--max-new-tokens", "0"])
    out = capsys.readouterr().out
    assert out.startswith("3 + 1 = ") and "<|fim_middle|>" not in out and "{mask" not in out
