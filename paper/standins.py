"""Stand-ins for what the paper's make targets download, for their rehearsal on a CPU (paper/rehearse.py):
tiny random checkpoints in the released formats in a fake Hugging Face cache, the tokenizers' files, and tiny
data sets in the layouts the loaders read. build(root, keys) writes them all; the module docstring of
paper/rehearse.py says what stands in for what.

Each file is in the format of what it stands for, so the loaders read it as they read the real one; only the
sizes differ (1 layer, width 8 or 16, a few examples). The released formats are as common/pretrained.py reads
them and as the official push code writes them (torch.save'd pytorch_model.bin, config.json, tokenizer files).
"""
import csv
import hashlib
import importlib.util
import json
import os
import random
import shutil
import tempfile

import torch

REV = "0123456789abcdef0123456789abcdef01234567"          # the one revision of every stand-in repo
# Qwen3's added tokens, ids 151643.. in order (its tokenizer.json); <|fim_middle|> is the [MASK]
QWEN3_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                 "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                 "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
                 "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                 "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>",
                 "</think>"]
QWEN3_BPE, QWEN3_VOCAB = 151643, 151936     # BPE entries; the model's embedding rows
QWEN3_EOS, QWEN3_MASK = 151643, 151660
QWEN3 = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
             intermediate_size=16)       # the stand-ins' shape (Qwen3-1.7B: 2048, 28, 16, 8, 128, 6144)
DIT = dict(hidden_size=16, n_heads=2, n_blocks=1, cond_dim=8)      # (the released DiTs: 768, 12, 12, 128)
# corpus -> (vocabulary, L, [MASK], pad, BOS, EOS) of its DiT releases (GPT-2 + [MASK]; bert-base-uncased)
DIT_DATA = {"owt": (50258, 1024, 50257, 50256, 50256, 50256), "lm1b": (30522, 128, 103, 0, 101, 102)}
ADALN = {"owt:ar", "owt:mdlm", "lm1b:mdlm", "lm1b:bd3lm-s4", "lm1b:bd3lm-s8", "lm1b:bd3lm-s16"}   # the older
# method word of a key -> the release's (architectures, model_type)
ARCH = {"ar": ("AR", "ar"), "mdlm": ("MDLM", "mdlm"), "bd3lm": ("BD3LM", "bd3lm"),
        "setdlm": ("SetDLM", "bd3lm")}
GPT2_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
WORDS = ("the cat dog bird fox sat ran saw ate on in under a big small red blue green mat tree house park "
         "today and then because it was happy tired again").split()


def build(root: str, keys: list[str]) -> None:
    """Every stand-in under root: hf/ (HF_HOME), tiktoken/ (GPT-2's files, when openai-whisper is installed)
    and data/; the released checkpoints of keys (e.g. gsm8k:ar, owt:setdlm-smax16). A key that names no
    release (a local checkpoint in a list, a misspelt key) gets none: its target then says what is wrong."""
    from common.pretrained import RELEASED
    hf, data, rng = os.path.join(root, "hf"), os.path.join(root, "data"), random.Random(0)
    tokenizer = qwen3_tokenizer_json()
    base_models(hf, tokenizer)
    for i, key in enumerate(k for k in keys if k in RELEASED):
        released(hf, key, tokenizer, torch.Generator().manual_seed(i))
    gpt2_files(os.path.join(root, "tiktoken"))
    scorers(hf, os.path.join(root, "tiktoken"))
    gsm8k(hf, os.path.join(data, "gsm8k"), rng)
    cnndm(os.path.join(data, "cnndm"), rng)
    rocstories(os.path.join(data, "rocstories"), rng)
    owt(os.path.join(data, "owt"), rng)
    lm1b(os.path.join(data, "lm1b"), rng)
    mcqa(os.path.join(data, "mcqa"), rng)


# ----------------------------------------------------------------------------- files in a fake Hub cache

