"""bench/bench_gpu.py and bench/gpu_check.py on the CPU: each row's numbers (ms/step, tokens/s, FLOPs, MFU,
the paper's implied tokens/s) worked out by hand from a fake clock and the shapes, a failing case one line,
the budget, bad input one line; `make gpu-check`'s driver end to end in its --dry-run."""
import json
import time

import pytest
import torch

from bench import bench_gpu, gpu_check
from helpers import error_of
from model import ModelConfig, Transformer

SMOKE = ["--device", "cpu", "--tiny", "--new-tokens", "3", "--prompt", "4", "--repeats", "1", "--dtype",
         "float32"]
TRAIN = ["--device", "cpu", "--tiny", "--parts", "train", "--train-len", "32", "--train-prompt", "8",
         "--train-answer", "12", "--train-batch", "2", "--train-steps", "2"]


SCALE = {"ar": 1.0, "setdiffusion": 1.5, "mdlm": 2.0, "bd3lm": 2.5}      # each method's seconds over AR's
ROWS = ("| AR |", "| Set Diffusion", "| BD3-LM", "| MDLM |")


def fake_clock(monkeypatch, seconds: list):
    """bench_gpu's timer as a clock: the k-th timed call of a case (k = 0: the warm-up) takes seconds[k]
    times the method's SCALE."""
    calls = {}

    def timed(device, fn, *args):
        method = next(a for a in args if isinstance(a, str))
        k = calls[method] = calls.get(method, -1) + 1
        return fn(*args), seconds[k % len(seconds)] * SCALE[method]
    monkeypatch.setattr(bench_gpu, "timed", timed)


def test_decode_rows_by_hand(tmp_path, capsys, monkeypatch):
    """Every (mode, batch, method) once. With a warm-up of 5 s and repeats of 0.06, 0.30 and 0.12 s (times
    the method's SCALE), a row is the median repeat (not the mean, 0.16 s), the warm-up apart: 3 steps of one
    token per row (random weights never reach tau 0.9) in 0.12 s are 40 ms/step, 25 steps/s and 25 x batch
    tokens/s for AR; at batch 1 the paper's 1.95 tokens/step at Set Diffusion's 60 ms/step imply 32.5
    tokens/s, 32.5 / 87.47 of the paper's; Set Diffusion / AR ms/step is 1.5 in every mode and batch. The
    JSON file holds what main returns."""
    fake_clock(monkeypatch, [5.0, 0.06, 0.30, 0.12])
    path = tmp_path / "out" / "bench_gpu.json"
    out = bench_gpu.main(SMOKE + ["--parts", "decode", "--modes", "eager,static", "--batch", "1,2",
                                  "--repeats", "3", "--json", str(path)])
    assert out["failures"] == [] and out["skipped"] == [] and out["train"] == []
    assert sorted((r["mode"], r["batch"], r["method"]) for r in out["decode"]) == sorted(
        (m, b, k) for m in ("eager", "static") for b in (1, 2) for k in bench_gpu.METHODS)
    for r in out["decode"]:
        s, B = SCALE[r["method"]], r["batch"]
        assert r["nfe"] == 3 and r["tokens"] == 3 * B and r["tokens_per_step"] == 1.0
        assert r["seconds"] == pytest.approx(0.12 * s) and r["warmup_s"] == pytest.approx(5 * s)
        assert r["ms_per_step"] == pytest.approx(40 * s) and r["steps_per_s"] == pytest.approx(25 / s)
        assert r["tokens_per_s"] == pytest.approx(25 * B / s)
    at_1 = {r["method"]: r for r in out["decode"] if r["batch"] == 1 and r["mode"] == "eager"}
    assert [m for m, r in at_1.items() if "implied_tokens_per_s" in r] == ["ar", "setdiffusion"]
    assert at_1["ar"]["implied_tokens_per_s"] == pytest.approx(25.0)
    assert at_1["ar"]["ours_over_paper"] == pytest.approx(25.0 / 55.52)
    assert at_1["setdiffusion"]["implied_tokens_per_s"] == pytest.approx(32.5)
    assert at_1["setdiffusion"]["ours_over_paper"] == pytest.approx(32.5 / 87.47)
    assert out["sd_over_ar"] == pytest.approx({f"{m}, batch {b}": 1.5 for m in ("eager", "static")
                                               for b in (1, 2)})
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    assert sum(line.startswith(ROWS) for line in capsys.readouterr().out.splitlines()) == 16


