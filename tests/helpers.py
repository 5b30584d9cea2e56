"""What the tests in this folder share: the tiny models and method table of test_all.py (which runs alone),
the methods' reference samplers by name, the one-line error check of the scripts, and tiny trained
checkpoints."""
import math

import pytest

from sampling import Settings
from test_all import (MASK, METHODS, V, Jitter, causal, left_padded, sample_order,  # noqa: F401 (re-exported)
                      tiny_model)


def naive_generate(name, model, prompt, N, threshold=math.inf):
    """The method's generate_reference (batch 1, no KV cache, the whole forward recomputed every step), which
    every cached sampler must equal token for token: (tokens, step)."""
    mod, cfg, kw = METHODS[name]
    x, stats = mod.generate_reference(model, prompt, cfg, Settings(N, threshold, **kw))
    return x, stats["step"]


def error_of(main, argv) -> str:
    """The one line a script's main(argv) exits with (asserted: `error: ...`, one line, no unsafe advice)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert "weights_only" not in message, message
    return message


def text_checkpoints(tmp_path_factory, name: str, text: str, flags: list[str]):
    """A folder with a text file `name`, its token cache and one tiny checkpoint per method trained on it
    (flags)."""
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
        train.main(["--model", m, "--out-dir", str(root / m), "--n-layer", "1", "--n-embd", "32",
                    "--n-head", "2",
                    "--batch-size", "4", "--eval-limit", "1", "--max-new-tokens", "8", "--warmup", "1",
                    "--max-iters", "1"])
    return root
