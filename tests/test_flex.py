"""FlexAttention (model.layout_mask, Transformer.flex): each method's mask_mod is its dense training mask,
padding included, and with flex on the losses equal the dense SDPA ones (on CPU FlexAttention runs eagerly,
without a backward: no-grad forwards; the gradients: test_gpu.py)."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

import bd3lm
import mdlm
import setdiffusion as sd
import train
from model import layout_mask, padded, with_padding
from helpers import MASK, random_rows, tiny_model

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


# The dense masks as they were written before the mask_mods (commit 9559a9f), the reference.

def dense_bd3lm(seq_len, block_size):
    idx = torch.arange(2 * seq_len)
    xt = idx >= seq_len
    blk = (idx % seq_len) // block_size
    q, k = (slice(None), None), (None, slice(None))
    return ((blk[q] == blk[k]) & (xt[q] == xt[k])) | (xt[q] & ~xt[k] & (blk[q] > blk[k])) \
        | (~xt[q] & ~xt[k] & (blk[q] >= blk[k]))


def dense_sd(seq_len, first, end):
    rank = torch.cat([torch.arange(end), torch.arange(first, end)])
    xt = torch.arange(len(rank)) >= end
    q, k = (slice(None), None), (None, slice(None))
    return (~xt[q] & ~xt[k] & (rank[q] >= rank[k])) | (xt[q] & ~xt[k] & (rank[q] > rank[k])) \
        | ((rank[q] == rank[k]) & (xt[q] == xt[k]))


def pad_both_sides(B, L, seed):
    """(B, L) padding: a random number of columns on the left and on the right of each row, row 0 none."""
    g = torch.Generator().manual_seed(seed)
    left, right = torch.randint(0, L // 3 + 1, (2, B, 1), generator=g)
    left[0], right[0] = 0, 0
    col = torch.arange(L)
    return (col < left) | (col >= L - right)


def grid(mask_mod, pad, n):
    return layout_mask(padded(mask_mod, pad), pad.shape[0], n, n, flex=False)


@pytest.mark.parametrize("L, S", [(1, 1), (5, 2), (8, 4), (7, 3), (6, 6), (9, 1)])
def test_bd3lm_mask_mod_is_the_dense_mask(L, S):
    cfg = bd3lm.BD3LMConfig(MASK, S)
    assert torch.equal(bd3lm.attention_mask(cfg, L), dense_bd3lm(L, S))
    pad = pad_both_sides(3, L, L).repeat(1, 2)                                  # (B, 2L), as denoise
    assert torch.equal(grid(bd3lm.mask_mod(cfg, L), pad, 2 * L), with_padding(dense_bd3lm(L, S), pad))


def lean_sd(L, first, end, pad_2L):
    """Set Diffusion's 2L mask_mod trimmed as denoise trims it: slots [clean ranks < end | [MASK] ranks
    [first, end)] read the 2L mask (padding pad_2L, in sigma order) at their 2L slots."""
    keep = torch.cat([torch.arange(end), L + torch.arange(first, end)])
    mod = padded(sd.mask_mod(sd.SetDiffusionConfig(MASK), L), pad_2L)
    return lambda b, h, q, k: mod(b, h, keep[q], keep[k])


@pytest.mark.parametrize("L, first, end", [(6, 0, 6), (6, 2, 5), (9, 3, 9), (5, 0, 1), (7, 6, 7), (8, 4, 5)])
def test_setdiffusion_mask_mod_is_the_dense_mask(L, first, end):
    """The lean layout (clean ranks < end, [MASK] ranks [first, end)) with padding gathered in sigma order."""
    assert torch.equal(sd.attention_mask(sd.SetDiffusionConfig(MASK), L), dense_sd(L, 0, L))
    B = 3
    pad = pad_both_sides(B, L, L + first)
    prompt = (torch.arange(L) < 2) & ~pad                                       # (B, L)
    sigma = sd.order(torch.zeros(B, L, dtype=torch.long), 4, prompt, pad, torch.Generator().manual_seed(0))
    pad_s = pad.gather(1, sigma)
    pad_2 = torch.cat([pad_s[:, :end], pad_s[:, first:end]], 1)                # as denoise
    n = 2 * end - first
    assert torch.equal(grid(lean_sd(L, first, end, pad_s.repeat(1, 2)), pad_2, n),
                       with_padding(dense_sd(L, first, end), pad_2))


def test_mdlm_mask_mod_is_the_dense_mask_and_the_attention_switch():
    """flex on by default on CUDA only, never unless a script turns it on."""
    pad = pad_both_sides(4, 10, 0)
    cfg = mdlm.MDLMConfig(MASK)
    assert torch.equal(grid(mdlm.mask_mod(cfg, 10), pad, 10), with_padding(mdlm.attention_mask(cfg, 10), pad))
    assert [train.flex_on(a, "cuda") for a in ("auto", "sdpa", "flex")] == [True, False, True]
    assert [train.flex_on(a, "cpu") for a in ("auto", "sdpa")] == [False, False]
    assert not tiny_model(1).flex                                # off unless a script turns it on


@pytest.mark.parametrize("layout", ["bd3lm", "setdiffusion"])
def test_block_mask_attention_equals_dense_sdpa(layout):
    """flex_attention under the BlockMask of a mask_mod == SDPA under its dense grid, over more than one
    128-block (partial blocks) and with grouped-query heads."""
    L, B = 70, 2
    if layout == "bd3lm":
        n, pad = 2 * L, pad_both_sides(B, L, 1).repeat(1, 2)
        mod = padded(bd3lm.mask_mod(bd3lm.BD3LMConfig(MASK, 4), L), pad)
    else:
        first, end = 10, 65
        n, pad = 2 * end - first, pad_both_sides(B, 2 * L, 2)
        mod = lean_sd(L, first, end, pad)
    block = layout_mask(mod, B, n, n, device="cpu", flex=True)   # not the default: CUDA when built with it
    assert isinstance(block, BlockMask)
    g = torch.Generator().manual_seed(0)
    q, (k, v) = torch.randn(B, 4, n, 8, generator=g), torch.randn(2, B, 2, n, 8, generator=g)
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=layout_mask(mod, B, n, n, flex=False),
                                           enable_gqa=True)
    torch.testing.assert_close(flex_attention(q, k, v, block_mask=block, enable_gqa=True), dense)


CASES = {"bd3lm": (bd3lm, bd3lm.BD3LMConfig(MASK, block_size=3)), "mdlm": (mdlm, mdlm.MDLMConfig(MASK)),
         "setdiffusion": (sd, sd.SetDiffusionConfig(MASK, smax=4))}


@pytest.mark.parametrize("name", list(CASES))
def test_flex_loss_equals_dense_loss(name, flex_calls):
    """No-grad loss and nll with flex on == with flex off (SDPA, dense mask), for the same draw; prompts of
    different lengths and right padding of different lengths, so the masks differ from row to row."""
    mod, cfg = CASES[name]
    model = tiny_model(2)
    x0, prompt_mask, pad_mask = random_rows(23, [4, 7, 2], [23, 15, 19], seed=3)
    out = {}
    for flex in (False, True):
        model.flex = flex
        with torch.no_grad():
            out[flex] = (mod.loss(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(4))[0],
                         *mod.nll(model, x0, cfg, prompt_mask, pad_mask, torch.Generator().manual_seed(5)))
        assert len(flex_calls) == (2 * model.cfg.n_layer if flex else 0)   # every layer of both forwards
    torch.testing.assert_close(out[True], out[False])

