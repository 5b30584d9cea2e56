"""The figures of paper/results.py: what goes in which panel, titles naming task, scorer and runs, labels that
cover nothing."""
import importlib.util
import json
import math

import pytest

from helpers import write_runs
from paper import results

HAS_MPL = importlib.util.find_spec("matplotlib") is not None


def test_pareto_panels_put_a_far_lower_method_apart_and_plot_accuracy_against_tokens_per_step(tmp_path,
                                                                                                 monkeypatch):
    curves = {"ar": [(1.0, 0.996, math.inf)], "bd3lm": [(1.0, 0.958, math.inf), (3.2, 0.958, 0.9)],
              "mdlm": [(1.0, 0.016, math.inf)], "setdiffusion": [(3.6, 0.988, 0.9)]}
    assert results.pareto_panels(curves) == [["ar", "bd3lm", "setdiffusion"], ["mdlm"]]
    del curves["mdlm"]
    assert results.pareto_panels(curves) == [["ar", "bd3lm", "setdiffusion"]]
    pytest.importorskip("matplotlib")
    paths = write_runs(tmp_path, [
        {"task": "arith", "model": model, "ckpt": f"out/{model}", "threshold": tau, "accuracy": acc,
         "tokens_per_step": tps, "n": 500}
        for model, acc in (("ar", 0.99), ("mdlm", 0.01), ("setdiffusion", 0.98))
        for tau, tps in ((math.inf, 1.0), (0.9, 3.0)) if model != "ar" or tau == math.inf])
    fig = drawn_figure(monkeypatch, lambda: results.summarize(paths, str(tmp_path / "t.md"),
                                                               str(tmp_path / "p.png")))
    panels = [(ax.get_xlabel(), ax.get_ylabel(), len(ax.lines)) for ax in fig.axes]
    assert panels == [("tokens/step", "accuracy", 2), ("tokens/step", "accuracy", 1)]   # MDLM on the right
    heading = fig._suptitle.get_text()
    assert "arith" in heading and "is_correct on 500 held-out problems" in heading       # task and scorer
    assert f"seeds: one run each ({tmp_path})" in heading                                 # where its runs are
    labels = sorted(t.get_text() for ax in fig.axes for t in ax.texts)
    assert labels == ["0.9", "0.9", "τ=∞", "τ=∞", "τ=∞"]                         # tau at every point