def test_train_rows_by_hand(monkeypatch):
    """Per method, 2 rows of prompt 8 + answer 12: 40 tokens; the tokens T each forward takes (AR: L - 1 = 19
    after trimming the padding, MDLM: L = 20, BD3-LM: [x0 | xt] = 40, Set Diffusion: the clean stream + the
    answer's [MASK] stream = 32); FLOPs a step = 2 T (6 N + 12 layers heads head_dim T) (PaLM, appendix B)
    with the tiny model's N = 106,880 parameters and 12 x 2 x 4 x 16 = 1536. With steps of 0.9, 0.3 and 0.4 s
    (times the method's SCALE) a row is the median, 0.4 s (not the mean): AR's 40 tokens are 100 tokens/s,
    and its MFU at a 2 TFLOP/s peak is 25,477,632 / 0.4 / 2e12."""
    fake_clock(monkeypatch, [9.0, 0.9, 0.3, 0.4])
    out = bench_gpu.main(TRAIN + ["--train-steps", "3", "--peak-tflops", "2"])
    assert out["failures"] == [] and [r["method"] for r in out["train"]] == bench_gpu.METHODS
    layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64 + 2 * 16     # q, k, v, o, MLP, norms
    assert out["train_params"] == 512 * 64 + 2 * layer + 64 == 106_880           # tied embedding, final norm
    T = {"ar": 19, "mdlm": 20, "bd3lm": 40, "setdiffusion": 32}
    flops = {m: 2 * t * (6 * 106_880 + 1536 * t) for m, t in T.items()}
    assert flops["ar"] == 25_477_632
    for r in out["train"]:
        s = SCALE[r["method"]]
        assert r["tokens"] == 40 and r["fed_tokens"] == 2 * T[r["method"]]
        assert r["seconds"] == pytest.approx([0.9 * s, 0.3 * s, 0.4 * s])
        assert r["warmup_s"] == pytest.approx(9 * s)
        assert r["ms_per_step"] == pytest.approx(400 * s) and r["tokens_per_s"] == pytest.approx(100 / s)
        assert r["tflops_per_step"] == pytest.approx(flops[r["method"]] / 1e12, rel=1e-12)
        assert r["mfu"] == pytest.approx(flops[r["method"]] / (0.4 * s) / 2e12, rel=1e-12)


def test_a_failing_case_is_one_line_and_the_run_goes_on_and_the_budget_skips_what_would_pass_it(monkeypatch,
                                                                                                 capsys):
    """A case starts only if the seconds so far plus the slowest case of its mode fit the budget; --budget 0
    skips every case and lists it."""
    decode = bench_gpu.decode

    def broken(model, method, prompt, N, threshold):
        if method == "setdiffusion":
            raise RuntimeError("boom\nsecond line")
        return decode(model, method, prompt, N, threshold)

    monkeypatch.setattr(bench_gpu, "decode", broken)
    out = bench_gpu.main(SMOKE + ["--parts", "decode", "--modes", "eager", "--batch", "1", "--methods",
                                  "ar,setdiffusion"])
    assert [(r["mode"], r["method"]) for r in out["decode"]] == [("eager", "ar")]
    assert [(f["mode"], f["method"], f["error"]) for f in out["failures"]] == [("eager", "setdiffusion",
                                                                                "RuntimeError: boom")]
    assert "decode eager 1 setdiffusion: FAILED (RuntimeError: boom)\n" in capsys.readouterr().out
    assert out["sd_over_ar"] == {}
    out, calls = {"x": [], "skipped": [], "failures": []}, []
    row = lambda: calls.append(1) or {"ms_per_step": 1.0, "tokens_per_s": 1.0}      # noqa: E731
    now = time.perf_counter()
    bench_gpu.attempt(out, "x", {"mode": "m"}, row, {"m": 100.0}, now, 50.0)           # 100 s would not fit
    bench_gpu.attempt(out, "x", {"mode": "m"}, row, {"m": 1.0}, now, 50.0)
    assert len(calls) == 1 and len(out["x"]) == 1 and out["skipped"][0]["mode"] == "m"
    out = bench_gpu.main(SMOKE + ["--budget", "0", "--batch", "1", "--train-len", "32", "--train-prompt", "8",
                                  "--train-answer", "12"])
    assert out["decode"] == out["train"] == [] and len(out["skipped"]) == 2 * 4 + 4