def hub_repo(hf: str, repo_id: str, kind: str = "models") -> str:
    """The (new) snapshot folder of repo_id in the Hub cache under hf; refs/main names its revision."""
    root = os.path.join(hf, "hub", f"{kind}--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(root, "refs"), exist_ok=True)
    with open(os.path.join(root, "refs", "main"), "w") as f:
        f.write(REV)
    snapshot = os.path.join(root, "snapshots", REV)
    os.makedirs(snapshot, exist_ok=True)
    return snapshot


def write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, allow_nan=False)


# ----------------------------------------------------------------------------- tokenizers

def qwen3_tokenizer_json() -> dict:
    """A Qwen3 tokenizer.json: the 26 special tokens at their ids, ids 0..255 the bytes and 256..151642 byte
    strings no merge reaches (no merges at all: text encodes byte by byte, and every id decodes)."""
    from data.qwen import QWEN2_PATTERN, gpt2_byte_alphabet
    char = {b: c for c, b in gpt2_byte_alphabet().items()}                   # byte -> its vocab character
    vocab = {char[b]: b for b in range(256)}
    vocab.update({"".join(char[b] for b in b"\x00\x01" + i.to_bytes(3, "big")): i
                  for i in range(256, QWEN3_BPE)})
    return {"version": "1.0", "normalizer": {"type": "NFC"},
            "added_tokens": [{"id": QWEN3_BPE + i, "content": t, "special": True}
                             for i, t in enumerate(QWEN3_SPECIAL)],
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            "model": {"type": "BPE", "vocab": vocab, "merges": []}}


def bert_vocab() -> list[str]:
    """bert-base-uncased's layout ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103), 30,522 entries: the
    stand-in texts' words, letters and digits (any word splits into them), the rest unused."""
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,!?'\"-:;()")
    known = list(dict.fromkeys(["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]",
                                                                                "[MASK]"]
                               + chars + ["##" + c for c in chars] + WORDS))
    return known + [f"[unused{i}]" for i in range(99, 99 + 30522 - len(known))]


def gpt2_files(folder: str) -> None:
    """GPT-2's vocab.bpe and encoder.json, byte for byte, in tiktoken's cache layout (the sha1 of each URL),
    rebuilt from openai-whisper's gpt2.tiktoken ranks: the merges in rank order, each token split where the
    BPE of the lower ranks splits it. tiktoken checks both files against their published sha256. Nothing is
    written without that package."""
    spec = importlib.util.find_spec("whisper")
    if spec is None:
        return
    from tiktoken.load import load_tiktoken_bpe
    from data.qwen import gpt2_byte_alphabet
    ranks = load_tiktoken_bpe(os.path.join(spec.submodule_search_locations[0], "assets", "gpt2.tiktoken"))
    char = {b: c for c, b in gpt2_byte_alphabet().items()}
    text = lambda token: "".join(char[b] for b in token)                     # noqa: E731
    tokens = sorted(ranks, key=ranks.get)
    encoder = {**{text(t): ranks[t] for t in tokens}, "<|endoftext|>": 50256}
    merges = ["#version: 0.2"] + [" ".join(text(p) for p in first_split(t, ranks)) for t in tokens[256:]]
    os.makedirs(folder, exist_ok=True)
    encoder_json = json.dumps(encoder, allow_nan=False)
    for name, data in (("vocab.bpe", "\n".join(merges) + "\n"), ("encoder.json", encoder_json)):
        with open(os.path.join(folder, hashlib.sha1((GPT2_URL + name).encode()).hexdigest()), "wb") as f:
            f.write(data.encode())


def first_split(token: bytes, ranks: dict) -> list[bytes]:
    """The two parts BPE merges into token: its bytes merged by the lowest-ranked pair, with ranks below
    token's own, until two are left."""
    parts, rank = [bytes([b]) for b in token], ranks[token]
    while len(parts) > 2:
        r, i = min((ranks.get(a + b, rank), i) for i, (a, b) in enumerate(zip(parts, parts[1:])))
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