def test_the_gsm8k_table_and_figure_put_the_official_accuracy_beside_the_papers(tmp_path, monkeypatch):
    """--paper gsm8k: the accuracy compared with the paper's is official_accuracy (the official printed rule),
    each of ours beside the paper's (speed vs AR as both ratios), the lenient and lm-eval scorers last,
    labelled; the figure draws the paper's points of each checkpoint beside ours, and says whose accuracy."""
    from data.gsm8k import PAPER_RESULTS
    runs = [{"task": "gsm8k", "model": m, "ckpt": f"gsm8k:{name}", "threshold": tau, "accuracy": 0.7,
             "official_accuracy": 0.6, "strict_match": 0.5, "flexible_match": 0.4, "tokens_per_step": tps,
             "n": 1319} for m, name in (("ar", "ar"), ("setdiffusion", "setdlm-smax8"))
            for tau, tps in ((math.inf, 1.0), (0.9, 1.9)) if m != "ar" or tau == math.inf]
    runs += [{"task": "throughput", "model": m, "ckpt": f"gsm8k:{name}", "threshold": tau,
              "tokens_per_s": tps, "tokens_per_s_std": 1.0} for m, name, tau, tps in
             (("ar", "ar", math.inf, 50.0), ("setdiffusion", "setdlm-smax8", 0.9, 75.0))]
    paths = write_runs(tmp_path, runs)
    draw = lambda: results.summarize(paths, str(tmp_path / "t.md"), str(tmp_path / "p.png"),  # noqa: E731
                                     PAPER_RESULTS)
    if HAS_MPL:
        fig = drawn_figure(monkeypatch, draw)
        assert [ax.get_ylabel() for ax in fig.axes] == ["accuracy (official rule)"]
        lines = {line.get_label(): line for line in fig.axes[0].lines}      # the paper's: one legend entry
        assert set(lines) == {"gsm8k:ar", "gsm8k:setdlm-smax8", "_paper: gsm8k:ar",
                              "_paper: gsm8k:setdlm-smax8", results.PAPER_LINE}
        assert list(lines["gsm8k:setdlm-smax8"].get_ydata()) == [0.6, 0.6]              # ours: official rule
        assert lines["_paper: gsm8k:setdlm-smax8"].get_ydata()[0] == pytest.approx(0.6641)  # τ = ∞, x = 1
        assert lines["_paper: gsm8k:setdlm-smax8"].get_linestyle() == "--"
        assert "official_match (the official printed accuracy) on 1319" in fig._suptitle.get_text()
    else:
        draw = lambda: results.summarize(paths, str(tmp_path / "t.md"), None, PAPER_RESULTS)   # noqa: E731
        draw()
    table = (tmp_path / "t.md").read_text().splitlines()
    head = table[2]
    assert head.startswith("| checkpoint | tau | accuracy (official rule) | paper: accuracy | tokens/step | "
                           "paper: tokens/step | tokens/s (batch 1) | paper: tokens/s | speed vs AR | paper: "
                           "speed vs AR | lenient: first \\boxed{}, as a number | lm-eval strict-match | "
                           "lm-eval flexible-extract |")
    assert "| gsm8k:setdlm-smax8 | 0.9 | 0.600 | 0.657 | 1.90 | 1.95 | 75.0 ± 1.0 | 87.5 | 1.50x | " \
           "1.58x | 0.700 | 0.500 | 0.400 |" in table
    with pytest.raises(ValueError, match="lacks 'official_accuracy'"):
        results.summarize(write_runs(tmp_path / "old", [{k: v for k, v in runs[0].items()
                                                        if k != "official_accuracy"}]),
                          str(tmp_path / "t.md"), None, PAPER_RESULTS)


def drawn_figure(monkeypatch, draw):
    """The matplotlib figure that draw() saves (not written to disk)."""
    saved = []
    monkeypatch.setattr(results, "save_figure", lambda fig, out: saved.append(fig))
    draw()
    assert len(saved) == 1
    return saved[0]


def test_point_labels_never_overprint_each_other_nor_a_point():
    """Clustered points (the Shakespeare runs: five thresholds within 0.03 tokens/step, two methods 1 apart in
    perplexity): every label lands where it covers no other label, no marker, and stays inside the axes."""
    plt = pytest.importorskip("matplotlib.pyplot")
    taus = ["τ=∞", "0.9", "0.7", "0.5", "0.3", "0.1"]
    curves = [[(1.00, 6.20, taus[0]), (1.002, 5.87, taus[1]), (1.01, 6.07, taus[2]), (1.03, 6.14, taus[3]),
               (1.08, 6.60, taus[4]), (1.48, 11.37, taus[5])],
              [(1.00, 6.72, taus[0]), (1.004, 6.96, taus[1]), (1.01, 6.86, taus[2]), (1.03, 7.08, taus[3]),
               (1.07, 6.95, taus[4]), (1.38, 10.48, taus[5])],
              [(1.00, 7.65, taus[0])], [(1.00, 3.98, taus[0])]]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=results.DPI, layout="constrained")
    for curve in curves:
        ax.plot(*zip(*[(x, y) for x, y, _ in curve]), "o-")
    results.title(fig, "a task", "a scorer", "seeds")
    anns = results.place_labels(ax, curves)
    renderer = fig.canvas.get_renderer()
    boxes = [results.label_box(a, renderer) for a in anns]
    points = [ax.transData.transform((x, y)) for curve in curves for x, y, _ in curve]
    frame = ax.get_window_extent(renderer)
    merged = [t for curve in curves for _, t in results.merge_close(ax, curve, 8)]
    assert sorted(a.get_text() for a in anns) == sorted(merged)
    for i, b in enumerate(boxes):
        assert frame.contains(b.x0, b.y0) and frame.contains(b.x1, b.y1), anns[i].get_text()
        assert not any(b.overlaps(other) for other in boxes[i + 1:]), anns[i].get_text()
        covered = [(px, py) for px, py in points if b.x0 - 3 < px < b.x1 + 3 and b.y0 - 3 < py < b.y1 + 3]
        assert not covered, anns[i].get_text()
    plt.close(fig)


