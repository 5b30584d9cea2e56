"""bench/bench_gpu.py on CPU: a tiny smoke run gives one consistent row per (mode, method), a failing mode is one line
and the run goes on, bad input is one error line. python -m pytest -q tests/test_bench_gpu.py
"""
import json

import pytest
import torch

from bench import bench_gpu
from model import ModelConfig, Transformer

SMOKE = ["--device", "cpu", "--tiny", "--new-tokens", "3", "--prompt", "4", "--repeats", "1", "--dtype", "float32"]


def test_smoke_run_rows_are_consistent(tmp_path, capsys):
    """Every requested (mode, method) once, tokens/s = tokens/step * 1000 / ms/step exactly, one forward per
    new token (tau = inf decodes one token per step), the JSON file holds what main returns."""
    path = tmp_path / "out" / "bench_gpu.json"
    out = bench_gpu.main(SMOKE + ["--modes", "eager,static", "--json", str(path)])
    assert out["failures"] == []
    assert sorted((r["mode"], r["method"]) for r in out["rows"]) == [
        ("eager", "ar"), ("eager", "setdiffusion"), ("static", "ar"), ("static", "setdiffusion")]
    for r in out["rows"]:
        p = bench_gpu.PAPER[r["method"]]
        assert r["nfe"] == 3
        assert r["ms_per_step"] == 1000 * r["seconds"] / r["nfe"] > 0
        assert r["implied_tokens_per_s"] == p["tokens_per_step"] * 1000 / r["ms_per_step"]
        assert r["steps_per_s"] == 1000 / r["ms_per_step"]
        assert r["ours_over_paper"] == r["implied_tokens_per_s"] / p["tokens_per_s"]
    ms = {(r["method"], r["mode"]): r["ms_per_step"] for r in out["rows"]}
    assert out["sd_over_ar"] == {m: ms["setdiffusion", m] / ms["ar", m] for m in ("eager", "static")}
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    table = capsys.readouterr().out
    assert sum(line.startswith(("| ar |", "| setdiffusion |")) for line in table.splitlines()) == 4


def test_a_failing_mode_is_one_line_and_the_run_goes_on(monkeypatch, capsys):
    decode = bench_gpu.decode

    def broken(model, method, prompt, N):
        if method == "setdiffusion":
            raise RuntimeError("boom\nsecond line")
        return decode(model, method, prompt, N)

    monkeypatch.setattr(bench_gpu, "decode", broken)
    out = bench_gpu.main(SMOKE + ["--modes", "eager"])
    assert [(r["mode"], r["method"]) for r in out["rows"]] == [("eager", "ar")]
    failures = [(f["mode"], f["method"], f["error"]) for f in out["failures"]]
    assert failures == [("eager", "setdiffusion", "RuntimeError: boom")]
    assert "eager setdiffusion: FAILED (RuntimeError: boom)\n" in capsys.readouterr().out
    assert out["sd_over_ar"] == {}


def test_qwen3_1_7b_shape():
    """The default model has Qwen3-1.7B-Base's size: 1.72B parameters, 1.41B without the (tied) embedding."""
    with torch.device("meta"):
        model = Transformer(ModelConfig(**bench_gpu.QWEN3_1_7B))
    n, emb = model.num_params(), model.embed_tokens.weight.numel()
    assert emb == 151936 * 2048 and 1.70e9 < n < 1.75e9 and 1.40e9 < n - emb < 1.42e9


@pytest.mark.parametrize("argv, message", [
    (["--device", "cuda"], "CUDA is not available"),
    (["--device", "cpu", "--tiny", "--modes", "eager,cudagraphs"], "--modes cudagraphs needs --device cuda"),
    (["--device", "cpu", "--tiny", "--modes", "eager,fast"], "unknown mode(s) ['fast']"),
    (["--device", "cpu", "--tiny", "--new-tokens", "0"], "must be >= 1"),
])
def test_bad_input_is_one_error_line(argv, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        bench_gpu.main(argv)
    assert str(e.value).startswith("error: ") and message in str(e.value) and "\n" not in str(e.value)


def test_default_modes(monkeypatch):
    """Every mode on CUDA; on CPU every mode but CUDA graphs (no error for the default)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert bench_gpu.check(bench_gpu.parse_args([])) == ["eager", "static", "compiled", "cudagraphs"]
    assert bench_gpu.check(bench_gpu.parse_args(["--device", "cpu"])) == ["eager", "static", "compiled"]
