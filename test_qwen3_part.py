"""Qwen3 weights from Hugging Face and the paper's released checkpoints, checked offline on tiny random models:
python -m pytest -q test_qwen3_part.py

transformers is a test-only dependency (the reference for Qwen3's numerics). huggingface_hub reads HF_HOME and
HF_HUB_OFFLINE when it is imported, so everything that goes through a (fake) hub cache runs in a subprocess.
"""
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

import ar
import checkpoint
from model import ModelConfig, Transformer, from_pretrained, from_state, qwen3_config

V = 300                                # tiny vocabulary
REPO = os.path.dirname(os.path.abspath(__file__))
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


def fake_hub(hf_home, repo_id) -> str:
    """An empty snapshot of repo_id in a Hugging Face cache under hf_home (refs/main -> the revision)."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    root = os.path.join(hf_home, "hub", "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(root, "snapshots", rev))
    os.makedirs(os.path.join(root, "refs"))
    with open(os.path.join(root, "refs", "main"), "w") as f:
        f.write(rev)
    return os.path.join(root, "snapshots", rev)


def run_offline(hf_home, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


# ----------------------------------------------------------------------------- from_pretrained (Qwen3)

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
    assert (want != V - 1).all()                     # the id ar.generate suppresses (its [MASK]) is never chosen
    tokens, _ = ar.generate(model, prompt, ar.ARConfig(mask_id=V - 1), max_new_tokens=8)
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
from model import from_pretrained
with torch.no_grad():
    torch.save(from_pretrained("Qwen/Qwen3-Tiny")(torch.load({str(tmp_path / 'x.pt')!r})), {str(tmp_path / 'y.pt')!r})
""")
    with torch.no_grad():
        torch.testing.assert_close(torch.load(tmp_path / "y.pt"), from_pretrained(snapshot)(x))


# ----------------------------------------------------------------------------- released checkpoints (checkpoint.py)

TINY = ModelConfig(vocab_size=V, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, head_dim=8, intermediate_size=48,
                   rope_theta=1e6)
X = torch.arange(12).view(1, 12) * 7 % (V - 1)           # fixed input ids for logits comparisons


def released_weights(tie=True, ema=True, seed=0) -> tuple[dict, dict]:
    """(state dict in the official layout, the state in our names it must load as). With ema, the official
    dict also holds the raw weights under backbone.*, and the EMA copy (what must load) under ema.backbone.*."""
    def official(model, prefix):
        return {(prefix + "lm_head.weight" if k == "lm_head.weight" else prefix + "model." + k): v
                for k, v in checkpoint.weights(model).items()}
    torch.manual_seed(seed)
    cfg = dataclasses.replace(TINY, tie_embeddings=tie)
    raw, avg = Transformer(cfg), Transformer(cfg)
    state = {"noise.loc": torch.linspace(0, 1, 8), **official(raw, "backbone.")}
    if ema:
        state.update(official(avg, "ema.backbone."))
    return state, checkpoint.weights(avg if ema else raw)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


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
               "backbone_config": {"_target_": "backbone_automodel.AutoModelFromPreTrained", "rope_theta": 1e6}})

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

    d = fake_hub(home, "kuleshov-group/cnndm-mdlm")                       # no mask id: Qwen3's is too big here
    save_file(released_weights()[0], os.path.join(d, "model.safetensors"))
    write_json(os.path.join(d, "config.json"), {"architectures": ["MDLM"]})

    d = fake_hub(home, "me/our-run")                                      # our own format, pushed to the Hub
    torch.manual_seed(4)
    ours = Transformer(TINY)
    checkpoint.save(os.path.join(home, "run"), ours, {"model": dataclasses.asdict(TINY), "method": "mdlm",
                    "method_config": {"mask_id": V - 1}, "tokenizer": "bytes", "data": "arith", "seq_len": 32})
    for f in ("config.json", "model.safetensors"):
        os.replace(os.path.join(home, "run", f), os.path.join(d, f))
    expect["ours"] = checkpoint.weights(ours)

    d = fake_hub(home, "Qwen/Qwen3-Tiny")                                 # a plain Qwen3 base model
    write_json(os.path.join(d, "config.json"), {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], **SHAPE})
    d = fake_hub(home, "someone/llama-tiny")                              # another architecture
    write_json(os.path.join(d, "config.json"), {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})

    loads = {"setdlm": "gsm8k:setdlm-smax8", "setdlm_alias": "gsm8k:setdlm-d4", "bd3lm": "gsm8k:bd3lm-s8",
             "ar": "cnndm:ar", "no_mask": "cnndm:mdlm", "ours": "me/our-run", "base": "Qwen/Qwen3-Tiny",
             "llama": "someone/llama-tiny", "missing": "gsm8k:mdlm"}
    out = os.path.join(home, "results.pt")
    run_offline(home, f"""
import dataclasses, torch, checkpoint
results = {{}}
for name, key in {loads!r}.items():
    try:
        model, method, cfg, config = checkpoint.load(key)
        with torch.no_grad():
            logits = model(torch.tensor({X.tolist()!r}))
        results[name] = dict(method=method.__name__, cfg=dataclasses.asdict(cfg), config=config, logits=logits)
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
    assert r["method"] == "setdiffusion" and r["cfg"] == {"mask_id": V - 1, "smax": 8}
    c = r["config"]
    assert c["method"] == "setdiffusion" and c["data"] == "gsm8k" and c["seq_len"] == 1024
    assert c["source"] == "kuleshov-group/setdlm-gsm8k-smax8" and c["tokenizer"] == "qwen3:Qwen/Qwen3-1.7B-Base"
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
    assert err.startswith("FileNotFoundError") and "kuleshov-group/gsm8k-mdlm" in err and "HF_HUB_OFFLINE=0" in err
    assert "\n" not in err
    with pytest.raises(ValueError, match="unknown checkpoint key.*gsm8k:setdlm-smax8"):
        checkpoint.load("gsm8k:setdlm-smax64")


def test_released_keys():
    assert checkpoint.RELEASED["gsm8k:setdlm-smax16"] == "kuleshov-group/setdlm-gsm8k-smax16"
    assert checkpoint.RELEASED["gsm8k:setdlm-d16"] == "kuleshov-group/setdlm-gsm8k-smax32"
    assert checkpoint.RELEASED["cnndm:setdlm-smax8"] == "kuleshov-group/cnndm-setdlm-smax8"
    assert checkpoint.RELEASED["cnndm:bd3lm-s16"] == "kuleshov-group/cnndm-bd3lm-s16"
    assert checkpoint.RELEASED["gsm8k:ar"] == "kuleshov-group/gsm8k-ar" and len(checkpoint.RELEASED) == 22


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
    write_json(d / "config.json", {"architectures": ["SetDLM"], "tokenization_config": {"mask_token_id": V - 1},
                                   "length": 768, "noise_config": noise})
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
    config = {"model": dataclasses.asdict(TINY), "method": "setdiffusion", "method_config": {"mask_id": V - 1, "smax": 4},
              "tokenizer": "bytes", "data": "arith", "seq_len": 32}
    checkpoint.save(str(tmp_path / "run"), model, config)
    os.replace(tmp_path / "run", tmp_path / "run.old")                   # a kill between the two renames
    loaded, method, cfg, back = checkpoint.load(str(tmp_path / "run"))
    assert method.__name__ == "setdiffusion" and cfg.smax == 4 and back == config
    torch.testing.assert_close(loaded(X).detach(), model.eval()(X).detach())
    with pytest.raises(FileNotFoundError):
        checkpoint.load(str(tmp_path / "nothing"))
