"""Static-shape decoding (model.static_decoding): padded steps give the dynamic steps' tokens, compiled the
eager ones, with one graph for every step."""
import pytest
import torch
from torch._dynamo.utils import counters

from sampling import Settings
from model import static_decoding
from helpers import MASK, METHODS, Jitter, left_padded, tiny_model


def run(name, model, batch, prompt_mask, N=9):
    mod, cfg, kw = METHODS[name]
    tau = {} if name == "ar" else {"threshold": 0.5}
    return mod.generate(model, batch, cfg, Settings(N, **tau, **kw), prompt_mask)


@pytest.mark.parametrize("name", list(METHODS))
def test_static_steps_equal_dynamic_steps(name):
    """Batched, left-padded, several tokens a step: the same tokens at the same steps; a second call reuses
    the storage of the first (its stale rows masked out)."""
    inner = tiny_model(5)
    model = Jitter(inner, 1)
    _, batch, prompt_mask = left_padded([2, 7, 5])
    tokens, stats = run(name, model, batch, prompt_mask)
    static_decoding(inner)
    try:
        for _ in range(2):
            st_tokens, st_stats = run(name, model, batch, prompt_mask)
            assert torch.equal(st_tokens, tokens) and torch.equal(st_stats["step"], stats["step"])
            assert st_stats["nfe"] == stats["nfe"]
        assert name == "mdlm" or inner.static.storage is not None
    finally:
        inner.static = None


def test_static_step_logits_equal_dynamic_logits():
    """A Set Diffusion-shaped step (3 clean tokens + 2 queries after a cached prefix) padded to 8 slots: the
    unpadded step's logits, and the same committed cache."""
    model, x = tiny_model(2), torch.randint(0, MASK, (2, 9))
    mask = torch.ones(2, 1, 5, 9, dtype=torch.bool)
    mask[:, :, :3, 4:] = torch.ones(3, 5, dtype=torch.bool).tril()
    out = []
    for static in (False, True):
        model.static = static_decoding(model).static if static else None
        cache = model.new_cache(2, 16, slots=8)
        with torch.no_grad():
            model(x[:, :4], cache=cache)
            cache.commit(4)
            out.append(model(x[:, 4:], mask=mask, cache=cache, last=2))
            cache.commit(3)
            out.append(model(x[:, 7:8], cache=cache))                # reads the committed rows
    model.static = None
    torch.testing.assert_close(out[2], out[0])
    torch.testing.assert_close(out[3], out[1])


@pytest.mark.compile        # compiles (~10 s): make compile-check, not the suite
def test_compiled_equals_eager_one_graph():
    """torch.compile of the static steps: the eager tokens, one graph for every step of a Set Diffusion call
    (and of a second one), one for each other method, MDLM's for canvases of every width (small on purpose:
    compiling costs time)."""
    inner = tiny_model(5)
    model = Jitter(inner, 1)
    _, batch, prompt_mask = left_padded([2, 5])
    calls = [("setdiffusion", 9), ("setdiffusion", 9), ("ar", 9), ("bd3lm", 9), ("mdlm", 9), ("mdlm", 6)]
    want = {(name, N): run(name, model, batch, prompt_mask, N) for name, N in calls}
    torch._dynamo.reset()
    counters.clear()
    static_decoding(inner, compile=True)
    try:
        for name, N in calls:
            tokens, stats = run(name, model, batch, prompt_mask, N)
            assert torch.equal(tokens, want[name, N][0])
            assert torch.equal(stats["step"], want[name, N][1]["step"])
        assert counters["stats"]["unique_graphs"] == 4                 # one per method
    finally:
        inner.static = None
        torch._dynamo.reset()
