"""What only a CUDA GPU can show; skipped without one. `make gpu-check` runs this file, then the GPU benchmarks.

- FlexAttention (compiled) == dense SDPA: the loss and every gradient of MDLM, BD3-LM and Set Diffusion over
  padded layouts of several 128-blocks, float32 tight and bf16 autocast (train.py's regime) loose.
- train.py --compile --dtype bfloat16: 50 steps lower the loss of every method (subprocesses started with the
  module, so they compile while the other tests run); DistributedDataParallel over NCCL with one rank gives the
  plain model's gradients.
- The causal forward and AR's prefill run on the flash kernel (SDPA restricted to it for that call only).
- Cached decoding == the naive full recompute (tests/helpers.py) on CUDA, every method, a batch of rows with
  different prompt lengths against each row alone: eager, static shapes, and compiled with CUDA graphs
  (eval.py --compile), one graph per method.
- bf16 decoding gives fp32's greedy tokens on a tiny model whose top logits are well apart.
python -m pytest -q tests/test_gpu.py
"""
import copy
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import ar
import bd3lm
import mdlm
import model as transformer
import setdiffusion as sd
from model import static_decoding
from helpers import MASK, METHODS, Jitter, left_padded, naive_generate, tiny_model

CUDA = torch.cuda.is_available()
DEV = "cuda"
pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (make gpu-check runs this file)")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gpu_model(seed, **kw):
    """tests/helpers.tiny_model with 16-dim heads (FlexAttention's triton kernel needs >= 16), on the GPU."""
    return tiny_model(seed, head_dim=16, **kw).to(DEV)


# ----------------------------------------------------------------------------- FlexAttention == dense SDPA

FLEX = {"mdlm": (mdlm, mdlm.MDLMConfig(MASK)), "bd3lm": (bd3lm, bd3lm.BD3LMConfig(MASK, block_size=3)),
        "setdiffusion": (sd, sd.SetDiffusionConfig(MASK, smax=4))}


def padded_batch(L=300):
    """x0, prompt_mask, pad_mask (3, L): prompts of 40, 70, 20 tokens, rows padded from L, 200, 260."""
    x0 = torch.randint(0, MASK, (3, L), generator=torch.Generator().manual_seed(3))
    prompt_mask = torch.arange(L) < torch.tensor([[40], [70], [20]])
    pad_mask = torch.arange(L) >= torch.tensor([[L], [200], [260]])
    return [t.to(DEV) for t in (x0, prompt_mask, pad_mask)]


def loss_and_grads(model, name, batch, flex: bool, bf16: bool):
    """The loss (one fixed noise draw) and every gradient, float32 copies."""
    mod, cfg = FLEX.get(name) or METHODS[name][:2]
    model.flex = flex
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        x0, prompt_mask, pad_mask = batch
        loss = mod.loss(model, x0, cfg, prompt_mask, pad_mask, torch.Generator(DEV).manual_seed(4))[0]
    loss.backward()
    return [loss.detach().float()] + [p.grad.float().clone() for p in model.parameters()]


@pytest.fixture
def flex_calls(monkeypatch):
    """Counts the model's FlexAttention calls."""
    calls, flex_attend = [], transformer.flex_attend

    def counted(*args):
        calls.append(1)
        return flex_attend(*args)
    monkeypatch.setattr(transformer, "flex_attend", counted)
    return calls


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(FLEX))
def test_flex_loss_and_gradients_equal_dense_sdpa(name, bf16, flex_calls):
    """float32: loss and every gradient to 1e-4; bf16 autocast: loss to 1 %, each gradient to 5 % in norm."""
    model, batch = gpu_model(2).train(), padded_batch()
    dense = loss_and_grads(model, name, batch, False, bf16)
    flex = loss_and_grads(model, name, batch, True, bf16)
    assert len(flex_calls) == model.cfg.n_layer                    # every layer took the flex path
    if not bf16:
        torch.testing.assert_close(flex, dense, rtol=1e-4, atol=1e-5)
        return
    assert abs(flex[0] - dense[0]) <= 1e-2 * abs(dense[0])
    for f, d in zip(flex[1:], dense[1:]):
        assert (f - d).norm() <= 0.05 * d.norm() + 1e-6


# ----------------------------------------------------------------------------- flash attention

class FlashFirst(torch.nn.Module):
    """A model whose first forward (a sampler's prefill) may run on SDPA's flash kernel only."""

    def __init__(self, model):
        super().__init__()
        self.model, self.new_cache, self.calls = model, model.new_cache, 0

    def forward(self, *args, **kw):
        self.calls += 1
        if self.calls > 1:
            return self.model(*args, **kw)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return self.model(*args, **kw)


