"""sample.py --show-order --plot: one panel per checkpoint, each the sampler's steps for the prompt and its
reply, titled with the method and its settings (its bad flags are rows of test_inputs_cli.py)."""
import pytest
import torch

from common import checkpoint, order_plot
from data import get_tokenizer
import sample
from sampling import Settings

METHODS = ("ar", "setdiffusion")


def test_plot_draws_the_samplers_steps_one_panel_per_checkpoint(one_step, tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    reported, drawn = [], []
    real_respond, real_draw = sample.respond, order_plot.draw
    monkeypatch.setattr(sample, "respond", lambda *a, **k: reported.append(real_respond(*a, **k))
                        or reported[-1])
    monkeypatch.setattr(order_plot, "draw", lambda panels, path: drawn.extend(panels)
                        or real_draw(panels, path))
    png = tmp_path / "order.png"
    sample.main([arg for m in METHODS for arg in ("--ckpt", str(one_step / m))]
                + ["--threshold", "0.8", "--max-new-tokens", "8", "--show-order", "--plot", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in capsys.readouterr().out
    assert [p.title for p in drawn] == ["AR", "Set Diffusion, smax 8, τ 0.8"]
    tok = get_tokenizer("bytes")
    for panel, (_, stats, *_) in zip(drawn, reported):
        steps, tokens = stats["step"][0].tolist(), stats["tokens"][0].tolist()   # one prompt: no left padding
        n, end = len(steps) - 8, len(panel.step)                               # the prompt's tokens; drawn
        # the sampler's steps, column for column
        assert panel.step == steps[:end]
        assert panel.later == [s for s in steps[end:] if s >= 0]            # decoded after EOS: counted
        assert all(s == -1 for s in panel.step[:n]) and all(s >= 0 for s in panel.step[n:])
        assert end == len(steps) or tokens[end - 1] == tok.eos_id or steps[end] == -1    # to EOS or the end
        assert panel.pieces[:n] == [order_plot.glyph(tok, i) for i in tokens[:n]]


def test_titles_name_the_method_and_its_settings_and_a_panel_draws_a_row_to_its_eos():
    """Row 1: its own prompt (after the left padding), its reply to EOS; tokens decoded after EOS (MDLM's
    padding) are not drawn but count as tokens and steps."""
    def title(name, **settings):
        return order_plot.title(name, checkpoint.CONFIGS[name](mask_id=1), Settings(**settings),
                                checkpoint.METHODS[name].KNOBS)
    assert title("ar", threshold=0.8) == "AR"                                  # AR reads no threshold
    assert title("mdlm", threshold=0.8) == "MDLM, τ 0.8, block 32"
    assert title("bd3lm") == "BD3-LM, block size 4, τ ∞"
    assert title("setdiffusion", threshold=0.9) == "Set Diffusion, smax 8, τ 0.9"
    assert title("setdiffusion", setdiffusion_window=2, setdiffusion_commit_order="fht") == (
        "Set Diffusion, smax 8, τ ∞, W 2, commit fht")
    tok = get_tokenizer("bytes")
    E, M = tok.eos_id, tok.mask_id
    tokens = torch.tensor([[97, 98, 99, 10, 49, 50, E, M],             # row 0: prompt "abc\n", reply "12"
                           [E, E, 120, 10, 55, E, E, E]])               # row 1: left-padded prompt "x\n", "7"
    step = torch.tensor([[-1, -1, -1, -1, 0, 1, 1, -1], [-1, -1, -1, -1, 2, 0, 1, 2]])
    p = order_plot.panel("MDLM", tok, {"tokens": tokens, "step": step}, 1, 2, 4)
    assert (p.pieces, p.step, p.later) == (["x", "↵", "7", "∎"], [-1, -1, 2, 0], [1, 2])
    assert order_plot.count(p) == "2 tokens (+2 after EOS) in 3 steps = 1.3 tokens/step"
    p = order_plot.panel("AR", tok, {"tokens": tokens, "step": step}, 0, 4, 4)
    assert (p.pieces, p.step, p.later) == (["a", "b", "c", "↵", "1", "2", "∎"], [-1] * 4 + [0, 1, 1], [])
    assert order_plot.count(p) == "3 tokens in 2 steps = 1.5 tokens/step"
