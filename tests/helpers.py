"""What the tests compare against: a tiny model, a per-position logit jitter, and the naive samplers (batch 1,
no KV cache, the whole forward recomputed every step) that every cached sampler must equal token for token.
test_all.py (the method math, read first) and the tests in this folder import them."""
import pytest
import torch

import ar
import bd3lm
import mdlm
import setdiffusion as sd
from model import ModelConfig, Transformer

V, MASK = 24, 23                      # tiny vocabulary; the last id is [MASK]


def tiny_model(seed=0, **kw):
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size=V, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, **kw)).eval()
    with torch.no_grad():
        model.embed_tokens.weight.mul_(20)          # peaked distributions: thresholds and argmax are decisive
    return model


class Jitter(torch.nn.Module):
    """A model plus a fixed random logit offset per position, so that confidences differ from slot to slot and
    a threshold decodes some of a window but not all (the tiny model alone is about equally sure everywhere)."""

    def __init__(self, model, seed=0):
        super().__init__()
        self.model, self.new_cache = model, model.new_cache
        self.register_buffer("offset", torch.randn(64, V, generator=torch.Generator().manual_seed(seed)) * 3)  # (64, V)

    def forward(self, idx, pos=None, mask=None, cache=None, last=None):
        if pos is None:
            start = cache.length if cache is not None else 0
            pos = torch.arange(start, start + idx.shape[1], device=idx.device).expand(idx.shape)
        out = self.model(idx, pos, mask, cache) + self.offset[pos]             # (B, T, V)
        return out if last is None else out[:, -last:]


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()



METHODS = {
    "ar": (ar, ar.ARConfig(MASK), {}),
    "mdlm": (mdlm, mdlm.MDLMConfig(MASK), {"block": 4}),
    "bd3lm": (bd3lm, bd3lm.BD3LMConfig(MASK, 4), {}),
    "setdiffusion": (sd, sd.SetDiffusionConfig(MASK, 6), {}),
}


def window_partial(step, W):
    """Per step of a batch-1 sliding-window run: did tau decode more than one but not all of the window's
    [MASK]s? The columns still masked at step k are those with step >= k; the window starts at the first."""
    s = step[0]
    out = []
    for k in range(int(s.max()) + 1):
        left = int((s >= k).nonzero()[0])
        out.append(1 < int((s == k).sum()) < int((s[left:left + W] >= k).sum()))
    return out


def naive_generate(name, model, prompt, N, threshold, partial=None):
    """Batch size 1, no KV cache: every step recomputes the whole forward from the clean tokens.
    Set Diffusion's is setdiffusion.generate_reference, the loop a reader learns the sampler from. `partial`
    (a list) gets, per step, whether tau decoded some but not all of the candidates."""
    partial = [] if partial is None else partial
    if name == "setdiffusion":                # clean tokens in commit order, then the window's [MASK] queries
        cfg = METHODS[name][1]
        x, stats = sd.generate_reference(model, prompt, cfg, max_new_tokens=N, threshold=threshold)
        partial.extend(window_partial(stats["step"], cfg.smax // 2))      # tau picked some, not all
        return x, stats["step"]
    dev = prompt.device
    x = torch.cat([prompt, torch.full((1, N), MASK, device=dev)], 1)
    step, nfe = torch.full_like(x, -1), 0
    while (x == MASK).any():
        m = x[0] == MASK
        if name == "ar":
            j = int(m.nonzero()[0])
            y, dec, cols = model(x[:, :j]).argmax(-1)[:, -1:], torch.ones(1, 1, dtype=torch.bool, device=dev), [j]
        else:
            if name == "bd3lm":               # blocks at multiples of S; clean blocks + current block
                S = 4
                s = int(m.nonzero()[0]) // S * S
                blk = torch.arange(s + S, device=dev) // S
                e = min(s + S, x.shape[1])
                logits = model(x[:, :e], mask=(blk[:e, None] >= blk[None, :e]))[:, s:e]
            else:                             # mdlm: full bidirectional forward, blocks at multiples of 4
                s = int(m.nonzero()[0]) // 4 * 4
                e = min(s + 4, x.shape[1])
                logits = model(x, mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=dev))[:, s:e]
            y, dec = mdlm.decode(logits, (x[:, s:e] == MASK), MASK, threshold)
            cols = list(range(s, e))
            partial.append(1 < int(dec.sum()) < int((x[:, s:e] == MASK).sum()))   # tau picked some, not all
        for c, yy, d in zip(cols, y[0], dec[0]):
            if d:
                x[0, c], step[0, c] = yy, nfe
        nfe += 1
    return x, step



def left_padded(lens, seed=1):
    """Random prompts of the given lengths, and their left-padded batch (B, P) with its prompt_mask (B, P)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, MASK, (n,), generator=g) for n in lens]
    P = max(lens)
    batch = torch.stack([torch.cat([torch.zeros(P - len(p), dtype=torch.long), p]) for p in prompts])
    return prompts, batch, torch.arange(P)[None] >= torch.tensor([[P - n] for n in lens])


def error_of(main, argv) -> str:
    """The one line a script's main(argv) exits with (asserted: `error: ...`, one line, no unsafe advice)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert "weights_only" not in message, message
    return message


def text_checkpoints(tmp_path_factory, name: str, text: str, flags: list[str]):
    """A folder with a text file `name`, its token cache and one tiny checkpoint per method trained on it (flags)."""
    import train
    d = tmp_path_factory.mktemp("text")
    (d / name).write_text(text, encoding="utf-8")
    for m in ("ar", "mdlm", "bd3lm", "setdiffusion"):
        train.main(["--model", m, "--data", f"text:{d / name}", "--data-dir", str(d / "cache"),
                    "--out-dir", str(d / m), *flags])
    return d


def one_step_checkpoints(tmp_path_factory, methods=("ar", "setdiffusion")):
    """A folder with one checkpoint per method, trained one step on the shipped task (1 layer, 32 wide): for
    tests of the scripts' input and output, not of what a model learns."""
    import train
    root = tmp_path_factory.mktemp("ckpts")
    for m in methods:
        train.main(["--model", m, "--out-dir", str(root / m), "--n-layer", "1", "--n-embd", "32", "--n-head", "2",
                    "--batch-size", "4", "--eval-limit", "1", "--max-new-tokens", "8", "--warmup", "1",
                    "--max-iters", "1"])
    return root