def test_causal_forward_takes_flash_kernel():
    """mask=None (AR's loss, a prefill without padding) is SDPA's is_causal path: flash runs it, bf16, with
    grouped-query heads, and gives the logits of any other kernel."""
    model = gpu_model(1).to(torch.bfloat16)
    idx = torch.randint(0, MASK, (2, 37), device=DEV)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        flash = model(idx)
    with sdpa_kernel(SDPBackend.MATH):
        ref = model(idx)
    torch.testing.assert_close(flash, ref, rtol=2e-2, atol=2e-2)


def test_ar_prefill_takes_flash_kernel():
    """ar.generate's prefill of prompts without padding runs on flash (its decode steps on any kernel), and
    decodes what an unrestricted run decodes."""
    model = gpu_model(1).to(torch.bfloat16)
    prompt = torch.randint(0, MASK, (2, 37), device=DEV)
    want = ar.generate(model, prompt, ar.ARConfig(MASK), max_new_tokens=6)[0]
    got = ar.generate(FlashFirst(model), prompt, ar.ARConfig(MASK), max_new_tokens=6)[0]
    assert torch.equal(got, want)


# ----------------------------------------------------------------------------- cached == naive on CUDA

class CudaJitter(Jitter):
    """tests/helpers.Jitter on the GPU (its offsets and default positions on the model's device)."""

    def __init__(self, model, seed=0):
        super().__init__(model, seed)
        self.offset = self.offset.to(DEV)

    def forward(self, idx, pos=None, mask=None, cache=None, last=None):
        if pos is None:
            start = cache.length if cache is not None else 0
            pos = torch.arange(start, start + idx.shape[1], device=idx.device).expand(idx.shape)
        return super().forward(idx, pos, mask, cache, last)


