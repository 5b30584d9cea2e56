"""bench/bench_gpu.py and bench/gpu_check.py on CPU: a tiny smoke run gives one consistent row per case (tokens/s,
MFU and fed tokens as identities of the measured seconds and shapes), a failing case is one line and the run
goes on, the budget skips what would pass it, bad input is one error line; `make gpu-check`'s driver end to end
in its --dry-run. python -m pytest -q tests/test_bench_gpu.py
"""
import json
import statistics
import time

import pytest
import torch

from bench import bench_gpu, gpu_check
from model import ModelConfig, Transformer

SMOKE = ["--device", "cpu", "--tiny", "--new-tokens", "3", "--prompt", "4", "--repeats", "1", "--dtype", "float32"]
TRAIN = ["--device", "cpu", "--tiny", "--parts", "train", "--train-len", "32", "--train-prompt", "8",
         "--train-answer", "12", "--train-batch", "2", "--train-steps", "2"]


def test_decode_rows_are_consistent(tmp_path, capsys):
    """Every (mode, batch, method) once; tokens/s = tokens / seconds and ms/step = 1000 seconds / nfe exactly; one
    forward and one token per row per step (random weights never reach tau 0.9); the paper's columns at batch 1
    for AR and Set Diffusion only; the JSON file holds what main returns."""
    path = tmp_path / "out" / "bench_gpu.json"
    out = bench_gpu.main(SMOKE + ["--parts", "decode", "--modes", "eager,static", "--batch", "1,2", "--json", str(path)])
    assert out["failures"] == [] and out["skipped"] == [] and out["train"] == []
    assert sorted((r["mode"], r["batch"], r["method"]) for r in out["decode"]) == sorted(
        (m, b, k) for m in ("eager", "static") for b in (1, 2) for k in bench_gpu.METHODS)
    for r in out["decode"]:
        assert r["nfe"] == 3 and r["tokens"] == 3 * r["batch"] and r["tokens_per_step"] == 1.0
        assert r["ms_per_step"] == 1000 * r["seconds"] / r["nfe"] > 0 and r["steps_per_s"] == 1000 / r["ms_per_step"]
        assert r["tokens_per_s"] == r["tokens"] / r["seconds"]
        assert ("implied_tokens_per_s" in r) == (r["batch"] == 1 and r["method"] in bench_gpu.PAPER)
        if "implied_tokens_per_s" in r:
            p = bench_gpu.PAPER[r["method"]]
            assert r["implied_tokens_per_s"] == p["tokens_per_step"] * 1000 / r["ms_per_step"]
            assert r["ours_over_paper"] == r["implied_tokens_per_s"] / p["tokens_per_s"]
    ms = {(r["method"], r["mode"], r["batch"]): r["ms_per_step"] for r in out["decode"]}
    assert out["sd_over_ar"] == {f"{m}, batch {b}": ms["setdiffusion", m, b] / ms["ar", m, b]
                                 for m in ("eager", "static") for b in (1, 2)}
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    table = capsys.readouterr().out
    assert sum(line.startswith(("| AR |", "| Set Diffusion", "| BD3-LM", "| MDLM |")) for line in table.splitlines()) == 16


def test_train_rows_count_tokens_and_flops():
    """Per method: tokens = rows x (prompt + answer); the tokens each forward takes (AR: L - 1 after trimming the
    padding, MDLM: L, BD3-LM: [x0 | xt] = 2L, Set Diffusion: the clean stream + the answer's [MASK] stream);
    FLOPs = rows x T x (6N + 12 layers heads head_dim T); MFU = FLOP/s / the given peak."""
    out = bench_gpu.main(TRAIN + ["--peak-tflops", "2"])
    assert out["failures"] == [] and [r["method"] for r in out["train"]] == bench_gpu.METHODS
    cfg, n = ModelConfig(**bench_gpu.TINY), out["train_params"]
    B, L, A = 2, 8 + 12, 12
    fed = {"ar": L - 1, "mdlm": L, "bd3lm": 2 * L, "setdiffusion": L + A}
    for r in out["train"]:
        T = fed[r["method"]]
        assert r["tokens"] == B * L and r["fed_tokens"] == B * T
        assert r["ms_per_step"] == 1000 * statistics.median(r["seconds"]) and len(r["seconds"]) == 2
        sec = r["ms_per_step"] / 1000
        flops = B * T * (6 * n + 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * T)
        assert r["tflops_per_step"] == pytest.approx(flops / 1e12, rel=1e-12)
        assert r["tflops_per_s"] == pytest.approx(flops / sec / 1e12, rel=1e-12)
        assert r["mfu"] == pytest.approx(flops / sec / 2e12, rel=1e-12)
        assert r["tokens_per_s"] == pytest.approx(B * L / sec, rel=1e-12)


def test_a_failing_case_is_one_line_and_the_run_goes_on(monkeypatch, capsys):
    decode = bench_gpu.decode

    def broken(model, method, prompt, N, threshold):
        if method == "setdiffusion":
            raise RuntimeError("boom\nsecond line")
        return decode(model, method, prompt, N, threshold)

    monkeypatch.setattr(bench_gpu, "decode", broken)
    out = bench_gpu.main(SMOKE + ["--parts", "decode", "--modes", "eager", "--batch", "1", "--methods", "ar,setdiffusion"])
    assert [(r["mode"], r["method"]) for r in out["decode"]] == [("eager", "ar")]
    assert [(f["mode"], f["method"], f["error"]) for f in out["failures"]] == [("eager", "setdiffusion",
                                                                                "RuntimeError: boom")]
    assert "decode eager 1 setdiffusion: FAILED (RuntimeError: boom)\n" in capsys.readouterr().out
    assert out["sd_over_ar"] == {}


