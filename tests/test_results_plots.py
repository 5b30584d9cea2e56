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


def sweep_run(folder, name, smax, infill, task, **metrics):
    """One eval.py --json file of the smax sweep, as eval.py writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    kind = metrics.get("span", f"{metrics.get('threshold', 'x')}")
    path = folder / f"{name}-{task}-{kind}.json"
    path.write_text(json.dumps({"task": task, "model": "setdiffusion", "ckpt": f"out/{folder.name}/{name}",
                                "method_config": {"smax": smax, "infill": infill}, **metrics}))
    return str(path)


def test_smax_sweep_table_merges_seeds_and_orders_by_smax(tmp_path, monkeypatch):
    paths = []
    for seed, acc in (("s1", 0.98), ("s2", 0.96)):
        for name, smax, infill in (("sd32", 32, 0.0), ("sd8", 8, 0.0), ("sd8-infill", 8, 0.5)):
            d = tmp_path / seed
            paths += [sweep_run(d, name, smax, infill, "arith", threshold=math.inf, accuracy=acc, tokens_per_step=1.0),
                      sweep_run(d, name, smax, infill, "arith", threshold=0.9, accuracy=acc - 0.01, tokens_per_step=3.5),
                      sweep_run(d, name, smax, infill, "likelihood", nll=0.03, perplexity=1.03, tokens=10),
                      sweep_run(d, name, smax, infill, "infill", span="number", exact=0.1 + infill)]
    drawn = []
    monkeypatch.setattr(results, "save_plot", lambda fig, ax, x, y, out: drawn.append((x, y)))
    text = results.sweep(paths, str(tmp_path / "smax.md"), str(tmp_path / "smax.png") if _has_mpl() else None)
    lines = text.splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| sd8", "| sd8-infill", "| sd32"]
    assert "| 0.970 [0.960, 0.980] | 0.960 [0.950, 0.970] | 3.50 | 0.0300 |  | 0.600 | 2 |" in lines[3]
    assert drawn == ([("smax", "accuracy"), ("smax", "tokens/step"), ("smax", "infilling exact match")]
                     if _has_mpl() else [])
    bad = tmp_path / "ar.json"
    bad.write_text(json.dumps({"task": "arith", "model": "ar", "ckpt": "out/ar", "method_config": {}}))
    with pytest.raises(ValueError, match="ar.json: a run of ar; the smax sweep takes Set Diffusion runs only"):
        results.sweep([str(bad)], str(tmp_path / "x.md"))


def _has_mpl() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
