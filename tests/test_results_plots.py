"""The figures of paper/results.py: what goes in which panel, and a plot written when matplotlib is installed.
python -m pytest -q tests/test_results_plots.py"""
import json
import math

import pytest

from paper import results


def test_pareto_panels_put_a_far_lower_method_apart():
    curves = {"ar": [(1.0, 0.996, math.inf)], "bd3lm": [(1.0, 0.958, math.inf), (3.2, 0.958, 0.9)],
              "mdlm": [(1.0, 0.016, math.inf)], "setdiffusion": [(3.6, 0.988, 0.9)]}
    assert results.pareto_panels(curves) == [["ar", "bd3lm", "setdiffusion"], ["mdlm"]]
    del curves["mdlm"]
    assert results.pareto_panels(curves) == [["ar", "bd3lm", "setdiffusion"]]


def test_pareto_plot_is_accuracy_against_tokens_per_step(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    paths = []
    for model, acc in (("ar", 0.99), ("mdlm", 0.01), ("setdiffusion", 0.98)):
        for tau, tps in ((math.inf, 1.0), (0.9, 3.0)):
            if model == "ar" and tau != math.inf:
                continue
            p = tmp_path / f"{model}-{tau}.json"
            p.write_text(json.dumps({"task": "arith", "model": model, "ckpt": f"out/{model}", "threshold": tau,
                                     "accuracy": acc, "tokens_per_step": tps}))
            paths.append(str(p))
    drawn = []
    monkeypatch.setattr(results, "save_plot", lambda fig, ax, x, y, out: drawn.append((x, y, len(ax.lines))))
    results.summarize(paths, str(tmp_path / "t.md"), str(tmp_path / "p.png"))
    assert drawn == [("tokens/step", "accuracy", 2), ("tokens/step", "accuracy", 1)]   # MDLM alone on the right