class OnGpu(torch.nn.Module):
    """The naive samplers build their tensors on the CPU: every forward runs on the GPU, logits come back."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, idx, pos=None, mask=None, cache=None, last=None):
        to = lambda t: t.to(DEV) if isinstance(t, torch.Tensor) else t       # noqa: E731
        return self.model(to(idx), to(pos), to(mask), cache, last).cpu()


def naive_rows(name, model, prompts, N, threshold):
    """(tokens, step) of each prompt alone, by the naive full recompute of tests/helpers, forwards on the GPU."""
    return [naive_generate(name, OnGpu(model), p[None], N, threshold) for p in prompts]


def generate_batch(name, model, batch, prompt_mask, N, threshold):
    mod, cfg, kw = METHODS[name]
    extra = {} if name == "ar" else {"threshold": threshold}
    return mod.generate(model, batch.to(DEV), cfg, prompt_mask.to(DEV), max_new_tokens=N, **extra, **kw)


def assert_rows_equal(out, want, prompts, P):
    tokens, stats = out
    for b, (p, (x, step)) in enumerate(zip(prompts, want)):
        assert torch.equal(tokens[b, P - len(p):].cpu(), x[0]), (b, tokens[b].tolist(), x[0].tolist())
        assert torch.equal(stats["step"][b, P - len(p):].cpu(), step[0])


@pytest.mark.parametrize("name", list(METHODS))
def test_cached_decoding_equals_naive_recompute(name):
    """A batch of rows with prompts of 2, 7 and 5 tokens, tau = 0.5 (several tokens a step): each row equals
    the naive recompute of that row alone, token for token and step for step; eager, then static shapes."""
    inner = gpu_model(5)
    model, N = CudaJitter(inner, 1), 9
    prompts, batch, prompt_mask = left_padded([2, 7, 5])
    want = naive_rows(name, model, prompts, N, 0.5)
    assert_rows_equal(generate_batch(name, model, batch, prompt_mask, N, 0.5), want, prompts, batch.shape[1])
    static_decoding(inner)
    try:
        assert_rows_equal(generate_batch(name, model, batch, prompt_mask, N, 0.5), want, prompts, batch.shape[1])
    finally:
        inner.step = None


def test_compiled_decoding_equals_naive_recompute():
    """eval.py --compile on CUDA (static shapes, torch.compile with CUDA graphs): every method's batch equals
    the naive recompute of each row, twice (the second call replays the graphs), one graph per method."""
    from torch._dynamo.utils import counters
    inner = gpu_model(5)
    model, N = CudaJitter(inner, 1), 9
    prompts, batch, prompt_mask = left_padded([2, 7, 5])
    want = {name: naive_rows(name, model, prompts, N, 0.5) for name in METHODS}
    torch._dynamo.reset()
    counters.clear()
    static_decoding(inner, compile=True, mode="reduce-overhead")
    try:
        for name in [*METHODS, *METHODS]:
            assert_rows_equal(generate_batch(name, model, batch, prompt_mask, N, 0.5), want[name], prompts,
                              batch.shape[1])
        assert counters["stats"]["unique_graphs"] == len(METHODS)
    finally:
        inner.step = None
        torch._dynamo.reset()


# ----------------------------------------------------------------------------- bf16 decoding

class TopGap(torch.nn.Module):
    """Records the smallest gap between the two largest logits of every row the model returns."""

    def __init__(self, model):
        super().__init__()
        self.model, self.new_cache, self.gap = model, model.new_cache, math.inf

    def forward(self, *args, **kw):
        out = self.model(*args, **kw)
        top = out.float()[..., :MASK].topk(2, dim=-1).values                # [MASK] is never predicted
        self.gap = min(self.gap, float((top[..., 0] - top[..., 1]).min()))
        return out


@pytest.mark.parametrize("name", list(METHODS))
def test_bf16_decoding_equals_fp32_greedy_tokens(name):
    """Greedy (tau = inf), batched, left-padded: the bf16 model decodes fp32's tokens at fp32's steps. The
    model is well separated: every row it returns has its top two logits at least 0.5 apart in fp32."""
    inner = gpu_model(6)
    model, N = CudaJitter(inner, 2), 9
    _, batch, prompt_mask = left_padded([3, 6, 4])
    gap = TopGap(model)
    want = generate_batch(name, gap, batch, prompt_mask, N, math.inf)
    assert gap.gap >= 0.5, gap.gap
    inner.to(torch.bfloat16)
    got = generate_batch(name, model, batch, prompt_mask, N, math.inf)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1]["step"], want[1]["step"])


# ----------------------------------------------------------------------------- DDP over NCCL

def test_ddp_one_rank_over_nccl_gives_the_plain_gradients(tmp_path):
    """DistributedDataParallel (NCCL, world size 1), as train.py wraps the model: for every method one
    backward gives the gradients of the unwrapped model (same weights, same noise draw)."""
    import torch.distributed as dist
    dist.init_process_group("nccl", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1,
                            device_id=torch.device(DEV, 0))
    try:
        batch = padded_batch(64)
        for name in METHODS:
            model = gpu_model(3).train()
            ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model))
            plain = loss_and_grads(model, name, batch, False, False)
            wrapped = loss_and_grads(ddp, name, batch, False, False)
            torch.testing.assert_close(wrapped, plain, rtol=1e-5, atol=1e-6)
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- compiled bf16 training

TRAIN = ["--device", "cuda", "--compile", "--dtype", "bfloat16", "--max-iters", "50", "--warmup", "10",
         "--eval-limit", "1", "--max-new-tokens", "4", "--save-every", "1000", "--ema", "0"]
RUN = "import json, sys, train; print('LOSSES ' + json.dumps(train.main(sys.argv[1:])), flush=True)"


@pytest.fixture(scope="module", autouse=True)
def compiled_training(request, tmp_path_factory):
    """python train.py --model M --compile --dtype bfloat16 ... (its main, to read back the losses), one process
    per method, started when this module starts, so that they compile while the other tests run."""
    wanted = CUDA and any(i.name.startswith("test_compiled_training") for i in request.session.items)
    tmp = tmp_path_factory.mktemp("train")
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "4"}
    runs = {}
    for name in METHODS if wanted else []:
        log = tmp / f"{name}.log"
        with open(log, "w") as f:
            runs[name] = (subprocess.Popen([sys.executable, "-c", RUN, "--model", name, "--out-dir", str(tmp / name),
                                            *TRAIN], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT), log)
    yield runs
    for proc, _ in runs.values():
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("name", list(METHODS))
def test_compiled_training_lowers_the_loss(name, compiled_training):
    """50 finite losses; the mean of the last 5 below 0.8 x the mean of the first 5 (on CPU without
    --compile: AR 5.07 -> 1.46, MDLM 4.83 -> 2.24)."""
    proc, log = compiled_training[name]
    rc = proc.wait(timeout=420)
    text = log.read_text()
    assert rc == 0, text[-3000:]
    losses = json.loads(text.split("LOSSES ")[-1].splitlines()[0])
    assert len(losses) == 50 and all(map(math.isfinite, losses))
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5]), losses