# ----------------------------------------------------------------------------- checkpoints

def qwen3_tensors(g: torch.Generator) -> dict:
    """Random Qwen3 weights under Hugging Face's names (tied: no lm_head), of the QWEN3 shape."""
    D, hd, n = QWEN3["hidden_size"], QWEN3["head_dim"], QWEN3["intermediate_size"]
    q, kv = QWEN3["num_attention_heads"] * hd, QWEN3["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": (QWEN3_VOCAB, D), "model.norm.weight": (D,)}
    for i in range(QWEN3["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (q, D), p + "self_attn.k_proj.weight": (kv, D),
                       p + "self_attn.v_proj.weight": (kv, D), p + "self_attn.o_proj.weight": (D, q),
                       p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                       p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                       p + "mlp.gate_proj.weight": (n, D), p + "mlp.up_proj.weight": (n, D),
                       p + "mlp.down_proj.weight": (D, n)})
    return {k: 1 + 0.1 * torch.randn(s, generator=g) if len(s) == 1 else 0.2 * torch.randn(s, generator=g)
            for k, s in shapes.items()}


def qwen3_config() -> dict:
    """Qwen3-1.7B-Base's config.json, at the QWEN3 shape."""
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": QWEN3_VOCAB, **QWEN3,
            "rope_theta": 1000000, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_act": "silu",
            "max_position_embeddings": 32768, "bos_token_id": QWEN3_EOS, "eos_token_id": QWEN3_EOS,
            "torch_dtype": "bfloat16"}


def base_models(hf: str, tokenizer: dict) -> None:
    """Qwen/Qwen3-1.7B-Base (what finetune-gsm8k starts from), Qwen/Qwen3-0.6B-Base (CNN/DM's tokenizer) and
    google-bert/bert-base-uncased (LM1B's vocabulary), in their Hub layouts."""
    from safetensors.torch import save_file
    d = hub_repo(hf, "Qwen/Qwen3-1.7B-Base")
    save_file(qwen3_tensors(torch.Generator().manual_seed(1000)), os.path.join(d, "model.safetensors"))
    write_json(os.path.join(d, "config.json"), qwen3_config())
    write_json(os.path.join(d, "tokenizer.json"), tokenizer)
    d = hub_repo(hf, "Qwen/Qwen3-0.6B-Base")
    write_json(os.path.join(d, "config.json"), qwen3_config())
    write_json(os.path.join(d, "tokenizer.json"), tokenizer)
    d = hub_repo(hf, "google-bert/bert-base-uncased")
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(bert_vocab()) + "\n")


def dit_tensors(V: int, adaln: bool, g: torch.Generator) -> dict:
    """Random weights of the official DiT under its released names (backbone.*), of the DIT shape; with
    adaLN, its modulation and sigma map too."""
    D, c = DIT["hidden_size"], DIT["cond_dim"]
    shapes = {"backbone.vocab_embed.embedding": (V, D), "backbone.output_layer.norm_final.weight": (D,),
              "backbone.output_layer.linear.weight": (V, D), "backbone.output_layer.linear.bias": (V,)}
    for i in range(DIT["n_blocks"]):
        p = f"backbone.blocks.{i}."
        shapes.update({p + "norm1.weight": (D,), p + "attn_qkv.weight": (3 * D, D),
                       p + "attn_out.weight": (D, D), p + "norm2.weight": (D,),
                       p + "mlp.0.weight": (4 * D, D), p + "mlp.0.bias": (4 * D,),
                       p + "mlp.2.weight": (D, 4 * D), p + "mlp.2.bias": (D,)})
        if adaln:
            shapes.update({p + "adaLN_modulation.weight": (6 * D, c), p + "adaLN_modulation.bias": (6 * D,)})
    if adaln:
        shapes.update({"backbone.sigma_map.mlp.0.weight": (c, 256), "backbone.sigma_map.mlp.0.bias": (c,),
                       "backbone.sigma_map.mlp.2.weight": (c, c), "backbone.sigma_map.mlp.2.bias": (c,),
                       "backbone.output_layer.adaLN_modulation.weight": (2 * D, c),
                       "backbone.output_layer.adaLN_modulation.bias": (2 * D,)})
    return {k: 1 + 0.1 * torch.randn(s, generator=g) if "norm" in k else 0.2 * torch.randn(s, generator=g)
            for k, s in shapes.items()}


