"""Your own data (data/custom.py): jsonl:/hf: tasks, their splits, scoring and length rules, prompt files
and [MASK] infilling in sample.py, end to end on tiny CPU models, and one test per bad input."""
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
from model import ModelConfig, Transformer

TINY = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--batch-size", "4", "--eval-limit", "4",
        "--max-new-tokens", "6", "--warmup", "2"]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pairs(n, start=0):
    return [{"prompt": f"{i} + 1 = ", "target": str(i + 1)} for i in range(start, start + n)]


def error_of(main, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    return str(e.value.code)


# ----------------------------------------------------------------------------- the task object

def test_one_file_holds_out_a_fixed_tenth(tmp_path):
    task = get_task(f"jsonl:{write_jsonl(tmp_path / 'd.jsonl', pairs(30))}")
    train_ex, test_ex = task.load("train"), task.load("test")
    assert len(test_ex) == 3 and len(train_ex) == 27
    prompts = [e["prompt"] for e in pairs(30)]
    cut = held_out(30)
    assert [e["prompt"] for e in test_ex] == [p for i, p in enumerate(prompts) if i in cut]     # order kept
    assert [e["prompt"] for e in train_ex] == [p for i, p in enumerate(prompts) if i not in cut]
    assert held_out(30) == cut and len(held_out(2)) == 1
    assert task.SEQ_LEN == 16 and task.TOKENIZER == "bytes"      # longest "29 + 1 = 30" + EOS = 12 -> 16
    again = get_task(task.NAME, task.OPTIONS)                     # what sample.py / eval.py rebuild
    assert again.load("test") == test_ex and again.SEQ_LEN == task.SEQ_LEN


def test_folder_of_split_files_and_split_option(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", pairs(5))
    write_jsonl(tmp_path / "dev.jsonl", pairs(2, start=50))
    task = get_task(f"jsonl:{tmp_path}")                          # no test.jsonl: a fixed cut of train
    assert len(task.load("train")) + len(task.load("test")) == 5
    task = get_task(f"jsonl:{tmp_path}", {"split": "train,dev"})
    assert [e["target"] for e in task.load("test")] == ["51", "52"] and len(task.load("train")) == 5
    write_jsonl(tmp_path / "test.jsonl", pairs(1, start=90))
    assert [e["target"] for e in get_task(f"jsonl:{tmp_path}").load("test")] == ["91"]


def test_text_lines_are_language_modelling_from_a_document_start(tmp_path):
    task = get_task(f"jsonl:{write_jsonl(tmp_path / 'd.jsonl', [{'text': f'line {i}'} for i in range(10)])}")
    ex = task.load("train")[0]
    assert ex["prompt"] == "<|endoftext|>" and ex["target"].startswith("line ")
    tok = byte_tokenizer()
    batch = encode(tok, [ex], task.SEQ_LEN)
    assert batch["x0"][0, 0] == tok.eos_id and batch["prompt_mask"][0].sum() == 1      # one start token
    assert (~batch["pad_mask"][0]).sum() == 1 + len(ex["target"]) + 1                  # start + text + EOS
    named = get_task(task.NAME, {"text_field": "text"})
    assert named.load("train") == task.load("train")


def test_exact_match_answer_regex_and_stop_at_eos(tmp_path):
    rows = [{"prompt": "q", "target": f"so #### {i}"} for i in range(10)]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    exact = get_task(f"jsonl:{path}")
    assert exact.is_correct("  so #### 3 \n", "so #### 3") and not exact.is_correct("so #### 33", "so #### 3")
    assert exact.is_finished("so<|endoftext|>") and not exact.is_finished("so #### 3")
    regex = get_task(f"jsonl:{path}", {"answer_regex": r"#### (\d+)"})
    assert all(e["answer"] == e["target"].split()[-1] for e in regex.load("train"))   # gold answer extracted
    assert regex.is_correct("other words #### 7 and more", "7") and not regex.is_correct("#### 8", "7")
    assert not regex.is_correct("no answer", "7")


def test_long_examples_are_an_error_or_dropped_and_reported(tmp_path, capsys):
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
    assert str(e.value) == ("all 18 train examples are longer than seq_len=4 tokens (the shortest has 10): "
                            "raise --seq-len")


def test_the_automatic_seq_len_is_capped(tmp_path):
    """--seq-len 0 fits the longest example up to AUTO_SEQ_LEN_MAX, not one huge line (an L x L mask)."""
    rows = pairs(9) + [{"prompt": "p", "target": "x" * (AUTO_SEQ_LEN_MAX + 1)}]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(ValueError) as e:
        get_task(f"jsonl:{path}")
    assert str(e.value) == (f"{path} line 10 has {AUTO_SEQ_LEN_MAX + 3} tokens, more than the automatic "
                            f"--seq-len allows ({AUTO_SEQ_LEN_MAX}): pass --seq-len, and --drop-long to drop "
                            f"the longer examples")
    task = get_task(f"jsonl:{path}", {"seq_len": 16, "drop_long": True})
    assert len(task.load("train")) + len(task.load("test")) == 9


def test_special_token_text_in_the_data_is_ordinary_text(tmp_path):
    """Literal <|endoftext|> / <|mask|> in a target are those bytes: EOS and [MASK] come only from the
    code."""
    rows = [{"prompt": "a<|mask|>", "target": f"{i}<|endoftext|><|mask|>"} for i in range(10)]
    task = get_task(f"jsonl:{write_jsonl(tmp_path / 'd.jsonl', rows)}")
    tok = byte_tokenizer()
    ex = task.load("train")[0]
    assert ex["target"].endswith("<|endoftext|><|mask|>") and ex["answer"] == ex["target"]
    batch = encode(tok, [ex], task.SEQ_LEN)
    ids = batch["x0"][0][~batch["pad_mask"][0]].tolist()
    assert ids == list(ex["prompt"].encode() + ex["target"].encode()) + [tok.eos_id]
    assert task.SEQ_LEN == 32                                     # 9 + 22 + EOS = 32 bytes, not 2 special ids
    text = get_task(f"jsonl:{write_jsonl(tmp_path / 't.jsonl', [{'text': 'x<|endoftext|>'}] * 4)}")
    ids = encode(tok, text.load("train")[:1], text.SEQ_LEN)["x0"][0].tolist()
    assert ids[:16] == [tok.eos_id] + list(b"x<|endoftext|>") + [tok.eos_id]    # the start token stays EOS


# ---------------------------------------------------------------------------- the Hugging Face path (offline)

@pytest.fixture
def hf_folder(tmp_path, monkeypatch):
    """A dataset folder datasets.load_dataset reads with its own json builder: no network, a private cache."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "hub_data"
    d.mkdir()
    write_jsonl(d / "train.jsonl", [{"question": f"{i}?", "answer": f"{i}!"} for i in range(8)])
    write_jsonl(d / "validation.jsonl", [{"question": "9?", "answer": "9!"}])
    return d


def test_hf_dataset_fields_splits_and_bad_names(hf_folder):
    task = get_task(f"hf:{hf_folder}", {"prompt_field": "question", "target_field": "answer"})
    assert [e["target"] for e in task.load("test")] == ["9!"]                     # no test split: validation
    assert task.load("train")[3] == {"prompt": "3?", "target": "3!", "answer": "3!"}
    with pytest.raises(ValueError, match=r"has no field 'prompt' \(its fields: question, answer\): name the "
                                         r"right one with --prompt-field"):
        get_task(f"hf:{hf_folder}")
    with pytest.raises(ValueError, match=r"has no split 'test'; its splits: train, validation"):
        get_task(f"hf:{hf_folder}", {"prompt_field": "question", "target_field": "answer",
                                     "split": "train,test"})


# ----------------------------------------------------------------------------- end to end

def test_train_eval_sample_and_infill_end_to_end(tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": f"{w}>", "target": w[::-1]}
                                                for w in ("abc", "hello", "set", "mask", "tiny", "byte",
                                                          "dog",
                                                          "cat", "sun", "moon", "tree", "leaf")])
    ckpt = str(tmp_path / "ckpt")
    train.main(["--model", "setdiffusion", "--data", f"jsonl:{data}", "--smax", "4", "--max-iters", "3",
                "--out-dir", ckpt, *TINY])
    config = json.loads(open(os.path.join(ckpt, "config.json")).read())
    assert config["data"] == f"jsonl:{data}" and config["data_options"]["seq_len"] == config["seq_len"] == 16
    for task in ("likelihood", None):
        out = tmp_path / f"{task}.json"
        task_arg = ["--task", task] if task else ["--max-new-tokens", "6"]      # likelihood samples nothing
        evaluate.main(["--ckpt", ckpt, "--json", str(out), *task_arg])
        m = json.loads(out.read_text())
        assert m["n"] == 1 and ("perplexity" in m if task else 0 <= m["accuracy"] <= 1)

    (tmp_path / "other").mkdir()                                  # --data-dir: another test set, same options
    write_jsonl(tmp_path / "other" / "test.jsonl",
                [{"prompt": "ab>", "target": "ba"}, {"prompt": "c>", "target": "c"}])
    write_jsonl(tmp_path / "other" / "train.jsonl", [{"prompt": "x>", "target": "x"}])
    evaluate.main(["--ckpt", ckpt, "--data-dir", str(tmp_path / "other"), "--json", str(tmp_path / "o.json")])
    assert json.loads((tmp_path / "o.json").read_text())["n"] == 2

    prompts = ["abc>", "hello>", "{mask:2}a>"]
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n")
    capsys.readouterr()
    sample.main(["--ckpt", ckpt, "--prompt-file", str(tmp_path / "prompts.txt"), "--batch-size", "2",
                 "--max-new-tokens", "6"])
    batched = capsys.readouterr().out.split("\n\n")[:3]
    for prompt, shown in zip(prompts, batched):                       # batched == each prompt alone
        sample.main(["--ckpt", ckpt, "--prompt", prompt, "--max-new-tokens", "6"])
        assert capsys.readouterr().out.split("\n\n")[0] == shown
    assert batched[0].startswith("abc>") and "a>" in batched[2] and "<|mask|>" not in batched[2]  # gap filled


@torch.no_grad()
def test_a_gap_at_the_end_of_the_prompt_is_plain_generation():
    """Set Diffusion: prompt + {mask:N} with no new tokens decodes exactly what N new tokens after it
    would."""
    tok = byte_tokenizer()
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_kv_head=2,
                                    n_embd=32)).eval()
    cfg = sd.SetDiffusionConfig(mask_id=tok.mask_id, smax=4)
    text = prompts.expand_masks(tok, "ab{mask:5}")
    assert tok.encode(text) == tok.encode("ab") + [tok.mask_id] * 5
    assert tok.encode(prompts.expand_masks(tok, "<|mask|>x{mask:0}")) == [tok.mask_id, ord("x")]
    gap, _ = sd.generate(model, torch.tensor([tok.encode(text)]), cfg, Settings(0, threshold=0.3))
    new, _ = sd.generate(model, torch.tensor([tok.encode('ab')]), cfg, Settings(5, threshold=0.3))
    assert torch.equal(gap, new) and (gap != tok.mask_id).all()


# ----------------------------------------------------------------------------- bad input: one clear line each

def test_bad_data_spec(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        train.main(["--model", "ar", "--data", "csv:x"])
    assert e.value.code == 2 \
        and "invalid choice: 'csv:x' (choose arith, gsm8k, cnndm, jsonl:PATH or hf:ORG/NAME)" \
        in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "a", "target": "b"}\n{"prompt": "a", "target": \n', "line 2 is not valid JSON"),
    ('{"prompt": "a", "target": "b"}\n["a", "b"]\n', "line 2 is not a JSON object"),
    ('{"prompt": "a", "target": "b"}\n{"prompt": "c"}\n', "line 2 has no field 'target' (its fields: "
                                                          "prompt): name the right one with --target-field"),
    ('{"prompt": "a", "target": ["b"]}\n{"prompt": "c", "target": "d"}\n',
     "field 'target' is list, not text"),
    ("\n\n", "is empty: expected one JSON object per line"),
])
def test_bad_jsonl_gets_one_line_and_writes_nothing(tmp_path, content, message):
    (tmp_path / "d.jsonl").write_text(content)
    ckpt = tmp_path / "ckpt"
    err = error_of(train.main, ["--model", "ar", "--data", f"jsonl:{tmp_path / 'd.jsonl'}", "--out-dir",
                                str(ckpt)])
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert not os.path.exists(ckpt) and not os.path.exists(str(ckpt) + ".tmp")


@pytest.mark.parametrize("line, message", [
    (b'{"prompt": "caf\xe9", "target": "x"}', "line 2 is not valid UTF-8 (byte 0xe9 at column 16): save the "
                                              "file as UTF-8"),
    (b"[" * 100000 + b"]" * 100000, "line 2 is nested too deeply to read (thousands of [ or {): expected one "
                                    "flat JSON object per line"),
])
def test_unreadable_lines_name_the_file_and_line(tmp_path, line, message):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"prompt": "a", "target": "b"}\r\n' + line + b"\n")
    err = error_of(train.main, ["--model", "ar", "--data", f"jsonl:{path}", "--out-dir",
                                str(tmp_path / "ckpt")])
    assert err == f"error: {path} {message}"
    assert not os.path.exists(tmp_path / "ckpt")


def test_bad_paths_splits_and_regex(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    write_jsonl(tmp_path / "train.jsonl", pairs(4))
    base = ["--model", "ar", "--out-dir", str(tmp_path / "ckpt")]
    for extra, message in [(["--data", f"jsonl:{tmp_path / 'nope.jsonl'}"], "nope.jsonl not found"),
                           (["--data", f"jsonl:{tmp_path}", "--split", "train,dev"], "has no split 'dev'; "
                                                                                      "its splits: train"),
                           (["--data", f"jsonl:{tmp_path}", "--answer-regex", "(("], "not a valid regular"),
                           (["--data", f"jsonl:{tmp_path}", "--answer-regex", "#### (\\d+)"],
                            "does not match the target"),
                           (["--data", "hf:nobody/no-such-dataset-here"],
                            "could not load the Hugging Face dataset")]:
        err = error_of(train.main, base + extra)
        assert err.startswith("error: ") and message in err and "\n" not in err
    assert not os.path.exists(tmp_path / "ckpt")


def test_infill_refused_by_methods_that_cannot(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", pairs(6))
    ckpt = str(tmp_path / "ckpt")
    train.main(["--model", "ar", "--data", f"jsonl:{data}", "--max-iters", "1", "--out-dir", ckpt, *TINY])
    err = error_of(sample.main, ["--ckpt", ckpt, "--prompt", "1 + {mask:1} = 2"])
    assert err == ("error: prompt 1 has [MASK]s to fill, and AR cannot fill masks inside the prompt (it "
                   "continues the left context only): use a Set Diffusion, BD3-LM or MDLM checkpoint")
    (tmp_path / "empty.txt").write_text("\n")
    assert "holds no prompt" in error_of(sample.main, ["--ckpt", ckpt, "--prompt-file",
                                                       str(tmp_path / "empty.txt")])
    assert checkpoint.load(ckpt)[3]["data_options"]["prompt_field"] == "prompt"


def test_a_qwen3_format_tokenizer_end_to_end(tmp_path, capsys):
    """--tokenizer qwen3:DIR: lengths, EOS and the [MASK] text (<|fim_middle|>) come from that tokenizer."""
    from data.qwen import gpt2_byte_alphabet
    vocab = {c: b for c, b in gpt2_byte_alphabet().items()}                     # 256 byte tokens, id = byte
    added = [{"id": 256, "content": "<|endoftext|>"}, {"id": 257, "content": "<|fim_middle|>"}]
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab},
                                                                 "added_tokens": added}))
    data = write_jsonl(tmp_path / "d.jsonl", pairs(10))
    ckpt = str(tmp_path / "ckpt")
    train.main(["--model", "setdiffusion", "--smax", "4", "--data", f"jsonl:{data}", "--tokenizer",
                f"qwen3:{tmp_path / 'tok'}", "--max-iters", "1", "--out-dir", ckpt, *TINY])
    task = get_task(f"jsonl:{data}", checkpoint.load(ckpt)[3]["data_options"])
    assert task.TOKENIZER == f"qwen3:{tmp_path / 'tok'}" and task.is_finished("7<|endoftext|>")
    capsys.readouterr()
    sample.main(["--ckpt", ckpt, "--prompt", "3 + 1 = {mask:1}", "--max-new-tokens", "0"])
    out = capsys.readouterr().out
    assert out.startswith("3 + 1 = ") and "<|fim_middle|>" not in out and "{mask" not in out


def test_resume_on_your_own_data_repeats_the_uninterrupted_run(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", pairs(12))
    args = ["--model", "ar", "--data", f"jsonl:{data}", "--max-iters", "4", *TINY, "--eval-limit", "1"]
    full = train.main([*args, "--out-dir", str(tmp_path / "a")])
    train.main([*args, "--out-dir", str(tmp_path / "b"), "--max-iters", "2"])
    resumed = train.main([*args, "--out-dir", str(tmp_path / "b"), "--resume"])
    assert resumed == full[2:]