def test_generation_plot_names_corpus_scorer_and_seeds_and_puts_tau_on_the_axis(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    paths = []
    for seed in ("shakes", "shakes-s2"):
        paths += write_runs(tmp_path / seed, [
            *({"task": "unconditional", "model": model, "ckpt": f"out/{seed}/{model}", "threshold": tau,
               "gen_ppl": 5.0, "entropy": 3.0, "tokens_per_step": 1.1, "tokens_per_s": 100.0, "n": 20,
               "ref_ckpt": f"out/{seed}/ar"} for model, taus in (("ar", [math.inf]), ("setdiffusion",
                                                                                    [math.inf, 0.5]))
              for tau in taus),
            {"task": "likelihood", "model": "ar", "ckpt": f"out/{seed}/ar", "nll": 1.5, "perplexity": 4.5,
             "tokens": 10, "data": "shakespeare"}])
    fig = drawn_figure(monkeypatch, lambda: results.generation(paths, str(tmp_path / "g.md"),
                                                                str(tmp_path / "g.png")))
    heading = fig._suptitle.get_text()
    assert heading.startswith("shakespeare: unconditional samples from BOS (20 per point")
    assert "under the AR checkpoint of the same training run (out/shakes/ar, out/shakes-s2/ar)" in heading
    assert f"seeds: mean of 2 runs ({tmp_path / 'shakes'}, {tmp_path / 'shakes-s2'}), bars min-max" in heading
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["∞", "0.5"]
    ylabels = [ax.get_ylabel() for ax in fig.axes]
    assert ylabels == ["generative perplexity, lower is better", "tokens per step"]


def test_smax_sweep_table_merges_seeds_and_orders_by_smax(tmp_path, monkeypatch):
    paths = []
    for seed, acc in (("s1", 0.98), ("s2", 0.96)):
        for name, smax, infill in (("sd32", 32, 0.0), ("sd8", 8, 0.0), ("sd8-infill", 8, 0.5)):
            run = {"model": "setdiffusion", "ckpt": f"out/{seed}/{name}",
                   "method_config": {"smax": smax, "infill": infill}}
            paths += write_runs(tmp_path / seed, [
                {**run, "task": "arith", "threshold": math.inf, "accuracy": acc, "tokens_per_step": 1.0},
                {**run, "task": "arith", "threshold": 0.9, "accuracy": acc - 0.01, "tokens_per_step": 3.5},
                {**run, "task": "likelihood", "nll": 0.03, "perplexity": 1.03, "tokens": 10},
                {**run, "task": "infill", "span": "number", "exact": 0.1 + infill}])
    saved = []
    monkeypatch.setattr(results, "save_figure", lambda fig, out: saved.append(fig))
    text = results.sweep(paths, str(tmp_path / "smax.md"), str(tmp_path / "smax.png") if HAS_MPL else None)
    lines = text.splitlines()
    assert [line.split(" | ")[0] for line in lines[2:5]] == ["| sd8", "| sd8-infill", "| sd32"]
    assert "| 0.970 [0.960, 0.980] | 0.960 [0.950, 0.970] | 3.50 | 0.0300 |  | 0.600 | 2 |" in lines[3]
    if HAS_MPL:
        (fig,) = saved
        assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes] == [
            ("smax", "accuracy"), ("smax", "tokens/step"), ("smax", "infilling exact match")]
        heading = fig._suptitle.get_text()
        assert heading.startswith("arith: Set Diffusion against smax") and "arith's is_correct" in heading
        assert f"seeds: mean of 2 runs ({tmp_path / 's1'}, {tmp_path / 's2'}), bars min-max" in heading
    bad = tmp_path / "ar.json"
    bad.write_text(json.dumps({"task": "arith", "model": "ar", "ckpt": "out/ar", "method_config": {}}))
    with pytest.raises(ValueError,
                       match="ar.json: a run of ar; the smax sweep takes Set Diffusion runs only"):
        results.sweep([str(bad)], str(tmp_path / "x.md"))