def released(hf: str, key: str, tokenizer: dict, g: torch.Generator) -> None:
    """The released checkpoint of key (e.g. gsm8k:bd3lm-s4, lm1b:setdlm-smax8) under its Hub name, as the
    official push code writes it: torch.save'd pytorch_model.bin (Set Diffusion's with its
    static_attention_mask buffer beside the weights), a config.json of the denoiser (architecture, length,
    backbone, tokenization and noise configs), and the tokenizer's files."""
    from common.pretrained import RELEASED, name_number
    task, name = key.split(":")
    method = name.split("-")[0]
    d = hub_repo(hf, RELEASED[key])
    if task in DIT_DATA:
        V, L, mask, pad, bos, eos = DIT_DATA[task]
        state = dit_tensors(V, key in ADALN, g)
        backbone = {"_target_": "backbone_dit.DIT", **DIT, "adaln": key in ADALN, "vocab_size": V,
                    "length": L}
    else:
        V, L, mask, pad, bos, eos = (QWEN3_VOCAB, 768 if task == "cnndm" else 1024, QWEN3_MASK,
                                     QWEN3_EOS, QWEN3_EOS, QWEN3_EOS)
        state = {"backbone.model." + k: v for k, v in qwen3_tensors(g).items()}
        state["backbone.model.lm_head.weight"] = state["backbone.model.model.embed_tokens.weight"]   # tied
        backbone = {"_target_": "backbone_automodel.AutoModelFromPreTrained",
                    "pretrained_model_name_or_path": "Qwen/Qwen3-1.7B-Base", "num_layers": 1}
        write_json(os.path.join(d, "tokenizer.json"), tokenizer)
    if task == "lm1b":                               # the release's copy of bert-base-uncased's WordPiece
        with open(os.path.join(d, "vocab.txt"), "w") as f:
            f.write("\n".join(bert_vocab()) + "\n")
    smax, block = name_number(name, r"smax(\d+)"), name_number(name, r"s(\d+)")
    noise = {"desired_block_size": smax // 2, "max_block_size": L} if smax else {}
    if method == "setdlm":               # a buffer beside the weights, which the loader must skip by name
        state["static_attention_mask"] = static_attention_mask(L)
    arch, model_type = ARCH[method]
    torch.save(state, os.path.join(d, "pytorch_model.bin"))
    write_json(os.path.join(d, "config.json"), {
        "architectures": [arch], "model_type": model_type, "length": L, "backbone_config": backbone,
        "noise_config": noise, **({"block_size": block} if method == "bd3lm" else {}),
        "tokenization_config": {"vocab_size": V, "mask_token_id": mask, "pad_token_id": pad,
                                "bos_token_id": bos, "eos_token_id": eos}})


def static_attention_mask(L: int) -> torch.Tensor:
    """The official Set Diffusion denoiser's static_attention_mask buffer, (2L, 2L) bool: its two-stream mask
    (SetDLM._block_mask) over [x0 | xt], which its sdpa backend registers as a buffer and its push code,
    unlike MDLM's and BD3-LM's, keeps in the state dict (not in skip_params_for_push)."""
    i = torch.arange(2 * L)
    xq, xk, q, k = i[:, None] >= L, i[None, :] >= L, i[:, None] % L, i[None, :] % L
    return ((q == k) & (xq == xk)) | (xq & ~xk & (q > k)) | (~xq & ~xk & (q >= k))


# ----------------------------------------------------------------------------- Table 4's scoring models

def scorers(hf: str, tiktoken_dir: str) -> None:
    """The models make reproduce-unconditional scores with, when transformers is installed (and GPT-2's files
    were rebuilt: gpt2_files): gpt2-large (generative perplexity; GPT-2's own tokenizer, from the rebuilt
    encoder.json and vocab.bpe, so the samples' own ids are scored) and answerdotai/ModernBERT-large (MAUVE's
    features; a WordPiece over bert_vocab), each a tiny random model in the Hub layout save_pretrained
    writes."""
    if importlib.util.find_spec("transformers") is None:
        return
    files = {name: os.path.join(tiktoken_dir, hashlib.sha1((GPT2_URL + name).encode()).hexdigest())
             for name in ("encoder.json", "vocab.bpe")}
    if not all(map(os.path.isfile, files.values())):
        return
    import transformers
    torch.manual_seed(0)
    d = hub_repo(hf, "gpt2-large")
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=50257, n_positions=1024, n_embd=16, n_layer=1, n_head=2, bos_token_id=50256,
        eos_token_id=50256)).save_pretrained(d)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    with open(files["encoder.json"], encoding="utf-8") as f:
        vocab = json.load(f)
    with open(files["vocab.bpe"], encoding="utf-8") as f:
        merges = [tuple(line.split(" ")) for line in f.read().split("\n")[1:] if line]
    bpe = Tokenizer(models.BPE(vocab, merges))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>",
                                         eos_token="<|endoftext|>").save_pretrained(d)
    d = hub_repo(hf, "answerdotai/ModernBERT-large")
    words = bert_vocab()
    transformers.ModernBertModel(transformers.ModernBertConfig(
        vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=1024, pad_token_id=0, cls_token_id=101,
        sep_token_id=102, bos_token_id=101, eos_token_id=102, global_attn_every_n_layers=1)
    ).save_pretrained(d)
    transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(words)}).save_pretrained(d)


