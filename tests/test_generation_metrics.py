"""The generation metrics (paper/hf_metrics.py, eval.py --ppl-model / --mauve-ref) on tiny random Hugging
Face models saved offline: generative perplexity == exp of the NLL by hand (own ids, or re-tokenised texts),
MAUVE 1 on identical sets and the disjoint value on disjoint ones, the 5-subset bootstrap; the official
entropy stop, EOS stop and redraw filter."""
import importlib.util
import json
import math

import numpy as np
import pytest
import torch

import eval as evaluate
from common import unconditional
import sampling
from data import byte_tokenizer, sampler_preset
from data.qwen import gpt2_byte_alphabet
from helpers import MASK, METHODS, Jitter, error_of, eval_json, random_checkpoint, tiny_model
from model import ModelConfig, Transformer
from paper import generation, hf_metrics
from sampling import PaperMode, SamplerOptions, Settings

transformers, mauve = (importlib.util.find_spec(m) and importlib.import_module(m)   # test-only packages
                       for m in ("transformers", "mauve"))
needs_transformers = pytest.mark.skipif(not transformers,
                                        reason="transformers (test-only) is not installed")
needs_mauve = pytest.mark.skipif(not (transformers and mauve),
                                 reason="mauve-text and transformers (test-only) are not installed")

TOK = byte_tokenizer()
WORDS_A = "apple river stone cloud green light happy morning"
WORDS_B = "zebra quartz vortex jungle wizard oxygen sphinx yacht"


def save_gpt2(path, merges=(), n_positions=32, seed=0):
    """A tiny random GPT-2 with a byte-level BPE: ids 0-255 the bytes (ours), one per merge, <|endoftext|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    chars = {b: c for c, b in gpt2_byte_alphabet().items()}
    vocab = {chars[b]: b for b in range(256)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    bpe = Tokenizer(models.BPE(vocab, list(merges)))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>",
                                               eos_token="<|endoftext|>")
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=len(vocab), n_positions=n_positions, n_embd=16, n_layer=1,
                                  n_head=2, bos_token_id=len(vocab) - 1, eos_token_id=len(vocab) - 1)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return str(path)


def save_encoder(path, modern=False):
    """A tiny random BERT (or ModernBERT, the paper's MAUVE encoder's architecture) and a WordPiece tokenizer
    over a few words; BERT's second set of words shares one large embedding offset, so the two sets' texts are
    far apart in its features."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS_A.split(), *WORDS_B.split()]
    shape = dict(vocab_size=len(words), hidden_size=32, num_attention_heads=2, intermediate_size=64,
                 max_position_embeddings=64)
    torch.manual_seed(0)
    if modern:
        model = transformers.ModernBertModel(transformers.ModernBertConfig(
            **shape, num_hidden_layers=2, pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2,
            eos_token_id=3, global_attn_every_n_layers=1))
    else:
        model = transformers.BertModel(transformers.BertConfig(**shape, num_hidden_layers=1,
                                                               initializer_range=0.5))
        with torch.no_grad():
            model.embeddings.word_embeddings.weight[5 + len(WORDS_A.split()):] += 4 * torch.randn(32)
    model.save_pretrained(str(path))
    transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(words)}).save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    mlm = transformers.BertForMaskedLM(transformers.BertConfig(   # an MLM head: no causal LM either
        vocab_size=30, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64))
    mlm.save_pretrained(str(root / "bert-mlm"))
    return {"gpt2": save_gpt2(root / "gpt2"),
            "gpt2-merges": save_gpt2(root / "gpt2m", [("Ġ", "t"), ("h", "e")]),
            "bert": save_encoder(root / "bert"), "modernbert": save_encoder(root / "modernbert", modern=True),
            "bert-mlm": str(root / "bert-mlm")}