def test_budget_skips_what_would_pass_it():
    """A case starts only if the seconds so far plus the slowest case of its mode fit the budget; --budget 0
    skips every case and lists it."""
    out, calls = {"x": [], "skipped": [], "failures": []}, []
    row = lambda: calls.append(1) or {"ms_per_step": 1.0, "tokens_per_s": 1.0}      # noqa: E731
    now = time.perf_counter()
    bench_gpu.attempt(out, "x", {"mode": "m"}, row, {"m": 100.0}, now, 50.0)           # 100 s would not fit
    bench_gpu.attempt(out, "x", {"mode": "m"}, row, {"m": 1.0}, now, 50.0)
    assert len(calls) == 1 and len(out["x"]) == 1 and out["skipped"][0]["mode"] == "m"
    out = bench_gpu.main(SMOKE + ["--budget", "0", "--batch", "1", "--train-len", "32", "--train-prompt", "8",
                                  "--train-answer", "12"])
    assert out["decode"] == out["train"] == [] and len(out["skipped"]) == 2 * 4 + 4


def test_qwen3_1_7b_shape():
    """The default model has Qwen3-1.7B-Base's size: 1.72B parameters, 1.41B without the (tied) embedding."""
    with torch.device("meta"):
        model = Transformer(ModelConfig(**bench_gpu.QWEN3_1_7B))
    n, emb = model.num_params(), model.embed_tokens.weight.numel()
    assert emb == 151936 * 2048 and 1.70e9 < n < 1.75e9 and 1.40e9 < n - emb < 1.42e9


def test_peak_flops_by_name():
    assert bench_gpu.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert bench_gpu.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert bench_gpu.peak_flops("NVIDIA H200") == 989e12
    assert bench_gpu.peak_flops("Tesla T4") is None


@pytest.mark.parametrize("argv, message", [
    (["--device", "cuda"], "CUDA is not available"),
    (["--device", "cpu", "--tiny", "--modes", "eager,cudagraphs"], "--modes cudagraphs needs --device cuda"),
    (["--device", "cpu", "--tiny", "--modes", "eager,fast"], "unknown mode(s) ['fast']"),
    (["--device", "cpu", "--tiny", "--methods", "ar,gpt"], "unknown method(s) ['gpt']"),
    (["--device", "cpu", "--tiny", "--batch", "1,x"], "--batch takes positive whole numbers"),
    (["--device", "cpu", "--tiny", "--new-tokens", "0"], "must be >= 1"),
    (["--device", "cpu", "--tiny", "--train-len", "100"], "must fit in --train-len 100"),
])
def test_bad_input_is_one_error_line(argv, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        bench_gpu.main(argv)
    assert str(e.value).startswith("error: ") and message in str(e.value) and "\n" not in str(e.value)


def test_gpu_check_dry_run_end_to_end(tmp_path):
    """make gpu-check's driver on the CPU (CUDA hidden): pytest runs tests/test_gpu.py (every test skips), the
    benchmark runs at tiny shapes, and gpu.md holds the machine, each test's outcome, both tables with the
    command that made their numbers, and the JSON beside it."""
    out = tmp_path / "results" / "gpu.md"
    state = gpu_check.main(["--dry-run", "--out", str(out)])
    text = out.read_text()
    tests = gpu_check.pytest_results(state["tests"]["output"])
    assert state["tests"]["rc"] == 0 and state["bench"]["rc"] == 0
    assert len(tests["tests"]) == tests["counts"]["skipped"] > 20 and tests["failures"] == []
    assert all(o == "SKIPPED" and s is not None for _, o, s in tests["tests"])
    assert f"## Tests: {tests['counts']['skipped']} skipped" in text and "dry run on the CPU" in text
    assert f"`{gpu_check.command(gpu_check.TESTS)}`" in text
    assert text.count(f"`{state['bench']['command']}`") == 2                    # above both tables
    result = json.loads((tmp_path / "results" / "gpu-bench.json").read_text())
    assert len(result["decode"]) == 8 and len(result["train"]) == 4 and result["failures"] == []
    assert sum(line.startswith(("| AR |", "| Set Diffusion", "| BD3-LM", "| MDLM |")) for line in text.splitlines()) == 12
    assert "| none (CPU) (x0) |" in text and f"| {torch.__version__} |" in text


def test_pytest_results_parse_outcomes_seconds_and_failures():
    output = ("tests/test_gpu.py::test_a[x] PASSED  [ 50%]\ntests/test_gpu.py::test_b FAILED  [100%]\n"
              "==== slowest durations ====\n1.50s call     tests/test_gpu.py::test_a[x]\n"
              "0.25s setup    tests/test_gpu.py::test_a[x]\n2.00s call     tests/test_gpu.py::test_b\n"
              "FAILED tests/test_gpu.py::test_b - AssertionError: 1 != 2\n==== 1 failed, 1 passed in 3.80s ====\n")
    r = gpu_check.pytest_results(output)
    assert r["tests"] == [("tests/test_gpu.py::test_a[x]", "PASSED", 1.75), ("tests/test_gpu.py::test_b", "FAILED", 2.0)]
    assert r["counts"] == {"failed": 1, "passed": 1}
    assert r["failures"] == ["FAILED tests/test_gpu.py::test_b - AssertionError: 1 != 2"]