# ----------------------------------------------------------------------------- data sets

def sentence(rng: random.Random, n: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def parquet(path: str, columns: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(columns), path)


def gsm8k_rows(rng: random.Random, n: int) -> dict:
    """n problems in GSM8K's format (question; answer with <<calculator>> notes and a last '#### n' line)."""
    rows = {"question": [], "answer": []}
    for _ in range(n):
        a, b = rng.randint(2, 40), rng.randint(2, 40)
        rows["question"].append(f"Tom has {a} apples and buys {b} more. How many apples does he have now?")
        rows["answer"].append(f"Tom has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}")
    return rows


def gsm8k(hf: str, folder: str, rng: random.Random) -> None:
    """GSM8K (8 train, 4 test problems) both ways the loaders read it: folder/{train,test}.jsonl (GSM8K's own
    files, GSM8K_DIR), and openai/gsm8k (config main) where the datasets library looks offline: its prepared
    arrow files under HF_HOME/datasets/openai___gsm8k/main/0.0.0/<hash>/ (built from parquet by datasets' own
    parquet builder, then moved there)."""
    from datasets.packaged_modules.parquet.parquet import Parquet
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for split, n in (("train", 8), ("test", 4)):
            rows = gsm8k_rows(rng, n)
            with open(os.path.join(folder, f"{split}.jsonl"), "w") as f:
                f.writelines(json.dumps({"question": q, "answer": a}, allow_nan=False) + "\n"
                              for q, a in zip(*rows.values()))
            files[split] = os.path.join(tmp, "main", f"{split}-00000-of-00001.parquet")
            parquet(files[split], rows)
        builder = Parquet(cache_dir=os.path.join(tmp, "cache"), dataset_name="gsm8k", config_name="main",
                          data_files=files)
        builder.download_and_prepare()
        target = os.path.join(hf, "datasets", "openai___gsm8k", "main", "0.0.0", REV[:16])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(builder.cache_dir, target)


def cnndm(folder: str, rng: random.Random) -> None:
    """abisee/cnn_dailymail 3.0.0 as the Hub's parquet files (3.0.0/<split>-00000-of-00001.parquet): article,
    highlights, id."""
    for split, n in (("train", 8), ("validation", 4), ("test", 4)):
        articles = [". ".join(sentence(rng) for _ in range(3)) + "." for _ in range(n)]
        parquet(os.path.join(folder, "3.0.0", f"{split}-00000-of-00001.parquet"),
                {"article": articles, "highlights": [a.split(".")[0] + "." for a in articles],
                 "id": [f"{split}{i:04d}" for i in range(n)]})


def rocstories(folder: str, rng: random.Random) -> None:
    """The Story Cloze validation CSV (cloze_test_val__spring2016.csv), 5 stories."""
    os.makedirs(folder, exist_ok=True)
    head = ["InputStoryid", *[f"InputSentence{i}" for i in range(1, 5)], "RandomFifthSentenceQuiz1",
            "RandomFifthSentenceQuiz2", "AnswerRightEnding"]
    with open(os.path.join(folder, "cloze_test_val__spring2016.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(head)
        for i in range(5):
            sentences = [sentence(rng, 6).capitalize() + "." for _ in range(6)]   # 4, then two endings
            w.writerow([f"story-{i}", *sentences, rng.choice("12")])


def owt(folder: str, rng: random.Random) -> None:
    """OpenWebText's one split as parquet ("text"): 200 documents of ~60 tokens, then the 100,000 short ones
    that are its validation split (the last 100,000)."""
    texts = [". ".join(sentence(rng) for _ in range(6)) for _ in range(200)]
    texts += [f"Note {i}: {WORDS[i % len(WORDS)]} {WORDS[i % 7]}." for i in range(100_000)]
    parquet(os.path.join(folder, "train-00000-of-00001.parquet"), {"text": texts})


def lm1b(folder: str, rng: random.Random) -> None:
    """LM1B's train and test splits as parquet ("text"), sentences tokenized as the corpus is (spaced
    punctuation)."""
    for split in ("train", "test"):
        parquet(os.path.join(folder, f"{split}-00000-of-00001.parquet"),
                {"text": [sentence(rng, 10) + " ." for _ in range(100)]})


def mcqa(folder: str, rng: random.Random) -> None:
    """The validation files: HellaSwag as the Hub's parquet (label a string), PIQA (valid.jsonl,
    valid-labels.lst) and SIQA (dev.jsonl, dev-labels.lst, labels 1-3) in their original formats."""
    n = 4
    parquet(os.path.join(folder, "hellaswag", "validation-00000-of-00001.parquet"), {
        "ind": list(range(n)), "activity_label": ["Walking the dog"] * n,
        "ctx_a": [sentence(rng).capitalize() + "." for _ in range(n)], "ctx_b": ["then the dog"] * n,
        "ctx": ["" for _ in range(n)],
        "endings": [[sentence(rng, 5) + "." for _ in range(4)] for _ in range(n)],
        "source_id": ["activitynet~v_x"] * n, "split": ["val"] * n, "split_type": ["indomain"] * n,
        "label": [str(i % 4) for i in range(n)]})
    for name, records, labels in (
            ("piqa", [{"goal": sentence(rng), "sol1": sentence(rng, 5), "sol2": sentence(rng, 5)}
                      for _ in range(n)], [str(i % 2) for i in range(n)]),
            ("siqa", [{"context": sentence(rng), "question": "What will happen next?",
                       **{f"answer{c}": sentence(rng, 3) for c in "ABC"}} for _ in range(n)],
             [str(1 + i % 3) for i in range(n)])):
        os.makedirs(os.path.join(folder, name), exist_ok=True)
        stem = "valid" if name == "piqa" else "dev"
        with open(os.path.join(folder, name, f"{stem}.jsonl"), "w") as f:
            f.writelines(json.dumps(r, allow_nan=False) + "\n" for r in records)
        with open(os.path.join(folder, name, f"{stem}-labels.lst"), "w") as f:
            f.write("\n".join(labels) + "\n")