def sentences(words: str, n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    w = words.split()
    return [" ".join(rng.choice(w, size=int(rng.integers(4, 9)))) for _ in range(n)]


# ----------------------------------------------------------------------------- generative perplexity

def nll_by_hand(path: str, seqs: list[list[int]], ctx: int) -> float:
    """exp(mean NLL) of the saved model, one piece of ctx - 1 tokens after the BOS at a time, no batch."""
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    bos = model.config.bos_token_id
    total, count = 0.0, 0
    for s in seqs:
        for k in range(0, len(s), ctx - 1):
            x = torch.tensor([[bos] + s[k:k + ctx - 1]])
            with torch.no_grad():
                logp = torch.log_softmax(model(x).logits.float(), -1)
            for j in range(1, x.shape[1]):
                total -= float(logp[0, j - 1, x[0, j]])
                count += 1
    return math.exp(total / count)


@needs_transformers
def test_gen_ppl_scores_own_ids_when_the_tokenizers_agree_else_retokenised_texts(hf):
    """The first sample is 3 pieces of 31; the second is not UTF-8 (its text does not round-trip)."""
    ids = [list(b"the cat sat on the mat, and then the dog sat there too, all day"), [0xC3, 0x28, 104, 105],
           [7]]
    m = hf_metrics.hf_gen_ppl([TOK.decode(i) for i in ids], hf["gpt2"], batch_size=2, ids=ids, tok=TOK)
    assert m["ppl_retokenised"] is False and m["ppl_tokens"] == sum(map(len, ids))
    assert m["gen_ppl_hf"] == pytest.approx(nll_by_hand(hf["gpt2"], ids, 32), rel=1e-5)
    assert m["gen_nll_hf"] == pytest.approx(math.log(m["gen_ppl_hf"]))
    texts = ["the theme of the thesis", "then the heat", "a"]
    ids = [TOK.encode_text(t) for t in texts]
    m = hf_metrics.hf_gen_ppl(texts, hf["gpt2-merges"], batch_size=8, ids=ids, tok=TOK)
    hf_tok = transformers.AutoTokenizer.from_pretrained(hf["gpt2-merges"])
    seqs = [hf_tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert m["ppl_retokenised"] is True and m["ppl_tokens"] == sum(map(len, seqs)) < sum(map(len, ids))
    assert m["gen_ppl_hf"] == pytest.approx(nll_by_hand(hf["gpt2-merges"], seqs, 32), rel=1e-5)
    assert hf_metrics.hf_gen_ppl(texts, hf["gpt2"])["ppl_retokenised"] is True        # no ids: texts


# ----------------------------------------------------------------------------- MAUVE

@needs_mauve
def test_mauve_one_on_identical_sets_the_disjoint_value_and_the_five_subset_bootstrap(hf):
    refs = sentences(WORDS_A, 30, seed=1)
    same = hf_metrics.mauve_score(refs, refs, hf["bert"], subset=30)
    assert same["mauve"] == pytest.approx(1.0) and same["mauve_std"] == pytest.approx(0.0)
    assert same["mauve_n"] == 30 and len(same["mauve_scores"]) == 5
    apart = hf_metrics.mauve_score(sentences(WORDS_B, 30, seed=2), refs, hf["bert"], subset=30)
    # histograms with disjoint supports: KL(q | r) = -log(1 - w), KL(p | r) = -log w at every mixture weight
    # w, so MAUVE is the area under the curve ((1 - w)^5, w^5) whatever the histograms
    from sklearn.metrics import auc
    w = np.linspace(1e-6, 1 - 1e-6, 25)
    x, y = np.r_[1, (1 - w) ** 5, 0], np.r_[0, w ** 5, 1]
    i, j = np.argsort(x), np.argsort(y)
    assert (apart["mauve"] == pytest.approx(0.5 * (auc(x[i], y[i]) + auc(y[j], x[j])))
            and apart["mauve"] < 0.01)
    # the bootstrap: the mean and std over five subsets drawn as the official code draws them
    refs = sentences(WORDS_A, 40, seed=3) + sentences(WORDS_B, 20, seed=4)
    texts = sentences(WORDS_A, 25, seed=5)
    m = hf_metrics.mauve_score(texts, refs, hf["bert"], subset=30)
    rng = np.random.default_rng(20260701)                              # the official reference seed
    model, tok = hf_metrics.load("encoder", hf["bert"], "cpu", "--mauve-encoder")
    q = hf_metrics.features(model, tok, texts, 8, "cpu")
    want = []
    for k in range(5):
        idx = rng.choice(60, size=30, replace=False)[:25]              # n = min(30 references, 25 samples)
        p = hf_metrics.features(model, tok, [refs[i] for i in idx], 8, "cpu")
        want.append(mauve.compute_mauve(p_features=p, q_features=q, seed=1234 + k).mauve)
    assert m["mauve_scores"] == pytest.approx(want, abs=1e-6) and m["mauve_n"] == 25
    assert (m["mauve"], m["mauve_std"]) == pytest.approx((np.mean(want), np.std(want)), abs=1e-6)
    assert len(set(np.round(want, 6))) > 1                              # the subsets differ


@needs_transformers
@pytest.mark.parametrize("encoder", ["bert", "modernbert"])
def test_features_are_the_last_tokens_final_hidden_state_whatever_the_batch(hf, encoder):
    model, tok = hf_metrics.load("encoder", hf[encoder], "cpu", "--mauve-encoder")
    texts = ["apple", "zebra quartz vortex jungle wizard", "green light"]
    batched = hf_metrics.features(model, tok, texts, 8, "cpu")
    for k, t in enumerate(texts):
        x = tok(t, return_tensors="pt")["input_ids"]                   # [CLS] ... [SEP]
        with torch.no_grad():
            h = model(input_ids=x, output_hidden_states=True).hidden_states[-1][0, -1]
        np.testing.assert_allclose(batched[k], h.numpy(), atol=1e-5)


def test_reference_files(tmp_path):
    (tmp_path / "r.txt").write_text("one\n\n  \ntwo\n")
    (tmp_path / "r.jsonl").write_text('"one"\n{"text": "two"}\n\n')
    (tmp_path / "r.json").write_text(json.dumps({"task": "unconditional", "samples": ["one", "", "two"]}))
    for name in ("r.txt", "r.jsonl", "r.json"):
        assert hf_metrics.read_texts(str(tmp_path / name)) == ["one", "two"]
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="not a list of texts"):
        hf_metrics.read_texts(str(tmp_path / "bad.jsonl"))
    with pytest.raises(ValueError, match="cannot read --mauve-ref"):
        hf_metrics.read_texts(str(tmp_path / "missing.txt"))


# ----------------------------------------------------------------------------- the entropy stop

def test_window_entropy_and_the_entropy_stop_rule_on_literal_canvases():
    assert sampling.window_entropy(torch.tensor([1, 1, 2, 2]), MASK) == pytest.approx(math.log(2))
    assert sampling.window_entropy(torch.tensor([1, MASK, 2, MASK, 3]), MASK) == pytest.approx(math.log(3))
    assert sampling.window_entropy(torch.tensor([5, 5, 5]), MASK) == 0
    assert sampling.window_entropy(torch.tensor([MASK]), MASK) == math.inf
    opt = SamplerOptions(stop_entropy=1.0, stop_entropy_window=4, stop_min_tokens=5)
    prompt = torch.tensor([[9, 9], [0, 9]])                  # row 1 is left-padded: its prompt is one token
    pmask = torch.tensor([[True, True], [False, True]])
    tokens = torch.tensor([[9, 9, 1, 2, 3, 4, 5, 5, 5, 5],
                           [0, 9, 1, 1, 1, 1, 1, 1, MASK, MASK]])
    track = sampling.start(opt, tokens.clone(), torch.ones_like(tokens, dtype=torch.bool), MASK)
    hook = sampling.entropy_stop(None, track, prompt, pmask, MASK, 8)
    at = lambda *e: hook(tokens, torch.tensor(e)).tolist()               # noqa: E731
    assert at(6, 6) == [False, False]           # 4 new tokens < 5
    assert at(7, 7) == [False, True]            # row 0: window [2, 3, 4, 5] has entropy ln 4; row 1: 0
    assert at(10, 10) == [True, True]           # row 0: [5, 5, 5, 5]; row 1: [1, 1] once [MASK]s are left out
    assert hook.ends == [10, 7] and hook.cut(1) == 7 and hook.cut(0) == 7   # max(end - 4, P + 5) = 7
    assert sampling.entropy_stop("base", None, prompt, pmask, MASK, 8) == "base"            # no options: off
    off = sampling.start(SamplerOptions(), tokens, torch.ones_like(tokens, dtype=torch.bool), MASK)
    assert sampling.entropy_stop("base", off, prompt, pmask, MASK, 8) == "base"


def check_points(method: str, step, P: int, C: int, W: int, block: int):
    """(last step, end) of every stop-hook call of a batch-1 greedy run that decoded its columns at `step`."""
    if method == "ar":
        return [(int(step[e - 1]), e) for e in range(P + 1, C + 1)]
    if method in ("mdlm", "bd3lm"):                                     # block ends (the BOS sits in block 0)
        return [(int(step[:min(e, C)].max()), min(e, C)) for e in range(block, C + block, block)]
    out = []                                                            # Set Diffusion: every W steps
    for s in range(W, int(step.max()) + 1, W):
        undecided = (step[P:] > s).nonzero()
        left = P + int(undecided[0]) if len(undecided) else C
        out.append((s, min(left + W, C)))
    return out


@pytest.mark.parametrize("method", ["ar", "mdlm", "bd3lm", "setdiffusion"])
def test_entropy_stop_stops_a_row_exactly_where_the_rule_says(method):
    mod, cfg, kw = METHODS[method]
    model, N, w, m = Jitter(tiny_model(0), seed=1), 40, 6, 9
    prompt = torch.tensor([[3]])
    full, stats = mod.generate(model, prompt, cfg, Settings(N, **kw))
    step = torch.cat([torch.tensor([-1]), stats["step"][0, 1:]])
    full, C = full[0], full.shape[1]
    points = check_points(method, step, 1, C, cfg.smax // 2 if method == "setdiffusion" else 0, 4)
    state = lambda s, e: torch.where((step <= s) & (torch.arange(C) < e), full, MASK)    # noqa: E731
    eligible = [(s, e, sampling.window_entropy(state(s, e)[e - w:e], MASK)) for s, e in points if e - 1 >= m]
    threshold = eligible[len(eligible) // 2][2] + 1e-9               # fires by the middle check at the latest
    s, e, _ = next(p for p in eligible if p[2] < threshold)
    opt = SamplerOptions(stop_entropy=threshold, stop_entropy_window=w, stop_min_tokens=m)
    hook = sampling.EntropyStop()
    out, _ = mod.generate(model, prompt, cfg, Settings(N, **kw, paper=PaperMode(options=opt)), stop=hook)
    assert out[0].tolist() == state(s, e).tolist() and e < C            # stopped there, nothing after
    assert hook.ends == [e] and hook.cut(0) == max(e - w, 1 + m)
    plain, _ = mod.generate(model, prompt, cfg, Settings(N, **kw, paper=PaperMode(options=SamplerOptions())))
    assert plain[0].tolist() == full.tolist()                           # the option off: the same tokens


def test_unconditional_applies_the_official_legacy_cut():
    """With the rule firing at its first check, a sample not ended by EOS keeps its new tokens before
    max(end - window, 1 + min tokens) = max(8 - 8, 4)."""
    model, (mod, cfg, _) = Jitter(tiny_model(0), seed=1), METHODS["ar"]
    tok = type("Tok", (), {"eos_id": 0, "mask_id": MASK, "decode": staticmethod(str)})()
    kw = dict(stop_entropy_window=8, stop_min_tokens=3, top_p=0.9)
    runs = [Settings(20, paper=PaperMode(options=SamplerOptions(stop_entropy=e, **kw))) for e in (0.0, 99.0)]
    plain, cut = ([unconditional.unconditional(model, mod, cfg, tok, 1, settings, "cpu", seed)[0]["ids"]
                   for seed in range(4)] for settings in runs)
    for p, c in zip(plain, cut):        # an EOS in columns 3..7 (an id list of <= 6) stops it before the rule
        assert c == (p if len(p) <= 6 else p[:3])
    assert any(len(p) > 6 for p in plain)
    assert sampler_preset("owt", TOK, METHODS["ar"][0]).stop_entropy == 4.0
    assert sampler_preset("owt", TOK, METHODS["bd3lm"][0]).stop_entropy_window == 128


# --------------------------------------------------------------------------- Table 4 beside the official code

def official_eos_stop(input_ids, eos: int, mask: int, min_tokens: int, prompt_length: int = 1):
    """The official EntropyEosStoppingCriteria's EOS branch (var_length, ignore_prompt_eos, num_matches 1)
    on a (1, seq_len) canvas: (stop, truncate_idx)."""
    seq_len = input_ids.shape[1]
    eos_offset = min(prompt_length, seq_len)
    eos_mask = input_ids[:, eos_offset:] == eos
    min_truncate_idx = min(eos_offset + max(min_tokens, 1), seq_len)
    if eos_mask.sum(dim=1)[0].item() >= 1:
        eos_positions = torch.nonzero(eos_mask[0], as_tuple=False).squeeze(-1) + eos_offset
        eos_positions = eos_positions[eos_positions + 1 >= min_truncate_idx]
        if eos_positions.numel() >= 1:
            last_eos_pos = int(eos_positions[0].item())
            if not (input_ids[0, eos_offset:last_eos_pos] == mask).any():
                return True, min(last_eos_pos + 1, seq_len)
    return False, None


def test_the_eos_stop_is_the_officials_and_waits_for_a_mask_before_the_eos():
    """On random canvases: the official rule's stops, at its EOS (its truncate_idx - 1)."""
    eos = TOK.eos_id
    stop, g, stops = unconditional.eos_stop(eos, 1, MASK), torch.Generator().manual_seed(0), 0
    assert stop(torch.tensor([[eos, 5, MASK, eos, 6]]), torch.tensor([5])).tolist() == [False]  # MASK before
    assert stop(torch.tensor([[eos, 5, 7, eos, MASK]]), torch.tensor([5])).tolist() == [True]   # after only
    for _ in range(400):
        C, m = int(torch.randint(3, 14, (1,), generator=g)), int(torch.randint(0, 5, (1,), generator=g))
        pool = torch.tensor([eos, MASK, 5, 6, 7])
        row = torch.cat([torch.tensor([eos]), pool[torch.randint(0, 5, (C - 1,), generator=g)]])[None]
        e = int(torch.randint(1, C + 1, (1,), generator=g))
        hook = unconditional.eos_stop(eos, max(m, 1), MASK)
        ours = bool(hook(row, torch.tensor([e]))[0])
        stop, idx = official_eos_stop(row[:, :e], eos, MASK, m)
        assert ours == stop and (hook.at.get(0) == (idx - 1 if stop else None)), (row, e, m)
        stops += stop
    assert 50 < stops < 350


def official_rejects(raw: list, outputs: list, mask: int, pad: int) -> bool:
    """The official _should_reject_generated_sample (_compute_entropy): raw and outputs before and after
    the cut."""
    xi = torch.tensor(raw)
    xi = xi[(xi != mask) & (xi != pad)]
    if xi.numel() == 0:
        entropy = 0.0
    else:
        _, counts = torch.unique(xi, return_counts=True, sorted=False)
        entropy = torch.special.entr(counts.float() / counts.sum()).sum().item()
    return entropy < 4 or len(outputs) <= 50


def test_the_redraw_filter_and_the_scored_text_are_the_officials():
    """Samples around both edges: entropy 4 nats (~55 distinct tokens) over all tokens drawn; 50 tokens
    with BOS and EOS after the cut."""
    eos, g, kept = TOK.eos_id, np.random.default_rng(0), 0
    for _ in range(300):
        n = int(g.integers(44, 56) if g.integers(0, 2) else g.integers(56, 250))
        distinct, ended = int(g.integers(40, 256)), bool(g.integers(0, 2))
        ids = [int(x) for x in g.integers(0, distinct, size=n)]
        tail = int(g.integers(0, 80))                 # tokens decoded after the cut (a window past the EOS)
        raw = ids + [eos] * ended + [int(x) for x in g.integers(0, 256, size=tail)]
        sample = {"ids": ids, "eos": ended, "raw": raw}
        keep = generation.official_keep(sample, eos)
        assert keep == (not official_rejects([eos] + raw, [eos] + ids + [eos] * ended,
                                             TOK.mask_id, eos)), sample
        kept += keep
    assert 30 < kept < 270
    eot = "<|endoftext|>"                                  # the scored text: the official <|endoftext|>s
    assert generation.scored_text(TOK, list(b"hi"), True) == f"{eot}hi{eot}"
    assert generation.scored_text(TOK, list(b"hi"), False) == f"{eot}hi"
    assert generation.scored_text(TOK, [*b"a", TOK.eos_id, *b"b"], False) == f"{eot}a{eot}b"


def test_samples_the_filter_refuses_are_redrawn_and_counted(monkeypatch):
    """The first n draws the official filter keeps (the others redrawn from the same generator), counted;
    --no-redraw scores the first n; each scored as the official text (BOS first); a filter that refuses
    every draw, or a length it must refuse, one line."""
    import ar
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=TOK.vocab_size, n_layer=1, n_head=2, n_kv_head=2, n_embd=32))
    model, cfg = model.eval(), ar.ARConfig(mask_id=TOK.mask_id)
    settings = Settings(63, paper=PaperMode(options=sampler_preset("owt", TOK, ar), seq_len=64))
    stream = unconditional.unconditional(model, ar, cfg, TOK, 16, settings, "cpu", 0)
    keep = [generation.official_keep(s, TOK.eos_id) for s in stream]
    want = [k for k, ok in enumerate(keep) if ok][:3]
    assert len(want) == 3 and want[-1] > 2                               # some draws refused before the third
    m = generation.evaluate_unconditional(model, ar, cfg, TOK, None, 3, settings, "cpu")
    assert m["redrawn"] == want[-1] - 2 and m["redraw"] is True
    assert m["sample_ids"] == [stream[k]["ids"] for k in want]
    assert all(t.startswith("<|endoftext|>") for t in m["samples"])
    off = generation.evaluate_unconditional(model, ar, cfg, TOK, None, 3, settings, "cpu", redraw=False)
    assert off["redrawn"] == 0 and off["sample_ids"] == [s["ids"] for s in stream[:3]]
    monkeypatch.setattr(unconditional, "MAX_REDRAWS", 2)
    with pytest.raises(ValueError, match="sample 0: 3 draws in a row were refused by the official filter"):
        generation.evaluate_unconditional(model, ar, cfg, TOK, None, 1, settings, "cpu")
    with pytest.raises(ValueError, match="--max-new-tokens 54: every sample would be redrawn"):
        generation.check_redraw(54)
    generation.check_redraw(55)


# ----------------------------------------------------------------------------- eval.py

@needs_mauve
def test_eval_unconditional_with_hf_scorers_and_their_refusals_before_any_sample(hf, tmp_path, capsys,
                                                                                  monkeypatch):
    """Both scorers end to end; then a scorer that cannot load (a missing folder, a Hub id offline) or is not
    one (BERT: no trained LM head, BERT's MLM head: no causal LM), a --mauve-ref endless (/dev/zero) or too
    long to tokenise: one line before the first sample (said: the line's start, or a part of it)."""
    refs, none, hub = tmp_path / "refs.txt", str(tmp_path / "nothing"), "no-such-org/no-such-model"
    refs.write_text("\n".join(sentences(WORDS_A, 12, seed=6)))
    args = ["--ckpt", random_checkpoint(tmp_path / "ar", seq_len=64), "--task", "unconditional",
            "--no-redraw"]
    m = eval_json(tmp_path, [*args, "-n", "4", "--warmup", "0", "--max-new-tokens", "40", "--ppl-model",
                             hf["gpt2"], "--mauve-ref", str(refs), "--mauve-encoder", hf["bert"]])
    assert "gen_ppl" not in m and m["ppl_model"] == hf["gpt2"] and m["ppl_retokenised"] is False
    assert math.isfinite(m["gen_ppl_hf"]) and 0 <= m["mauve"] <= 1 and len(m["mauve_scores"]) == 5
    assert m["mauve_n"] == 4 and m["mauve_encoder"] == hf["bert"] and len(m["samples"]) == 4
    table = capsys.readouterr().out
    assert "gen_ppl_hf" in table and "mauve_std" in table and "mauve_scores" not in table
    monkeypatch.setattr(generation, "unconditional", lambda *a, **k: pytest.fail("sampled"))
    monkeypatch.setattr(hf_metrics, "MAX_REF_BYTES", 1 << 20)
    monkeypatch.setattr(hf_metrics, "MAX_TEXT_CHARS", 1000)
    (tmp_path / "long.txt").write_text("a short one\n" + "x" * 5000 + "\n")
    for flags, said in [(["--ppl-model", none], f"^--ppl-model {none}: cannot load it ("),
                        (["--ppl-model", hf["bert"]], f"^--ppl-model {hf['bert']}: not a trained causal LM"),
                        (["--ppl-model", hf["bert-mlm"]], f"^--ppl-model {hf['bert-mlm']}: not a causal LM"),
                        (["--mauve-ref", str(refs), "--mauve-encoder", hub],
                         f"^--mauve-encoder {hub}: cannot load it ("),
                        (["--mauve-ref", "/dev/zero", "--mauve-encoder", hf["bert"]], "larger than 1 MiB"),
                        (["--mauve-ref", str(tmp_path / "long.txt"), "--mauve-encoder", hf["bert"]],
                         "text 2 holds 5,000 characters, more than 1,000")]:
        got = error_of(evaluate.main, [*args, "-n", "2", "--device", "cpu", *flags])
        assert got.startswith("error: " + said[1:]) if said[0] == "^" else said in got, (flags, got)