def test_the_default_model_is_qwen3_1_7b_and_peak_flops_go_by_name():
    """Qwen3-1.7B-Base's size: 1.72B parameters, 1.41B without the (tied) embedding."""
    with torch.device("meta"):
        model = Transformer(ModelConfig(**bench_gpu.QWEN3_1_7B))
    n, emb = model.num_params(), model.embed_tokens.weight.numel()
    assert emb == 151936 * 2048 and 1.70e9 < n < 1.75e9 and 1.40e9 < n - emb < 1.42e9
    assert bench_gpu.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert bench_gpu.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert bench_gpu.peak_flops("NVIDIA H200") == 989e12
    assert bench_gpu.peak_flops("Tesla T4") is None


@pytest.mark.parametrize("argv, message", [
    ("--device cuda", "CUDA is not available"),
    ("--tiny --modes eager,cudagraphs", "--modes cudagraphs needs --device cuda"),
    ("--tiny --modes eager,fast", "unknown mode(s) ['fast']"),
    ("--tiny --methods ar,gpt", "unknown method(s) ['gpt']"),
    ("--tiny --batch 1,x", "--batch takes positive whole numbers"),
    ("--tiny --new-tokens 0", "must be >= 1"),
    ("--tiny --train-len 100", "must fit in --train-len 100"),
])
def test_bad_input_is_one_error_line(argv, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert message in error_of(bench_gpu.main, ["--device", "cpu", *argv.split()])


def test_gpu_check_dry_run_end_to_end(tmp_path, monkeypatch):
    """make gpu-check's driver on the CPU (CUDA hidden): pytest runs tests/test_gpu.py (every test skips), the
    benchmark runs at tiny shapes, and gpu.md holds the machine, each test's outcome, both tables with the
    command that made their numbers, and the JSON beside it; pytest's output parsed on a literal (outcomes,
    setup + call seconds, failures); with no --out, out/gpu-dry-run.md (results/ holds a GPU run's)."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out" / "gpu-dry-run.md"
    state = gpu_check.main(["--dry-run"])
    assert not (tmp_path / "results").exists()
    text = out.read_text()
    tests = gpu_check.pytest_results(state["tests"]["output"])
    assert state["tests"]["rc"] == 0 and state["bench"]["rc"] == 0
    assert len(tests["tests"]) == tests["counts"]["skipped"] > 20 and tests["failures"] == []
    assert all(o == "SKIPPED" and s is not None for _, o, s in tests["tests"])
    assert f"## Tests: {tests['counts']['skipped']} skipped" in text and "dry run on the CPU" in text
    assert f"`{gpu_check.command(gpu_check.TESTS)}`" in text
    assert text.count(f"`{state['bench']['command']}`") == 2                    # above both tables
    result = json.loads((tmp_path / "out" / "gpu-bench.json").read_text())
    assert len(result["decode"]) == 8 and len(result["train"]) == 4 and result["failures"] == []
    assert sum(line.startswith(("| AR |", "| Set Diffusion", "| BD3-LM", "| MDLM |"))
               for line in text.splitlines()) == 12
    assert "| none (CPU) (x0) |" in text and f"| {torch.__version__} |" in text
    output = ("tests/test_gpu.py::test_a[x] PASSED  [ 50%]\ntests/test_gpu.py::test_b FAILED  [100%]\n"
              "==== slowest durations ====\n1.50s call     tests/test_gpu.py::test_a[x]\n"
              "0.25s setup    tests/test_gpu.py::test_a[x]\n2.00s call     tests/test_gpu.py::test_b\n"
              "FAILED tests/test_gpu.py::test_b - AssertionError: 1 != 2\n==== 1 failed, 1 passed in 3.80s "
              "====\n")
    r = gpu_check.pytest_results(output)
    assert r["tests"] == [("tests/test_gpu.py::test_a[x]", "PASSED", 1.75),
                          ("tests/test_gpu.py::test_b", "FAILED", 2.0)]
    assert r["counts"] == {"failed": 1, "passed": 1}
    assert r["failures"] == ["FAILED tests/test_gpu.py::test_b - AssertionError: 1 != 2"]
