"""The tokens/s protocol (throughput.interleaved_throughput, eval.py --task throughput --rounds, paper.speed):
runs compared in one measurement see the same load, the median round and its range, paper.speed writes
eval.py's files."""
import json

import pytest
import torch

import eval as evaluate
from common import throughput
from helpers import error_of
from paper import results, speed


def fake_clock(monkeypatch, cost: dict, load):
    """throughput.respond replaced: run r (its "method") takes cost[r] * load(k, j) seconds for prompt j in
    its round k and makes 10 tokens in 2 steps. Returns the call log."""
    calls, seen = [], {}

    def fake(model, method, cfg, tok, task, prompts, device, settings, seed=0, stop_opts=None):
        j = prompts[0]
        k = seen[(method, j)] = seen.get((method, j), -1) + 1
        calls.append((method, j))
        stats = {"n_gen": torch.tensor([10]), "tokens_per_step": 5.0, "nfe": 2}
        return ["x"], stats, cost[method] * load(k, j)
    monkeypatch.setattr(throughput, "respond", fake)
    return calls


def runs_of(names):
    return {n: {"model": None, "method": n, "cfg": None, "tok": None, "task": None, "settings": None}
            for n in names}


def test_interleaved_runs_see_the_same_load_so_their_ratio_is_exact_and_the_median_round(monkeypatch):
    """A load that jumps between prompts and rounds: each prompt is decoded by every run back to back (the
    order rotated per prompt, after an untimed warm-up), so the tokens/s ratio is the cost ratio exactly. A
    round's figure is the mean over prompts of tokens / seconds; the median round is reported with the
    rounds' min and max and that round's per-sample standard deviation. Compiled, every measured prompt is
    warmed too (a first decode of a shape compiles it)."""
    calls = fake_clock(monkeypatch, {"a": 1.0, "b": 0.25}, lambda k, j: 1 + 0.5 * ((3 * k + j) % 4))
    m = throughput.interleaved_throughput(runs_of(["a", "b"]), list(range(8)), "cpu", warmup=2, rounds=3)
    assert m["b"]["tokens_per_s"] == pytest.approx(4 * m["a"]["tokens_per_s"], rel=1e-12)
    assert m["b"]["tokens_per_s_min"] == pytest.approx(4 * m["a"]["tokens_per_s_min"], rel=1e-12)
    assert calls[:8] == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)]
    assert len(calls) == 2 * (2 + 3 * 6) and m["a"]["n"] == 6 and m["a"]["rounds"] == 3
    assert m["a"]["tokens_per_step"] == 5.0 and m["a"]["nfe"] == 2 * 6               # one round's
    with pytest.raises(ValueError, match="--warmup 3 leaves no example to measure"):
        throughput.interleaved_throughput(runs_of(["a"]), [1, 2, 3], "cpu", warmup=3)
    per_round = {0: 2.0, 1: 1.0, 2: 4.0}                                # seconds per sample in each round
    fake_clock(monkeypatch, {"a": 1.0}, lambda k, j: per_round[k] * (1 if j % 2 else 0.5))
    m = throughput.interleaved_throughput(runs_of(["a"]), list(range(5)), "cpu", warmup=1, rounds=3)["a"]
    means = {k: (10 / (s * 0.5) + 10 / s) / 2 for k, s in per_round.items()}       # prompts 1..4: two of each
    assert m["tokens_per_s"] == pytest.approx(means[0])
    assert (m["tokens_per_s_min"], m["tokens_per_s_max"]) == pytest.approx((means[2], means[1]))
    assert m["tokens_per_s_std"] == pytest.approx((10 / 1.0 - 10 / 2.0) / 2)
    calls = fake_clock(monkeypatch, {"a": 1.0}, lambda k, j: 1 + 99 * (k == 0))    # a first decode compiles
    m = throughput.interleaved_throughput(runs_of(["a"]), list(range(5)), "cpu", warmup=1, rounds=1,
                                          compiled=True)["a"]       # eval.py --compile: every prompt warmed
    assert calls == [("a", j) for j in range(5)] + [("a", j) for j in range(1, 5)] and m["tokens_per_s"] == 10


def test_paper_speed_writes_eval_py_files_that_the_pareto_table_reads(one_step, tmp_path, capsys):
    """One JSON per run with eval.py --task throughput's keys (and more), the tokens/step each really decoded
    at; paper.results --pareto shows median [min, max]."""
    out, sd = tmp_path / "runs", one_step / "setdiffusion"
    out.mkdir()
    m = speed.main([str(one_step / "ar"), f"{sd}@0.5", f"{sd}@inf", "--limit", "4", "--warmup", "1",
                    "--rounds", "3", "--max-new-tokens", "6", "--out", str(out)])
    assert sorted(p.name for p in out.iterdir()) == ["ar-inf-tput.json", "setdiffusion-0.5-tput.json",
                                                    "setdiffusion-inf-tput.json"]
    evaluate.main(["--ckpt", str(one_step / "ar"), "--task", "throughput", "--limit", "3", "--warmup", "1",
                   "--rounds", "1", "--max-new-tokens", "6", "--json", str(tmp_path / "one.json")])
    one = json.loads((tmp_path / "one.json").read_text())
    for name in ("ar-inf", "setdiffusion-0.5"):
        mine = json.loads((out / f"{name}-tput.json").read_text())
        assert set(one) - {"tokens_per_s_batched", "batch_size"} <= set(mine)
        assert mine["tokens_per_s_min"] <= mine["tokens_per_s"] <= mine["tokens_per_s_max"]
    assert m["setdiffusion-inf"]["tokens_per_step"] == 1.0 and m["ar-inf"]["tokens_per_step"] == 1.0
    results.main([str(tmp_path / "t.md"), *map(str, out.iterdir()), "--pareto"])
    line = next(x for x in (tmp_path / "t.md").read_text().splitlines()
                if x.startswith("| setdiffusion | 0.5"))
    r = m["setdiffusion-0.5"]
    assert f"{r['tokens_per_s']:.1f} [{r['tokens_per_s_min']:.1f}, {r['tokens_per_s_max']:.1f}]" in line


@pytest.mark.parametrize("argv, message", [
    ("{ar}@0", "the part after @ must be a threshold in (0, 1] or inf"),
    ("{ar}@fast", "the part after @ must be a threshold"),
    ("{ar} {ar}@inf", "is given twice"),
    ("{ar} --rounds 0", "--rounds must be at least 1, got 0"),
    ("{ar} --out {ar}/nowhere", "is not a folder: create it first"),
])
def test_paper_speed_bad_input_is_one_line(one_step, argv, message):
    assert message in error_of(speed.main, argv.format(ar=one_step / "ar").split())
